//! A background daemon that tells whoever started it, with one typed message on a pipe,
//! that it is ready (or why it failed), and then writes its output to a log of its own.
//!
//! The starter calls [`start_daemon`]; the daemon (the same program, started with other
//! arguments) calls [`Notifier::take_stdout`] first thing, does its setup, then
//! [`Notifier::ready`] or [`Notifier::failed`]. The message is one line of JSON, a
//! [`Readiness`], on the daemon's stdout pipe; nothing else is ever written to that pipe.

use super::terminate::terminate;
use super::ProcessError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The longest readiness message read (a larger one is an error).
const MAX_MESSAGE: u64 = 1 << 20;

/// The one message a daemon writes to its starter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Readiness<R> {
    /// Up and running; `R` says what came up.
    Ready(R),
    /// Setup failed; the daemon exits.
    Failed {
        /// The exit code the starter should exit with.
        exit_code: u8,
        /// What went wrong.
        message: String,
    },
}

/// A daemon that said it is ready.
#[derive(Clone, Debug, PartialEq)]
pub struct Daemon<R> {
    /// Its process id.
    pub pid: u32,
    /// What it reported.
    pub ready: R,
}

/// Start `cmd` as a daemon in a session of its own (Ctrl-C in the starter's terminal does
/// not reach it; it does not die with the starter) and wait for its [`Readiness`] message.
/// Its stdin is /dev/null, its stdout the readiness pipe, its stderr the starter's until it
/// is ready. `what` names it in errors.
///
/// Once it is ready the daemon is left running; the starter is expected to exit soon
/// (nobody reaps the daemon before then). A daemon that exits without a message, or sends
/// one that does not parse, is an error (the latter is also stopped).
pub fn start_daemon<R: DeserializeOwned>(
    cmd: &mut Command,
    what: &str,
) -> Result<Daemon<R>, ProcessError> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped());
    // SAFETY: the hook runs in the child between fork and exec and only calls setsid(2),
    // which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|error| ProcessError::Spawn {
        what: what.to_string(),
        error,
    })?;
    let pid = child.id();
    let Some(stdout) = child.stdout.take() else {
        return Err(ProcessError::Readiness {
            what: what.to_string(),
            detail: "no pipe to its stdout".into(),
        });
    };
    let mut line = Vec::new();
    let read = BufReader::new(stdout)
        .take(MAX_MESSAGE)
        .read_until(b'\n', &mut line);
    if let Err(error) = read {
        return Err(ProcessError::Sys {
            what: format!("reading the readiness message of {what} (pid {pid})"),
            error,
        });
    }
    if line.is_empty() {
        let status = child
            .wait()
            .map_or_else(|e| format!("unknown: {e}"), |s| s.to_string());
        return Err(ProcessError::DaemonExited {
            what: what.to_string(),
            status,
        });
    }
    match serde_json::from_slice::<Readiness<R>>(&line) {
        Ok(Readiness::Ready(ready)) => Ok(Daemon { pid, ready }),
        Ok(Readiness::Failed { exit_code, message }) => {
            let _ = child.wait();
            Err(ProcessError::DaemonFailed {
                what: what.to_string(),
                exit_code,
                message,
            })
        }
        Err(e) => {
            let id = i32::try_from(pid).unwrap_or(i32::MAX);
            let _ = terminate(what, Duration::from_secs(2), || match child.try_wait() {
                Ok(None) => vec![id],
                _ => Vec::new(),
            });
            Err(ProcessError::Readiness {
                what: what.to_string(),
                detail: format!("{e}: {}", String::from_utf8_lossy(&line).trim()),
            })
        }
    }
}

/// The daemon's end of the readiness pipe.
#[derive(Debug)]
pub struct Notifier {
    pipe: File,
}

impl Notifier {
    /// Take stdout over as the readiness pipe. Until the daemon is ready, whatever it prints
    /// to stdout goes to stderr instead, never into the pipe.
    pub fn take_stdout() -> Result<Notifier, ProcessError> {
        let fd = std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|error| ProcessError::Sys {
                what: "fcntl F_DUPFD_CLOEXEC stdout (the readiness pipe)".into(),
                error,
            })?;
        let stderr = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|error| ProcessError::Sys {
                what: "fcntl F_DUPFD_CLOEXEC stderr".into(),
                error,
            })?;
        redirect(stderr.as_raw_fd(), libc::STDOUT_FILENO, "stderr")?;
        Ok(Notifier {
            pipe: File::from(fd),
        })
    }

    /// Report readiness, then send stdout and stderr to `log` (created or truncated; to
    /// /dev/null if it cannot be), since the starter is about to exit.
    pub fn ready<R: Serialize>(self, ready: &R, log: &Path) -> Result<(), ProcessError> {
        self.send(&Readiness::Ready(ready))?;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        let (file, name) = match File::create(log) {
            Ok(f) => (f, log.display().to_string()),
            Err(_) => {
                let f = File::options()
                    .write(true)
                    .open("/dev/null")
                    .map_err(|error| ProcessError::Sys {
                        what: "opening /dev/null".into(),
                        error,
                    })?;
                (f, "/dev/null".to_string())
            }
        };
        redirect(file.as_raw_fd(), libc::STDOUT_FILENO, &name)?;
        redirect(file.as_raw_fd(), libc::STDERR_FILENO, &name)
    }

    /// Report that setup failed; the starter exits with `exit_code` and `message`.
    pub fn failed(self, exit_code: u8, message: &str) -> Result<(), ProcessError> {
        self.send(&Readiness::<()>::Failed {
            exit_code,
            message: message.to_string(),
        })
    }

    fn send<T: Serialize>(mut self, msg: &T) -> Result<(), ProcessError> {
        let mut text = serde_json::to_vec(msg).map_err(|e| ProcessError::Readiness {
            what: "this daemon".into(),
            detail: e.to_string(),
        })?;
        text.push(b'\n');
        self.pipe
            .write_all(&text)
            .map_err(|error| ProcessError::Sys {
                what: "writing the readiness message".into(),
                error,
            })
        // Dropping the pipe closes it: the starter reads to the end of the line and is done.
    }
}

/// Point descriptor `target` (stdout or stderr) at `fd`.
fn redirect(fd: RawFd, target: RawFd, name: &str) -> Result<(), ProcessError> {
    // SAFETY: dup2(2) onto one of this process's standard descriptors, from a descriptor the
    // caller keeps open for the call; Rust's stdout/stderr objects keep using the descriptor
    // numbers, which now refer to the new file.
    if unsafe { libc::dup2(fd, target) } < 0 {
        return Err(ProcessError::Sys {
            what: format!("dup2 {name} onto descriptor {target}"),
            error: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Up {
        name: String,
    }

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn readiness_is_one_tagged_json_line() {
        let r = Readiness::Ready(Up { name: "x".into() });
        let text = serde_json::to_string(&r).map_err(|e| e.to_string());
        assert_eq!(text.as_deref(), Ok(r#"{"ready":{"name":"x"}}"#));
        let f: Result<Readiness<Up>, _> =
            serde_json::from_str(r#"{"failed":{"exit_code":5,"message":"no"}}"#);
        assert!(matches!(f, Ok(Readiness::Failed { exit_code: 5, .. })));
    }

    #[test]
    fn a_ready_daemon_is_returned_with_its_message() {
        let d = start_daemon::<Up>(
            &mut sh(r#"echo '{"ready":{"name":"wan"}}'; exec sleep 30"#),
            "a test daemon",
        );
        let d = match d {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(d.ready, Up { name: "wan".into() });
        let id = super::super::ProcessId::of(d.pid);
        let stopped = id.map(|p| p.terminate("a test daemon", Duration::from_secs(1)));
        assert!(matches!(stopped, Some(Ok(_))), "{stopped:?}");
    }

    #[test]
    fn a_failed_daemon_gives_its_code_and_message() {
        let e = start_daemon::<Up>(
            &mut sh(r#"echo '{"failed":{"exit_code":5,"message":"name taken"}}'; exit 5"#),
            "a test daemon",
        );
        match e {
            Err(ProcessError::DaemonFailed {
                exit_code, message, ..
            }) => {
                assert_eq!((exit_code, message.as_str()), (5, "name taken"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_daemon_that_says_nothing_or_garbage_is_an_error() {
        let silent = start_daemon::<Up>(&mut sh("exit 3"), "a silent daemon");
        assert!(matches!(silent, Err(ProcessError::DaemonExited { .. })));
        let garbage = start_daemon::<Up>(&mut sh("echo ready; exec sleep 30"), "a chatty daemon");
        match garbage {
            Err(e @ ProcessError::Readiness { .. }) => {
                assert!(e.to_string().contains("a chatty daemon"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }
}
