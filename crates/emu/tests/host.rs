//! Host-global sysctls changed through the journal (root): the guard puts them back, and
//! what an owner killed with SIGKILL left raised is put back by the next topology's bring-up.

mod common;

use common::{can_run_as_root, wait_for};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use tcptune_emu::host::{journal_path, HostSysctls, RestoreAction};
use tcptune_emu::{unique_name, PathConfig, Topology, TopologyConfig};

const KEY: &str = "net.core.wmem_max";
const RAISED: u64 = 134_217_728;

fn read() -> String {
    std::fs::read_to_string("/proc/sys/net/core/wmem_max")
        .unwrap_or_else(|e| panic!("reading {KEY}: {e}"))
        .trim()
        .to_string()
}

fn write(v: &str) {
    std::fs::write("/proc/sys/net/core/wmem_max", v)
        .unwrap_or_else(|e| panic!("writing {KEY}: {e}"));
}

/// The host's value, put back when dropped (also when the test fails).
struct Restore(String);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/net/core/wmem_max", &self.0);
    }
}

/// Both tests change the same global value.
static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn the_guard_puts_a_raised_value_back_and_removes_its_journal() {
    if !can_run_as_root("the_guard_puts_a_raised_value_back_and_removes_its_journal") {
        return;
    }
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let _restore = Restore(read());
    write("4194304");
    let (mut host, _) = HostSysctls::acquire().unwrap_or_else(|e| panic!("{e}"));
    let change = host.raise_to(KEY, RAISED).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(change.map(|c| c.original), Some("4194304".to_string()));
    assert_eq!(read(), RAISED.to_string());
    assert!(
        host.raise_to(KEY, 1000).ok().flatten().is_none(),
        "never lowers"
    );
    let (restored, errors) = host.release();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        restored.first().map(|r| r.action),
        Some(RestoreAction::Restored)
    );
    assert_eq!(read(), "4194304");
    assert!(!journal_path().exists());
}

/// Not a test on its own: the owner that gets killed in
/// `a_value_left_raised_by_a_killed_owner_is_put_back_by_the_next_topology`.
#[test]
#[ignore = "helper process"]
fn helper_raise_and_hang() {
    if std::env::var_os("TT_HELPER_RAISE").is_none() {
        return;
    }
    let (mut host, _) = HostSysctls::acquire().unwrap_or_else(|e| panic!("{e}"));
    host.raise_to(KEY, RAISED).unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(Duration::from_secs(120));
}

#[test]
fn a_value_left_raised_by_a_killed_owner_is_put_back_by_the_next_topology() {
    if !can_run_as_root("a_value_left_raised_by_a_killed_owner_is_put_back_by_the_next_topology") {
        return;
    }
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let _restore = Restore(read());
    write("4194304");
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let mut owner = Command::new(exe)
        .args(["--exact", "helper_raise_and_hang", "--include-ignored"])
        .env("TT_HELPER_RAISE", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn helper: {e}"));
    let raised = wait_for(Duration::from_secs(20), || read() == RAISED.to_string());
    let _ = owner.kill();
    let _ = owner.wait();
    assert!(raised, "the helper did not raise {KEY}");
    assert!(journal_path().exists());
    // The next program to bring a path up puts the value back first.
    let topo = Topology::up(&TopologyConfig::new(
        unique_name("host"),
        PathConfig::default(),
    ))
    .unwrap_or_else(|e| panic!("up: {e}"));
    assert_eq!(read(), "4194304");
    assert!(!Path::new(&journal_path()).exists());
    drop(topo);
}
