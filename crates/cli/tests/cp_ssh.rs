//! tcptune over "ssh" without an sshd: a fake remote shell made by each test (a script that
//! drops its host argument and runs the rest with `sh -c`, with its own `$HOME` and
//! `$SSH_CONNECTION`), passed with `-e`, so that the whole flow runs on loopback: cp push and
//! pull of a file and a tree, send --ssh and advise --ssh, no far end left afterwards, the
//! far end exiting when its client is killed mid-copy, and ssh's failures in one line.
//! (The tests against a real sshd are in the CI's emulated network.)

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str) -> Tmp {
        let d = std::env::temp_dir().join(format!("tcptune-ssh-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("home")).expect("mkdir");
        std::fs::create_dir_all(d.join("local")).expect("mkdir");
        Tmp(d)
    }

    fn home(&self) -> PathBuf {
        self.0.join("home")
    }

    fn local(&self) -> PathBuf {
        self.0.join("local")
    }

    /// A script in the test's directory; its path.
    fn script(&self, name: &str, body: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}")).expect("write script");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p.to_str().expect("utf-8").to_string()
    }

    /// The fake ssh: drops the host, runs the rest with `sh -c` with the far end's `$HOME`.
    fn rsh(&self) -> String {
        self.script(
            "fake-ssh",
            &format!(
                "shift\nexport HOME='{}' SSH_CONNECTION='127.0.0.1 50000 127.0.0.1 22'\nexec sh -c \"$*\"\n",
                self.home().display()
            ),
        )
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

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "failed ({}): {}{}",
        o.status,
        text(&o.stderr),
        text(&o.stdout)
    );
}

/// `tcptune SUBCOMMAND -e RSH --remote-tcptune BIN ARGS...`.
fn over_ssh(t: &Tmp, sub: &str, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args([sub, "-e", &t.rsh(), "--remote-tcptune", BIN])
        .args(args)
        .env("TCPTUNE_PATH_DB", t.0.join("client-paths.sqlite"));
    c
}

fn run(mut c: Command) -> Output {
    c.output().expect("run tcptune")
}

/// The far ends of this test still running: processes whose command line has
/// `serve --stdio` and whose `$HOME` is this test's.
fn far_ends(home: &Path) -> Vec<u32> {
    let want = format!("HOME={}", home.display()).into_bytes();
    let mut pids = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let marker: &[u8] = b"serve\0--stdio\0";
        if !cmd.windows(marker.len()).any(|w| w == marker) {
            continue;
        }
        let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
        if env.split(|b| *b == 0).any(|v| v == want.as_slice()) {
            pids.push(pid);
        }
    }
    pids
}

fn no_far_end_left(t: &Tmp) {
    let gone = tcptune_testkit::wait_for(Duration::from_secs(5), || far_ends(&t.home()).is_empty());
    assert!(gone, "far ends left: {:?}", far_ends(&t.home()));
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

fn diff(a: &Path, b: &Path) {
    let o = Command::new("diff")
        .arg("-r")
        .arg(a)
        .arg(b)
        .output()
        .expect("diff");
    assert!(o.status.success(), "trees differ: {}", text(&o.stdout));
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}

#[test]
fn files_and_trees_go_both_ways_over_ssh_and_no_far_end_is_left() {
    let t = Tmp::new("cp");
    let local = t.local();
    std::fs::write(local.join("big"), bytes(1, (9 << 20) + 17)).expect("write");
    let tree = local.join("tree");
    std::fs::create_dir_all(tree.join("sub dir/deeper")).expect("mkdir");
    std::fs::create_dir_all(tree.join("empty")).expect("mkdir");
    for (i, name) in ["a", "sub dir/b ü", "sub dir/deeper/c", "zero"]
        .iter()
        .enumerate()
    {
        std::fs::write(tree.join(name), bytes(i as u64 + 7, i * 300_001)).expect("write");
    }
    // A file into the remote home (HOST: alone), a tree to an absolute path.
    ok(&run(over_ssh(
        &t,
        "cp",
        &[
            "--no-progress",
            "--no-path-db",
            s(&local.join("big")),
            "fake:",
        ],
    )));
    assert_eq!(
        std::fs::read(t.home().join("big")).expect("pushed"),
        bytes(1, (9 << 20) + 17)
    );
    let abs = t.0.join("abs");
    std::fs::create_dir_all(&abs).expect("mkdir");
    let dest = format!("alice@fake:{}/", abs.display());
    ok(&run(over_ssh(
        &t,
        "cp",
        &["--no-progress", "--no-path-db", "-r", s(&tree), &dest],
    )));
    diff(&tree, &abs.join("tree"));
    // Pulls: a path relative to the home, and a tree by its absolute path.
    let back = local.join("back");
    ok(&run(over_ssh(
        &t,
        "cp",
        &["--no-progress", "--no-path-db", "fake:big", s(&back)],
    )));
    assert_eq!(
        std::fs::read(&back).expect("pulled"),
        bytes(1, (9 << 20) + 17)
    );
    let tree_back = local.join("tree-back");
    let src = format!("fake:{}", abs.join("tree").display());
    ok(&run(over_ssh(
        &t,
        "cp",
        &["--no-progress", "--no-path-db", "-r", &src, s(&tree_back)],
    )));
    diff(&tree, &tree_back);
    no_far_end_left(&t);
}

#[test]
fn cp_encrypt_pushes_and_pulls_over_ssh_with_the_plaintexts_digest() {
    let t = Tmp::new("encrypt");
    let local = t.local();
    let data = bytes(3, (5 << 20) + 99);
    std::fs::write(local.join("big"), &data).expect("write");
    let tree = local.join("tree");
    std::fs::create_dir_all(tree.join("sub")).expect("mkdir");
    std::fs::write(tree.join("sub/x"), bytes(4, 123_457)).expect("write");
    std::fs::write(tree.join("y"), bytes(5, 1)).expect("write");
    let o = run(over_ssh(
        &t,
        "cp",
        &[
            "--encrypt",
            "--json",
            "--no-progress",
            "--no-path-db",
            s(&local.join("big")),
            "fake:",
        ],
    ));
    ok(&o);
    assert_eq!(std::fs::read(t.home().join("big")).expect("pushed"), data);
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json report");
    assert_eq!(
        report["encrypted"],
        serde_json::Value::Bool(true),
        "{report}"
    );
    let want = blake3::hash(&data).to_hex().to_string();
    assert!(
        text(&o.stdout).contains(&want),
        "the report names b3sum's digest of the plaintext: {report}"
    );
    ok(&run(over_ssh(
        &t,
        "cp",
        &[
            "--encrypt",
            "--no-progress",
            "--no-path-db",
            "-r",
            s(&tree),
            "fake:",
        ],
    )));
    let back = local.join("tree-back");
    ok(&run(over_ssh(
        &t,
        "cp",
        &[
            "--encrypt",
            "--no-progress",
            "--no-path-db",
            "-r",
            "fake:tree",
            s(&back),
        ],
    )));
    diff(&tree, &back);
    no_far_end_left(&t);
}

#[test]
fn send_and_advise_start_their_far_end_over_ssh() {
    let t = Tmp::new("send");
    let o = run(over_ssh(
        &t,
        "send",
        &[
            "--ssh",
            "fake",
            "-n",
            "16",
            "--no-path-db",
            "--json",
            "-i",
            "0",
        ],
    ));
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json report");
    assert_eq!(v["end"]["sum_received"]["bytes"], 16u64 << 20, "{v}");
    let o = run(over_ssh(
        &t,
        "send",
        &["--ssh", "fake", "-n", "4", "-R", "--no-path-db"],
    ));
    ok(&o);
    let o = run(over_ssh(&t, "advise", &["--ssh", "fake", "--json"]));
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json advice");
    assert!(v["buffer_bytes"].as_u64().is_some_and(|b| b > 0), "{v}");
    no_far_end_left(&t);
}

/// A fake ssh that also appends the far end's command line to `argv.log` and points the
/// far end's path database at `far-paths.sqlite`; the recording's path.
fn recording_rsh(t: &Tmp) -> (String, PathBuf) {
    let log = t.0.join("argv.log");
    let rsh = t.script(
        "recording-ssh",
        &format!(
            "shift\nprintf '%s\\n' \"$*\" >> '{}'\nexport HOME='{}' SSH_CONNECTION='127.0.0.1 50000 127.0.0.1 22' TCPTUNE_PATH_DB='{}'\nexec sh -c \"$*\"\n",
            log.display(),
            t.home().display(),
            t.0.join("far-paths.sqlite").display()
        ),
    );
    (rsh, log)
}

#[test]
fn no_path_db_crosses_ssh_to_the_far_end() {
    let t = Tmp::new("nodb");
    let (rsh, log) = recording_rsh(&t);
    let far_db = t.0.join("far-paths.sqlite");
    let file = t.local().join("f");
    std::fs::write(&file, bytes(3, 1 << 20)).expect("write");
    let tcptune = |sub: &str, args: &[&str]| {
        let mut c = Command::new(BIN);
        c.args([sub, "-e", &rsh, "--remote-tcptune", BIN])
            .args(args)
            .env("TCPTUNE_PATH_DB", t.0.join("client-paths.sqlite"));
        c
    };
    // With --no-path-db, every far end is told so, and none opens its database.
    ok(&run(tcptune(
        "cp",
        &["--no-progress", "--no-path-db", s(&file), "fake:"],
    )));
    ok(&run(tcptune(
        "send",
        &["--ssh", "fake", "-n", "4", "--no-path-db"],
    )));
    let o = run(tcptune(
        "advise",
        &["--ssh", "fake", "--no-path-db", "--json"],
    ));
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json advice");
    assert_eq!(v["source"], "measured", "{v}");
    let argv = std::fs::read_to_string(&log).expect("the far ends' command lines");
    let lines: Vec<&str> = argv.lines().collect();
    assert_eq!(lines.len(), 3, "{argv}");
    for l in &lines {
        assert!(l.ends_with(" serve --stdio --no-path-db"), "{argv}");
    }
    assert!(!far_db.exists(), "a far end opened its path database");
    // Without it, the far end keeps its database (what the test above would otherwise
    // not tell apart).
    ok(&run(tcptune("send", &["--ssh", "fake", "-n", "4"])));
    let argv = std::fs::read_to_string(&log).expect("the far ends' command lines");
    let last = argv.lines().last().unwrap_or_default();
    assert!(last.ends_with(" serve --stdio"), "{argv}");
    assert!(far_db.exists(), "the far end records the path by default");
    // advise's --no-path-db is for --ssh only (a running server keeps its own database).
    let mut c = Command::new(BIN);
    c.args(["advise", "127.0.0.1", "--no-path-db"]);
    let o = run(c);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    no_far_end_left(&t);
}

#[test]
fn the_far_end_exits_when_its_client_is_killed_mid_copy() {
    let t = Tmp::new("kill");
    // A sparse file large enough that the copy is still running when the client is killed.
    let big = t.local().join("big");
    std::fs::File::create(&big)
        .and_then(|f| f.set_len(4 << 30))
        .expect("sparse file");
    let mut c = over_ssh(
        &t,
        "cp",
        &["--no-progress", "--no-path-db", s(&big), "fake:"],
    );
    let mut child = c
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let part = t.home().join(".big.tcptune-part");
    let started = tcptune_testkit::wait_for(Duration::from_secs(20), || part.exists());
    let running = far_ends(&t.home());
    let done = t.home().join("big").exists();
    let _ = child.kill();
    let _ = child.wait();
    assert!(started, "the copy never started");
    assert!(
        !done,
        "the copy ended before the client was killed: the test proves nothing"
    );
    assert_eq!(running.len(), 1, "the far end is found while it runs");
    let t0 = Instant::now();
    no_far_end_left(&t);
    assert!(t0.elapsed() < Duration::from_secs(5));
}

/// The error's lines on stderr, the exit status, and the time it took.
fn fails(c: Command) -> (Vec<String>, Option<i32>, Duration) {
    let t0 = Instant::now();
    let o = run(c);
    let lines = text(&o.stderr).lines().map(str::to_string).collect();
    (lines, o.status.code(), t0.elapsed())
}

#[test]
fn a_missing_remote_binary_fails_in_one_line_naming_the_fix() {
    let t = Tmp::new("nobin");
    std::fs::write(t.local().join("f"), b"x").expect("write");
    let mut c = Command::new(BIN);
    c.args([
        "cp",
        "-e",
        &t.rsh(),
        "--remote-tcptune",
        "/nonexistent/tcptune",
    ])
    .arg(t.local().join("f"))
    .arg("fake:");
    let (lines, code, took) = fails(c);
    assert_eq!(code, Some(3), "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("--remote-tcptune") && lines[0].contains("install"),
        "{lines:?}"
    );
    assert!(took < Duration::from_secs(10));
}

#[test]
fn an_unknown_host_key_fails_in_one_line_naming_the_fix() {
    let t = Tmp::new("hostkey");
    std::fs::write(t.local().join("f"), b"x").expect("write");
    let rsh = t.script(
        "hostkey-ssh",
        "echo 'Host key verification failed.' >&2\nexit 255\n",
    );
    let mut c = Command::new(BIN);
    c.args(["cp", "-e", &rsh])
        .arg(t.local().join("f"))
        .arg("alice@dtn2:x");
    let (lines, code, took) = fails(c);
    assert_eq!(code, Some(3), "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("host key") && lines[0].contains("alice@dtn2"),
        "{lines:?}"
    );
    assert!(took < Duration::from_secs(10));
}

#[test]
fn an_unreachable_data_port_is_named_with_port_range() {
    let t = Tmp::new("port");
    std::fs::write(t.local().join("f"), b"x").expect("write");
    // A port nobody listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let key = "ab".repeat(32);
    let rsh = t.script(
        "liar-ssh",
        &format!("echo 'tcptune-stdio 1 addr=127.0.0.1 port={port} key={key}'\ncat >/dev/null\n"),
    );
    let mut c = Command::new(BIN);
    c.args(["cp", "--no-path-db", "-e", &rsh])
        .arg(t.local().join("f"))
        .arg("h:");
    let (lines, code, took) = fails(c);
    assert_eq!(code, Some(3), "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(&format!("127.0.0.1:{port}")) && lines[0].contains("--port-range"),
        "{lines:?}"
    );
    assert!(took < Duration::from_secs(10));
}

#[test]
fn an_old_host_colon_path_for_a_server_names_the_url_form() {
    let t = Tmp::new("oldform");
    std::fs::write(t.local().join("f"), b"x").expect("write");
    // Something answers on 127.0.0.1:5310 (this listener, or a server already there).
    let _l = std::net::TcpListener::bind("127.0.0.1:5310");
    let rsh = t.script(
        "refused-ssh",
        "echo 'ssh: connect to host 127.0.0.1 port 22: Connection refused' >&2\nexit 255\n",
    );
    let mut c = Command::new(BIN);
    c.args(["cp", "-e", &rsh])
        .arg(t.local().join("f"))
        .arg("127.0.0.1:isos/");
    let (lines, code, _) = fails(c);
    assert_eq!(code, Some(3), "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("tcptune://127.0.0.1/isos/"), "{lines:?}");
}
