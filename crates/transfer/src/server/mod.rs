//! `tcptune serve`: accepts any number of clients on one port, each a control connection
//! plus data connections that name their session in a hello (so one firewall rule serves
//! everything).
//!
//! The control plane is one event loop ([`mio`]: a thin, well-kept wrapper over epoll that
//! fits a sans-IO state machine without an async runtime): accepting, handshakes and idle
//! control connections cost a few kilobytes each, not a thread, so thousands of pending
//! connections do not delay a good client. Every rule is the [`crate::session`] state
//! machines'; this driver moves bytes. Data streams run on the engine's blocking threads,
//! which measure faster than an event loop for bulk data (see `docs/BENCHMARKS.md`).
//!
//! Bounded everywhere (see [`ServerConfig`]): pending connections per address and in all,
//! sessions per address and in all, streams per session (within the process's file
//! descriptors, `RLIMIT_NOFILE` raised to its hard limit at start), message size and count,
//! total bytes, duration, a session's lifetime; first-frame, handshake and idle timeouts.
//! A client that sends garbage, stops mid-handshake or disappears gets a clear error where
//! it can still hear one, and only its own session ends. Nothing a peer sends can panic the
//! server or reach the log unescaped.
//!
//! ```no_run
//! use tcptune_transfer::server::{run, ServerConfig, Shutdown};
//! let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
//! let shutdown = Shutdown::new();
//! let s2 = shutdown.clone();
//! let t = std::thread::spawn(move || run(listener, ServerConfig::default(), s2));
//! // ... run clients against it ...
//! shutdown.trigger();
//! t.join().unwrap().unwrap();
//! ```

mod driver;
pub mod metrics;
mod paths;

use crate::auth::Secret;
use crate::proto::ServerLimits;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tcptune_core::pathdb::RecordBounds;

pub use crate::session::server::{validate, MAX_PROBE};
pub use driver::run;
pub use metrics::ServeMetrics;
pub use tcptune_proto::escape;
pub use tcptune_proto::events::{BudgetShare, QueueOutcome, ServerEvent, ServerStats};
pub use tcptune_proto::session::endpoint::SlotRules;

/// The default port of `tcptune serve`.
pub const DEFAULT_PORT: u16 = 5310;

/// Tells a running server to stop accepting and end its sessions.
#[derive(Clone, Debug, Default)]
pub struct Shutdown(Arc<AtomicBool>);

impl Shutdown {
    /// A handle that has not fired.
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Stop the server: it stops accepting, aborts running sessions and `run` returns
    /// (within about 100 ms).
    pub fn trigger(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether [`Shutdown::trigger`] was called.
    pub fn is_triggered(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// A log callback.
pub type ServerLog = Arc<dyn Fn(&ServerEvent) + Send + Sync>;

/// How the server behaves. `Default` gives sensible public-server bounds.
#[derive(Clone)]
pub struct ServerConfig {
    /// Per-session bounds, also told to clients.
    pub limits: ServerLimits,
    /// Sessions running at once.
    pub max_sessions: u32,
    /// Sessions running at once from one address.
    pub max_sessions_per_addr: u32,
    /// Connections not yet part of a session (handshakes, data connections waiting for
    /// their session), in all; a new one over the bound replaces the oldest.
    pub max_pending: u32,
    /// The same, from one address.
    pub max_pending_per_addr: u32,
    /// Time a new connection has to send its first complete message (hello).
    pub first_frame_timeout: Duration,
    /// Time a client has to complete its handshake, and to connect an announced stream.
    pub handshake_timeout: Duration,
    /// A session with no control message and no data for this long is ended.
    pub idle_timeout: Duration,
    /// Slots nobody can hold: the minimum rate a session must move (after a grace period,
    /// over a window) to keep its slot when another client needs one, and the wait queue
    /// of clients over a limit.
    pub slots: SlotRules,
    /// Require clients to prove knowledge of this secret.
    pub secret: Option<Secret>,
    /// Use `SO_*BUFFORCE` for the server's buffers when the process has `CAP_NET_ADMIN`.
    pub force_buffers: bool,
    /// Careful resume for clients that receive: a large initial window through a route to
    /// the client while its data connections open (`serve --careful-resume`).
    pub careful_resume: bool,
    /// Return after the first session that got past the handshake ends.
    pub one_off: bool,
    /// A memory budget for the send buffers of every `psc` and `auto` stream of every
    /// session together (`SO_SNDBUF` units, bytes): one PSC pool shared max-min fairly
    /// (Appendix A of Semke et al.), recomputed every 500 ms; `None`: each transfer on its
    /// own, as a client is.
    pub memory_budget: Option<u64>,
    /// Called for every session start/end and (rate-limited) refusal.
    pub log: Option<ServerLog>,
    /// A directory shared with `tcptune cp` clients (`serve --root DIR`); without one,
    /// copies are refused.
    pub files: Option<FileShare>,
    /// Record what the server measures of every client's path in this path database
    /// (`None`: no database; advice is then always measured).
    pub path_db: Option<PathBuf>,
    /// What clients can make the server record at most.
    pub path_db_bounds: RecordBounds,
    /// Count what the server does for Prometheus (`serve --metrics`).
    pub metrics: Option<std::sync::Arc<ServeMetrics>>,
}

/// A directory the server shares with `tcptune cp` clients. Every path a client names is
/// resolved beneath it by the kernel (`openat2` with `RESOLVE_BENEATH`): `..`, absolute
/// paths and symlinks that lead outside are refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileShare {
    /// The directory.
    pub root: PathBuf,
    /// Refuse every copy to the server.
    pub read_only: bool,
    /// Most files and directories in one copy (each costs the receiver some memory).
    pub max_files: u64,
    /// Largest file a client may push (`--max-file-size`).
    pub max_file_size: u64,
    /// Most bytes of a pushed copy's manifest (`--max-manifest`): the memory it may take.
    pub max_manifest_bytes: u64,
    /// Resolve every path beneath `root` (the default, `serve --root`). `false` is
    /// `serve --stdio`'s mode: `root` is the user's home, relative paths start there and
    /// absolute paths are taken as they are, as scp's are, with the permissions of the user
    /// the process runs as ([`tcptune_sys::fs::Dir::open_unconfined`]).
    pub confined: bool,
}

impl FileShare {
    /// Share `root`, writable, with the default bound on files per copy.
    pub fn new(root: impl Into<PathBuf>) -> FileShare {
        FileShare {
            root: root.into(),
            read_only: false,
            max_files: DEFAULT_MAX_FILES,
            max_file_size: crate::files::DEFAULT_MAX_FILE_SIZE,
            max_manifest_bytes: crate::files::DEFAULT_MAX_MANIFEST_BYTES,
            confined: true,
        }
    }
}

/// The default of [`FileShare::max_files`].
pub const DEFAULT_MAX_FILES: u64 = 250_000;

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("limits", &self.limits)
            .field("max_sessions", &self.max_sessions)
            .field("max_sessions_per_addr", &self.max_sessions_per_addr)
            .field("max_pending", &self.max_pending)
            .field("max_pending_per_addr", &self.max_pending_per_addr)
            .field("first_frame_timeout", &self.first_frame_timeout)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("slots", &self.slots)
            .field("secret", &self.secret.is_some())
            .field("force_buffers", &self.force_buffers)
            .field("one_off", &self.one_off)
            .field("memory_budget", &self.memory_budget)
            .field("files", &self.files)
            .field("path_db", &self.path_db)
            .field("path_db_bounds", &self.path_db_bounds)
            .field("metrics", &self.metrics.is_some())
            .finish()
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            limits: ServerLimits {
                max_streams: 64,
                max_message_size: 16 * 1024 * 1024,
                max_messages: 1 << 24,
                max_total_bytes: 1 << 40,
                max_duration_ms: 3_600_000,
            },
            max_sessions: 16,
            max_sessions_per_addr: 4,
            max_pending: 4096,
            max_pending_per_addr: 128,
            first_frame_timeout: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            slots: SlotRules::default(),
            secret: None,
            force_buffers: false,
            careful_resume: false,
            one_off: false,
            memory_budget: None,
            log: None,
            files: None,
            path_db: None,
            path_db_bounds: RecordBounds::default(),
            metrics: None,
        }
    }
}

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listening socket or the event loop failed.
    #[error("{op}: {source}")]
    Io {
        /// What was attempted.
        op: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

/// The bounds a server applies, for display (`tcptune serve` prints them).
pub fn describe_limits(cfg: &ServerConfig) -> String {
    let l = &cfg.limits;
    format!(
        "max {} sessions ({} per address{}), {} streams/session, {} message size, {} messages, {} total, {:.0}s duration; {} pending connections ({} per address); first message within {:.0}s, handshake {:.0}s, idle timeout {:.0}s{}",
        cfg.max_sessions,
        cfg.max_sessions_per_addr,
        if cfg.secret.is_some() {
            ", not for clients that prove the secret"
        } else {
            ""
        },
        l.max_streams,
        tcptune_core::Bytes(l.max_message_size),
        l.max_messages,
        tcptune_core::Bytes(l.max_total_bytes),
        l.max_duration_ms as f64 / 1000.0,
        cfg.max_pending,
        cfg.max_pending_per_addr,
        cfg.first_frame_timeout.as_secs_f64(),
        cfg.handshake_timeout.as_secs_f64(),
        cfg.idle_timeout.as_secs_f64(),
        if cfg.secret.is_some() { ", shared secret required" } else { "" }
    ) + &format!(
        "; a session moving under {}/s after {:.0}s (over {:.0}s) gives its slot to a client that needs it; {} clients wait for a slot ({} per address, up to {:.0}s)",
        tcptune_core::Bytes(cfg.slots.min_rate),
        cfg.slots.grace.as_secs_f64(),
        cfg.slots.window.as_secs_f64(),
        cfg.slots.max_queue,
        cfg.slots.max_queue_per_addr,
        cfg.slots.queue_timeout.as_secs_f64(),
    ) + &match &cfg.files {
        Some(f) => format!(
            "; sharing {}{} (at most {} files per copy, {} per file, {} of manifest)",
            f.root.display(),
            if f.read_only { " read-only" } else { "" },
            f.max_files,
            tcptune_core::Bytes(f.max_file_size),
            tcptune_core::Bytes(f.max_manifest_bytes)
        ),
        None => String::new(),
    }
}
