//! Helpers shared by the emulator's integration tests.
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// Whether tests needing root and namespaces can run. Outside CI they skip (saying why)
/// when not root; under CI=true they must run.
pub(crate) fn can_run_as_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    if !root {
        assert!(!ci, "{test}: CI=true but not root: emulator tests must run");
        eprintln!("skipping {test}: needs root (network namespaces, TUN devices)");
        return false;
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        assert!(!ci, "{test}: CI=true but /dev/net/tun is missing");
        eprintln!("skipping {test}: /dev/net/tun is missing");
        return false;
    }
    true
}

/// Median of a non-empty list.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Wait until `f` is true or `timeout` passes.
pub(crate) fn wait_for(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}
