//! `tcptune cp` across an emulated path (root): the client and the server killed with
//! SIGKILL in the middle of a copy, then the same command resumes, carrying less and
//! leaving an identical file; and a tree copied both ways across a path with loss and
//! reordering.
//!
//! Needs root and /dev/net/tun; runs for real when root, and must not skip under CI.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use tcptune_testkit::{ChildGuard, Need};

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");
const PEER: &str = "198.19.0.1";

fn can_run(test: &str) -> bool {
    tcptune_testkit::require(test, &[Need::Root, Need::Tun, Need::Program("diff")])
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str) -> Tmp {
        let d = std::env::temp_dir().join(format!("tcptune-cpemu-{name}-{}", std::process::id()));
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

/// An emulated path brought up for the test and taken down when it ends (also on failure).
struct Path2(String);

impl Path2 {
    fn up(args: &[&str]) -> Path2 {
        let name = tcptune_emu::unique_name("cp");
        let o = Command::new(BIN)
            .args(["emu", "up", &name])
            .args(args)
            .output()
            .expect("emu up");
        assert!(o.status.success(), "emu up: {}", text(&o.stderr));
        Path2(name)
    }

    fn side(&self, side: char, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &format!("tt-{}-{side}", self.0), program]);
        c
    }
}

impl Drop for Path2 {
    fn drop(&mut self) {
        let _ = Command::new(BIN).args(["emu", "down", &self.0]).output();
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

fn serve(p: &Path2, root: &Path) -> ChildGuard {
    let g = ChildGuard::spawn(
        p.side('b', BIN)
            .arg("serve")
            .arg("--root")
            .arg(root)
            .stdout(Stdio::null()),
    );
    // Wait until side a reaches it.
    let up = tcptune_testkit::wait_for(Duration::from_secs(10), || {
        p.side('a', "sh")
            .args(["-c", &format!("exec 3<>/dev/tcp/{PEER}/5310")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
            || p.side('a', "bash")
                .args(["-c", &format!("exec 3<>/dev/tcp/{PEER}/5310")])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
    });
    assert!(up, "the server in side b did not come up");
    g
}

fn cp(p: &Path2) -> Command {
    let mut c = p.side('a', BIN);
    c.args(["cp", "--no-progress", "--no-path-db"]);
    c
}

fn ok(o: &Output) -> serde_json::Value {
    assert!(
        o.status.success(),
        "cp failed ({}): {}",
        o.status,
        text(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o.stdout)))
}

/// Wait until `partial` holds at least `n` bytes of data, then SIGKILL `victim`.
fn kill_when(partial: &Path, n: u64, victim: &ChildGuard) {
    let got = tcptune_testkit::wait_for(Duration::from_secs(60), || {
        std::fs::metadata(partial).is_ok_and(|m| m.blocks() * 512 >= n)
    });
    assert!(got, "{} never reached {n} bytes", partial.display());
    // SAFETY: signalling a child of this test.
    unsafe {
        libc::kill(victim.id() as i32, libc::SIGKILL);
    }
}

#[test]
fn a_copy_resumes_after_the_client_or_the_server_is_killed() {
    if !can_run("a_copy_resumes_after_the_client_or_the_server_is_killed") {
        return;
    }
    let t = Tmp::new("kill");
    let share = t.0.join("share");
    std::fs::create_dir_all(&share).expect("mkdir");
    let size = 64usize << 20;
    let big = t.0.join("big");
    std::fs::write(&big, bytes(5, size)).expect("write");
    let p = Path2::up(&["--rtt", "20ms", "--rate", "200mbit"]);
    let mut server = serve(&p, &share);

    // The client dies: the server keeps the partial file.
    let client = ChildGuard::spawn(
        cp(&p)
            .arg(&big)
            .arg(format!("tcptune://{PEER}/"))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    kill_when(&share.join(".big.tcptune-part"), 16 << 20, &client);
    drop(client);
    let v = ok(&cp(&p)
        .arg("--json")
        .arg(&big)
        .arg(format!("tcptune://{PEER}/"))
        .output()
        .expect("cp"));
    let carried = v["transferred_bytes"].as_u64().expect("transferred");
    assert!(
        carried <= (size as u64) - (12 << 20),
        "resumed after a client kill: {v}"
    );
    assert_eq!(
        v["present_bytes"].as_u64().expect("present") + carried,
        size as u64,
        "{v}"
    );
    assert_eq!(
        std::fs::read(share.join("big")).expect("read"),
        std::fs::read(&big).expect("read")
    );
    assert!(!share.join(".big.tcptune-part").exists());

    // The server dies while the client pulls: the client keeps its partial file.
    let dest = t.0.join("pulled");
    let client = ChildGuard::spawn(
        cp(&p)
            .arg(format!("tcptune://{PEER}/big"))
            .arg(&dest)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    kill_when(&t.0.join(".pulled.tcptune-part"), 16 << 20, &server);
    let gave_up = tcptune_testkit::wait_for(Duration::from_secs(60), || {
        // SAFETY: polling a child of this test without blocking.
        let r = unsafe { libc::waitpid(client.id() as i32, std::ptr::null_mut(), libc::WNOHANG) };
        r != 0
    });
    assert!(gave_up, "the client noticed the server's death");
    drop(client);
    drop(server);
    server = serve(&p, &share);
    let v = ok(&cp(&p)
        .arg("--json")
        .arg(format!("tcptune://{PEER}/big"))
        .arg(&dest)
        .output()
        .expect("cp"));
    let carried = v["transferred_bytes"].as_u64().expect("transferred");
    assert!(
        carried <= (size as u64) - (12 << 20),
        "resumed after a server kill: {v}"
    );
    assert_eq!(
        std::fs::read(&dest).expect("read"),
        std::fs::read(&big).expect("read")
    );
    drop(server);
}

#[test]
fn a_tree_crosses_a_lossy_reordering_path_both_ways_intact() {
    if !can_run("a_tree_crosses_a_lossy_reordering_path_both_ways_intact") {
        return;
    }
    let t = Tmp::new("lossy");
    let share = t.0.join("share");
    std::fs::create_dir_all(&share).expect("mkdir");
    let src = t.0.join("tree");
    for (i, d) in ["", "x y", "x y/ü", "empty"].iter().enumerate() {
        std::fs::create_dir_all(src.join(d)).expect("mkdir");
        for k in 0..5 {
            let n = [0, 1, 1000, (4 << 20) + 1, 200_000][k];
            std::fs::write(
                src.join(d).join(format!("f {k}")),
                bytes((i * 7 + k) as u64, n),
            )
            .expect("write");
        }
    }
    let p = Path2::up(&[
        "--rtt",
        "20ms",
        "--rate",
        "200mbit",
        "--loss",
        "0.1%",
        "--jitter",
        "2ms",
        "--reorder",
    ]);
    let _server = serve(&p, &share);
    let v = ok(&cp(&p)
        .args(["-r", "--json", "-P", "4"])
        .arg(&src)
        .arg(format!("tcptune://{PEER}/"))
        .output()
        .expect("cp"));
    assert_eq!(v["files"], 20, "{v}");
    let back = t.0.join("back");
    ok(&cp(&p)
        .args(["-r", "--json"])
        .arg(format!("tcptune://{PEER}/tree"))
        .arg(&back)
        .output()
        .expect("cp"));
    for other in [share.join("tree"), back] {
        let o = Command::new("diff")
            .arg("-r")
            .arg(&src)
            .arg(&other)
            .output()
            .expect("diff");
        assert!(
            o.status.success(),
            "{}: {}",
            other.display(),
            text(&o.stdout)
        );
    }
}
