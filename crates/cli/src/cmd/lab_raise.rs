//! The raised host configurations of `lab --remote` (kernel-only and user/kernel tuning):
//! both hosts' socket-buffer maxima raised while those cells run, and put back after them.
//! This host's through `hold_limits::hold` in this process; the far host's by a
//! `tcptune hold-limits` started over the same ssh as the transfers, which holds them until
//! its standard input closes (here when the cells are done; by ssh when the connection dies)
//! and journals them under `/run/tcptune/` so that a crash cannot leave them raised for good.
//!
//! The order: [`Raising::start`] (both holds, or the reason the cells cannot be applied),
//! the cells, [`Raising::finish`] (the far hold told to end, its answer awaited).

use crate::cmd::hold_limits::{self, Change, Held, Identity};
use crate::cmd::ssh::SshOpts;
use serde::Serialize;
use std::io::{BufRead as _, BufReader, Read as _};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tcptune_core::Bytes;
use tcptune_sys::process::{spawn, Supervised, Waited};
use tcptune_transfer::remote::RemoteSpec;

/// How long the far `hold-limits` may take to say it holds them (ssh's setup included).
const HOLD_DEADLINE: Duration = Duration::from_secs(60);
/// How long it may take to put them back once told.
const RELEASE_DEADLINE: Duration = Duration::from_secs(15);
/// The most of one line read from the far end (its answers are a few hundred bytes).
const LINE_BUDGET: u64 = 64 << 10;
/// The most of the far end's stderr kept for a message.
const STDERR_BUDGET: u64 = 16 << 10;

/// What was raised for the raised cells, for the report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct RaisedReport {
    /// The maxima asked for on both hosts, bytes.
    pub(crate) max_bytes: u64,
    /// What was raised on this host (the sender).
    pub(crate) here: Vec<Change>,
    /// What was raised on the far host (the receiver).
    pub(crate) there: Vec<Change>,
    /// Why a host raised fewer keys than asked (`here: ...`, `there: ...`).
    pub(crate) notes: Vec<String>,
    /// What went wrong putting them back, if anything.
    pub(crate) restore_errors: Vec<String>,
}

/// The far host's hold: the ssh child and its answers.
struct RemoteHold {
    child: Supervised,
    lines: mpsc::Receiver<String>,
    stderr: std::thread::JoinHandle<String>,
}

/// Both hosts' maxima raised (put back by [`Raising::finish`], or when dropped).
pub(crate) struct Raising {
    here: Option<Held>,
    there: Option<RemoteHold>,
    pub(crate) report: RaisedReport,
}

/// The last non-empty line of `text` (the far end's words), escaped and cut as a client's
/// strings are for the server's log, for a one-line reason.
fn last_line(text: &str) -> String {
    let line = text
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    tcptune_transfer::server::escape(line, 300)
}

/// What a holder raised, and why it left keys out.
pub(crate) type Answer = (Vec<Change>, Option<String>);

/// The far host's answer (pure): its changes and why it left keys out, or why it holds
/// nothing.
pub(crate) fn parse_answer(line: &str) -> Result<Answer, String> {
    let v: serde_json::Value = serde_json::from_str(line.trim())
        .map_err(|_| format!("an answer that is not hold-limits': '{}'", last_line(line)))?;
    match v["event"].as_str() {
        Some("held") => {
            let changes = v["changes"].as_array().ok_or("no changes in its answer")?;
            let changes = changes
                .iter()
                .take(16)
                .map(|c| Change {
                    key: last_line(c["key"].as_str().unwrap_or("?")),
                    before: last_line(c["before"].as_str().unwrap_or("?")),
                    set: last_line(c["set"].as_str().unwrap_or("?")),
                })
                .collect();
            Ok((changes, v["note"].as_str().map(last_line)))
        }
        Some("error") => Err(last_line(v["error"].as_str().unwrap_or("unknown error"))),
        _ => Err(format!("an unexpected answer: '{}'", last_line(line))),
    }
}

/// Put back what a `lab --remote` or `hold-limits` killed in this network namespace left
/// raised (nothing without root: it could not have raised anything).
pub(crate) fn recover_here() -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    let me = hold_limits::identity()?;
    crate::cmd::agent_limits::recover_as(
        &hold_limits::journal_path(&me),
        false,
        "hold-limits",
        "raising the limits",
    )
}

impl Raising {
    /// Raise this host's maxima to `max` (needs root here), then the far host's over ssh
    /// (needs root there). `Err` is the reason the raised cells cannot be applied; nothing
    /// stays raised then.
    pub(crate) fn start(remote: &str, ssh: &SshOpts, max: Bytes) -> Result<Raising, String> {
        let me = hold_limits::identity().map_err(|e| format!("{e:#}"))?;
        let here =
            hold_limits::hold(&me, None, max, "lab --remote's raised cells end").map_err(|e| {
                format!(
                    "raising this host's net.core.rmem_max/wmem_max and tcp_rmem/tcp_wmem \
                     maxima: {e:#} (run lab --remote as root to apply it)"
                )
            })?;
        let mut report = RaisedReport {
            max_bytes: max.0,
            here: here.changes.clone(),
            notes: here.note.iter().map(|n| format!("here: {n}")).collect(),
            ..RaisedReport::default()
        };
        let there = match start_remote(remote, ssh, max, &me) {
            Ok((hold, (changes, note))) => {
                report.there = changes;
                report.notes.extend(note.map(|n| format!("there: {n}")));
                hold
            }
            Err(why) => {
                here.release();
                return Err(format!(
                    "raising the remote host's limits: {why} (it needs root on the remote \
                     host: log in as root there, e.g. root@HOST; the hosts' limits are in the \
                     report)"
                ));
            }
        };
        Ok(Raising {
            here: Some(here),
            there: Some(there),
            report,
        })
    }

    /// Put both hosts' maxima back: the far hold's input closed, its `released` awaited.
    pub(crate) fn finish(mut self) -> RaisedReport {
        self.finish_inner();
        std::mem::take(&mut self.report)
    }

    fn finish_inner(&mut self) {
        if let Some(mut hold) = self.there.take() {
            // Closing its input tells it to put them back.
            drop(hold.child.child_mut().stdin.take());
            let released = hold
                .lines
                .recv_timeout(RELEASE_DEADLINE)
                .is_ok_and(|l| l.contains("\"released\""));
            match hold
                .child
                .wait_until(Some(Instant::now() + RELEASE_DEADLINE), || false)
            {
                Ok(Waited::Exited(_)) => {}
                _ => {
                    let _ = hold.child.terminate();
                }
            }
            if !released {
                let err = hold.stderr.join().unwrap_or_default();
                self.report.restore_errors.push(format!(
                    "the remote host did not say it put its limits back ({}); its journal \
                     under /run/tcptune/ has them: the next hold-limits there puts them back",
                    match last_line(&err) {
                        l if l.is_empty() => "no answer".to_string(),
                        l => l,
                    }
                ));
            }
        }
        if let Some(here) = self.here.take() {
            here.release();
        }
    }
}

impl Drop for Raising {
    fn drop(&mut self) {
        self.finish_inner();
    }
}

/// Start `hold-limits` on the far host; its changes once it holds them.
fn start_remote(
    remote: &str,
    ssh: &SshOpts,
    max: Bytes,
    me: &Identity,
) -> Result<(RemoteHold, Answer), String> {
    let spec = RemoteSpec::new(
        remote,
        ssh.rsh.as_deref(),
        ssh.remote_tcptune.as_deref(),
        None,
    )?;
    let argv = spec.argv_running(&[
        "hold-limits".into(),
        "--json".into(),
        "--max".into(),
        max.0.to_string(),
        "--caller-kernel".into(),
        me.boot_id.clone(),
        "--caller-netns".into(),
        // The link's words reach the remote shell: only its digits and brackets matter.
        me.netns
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == ':')
            .collect(),
    ]);
    let (prog, args) = argv.split_first().ok_or("no remote shell")?;
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = spawn(&mut cmd, format!("{prog} hold-limits")).map_err(|e| e.to_string())?;
    let stdout = child.child_mut().stdout.take().ok_or("no stdout")?;
    let stderr = child.child_mut().stderr.take().ok_or("no stderr")?;
    let (tx, lines) = mpsc::channel();
    std::thread::Builder::new()
        .name("hold-remote-out".into())
        .spawn(move || {
            let mut r = BufReader::new(stdout.take(LINE_BUDGET * 4));
            loop {
                let mut line = String::new();
                match (&mut r).take(LINE_BUDGET).read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            return;
                        }
                    }
                }
            }
        })
        .map_err(|e| e.to_string())?;
    let stderr = std::thread::Builder::new()
        .name("hold-remote-err".into())
        .spawn(move || {
            let mut buf = Vec::new();
            let mut s = stderr;
            let _ = (&mut s).take(STDERR_BUDGET).read_to_end(&mut buf);
            // Drain the rest so the far end never blocks on a full pipe.
            let _ = std::io::copy(&mut s, &mut std::io::sink());
            String::from_utf8_lossy(&buf).into_owned()
        })
        .map_err(|e| e.to_string())?;
    match lines.recv_timeout(HOLD_DEADLINE) {
        Ok(line) => match parse_answer(&line) {
            Ok(answer) => Ok((
                RemoteHold {
                    child,
                    lines,
                    stderr,
                },
                answer,
            )),
            Err(why) => {
                // An older far end (no hold-limits), a shell's complaint: its stderr says
                // more than its first line did.
                let _ = child.wait_until(Some(Instant::now() + Duration::from_secs(5)), || false);
                let _ = child.terminate();
                let err = last_line(&stderr.join().unwrap_or_default());
                Err(if err.is_empty() || err.contains(&why) {
                    why
                } else {
                    format!("{why}: {err}")
                })
            }
        },
        Err(_) => {
            let _ = child.terminate();
            let err = stderr.join().unwrap_or_default();
            Err(match last_line(&err) {
                l if l.is_empty() => format!(
                    "hold-limits gave no answer within {} s",
                    HOLD_DEADLINE.as_secs()
                ),
                l => l,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_far_hosts_answer_is_its_changes_or_its_reason() {
        let held = r#"{"schema_version":1,"event":"held","host":{"boot_id":"b","netns":"net:[1]"},"changes":[{"key":"net.ipv4.tcp_rmem","before":"4096 131072 6291456","set":"4096 131072 134217728"}]}"#;
        let (c, note) = parse_answer(held).expect("held");
        assert_eq!(note, None);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].set, "4096 131072 134217728");
        let err = r#"{"schema_version":1,"event":"error","error":"raising the host's socket-buffer maxima needs root (this is uid 1000)"}"#;
        assert!(parse_answer(err).expect_err("error").contains("needs root"));
        assert!(parse_answer("bash: tcptune: command not found\n").is_err());
        // What the far end says is cut and stripped of control characters.
        let hostile = format!(
            r#"{{"event":"error","error":"a\u001b[2Jb{}"}}"#,
            "x".repeat(1000)
        );
        let why = parse_answer(&hostile).expect_err("error");
        assert!(
            why.chars().count() < 320 && !why.contains('\u{1b}'),
            "{why}"
        );
    }
}
