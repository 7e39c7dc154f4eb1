//! The server's path database on a thread of its own: SQLite may wait (another process's
//! transaction, a slow disk), PostgreSQL is a network round trip away, and the event loop must never wait with it. The loop hands
//! requests over a bounded queue (a full queue drops a record and answers a lookup with
//! nothing, never blocks) and takes the answers back through its waker.
//!
//! Records are bounded by [`RecordBounds`] ([`PathStore::record_bounded`]): no client, nor
//! a crowd of addresses, can make the database grow past its bounds or push fresh entries
//! out. A problem with the file becomes a warning for the log, said once per kind, and
//! the server goes on without recording.

use crate::session::server::advise::KnownPath;
use crate::session::SessionId;
use mio::Waker;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tcptune_core::pathdb::{Direction, Measurement, PathDbPolicy, RecordBounds};
use tcptune_pathdb::{Host, PathStore, Recorded, Source};
use tcptune_sys::os::unix_now;

/// Requests waiting for the database at most.
const QUEUE: usize = 64;
/// After the server stops, the worker finishes what is queued within this long and drops
/// the rest.
const DRAIN: Duration = Duration::from_secs(3);

enum Request {
    Lookup {
        session: SessionId,
        peer: IpAddr,
        direction: Direction,
        rtt: Duration,
    },
    Record {
        peer: IpAddr,
        direction: Direction,
        measurement: Measurement,
        source: Source,
    },
}

/// An answer of the database.
#[derive(Debug)]
pub(crate) enum Reply {
    /// A lookup's result: the fresh entry of the path, if any.
    Lookup {
        session: SessionId,
        known: Option<KnownPath>,
    },
    /// What became of a record.
    Recorded(RecordOutcome),
    /// A problem with the database, for the log.
    Warning(String),
}

/// What became of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecordOutcome {
    Recorded,
    Full,
    Failed,
}

/// The database thread and its queues.
pub(crate) struct PathDbWorker {
    tx: Option<SyncSender<Request>>,
    replies: Receiver<Reply>,
    closing: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PathDbWorker {
    /// Start the thread; it opens the database at `path` itself (opening may wait too).
    pub(crate) fn start(
        path: PathBuf,
        bounds: RecordBounds,
        local_ip: Option<IpAddr>,
        waker: Arc<Waker>,
    ) -> std::io::Result<PathDbWorker> {
        let (tx, rx) = mpsc::sync_channel::<Request>(QUEUE);
        let (reply_tx, replies) = mpsc::channel::<Reply>();
        let closing = Arc::new(AtomicBool::new(false));
        let c = closing.clone();
        let thread = std::thread::Builder::new()
            .name("tcptune-pathdb".into())
            .spawn(move || {
                let send = |r: Reply| {
                    let _ = reply_tx.send(r);
                    let _ = waker.wake();
                };
                work(&path, &bounds, local_ip, &rx, &c, &send);
            })?;
        Ok(PathDbWorker {
            tx: Some(tx),
            replies,
            closing,
            thread: Some(thread),
        })
    }

    fn submit(&self, r: Request) -> bool {
        match self.tx.as_ref().map(|tx| tx.try_send(r)) {
            Some(Ok(())) => true,
            Some(Err(TrySendError::Full(_) | TrySendError::Disconnected(_))) | None => false,
        }
    }

    /// Look a path up; `false` when the queue is full (answer the session with nothing).
    pub(crate) fn lookup(
        &self,
        session: SessionId,
        peer: IpAddr,
        direction: Direction,
        rtt: Duration,
    ) -> bool {
        self.submit(Request::Lookup {
            session,
            peer,
            direction,
            rtt,
        })
    }

    /// Record a measurement; `false` when the queue is full (it is dropped).
    pub(crate) fn record(
        &self,
        peer: IpAddr,
        direction: Direction,
        measurement: Measurement,
        source: Source,
    ) -> bool {
        self.submit(Request::Record {
            peer,
            direction,
            measurement,
            source,
        })
    }

    /// The next answer, if any.
    pub(crate) fn poll(&self) -> Option<Reply> {
        self.replies.try_recv().ok()
    }
}

impl Drop for PathDbWorker {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::Release);
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn work(
    path: &std::path::Path,
    bounds: &RecordBounds,
    local_ip: Option<IpAddr>,
    rx: &Receiver<Request>,
    closing: &AtomicBool,
    send: &dyn Fn(Reply),
) {
    let policy = PathDbPolicy {
        max_entries: bounds.max_entries.max(1),
        ..PathDbPolicy::default()
    };
    let mut said: BTreeSet<String> = BTreeSet::new();
    let mut warn = |w: String| {
        // Each kind of problem once (the first words say the kind; paths and rows follow).
        let kind: String = w.chars().take(48).collect();
        if said.len() < 64 && said.insert(kind) {
            send(Reply::Warning(w));
        }
    };
    let mut store = match PathStore::open(path) {
        Ok(mut s) => {
            for w in s.take_warnings() {
                warn(w.to_string());
            }
            let host = Host::this();
            s.set_host(match local_ip {
                Some(ip) => host.with_addr(ip),
                None => host,
            });
            Some(s)
        }
        Err(e) => {
            warn(format!(
                "path database: {e}; clients' paths are not recorded"
            ));
            None
        }
    };
    let mut stop_by: Option<Instant> = None;
    while let Ok(req) = rx.recv() {
        // The turn's time: read once, when a request arrived (the database's answers are
        // as of then).
        let (now, unix) = (Instant::now(), unix_now());
        if closing.load(Ordering::Acquire) {
            let by = *stop_by.get_or_insert(now + DRAIN);
            if now >= by {
                continue;
            }
        }
        match req {
            Request::Lookup {
                session,
                peer,
                direction,
                rtt,
            } => {
                let known = match store
                    .as_mut()
                    .map(|s| s.lookup(&peer.to_string(), direction, rtt, unix, &policy))
                {
                    Some(Ok(k)) => k.map(|k| KnownPath {
                        rate: k.rate,
                        full_pipe: k.full_pipe,
                        min_rtt: k.min_rtt,
                        measured_at_unix_s: unix - k.age.as_secs_f64(),
                        samples: k.samples,
                    }),
                    Some(Err(e)) => {
                        warn(format!("path database: {e}"));
                        None
                    }
                    None => None,
                };
                send(Reply::Lookup { session, known });
            }
            Request::Record {
                peer,
                direction,
                measurement,
                source,
            } => {
                let outcome = match store.as_mut().map(|s| {
                    s.record_bounded(
                        &peer.to_string(),
                        direction,
                        &measurement,
                        &source,
                        &policy,
                        bounds,
                    )
                }) {
                    Some(Ok(Recorded::Refused)) => RecordOutcome::Full,
                    Some(Ok(_)) => RecordOutcome::Recorded,
                    Some(Err(e)) => {
                        warn(format!("path database: {e}"));
                        RecordOutcome::Failed
                    }
                    None => RecordOutcome::Failed,
                };
                send(Reply::Recorded(outcome));
            }
        }
        if let Some(s) = store.as_mut() {
            for w in s.take_warnings() {
                warn(w.to_string());
            }
        }
    }
}
