//! Supervised children never outlive their supervisor: a parent process (this test binary,
//! started again in the role of `role_parent`) starts supervised children, one of which
//! starts a grandchild of its own, and is then stopped with SIGINT or killed with SIGKILL.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tcptune_sys::process::{self, signals, Descendants};

const ROLE: &str = "TCPTUNE_SUPERVISION_ROLE";
const DIR: &str = "TCPTUNE_SUPERVISION_DIR";

/// Not a test of its own: the parent's part when started by the tests below (it returns at
/// once otherwise). It writes the pids it started to `DIR/pids` and runs until SIGINT.
#[test]
fn role_parent() {
    let Some(dir) = std::env::var_os(DIR).map(PathBuf::from) else {
        return;
    };
    if std::env::var_os(ROLE).is_none() {
        return;
    }
    signals::catch_stop_signals().expect("catch the stop signals");
    // First, as a lab does: whatever its children start is adopted and waited for.
    let reaper = Descendants::adopt("the test's processes", Duration::from_secs(1))
        .expect("become a subreaper");
    let gc_file = dir.join("grandchild");
    let script = format!("sleep 300 & echo $! > {}; wait", gc_file.display());
    let shell = process::spawn(Command::new("sh").args(["-c", &script]), "a shell")
        .expect("start sh")
        .grace(Duration::from_millis(500));
    let sleeper = process::spawn(Command::new("sleep").arg("300"), "a sleeper").expect("sleep");
    let t0 = Instant::now();
    while !gc_file.exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let gc = std::fs::read_to_string(&gc_file).unwrap_or_default();
    let pids = format!("{} {} {}", shell.id(), sleeper.id(), gc.trim());
    std::fs::write(dir.join("pids.tmp"), pids).expect("write pids");
    std::fs::rename(dir.join("pids.tmp"), dir.join("pids")).expect("publish pids");
    while signals::stop_requested().is_none() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(10));
    }
    // The guards stop the children (SIGTERM: the shell dies, its sleep is orphaned and
    // adopted), then the reaper stops what is left.
    drop(shell);
    drop(sleeper);
    drop(reaper);
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d =
            std::env::temp_dir().join(format!("tcptune-supervision-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running process (not a zombie).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next().map(str::to_string))
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// Start the parent, wait until its children run; returns it and their pids (child shell,
/// child sleeper, grandchild).
fn start_parent(dir: &Path) -> (std::process::Child, Vec<i32>) {
    let exe = std::env::current_exe().expect("the test binary");
    let parent = Command::new(exe)
        .args(["--exact", "role_parent", "--nocapture", "--test-threads=1"])
        .env(ROLE, "parent")
        .env(DIR, dir)
        .spawn()
        .expect("start the parent");
    let file = dir.join("pids");
    let t0 = Instant::now();
    while !file.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the parent never started its children"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pids: Vec<i32> = std::fs::read_to_string(&file)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert_eq!(pids.len(), 3, "{pids:?}");
    assert!(pids.iter().all(|p| running(*p)), "{pids:?}");
    (parent, pids)
}

#[test]
fn a_parent_stopped_with_sigint_exits_only_after_its_children_and_theirs_are_gone() {
    let d = TempDir::new("int");
    let (mut parent, pids) = start_parent(&d.0);
    let pid = i32::try_from(parent.id()).unwrap_or(i32::MAX);
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let t0 = Instant::now();
    let status = parent.wait().expect("wait for the parent");
    assert!(status.success(), "{status}");
    assert!(t0.elapsed() < Duration::from_secs(20));
    // At the moment it has exited, nothing it started (nor what those started) runs.
    let left: Vec<i32> = pids.iter().copied().filter(|p| running(*p)).collect();
    for p in &left {
        // SAFETY: cleaning up after a failed check; the pid is one the parent reported.
        unsafe { libc::kill(*p, libc::SIGKILL) };
    }
    assert!(
        left.is_empty(),
        "still running after the parent exited: {left:?} of {pids:?}"
    );
}

#[test]
fn the_children_of_a_parent_killed_with_sigkill_die_with_it() {
    let d = TempDir::new("kill");
    let (mut parent, pids) = start_parent(&d.0);
    parent.kill().expect("SIGKILL the parent");
    let _ = parent.wait();
    // Its own children get SIGKILL from the kernel (PR_SET_PDEATHSIG).
    let children = &pids[..2];
    let t0 = Instant::now();
    while children.iter().any(|p| running(*p)) && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let left: Vec<i32> = children.iter().copied().filter(|p| running(*p)).collect();
    // A grandchild has no death signal of its own and nobody left to stop it: only what
    // removes a whole group (a namespace's teardown, a cgroup) can. Stop it here.
    // SAFETY: the pid is the grandchild the parent reported.
    unsafe { libc::kill(pids[2], libc::SIGKILL) };
    assert!(
        left.is_empty(),
        "children {left:?} survived the SIGKILLed parent"
    );
}
