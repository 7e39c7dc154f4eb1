//! Helpers shared by the emulator's integration tests.
#![allow(dead_code)]

use tcptune_testkit::Need;

#[allow(unused_imports)] // each test binary uses a different subset
pub(crate) use tcptune_testkit::{median, wait_for};

/// Whether tests needing root and TUN devices can run (see `tcptune_testkit::require`).
pub(crate) fn can_run_as_root(test: &str) -> bool {
    tcptune_testkit::require(test, &[Need::Root, Need::Tun])
}

/// Whether the emulator can run here, in root mode (root) or rootless mode (anyone, with
/// user namespaces): tests of what both modes do.
pub(crate) fn can_run(test: &str) -> bool {
    tcptune_testkit::require(test, &[Need::Emulator])
}

/// Whether this process's topologies are rootless.
pub(crate) fn rootless() -> bool {
    tcptune_testkit::emulator_mode() == Some(tcptune_emu::Mode::Rootless)
}
