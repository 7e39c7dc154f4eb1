//! Supervised children across real processes: a child started with `process::spawn` dies
//! when its parent is killed with SIGKILL (no cleanup code runs in the parent), and a
//! namespace's processes are stopped by the shared terminator.

mod common;

use common::{can_run, wait_for};
use std::process::{Command, Stdio};
use std::time::Duration;
use tcptune_sys::process::{self, Ended, ProcessId};

/// Not a test on its own: the parent process of `children_die_with_a_parent_killed_by_sigkill`.
/// Starts a supervised `sleep`, prints its pid, and waits to be killed.
#[test]
#[ignore = "helper process for children_die_with_a_parent_killed_by_sigkill"]
fn helper_supervise_a_sleeper_and_hang() {
    if std::env::var_os("TT_HELPER_SUPERVISE").is_none() {
        return;
    }
    let child = process::spawn(Command::new("sleep").arg("120"), "a sleeper");
    let child = child.unwrap_or_else(|e| panic!("{e}"));
    println!("child {}", child.id());
    std::thread::sleep(Duration::from_secs(120));
}

#[test]
fn children_die_with_a_parent_killed_by_sigkill() {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let mut parent = Command::new(exe)
        .args([
            "--exact",
            "helper_supervise_a_sleeper_and_hang",
            "--nocapture",
            "--include-ignored",
            "--test-threads=1",
        ])
        .env("TT_HELPER_SUPERVISE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn helper: {e}"));
    let stdout = parent.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    // Read until the helper has printed its child's pid.
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            // libtest may print "test NAME ... " on the same line first.
            .find_map(|l| {
                let (_, pid) = l.split_once("child ")?;
                pid.trim().parse::<u32>().ok()
            })
    });
    let pid = reader.join().ok().flatten();
    let Some(pid) = pid else {
        let _ = parent.kill();
        let _ = parent.wait();
        panic!("the helper did not report its child");
    };
    let child = ProcessId::of(pid).unwrap_or_else(|| panic!("child {pid} is not running"));
    assert!(child.alive());
    // SIGKILL: the parent runs no code at all; only the kernel's death signal can act.
    let _ = parent.kill();
    let _ = parent.wait();
    let died = wait_for(Duration::from_secs(5), || !child.alive());
    if !died {
        let _ = child.terminate("the orphaned sleeper", Duration::ZERO);
    }
    assert!(died, "child {pid} outlived its parent");
}

#[test]
fn processes_in_a_namespace_are_stopped_by_the_terminator() {
    if !can_run("processes_in_a_namespace_are_stopped_by_the_terminator") {
        return;
    }
    let ns = tcptune_testkit::Netns::new("proc");
    // One process that ignores SIGTERM (needs SIGKILL), one that does not.
    let mut stubborn = ns.command("sh");
    stubborn.args(["-c", "trap '' TERM; while :; do sleep 1; done"]);
    let mut a = process::spawn(&mut stubborn, "a stubborn shell")
        .unwrap_or_else(|e| panic!("{e}"))
        .grace(Duration::from_millis(300));
    let mut b = process::spawn(ns.command("sleep").arg("60"), "a sleeper")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(wait_for(Duration::from_secs(5), || ns.pids().len() >= 2));
    std::thread::sleep(Duration::from_millis(200));
    let ended = process::terminate("the test namespace", Duration::from_millis(300), || {
        // Reap our own children so that they do not linger as zombies in the list.
        let _ = a.try_wait();
        let _ = b.try_wait();
        ns.pids()
    });
    assert_eq!(ended.ok(), Some(Ended::Killed));
    assert!(ns.pids().is_empty());
}
