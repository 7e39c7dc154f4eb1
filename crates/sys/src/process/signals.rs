//! The stop signals (SIGINT, SIGTERM, SIGHUP): catch them so that a program tears down
//! cleanly ([`catch_stop_signals`], [`stop_requested`]), or block them and wait for one
//! ([`block_stop_signals`], for a daemon).

use super::ProcessError;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// The signals that ask a tcptune process to stop.
pub const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The last stop signal received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop(sig: libc::c_int) {
    RECEIVED.store(sig, Ordering::SeqCst);
}

fn sigaction(sig: libc::c_int, handler: libc::sighandler_t) -> Result<(), ProcessError> {
    // SAFETY: the sigaction struct is zero-initialised (a valid empty value) and then filled
    // in; the handler is either SIG_IGN or `on_stop`, which only stores to an atomic and so
    // is async-signal-safe.
    let r = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = libc::SA_RESTART;
        libc::sigaction(sig, &sa, std::ptr::null_mut())
    };
    if r != 0 {
        return Err(ProcessError::Sys {
            what: format!("sigaction {}", signal_name(sig)),
            error: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// From now on SIGINT, SIGTERM and SIGHUP only raise a flag that [`stop_requested`] reads;
/// the program checks it and unwinds (so every guard runs). Children started afterwards get
/// the default dispositions back when they exec.
pub fn catch_stop_signals() -> Result<(), ProcessError> {
    let handler: extern "C" fn(libc::c_int) = on_stop;
    for sig in STOP_SIGNALS {
        sigaction(sig, handler as libc::sighandler_t)?;
    }
    Ok(())
}

/// The stop signal received since [`catch_stop_signals`], if any.
pub fn stop_requested() -> Option<libc::c_int> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}

/// Ignore SIGINT and SIGQUIT in this process, as system(3) does while its child runs: the
/// child handles Ctrl-C and the caller passes its exit status on. Call it after spawning the
/// child (an ignored disposition would be inherited).
pub fn ignore_interactive_signals() -> Result<(), ProcessError> {
    for sig in [libc::SIGINT, libc::SIGQUIT] {
        sigaction(sig, libc::SIG_IGN)?;
    }
    Ok(())
}

/// The stop signals, blocked in the calling thread and in the threads it starts afterwards
/// (children get an empty mask from `std::process::Command`); [`wait`](Self::wait) takes
/// them one at a time.
pub struct BlockedStopSignals {
    set: libc::sigset_t,
}

/// Block the stop signals (call it before starting threads, so that none of them receives
/// one).
pub fn block_stop_signals() -> Result<BlockedStopSignals, ProcessError> {
    // SAFETY: a zeroed sigset_t is valid storage that sigemptyset initialises; the calls
    // only read and write that local set and this thread's signal mask.
    let (set, r) = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in STOP_SIGNALS {
            libc::sigaddset(&mut set, sig);
        }
        let r = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        (set, r)
    };
    if r != 0 {
        return Err(ProcessError::Sys {
            what: "pthread_sigmask SIG_BLOCK SIGINT SIGTERM SIGHUP".into(),
            error: std::io::Error::from_raw_os_error(r),
        });
    }
    Ok(BlockedStopSignals { set })
}

impl BlockedStopSignals {
    /// Wait up to `timeout` for a stop signal; returns it.
    pub fn wait(&self, timeout: Duration) -> Option<libc::c_int> {
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: sigtimedwait reads the set and the timeout we own; no siginfo is wanted.
        let sig = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &ts) };
        (sig > 0).then_some(sig)
    }
}

/// `SIGINT`, `SIGTERM`, ... (or `signal N`).
pub fn signal_name(sig: libc::c_int) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        libc::SIGKILL => "SIGKILL".into(),
        _ => format!("signal {sig}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names_are_readable() {
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(99), "signal 99");
    }

    #[test]
    fn a_blocked_stop_signal_is_taken_by_wait() {
        // On a thread of its own: the mask is per thread, and raise() targets this thread.
        let got = std::thread::spawn(|| {
            let blocked = block_stop_signals().map_err(|e| e.to_string())?;
            // SAFETY: raise(3) sends SIGHUP to this thread, where it is blocked (pending).
            unsafe { libc::raise(libc::SIGHUP) };
            Ok::<_, String>(blocked.wait(Duration::from_secs(1)))
        })
        .join()
        .map_err(|_| "panicked".to_string())
        .and_then(|r| r);
        assert_eq!(got, Ok(Some(libc::SIGHUP)));
    }
}
