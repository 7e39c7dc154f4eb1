//! Stopping processes: SIGTERM, a grace period, SIGKILL, and waiting until they are gone.
//!
//! [`Termination`] holds the decisions and is pure (fed `now` and the live pids);
//! [`terminate`] is its driver, the one place where tcptune stops processes: its own
//! children ([`Supervised`](super::Supervised)), the processes left in an emulated
//! namespace, an `emu up` daemon, a test's namespace.

use super::ProcessError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// How long processes get after SIGKILL to disappear before they count as survivors.
pub const KILL_WAIT: Duration = Duration::from_secs(2);

/// How often the driver looks again while it waits.
const POLL: Duration = Duration::from_millis(10);

/// A signal the terminator sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: please exit.
    Term,
    /// SIGKILL: exit now.
    Kill,
}

impl Signal {
    /// The signal number.
    pub fn number(self) -> libc::c_int {
        match self {
            Signal::Term => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
        }
    }

    /// `SIGTERM` or `SIGKILL`.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Term => "SIGTERM",
            Signal::Kill => "SIGKILL",
        }
    }
}

/// What the terminator wants done next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send `signal` to each of `pids`, then poll again.
    Signal {
        /// The signal.
        signal: Signal,
        /// The processes.
        pids: Vec<i32>,
    },
    /// Poll again (with a fresh list of live processes) at `until` at the latest; polling
    /// earlier is fine and notices exits sooner.
    Wait {
        /// When the current phase ends.
        until: Instant,
    },
    /// Finished.
    Done(Ended),
}

/// How a termination ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Nothing was running.
    AlreadyGone,
    /// Everything exited within the grace period after SIGTERM.
    Terminated,
    /// SIGKILL was needed.
    Killed,
    /// Still alive [`KILL_WAIT`] after SIGKILL (uninterruptible sleep, or a process we may not
    /// signal).
    Survived(Vec<i32>),
}

#[derive(Clone, Debug)]
enum Phase {
    Start,
    Term { deadline: Instant },
    Kill { deadline: Instant },
    Done(Ended),
}

/// The decisions of stopping a set of processes. Pure: it never signals, sleeps or reads the
/// clock; [`terminate`] is the driver.
///
/// # Calling order
///
/// 1. [`Termination::new`] with the grace period SIGTERM gets.
/// 2. Repeatedly: list the live processes (reap children first, so that a zombie does not
///    count as alive), call [`poll`](Self::poll) with `now` and that list, and carry the
///    [`Action`] out: send the signal to each pid, or sleep (at most until `until`).
/// 3. Stop at [`Action::Done`]; later polls repeat it.
///
/// Processes that appear during the termination (a namespace whose shell forks) get SIGTERM
/// when first seen in the grace period and SIGKILL when first seen after it.
#[derive(Clone, Debug)]
pub struct Termination {
    grace: Duration,
    kill_wait: Duration,
    phase: Phase,
    signalled: BTreeSet<i32>,
}

impl Termination {
    /// A termination that gives SIGTERM `grace` before SIGKILL (zero: SIGKILL at once).
    pub fn new(grace: Duration) -> Termination {
        Termination {
            grace,
            kill_wait: KILL_WAIT,
            phase: Phase::Start,
            signalled: BTreeSet::new(),
        }
    }

    /// How long to wait after SIGKILL before giving up ([`KILL_WAIT`] by default).
    pub fn kill_wait(mut self, wait: Duration) -> Termination {
        self.kill_wait = wait;
        self
    }

    fn finish(&mut self, ended: Ended) -> Action {
        self.phase = Phase::Done(ended.clone());
        Action::Done(ended)
    }

    /// Pids of `alive` not signalled in this phase yet (and now marked as signalled).
    fn unsignalled(&mut self, alive: &[i32]) -> Vec<i32> {
        let new: Vec<i32> = alive
            .iter()
            .copied()
            .filter(|p| !self.signalled.contains(p))
            .collect();
        self.signalled.extend(new.iter().copied());
        new
    }

    fn start_kill(&mut self, now: Instant, alive: &[i32]) -> Action {
        self.phase = Phase::Kill {
            deadline: now + self.kill_wait,
        };
        self.signalled.clear();
        Action::Signal {
            signal: Signal::Kill,
            pids: self.unsignalled(alive),
        }
    }

    /// The next step, given the time and the processes alive now.
    pub fn poll(&mut self, now: Instant, alive: &[i32]) -> Action {
        match self.phase.clone() {
            Phase::Done(ended) => Action::Done(ended),
            Phase::Start if alive.is_empty() => self.finish(Ended::AlreadyGone),
            Phase::Start if self.grace.is_zero() => self.start_kill(now, alive),
            Phase::Start => {
                self.phase = Phase::Term {
                    deadline: now + self.grace,
                };
                Action::Signal {
                    signal: Signal::Term,
                    pids: self.unsignalled(alive),
                }
            }
            Phase::Term { .. } if alive.is_empty() => self.finish(Ended::Terminated),
            Phase::Term { deadline } if now >= deadline => self.start_kill(now, alive),
            Phase::Term { deadline } => match self.unsignalled(alive) {
                pids if pids.is_empty() => Action::Wait { until: deadline },
                pids => Action::Signal {
                    signal: Signal::Term,
                    pids,
                },
            },
            Phase::Kill { .. } if alive.is_empty() => self.finish(Ended::Killed),
            Phase::Kill { deadline } if now >= deadline => {
                self.finish(Ended::Survived(alive.to_vec()))
            }
            Phase::Kill { deadline } => match self.unsignalled(alive) {
                pids if pids.is_empty() => Action::Wait { until: deadline },
                pids => Action::Signal {
                    signal: Signal::Kill,
                    pids,
                },
            },
        }
    }
}

/// Stop the processes that `alive` lists: SIGTERM, up to `grace` for them to exit, SIGKILL,
/// up to [`KILL_WAIT`] for them to disappear. `alive` is asked again before every step; for
/// children of this process it must reap them (`try_wait`). `what` names them in errors
/// ("the server on side B", "processes in netns tt-x-a").
///
/// A process that is already gone when signalled is not an error; a signal that fails
/// otherwise (EPERM) is reported if something survives.
pub fn terminate(
    what: &str,
    grace: Duration,
    mut alive: impl FnMut() -> Vec<i32>,
) -> Result<Ended, ProcessError> {
    let mut t = Termination::new(grace);
    let mut first_error = None;
    loop {
        let live = alive();
        match t.poll(Instant::now(), &live) {
            Action::Signal { signal, pids } => {
                for pid in pids {
                    if let Err(e) = send_signal(pid, signal) {
                        first_error.get_or_insert(e);
                    }
                }
            }
            Action::Wait { until } => {
                std::thread::sleep(until.saturating_duration_since(Instant::now()).min(POLL));
            }
            Action::Done(Ended::Survived(pids)) => {
                return Err(first_error.unwrap_or(ProcessError::Survived {
                    what: what.to_string(),
                    pids,
                }))
            }
            Action::Done(ended) => return Ok(ended),
        }
    }
}

/// Send `signal` to the single process `pid` (kill(2)); a process that is already gone is
/// not an error. Pids below 1 (process groups, every process) are refused.
pub fn send_signal(pid: i32, signal: Signal) -> Result<(), ProcessError> {
    let what = || format!("kill {} pid {pid}", signal.name());
    if pid <= 0 {
        return Err(ProcessError::Sys {
            what: what(),
            error: std::io::Error::from_raw_os_error(libc::EINVAL),
        });
    }
    // SAFETY: kill(2) with a positive pid signals exactly that process; no memory is shared.
    if unsafe { libc::kill(pid, signal.number()) } == 0 {
        return Ok(());
    }
    let error = std::io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::ESRCH) {
        return Ok(());
    }
    Err(ProcessError::Sys {
        what: what(),
        error,
    })
}

/// A process named by its pid and its start time, so that a reused pid is never taken for
/// it (state files record owners this way).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    /// Process id.
    pub pid: u32,
    /// Start time, clock ticks after boot (field 22 of `/proc/PID/stat`).
    pub start: u64,
}

impl ProcessId {
    /// This process.
    pub fn current() -> ProcessId {
        let pid = std::process::id();
        ProcessId {
            pid,
            start: start_time(pid).unwrap_or(0),
        }
    }

    /// Process `pid` as it is now, if it exists.
    pub fn of(pid: u32) -> Option<ProcessId> {
        start_time(pid).map(|start| ProcessId { pid, start })
    }

    /// Whether it still runs: same pid, same start time, and not a zombie.
    pub fn alive(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|s| parse_stat(&s))
            .is_some_and(|(state, start)| start == self.start && state != 'Z' && state != 'X')
    }

    /// Stop it (SIGTERM, `grace`, SIGKILL). It need not be a child of this process.
    pub fn terminate(&self, what: &str, grace: Duration) -> Result<Ended, ProcessError> {
        let pid = i32::try_from(self.pid).map_err(|_| ProcessError::Sys {
            what: format!("kill pid {}", self.pid),
            error: std::io::Error::from_raw_os_error(libc::EINVAL),
        })?;
        terminate(what, grace, || {
            if self.alive() {
                vec![pid]
            } else {
                Vec::new()
            }
        })
    }
}

/// Start time of process `pid` (clock ticks after boot), if it exists.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat).map(|(_, start)| start)
}

/// (state, start time) from the text of `/proc/PID/stat`. The command name (field 2) may
/// hold spaces and parentheses, so fields are counted from the last `)`.
fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 3 is the state; the start time is field 22, 19 further on.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(2);

    fn sig(signal: Signal, pids: &[i32]) -> Action {
        Action::Signal {
            signal,
            pids: pids.to_vec(),
        }
    }

    #[test]
    fn nothing_alive_ends_at_once_without_a_signal() {
        let mut t = Termination::new(GRACE);
        let now = Instant::now();
        assert_eq!(t.poll(now, &[]), Action::Done(Ended::AlreadyGone));
        assert_eq!(t.poll(now, &[5]), Action::Done(Ended::AlreadyGone));
    }

    #[test]
    fn term_first_then_done_when_everything_exits_within_grace() {
        let mut t = Termination::new(GRACE);
        let t0 = Instant::now();
        assert_eq!(t.poll(t0, &[10, 11]), sig(Signal::Term, &[10, 11]));
        assert_eq!(
            t.poll(t0 + Duration::from_millis(5), &[11]),
            Action::Wait { until: t0 + GRACE }
        );
        assert_eq!(
            t.poll(t0 + Duration::from_millis(50), &[]),
            Action::Done(Ended::Terminated)
        );
    }

    #[test]
    fn kill_goes_to_whatever_is_left_when_grace_expires() {
        let mut t = Termination::new(GRACE);
        let t0 = Instant::now();
        t.poll(t0, &[10, 11]);
        assert_eq!(t.poll(t0 + GRACE, &[11]), sig(Signal::Kill, &[11]));
        assert_eq!(
            t.poll(t0 + GRACE + Duration::from_millis(1), &[11]),
            Action::Wait {
                until: t0 + GRACE + KILL_WAIT
            }
        );
        assert_eq!(
            t.poll(t0 + GRACE + Duration::from_millis(20), &[]),
            Action::Done(Ended::Killed)
        );
    }

    #[test]
    fn zero_grace_kills_at_once() {
        let mut t = Termination::new(Duration::ZERO);
        let t0 = Instant::now();
        assert_eq!(t.poll(t0, &[7]), sig(Signal::Kill, &[7]));
        assert_eq!(t.poll(t0, &[]), Action::Done(Ended::Killed));
    }

    #[test]
    fn processes_that_appear_during_grace_get_term_once() {
        let mut t = Termination::new(GRACE);
        let t0 = Instant::now();
        t.poll(t0, &[1]);
        let later = t0 + Duration::from_millis(100);
        assert_eq!(t.poll(later, &[1, 2]), sig(Signal::Term, &[2]));
        assert_eq!(t.poll(later, &[1, 2]), Action::Wait { until: t0 + GRACE });
    }

    #[test]
    fn processes_that_appear_after_the_kill_get_killed_too() {
        let mut t = Termination::new(Duration::ZERO);
        let t0 = Instant::now();
        t.poll(t0, &[1]);
        assert_eq!(t.poll(t0, &[1, 3]), sig(Signal::Kill, &[3]));
    }

    #[test]
    fn survivors_are_reported_after_the_kill_wait() {
        let mut t = Termination::new(GRACE).kill_wait(Duration::from_secs(1));
        let t0 = Instant::now();
        t.poll(t0, &[9]);
        t.poll(t0 + GRACE, &[9]);
        let end = t0 + GRACE + Duration::from_secs(1);
        assert_eq!(t.poll(end, &[9]), Action::Done(Ended::Survived(vec![9])));
        assert_eq!(
            t.poll(end, &[]),
            Action::Done(Ended::Survived(vec![9])),
            "done stays done"
        );
    }

    #[test]
    fn signalling_a_process_group_or_everyone_is_refused() {
        for pid in [0, -1, -42] {
            assert!(matches!(
                send_signal(pid, Signal::Term),
                Err(ProcessError::Sys { .. })
            ));
        }
    }

    #[test]
    fn stat_parsing_copes_with_odd_command_names() {
        let stat =
            "123 (a) b (c)) S 1 123 123 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 4242 1000 10";
        assert_eq!(parse_stat(stat), Some(('S', 4242)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = ProcessId::current();
        assert!(me.alive());
        let other = ProcessId {
            start: me.start + 1,
            ..me
        };
        assert!(!other.alive());
    }

    #[test]
    fn a_child_is_terminated_with_sigterm_and_reaped() {
        let mut child = match std::process::Command::new("sleep").arg("30").spawn() {
            Ok(c) => c,
            Err(e) => panic!("spawning sleep: {e}"),
        };
        let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
        let ended = terminate("sleep", GRACE, || match child.try_wait() {
            Ok(None) => vec![pid],
            _ => Vec::new(),
        });
        assert!(matches!(ended, Ok(Ended::Terminated)), "{ended:?}");
    }
}
