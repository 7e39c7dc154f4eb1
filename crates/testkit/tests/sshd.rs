//! The test kit's [`Sshd`] with plain OpenSSH clients, across an emulated path (root): a
//! command and a file go through it with the test's key; a key it does not accept and a host
//! key the client does not know are refused; nothing it started is left after drop.

use std::io::Write;
use std::process::{Output, Stdio};
use std::time::Duration;
use tcptune_emu::{unique_name, PathConfig, Side, Topology, TopologyConfig};
use tcptune_testkit::{sshd, Sshd};

fn topology() -> Topology {
    let cfg = TopologyConfig::new(
        unique_name("sshkit"),
        PathConfig {
            delay: Duration::from_millis(2),
            ..PathConfig::default()
        },
    );
    Topology::up(&cfg).unwrap_or_else(|e| panic!("up: {e}"))
}

fn ssh(topo: &Topology, args: &[String], remote: &str) -> Output {
    topo.command(Side::A, "ssh")
        .args(args)
        .arg(remote)
        .stdin(Stdio::null())
        .output()
        .expect("running ssh")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn sshd_in_side_b_runs_a_command_with_the_tests_key_and_refuses_the_others() {
    if !tcptune_testkit::require("sshd_in_side_b", sshd::NEEDS) {
        return;
    }
    let topo = topology();
    let server = Sshd::start(&topo, Side::B);
    let dest = server.destination();

    let o = ssh(
        &topo,
        &[server.ssh_args(), vec![dest.clone()]].concat(),
        "echo hello from $SSH_CONNECTION",
    );
    assert!(
        o.status.success(),
        "{}\n{}",
        text(&o),
        std::fs::read_to_string(server.log()).unwrap_or_default()
    );
    // The client came from side a's address to side b's.
    let a = topo.addr(Side::A).to_string();
    assert!(
        text(&o).starts_with(&format!("hello from {a} ")),
        "{}",
        text(&o)
    );

    // Bytes in through ssh's stdin land in side b's file system (the same one here).
    let dir = std::env::temp_dir().join(format!("tcptune-sshkit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = dir.join("through-ssh");
    let mut child = topo
        .command(Side::A, "ssh")
        .args(server.ssh_args())
        .arg(&dest)
        .arg(format!("cat > {}", file.display()))
        .stdin(Stdio::piped())
        .spawn()
        .expect("ssh");
    let payload: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&payload)
        .expect("write");
    assert!(child.wait().expect("wait").success());
    assert_eq!(std::fs::read(&file).expect("read"), payload);
    let _ = std::fs::remove_dir_all(&dir);

    let stranger = ssh(
        &topo,
        &[
            server.ssh_args_with(&server.stranger_key(), &server.known_hosts()),
            vec![dest.clone()],
        ]
        .concat(),
        "true",
    );
    assert!(!stranger.status.success());
    assert!(
        text(&stranger).contains("Permission denied"),
        "{}",
        text(&stranger)
    );

    let unknown = ssh(
        &topo,
        &[
            server.ssh_args_with(&server.key(), &server.empty_known_hosts()),
            vec![dest.clone()],
        ]
        .concat(),
        "true",
    );
    assert!(!unknown.status.success());
    assert!(
        text(&unknown).contains("Host key verification failed"),
        "{}",
        text(&unknown)
    );

    // A session left running (sleep under sshd) is stopped by the drop, with sshd.
    let mut long = topo
        .command(Side::A, "ssh")
        .args(server.ssh_args())
        .arg(&dest)
        .arg("sleep 60")
        .stdin(Stdio::null())
        .spawn()
        .expect("ssh");
    assert!(
        tcptune_testkit::wait_for(Duration::from_secs(10), || server
            .processes()
            .iter()
            .any(|(_, c)| c.starts_with("sleep 60"))),
        "{:?}",
        server.processes()
    );
    let pids: Vec<i32> = server.processes().iter().map(|(p, _)| *p).collect();
    let sshd_pid = server.pid() as i32;
    drop(server);
    let alive = |p: &i32| {
        std::path::Path::new(&format!("/proc/{p}")).exists() && {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| !s.contains(") Z"))
        }
    };
    assert!(!alive(&sshd_pid), "sshd survived its drop");
    let left: Vec<&i32> = pids.iter().filter(|p| alive(p)).collect();
    assert!(left.is_empty(), "left after drop: {left:?}");
    // The client saw its session end.
    let st = long.wait().expect("wait");
    assert!(!st.success());
}
