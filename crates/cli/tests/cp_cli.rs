//! `tcptune cp` end to end over loopback: random trees both ways compared with `diff -r`,
//! one-line errors with their exit statuses (and the JSON error document), `--read-only`,
//! and a full disk (root: a small tmpfs in a private mount namespace) that leaves the
//! partial file to be resumed once there is room.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use tcptune_testkit::{ChildGuard, Need};

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str) -> Tmp {
        let d = std::env::temp_dir().join(format!("tcptune-cp-{name}-{}", std::process::id()));
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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn wait_port(port: u16) {
    let up = tcptune_testkit::wait_for(Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up, "the server did not listen on {port}");
}

fn serve(root: &Path, extra: &[&str]) -> (ChildGuard, u16) {
    let port = free_port();
    let g = ChildGuard::spawn(
        Command::new(BIN)
            .args([
                "serve",
                "-B",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "--root",
            ])
            .arg(root)
            .args(extra)
            .stdout(std::process::Stdio::null()),
    );
    wait_port(port);
    (g, port)
}

fn cp(port: u16, args: &[&str]) -> Output {
    Command::new(BIN)
        .args([
            "cp",
            "--no-progress",
            "--no-path-db",
            "-p",
            &port.to_string(),
        ])
        .args(args)
        .output()
        .expect("run tcptune cp")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "cp failed ({}): {}{}",
        o.status,
        text(&o.stderr),
        text(&o.stdout)
    );
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

/// A random tree: every awkward size around the block, unicode and spaced names, empty
/// directories.
fn random_tree(root: &Path, seed: u64) {
    let block = 4usize << 20;
    let sizes = [0, 1, block - 1, block, block + 1, 2 * block + 999, 17, 4096];
    let names = [
        "plain",
        "with space",
        "ünïcødé",
        "日本語 名前",
        "dash-and.dots",
        "tab\tname",
    ];
    let mut x = seed;
    let mut next = || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) as usize
    };
    for d in ["", "a", "a/b c", "ø", "empty", "a/b c/empty too"] {
        std::fs::create_dir_all(root.join(d)).expect("mkdir");
    }
    for (i, dir) in ["", "a", "a/b c", "ø"].iter().enumerate() {
        for k in 0..4 {
            let name = format!("{} {i}{k}", names[next() % names.len()]);
            let size = sizes[next() % sizes.len()];
            std::fs::write(
                root.join(dir).join(name),
                bytes(seed + (i * 10 + k) as u64, size),
            )
            .expect("write");
        }
    }
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

#[test]
fn random_trees_round_trip_both_ways() {
    if !tcptune_testkit::require_program("random_trees_round_trip_both_ways", "diff") {
        return;
    }
    let t = Tmp::new("trees");
    let share = t.0.join("share");
    std::fs::create_dir_all(&share).expect("mkdir");
    let (_server, port) = serve(&share, &[]);
    for seed in [1u64, 2] {
        let src = t.0.join(format!("src{seed}"));
        random_tree(&src, seed);
        let o = cp(
            port,
            &[
                "-r",
                "-P",
                "3",
                src.to_str().expect("utf8"),
                "tcptune://127.0.0.1/",
            ],
        );
        ok(&o);
        diff(&src, &share.join(format!("src{seed}")));
        let back = t.0.join(format!("back{seed}"));
        let o = cp(
            port,
            &[
                "-r",
                "--json",
                &format!("tcptune://127.0.0.1/src{seed}"),
                back.to_str().expect("utf8"),
            ],
        );
        ok(&o);
        diff(&src, &back);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        assert_eq!(v["direction"], "pull");
        assert!(v["files"].as_u64().is_some_and(|n| n == 16), "{v}");
        assert_eq!(v["bytes"], v["transferred_bytes"]);
        assert!(v["seconds"].as_f64().is_some_and(|s| s > 0.0));
        assert!(v["bits_per_second"].as_f64().is_some_and(|s| s > 0.0));
        assert!(v["streams"].as_array().is_some_and(|s| !s.is_empty()));
        assert!(v["entries"][0]["blake3"]
            .as_str()
            .is_some_and(|d| d.len() == 64));
    }
}

#[test]
fn errors_are_one_line_with_distinct_exit_statuses() {
    let t = Tmp::new("errors");
    let share = t.0.join("share");
    std::fs::create_dir_all(share.join("dir")).expect("mkdir");
    std::fs::write(share.join("f"), b"x").expect("write");
    let f = t.0.join("local");
    std::fs::write(&f, b"y").expect("write");
    let fs = f.to_str().expect("utf8");
    let f2 = t.0.join("local2");
    std::fs::write(&f2, b"z").expect("write");
    let fs2 = f2.to_str().expect("utf8");
    let (_server, port) = serve(&share, &[]);
    let (_ro, ro_port) = serve(&share, &["--read-only"]);
    let missing = t.0.join("missing");
    let cases: Vec<(u16, Vec<&str>, i32, &str)> = vec![
        (
            port,
            vec![missing.to_str().expect("utf8"), "tcptune://127.0.0.1/"],
            6,
            "no such file",
        ),
        (
            port,
            vec!["tcptune://127.0.0.1/nope", fs],
            6,
            "no such file",
        ),
        (
            port,
            vec![fs, "tcptune://127.0.0.1/../out"],
            7,
            "outside the shared directory",
        ),
        (
            port,
            vec!["tcptune://127.0.0.1//etc/passwd", fs],
            7,
            "outside the shared directory",
        ),
        (ro_port, vec![fs, "tcptune://127.0.0.1/"], 7, "read-only"),
        (port, vec!["tcptune://127.0.0.1/dir", fs], 2, "use -r"),
        (
            port,
            vec![fs, fs2, "tcptune://127.0.0.1/f"],
            2,
            "not a directory",
        ),
        (port, vec![fs, fs], 2, "remote"),
        (free_port(), vec![fs, "tcptune://127.0.0.1/"], 3, "refused"),
    ];
    for (p, args, code, says) in cases {
        let o = cp(p, &args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // Nothing was created outside the share, and the read-only share is unchanged.
    assert!(!t.0.join("out").exists());
    assert!(!share.join("local").exists());
    let o = cp(port, &["--json", "tcptune://127.0.0.1/nope", fs]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json error document");
    assert_eq!(v["error"]["exit_code"], 6);
    assert_eq!(v["command"], "cp");
    // Reading a read-only share works.
    let o = cp(
        ro_port,
        &[
            "tcptune://127.0.0.1/f",
            t.0.join("got").to_str().expect("utf8"),
        ],
    );
    ok(&o);
    assert_eq!(std::fs::read(t.0.join("got")).expect("read"), b"x");
}

/// A tmpfs of `size` in a private mount namespace, shared by a server living in it; gone
/// with the server (the guard kills it on drop, even if the test fails).
fn small_disk_server(dir: &Path, size: &str, env: &[(&str, &str)]) -> (ChildGuard, u16) {
    let port = free_port();
    std::fs::create_dir_all(dir).expect("mkdir");
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount -t tmpfs -o size={size} tcptune-test '{}' && exec '{BIN}' serve -B 127.0.0.1 -p {port} --root '{}'",
            dir.display(),
            dir.display()
        ))
        .stdout(std::process::Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let g = ChildGuard::spawn(&mut c);
    wait_port(port);
    (g, port)
}

#[test]
fn a_full_disk_fails_with_status_8_and_the_copy_resumes_when_there_is_room() {
    if !tcptune_testkit::require(
        "a_full_disk_fails_with_status_8_and_the_copy_resumes_when_there_is_room",
        &[
            Need::Root,
            Need::Program("unshare"),
            Need::Program("nsenter"),
        ],
    ) {
        return;
    }
    let t = Tmp::new("full");
    let big = t.0.join("big");
    std::fs::write(&big, bytes(7, 40 << 20)).expect("write");
    let bs = big.to_str().expect("utf8");
    // Refused before anything moves: 40 MiB do not fit in 24 MiB.
    let (server, port) = small_disk_server(&t.0.join("disk1"), "24m", &[]);
    let o = cp(port, &[bs, "tcptune://127.0.0.1/"]);
    assert_eq!(o.status.code(), Some(8), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("not enough space"),
        "{}",
        text(&o.stderr)
    );
    drop(server);
    // Without the check, the disk fills in the middle of the copy: status 8, the partial
    // file stays; with more room the same command finishes and carries less.
    let dir = t.0.join("disk2");
    let (server, port) = small_disk_server(&dir, "24m", &[("TCPTUNE_CP_NO_SPACE_CHECK", "1")]);
    let o = cp(port, &[bs, "tcptune://127.0.0.1/"]);
    assert_eq!(o.status.code(), Some(8), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("no space left"),
        "{}",
        text(&o.stderr)
    );
    let inside = PathBuf::from(format!("/proc/{}/root", server.id()))
        .join(dir.strip_prefix("/").expect("absolute"));
    assert!(
        inside.join(".big.tcptune-part").exists(),
        "the partial file stays"
    );
    let st = Command::new("nsenter")
        .args([
            "-t",
            &server.id().to_string(),
            "-m",
            "mount",
            "-o",
            "remount,size=64m",
        ])
        .arg(&dir)
        .status()
        .expect("remount");
    assert!(st.success());
    let o = cp(port, &["--json", bs, "tcptune://127.0.0.1/"]);
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let carried = v["transferred_bytes"].as_u64().expect("transferred");
    assert!(carried < 40 << 20, "resumed: {v}");
    assert!(v["present_bytes"].as_u64().expect("present") > 0, "{v}");
    assert_eq!(
        std::fs::read(inside.join("big")).expect("read"),
        std::fs::read(&big).expect("read")
    );
}
