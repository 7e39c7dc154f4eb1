//! `tcptune lab --remote HOST`: the lab's matrix across a real path, the far end started
//! over ssh. Once on loopback with a fake ssh (a script that runs the far end's command
//! itself), and once through OpenSSH's sshd in side B of an emulated path standing in for
//! the real one (root; runs for real in CI). One cell of 8 MiB each.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;
use tcptune_emu::{unique_name, PathConfig, Side, Topology, TopologyConfig};
use tcptune_testkit::{sshd, Sshd};

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

/// Two runnable cells (untuned, kernel then manual sized from kernel's measured rate, one
/// stream, 8 x 1 MiB) and cells that cannot be applied across a real path (kernel_only's and
/// user_kernel's raised limits).
const PLAN: &str = r#"
name = "remote-one-cell"
streams = [1]
repetitions = 1
messages = 8
message_size = "1m"
max_time = "60s"
[hosts]
untuned = ["kernel", "manual"]
kernel_only = ["auto"]
user_kernel = ["ideal"]
"#;

struct Tmp(PathBuf);
impl Tmp {
    fn new(tag: &str) -> Tmp {
        let d =
            std::env::temp_dir().join(format!("tcptune-labremote-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("home")).expect("mkdir");
        std::fs::write(d.join("plan.toml"), PLAN).expect("plan");
        Tmp(d)
    }
    fn plan(&self) -> String {
        self.0.join("plan.toml").display().to_string()
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The report's checks: the runnable cells ran and measured the path, `manual` with the
/// rate `kernel` measured; the others are marked, each with its reason; both hosts' limits
/// are in it.
fn check(o: &Output) -> serde_json::Value {
    assert!(
        o.status.success(),
        "lab --remote failed ({}): {}\n{}",
        o.status,
        text(&o.stderr),
        text(&o.stdout)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&o.stdout)));
    assert_eq!(v["schema_version"], 2);
    let cells = v["cells"].as_array().expect("cells");
    let ran: Vec<&serde_json::Value> = cells
        .iter()
        .filter(|c| c["not_applied"].is_null())
        .collect();
    assert_eq!(ran.len(), 2, "{v}");
    assert_eq!(ran[0]["mode"], "kernel");
    assert_eq!(ran[0]["rates_bps"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(ran[1]["mode"], "manual");
    assert_eq!(ran[1]["rates_bps"].as_array().map(Vec::len), Some(1), "{v}");
    let measured = ran[0]["rates_bps"][0].as_f64().expect("kernel's rate");
    assert_eq!(
        ran[1]["tuned_with"].as_str(),
        Some(format!("manual:{}bit", measured.floor() as u64).as_str()),
        "manual is sized from the best rate measured before it: {v}"
    );
    let hosts = v["hosts"].as_array().expect("hosts");
    assert_eq!(hosts.len(), 2, "{v}");
    assert_eq!(hosts[0]["role"], "sender");
    assert_eq!(hosts[1]["role"], "receiver");
    for h in hosts {
        assert!(h["error"].is_null(), "{h}");
        assert!(h["wmem_max"].is_u64() && h["tcp_rmem_max"].is_u64(), "{h}");
        assert!(h["one_stream_autotuned_bps"].is_u64(), "{h}");
    }
    assert!(v["path"]["min_rtt_us"].is_u64(), "{v}");
    assert!(v["path"]["best_rate_bps"].is_f64(), "{v}");
    let marked: Vec<String> = cells
        .iter()
        .filter_map(|c| c["not_applied"].as_str())
        .map(str::to_string)
        .collect();
    assert_eq!(marked.len(), 2, "{v}");
    assert!(
        marked.iter().all(|w| w.contains("root on the remote host")),
        "{v}"
    );
    v
}

#[test]
fn lab_remote_runs_its_cells_over_a_fake_ssh_and_marks_what_it_cannot_apply() {
    let t = Tmp::new("fake");
    let rsh = t.0.join("fake-ssh");
    std::fs::write(
        &rsh,
        format!(
            "#!/bin/sh\nshift\nexport HOME='{}' SSH_CONNECTION='127.0.0.1 50000 127.0.0.1 22'\nexec sh -c \"$*\"\n",
            t.0.join("home").display()
        ),
    )
    .expect("write fake ssh");
    std::fs::set_permissions(&rsh, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = t.0.join("out");
    let o = std::process::Command::new(BIN)
        .args(["lab", "--remote", "fake", "--json", "--plan", &t.plan()])
        .arg("--out")
        .arg(&out)
        .args(["-e", rsh.to_str().expect("utf-8"), "--remote-tcptune", BIN])
        .stdin(Stdio::null())
        .output()
        .expect("run tcptune lab --remote");
    let v = check(&o);
    // --out: the same report as results.json, and report.html with a bar per cell that ran.
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).expect("results.json"))
            .expect("results.json is JSON");
    assert_eq!(saved, v);
    let page = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert_eq!(page.matches("<rect ").count(), 2, "{page}");
    assert!(page.contains("not applied"), "{page}");
}

#[test]
fn lab_remote_runs_across_an_emulated_path_through_sshd() {
    if !tcptune_testkit::require(
        "lab_remote_runs_across_an_emulated_path_through_sshd",
        sshd::NEEDS,
    ) {
        return;
    }
    let t = Tmp::new("sshd");
    let topo = Topology::up(&TopologyConfig::new(
        unique_name("labr"),
        PathConfig {
            delay: Duration::from_millis(5),
            ..PathConfig::default()
        },
    ))
    .unwrap_or_else(|e| panic!("up: {e}"));
    let server = Sshd::start(&topo, Side::B);
    let o = topo
        .command(Side::A, BIN)
        .args(["lab", "--remote", &server.destination(), "--json"])
        .args([
            "--plan",
            &t.plan(),
            "-e",
            &server.rsh(),
            "--remote-tcptune",
            BIN,
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run tcptune lab --remote in side A");
    let v = check(&o);
    // Every far end exited with its session.
    let gone = tcptune_testkit::wait_for(Duration::from_secs(10), || {
        server
            .processes()
            .iter()
            .all(|(_, c)| !c.contains("--stdio"))
    });
    assert!(gone, "far ends left: {:?}", server.processes());
    // The RTT measured is the real (here: emulated) path's, at least its propagation delay.
    assert!(
        v["path"]["min_rtt_us"]
            .as_u64()
            .is_some_and(|us| us >= 10_000),
        "{v}\nsshd's log:\n{}",
        std::fs::read_to_string(server.log()).unwrap_or_default()
    );
}
