//! `tcptune send`: connect to a tcptune server, measure the path, run the transfer with a
//! tuner on every stream at both ends, and return the [`Report`].
//!
//! ```no_run
//! use tcptune_transfer::client::{run, ClientConfig};
//! let cfg = ClientConfig::new("127.0.0.1:5310");
//! let report = run(&cfg, None).expect("transfer");
//! println!("{:.1} Mbit/s", report.end.sum_received.bits_per_second / 1e6);
//! ```

use crate::assemble::{assemble, Assembly};
use crate::auth::Secret;
use crate::engine::{Engine, EngineConfig, Event, SideResult};
use crate::pathdb::{PathDbSession, Source};
use crate::pattern::Pattern;
use crate::phase::{prepared_socket, DriverSpec, PhaseTuning};
use crate::probe::ProbeResult;
use crate::proto::{
    self, data_hello, ClientMsg, FrameReader, Phase, ProtoError, ServerLimits, ServerMsg,
    TestParams, MAX_SERVER_FRAME, PROTOCOL_VERSION,
};
use crate::report::{MeasurementReport, ProbeReport, Report};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tcptune_core::fullpipe::{FullPipe, ProbeOutcome, ProbePlan, MIN_ROUND};
use tcptune_core::pathdb::{Direction, Measurement};
use tcptune_core::{
    Action, ConnEvent, HostLimits, PathHint, Role, Time, TuneMode, Tuner, TunerContext,
    TunerFactory,
};
use tcptune_sys::driver::TunerDriver;

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
    /// Keep every sample and change in the report.
    pub samples: bool,
    /// Interval of `intervals[]` (`None`: no intervals).
    pub interval: Option<Duration>,
    /// Congestion control for the data connections (both ends).
    pub congestion: Option<String>,
    /// Shared secret for servers that require one.
    pub secret: Option<Secret>,
    /// Give up connecting after this long.
    pub connect_timeout: Duration,
    /// Give up when a stream or the server makes no progress for this long.
    pub idle_timeout: Duration,
    /// Use `SO_*BUFFORCE` on this end when the process has `CAP_NET_ADMIN`.
    pub force_buffers: bool,
    /// Most streams this client opens when tuners ask for more (the server's limit also
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
    /// Run the pre-transfer probe when the mode needs a rate and the database has no fresh
    /// full-pipe estimate (default). With `false` a database entry of any kind is used, and
    /// without one the mode goes without a rate.
    pub probe: bool,
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
            force_buffers: false,
            max_streams: 64,
            corrupt_message: None,
            custom_tuner: None,
            path_db: None,
            probe: true,
        }
    }
}

/// How a transfer failed. [`ClientError::report`] gives what was measured until then.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The configuration is invalid.
    #[error("{0}")]
    Config(String),
    /// The server could not be reached, or the connection to it broke.
    #[error("{0}")]
    Connect(String),
    /// The server refused the test.
    #[error("the server refused: {0}")]
    Rejected(String),
    /// The server said something that makes no sense.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A byte mismatch or a short transfer.
    #[error("integrity failure: {reason}")]
    Integrity {
        /// What was wrong.
        reason: String,
        /// What was measured.
        report: Option<Box<Report>>,
    },
    /// The transfer failed otherwise (a stream error, a timeout).
    #[error("transfer failed: {reason}")]
    Transfer {
        /// What went wrong.
        reason: String,
        /// What was measured.
        report: Option<Box<Report>>,
    },
}

impl ClientError {
    /// The partial report, when the transfer got far enough to have one.
    pub fn report(&self) -> Option<&Report> {
        match self {
            ClientError::Integrity { report, .. } | ClientError::Transfer { report, .. } => {
                report.as_deref()
            }
            _ => None,
        }
    }
}

impl From<ProtoError> for ClientError {
    fn from(e: ProtoError) -> Self {
        match e {
            ProtoError::Io(_) | ProtoError::Closed | ProtoError::Timeout(_) => {
                ClientError::Connect(e.to_string())
            }
            other => ClientError::Protocol(other.to_string()),
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

fn resolve(cfg: &ClientConfig) -> Result<SocketAddr, ClientError> {
    let s = cfg.server.trim();
    let has_port = s.parse::<SocketAddr>().is_ok()
        || (s.matches(':').count() == 1 && !s.starts_with('['))
        || (s.starts_with('[') && s.contains("]:"));
    let target = if has_port {
        s.to_string()
    } else if s.contains(':') && !s.starts_with('[') {
        format!("[{s}]:{}", cfg.port)
    } else {
        format!("{s}:{}", cfg.port)
    };
    let mut addrs = target
        .to_socket_addrs()
        .map_err(|e| ClientError::Connect(format!("resolving {target}: {e}")))?;
    addrs
        .next()
        .ok_or_else(|| ClientError::Connect(format!("{target} resolves to no address")))
}

fn validate(cfg: &ClientConfig) -> Result<(), ClientError> {
    let bad = |m: String| Err(ClientError::Config(m));
    if cfg.streams == 0 {
        return bad("at least one stream is needed (-P)".into());
    }
    if cfg.message_size == 0 {
        return bad("the message size must be at least 1 byte (-l)".into());
    }
    if cfg.duration.is_none() && cfg.messages == 0 {
        return bad("at least one message is needed (-n)".into());
    }
    if cfg.duration.is_some_and(|d| d.is_zero()) || cfg.max_time.is_some_and(|d| d.is_zero()) {
        return bad("durations must be greater than zero".into());
    }
    if cfg.custom_tuner.is_none() {
        crate::phase::mode_available(&cfg.tune).map_err(ClientError::Config)?;
    }
    if cfg.max_streams < cfg.streams {
        return bad(format!(
            "{} streams requested but at most {} allowed",
            cfg.streams, cfg.max_streams
        ));
    }
    Ok(())
}

/// Run a transfer. `progress` is called about 5 times a second.
pub fn run(cfg: &ClientConfig, progress: Option<ProgressFn<'_>>) -> Result<Report, ClientError> {
    let session_start = Instant::now();
    validate(cfg)?;
    let addr = resolve(cfg)?;
    let mut local_limits = tcptune_sys::sysctl::read_host_limits()
        .map_err(|e| ClientError::Config(format!("reading this host's limits: {e}")))?;
    let force = cfg.force_buffers && tcptune_sys::os::has_cap_net_admin();
    local_limits.can_force = force;

    // Control connection.
    let fd =
        tcptune_sys::net::tcp_socket(&addr).map_err(|e| ClientError::Connect(e.to_string()))?;
    if let Some(ip) = cfg.bind {
        tcptune_sys::net::bind(&fd, &SocketAddr::new(ip, 0))
            .map_err(|e| ClientError::Config(e.to_string()))?;
    }
    let mut ctrl = tcptune_sys::net::connect(fd, &addr, cfg.connect_timeout)
        .map_err(|e| ClientError::Connect(e.to_string()))?;
    let io = |e: std::io::Error| ClientError::Connect(format!("control connection: {e}"));
    ctrl.set_nodelay(true).map_err(io)?;
    // The phase loop reads the control connection between its other duties (sampling the
    // delivered bytes every few milliseconds for the probe's rounds): a short wait.
    ctrl.set_read_timeout(Some(Duration::from_millis(2)))
        .map_err(io)?;
    ctrl.set_write_timeout(Some(cfg.idle_timeout)).map_err(io)?;
    let mut reader = FrameReader::new(MAX_SERVER_FRAME);
    let hs_deadline = crate::after(cfg.connect_timeout);

    proto::write_msg(
        &mut ctrl,
        &ClientMsg::Hello {
            protocol: PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION").to_string(),
        },
    )?;
    let welcome: ServerMsg = reader
        .recv_until(&mut ctrl, hs_deadline, "the server's welcome")
        .map_err(|e| match e {
            ProtoError::TooLong { .. } | ProtoError::Malformed(_) => ClientError::Connect(format!(
                "{addr} does not answer like a tcptune server ({e})"
            )),
            other => other.into(),
        })?;
    let challenge = match welcome {
        ServerMsg::Welcome {
            protocol,
            challenge,
            ..
        } if protocol == PROTOCOL_VERSION => challenge,
        ServerMsg::Welcome { protocol, .. } => {
            return Err(ClientError::Rejected(format!(
                "the server speaks protocol {protocol}, this client {PROTOCOL_VERSION}"
            )))
        }
        ServerMsg::Rejected { reason } => return Err(ClientError::Rejected(reason)),
        other => return Err(unexpected("welcome", &other)),
    };
    let auth = match (&challenge, &cfg.secret) {
        (None, _) => None,
        (Some(_), None) => {
            return Err(ClientError::Rejected(
                "the server requires a shared secret (--secret-file)".into(),
            ))
        }
        (Some(c), Some(secret)) => {
            let c = proto::from_hex::<32>(c)
                .ok_or_else(|| ClientError::Protocol("malformed challenge".into()))?;
            Some(proto::to_hex(&secret.respond(&c)))
        }
    };
    let seed = tcptune_sys::os::random_u64()
        .map_err(|e| ClientError::Config(format!("getrandom: {e}")))?;
    let params = TestParams {
        tune: cfg.tune.clone(),
        streams: cfg.streams,
        message_size: cfg.message_size,
        messages: if cfg.duration.is_some() {
            0
        } else {
            cfg.messages
        },
        duration_ms: cfg.duration.map(|d| d.as_millis().max(1) as u64),
        max_time_ms: cfg.max_time.map(|d| d.as_millis().max(1) as u64),
        reverse: cfg.reverse,
        samples: cfg.samples,
        congestion: cfg.congestion.clone(),
        seed,
        corrupt_message: cfg.corrupt_message,
    };
    proto::write_msg(
        &mut ctrl,
        &ClientMsg::Setup {
            auth,
            params: params.clone(),
        },
    )?;
    let accepted: ServerMsg = reader.recv_until(&mut ctrl, hs_deadline, "the server's answer")?;
    let (session_hex, server_limits, remote_limits, server_cc) = match accepted {
        ServerMsg::Accepted {
            session,
            limits,
            host_limits,
            congestion,
            ..
        } => (session, limits, host_limits, congestion),
        ServerMsg::Rejected { reason } => return Err(ClientError::Rejected(reason)),
        other => return Err(unexpected("accepted", &other)),
    };
    let session = proto::from_hex::<16>(&session_hex)
        .ok_or_else(|| ClientError::Protocol("malformed session id".into()))?;

    // Path RTT from the control connection: a few ping-pongs, then TCP_INFO.
    let mut app_rtt: Option<Duration> = None;
    for seq in 0..4u64 {
        let t = Instant::now();
        proto::write_msg(&mut ctrl, &ClientMsg::Ping { seq })?;
        let deadline = crate::after(cfg.idle_timeout);
        loop {
            match reader.recv_until::<ServerMsg>(&mut ctrl, deadline, "pong")? {
                ServerMsg::Pong { seq: s } if s == seq => break,
                ServerMsg::Pong { .. } => continue,
                other => return Err(unexpected("pong", &other)),
            }
        }
        let d = t.elapsed();
        app_rtt = Some(app_rtt.map_or(d, |a| a.min(d)));
    }
    let tcp_rtt = tcptune_sys::sockopt::tcp_info(ctrl.as_fd())
        .ok()
        .and_then(|s| s.min_rtt());
    let mut hint = PathHint {
        rtt: tcp_rtt.or(app_rtt),
        rate: match &cfg.tune {
            TuneMode::Manual(Some(r)) => Some(*r),
            _ => None,
        },
        ..Default::default()
    };

    let mut ctx = Ctx {
        cfg,
        ctrl,
        reader,
        addr,
        session,
        seed,
        local_limits,
        force,
        server_limits,
        remote_limits: remote_limits.clone(),
        pending_server: Vec::new(),
        unread_results: 0,
    };

    // What the path's rate is: a fresh database entry, a probe, or nothing.
    let measure_start = Instant::now();
    let mut db = cfg.path_db.as_deref().map(PathDbSession::open);
    let direction = if cfg.reverse {
        Direction::Receive
    } else {
        Direction::Send
    };
    let peer = addr.ip().to_string();
    let mut source = if hint.rate.is_some() { "given" } else { "none" };
    let mut probe_report = None;
    let mut probe_seconds = None;
    if cfg.tune.needs_rate_probe() && cfg.custom_tuner.is_none() {
        let known = match (db.as_mut(), hint.rtt) {
            (Some(d), Some(rtt)) => d.lookup(&peer, direction, rtt),
            _ => None,
        };
        match known.filter(|k| k.full_pipe || !cfg.probe) {
            Some(k) => {
                hint.rate = Some(k.rate);
                hint.rate_is_lower_bound = !k.full_pipe;
                source = "path_db";
                if let Some(d) = db.as_mut() {
                    d.mark_used();
                }
            }
            None if cfg.probe => {
                let result = ctx.probe(&hint)?;
                source = "probe";
                probe_seconds = Some(result.wall.as_secs_f64());
                probe_report = Some(ProbeReport {
                    streams: result.plan.streams,
                    round_seconds: result.plan.round.as_secs_f64(),
                    rounds: result.outcome.rounds,
                    sending_seconds: result.outcome.elapsed.as_secs_f64(),
                    full_pipe: result.outcome.full_pipe,
                    rate_bps: result.rate().map(|r| r.0),
                });
                if let Some(rate) = result.rate() {
                    hint.rate = Some(rate);
                    hint.rate_is_lower_bound = result.lower_bound();
                    record(&mut db, &peer, direction, &hint, Source::Probe, |at| {
                        Measurement {
                            rate,
                            min_rtt: hint.rtt.unwrap_or_default(),
                            full_pipe: !result.lower_bound(),
                            at_unix_s: at,
                        }
                    });
                }
            }
            None => {}
        }
    }
    let measurement = MeasurementReport {
        source: source.to_string(),
        seconds: measure_start.elapsed().as_secs_f64(),
        lower_bound: hint.rate_is_lower_bound,
        probe: probe_report,
        path_db: None,
    };

    let cpu0 = tcptune_sys::os::process_cpu().unwrap_or_default();
    let wall0 = Instant::now();
    let (local, remote, intervals, outcome) =
        ctx.run_phase_with(Phase::Main, PhaseGoal::Main, &hint, progress)?;
    let cpu = tcptune_sys::os::process_cpu()
        .unwrap_or_default()
        .since(&cpu0);
    let wall = wall0.elapsed();
    let _ = proto::write_msg(&mut ctx.ctrl, &ClientMsg::Bye);

    // What the transfer delivered is a lower bound on the path's rate.
    let delivered = outcome.delivery.rate;
    let receiver_ok = |side: &SideResult| side.integrity_error.is_none();
    if let Some(rate) = delivered.filter(|_| receiver_ok(&local) && receiver_ok(&remote)) {
        record(&mut db, &peer, direction, &hint, Source::Transfer, |at| {
            Measurement {
                rate,
                min_rtt: hint.rtt.unwrap_or_default(),
                full_pipe: false,
                at_unix_s: at,
            }
        });
    }
    let measurement = MeasurementReport {
        path_db: db.map(PathDbSession::into_report),
        ..measurement
    };

    let (sender_limits, receiver_limits) = if cfg.reverse {
        (remote_limits.clone(), ctx.local_limits.clone())
    } else {
        (ctx.local_limits.clone(), remote_limits.clone())
    };
    let assembly = Assembly {
        cfg,
        params: &params,
        addr,
        session_hex: &session_hex,
        hint: &hint,
        probe_seconds,
        measurement: Some(measurement),
        setup_seconds: Some(outcome.setup.as_secs_f64()),
        session_seconds: Some(session_start.elapsed().as_secs_f64()),
        delivery_rate_max_bps: delivered.map(|r| r.0),
        sender_limits,
        receiver_limits,
        congestion: cfg.congestion.clone().unwrap_or(server_cc),
        local: &local,
        remote: &remote,
        intervals,
        host_cpu: cpu,
        host_wall: wall,
        capped: outcome.capped,
        streams_reason: outcome.streams_reason,
    };
    let (report, verdict) = assemble(assembly);
    match verdict {
        Ok(()) => Ok(report),
        Err(crate::assemble::Verdict::Integrity(reason)) => Err(ClientError::Integrity {
            reason,
            report: Some(Box::new(report)),
        }),
        Err(crate::assemble::Verdict::Failed(reason)) => Err(ClientError::Transfer {
            reason,
            report: Some(Box::new(report)),
        }),
    }
}

/// Record a measurement in the path database (when one is in use and the RTT is known);
/// problems with the file become warnings of the report.
fn record(
    db: &mut Option<PathDbSession>,
    peer: &str,
    direction: Direction,
    hint: &PathHint,
    source: Source,
    m: impl FnOnce(f64) -> Measurement,
) {
    if let Some(d) = db.as_mut() {
        d.record(peer, direction, hint.rtt.is_some(), source, m);
    }
}

fn unexpected(expected: &'static str, got: &ServerMsg) -> ClientError {
    match got {
        ServerMsg::Rejected { reason } => ClientError::Rejected(reason.clone()),
        ServerMsg::Abort {
            integrity: true,
            reason,
        } => ClientError::Integrity {
            reason: format!("the server reports: {reason}"),
            report: None,
        },
        ServerMsg::Abort { reason, .. } => ClientError::Transfer {
            reason: format!("the server aborted: {reason}"),
            report: None,
        },
        other => ClientError::Protocol(format!("expected {expected}, got {}", other.kind())),
    }
}

struct Ctx<'a> {
    cfg: &'a ClientConfig,
    ctrl: TcpStream,
    reader: FrameReader,
    addr: SocketAddr,
    session: [u8; 16],
    seed: u64,
    local_limits: HostLimits,
    force: bool,
    server_limits: ServerLimits,
    /// The server's host limits.
    remote_limits: HostLimits,
    /// Server messages that arrived while waiting for something else.
    pending_server: Vec<ServerMsg>,
    /// Results of ended phases not read yet (the probe's: the next phase reads it after
    /// sending its own start, saving a round trip).
    unread_results: u32,
}

/// How a phase ended.
pub(crate) struct Outcome {
    pub(crate) capped: bool,
    pub(crate) streams_reason: Option<String>,
    /// From `StartPhase` to `Go`: opening the phase's streams.
    pub(crate) setup: Duration,
    /// The aggregate delivery this end saw, in rounds of one RTT (the probe's measurement;
    /// for the main phase, the transfer's own rate).
    pub(crate) delivery: ProbeOutcome,
}

struct StreamPlan {
    target: u32,
    max: u32,
    reason: Option<String>,
}

/// A phase's results: this end's, the server's, the intervals, how it ended.
type PhaseOutput = (
    SideResult,
    SideResult,
    Vec<crate::report::Interval>,
    Outcome,
);

/// What a phase does beyond moving data.
enum PhaseGoal {
    /// The transfer.
    Main,
    /// The bandwidth probe: stop once the pipe is full.
    Probe(ProbePlan),
}

impl Ctx<'_> {
    fn send(&mut self, m: &ClientMsg) -> Result<(), ClientError> {
        proto::write_msg(&mut self.ctrl, m).map_err(ClientError::from)
    }

    /// Wait for a specific server message, keeping others for later.
    fn expect(
        &mut self,
        what: &'static str,
        mut pick: impl FnMut(&ServerMsg) -> bool,
    ) -> Result<ServerMsg, ClientError> {
        let deadline = crate::after(self.cfg.idle_timeout);
        loop {
            let m: ServerMsg = self.reader.recv_until(&mut self.ctrl, deadline, what)?;
            if pick(&m) {
                return Ok(m);
            }
            match m {
                ServerMsg::WantStreams { .. } => self.pending_server.push(m),
                other => return Err(unexpected(what, &other)),
            }
        }
    }

    /// Open streams `from..to` at once: ask the server for all their ports, then connect
    /// them in parallel (one handshake time for all, instead of two round trips each).
    /// Their tuners are built for a transfer of `total` streams.
    /// With `requested`, the `OpenStream` messages were already sent.
    fn open_streams(
        &mut self,
        engine: &mut Engine,
        tuning: &PhaseTuning,
        spec: &DriverSpec,
        range: std::ops::Range<u32>,
        total: u32,
        requested: bool,
    ) -> Result<(), ClientError> {
        if !requested {
            for index in range.clone() {
                self.send(&ClientMsg::OpenStream { stream: index })?;
            }
        }
        let mut prepared = Vec::new();
        for index in range {
            let port = match self.expect(
                "stream_port",
                |m| matches!(m, ServerMsg::StreamPort { stream, .. } if *stream == index),
            )? {
                ServerMsg::StreamPort { port, .. } => port,
                other => return Err(unexpected("stream_port", &other)),
            };
            let mut driver = spec
                .driver(tuning, index, total.max(index + 1))
                .map_err(ClientError::Config)?;
            let addr = SocketAddr::new(self.addr.ip(), port);
            let fd = prepared_socket(&addr, &mut driver, spec, self.cfg.congestion.as_deref())
                .map_err(|e| ClientError::Connect(format!("stream {}: {e}", index + 1)))?;
            if let Some(ip) = self.cfg.bind {
                tcptune_sys::net::bind(&fd, &SocketAddr::new(ip, 0))
                    .map_err(|e| ClientError::Config(e.to_string()))?;
            }
            prepared.push((index, addr, fd, driver));
        }
        let timeout = self.cfg.connect_timeout;
        let session = self.session;
        type Connected = Result<(u32, TcpStream, Box<TunerDriver>), ClientError>;
        let connected: Vec<Connected> = std::thread::scope(|scope| {
            let handles: Vec<_> = prepared
                .into_iter()
                .map(|(index, addr, fd, driver)| {
                    scope.spawn(move || -> Connected {
                        let fail =
                            |e: String| ClientError::Connect(format!("stream {}: {e}", index + 1));
                        let mut s = tcptune_sys::net::connect(fd, &addr, timeout)
                            .map_err(|e| fail(e.to_string()))?;
                        s.write_all(&data_hello(&session, index))
                            .map_err(|e| fail(format!("sending hello: {e}")))?;
                        Ok((index, s, driver))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(ClientError::Connect("a connecting thread panicked".into()))
                    })
                })
                .collect()
        });
        for c in connected {
            let (index, s, driver) = c?;
            engine
                .add_stream(index, s, driver)
                .map_err(|e| ClientError::Connect(format!("stream {}: {e}", index + 1)))?;
        }
        Ok(())
    }

    /// Streams the sender's tuner of stream 0 asks for before connecting (`auto` when one
    /// socket cannot hold the BDP), so that they all open before the first byte rather than
    /// one by one after it: a throwaway tuner with the sender's limits is asked.
    fn planned_streams(&self, hint: &PathHint, initial: u32) -> (u32, Option<String>) {
        let (sender_limits, receiver_limits) = if self.cfg.reverse {
            (self.remote_limits.clone(), self.local_limits.clone())
        } else {
            (self.local_limits.clone(), self.remote_limits.clone())
        };
        let ctx = TunerContext {
            role: Role::Sender,
            limits: sender_limits,
            hint: hint.clone(),
            stream_index: 0,
            streams: initial,
        };
        let mut tuner: Box<dyn Tuner> = match (&self.cfg.custom_tuner, self.cfg.reverse) {
            (Some(c), false) => (c.0)(ctx),
            (Some(_), true) => return (initial, None),
            (None, _) => {
                let factory =
                    TunerFactory::new(self.cfg.tune.clone()).with_peer_limits(receiver_limits);
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| factory.build(ctx)))
                {
                    Ok(t) => t,
                    Err(_) => return (initial, None),
                }
            }
        };
        tuner.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        let mut total = initial;
        let mut reason = None;
        while let Some(a) = tuner.poll_action() {
            if let Action::OpenStreams { count, reason: r } = a {
                total = total.max(initial.saturating_add(count));
                reason.get_or_insert(r);
            }
        }
        (total, reason)
    }

    /// Run the bandwidth probe (see [`crate::probe`]).
    fn probe(&mut self, hint: &PathHint) -> Result<ProbeResult, ClientError> {
        let t0 = Instant::now();
        let sender_limits = if self.cfg.reverse {
            &self.remote_limits
        } else {
            &self.local_limits
        };
        let max = self.cfg.max_streams.min(self.server_limits.max_streams);
        let plan = ProbePlan::new(hint.rtt, sender_limits, max);
        // The server's bound is the estimator's hard bound plus a little, so that the
        // estimator normally decides.
        let bound = plan.max_duration + Duration::from_millis(100);
        let (_, _, _, outcome) = self.run_phase_with(
            Phase::Probe {
                duration_ms: bound.as_millis() as u64,
            },
            PhaseGoal::Probe(plan.clone()),
            hint,
            None,
        )?;
        Ok(ProbeResult {
            plan,
            outcome: outcome.delivery,
            wall: t0.elapsed(),
        })
    }

    /// Run one phase; returns this end's and the server's results (the server's is empty
    /// for the probe: it is read by the next phase).
    fn run_phase_with(
        &mut self,
        phase: Phase,
        goal: PhaseGoal,
        hint: &PathHint,
        mut progress: Option<ProgressFn<'_>>,
    ) -> Result<PhaseOutput, ClientError> {
        let cfg = self.cfg;
        let role = if cfg.reverse {
            Role::Receiver
        } else {
            Role::Sender
        };
        let main = phase == Phase::Main;
        let epoch = Instant::now();
        let messages = (main && cfg.duration.is_none()).then_some(cfg.messages);
        let mut engine = Engine::new(EngineConfig {
            role,
            pattern: Arc::new(Pattern::new(self.seed, cfg.message_size)),
            messages,
            corrupt: if main { cfg.corrupt_message } else { None },
            record_series: main && cfg.samples,
            interval: if main { cfg.interval } else { None },
            epoch,
            idle_timeout: cfg.idle_timeout,
        });
        let tuning = match (&cfg.custom_tuner, phase) {
            (Some(c), Phase::Main) => PhaseTuning::Custom(c.0.clone()),
            _ => PhaseTuning::for_phase(phase, &cfg.tune),
        };
        let spec = DriverSpec {
            role,
            limits: self.local_limits.clone(),
            hint: hint.clone(),
            force: self.force,
            record_series: main && cfg.samples,
            epoch,
        };
        let max_streams = cfg.max_streams.min(self.server_limits.max_streams);
        let (initial, round) = match &goal {
            PhaseGoal::Main => (
                cfg.streams,
                hint.rtt
                    .unwrap_or(Duration::from_millis(100))
                    .max(MIN_ROUND),
            ),
            PhaseGoal::Probe(p) => (p.streams.min(max_streams).max(1), p.round),
        };
        let mut plan = StreamPlan {
            target: initial,
            max: max_streams,
            reason: None,
        };
        // Streams the sender plans before connecting open with the initial ones.
        if main {
            let (total, reason) = self.planned_streams(hint, initial);
            let total = total.min(plan.max).max(initial);
            if total > initial {
                plan.target = total;
                plan.reason = reason;
            }
        }
        let mut estimator = match &goal {
            PhaseGoal::Probe(p) => crate::probe::estimator(p),
            PhaseGoal::Main => FullPipe::new(round, Duration::MAX),
        };
        // Start the phase and ask for its streams' ports in one flight (the server handles
        // them in order), then read what is owed: an earlier phase's result, the phase's
        // readiness, the ports.
        self.send(&ClientMsg::StartPhase {
            phase,
            hint: hint.clone(),
        })?;
        for index in 0..plan.target {
            self.send(&ClientMsg::OpenStream { stream: index })?;
        }
        while self.unread_results > 0 {
            self.expect("phase_result", |m| matches!(m, ServerMsg::PhaseResult(_)))?;
            self.unread_results -= 1;
        }
        self.expect("phase_ready", |m| matches!(m, ServerMsg::PhaseReady))?;
        if let Err(e) = self.open_streams(
            &mut engine,
            &tuning,
            &spec,
            0..plan.target,
            plan.target,
            true,
        ) {
            engine.abort();
            return Err(e);
        }
        self.send(&ClientMsg::Go)?;
        engine.go();
        let start = Instant::now();
        let setup = start.saturating_duration_since(epoch);
        let stop_after = match phase {
            Phase::Probe { duration_ms } => Some((Duration::from_millis(duration_ms), false)),
            Phase::Main => cfg
                .duration
                .map(|d| (d, false))
                .or(cfg.max_time.map(|d| (d, true))),
        };
        let mut stopped = false;
        let mut capped = false;
        let total_bytes = messages.map(|m| m.saturating_mul(cfg.message_size));
        let mut last_progress = Instant::now();
        let mut integrity_failed = false;
        let mut shown = 0usize;
        let mut last_bytes = (0u64, Instant::now());
        let mut last_sample = Instant::now();
        let fail = |engine: &Engine, e: ClientError| {
            engine.abort();
            e
        };
        loop {
            // Server messages.
            let mut msgs = std::mem::take(&mut self.pending_server);
            match self.reader.poll_msg::<ServerMsg>(&mut self.ctrl) {
                Ok(Some(m)) => msgs.push(m),
                Ok(None) => {}
                Err(e) => return Err(fail(&engine, e.into())),
            }
            let mut wanted = Vec::new();
            for m in msgs {
                match m {
                    ServerMsg::WantStreams {
                        known_streams,
                        count,
                        reason,
                    } => wanted.push((known_streams, count, reason)),
                    other => return Err(fail(&engine, unexpected("want_streams", &other))),
                }
            }
            // Local events.
            while let Some(ev) = engine.poll_event() {
                match ev {
                    Event::StreamDone => {}
                    Event::Integrity(_) => {
                        // Our receiver found bad data: stop both ends at once, then collect
                        // both sides' results so the error comes with a report (the event
                        // is kept by the engine and judged in `assemble`).
                        integrity_failed = true;
                    }
                    Event::MoreStreams(r) => wanted.push((r.known_streams, r.count, r.reason)),
                }
            }
            if integrity_failed {
                self.send(&ClientMsg::Stop { capped: true })?;
                engine.abort();
                break;
            }
            // More streams, deduplicated: the target is what the asking tuner saw plus what
            // it asked for, bounded by both ends' maximum.
            if main && !stopped {
                for (known, count, reason) in wanted {
                    let want = known.saturating_add(count).min(plan.max);
                    if want > plan.target {
                        plan.target = want;
                        plan.reason = Some(reason);
                    }
                }
                let have = engine.streams();
                if have < plan.target {
                    let target = plan.target;
                    if let Err(e) =
                        self.open_streams(&mut engine, &tuning, &spec, have..target, target, false)
                    {
                        return Err(fail(&engine, e));
                    }
                }
            }
            // The delivery rate: the probe samples every pass and stops on a full pipe; the
            // transfer only observes, a few samples per round (each reads every stream's
            // TCP_INFO).
            let mut probe_done = false;
            if !main || last_sample.elapsed() >= round / 4 {
                last_sample = Instant::now();
                let now =
                    Time::from_nanos(u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX));
                let full = estimator.on_sample(now, engine.delivered()).is_some();
                probe_done = !main && full;
            }
            // Time limits.
            let out_of_time = stop_after.is_some_and(|(limit, _)| start.elapsed() >= limit);
            if !stopped && (out_of_time || probe_done) {
                stopped = true;
                let is_cap = stop_after.is_some_and(|(_, c)| c);
                capped = main && is_cap && !engine.all_done();
                // The cap and the end of the probe end the phase at once at both ends
                // (queued data is discarded: a full send buffer may take long to drain
                // over a slow path); a duration workload lets written data arrive.
                let hard = capped || !main;
                if hard || role == Role::Receiver {
                    self.send(&ClientMsg::Stop { capped: hard })?;
                }
                if hard {
                    engine.abort();
                } else if role == Role::Sender {
                    engine.stop();
                }
            }
            // Stall detection.
            let b = engine.bytes();
            let moved = engine.progress();
            if moved != last_bytes.0 {
                last_bytes = (moved, Instant::now());
            } else if last_bytes.1.elapsed()
                > cfg.idle_timeout.saturating_add(Duration::from_secs(5))
            {
                return Err(fail(
                    &engine,
                    ClientError::Transfer {
                        reason: format!(
                            "no progress for {:.0}s",
                            last_bytes.1.elapsed().as_secs_f64()
                        ),
                        report: None,
                    },
                ));
            }
            let mut fresh = Vec::new();
            while let Some(iv) = engine.poll_interval() {
                fresh.push(iv);
            }
            shown += fresh.len();
            let done = engine.all_done();
            if let Some(p) = progress.as_mut() {
                if !fresh.is_empty() || last_progress.elapsed() >= Duration::from_millis(200) {
                    last_progress = Instant::now();
                    p(&Progress {
                        phase: if main { "transfer" } else { "probe" },
                        elapsed: start.elapsed(),
                        bytes: b,
                        total_bytes,
                        streams: engine.streams(),
                        intervals: fresh,
                    });
                }
            }
            if done {
                break;
            }
            let _ = engine.wait_event(Duration::from_millis(5));
        }
        self.send(&ClientMsg::EndPhase)?;
        // The probe's measurement is this end's; the server's side of it is read later,
        // by the next phase, after it has sent its own start (one round trip saved).
        let remote = if matches!(goal, PhaseGoal::Probe(_)) {
            self.unread_results += 1;
            SideResult::default()
        } else {
            match self.expect("phase_result", |m| matches!(m, ServerMsg::PhaseResult(_))) {
                Ok(ServerMsg::PhaseResult(r)) => *r,
                Ok(other) => return Err(unexpected("phase_result", &other)),
                Err(e) => {
                    // Keep our side's numbers for the error report when we can.
                    engine.abort();
                    return Err(e);
                }
            }
        };
        let (local, intervals) = engine.finish();
        if let Some(p) = progress.as_mut() {
            // The last, partial interval is only known now.
            let rest = intervals.get(shown..).unwrap_or_default();
            if !rest.is_empty() {
                p(&Progress {
                    phase: if main { "transfer" } else { "probe" },
                    elapsed: start.elapsed(),
                    bytes: local.streams.iter().map(|s| s.bytes).sum(),
                    total_bytes,
                    streams: local.streams.len() as u32,
                    intervals: rest.to_vec(),
                });
            }
        }
        Ok((
            local,
            remote,
            intervals,
            Outcome {
                capped,
                streams_reason: plan.reason,
                setup,
                delivery: estimator.outcome(),
            },
        ))
    }
}
