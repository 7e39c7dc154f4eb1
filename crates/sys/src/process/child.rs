//! Supervised children: they die with their parent (PR_SET_PDEATHSIG) and are stopped
//! (SIGTERM, grace period, SIGKILL, reap) when their guard drops.

use super::terminate::terminate;
use super::ProcessError;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// Grace period SIGTERM gets before SIGKILL, unless [`Supervised::grace`] says otherwise.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);

/// How often [`Supervised::wait_until`] looks at the child and the stop condition.
const POLL: Duration = Duration::from_millis(20);

/// Start `cmd` as a supervised child: it gets SIGKILL when this thread ends, also when this
/// process is killed with SIGKILL (PR_SET_PDEATHSIG), and it is stopped when the returned
/// guard drops. `what` names it in errors ("tcptune serve on side B").
///
/// The death signal follows the *thread* that spawned the child: spawn from a thread that
/// lives as long as the child should (the main thread, a test's own thread), not from a
/// short-lived helper thread. Grandchildren (what a `sh -c` starts) do not inherit it; the
/// emulator's namespaces are emptied on teardown for them.
pub fn spawn(cmd: &mut Command, what: impl Into<String>) -> Result<Supervised, ProcessError> {
    let what = what.into();
    let parent = std::process::id();
    // SAFETY: the hook runs in the child between fork and exec. It only calls prctl(2) and
    // getppid(2), which are async-signal-safe, and builds io::Errors from errno values,
    // which does not allocate.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl: nobody would send the signal then.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|error| ProcessError::Spawn {
        what: what.clone(),
        error,
    })?;
    Ok(Supervised {
        child,
        what,
        grace: DEFAULT_GRACE,
        status: None,
    })
}

/// How [`Supervised::wait_until`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    /// The child exited.
    Exited(ExitStatus),
    /// The deadline passed first.
    Deadline,
    /// The stop condition became true first.
    Interrupted,
}

/// A child started by [`spawn`].
///
/// # Use
///
/// Wait for it ([`wait`](Self::wait), [`wait_until`](Self::wait_until),
/// [`try_wait`](Self::try_wait)) or stop it ([`terminate`](Self::terminate)); dropping the
/// guard terminates it if it still runs. Take its pipes through
/// [`child_mut`](Self::child_mut).
#[derive(Debug)]
pub struct Supervised {
    child: Child,
    what: String,
    grace: Duration,
    status: Option<ExitStatus>,
}

impl Supervised {
    /// Give SIGTERM `grace` before SIGKILL when terminating ([`DEFAULT_GRACE`] otherwise).
    pub fn grace(mut self, grace: Duration) -> Supervised {
        self.grace = grace;
        self
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// A pidfd for it (pidfd_open(2)): readable once it has exited, for a poll(2) that also
    /// waits on other descriptors. `None` if the kernel refuses one (before Linux 5.3).
    /// Open it before reaping the child (a reaped pid may be reused).
    pub fn pidfd(&self) -> Option<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        let pid = libc::pid_t::try_from(self.child.id()).ok()?;
        if self.status.is_some() {
            return None;
        }
        // SAFETY: pidfd_open(2) with a valid pid and no flags; it returns a new descriptor
        // or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let fd = libc::c_int::try_from(fd).ok().filter(|fd| *fd >= 0)?;
        // SAFETY: fd is a descriptor we just opened and nothing else owns.
        Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }

    /// What it is, for messages.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// The child itself (to take its stdin, stdout or stderr pipes).
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Its exit status if it has exited (reaping it), without blocking.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>, ProcessError> {
        if self.status.is_none() {
            self.status = self.child.try_wait().map_err(|error| ProcessError::Sys {
                what: format!("waitpid {} ({})", self.child.id(), self.what),
                error,
            })?;
        }
        Ok(self.status)
    }

    /// Block until it exits.
    pub fn wait(&mut self) -> Result<ExitStatus, ProcessError> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        let s = self.child.wait().map_err(|error| ProcessError::Sys {
            what: format!("waitpid {} ({})", self.child.id(), self.what),
            error,
        })?;
        self.status = Some(s);
        Ok(s)
    }

    /// Wait until it exits, `deadline` passes, or `stop()` is true (polled every 20 ms; a
    /// signal flag, for example). The child keeps running in the last two cases.
    pub fn wait_until(
        &mut self,
        deadline: Option<Instant>,
        mut stop: impl FnMut() -> bool,
    ) -> Result<Waited, ProcessError> {
        loop {
            if let Some(s) = self.try_wait()? {
                return Ok(Waited::Exited(s));
            }
            if stop() {
                return Ok(Waited::Interrupted);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(Waited::Deadline);
            }
            let nap = deadline.map_or(POLL, |d| (d - now).min(POLL));
            std::thread::sleep(nap);
        }
    }

    /// Stop it: SIGTERM, the grace period, SIGKILL, reap. Returns its exit status (`None` if
    /// something else reaped it).
    pub fn terminate(&mut self) -> Result<Option<ExitStatus>, ProcessError> {
        if self.status.is_some() {
            return Ok(self.status);
        }
        let pid = i32::try_from(self.child.id()).unwrap_or(i32::MAX);
        let (child, status) = (&mut self.child, &mut self.status);
        terminate(&self.what, self.grace, || match child.try_wait() {
            Ok(Some(s)) => {
                *status = Some(s);
                Vec::new()
            }
            Ok(None) => vec![pid],
            // ECHILD: not ours to wait for any more.
            Err(_) => Vec::new(),
        })?;
        Ok(self.status)
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if let Err(e) = self.terminate() {
            eprintln!("tcptune: stopping {}: {e}", self.what);
        }
    }
}

/// The exit code a shell would report for `status`: the code, or 128 + the signal.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(1),
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Supervised {
        match spawn(Command::new("sh").args(["-c", script]), "a test shell") {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn exit_status_is_reported_and_stays_reported() {
        let mut c = sh("exit 7");
        let st = c.wait().map_err(|e| e.to_string());
        assert_eq!(st.map(exit_code), Ok(7));
        assert_eq!(c.try_wait().ok().flatten().map(exit_code), Some(7));
        assert_eq!(c.terminate().ok().flatten().map(exit_code), Some(7));
    }

    #[test]
    fn a_child_that_ignores_sigterm_is_killed_after_the_grace_period() {
        // `exec`: the sleeper is the child itself (an ignored signal stays ignored across exec),
        // not a grandchild that would outlive the test.
        let mut c = sh("trap '' TERM; echo ready; exec sleep 30").grace(Duration::from_millis(200));
        // Give the shell time to install its trap.
        std::thread::sleep(Duration::from_millis(200));
        let t0 = Instant::now();
        let st = c.terminate();
        let st = match st {
            Ok(Some(s)) => s,
            other => panic!("{other:?}"),
        };
        assert_eq!(st.signal(), Some(libc::SIGKILL));
        assert!(t0.elapsed() >= Duration::from_millis(200));
    }

    #[test]
    fn wait_until_stops_at_the_deadline_or_the_stop_condition() {
        let mut c = sh("exec sleep 30");
        let soon = Instant::now() + Duration::from_millis(50);
        assert_eq!(
            c.wait_until(Some(soon), || false).ok(),
            Some(Waited::Deadline)
        );
        assert_eq!(c.wait_until(None, || true).ok(), Some(Waited::Interrupted));
        let st = c.terminate().ok().flatten();
        assert_eq!(st.and_then(|s| s.signal()), Some(libc::SIGTERM));
    }

    #[test]
    fn dropping_the_guard_stops_the_child() {
        let c = sh("exec sleep 30");
        let pid = c.id();
        drop(c);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn a_missing_program_is_a_spawn_error_naming_it() {
        let e = spawn(&mut Command::new("/nonexistent/tcptune-x"), "the x tool")
            .err()
            .map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("the x tool")));
    }

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGINT)), 130);
    }
}
