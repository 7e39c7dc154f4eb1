//! `tcptune serve`: accepts any number of clients, each a control connection plus data
//! connections on per-stream listeners (so the tuner's buffers are in place before the SYN).
//!
//! Bounded everywhere: sessions, handshakes in progress, streams per session, message size,
//! message count, total bytes, duration; handshake and idle timeouts. A client that sends
//! garbage, stops mid-handshake or disappears gets a clear error where it can still hear
//! one, and only its own session ends. Nothing a peer sends can panic the server.
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

use crate::auth::Secret;
use crate::engine::{Engine, EngineConfig, Event};
use crate::pattern::Pattern;
use crate::phase::{prepared_socket, DriverSpec, PhaseTuning};
use crate::proto::{
    self, check_data_hello, ClientMsg, FrameReader, Phase, ProtoError, ServerLimits, ServerMsg,
    TestParams, DATA_HELLO_LEN, MAX_CLIENT_FRAME, PROTOCOL_VERSION,
};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tcptune_core::{HostLimits, PathHint, Role};
use tcptune_sys::driver::TunerDriver;

/// Tells a running server to stop accepting and end its sessions.
#[derive(Clone, Debug, Default)]
pub struct Shutdown(Arc<AtomicBool>);

impl Shutdown {
    /// A handle that has not fired.
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Stop the server: it stops accepting, aborts running sessions and `run` returns.
    pub fn trigger(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether [`Shutdown::trigger`] was called.
    pub fn is_triggered(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Something the server did, for its log.
#[derive(Clone, Debug, PartialEq)]
pub enum ServerEvent {
    /// A session was accepted.
    SessionStarted {
        /// Client address.
        peer: SocketAddr,
        /// Session id (hex).
        session: String,
        /// What it asked for.
        params: Box<TestParams>,
    },
    /// A session ended (`error` is `None` when it completed normally).
    SessionEnded {
        /// Client address.
        peer: SocketAddr,
        /// Session id (hex).
        session: String,
        /// Payload bytes this server moved in the main phase.
        bytes: u64,
        /// Why it failed, if it did.
        error: Option<String>,
    },
    /// A connection was refused before a session started (bad handshake, limits, auth).
    Refused {
        /// Client address.
        peer: SocketAddr,
        /// Why.
        reason: String,
    },
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
    /// Connections still in their handshake at once (more are closed at once).
    pub max_handshakes: u32,
    /// Time a client has to complete `Hello`/`Setup`, and to connect a data stream.
    pub handshake_timeout: Duration,
    /// A session with no control message and no data for this long is ended.
    pub idle_timeout: Duration,
    /// Require clients to prove knowledge of this secret.
    pub secret: Option<Secret>,
    /// Use `SO_*BUFFORCE` for the server's buffers when the process has `CAP_NET_ADMIN`.
    pub force_buffers: bool,
    /// Return after the first session that got past the handshake ends.
    pub one_off: bool,
    /// Called for every session start/end and refusal.
    pub log: Option<ServerLog>,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("limits", &self.limits)
            .field("max_sessions", &self.max_sessions)
            .field("max_handshakes", &self.max_handshakes)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("secret", &self.secret.is_some())
            .field("force_buffers", &self.force_buffers)
            .field("one_off", &self.one_off)
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
            max_handshakes: 64,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            secret: None,
            force_buffers: false,
            one_off: false,
            log: None,
        }
    }
}

/// What the server did over its life.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Sessions that completed.
    pub sessions_ok: u64,
    /// Sessions that ended with an error.
    pub sessions_failed: u64,
    /// Connections refused before a session (handshake, auth, limits).
    pub refused: u64,
    /// Connections closed at once because too many handshakes were in progress.
    pub dropped: u64,
}

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listening socket failed.
    #[error("{op}: {source}")]
    Listener {
        /// What was attempted.
        op: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    failed: AtomicU64,
    refused: AtomicU64,
    sessions: AtomicU32,
    handshakes: AtomicU32,
    finished_sessions: AtomicU64,
}

/// Decrements a counter when dropped.
struct Held<'a>(&'a AtomicU32);
impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serve until `shutdown` fires (or, with `one_off`, until one session ended).
pub fn run(
    listener: TcpListener,
    config: ServerConfig,
    shutdown: Shutdown,
) -> Result<ServerStats, ServerError> {
    listener
        .set_nonblocking(true)
        .map_err(|source| ServerError::Listener {
            op: "set the listener non-blocking",
            source,
        })?;
    let cfg = Arc::new(config);
    let counts = Arc::new(Counts::default());
    let mut threads: Vec<std::thread::JoinHandle<()>> = Vec::new();
    let mut dropped = 0u64;
    loop {
        if shutdown.is_triggered() {
            break;
        }
        if cfg.one_off && counts.finished_sessions.load(Ordering::Acquire) > 0 {
            break;
        }
        threads.retain(|t| !t.is_finished());
        match tcptune_sys::os::wait_readable(listener.as_fd(), Duration::from_millis(100)) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(source) => {
                return Err(ServerError::Listener {
                    op: "poll the listening socket",
                    source,
                })
            }
        }
        let (stream, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => {
                // Out of descriptors or a connection reset before accept: back off a little.
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        if counts.handshakes.fetch_add(1, Ordering::AcqRel) >= cfg.max_handshakes {
            counts.handshakes.fetch_sub(1, Ordering::AcqRel);
            dropped += 1;
            continue; // dropping `stream` closes it
        }
        let (cfg2, counts2, sd) = (cfg.clone(), counts.clone(), shutdown.clone());
        let spawned = std::thread::Builder::new()
            .name("tcptune-session".into())
            .spawn(move || serve_connection(stream, peer, &cfg2, &counts2, &sd));
        match spawned {
            Ok(t) => threads.push(t),
            Err(_) => {
                counts.handshakes.fetch_sub(1, Ordering::AcqRel);
                dropped += 1;
            }
        }
    }
    if !cfg.one_off {
        shutdown.trigger();
    }
    for t in threads {
        let _ = t.join();
    }
    Ok(ServerStats {
        sessions_ok: counts.ok.load(Ordering::Acquire),
        sessions_failed: counts.failed.load(Ordering::Acquire),
        refused: counts.refused.load(Ordering::Acquire),
        dropped,
    })
}

fn log(cfg: &ServerConfig, ev: ServerEvent) {
    if let Some(l) = &cfg.log {
        l(&ev);
    }
}

/// Why a session ended early.
#[derive(Debug)]
enum SessionEnd {
    /// Before the session started: refuse (tell the client when possible).
    Refuse(String),
    /// During it.
    Fail(String),
}

impl From<ProtoError> for SessionEnd {
    fn from(e: ProtoError) -> Self {
        SessionEnd::Fail(e.to_string())
    }
}

/// How long a session waits for a control message between other duties, without a phase.
const IDLE_CTRL_WAIT: Duration = Duration::from_millis(50);
/// The same during a phase (streams being accepted, engine events to forward).
const PHASE_CTRL_WAIT: Duration = Duration::from_millis(2);

fn serve_connection(
    mut ctrl: TcpStream,
    peer: SocketAddr,
    cfg: &ServerConfig,
    counts: &Counts,
    shutdown: &Shutdown,
) {
    let handshake = Held(&counts.handshakes);
    let _ = ctrl.set_nodelay(true);
    let _ = ctrl.set_read_timeout(Some(IDLE_CTRL_WAIT));
    let _ = ctrl.set_write_timeout(Some(cfg.handshake_timeout));
    let mut reader = FrameReader::new(MAX_CLIENT_FRAME);
    let setup = match handshake_phase(&mut ctrl, &mut reader, cfg, counts) {
        Ok(s) => s,
        Err(SessionEnd::Refuse(reason)) | Err(SessionEnd::Fail(reason)) => {
            let _ = proto::write_msg(
                &mut ctrl,
                &ServerMsg::Rejected {
                    reason: reason.clone(),
                },
            );
            counts.refused.fetch_add(1, Ordering::AcqRel);
            log(cfg, ServerEvent::Refused { peer, reason });
            return;
        }
    };
    drop(handshake);
    let _session_slot = Held(&counts.sessions);
    let session_hex = proto::to_hex(&setup.session);
    log(
        cfg,
        ServerEvent::SessionStarted {
            peer,
            session: session_hex.clone(),
            params: Box::new(setup.params.clone()),
        },
    );
    let _ = ctrl.set_write_timeout(Some(cfg.idle_timeout));
    let mut s = Session {
        ctrl,
        reader,
        cfg,
        setup,
        shutdown,
        bytes: 0,
    };
    let result = s.run();
    let error = match result {
        Ok(()) => None,
        Err(SessionEnd::Refuse(e)) | Err(SessionEnd::Fail(e)) => {
            let _ = proto::write_msg(
                &mut s.ctrl,
                &ServerMsg::Abort {
                    integrity: e.starts_with(INTEGRITY_PREFIX),
                    reason: e.clone(),
                },
            );
            Some(e)
        }
    };
    if error.is_some() {
        counts.failed.fetch_add(1, Ordering::AcqRel);
    } else {
        counts.ok.fetch_add(1, Ordering::AcqRel);
    }
    counts.finished_sessions.fetch_add(1, Ordering::AcqRel);
    log(
        cfg,
        ServerEvent::SessionEnded {
            peer,
            session: session_hex,
            bytes: s.bytes,
            error,
        },
    );
}

const INTEGRITY_PREFIX: &str = "integrity: ";

struct Setup {
    params: TestParams,
    session: [u8; 16],
    host_limits: HostLimits,
    force: bool,
}

fn handshake_phase(
    ctrl: &mut TcpStream,
    reader: &mut FrameReader,
    cfg: &ServerConfig,
    counts: &Counts,
) -> Result<Setup, SessionEnd> {
    let deadline = crate::after(cfg.handshake_timeout);
    let hello: ClientMsg = reader
        .recv_until(ctrl, deadline, "the client's hello")
        .map_err(|e| SessionEnd::Refuse(e.to_string()))?;
    match hello {
        ClientMsg::Hello { protocol, .. } if protocol == PROTOCOL_VERSION => {}
        ClientMsg::Hello { protocol, .. } => {
            return Err(SessionEnd::Refuse(format!(
            "protocol version {protocol} is not supported (this server speaks {PROTOCOL_VERSION})"
        )))
        }
        other => {
            return Err(SessionEnd::Refuse(format!(
                "expected hello, got {}",
                other.kind()
            )))
        }
    }
    let mut challenge = [0u8; 32];
    if cfg.secret.is_some() {
        tcptune_sys::os::random_bytes(&mut challenge)
            .map_err(|e| SessionEnd::Refuse(format!("getrandom: {e}")))?;
    }
    proto::write_msg(
        ctrl,
        &ServerMsg::Welcome {
            protocol: PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION").to_string(),
            challenge: cfg.secret.as_ref().map(|_| proto::to_hex(&challenge)),
        },
    )?;
    let setup: ClientMsg = reader
        .recv_until(ctrl, deadline, "the client's setup")
        .map_err(|e| SessionEnd::Refuse(e.to_string()))?;
    let ClientMsg::Setup { auth, params } = setup else {
        return Err(SessionEnd::Refuse(format!(
            "expected setup, got {}",
            setup.kind()
        )));
    };
    if let Some(secret) = &cfg.secret {
        let ok = auth
            .as_deref()
            .and_then(proto::from_hex::<32>)
            .is_some_and(|a| secret.verify(&challenge, &a));
        if !ok {
            return Err(SessionEnd::Refuse(
                "authentication failed: this server requires the shared secret (--secret-file)"
                    .into(),
            ));
        }
    }
    validate(&params, &cfg.limits).map_err(SessionEnd::Refuse)?;
    crate::phase::mode_available(&params.tune).map_err(SessionEnd::Refuse)?;
    if counts.sessions.fetch_add(1, Ordering::AcqRel) >= cfg.max_sessions {
        counts.sessions.fetch_sub(1, Ordering::AcqRel);
        return Err(SessionEnd::Refuse(format!(
            "server busy: {} sessions running (the maximum)",
            cfg.max_sessions
        )));
    }
    // From here on the session slot is held; serve_connection releases it.
    let mut host_limits = match tcptune_sys::sysctl::read_host_limits() {
        Ok(l) => l,
        Err(e) => {
            counts.sessions.fetch_sub(1, Ordering::AcqRel);
            return Err(SessionEnd::Refuse(format!(
                "server cannot read its limits: {e}"
            )));
        }
    };
    let force = cfg.force_buffers && tcptune_sys::os::has_cap_net_admin();
    host_limits.can_force = force;
    let mut session = [0u8; 16];
    if let Err(e) = tcptune_sys::os::random_bytes(&mut session) {
        counts.sessions.fetch_sub(1, Ordering::AcqRel);
        return Err(SessionEnd::Refuse(format!("getrandom: {e}")));
    }
    let congestion = params.congestion.clone().unwrap_or_else(|| {
        tcptune_sys::sysctl::read_sysctl("net.ipv4.tcp_congestion_control").unwrap_or_default()
    });
    let sent = proto::write_msg(
        ctrl,
        &ServerMsg::Accepted {
            session: proto::to_hex(&session),
            limits: cfg.limits.clone(),
            host_limits: host_limits.clone(),
            congestion,
            can_force: force,
        },
    );
    if let Err(e) = sent {
        counts.sessions.fetch_sub(1, Ordering::AcqRel);
        return Err(SessionEnd::Fail(e.to_string()));
    }
    Ok(Setup {
        params,
        session,
        host_limits,
        force,
    })
}

/// Check a client's request against the server's bounds.
pub fn validate(p: &TestParams, l: &ServerLimits) -> Result<(), String> {
    if p.streams == 0 || p.streams > l.max_streams {
        return Err(format!(
            "{} streams requested; this server allows 1 to {}",
            p.streams, l.max_streams
        ));
    }
    if p.message_size == 0 || p.message_size > l.max_message_size {
        return Err(format!(
            "message size {} bytes; this server allows 1 to {}",
            p.message_size, l.max_message_size
        ));
    }
    match p.duration_ms {
        Some(d) => {
            if d == 0 || d > l.max_duration_ms {
                return Err(format!(
                    "duration {d} ms; this server allows up to {} ms",
                    l.max_duration_ms
                ));
            }
        }
        None => {
            if p.messages == 0 || p.messages > l.max_messages {
                return Err(format!(
                    "{} messages; this server allows 1 to {}",
                    p.messages, l.max_messages
                ));
            }
            let total = p.messages.saturating_mul(p.message_size);
            if total > l.max_total_bytes {
                return Err(format!(
                    "{total} bytes in total; this server allows up to {}",
                    l.max_total_bytes
                ));
            }
        }
    }
    if p.max_time_ms
        .is_some_and(|m| m == 0 || m > l.max_duration_ms)
    {
        return Err(format!(
            "time cap out of range; this server allows up to {} ms",
            l.max_duration_ms
        ));
    }
    if let Some(cc) = &p.congestion {
        let ok = !cc.is_empty()
            && cc.len() < 16
            && cc.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(format!("'{cc}' is not a congestion control name"));
        }
    }
    Ok(())
}

/// The longest bandwidth probe a client may ask for.
pub const MAX_PROBE: Duration = Duration::from_secs(10);

fn check_phase(kind: Phase) -> Result<(), String> {
    match kind {
        Phase::Probe { duration_ms }
            if duration_ms == 0 || duration_ms > MAX_PROBE.as_millis() as u64 =>
        {
            Err(format!(
                "a probe of {duration_ms} ms; this server allows 1 to {} ms",
                MAX_PROBE.as_millis()
            ))
        }
        _ => Ok(()),
    }
}

/// A client's path hint, bounded so that no tuner arithmetic can overflow on it: RTT at
/// most 60 s, rate at most 10 Tbit/s.
fn sanitize_hint(h: PathHint) -> PathHint {
    PathHint {
        rtt: h.rtt.map(|r| r.min(Duration::from_secs(60))),
        rate: h
            .rate
            .map(|r| tcptune_core::Rate(r.0.min(10_000_000_000_000))),
        rate_is_lower_bound: h.rate_is_lower_bound,
    }
}

type Accepted = (u32, Result<TcpStream, String>, Box<TunerDriver>);

struct PhaseState {
    engine: Engine,
    tuning: PhaseTuning,
    spec: DriverSpec,
    accepted_rx: Receiver<Accepted>,
    accepted_tx: Sender<Accepted>,
    pending: u32,
    kind: Phase,
    /// When the server stops its senders even without the client's `Stop` (set at `Go`).
    sender_deadline: Option<Instant>,
}

struct Session<'a> {
    ctrl: TcpStream,
    reader: FrameReader,
    cfg: &'a ServerConfig,
    setup: Setup,
    shutdown: &'a Shutdown,
    bytes: u64,
}

impl Session<'_> {
    fn send(&mut self, m: &ServerMsg) -> Result<(), SessionEnd> {
        proto::write_msg(&mut self.ctrl, m).map_err(SessionEnd::from)
    }

    fn role(&self) -> Role {
        if self.setup.params.reverse {
            Role::Sender
        } else {
            Role::Receiver
        }
    }

    fn run(&mut self) -> Result<(), SessionEnd> {
        let epoch = Instant::now();
        let pattern = Arc::new(Pattern::new(
            self.setup.params.seed,
            self.setup.params.message_size,
        ));
        let mut phase: Option<PhaseState> = None;
        let mut ctrl_wait = IDLE_CTRL_WAIT;
        let mut last_activity = Instant::now();
        let mut last_bytes = 0u64;
        let session_deadline = crate::after(
            Duration::from_millis(self.cfg.limits.max_duration_ms)
                .saturating_add(self.cfg.idle_timeout.saturating_mul(2))
                .saturating_add(Duration::from_secs(10)),
        );
        loop {
            if self.shutdown.is_triggered() {
                return Err(SessionEnd::Fail("the server is shutting down".into()));
            }
            let now = Instant::now();
            if now > session_deadline {
                return Err(SessionEnd::Fail(
                    "the session exceeded the server's time limit".into(),
                ));
            }
            // Data progress counts as activity.
            if let Some(p) = &phase {
                let b = p.engine.progress();
                if b != last_bytes {
                    last_bytes = b;
                    last_activity = now;
                }
            }
            if now - last_activity > self.cfg.idle_timeout {
                return Err(SessionEnd::Fail(format!(
                    "idle for {:.0}s: no control message and no data",
                    self.cfg.idle_timeout.as_secs_f64()
                )));
            }
            if let Some(p) = &mut phase {
                self.service_phase(p)?;
            }
            // While a phase runs, accepted streams and engine events are serviced between
            // control reads: wait on the control connection only briefly then.
            let wait = if phase.is_some() {
                PHASE_CTRL_WAIT
            } else {
                IDLE_CTRL_WAIT
            };
            if wait != ctrl_wait {
                let _ = self.ctrl.set_read_timeout(Some(wait));
                ctrl_wait = wait;
            }
            let Some(msg) = self.reader.poll_msg::<ClientMsg>(&mut self.ctrl)? else {
                continue;
            };
            last_activity = Instant::now();
            match msg {
                ClientMsg::Ping { seq } => self.send(&ServerMsg::Pong { seq })?,
                ClientMsg::StartPhase { phase: kind, hint } => {
                    if phase.is_some() {
                        return Err(SessionEnd::Fail("a phase is already running".into()));
                    }
                    check_phase(kind).map_err(SessionEnd::Fail)?;
                    let hint = sanitize_hint(hint);
                    let messages = match kind {
                        Phase::Probe { .. } => None,
                        Phase::Main => self
                            .setup
                            .params
                            .duration_ms
                            .is_none()
                            .then_some(self.setup.params.messages),
                    };
                    let engine = Engine::new(EngineConfig {
                        role: self.role(),
                        pattern: pattern.clone(),
                        messages,
                        corrupt: match kind {
                            Phase::Main => self.setup.params.corrupt_message,
                            Phase::Probe { .. } => None,
                        },
                        record_series: self.setup.params.samples && kind == Phase::Main,
                        interval: None,
                        epoch,
                        idle_timeout: self.cfg.idle_timeout,
                    });
                    let (accepted_tx, accepted_rx) = mpsc::channel();
                    phase = Some(PhaseState {
                        engine,
                        tuning: PhaseTuning::for_phase(kind, &self.setup.params.tune),
                        spec: DriverSpec {
                            role: self.role(),
                            limits: self.setup.host_limits.clone(),
                            hint,
                            force: self.setup.force,
                            record_series: self.setup.params.samples && kind == Phase::Main,
                            epoch,
                        },
                        accepted_rx,
                        accepted_tx,
                        pending: 0,
                        kind,
                        sender_deadline: None,
                    });
                    self.send(&ServerMsg::PhaseReady)?;
                }
                ClientMsg::OpenStream { stream } => {
                    let Some(p) = &mut phase else {
                        return Err(SessionEnd::Fail("open_stream outside a phase".into()));
                    };
                    let port = self.open_stream(p, stream)?;
                    self.send(&ServerMsg::StreamPort { stream, port })?;
                }
                ClientMsg::Go => {
                    let Some(p) = &mut phase else {
                        return Err(SessionEnd::Fail("go outside a phase".into()));
                    };
                    p.engine.go();
                    let limit_ms = match p.kind {
                        Phase::Probe { duration_ms } => Some(duration_ms),
                        Phase::Main => self
                            .setup
                            .params
                            .duration_ms
                            .or(self.setup.params.max_time_ms),
                    };
                    p.sender_deadline = limit_ms.map(|ms| {
                        crate::after(
                            Duration::from_millis(ms).saturating_add(Duration::from_secs(5)),
                        )
                    });
                }
                ClientMsg::Stop { capped } => {
                    if let Some(p) = &phase {
                        // The cap ends the transfer at once; the end of a duration workload
                        // lets the data already written arrive, as iperf3 does.
                        if capped {
                            p.engine.abort();
                        } else {
                            p.engine.stop();
                        }
                    }
                }
                ClientMsg::EndPhase => {
                    let Some(p) = phase.take() else {
                        return Err(SessionEnd::Fail("end_phase outside a phase".into()));
                    };
                    let main = p.kind == Phase::Main;
                    let result = self.end_phase(p)?;
                    if main {
                        self.bytes = result.streams.iter().map(|s| s.bytes).sum();
                    }
                    let integrity = result.integrity_error.clone();
                    self.send(&ServerMsg::PhaseResult(Box::new(result)))?;
                    if let Some(e) = integrity {
                        return Err(SessionEnd::Fail(format!("{INTEGRITY_PREFIX}{e}")));
                    }
                }
                ClientMsg::Bye => return Ok(()),
                other @ (ClientMsg::Hello { .. } | ClientMsg::Setup { .. }) => {
                    return Err(SessionEnd::Fail(format!(
                        "unexpected {} in a running session",
                        other.kind()
                    )))
                }
            }
        }
    }

    /// React to engine events and streams accepted in the background.
    fn service_phase(&mut self, p: &mut PhaseState) -> Result<(), SessionEnd> {
        while let Ok((index, stream, driver)) = p.accepted_rx.try_recv() {
            p.pending = p.pending.saturating_sub(1);
            let stream = stream.map_err(SessionEnd::Fail)?;
            p.engine
                .add_stream(index, stream, driver)
                .map_err(|e| SessionEnd::Fail(format!("starting stream {}: {e}", index + 1)))?;
        }
        while let Some(ev) = p.engine.poll_event() {
            match ev {
                Event::StreamDone => {}
                Event::Integrity(e) => {
                    p.engine.abort();
                    return Err(SessionEnd::Fail(format!("{INTEGRITY_PREFIX}{e}")));
                }
                Event::MoreStreams(r) => self.send(&ServerMsg::WantStreams {
                    known_streams: r.known_streams,
                    count: r.count,
                    reason: r.reason,
                })?,
            }
        }
        if p.sender_deadline.is_some_and(|d| Instant::now() > d) {
            // The client should have said Stop by now; stop anyway.
            p.engine.stop();
        }
        Ok(())
    }

    fn open_stream(&mut self, p: &mut PhaseState, index: u32) -> Result<u16, SessionEnd> {
        let expected = p.engine.streams() + p.pending;
        if index != expected {
            return Err(SessionEnd::Fail(format!(
                "open_stream {index}: expected stream {expected}"
            )));
        }
        if index >= self.cfg.limits.max_streams {
            return Err(SessionEnd::Fail(format!(
                "stream {} exceeds this server's limit of {} streams",
                index + 1,
                self.cfg.limits.max_streams
            )));
        }
        let initial = match p.kind {
            Phase::Main => self.setup.params.streams,
            Phase::Probe { .. } => 1,
        };
        let mut driver = p
            .spec
            .driver(&p.tuning, index, initial.max(index + 1))
            .map_err(SessionEnd::Fail)?;
        let local = self
            .ctrl
            .local_addr()
            .map_err(|e| SessionEnd::Fail(format!("control connection address: {e}")))?;
        let addr = SocketAddr::new(local.ip(), 0);
        let fd = prepared_socket(
            &addr,
            &mut driver,
            &p.spec,
            self.setup.params.congestion.as_deref(),
        )
        .map_err(|e| SessionEnd::Fail(format!("stream {}: {e}", index + 1)))?;
        let listener = tcptune_sys::net::listen(fd, &addr, 4)
            .map_err(|e| SessionEnd::Fail(format!("stream {}: {e}", index + 1)))?;
        let port = listener
            .local_addr()
            .map_err(|e| SessionEnd::Fail(format!("stream listener address: {e}")))?
            .port();
        let session = self.setup.session;
        let deadline = crate::after(self.cfg.handshake_timeout);
        let tx = p.accepted_tx.clone();
        let shutdown = self.shutdown.clone();
        std::thread::Builder::new()
            .name(format!("tcptune-accept-{}", index + 1))
            .spawn(move || {
                let r = accept_stream(&listener, &session, index, deadline, &shutdown);
                let _ = tx.send((index, r, driver));
            })
            .map_err(|e| SessionEnd::Fail(format!("spawning an accept thread: {e}")))?;
        p.pending += 1;
        Ok(port)
    }

    fn end_phase(&mut self, mut p: PhaseState) -> Result<crate::engine::SideResult, SessionEnd> {
        let deadline = crate::after(self.cfg.idle_timeout);
        // Streams still being accepted must arrive (or fail) first.
        while p.pending > 0 || !p.engine.all_done() {
            self.service_phase(&mut p)?;
            if Instant::now() > deadline {
                p.engine.abort();
                return Err(SessionEnd::Fail(
                    "the phase did not end: streams still open after the client finished".into(),
                ));
            }
            let _ = p.engine.wait_event(Duration::from_millis(20));
        }
        let (result, _) = p.engine.finish();
        Ok(result)
    }
}

fn accept_stream(
    listener: &TcpListener,
    session: &[u8; 16],
    index: u32,
    deadline: Instant,
    shutdown: &Shutdown,
) -> Result<TcpStream, String> {
    let timeout = || format!("stream {}: the client did not connect in time", index + 1);
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("stream listener: {e}"))?;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || shutdown.is_triggered() {
            return Err(timeout());
        }
        match tcptune_sys::os::wait_readable(listener.as_fd(), left.min(Duration::from_millis(200)))
        {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => return Err(format!("stream {}: poll: {e}", index + 1)),
        }
        let mut s = match listener.accept() {
            Ok((s, _)) => s,
            Err(_) => continue,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if s.set_nonblocking(false).is_err()
            || s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .is_err()
        {
            continue;
        }
        let mut hello = [0u8; DATA_HELLO_LEN];
        if s.read_exact(&mut hello).is_ok() && check_data_hello(&hello, session, index) {
            return Ok(s);
        }
        // Not our client: drop it and keep waiting.
        let _ = s.flush();
    }
}

/// The default port of `tcptune serve`.
pub const DEFAULT_PORT: u16 = 5310;

/// The bounds a server applies, for display (`tcptune serve` prints them).
pub fn describe_limits(cfg: &ServerConfig) -> String {
    let l = &cfg.limits;
    format!(
        "max {} sessions, {} streams/session, {} message size, {} messages, {} total, {:.0}s duration; handshake timeout {:.0}s, idle timeout {:.0}s{}",
        cfg.max_sessions,
        l.max_streams,
        tcptune_core::Bytes(l.max_message_size),
        l.max_messages,
        tcptune_core::Bytes(l.max_total_bytes),
        l.max_duration_ms as f64 / 1000.0,
        cfg.handshake_timeout.as_secs_f64(),
        cfg.idle_timeout.as_secs_f64(),
        if cfg.secret.is_some() { ", shared secret required" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcptune_core::TuneMode;

    fn params() -> TestParams {
        TestParams {
            tune: TuneMode::Kernel,
            streams: 4,
            message_size: 1 << 20,
            messages: 128,
            duration_ms: None,
            max_time_ms: None,
            reverse: false,
            samples: false,
            congestion: None,
            seed: 1,
            corrupt_message: None,
        }
    }

    #[test]
    fn hostile_probe_lengths_and_hints_are_bounded() {
        assert!(check_phase(Phase::Probe {
            duration_ms: u64::MAX
        })
        .is_err());
        assert!(check_phase(Phase::Probe { duration_ms: 0 }).is_err());
        assert!(check_phase(Phase::Probe { duration_ms: 500 }).is_ok());
        assert!(check_phase(Phase::Main).is_ok());
        let h = sanitize_hint(PathHint {
            rtt: Some(Duration::MAX),
            rate: Some(tcptune_core::Rate(u64::MAX)),
            ..Default::default()
        });
        assert_eq!(h.rtt, Some(Duration::from_secs(60)));
        assert!(h.rate.is_some_and(|r| r.0 <= 10_000_000_000_000));
    }

    #[test]
    fn validation_refuses_requests_past_the_bounds() {
        let l = ServerConfig::default().limits;
        assert!(validate(&params(), &l).is_ok());
        let mut p = params();
        p.streams = 1000;
        assert!(validate(&p, &l).unwrap_err().contains("streams"));
        let mut p = params();
        p.message_size = 1 << 30;
        assert!(validate(&p, &l).unwrap_err().contains("message size"));
        let mut p = params();
        p.messages = u64::MAX;
        assert!(validate(&p, &l).is_err());
        let mut p = params();
        p.messages = 1 << 24;
        p.message_size = 16 << 20;
        assert!(validate(&p, &l).unwrap_err().contains("total"));
        let mut p = params();
        p.duration_ms = Some(0);
        assert!(validate(&p, &l).is_err());
        let mut p = params();
        p.congestion = Some("../x".into());
        assert!(validate(&p, &l).is_err());
    }
}
