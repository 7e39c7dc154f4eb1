//! Ctrl-C and SIGTERM for commands that must finish their output when interrupted (`send`):
//! the first signal fires a flag that the work checks (the transfer ends at both ends and
//! still reports), a second one ends the process at once.

use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;
use tcptune_sys::process::signals;

/// The stop signal that fired the flag, 0 if none.
static FIRED_BY: AtomicI32 = AtomicI32::new(0);

/// From now on SIGINT, SIGTERM and SIGHUP call `on_stop` (once, on a helper thread) instead
/// of ending the process; after that, the default dispositions are back, so a second Ctrl-C
/// ends the process at once.
pub(crate) fn on_stop(on_stop: impl FnOnce() + Send + 'static) -> anyhow::Result<()> {
    signals::catch_stop_signals()?;
    std::thread::Builder::new()
        .name("stop-signals".into())
        .spawn(move || loop {
            if let Some(sig) = signals::stop_requested() {
                FIRED_BY.store(sig, Ordering::Relaxed);
                on_stop();
                for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                    // SAFETY: restoring the default disposition of a standard signal.
                    unsafe {
                        libc::signal(s, libc::SIG_DFL);
                    }
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        })?;
    Ok(())
}

/// The signal that fired, if one did (`SIGINT`).
pub(crate) fn fired() -> Option<String> {
    match FIRED_BY.load(Ordering::Relaxed) {
        0 => None,
        s => Some(signals::signal_name(s)),
    }
}
