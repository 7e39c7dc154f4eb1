//! Nothing outlives a supervisor: [`Descendants`] makes this process the reaper of its
//! descendants (PR_SET_CHILD_SUBREAPER), so that a grandchild whose parent died is
//! re-parented to it instead of to init, and when the guard is dropped (or
//! [`Descendants::stop`] is called) every child still there, adopted ones included, is
//! terminated (SIGTERM, grace, SIGKILL) and reaped before this process goes on to exit.
//!
//! [`Supervised`](super::Supervised) children die with their parent through
//! PR_SET_PDEATHSIG, but that signal reaches only the children themselves, and only when
//! the parent dies; a supervisor that exits normally (a lab stopped with Ctrl-C) must
//! also wait for whatever its children started. The guard is that wait.

use super::terminate::{terminate, Ended};
use super::ProcessError;
use std::time::Duration;

/// This process's reaper duty for its descendants (see the module docs).
///
/// # Use
///
/// Create it first thing (before starting children), keep it for as long as children may
/// run, and let it drop (or call [`stop`](Self::stop)) once every [`Supervised`]
/// (super::Supervised) guard is gone: it reaps with `waitpid`, which would take the exit
/// status of a child a guard still holds.
#[derive(Debug)]
pub struct Descendants {
    what: String,
    grace: Duration,
    stopped: bool,
}

impl Descendants {
    /// Become the reaper of this process's descendants; `what` names them in errors ("the
    /// lab's processes").
    pub fn adopt(what: impl Into<String>, grace: Duration) -> Result<Descendants, ProcessError> {
        // SAFETY: prctl(2) with PR_SET_CHILD_SUBREAPER only sets a flag of this process.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            return Err(ProcessError::Sys {
                what: "prctl PR_SET_CHILD_SUBREAPER".into(),
                error: std::io::Error::last_os_error(),
            });
        }
        Ok(Descendants {
            what: what.into(),
            grace,
            stopped: false,
        })
    }

    /// Terminate every child of this process (adopted orphans included, and those adopted
    /// while it runs) and reap them; returns once none is left.
    pub fn stop(&mut self) -> Result<Ended, ProcessError> {
        self.stopped = true;
        terminate(&self.what, self.grace, live_children)
    }
}

impl Drop for Descendants {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        if let Err(e) = self.stop() {
            eprintln!("tcptune: stopping {}: {e}", self.what);
        }
    }
}

/// This process's children that are still running, after reaping those that exited.
fn live_children() -> Vec<i32> {
    let me = std::process::id();
    let mut alive = Vec::new();
    for pid in children_of(me) {
        let mut status = 0;
        // SAFETY: waitpid(2) on a child of ours, not blocking; `status` is ours.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == 0 {
            alive.push(pid);
        }
    }
    alive
}

/// The processes whose parent is `pid` (from `/proc/*/stat`; zombies included).
pub fn children_of(pid: u32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|c| {
            std::fs::read_to_string(format!("/proc/{c}/stat"))
                .ok()
                .and_then(|s| parent_of(&s))
                == Some(pid)
        })
        .collect()
}

/// The parent pid (field 4) from the text of `/proc/PID/stat`, counted after the command
/// name's last `)`.
fn parent_of(stat: &str) -> Option<u32> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_pid_is_read_past_odd_command_names() {
        assert_eq!(parent_of("12 (a) b)) S 7 12 12 0"), Some(7));
        assert_eq!(parent_of("garbage"), None);
    }
}
