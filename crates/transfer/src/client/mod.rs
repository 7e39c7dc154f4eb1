//! `tcptune send`: connect to a tcptune server, measure the path, run the transfer with a
//! tuner on every stream at both ends, and return the [`Report`](crate::report::Report).
//!
//! The conversation's rules are [`crate::session::client`]'s state machine; this module
//! resolves the server, opens the control connection (its handshake gives the path's RTT
//! from `TCP_INFO`), decides how to learn the path's rate (the path database or a probe,
//! see [`measure`]) and drives the session ([`driver`]): one event loop over the control
//! connection, the data connections being opened, and the engine's wake-ups.
//!
//! ```no_run
//! use tcptune_transfer::client::{run, ClientConfig};
//! let cfg = ClientConfig::new("127.0.0.1:5310");
//! let report = run(&cfg, None).expect("transfer");
//! println!("{:.1} Mbit/s", report.end.sum_received.bits_per_second / 1e6);
//! ```

pub mod advise;
mod conversation;
pub mod copy;
pub(crate) mod driver;
mod error;
mod measure;
pub mod workload;

use crate::auth::Secret;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tcptune_core::{TuneMode, Tuner, TunerContext};

pub use driver::{run, transfer};
pub use error::{ClientError, ConfigError, ProtocolError, StreamFailed};
pub use workload::{Transferred, Workload};

/// What to run. Build with [`ClientConfig::new`] and adjust the public fields.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Server as `HOST`, `HOST:PORT` or `[V6]:PORT`.
    pub server: String,
    /// Port when `server` has none.
    pub port: u16,
    /// Local address to send from.
    pub bind: Option<IpAddr>,
    /// Tuning mode for both ends.
    pub tune: TuneMode,
    /// Parallel streams to start with (`-P`).
    pub streams: u32,
    /// Messages (message workload, `-n`).
    pub messages: u64,
    /// Bytes per message (`-l`).
    pub message_size: u64,
    /// Duration workload (`-t`): send for this long instead of a message count.
    pub duration: Option<Duration>,
    /// Cap on the message workload (`--max-time`).
    pub max_time: Option<Duration>,
    /// The server sends.
    pub reverse: bool,
    /// Keep every sample and change in the report (bounded per stream).
    pub samples: bool,
    /// Interval of `intervals[]` (`None`: no intervals).
    pub interval: Option<Duration>,
    /// Congestion control for the data connections (both ends).
    pub congestion: Option<String>,
    /// Shared secret for servers that require one.
    pub secret: Option<Secret>,
    /// Give up connecting (and waiting for the server to admit the session) after this long.
    pub connect_timeout: Duration,
    /// Give up when a stream or the server makes no progress for this long.
    pub idle_timeout: Duration,
    /// Wait this long in the server's queue when it has no session slot yet (`--wait`),
    /// then fail.
    pub wait: Duration,
    /// Told the client's place in the server's queue whenever it changes.
    pub on_queued: Option<OnQueued>,
    /// Use `SO_*BUFFORCE` on this end when the process has `CAP_NET_ADMIN`.
    pub force_buffers: bool,
    /// Most streams this client opens when tuners ask for more (the server's allowance also
    /// applies).
    pub max_streams: u32,
    /// Testing aid: the sender flips one byte of this message; the run must then fail with
    /// [`ClientError::Integrity`].
    pub corrupt_message: Option<u64>,
    /// Build this end's tuners with this instead of `tune` (the server still runs `tune`):
    /// for experimenting with a tuner of your own.
    pub custom_tuner: Option<CustomTuner>,
    /// The path database (see [`crate::pathdb`]): where a mode that needs the path's rate
    /// looks for a fresh estimate before probing, and where every transfer (and probe)
    /// records what it measured. `None` (the library's default): no database.
    /// `tcptune send` uses [`crate::pathdb::default_location`] unless told otherwise.
    pub path_db: Option<PathBuf>,
    /// Measure the path's rate when the mode needs one and the database has no fresh
    /// full-pipe estimate (default): `auto` in band on paths of 5 ms or more, `probe` with
    /// its pre-transfer probe. With `false` a database entry of any kind is used, and
    /// without one the mode goes without a rate.
    pub probe: bool,
    /// Careful resume (default): on a path the database knows (a fresh full-pipe entry whose
    /// RTT the control connection confirms), new connections to the server start with an
    /// initial window of their share of the saved rate x RTT (a per-destination route:
    /// needs `CAP_NET_ADMIN`; said in the report when missing), paced at the saved rate for
    /// their first round trips; `false`: `--no-resume-rate`.
    pub resume_rate: bool,
    /// Stop when this fires (Ctrl-C): the transfer ends at once at both ends and the report
    /// holds what moved (`end.tcptune.interrupted`); before the transfer began,
    /// [`ClientError::Interrupted`].
    pub cancel: Option<Cancel>,
}

/// A flag that interrupts a running transfer (see [`ClientConfig::cancel`]); a signal
/// handler may fire it.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<std::sync::atomic::AtomicBool>);

impl Cancel {
    /// A flag that has not fired.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Fire it.
    pub fn trigger(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether it fired.
    pub fn is_triggered(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The flag itself, for a signal handler (`signal_hook::flag::register` and the like).
    pub fn flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.0.clone()
    }
}

/// How long a client waits in a server's queue by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(60);

/// Called with the client's place in the server's queue (from 1) and when a slot is
/// expected to free (seconds, if the server said), whenever the place changes.
#[derive(Clone)]
pub struct OnQueued(pub Arc<dyn Fn(u32, Option<u64>) + Send + Sync>);

impl std::fmt::Debug for OnQueued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnQueued(..)")
    }
}

/// A function that builds a tuner for one stream of this end.
#[derive(Clone)]
pub struct CustomTuner(pub Arc<dyn Fn(TunerContext) -> Box<dyn Tuner> + Send + Sync>);

impl std::fmt::Debug for CustomTuner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CustomTuner(..)")
    }
}

impl ClientConfig {
    /// The paper's benchmark against `server`: 128 x 1 MiB over 1 stream, `auto` tuning.
    pub fn new(server: impl Into<String>) -> ClientConfig {
        ClientConfig {
            server: server.into(),
            port: crate::server::DEFAULT_PORT,
            bind: None,
            tune: TuneMode::Auto,
            streams: 1,
            messages: 128,
            message_size: 1 << 20,
            duration: None,
            max_time: None,
            reverse: false,
            samples: false,
            interval: Some(Duration::from_secs(1)),
            congestion: None,
            secret: None,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            wait: DEFAULT_WAIT,
            on_queued: None,
            force_buffers: false,
            max_streams: 64,
            corrupt_message: None,
            custom_tuner: None,
            path_db: None,
            probe: true,
            resume_rate: true,
            cancel: None,
        }
    }
}

/// Progress of a running transfer, for a live display.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    /// `"probe"` or `"transfer"`.
    pub phase: &'static str,
    /// Since the phase started.
    pub elapsed: Duration,
    /// Payload bytes this end moved so far.
    pub bytes: u64,
    /// Bytes to move, for the message workload.
    pub total_bytes: Option<u64>,
    /// Streams open.
    pub streams: u32,
    /// Intervals completed since the previous call (for a live iperf3-like display).
    pub intervals: Vec<crate::report::Interval>,
}

/// A progress callback.
pub type ProgressFn<'a> = &'a mut dyn FnMut(&Progress);

/// The server's address from `HOST`, `HOST:PORT`, `[V6]:PORT` or `V6`.
pub(crate) fn resolve(cfg: &ClientConfig) -> Result<SocketAddr, ClientError> {
    resolve_target(&cfg.server, cfg.port)
}

/// The address of `server` (`HOST`, `HOST:PORT`, `[V6]:PORT` or `V6`), `port` when it
/// names none.
pub(crate) fn resolve_target(server: &str, port: u16) -> Result<SocketAddr, ClientError> {
    let s = server.trim();
    let has_port = s.parse::<SocketAddr>().is_ok()
        || (s.matches(':').count() == 1 && !s.starts_with('['))
        || (s.starts_with('[') && s.contains("]:"));
    let target = if has_port {
        s.to_string()
    } else if s.contains(':') && !s.starts_with('[') {
        format!("[{s}]:{port}")
    } else {
        format!("{s}:{port}")
    };
    let mut addrs = target
        .to_socket_addrs()
        .map_err(|source| ClientError::Resolve {
            target: target.clone(),
            source,
        })?;
    addrs.next().ok_or_else(|| ClientError::Resolve {
        target: target.clone(),
        source: std::io::Error::other("no address"),
    })
}

/// Check the configuration before anything is sent.
pub(crate) fn validate(cfg: &ClientConfig) -> Result<(), ClientError> {
    let bad = |e: ConfigError| Err(ClientError::Config(e));
    if cfg.streams == 0 {
        return bad(ConfigError::NoStreams);
    }
    if cfg.message_size == 0 {
        return bad(ConfigError::EmptyMessages);
    }
    if cfg.duration.is_none() && cfg.messages == 0 {
        return bad(ConfigError::NoMessages);
    }
    if cfg.duration.is_some_and(|d| d.is_zero()) || cfg.max_time.is_some_and(|d| d.is_zero()) {
        return bad(ConfigError::ZeroDuration);
    }
    if cfg.max_streams < cfg.streams {
        return bad(ConfigError::StreamsOverMax {
            streams: cfg.streams,
            max_streams: cfg.max_streams,
        });
    }
    Ok(())
}
