//! The driver: start the remote shell, read the far end's line with a timeout, keep the
//! process in a guard that ends it.

use super::{classify, parse_line, LineError, Offer, RemoteSpec, SshFailure, LINE_TIMEOUT};
use super::{MAX_LINE, MAX_NOISE};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long dropping a [`RemoteGuard`] waits for the far end to exit by itself after its
/// stdin closed, before it kills the remote shell.
const EXIT_GRACE: Duration = Duration::from_secs(3);
/// The far end's stderr kept for classifying a failure (its end).
const STDERR_KEEP: usize = 16 * 1024;

/// Why the far end could not be started.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// ssh (or the far end) failed before its line: see [`SshFailure::message`].
    #[error("{message}")]
    Ssh {
        /// What it means.
        failure: SshFailure,
        /// The line for the user, with the fix.
        message: String,
    },
    /// The far end's line was unusable.
    #[error("{0}")]
    Line(#[from] LineError),
    /// No line within the time.
    #[error("{0}")]
    Timeout(String),
}

/// The far end's process. Dropping it closes the far end's stdin (the far end exits on
/// EOF), waits up to a few seconds for it to exit, then kills the remote shell and reaps
/// it: no process is left behind.
#[derive(Debug)]
pub struct RemoteGuard {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl RemoteGuard {
    /// Close the far end's stdin and wait for it as dropping does; the exit status, if it
    /// exited (`None`: it had to be killed).
    pub fn finish(mut self) -> Option<ExitStatus> {
        self.end()
    }

    fn end(&mut self) -> Option<ExitStatus> {
        drop(self.stdin.take());
        let deadline = Instant::now() + EXIT_GRACE;
        loop {
            match self.child.try_wait() {
                Ok(Some(st)) => return Some(st),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => break,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }
}

impl Drop for RemoteGuard {
    fn drop(&mut self) {
        if self.stdin.is_some() {
            self.end();
        }
    }
}

/// The far end's stderr: kept (its end) for classifying a failure, and copied to this
/// process's stderr once `forward` is set (after the line: what the far end says then is
/// for the user, as ssh shows it).
#[derive(Clone, Default)]
struct Stderr {
    kept: Arc<Mutex<Vec<u8>>>,
    forward: Arc<AtomicBool>,
    /// The pipe reached EOF: everything is kept.
    done: Arc<AtomicBool>,
}

impl Stderr {
    fn pump(&self, mut r: impl Read) {
        let mut buf = [0u8; 4096];
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) | Err(_) => {
                    self.done.store(true, Ordering::Release);
                    return;
                }
                Ok(n) => n,
            };
            if self.forward.load(Ordering::Acquire) {
                let _ = std::io::stderr().write_all(&buf[..n]);
            } else if let Ok(mut k) = self.kept.lock() {
                k.extend_from_slice(&buf[..n]);
                if k.len() > STDERR_KEEP {
                    let cut = k.len() - STDERR_KEEP;
                    k.drain(..cut);
                }
            }
        }
    }

    fn text(&self) -> String {
        self.kept
            .lock()
            .map(|k| String::from_utf8_lossy(&k).into_owned())
            .unwrap_or_default()
    }
}

/// What the stdout reader found.
enum Found {
    Offer(Offer),
    Bad(LineError),
    /// EOF (or a read error) before the line.
    Eof,
    /// Too much other output.
    Noise,
}

/// Read lines until the offer, within [`MAX_LINE`] per line and [`MAX_NOISE`] in all; then
/// keep draining stdout so that the far end never blocks on it.
fn read_offer(out: impl Read, tx: mpsc::Sender<Found>) {
    let mut r = BufReader::new(out);
    let mut seen = 0usize;
    let mut line = Vec::new();
    let found = loop {
        line.clear();
        match r
            .by_ref()
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => break Found::Eof,
            Ok(n) => seen += n,
        }
        let text = String::from_utf8_lossy(&line);
        match parse_line(&text) {
            Ok(Some(o)) if line.ends_with(b"\n") => break Found::Offer(o),
            Ok(Some(_)) => break Found::Bad(LineError::Malformed("too long")),
            Err(e) => break Found::Bad(e),
            Ok(None) if seen > MAX_NOISE => break Found::Noise,
            Ok(None) => {}
        }
    };
    let _ = tx.send(found);
    let _ = std::io::copy(&mut r, &mut std::io::sink());
}

/// Start the far end as `spec` says and wait for its line (at most [`LINE_TIMEOUT`]).
pub fn launch(spec: &RemoteSpec) -> Result<(Offer, RemoteGuard), RemoteError> {
    let argv = spec.argv();
    let mut child = match Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(_) => {
            let failure = SshFailure::NoRsh;
            let message = failure.message(spec);
            return Err(RemoteError::Ssh { failure, message });
        }
    };
    let stdin = child.stdin.take();
    let err = Stderr::default();
    if let Some(e) = child.stderr.take() {
        let err = err.clone();
        std::thread::spawn(move || err.pump(e));
    }
    let (tx, rx) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || read_offer(out, tx));
    }
    let mut guard = RemoteGuard { child, stdin };
    match rx.recv_timeout(LINE_TIMEOUT) {
        Ok(Found::Offer(o)) => {
            err.forward.store(true, Ordering::Release);
            // What the far end said before its line (warnings of ssh) is not an error.
            Ok((o, guard))
        }
        Ok(Found::Bad(e)) => Err(RemoteError::Line(e)),
        Ok(Found::Noise) => Err(RemoteError::Line(LineError::Malformed(
            "more than 64 KiB of other output first: is a login script on the far host printing something?",
        ))),
        Ok(Found::Eof) | Err(mpsc::RecvTimeoutError::Disconnected) => {
            Err(failed(&mut guard, spec, &err))
        }
        Err(mpsc::RecvTimeoutError::Timeout) => Err(RemoteError::Timeout(format!(
            "{} {}: the far end did not answer within {} s (is ssh waiting for something? `{} {} true` must work)",
            spec.rsh[0],
            spec.target,
            LINE_TIMEOUT.as_secs(),
            spec.rsh[0],
            spec.target
        ))),
    }
}

/// The remote shell ended before the line: wait for its status and stderr, classify.
fn failed(guard: &mut RemoteGuard, spec: &RemoteSpec, err: &Stderr) -> RemoteError {
    let status = guard.end().and_then(|s| s.code());
    // The stderr thread may still be reading the last bytes: give it a moment.
    let deadline = Instant::now() + Duration::from_millis(500);
    while !err.done.load(Ordering::Acquire) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let failure = classify(status, &err.text());
    let message = failure.message(spec);
    RemoteError::Ssh { failure, message }
}
