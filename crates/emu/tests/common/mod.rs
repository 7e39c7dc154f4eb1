//! Helpers shared by the emulator's integration tests.
#![allow(dead_code)]

use tcptune_testkit::Need;

#[allow(unused_imports)] // each test binary uses a different subset
pub(crate) use tcptune_testkit::{median, wait_for};

/// Whether tests needing root and TUN devices can run (see `tcptune_testkit::require`).
pub(crate) fn can_run_as_root(test: &str) -> bool {
    tcptune_testkit::require(test, &[Need::Root, Need::Tun])
}
