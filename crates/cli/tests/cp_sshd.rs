//! `tcptune cp` over ssh, through a real sshd (root): the client in side A of an emulated
//! path, OpenSSH's server in side B with a key made by the test ([`tcptune_testkit::Sshd`]),
//! the far end `tcptune serve --stdio` started by ssh (`--remote-tcptune`: this build, the
//! same file system). A file and a tree are pushed and pulled intact, and the far end is
//! gone afterwards, also when the client is killed in the middle of a copy; a key sshd
//! refuses, a host key the client does not know and a missing remote binary each end the
//! command with a failure within 10 s and at most 3 lines of output, ssh's own included.
//!
//! Needs root (sshd changes to its privilege separation user), /dev/net/tun and OpenSSH;
//! runs for real when root, and must not skip under CI.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tcptune_core::Rate;
use tcptune_emu::{unique_name, PathConfig, Side, Topology, TopologyConfig};
use tcptune_sys::process::Waited;
use tcptune_testkit::{sshd, ChildGuard, Sshd};

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

fn can_run(test: &str) -> bool {
    tcptune_testkit::require(test, sshd::NEEDS)
}

/// A few milliseconds of delay (and a rate, for a copy to take a while).
fn topology(rate: Option<Rate>) -> Topology {
    let cfg = TopologyConfig::new(
        unique_name("cpssh"),
        PathConfig {
            delay: Duration::from_millis(3),
            rate,
            ..PathConfig::default()
        },
    );
    Topology::up(&cfg).unwrap_or_else(|e| panic!("up: {e}"))
}

struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str) -> Tmp {
        let d = std::env::temp_dir().join(format!("tcptune-cpssh-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("mkdir");
        Tmp(d)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A far-end binary that writes its arguments to `log` and runs this build: proves that
/// ssh started it, and with which command line.
fn remote_wrapper(dir: &Path, log: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("remote-tcptune");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{BIN}' \"$@\"\n",
            log.display()
        ),
    )
    .expect("write wrapper");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// What a `tcptune cp` run gave: its status (`None`: still running at the deadline, then
/// killed), its stdout and stderr together, and how long it took.
struct Run {
    status: Option<ExitStatus>,
    output: String,
    took: Duration,
}

impl Run {
    fn lines(&self) -> Vec<&str> {
        self.output
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect()
    }

    fn assert_ok(&self, what: &str, server: &Sshd) {
        assert!(
            self.status.is_some_and(|s| s.success()),
            "{what}: {:?} after {:?}\n{}\nsshd's log:\n{}",
            self.status,
            self.took,
            self.output,
            std::fs::read_to_string(server.log()).unwrap_or_default()
        );
    }
}

/// `tcptune cp --no-progress --no-path-db ARGS...` in side A, stopped at `limit`.
fn cp(topo: &Topology, scratch: &Path, args: &[&str], limit: Duration) -> Run {
    let out = scratch.join("cp.out");
    // One file for both, sharing its offset: the lines interleave as a terminal shows them.
    let stdout = std::fs::File::create(&out).expect("create output file");
    let stderr = stdout.try_clone().expect("clone output file");
    let started = Instant::now();
    let mut child = ChildGuard::spawn(
        topo.command(Side::A, BIN)
            .args(["cp", "--no-progress", "--no-path-db"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr),
    );
    let status = match child.0.wait_until(Some(started + limit), || false) {
        Ok(Waited::Exited(s)) => Some(s),
        Ok(_) => None,
        Err(e) => panic!("waiting for cp: {e}"),
    };
    let took = started.elapsed();
    drop(child);
    Run {
        status,
        output: std::fs::read_to_string(&out).unwrap_or_default(),
        took,
    }
}

/// The far ends (`serve --stdio`) still running in sshd's namespace.
fn far_ends(server: &Sshd) -> Vec<(i32, String)> {
    server
        .processes()
        .into_iter()
        .filter(|(_, c)| c.contains("--stdio"))
        .collect()
}

/// Within 10 s (a bound on a hang, not a timing target) no far end runs any more.
fn assert_far_end_gone(server: &Sshd, after: &str) {
    let gone = tcptune_testkit::wait_for(Duration::from_secs(10), || far_ends(server).is_empty());
    assert!(
        gone,
        "after {after} the far end still runs: {:?}",
        far_ends(server)
    );
}

/// Every regular file under `root`, by relative path, with its content.
fn tree(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.expect("entry").path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                let rel = p.strip_prefix(root).expect("under root").to_path_buf();
                out.push((rel, std::fs::read(&p).expect("read")));
            }
        }
    }
    out.sort();
    out
}

fn make_tree(root: &Path) {
    for (i, rel) in ["a", "b/c", "b/d/e", "b/d/f", "g/h"].iter().enumerate() {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, bytes(i as u64 + 10, 1000 + i * 70_000)).expect("write");
    }
    std::fs::create_dir_all(root.join("empty")).expect("mkdir");
}

const COPY_LIMIT: Duration = Duration::from_secs(120);

#[test]
fn cp_pushes_and_pulls_a_file_and_a_tree_through_sshd_and_no_far_end_is_left() {
    let test = "cp_pushes_and_pulls_a_file_and_a_tree_through_sshd";
    if !can_run(test) {
        return;
    }
    let t = Tmp::new("copies");
    let topo = topology(None);
    let server = Sshd::start(&topo, Side::B);
    let log = t.0.join("remote.args");
    let remote = remote_wrapper(&t.0, &log);
    let rsh = server.rsh();
    let ssh = |args: &[&str]| -> Run {
        let mut all = vec!["-e", &rsh, "--remote-tcptune"];
        let remote = remote.to_str().expect("utf-8 path");
        all.push(remote);
        all.extend_from_slice(args);
        cp(&topo, &t.0, &all, COPY_LIMIT)
    };
    let at = |p: &Path| format!("{}:{}", server.destination(), p.display());

    // A file pushed into a directory of the far side, then pulled back to a new name.
    let local = t.0.join("local");
    let far = t.0.join("far");
    std::fs::create_dir_all(&local).expect("mkdir");
    std::fs::create_dir_all(&far).expect("mkdir");
    let content = bytes(7, (8 << 20) + 12_345);
    std::fs::write(local.join("big"), &content).expect("write");
    let r = ssh(&[
        local.join("big").to_str().expect("utf-8"),
        &format!("{}/", at(&far)),
    ]);
    r.assert_ok("push of a file", &server);
    assert_eq!(
        std::fs::read(far.join("big")).expect("pushed file"),
        content
    );
    let args = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        args.lines().any(|l| l.contains("serve --stdio")),
        "ssh started the far end with: {args:?}"
    );
    assert_far_end_gone(&server, "a push");

    let back = local.join("back");
    let r = ssh(&[&at(&far.join("big")), back.to_str().expect("utf-8")]);
    r.assert_ok("pull of a file", &server);
    assert_eq!(std::fs::read(&back).expect("pulled file"), content);
    assert_far_end_gone(&server, "a pull");

    // A tree, pushed with -r and pulled back with -r.
    let src = local.join("tree");
    make_tree(&src);
    let r = ssh(&[
        "-r",
        src.to_str().expect("utf-8"),
        &format!("{}/", at(&far)),
    ]);
    r.assert_ok("push of a tree", &server);
    assert_eq!(tree(&far.join("tree")), tree(&src));
    assert!(far.join("tree/empty").is_dir(), "the empty directory came");
    assert_far_end_gone(&server, "a push of a tree");

    let pulled = local.join("pulled");
    let r = ssh(&[
        "-r",
        &at(&far.join("tree")),
        pulled.to_str().expect("utf-8"),
    ]);
    r.assert_ok("pull of a tree", &server);
    assert_eq!(tree(&pulled), tree(&src));
    assert_far_end_gone(&server, "a pull of a tree");
    assert!(
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
            >= 4,
        "every copy started its own far end through ssh"
    );
}

/// One failure: non-zero within 10 s, at most 3 lines of stdout and stderr together (ssh's
/// own included), saying something that names the cause (any of `hints`, ignoring case).
fn assert_fails_briefly(what: &str, run: &Run, hints: &[&str]) {
    let lines = run.lines();
    eprintln!("{what}, after {:?}:\n{}", run.took, run.output.trim_end());
    assert!(
        run.status.is_some_and(|s| !s.success()),
        "{what}: {:?} after {:?} (a failure within 10 s expected)\n{}",
        run.status,
        run.took,
        run.output
    );
    assert!(
        run.took <= Duration::from_secs(10),
        "{what}: took {:?}",
        run.took
    );
    assert!(
        !lines.is_empty() && lines.len() <= 3,
        "{what}: {} lines (1 to 3 expected):\n{}",
        lines.len(),
        run.output
    );
    let lower = run.output.to_lowercase();
    assert!(
        hints.iter().any(|h| lower.contains(h)),
        "{what}: the output names none of {hints:?}:\n{}",
        run.output
    );
}

#[test]
fn a_refused_key_an_unknown_host_key_and_a_missing_remote_binary_fail_in_three_lines() {
    let test = "a_refused_key_an_unknown_host_key_and_a_missing_remote_binary_fail";
    if !can_run(test) {
        return;
    }
    let t = Tmp::new("fail");
    let topo = topology(None);
    let server = Sshd::start(&topo, Side::B);
    let file = t.0.join("f");
    std::fs::write(&file, bytes(3, 4096)).expect("write");
    let dest = format!("{}:{}/", server.destination(), t.0.join("far").display());
    std::fs::create_dir_all(t.0.join("far")).expect("mkdir");
    let limit = Duration::from_secs(12);
    let run = |rsh: &str, remote: &str| {
        cp(
            &topo,
            &t.0,
            &[
                "-e",
                rsh,
                "--remote-tcptune",
                remote,
                file.to_str().expect("utf-8"),
                &dest,
            ],
            limit,
        )
    };

    let stranger = run(
        &server.rsh_with(&server.stranger_key(), &server.known_hosts()),
        BIN,
    );
    assert_fails_briefly(
        "a key sshd refuses",
        &stranger,
        &["permission denied", "authentication", "publickey"],
    );

    let unknown = run(
        &server.rsh_with(&server.key(), &server.empty_known_hosts()),
        BIN,
    );
    assert_fails_briefly(
        "an unknown host key",
        &unknown,
        &["host key", "known_hosts", "known hosts"],
    );

    let missing = run(&server.rsh(), "/nonexistent");
    assert_fails_briefly(
        "a missing remote binary",
        &missing,
        &["/nonexistent", "not found", "install"],
    );
    assert!(!t.0.join("far/f").exists(), "nothing was copied");
    assert_far_end_gone(&server, "the failures");
}

#[test]
fn the_far_end_exits_when_the_client_is_killed_in_the_middle_of_a_copy() {
    let test = "the_far_end_exits_when_the_client_is_killed";
    if !can_run(test) {
        return;
    }
    let t = Tmp::new("kill");
    // 64 MiB at 100 Mbit/s: about 5 s, time enough to kill the client in the middle.
    let topo = topology(Some(Rate::mbit(100)));
    let server = Sshd::start(&topo, Side::B);
    let file = t.0.join("big");
    std::fs::write(&file, bytes(9, 64 << 20)).expect("write");
    let far = t.0.join("far");
    std::fs::create_dir_all(&far).expect("mkdir");
    let rsh = server.rsh();
    let mut client = ChildGuard::spawn(
        topo.command(Side::A, BIN)
            .args(["cp", "--no-progress", "--no-path-db", "-e", &rsh])
            .args(["--remote-tcptune", BIN])
            .arg(&file)
            .arg(format!("{}:{}/", server.destination(), far.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let partial = far.join(".big.tcptune-part");
    let mut ended = None;
    let started = tcptune_testkit::wait_for(Duration::from_secs(60), || {
        ended = client.0.try_wait().ok().flatten();
        ended.is_some()
            || std::fs::metadata(&partial).is_ok_and(|m| m.len() > 0)
                && !far_ends(&server).is_empty()
    });
    assert!(
        started && ended.is_none(),
        "the copy never started (the client: {ended:?}); in side B: {:?}",
        server.processes()
    );
    // SAFETY: signalling a child of this test.
    unsafe {
        libc::kill(client.id() as i32, libc::SIGKILL);
    }
    let _ = client.0.wait();
    assert!(
        !far.join("big").exists(),
        "the copy finished before the kill: make the file bigger"
    );
    assert_far_end_gone(&server, "the client was killed");
}

/// The far end alone, as the client starts it: `ssh HOST TCPTUNE serve --stdio` prints its
/// one line (`tcptune-stdio VERSION addr=IP port=PORT key=HEX`) on the ssh channel.
struct FarEnd {
    ssh: ChildGuard,
    fields: Vec<(String, String)>,
}

impl FarEnd {
    fn start(topo: &Topology, server: &Sshd) -> FarEnd {
        use std::io::BufRead;
        let mut ssh = ChildGuard::spawn(
            topo.command(Side::A, "ssh")
                .args(server.ssh_args())
                .arg(server.destination())
                .args([BIN, "serve", "--stdio", "--no-path-db"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null()),
        );
        let stdout = ssh.0.child_mut().stdout.take().expect("ssh's stdout");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("reading the far end's line");
        assert!(
            line.starts_with("tcptune-stdio "),
            "the far end's line: {line:?}\nsshd's log:\n{}",
            std::fs::read_to_string(server.log()).unwrap_or_default()
        );
        let fields = line
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        FarEnd { ssh, fields }
    }

    fn field(&self, key: &str) -> &str {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no {key}= in the far end's line: {:?}", self.fields))
    }

    /// Whether ssh (and so the session) ended within `limit`; its status.
    fn ended_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        match self
            .ssh
            .0
            .wait_until(Some(Instant::now() + limit), || false)
        {
            Ok(Waited::Exited(s)) => Some(s),
            _ => None,
        }
    }
}

#[test]
fn the_far_end_over_ssh_serves_one_session_with_its_key_and_exits_when_the_channel_closes() {
    let test = "the_far_end_over_ssh_serves_one_session_with_its_key";
    if !can_run(test) {
        return;
    }
    let t = Tmp::new("far");
    let topo = topology(None);
    let server = Sshd::start(&topo, Side::B);

    // It listens on the address the ssh connection came in on, with a key of 256 bits that
    // a client uses as the shared secret; after that one session it is gone.
    let mut far = FarEnd::start(&topo, &server);
    assert_eq!(far.field("addr"), topo.addr(Side::B).to_string());
    let key = far.field("key").to_string();
    assert_eq!(key.len(), 64, "{key}");
    assert!(key.chars().all(|c| c.is_ascii_hexdigit()), "{key}");
    let secret = t.0.join("key");
    std::fs::write(&secret, &key).expect("write key");
    let send = topo
        .command(Side::A, BIN)
        .args(["send", &topo.addr(Side::B).to_string(), "-p"])
        .arg(far.field("port"))
        .arg("--secret-file")
        .arg(&secret)
        .args(["-n", "16", "--no-progress", "--no-path-db"])
        .stdin(Stdio::null())
        .output()
        .expect("send");
    assert!(
        send.status.success(),
        "send with the far end's key: {}",
        String::from_utf8_lossy(&send.stderr)
    );
    let st = far.ended_within(Duration::from_secs(10));
    assert!(
        st.is_some(),
        "the far end still runs after its session: {:?}",
        far_ends(&server)
    );
    assert_far_end_gone(&server, "its one session");

    // Nobody connects, and the channel closes (the client ended): it exits.
    let mut far = FarEnd::start(&topo, &server);
    drop(far.ssh.0.child_mut().stdin.take());
    assert!(far.ended_within(Duration::from_secs(10)).is_some());
    assert_far_end_gone(&server, "its stdin closed");

    // The ssh client is killed: sshd closes the channel, and the far end exits.
    let far = FarEnd::start(&topo, &server);
    assert!(!far_ends(&server).is_empty(), "{:?}", server.processes());
    // SAFETY: signalling a child of this test.
    unsafe {
        libc::kill(far.ssh.id() as i32, libc::SIGKILL);
    }
    drop(far);
    assert_far_end_gone(&server, "the ssh client was killed");
}
