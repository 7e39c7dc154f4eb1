//! The client's use of the path database ([`tcptune_pathdb`], whose rules are
//! [`tcptune_core::pathdb`]'s): open it and fetch the peer's entries on a thread beside the
//! control connection's handshake, use them if they arrive in time, record the probe's and
//! the transfer's measurements, and turn whatever went wrong into one warning of the report.
//! Nothing here is ever fatal to a transfer, and the database is never on the critical path
//! of its first byte.
//!
//! Call order: [`PathDbSession::start`] before connecting, [`PathDbSession::set_local_addr`]
//! once connected, [`PathDbSession::lookup`] once the RTT is known (it waits at most
//! [`lookup_wait`] for the fetch), [`PathDbSession::record`] as measurements come, and
//! [`PathDbSession::into_report`] at the end (it writes what was recorded meanwhile, waiting
//! at most [`FLUSH_WAIT`] for a database that had not answered yet).
//!
//! [`default_location`] and the store itself are re-exported, so that
//! `tcptune_transfer::pathdb::default_location` keeps working.

use crate::report::PathDbReport;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;
use tcptune_core::pathdb::{Direction, Known, Measurement, PathDbPolicy};
pub use tcptune_pathdb::{default_location, Location, PathStore, Source, ENV_VAR};
use tcptune_pathdb::{is_postgres_url, Host, StoredEntry};

/// The longest wait at the end of a transfer for a database that had not answered yet, to
/// record what the transfer measured and to tell a slow database from a broken one.
pub const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// How long a lookup waits for the database after the handshake: a quarter of the path's
/// RTT, at least 1 ms, for a database on another machine; for a local SQLite file (no
/// network round trip, and the file's own busy timeout bounds it) as long as opening it
/// takes, as before.
pub fn lookup_wait(rtt: Duration, remote: bool) -> Duration {
    if remote {
        (rtt / 4).max(Duration::from_millis(1))
    } else {
        tcptune_pathdb::BUSY_TIMEOUT * 2
    }
}

/// What the thread beside the handshake found.
struct Fetched {
    store: Option<PathStore>,
    rows: Vec<StoredEntry>,
    warnings: Vec<String>,
}

/// Where the database stands for this transfer.
#[allow(clippy::large_enum_variant)] // one per transfer
enum State {
    /// The thread has not answered yet.
    Pending(mpsc::Receiver<Fetched>),
    /// Open (or failed, with a warning already noted).
    Ready(Option<PathStore>),
    /// It did not answer in time: the transfer went on without it.
    GaveUp(mpsc::Receiver<Fetched>),
}

/// The path database for one transfer, and what it contributed (for the report).
pub(crate) struct PathDbSession {
    state: State,
    remote: bool,
    rows: Vec<StoredEntry>,
    host: Option<Host>,
    /// The lookup stopped waiting for the database after this long.
    gave_up_after: Option<Duration>,
    queued: Vec<(String, Direction, Source, Measurement)>,
    report: PathDbReport,
    policy: PathDbPolicy,
}

impl std::fmt::Debug for PathDbSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PathDbSession")
            .field("file", &self.report.file)
            .finish()
    }
}

impl PathDbSession {
    /// Open the database at `path` and fetch every entry of `peer` in `direction` on a
    /// thread of its own; a failure becomes a warning and the session goes on without it.
    pub(crate) fn start(path: &Path, peer: &str, direction: Direction) -> PathDbSession {
        let remote = path.to_str().is_some_and(is_postgres_url);
        let (tx, rx) = mpsc::channel();
        let (path_owned, peer) = (path.to_path_buf(), peer.to_string());
        let spawned = std::thread::Builder::new()
            .name("tcptune-pathdb-lookup".into())
            .spawn(move || {
                // The connection is bounded by the URL's connect_timeout and the queries by
                // the server's statement timeout: the thread always ends.
                let _ = tx.send(fetch(&path_owned, &peer, direction));
            });
        let mut report = PathDbReport {
            file: tcptune_pathdb::describe_location(path),
            used: false,
            entry_age_s: None,
            entry_samples: None,
            entry_full_pipe: None,
            queue_over_base_us: None,
            recorded: Vec::new(),
            warnings: Vec::new(),
        };
        let state = match spawned {
            Ok(_) => State::Pending(rx),
            Err(e) => {
                report
                    .warnings
                    .push(format!("path database: starting its thread: {e}"));
                State::Ready(None)
            }
        };
        PathDbSession {
            state,
            remote,
            rows: Vec::new(),
            host: None,
            gave_up_after: None,
            queued: Vec::new(),
            report,
            policy: PathDbPolicy::default(),
        }
    }

    /// Open the database at `path` and wait for it (for tests and callers without a
    /// handshake to overlap).
    #[cfg(test)]
    pub(crate) fn open(path: &Path, peer: &str, direction: Direction) -> PathDbSession {
        let mut s = PathDbSession::start(path, peer, direction);
        s.wait(lookup_wait(Duration::ZERO, false));
        s
    }

    /// The measuring connection's local address: entries are recorded as measured by this
    /// host at this address.
    pub(crate) fn set_local_addr(&mut self, addr: std::net::IpAddr) {
        let host = Host::this().with_addr(addr);
        if let State::Ready(Some(s)) = &mut self.state {
            s.set_host(host.clone());
        }
        self.host = Some(host);
    }

    fn arrived(&mut self, f: Fetched) {
        self.report.warnings.extend(f.warnings);
        self.rows = f.rows;
        let mut store = f.store;
        if let (Some(s), Some(h)) = (store.as_mut(), &self.host) {
            s.set_host(h.clone());
        }
        self.state = State::Ready(store);
    }

    /// Wait up to `wait` for the thread; on time out go on without it (the end of the
    /// transfer says whether it ever answered).
    fn wait(&mut self, wait: Duration) {
        let State::Pending(rx) = std::mem::replace(&mut self.state, State::Ready(None)) else {
            return;
        };
        match rx.recv_timeout(wait) {
            Ok(f) => self.arrived(f),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.gave_up_after = Some(wait);
                self.state = State::GaveUp(rx);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                self.report
                    .warnings
                    .push("path database: its thread ended without an answer".into());
            }
        }
    }

    fn take_warnings(&mut self) {
        if let State::Ready(Some(s)) = &mut self.state {
            self.report
                .warnings
                .extend(s.take_warnings().iter().map(ToString::to_string));
        }
    }

    /// The entry for this path that is fresh at `now_unix_s` (Unix seconds), if the
    /// database answered within [`lookup_wait`] (noted in the report, used or not).
    pub(crate) fn lookup(
        &mut self,
        peer: &str,
        direction: Direction,
        rtt: Duration,
        now_unix_s: f64,
    ) -> Option<Known> {
        self.wait(lookup_wait(rtt, self.remote));
        let known =
            tcptune_pathdb::lookup_in(&self.rows, peer, direction, rtt, now_unix_s, &self.policy);
        if let Some(k) = &known {
            self.report.entry_age_s = Some(k.age.as_secs_f64());
            self.report.entry_samples = Some(k.samples);
            self.report.entry_full_pipe = Some(k.full_pipe);
        }
        known
    }

    /// The smallest RTT the fresh entries of this path were measured at, any bucket
    /// ([`tcptune_pathdb::base_rtt_in`]), from the rows [`PathDbSession::lookup`] waited for.
    pub(crate) fn base_rtt(
        &self,
        peer: &str,
        direction: Direction,
        now_unix_s: f64,
    ) -> Option<Duration> {
        tcptune_pathdb::base_rtt_in(&self.rows, peer, direction, now_unix_s, &self.policy)
    }

    /// The entry found was matched at the path's base RTT, the handshake's RTT `over` it
    /// (another flow's queue): the report says so.
    pub(crate) fn note_queue_over_base(&mut self, over: Duration) {
        self.report.queue_over_base_us = Some(u64::try_from(over.as_micros()).unwrap_or(u64::MAX));
    }

    /// The entry found was used instead of probing.
    pub(crate) fn mark_used(&mut self) {
        self.report.used = true;
    }

    /// Record a measurement, made at its `at_unix_s` (when the path's RTT is known: without
    /// it the entry would land in a meaningless RTT bucket). A local file records at once;
    /// a database on another machine at the end, so that no round trip to it delays the
    /// transfer.
    pub(crate) fn record(
        &mut self,
        peer: &str,
        direction: Direction,
        rtt_known: bool,
        source: Source,
        m: &Measurement,
    ) {
        if !rtt_known {
            return;
        }
        self.queued.push((peer.to_string(), direction, source, *m));
        if !self.remote {
            self.flush(Duration::ZERO);
        }
    }

    /// Write what was recorded, waiting up to `wait` for a database that had not answered.
    /// A database that answers late, and works, was only slow: its answer is used for the
    /// records and nothing is said; one that fails or never answers says so in one line.
    fn flush(&mut self, wait: Duration) {
        let rx = match std::mem::replace(&mut self.state, State::Ready(None)) {
            State::Pending(rx) | State::GaveUp(rx) => Some(rx),
            ready => {
                self.state = ready;
                None
            }
        };
        if let Some(rx) = rx {
            match rx.recv_timeout(wait) {
                Ok(f) => self.arrived(f),
                Err(e) => {
                    let waited = self.gave_up_after.map_or(wait, |w| w + wait);
                    let mut state = State::Ready(None);
                    if let mpsc::RecvTimeoutError::Timeout = e {
                        if wait.is_zero() {
                            // Not the end yet: keep waiting for it in the background.
                            state = State::GaveUp(rx);
                        } else {
                            self.report.warnings.push(format!(
                                "path database {} did not answer within {:.1} ms: went on \
                                 as on a path never seen",
                                self.report.file,
                                waited.as_secs_f64() * 1e3
                            ));
                        }
                    }
                    self.state = state;
                    if !matches!(self.state, State::GaveUp(_)) {
                        self.queued.clear();
                    }
                    return;
                }
            }
        }
        let State::Ready(Some(store)) = &mut self.state else {
            self.queued.clear();
            return;
        };
        for (peer, direction, source, m) in std::mem::take(&mut self.queued) {
            match store.record(&peer, direction, &m, &source, &self.policy) {
                Ok(_) => self.report.recorded.push(source.as_str().to_string()),
                Err(e) => self.report.warnings.push(e.to_string()),
            }
        }
        self.take_warnings();
    }

    /// What the database contributed (after writing what was recorded).
    pub(crate) fn into_report(mut self) -> PathDbReport {
        self.flush(FLUSH_WAIT);
        self.take_warnings();
        // One line: a database that cannot be used says so once.
        self.report.warnings.dedup();
        self.report
    }
}

/// Open the database and fetch the peer's entries (run on the lookup thread).
fn fetch(path: &Path, peer: &str, direction: Direction) -> Fetched {
    match PathStore::open(path) {
        Ok(mut s) => {
            let mut warnings: Vec<String> =
                s.take_warnings().iter().map(ToString::to_string).collect();
            let rows = match s.candidates(peer, direction) {
                Ok(r) => r,
                Err(e) => {
                    warnings.push(e.to_string());
                    Vec::new()
                }
            };
            warnings.extend(s.take_warnings().iter().map(ToString::to_string));
            Fetched {
                store: Some(s),
                rows,
                warnings,
            }
        }
        Err(e) => Fetched {
            store: None,
            rows: Vec::new(),
            warnings: vec![format!("{e}; going on as on a path never seen")],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcptune_core::Rate;

    /// The wall clock's time in the tests (Unix seconds).
    const NOW: f64 = 1_704_164_645.0;

    fn probe(at_unix_s: f64) -> Measurement {
        Measurement {
            rate: Rate::mbit(10),
            min_rtt: Duration::from_millis(10),
            full_pipe: true,
            at_unix_s,
        }
    }

    #[test]
    fn an_unusable_database_becomes_a_warning_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("tcptune-session-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("not-a-db");
        std::fs::write(&path, "plain text").expect("write");
        let mut s = PathDbSession::open(&path, "10.0.0.2", Direction::Send);
        assert!(s
            .lookup("10.0.0.2", Direction::Send, Duration::from_millis(10), NOW)
            .is_none());
        s.record(
            "10.0.0.2",
            Direction::Send,
            true,
            Source::Probe,
            &probe(NOW),
        );
        let r = s.into_report();
        assert!(r.recorded.is_empty());
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        assert!(
            r.warnings[0].contains("not touching it"),
            "{:?}",
            r.warnings
        );
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "plain text");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_recorded_probe_is_found_by_the_next_session() {
        let dir = std::env::temp_dir().join(format!("tcptune-session2-{}", std::process::id()));
        let path = dir.join("paths.sqlite");
        let mut s = PathDbSession::open(&path, "10.0.0.2", Direction::Send);
        s.record(
            "10.0.0.2",
            Direction::Send,
            true,
            Source::Probe,
            &probe(NOW),
        );
        // Without an RTT nothing is recorded.
        s.record(
            "10.0.0.2",
            Direction::Send,
            false,
            Source::Transfer,
            &probe(NOW),
        );
        assert_eq!(s.into_report().recorded, ["probe"]);
        let mut s = PathDbSession::open(&path, "10.0.0.2", Direction::Send);
        let k = s
            .lookup(
                "10.0.0.2",
                Direction::Send,
                Duration::from_millis(11),
                NOW + 60.0,
            )
            .expect("found");
        assert_eq!(k.rate, Rate::mbit(10));
        // Its age is counted from the time it was recorded at to the time of the lookup.
        assert!((k.age.as_secs_f64() - 60.0).abs() < 1e-3, "{:?}", k.age);
        let r = s.into_report();
        assert_eq!(r.entry_samples, Some(1));
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_database_that_does_not_answer_is_given_up_with_one_warning() {
        // A listener that takes connections (the kernel's backlog) and never speaks, and a
        // port where nothing listens: either way the transfer goes on as on a new path,
        // with one warning, and nothing is recorded.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let closed_port = closed.local_addr().expect("addr").port();
        drop(closed);
        for port in [silent.local_addr().expect("addr").port(), closed_port] {
            let url = format!(
                "postgres://tt:secret@127.0.0.1:{port}/paths?sslmode=disable&connect_timeout=1"
            );
            let mut s = PathDbSession::start(Path::new(&url), "10.0.0.2", Direction::Send);
            s.set_local_addr("127.0.0.1".parse().expect("ip"));
            assert!(s
                .lookup("10.0.0.2", Direction::Send, Duration::from_millis(10), NOW)
                .is_none());
            s.record(
                "10.0.0.2",
                Direction::Send,
                true,
                Source::Probe,
                &probe(NOW),
            );
            let r = s.into_report();
            assert!(r.recorded.is_empty());
            assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
            assert!(!r.warnings[0].contains("secret"), "{:?}", r.warnings);
            assert!(!r.file.contains("secret"), "{}", r.file);
        }
    }
}
