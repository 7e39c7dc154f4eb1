//! The server's event loop: moves bytes between sockets and the [`Endpoint`], runs the
//! engines it asks for, hands the path database's work to its thread ([`PathDbWorker`]),
//! counts for monitoring, and writes its log records. No policy lives here.

use super::metrics::RecordResult;
use super::paths::{PathDbWorker, RecordOutcome, Reply};
use super::{BudgetShare, ServerConfig, ServerError, ServerEvent, ServerStats, Shutdown};
use crate::engine::{Engine, EngineConfig, Notify, SideResult};
use crate::files::budget::CopyLimits;
use crate::files::plan::DestSpec;
use crate::files::walk::WalkLimits;
use crate::files::work::{FileWork, Source as FileSource, Spec};
use crate::pattern::Pattern;
use crate::phase::{prepare_accepted, DriverSpec, PhaseTuning};
use crate::session::endpoint::{
    Endpoint, EndpointConfig, EndpointEvent, HostInfo, ReadLimit, ShareRules,
};
use crate::session::server::{EngineSpec, Observation};
use crate::session::{ConnId, SessionId};
use mio::net::{TcpListener as MioListener, TcpStream as MioStream};
use mio::{Events, Interest, Poll, Token as MioToken, Waker};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpListener};
use std::os::fd::{AsFd, FromRawFd, IntoRawFd};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tcptune_core::pathdb::{Direction, Measurement};
use tcptune_core::tuners::pool::{PoolConfig, SharedPool};
use tcptune_core::{Bytes, Role, TunerFactory};
use tcptune_pathdb::Source;
use tcptune_proto::keys::CopyKeys;
use tcptune_sys::fs::Dir;

const LISTENER: MioToken = MioToken(0);
const WAKER: MioToken = MioToken(1);
const FIRST_CONN: u64 = 2;
/// Longest pause of the loop (it notices a shutdown within this).
const TICK: Duration = Duration::from_millis(100);
/// Output a control connection may have waiting before its peer counts as not reading.
const MAX_OUT: usize = 32 * 1024 * 1024;
/// How long a closed connection may take to flush what was sent to it and see the peer
/// close.
const LINGER: Duration = Duration::from_secs(2);
/// Closing connections kept lingering at most; past this they close at once.
const MAX_LINGERING: usize = 1024;
/// Descriptors kept out of the connection budget (listener, epoll, pipes, logs, files).
const FD_RESERVE: u64 = 64;
/// How often the memory budget's shares are logged while streams hold some.
const BUDGET_LOG_EVERY: Duration = Duration::from_secs(5);
/// How often running engines' bytes are added to the metrics.
const COUNT_EVERY: Duration = Duration::from_millis(500);

/// A finished phase's result, from its finishing thread.
struct Finished(SessionId, u32, Box<SideResult>);

struct Conn {
    stream: MioStream,
    out: Vec<u8>,
    sent: usize,
    /// Closing: write what is queued, then send FIN and drain what the peer still sends
    /// until it closes too (closing with unread input would send a reset, and the peer's
    /// kernel would throw away our last message, the reason for a refusal), but no longer
    /// than this.
    close_at: Option<Instant>,
    /// FIN sent.
    shut: bool,
    /// A data connection that waited for its session with its receive buffer made small
    /// ([`PARKED_RCVBUF`]).
    shrunk: bool,
}

struct Phase {
    engine: Engine,
    files: Option<Arc<FileWork>>,
    tuning: PhaseTuning,
    spec: DriverSpec,
    streams: u32,
    congestion: Option<String>,
    /// For monitoring: the session's mode, and the bytes of this phase already counted.
    mode: &'static str,
    counted: u64,
    /// Careful resume's route to the client, held by its thread until this is dropped: when
    /// every stream asked for has joined (new connections took their window), or the phase
    /// ends.
    resume_route: Option<Sender<()>>,
    /// Streams joined so far.
    attached: u32,
}

/// The longest careful resume's route to a client stays installed (its streams connect
/// about one RTT after their phase starts; a client that never connects them loses it).
const RESUME_ROUTE_HOLD: Duration = Duration::from_secs(10);

/// The receive window `serve --careful-resume` offers every connection from its SYN-ACK on
/// (at most half `tcp_rmem[2]`; Linux's default is 64 KiB), so that a client that pushes on
/// a known path can send its first round trip's burst at once instead of growing the
/// server's window about threefold per round trip. Measured on the emulator (128 MiB, 200
/// ms / 1 Gbit/s, 8 streams, a known path): 2.35 s with 64 KiB, 2.03 s with 1 MiB, 1.97 s
/// with 2 MiB, 1.91 s with 4 MiB (the physical limit is 1.61 s). What the kernel may buffer
/// for a connection nobody reads yet is kept small instead ([`PARKED_RCVBUF`]), and a
/// connection that is neither data nor control is closed at its first bytes.
const RESUME_RECEIVE_WINDOW: u64 = 4 << 20;

/// The receive buffer of a data connection that waits for its session (not admitted, its
/// phase not started, or queued): a connection nobody reads holds no more than this, once
/// parked. What arrived before (with its hello, up to the offered window) stays until the
/// connection is attached or closed (its handshake timeout), so with large windows offered
/// the connections that wait for a token nobody knows (no session, no keys agreed: a
/// stranger's) are counted against these budgets (256 MiB in all, 64 MiB from one address:
/// 64 and 16 connections at 4 MiB); a session's own streams are bounded by its streams and
/// the sessions an address may have, and honest clients connect them once their session's
/// keys are agreed, so they rarely wait.
const PARKED_RCVBUF: u64 = 64 << 10;
/// See [`PARKED_RCVBUF`].
const PARKED_WINDOW_BUDGET: u64 = 256 << 20;
/// See [`PARKED_RCVBUF`].
const PARKED_WINDOW_BUDGET_PER_ADDR: u64 = 64 << 20;

/// The most careful resume lets one session's streams send before their first ACKs, in all:
/// the client's word sizes the burst, and this bounds what a client that claims too much
/// can have sent toward it (a 100 ms path at 5 Gbit/s fits).
pub(crate) const RESUME_MAX_BURST_BYTES: u64 = 64 << 20;

/// A client's word for careful resume, checked: the initial window (segments) each of its
/// `streams` gets when this server sends, or why not. Pure: `measured` is the RTT this
/// server measured on the client's control connection, `max_payload` what one of its
/// sockets can hold for sending (`None`: no cap).
fn resume_segments(
    hint: &tcptune_core::PathHint,
    measured: Option<Duration>,
    streams: u32,
    max_payload: Option<u64>,
) -> Result<u64, String> {
    if !hint.resume {
        return Err("the client's path is not known".into());
    }
    let (Some(rate), Some(rtt)) = (hint.rate, hint.rtt) else {
        return Err("the client gave no rate and RTT".into());
    };
    let Some(measured) = measured else {
        return Err("this server measured no RTT to the client".into());
    };
    // The client's saved RTT must be the one this server sees.
    if !tcptune_core::tuners::auto::same_path_rtt(measured, rtt) {
        return Err(format!(
            "the RTT this server measures ({}) is not the client's ({})",
            tcptune_core::format_duration(measured),
            tcptune_core::format_duration(rtt)
        ));
    }
    let share = rate.bdp(rtt).0.min(RESUME_MAX_BURST_BYTES) / u64::from(streams.max(1));
    let share = max_payload.map_or(share, |m| share.min(m));
    Ok(share.div_ceil(1448).clamp(10, 1 << 20))
}

impl Phase {
    /// Add the bytes moved since the last count to the metrics.
    fn count(&mut self, metrics: Option<&super::ServeMetrics>) {
        let Some(m) = metrics else { return };
        let now = self.engine.bytes();
        let direction = match self.spec.role {
            Role::Sender => Direction::Send,
            Role::Receiver => Direction::Receive,
        };
        m.add_bytes(direction, self.mode, now.saturating_sub(self.counted));
        self.counted = self.counted.max(now);
    }
}

/// Serve until `shutdown` fires (or, with `one_off`, until one session ended).
pub fn run(
    listener: TcpListener,
    config: ServerConfig,
    shutdown: Shutdown,
) -> Result<ServerStats, ServerError> {
    let io = |op: &'static str| move |source: io::Error| ServerError::Io { op, source };
    listener
        .set_nonblocking(true)
        .map_err(io("set the listener non-blocking"))?;
    // The address clients reach: this host's measurements of their paths are recorded as
    // measured from it (when the listener is bound to one).
    let local_ip = listener
        .local_addr()
        .ok()
        .map(|a| a.ip())
        .filter(|ip| !ip.is_unspecified());
    // Careful resume for clients that send: a large window from the SYN-ACK on.
    let offered_window = config
        .careful_resume
        .then(|| {
            tcptune_sys::sockopt::offer_receive_window(
                listener.as_fd(),
                tcptune_core::Bytes(RESUME_RECEIVE_WINDOW),
            )
            .ok()
        })
        .flatten();
    let mut listener = MioListener::from_std(listener);
    let poll = Poll::new().map_err(io("create the event loop"))?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
        .map_err(io("register the listener"))?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(io("create a waker"))?);
    let nofile = tcptune_sys::os::raise_nofile_limit().unwrap_or(1024);
    let force = config.force_buffers && tcptune_sys::os::has_cap_net_admin();
    let ecfg = endpoint_config(&config, nofile);
    let share = open_share(&config)?;
    let nonces = Box::new(|| {
        let mut n = [0u8; 32];
        // getrandom does not fail on Linux once the pool is initialized; a zero challenge
        // would only weaken one challenge, never accept a wrong secret.
        let _ = tcptune_sys::os::random_bytes(&mut n);
        n
    });
    // The loop's start: the endpoint's, the budget's and the counters' clocks begin here.
    let start = Instant::now();
    let kx = Box::new(crate::keys::ServerExchange);
    let mut endpoint = Endpoint::new(start, ecfg, host_info(force), nonces, kx);
    let (tx, rx) = mpsc::channel::<Finished>();
    let paths = match &config.path_db {
        Some(p) => Some(
            PathDbWorker::start(
                p.clone(),
                config.path_db_bounds.clone(),
                local_ip,
                waker.clone(),
            )
            .map_err(io("start the path database's thread"))?,
        ),
        None => None,
    };
    let mut d = Driver {
        poll,
        waker,
        conns: HashMap::new(),
        phases: HashMap::new(),
        tx,
        next_conn: FIRST_CONN,
        accept_paused: None,
        lingering: 0,
        force,
        budget: config.memory_budget.map(|b| Budget {
            pool: PoolConfig::default().size(Bytes(b)).shared(),
            epoch: start,
            logged: None,
        }),
        config,
        share,
        paths,
        lookup_rtts: HashMap::new(),
        offered_window,
        route_changed: mpsc::channel(),
        counted_at: start,
        host_read: start,
        finished_sessions: 0,
        now: start,
        unix: unix_time(),
    };
    let mut events = Events::with_capacity(1024);
    while !shutdown.is_triggered() && !d.one_off_done(&endpoint) {
        d.turn(&mut endpoint, &mut listener, &mut events, &rx)?;
    }
    for (_, p) in d.phases.drain() {
        p.engine.abort();
    }
    Ok(endpoint.stats())
}

/// The endpoint's rules, from the server's configuration and the descriptors it may open.
fn endpoint_config(config: &ServerConfig, nofile: u64) -> EndpointConfig {
    EndpointConfig {
        limits: config.limits.clone(),
        max_sessions: config.max_sessions,
        max_sessions_per_addr: config.max_sessions_per_addr.max(1),
        max_pending: config.max_pending.max(1),
        max_pending_per_addr: config.max_pending_per_addr.max(1),
        // What parked connections may hold before they are made small: the window the
        // listener offers them, within a budget when it is large.
        max_parked: if config.careful_resume {
            (PARKED_WINDOW_BUDGET / RESUME_RECEIVE_WINDOW) as u32
        } else {
            config.max_pending.max(1)
        },
        max_parked_per_addr: if config.careful_resume {
            (PARKED_WINDOW_BUDGET_PER_ADDR / RESUME_RECEIVE_WINDOW) as u32
        } else {
            config.max_pending_per_addr.max(1)
        },
        first_frame_timeout: config.first_frame_timeout,
        handshake_timeout: config.handshake_timeout,
        idle_timeout: config.idle_timeout,
        secret: config.secret.clone(),
        fd_budget: nofile.saturating_sub(FD_RESERVE).max(8),
        files: config.files.as_ref().map(|f| ShareRules {
            read_only: f.read_only,
        }),
        slots: config.slots.clone(),
    }
}

/// Where a pushed copy lands, beneath the share: the destination without trailing `/`s
/// (empty: the share's top). Unconfined (`serve --stdio`), `/` is the file system's root,
/// not the home directory.
fn dest_base(dest: &str, confined: bool) -> PathBuf {
    let trimmed = dest.trim_end_matches('/');
    if trimmed.is_empty() && !confined && dest.starts_with('/') {
        PathBuf::from("/")
    } else {
        PathBuf::from(trimmed)
    }
}

/// The shared directory (`--root`), if the server shares one.
fn open_share(config: &ServerConfig) -> Result<Option<Arc<Dir>>, ServerError> {
    match &config.files {
        Some(f) => {
            let open = if f.confined {
                Dir::open
            } else {
                Dir::open_unconfined
            };
            Ok(Some(Arc::new(open(&f.root).map_err(|e| {
                ServerError::Io {
                    op: "open the shared directory (--root)",
                    source: e.source,
                }
            })?)))
        }
        None => Ok(None),
    }
}

/// The host's limits and congestion controls, as sessions are offered them.
fn host_info(force: bool) -> HostInfo {
    let mut limits = tcptune_sys::sysctl::read_host_limits()
        .unwrap_or_else(|_| tcptune_core::HostLimits::linux_defaults());
    limits.can_force = force;
    let read = |k: &str| tcptune_sys::sysctl::read_sysctl(k).unwrap_or_default();
    let congestion = read("net.ipv4.tcp_congestion_control").trim().to_string();
    let mut available: Vec<String> = read("net.ipv4.tcp_available_congestion_control")
        .split_whitespace()
        .chain(read("net.ipv4.tcp_allowed_congestion_control").split_whitespace())
        .map(str::to_string)
        .collect();
    if tcptune_sys::os::has_cap_net_admin() {
        // A privileged socket may load a congestion control module on demand.
        available.extend(tcptune_sys::os::congestion_modules());
    }
    available.sort();
    available.dedup();
    HostInfo {
        limits,
        congestion,
        available_cc: available,
    }
}

/// A memory budget shared by every session's `psc` and `auto` streams.
struct Budget {
    pool: SharedPool,
    /// The pool's clock starts here; each phase's view is offset by its own epoch.
    epoch: Instant,
    /// When the shares were last logged, and how many streams there were.
    logged: Option<(Instant, usize)>,
}

struct Driver {
    poll: Poll,
    waker: Arc<Waker>,
    conns: HashMap<ConnId, Conn>,
    phases: HashMap<SessionId, Phase>,
    tx: Sender<Finished>,
    /// Careful resume's route threads say here when a session's route changed.
    route_changed: (Sender<SessionId>, Receiver<SessionId>),
    next_conn: u64,
    accept_paused: Option<Instant>,
    /// Connections closing (see [`Conn::close_at`]).
    lingering: usize,
    force: bool,
    budget: Option<Budget>,
    config: ServerConfig,
    /// The shared directory (`--root`), opened once.
    share: Option<Arc<Dir>>,
    paths: Option<PathDbWorker>,
    /// The control connection's RTT of each advice session waiting for the database.
    lookup_rtts: HashMap<SessionId, Option<Duration>>,
    /// The receive buffer the listener's connections start with when it offers them a
    /// large window ([`RESUME_RECEIVE_WINDOW`]), as read back.
    offered_window: Option<u64>,
    counted_at: Instant,
    /// When the host's limits were last read for the endpoint.
    host_read: Instant,
    /// Sessions that ended (`one_off` stops after the first).
    finished_sessions: u64,
    /// This turn's time, read once when its wait ended ([`Driver::turn`]); every handler
    /// of the turn uses it.
    now: Instant,
    /// This turn's wall-clock time since the Unix epoch, read with `now` (for records and
    /// authentication).
    unix: Duration,
}

/// Time since the Unix epoch by the wall clock (zero if the clock is before 1970).
fn unix_time() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

impl Driver {
    /// With `one_off`, whether the one session ended and everything sent to its client
    /// left.
    fn one_off_done(&self, endpoint: &Endpoint) -> bool {
        self.config.one_off
            && self.finished_sessions > 0
            && endpoint.sessions() == 0
            && self.conns.values().all(|c| c.out.len() == c.sent)
    }

    /// One turn of the loop: wait for events (at most [`TICK`]), hand them to the endpoint,
    /// accept, collect the engines' and the path database's results, give the endpoint
    /// its timeout when due, carrying out what it asks after each; then count, reap
    /// lingering connections and log the budget.
    fn turn(
        &mut self,
        endpoint: &mut Endpoint,
        listener: &mut MioListener,
        events: &mut Events,
        rx: &Receiver<Finished>,
    ) -> Result<(), ServerError> {
        // The wait's deadline is computed right before the blocking wait, from a read of
        // its own: the turn's `now` would be stale by the previous turn's work.
        let wait = endpoint.poll_timeout().map_or(TICK, |t| {
            t.saturating_duration_since(Instant::now()).min(TICK)
        });
        if let Err(e) = self.poll.poll(events, Some(wait)) {
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(ServerError::Io {
                    op: "wait for events",
                    source: e,
                });
            }
        }
        // The turn's time: read once, after the wait, and used by everything below.
        self.now = Instant::now();
        self.unix = unix_time();
        if self.now.saturating_duration_since(self.host_read) > Duration::from_secs(1) {
            endpoint.set_host(host_info(self.force));
            self.host_read = self.now;
        }
        let mut accept = false;
        for ev in events.iter() {
            match ev.token() {
                LISTENER => accept = true,
                WAKER => {}
                MioToken(t) => {
                    let conn = t as ConnId;
                    if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                        self.read(endpoint, conn);
                    }
                    if ev.is_writable() {
                        self.flush(endpoint, conn);
                    }
                }
            }
            self.carry_out(endpoint);
        }
        if accept || self.accept_paused.is_some_and(|t| self.now >= t) {
            self.accept(listener, endpoint);
            self.carry_out(endpoint);
        }
        self.collect_engines(rx, endpoint);
        self.carry_out(endpoint);
        self.collect_paths(endpoint);
        self.carry_out(endpoint);
        let now = self.now;
        if endpoint.poll_timeout().is_some_and(|t| t <= now) {
            let phases = &self.phases;
            endpoint.on_timeout(now, &|sid| {
                phases.get(&sid).map(|p| {
                    let view = p.engine.path_view();
                    Observation {
                        progress: p.engine.progress(),
                        delivered: view.delivered,
                        min_rtt: view.min_rtt,
                        out_of_order: view.out_of_order,
                    }
                })
            });
            self.carry_out(endpoint);
        }
        self.count(endpoint);
        self.reap_lingering();
        self.log_budget();
        Ok(())
    }

    /// Log the budget's shares when streams joined or left it, and every few seconds while
    /// any holds a share.
    fn log_budget(&mut self) {
        let now = self.now;
        let (Some(b), Some(log)) = (self.budget.as_mut(), self.config.log.as_ref()) else {
            return;
        };
        let n = b.pool.with(|p| p.len());
        let due = match b.logged {
            None => n > 0,
            Some((t, last)) => {
                n != last || (n > 0 && now.saturating_duration_since(t) >= BUDGET_LOG_EVERY)
            }
        };
        if !due {
            return;
        }
        b.logged = Some((now, n));
        let ev = b.pool.with(|p| ServerEvent::MemoryBudget {
            budget_bytes: p.config().pool_size().0,
            fair_share_bytes: p.fair_share().0,
            held_bytes: p.held_total().0,
            in_use_bytes: p.in_use_total().0,
            streams: p
                .shares()
                .into_iter()
                .map(|s| BudgetShare {
                    session: s.owner,
                    stream: s.stream + 1,
                    wants_bytes: s.net_target.0,
                    held_bytes: s.held.0,
                    in_use_bytes: s.in_use.0,
                })
                .collect(),
        });
        log(&ev);
    }

    /// Every so often: the running engines' bytes and the load, for monitoring.
    fn count(&mut self, endpoint: &Endpoint) {
        let Some(m) = self.config.metrics.clone() else {
            return;
        };
        if self.now.saturating_duration_since(self.counted_at) < COUNT_EVERY {
            return;
        }
        self.counted_at = self.now;
        for p in self.phases.values_mut() {
            p.count(Some(&m));
        }
        let stats = endpoint.stats();
        m.set_load(stats.sessions_active, stats.pending);
    }

    /// The path database's answers.
    fn collect_paths(&mut self, endpoint: &mut Endpoint) {
        while let Some(reply) = self.paths.as_ref().and_then(PathDbWorker::poll) {
            match reply {
                Reply::Lookup { session, known } => {
                    // The RTT was read when the lookup was asked for.
                    let rtt = known.as_ref().map(|k| k.min_rtt);
                    let rtt = self.lookup_rtts.remove(&session).flatten().or(rtt);
                    endpoint.on_lookup(self.now, session, rtt, known, self.unix.as_secs_f64());
                }
                Reply::Recorded(o) => {
                    if let Some(m) = &self.config.metrics {
                        m.record(match o {
                            RecordOutcome::Recorded => RecordResult::Recorded,
                            RecordOutcome::Full => RecordResult::Full,
                            RecordOutcome::Failed => RecordResult::Failed,
                        });
                    }
                }
                Reply::Warning(message) => {
                    if let Some(log) = &self.config.log {
                        log(&ServerEvent::Warning { message });
                    }
                }
            }
        }
    }

    fn accept(&mut self, listener: &mut MioListener, endpoint: &mut Endpoint) {
        self.accept_paused = None;
        loop {
            match listener.accept() {
                Ok((mut stream, peer)) => {
                    let conn = self.next_conn;
                    self.next_conn += 1;
                    let token = MioToken(conn as usize);
                    if self
                        .poll
                        .registry()
                        .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
                        .is_err()
                    {
                        continue; // dropping it closes it
                    }
                    let _ = stream.set_nodelay(true);
                    self.conns.insert(
                        conn,
                        Conn {
                            stream,
                            out: Vec::new(),
                            sent: 0,
                            close_at: None,
                            shut: false,
                            shrunk: false,
                        },
                    );
                    endpoint.on_accept(self.now, conn, peer);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                Err(_) => {
                    // Out of descriptors (or memory): try again shortly rather than spin.
                    self.accept_paused = Some(self.now + Duration::from_millis(50));
                    return;
                }
            }
        }
    }

    fn read(&mut self, endpoint: &mut Endpoint, conn: ConnId) {
        let mut buf = [0u8; 16 * 1024];
        if self.conns.get(&conn).is_some_and(|c| c.close_at.is_some()) {
            return self.drain_closing(conn);
        }
        loop {
            let max = match endpoint.read_limit(conn) {
                ReadLimit::None => return,
                ReadLimit::Exact(n) => n.min(buf.len()),
                ReadLimit::Frames => buf.len(),
            };
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            match c.stream.read(&mut buf[..max]) {
                Ok(0) => {
                    endpoint.on_closed(self.now, conn);
                    return;
                }
                Ok(n) => endpoint.on_bytes(self.now, self.unix.as_secs(), conn, &buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    endpoint.on_closed(self.now, conn);
                    return;
                }
            }
        }
    }

    fn flush(&mut self, endpoint: &mut Endpoint, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        while c.sent < c.out.len() {
            match c.stream.write(&c.out[c.sent..]) {
                Ok(0) => break,
                Ok(n) => c.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    c.out.clear();
                    c.sent = 0;
                    if c.close_at.is_none() {
                        endpoint.on_write_failed(self.now, conn);
                    }
                    return;
                }
            }
        }
        if c.sent == c.out.len() {
            c.out.clear();
            c.sent = 0;
            if c.close_at.is_some() && !c.shut {
                c.shut = true;
                let _ = c.stream.shutdown(std::net::Shutdown::Write);
                self.drain_closing(conn);
            }
        } else if c.sent > 1 << 20 {
            c.out.drain(..c.sent);
            c.sent = 0;
        }
    }

    /// Read and discard what a closing connection's peer still sends; drop it at its EOF.
    fn drain_closing(&mut self, conn: ConnId) {
        let mut buf = [0u8; 4096];
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if !c.shut {
            return;
        }
        loop {
            match c.stream.read(&mut buf) {
                Ok(0) => return self.drop_conn(conn),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => return self.drop_conn(conn),
            }
        }
    }

    fn drop_conn(&mut self, conn: ConnId) {
        if let Some(mut c) = self.conns.remove(&conn) {
            if c.close_at.is_some() {
                self.lingering -= 1;
            }
            let _ = self.poll.registry().deregister(&mut c.stream);
        }
    }

    fn reap_lingering(&mut self) {
        if self.lingering == 0 {
            return;
        }
        let now = self.now;
        let late: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.close_at.is_some_and(|t| now >= t))
            .map(|(id, _)| *id)
            .collect();
        for conn in late {
            self.drop_conn(conn);
        }
    }

    fn collect_engines(&mut self, rx: &Receiver<Finished>, endpoint: &mut Endpoint) {
        // Engines post their events to their own channels and wake the loop.
        let mut evs = Vec::new();
        for (sid, p) in &self.phases {
            while let Some(ev) = p.engine.poll_event() {
                evs.push((*sid, ev));
            }
        }
        for (sid, ev) in evs {
            endpoint.on_engine(self.now, sid, ev);
        }
        while let Ok(Finished(sid, seq, r)) = rx.try_recv() {
            endpoint.on_phase_result(self.now, sid, seq, *r);
        }
        while let Ok(sid) = self.route_changed.1.try_recv() {
            endpoint.on_route_changed(self.now, sid);
        }
    }

    /// Carry out what the endpoint asks, until it asks nothing more.
    fn carry_out(&mut self, endpoint: &mut Endpoint) {
        while let Some(ev) = endpoint.poll_event() {
            match ev {
                EndpointEvent::Send { conn, frame } => self.send(endpoint, conn, &frame),
                EndpointEvent::Close { conn } => self.close(endpoint, conn),
                EndpointEvent::StartEngine {
                    session,
                    label,
                    ctrl,
                    peer,
                    spec,
                    mode,
                    keys,
                } => self.start_engine(session, (&label, ctrl, peer), *spec, (mode, *keys)),
                EndpointEvent::Parked { conn } => {
                    if let (Some(_), Some(c)) = (self.offered_window, self.conns.get_mut(&conn)) {
                        // Locks the buffer; the attach gives it back its size.
                        c.shrunk = tcptune_sys::sockopt::set_rcvbuf(
                            c.stream.as_fd(),
                            tcptune_core::Bytes(PARKED_RCVBUF),
                            false,
                        )
                        .is_ok();
                    }
                }
                EndpointEvent::Attach {
                    session,
                    conn,
                    index,
                } => {
                    if let Err(e) = self.attach(session, conn, index) {
                        let reason = format!("stream {}: {e}", index + 1);
                        endpoint.on_session_error(self.now, session, reason);
                    }
                }
                EndpointEvent::Hint {
                    session,
                    hint,
                    streams,
                } => {
                    if let Some(p) = self.phases.get_mut(&session) {
                        p.engine.hint(&hint, streams);
                        // Streams that join later are built with it.
                        p.spec.hint = hint;
                        p.streams = p.streams.max(streams);
                    }
                }
                EndpointEvent::Pace { session, rate } => {
                    if let Some(p) = self.phases.get(&session) {
                        p.engine.pace(rate);
                    }
                }
                EndpointEvent::RetireSenders { session, keep } => {
                    if let Some(p) = self.phases.get_mut(&session) {
                        p.engine.retire_beyond(keep);
                    }
                }
                EndpointEvent::StopSenders { session } => {
                    if let Some(p) = self.phases.get(&session) {
                        p.engine.stop();
                    }
                }
                EndpointEvent::AbortEngine { session } => {
                    if let Some(p) = self.phases.get(&session) {
                        p.engine.abort();
                    }
                }
                EndpointEvent::FinishEngine { session, seq } => {
                    self.finish_engine(endpoint, session, seq)
                }
                EndpointEvent::SessionGone { session } => {
                    if let Some(mut p) = self.phases.remove(&session) {
                        p.engine.abort();
                        p.count(self.config.metrics.as_deref());
                    }
                    self.lookup_rtts.remove(&session);
                    self.finished_sessions += 1;
                }
                EndpointEvent::Log(ev) => {
                    if let Some(log) = &self.config.log {
                        log(&ev);
                    }
                }
                EndpointEvent::Lookup {
                    session,
                    conn,
                    peer,
                    direction,
                } => self.lookup(endpoint, session, conn, peer, direction),
                EndpointEvent::Record {
                    peer,
                    direction,
                    measurement,
                    advice,
                } => self.record(peer, direction, measurement, advice),
                EndpointEvent::Monitor(ev) => {
                    if let Some(m) = &self.config.metrics {
                        m.monitor(&ev);
                    }
                }
            }
        }
    }

    /// Queue a frame on a connection and write what it can; a peer that lets more than
    /// [`MAX_OUT`] wait is not reading, and its connection fails.
    fn send(&mut self, endpoint: &mut Endpoint, conn: ConnId, frame: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.out.len() - c.sent + frame.len() > MAX_OUT {
            c.out.clear();
            c.sent = 0;
            endpoint.on_write_failed(self.now, conn);
            return;
        }
        c.out.extend_from_slice(frame);
        self.flush(endpoint, conn);
    }

    /// Close a connection: it lingers to flush (see [`Conn::close_at`]) unless too many do.
    fn close(&mut self, endpoint: &mut Endpoint, conn: ConnId) {
        let lingering = self.lingering;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if lingering >= MAX_LINGERING {
            self.drop_conn(conn);
            return;
        }
        if c.close_at.is_none() {
            c.close_at = Some(self.now + LINGER);
            self.lingering += 1;
        }
        self.flush(endpoint, conn);
    }

    /// End a phase's engine on a thread of its own (joining its streams may take a
    /// moment); its result comes back through [`Driver::collect_engines`].
    fn finish_engine(&mut self, endpoint: &mut Endpoint, session: SessionId, seq: u32) {
        let Some(mut p) = self.phases.remove(&session) else {
            return;
        };
        p.count(self.config.metrics.as_deref());
        let (tx, waker) = (self.tx.clone(), self.waker.clone());
        let spawned = std::thread::Builder::new()
            .name("tcptune-finish".into())
            .spawn(move || {
                let (mut r, _) = p.engine.finish();
                if let Some(w) = &p.files {
                    r.files = Some(w.summary());
                }
                let _ = tx.send(Finished(session, seq, Box::new(r)));
                let _ = waker.wake();
            });
        if let Err(e) = spawned {
            let reason = format!("starting a thread to end the phase: {e}");
            endpoint.on_session_error(self.now, session, reason);
        }
    }

    /// Ask the path database about a client's path, with the RTT of its control
    /// connection; without a database, an RTT or room in its queue, nothing is known.
    fn lookup(
        &mut self,
        endpoint: &mut Endpoint,
        session: SessionId,
        conn: ConnId,
        peer: IpAddr,
        direction: Direction,
    ) {
        let rtt = self.conn_rtt(conn);
        let asked = match (&self.paths, rtt) {
            (Some(w), Some(r)) => w.lookup(session, peer, direction, r),
            _ => false,
        };
        if asked {
            self.lookup_rtts.insert(session, rtt);
        } else {
            // No database, no RTT to look up with, or a full queue: nothing known (the
            // session measures, within its limits).
            endpoint.on_lookup(self.now, session, rtt, None, self.unix.as_secs_f64());
        }
    }

    /// Hand a measurement of a client's path to the path database's thread (counted as
    /// busy when its queue is full).
    fn record(
        &mut self,
        peer: IpAddr,
        direction: Direction,
        mut measurement: Measurement,
        advice: bool,
    ) {
        let Some(w) = &self.paths else { return };
        measurement.at_unix_s = self.unix.as_secs_f64();
        let source = if advice {
            Source::Advise
        } else {
            Source::Server
        };
        if !w.record(peer, direction, measurement, source) {
            if let Some(m) = &self.config.metrics {
                m.record(RecordResult::Busy);
            }
        }
    }

    /// The smallest RTT a connection measured (its handshake's, until data has flowed).
    fn conn_rtt(&self, conn: ConnId) -> Option<Duration> {
        self.conns.get(&conn).and_then(|c| {
            tcptune_sys::sockopt::tcp_info(c.stream.as_fd())
                .ok()
                .and_then(|t| t.min_rtt().or(t.rtt()))
        })
    }

    /// Careful resume for a client that receives: check its word against the RTT of its
    /// control connection `ctrl`, and install the route that gives its data connections
    /// their initial window on a thread of its own (`ip` runs there, not in this loop), held
    /// until the returned sender is dropped. After each change of the route (installed,
    /// then restored) the session is told ([`Endpoint::on_route_changed`]): the control
    /// connection's next message after a change of its route would leave in small segments
    /// and its result (6 kB) wait a round trip.
    fn resume_route(
        &self,
        session: SessionId,
        (label, ctrl, peer): (&str, ConnId, std::net::SocketAddr),
        spec: &EngineSpec,
        limits: &tcptune_core::HostLimits,
    ) -> Option<Sender<()>> {
        let log = self.config.log.clone();
        let label = label.to_string();
        let say = move |initcwnd_segs: Option<u64>, why_not: Option<String>| {
            if let Some(log) = &log {
                log(&ServerEvent::Resume {
                    peer,
                    session: label.clone(),
                    initcwnd_segs,
                    why_not,
                });
            }
        };
        let segments = match resume_segments(
            &spec.hint,
            self.conn_rtt(ctrl),
            spec.streams,
            tcptune_core::linux::max_send_payload(limits),
        ) {
            Ok(n) => n,
            Err(why) => {
                // A client that did not ask is not told about it in the log.
                if spec.hint.resume {
                    say(None, Some(why));
                }
                return None;
            }
        };
        let (tx, rx) = mpsc::channel::<()>();
        let ip = peer.ip().to_canonical();
        let (changed, waker) = (self.route_changed.0.clone(), self.waker.clone());
        let tell = move || {
            let _ = changed.send(session);
            let _ = waker.wake();
        };
        let spawned = std::thread::Builder::new()
            .name("resume-route".into())
            .spawn(move || {
                let installed = tcptune_sys::route::InitialWindow::install(
                    ip,
                    tcptune_sys::route::Window::Congestion,
                    u32::try_from(segments).unwrap_or(u32::MAX),
                );
                match &installed {
                    Ok(_) => {
                        tell();
                        say(Some(segments), None)
                    }
                    Err(e) => say(None, Some(e.to_string())),
                }
                // Until every stream joined, the phase ended, or the hold ran out.
                let _ = rx.recv_timeout(RESUME_ROUTE_HOLD);
                if installed.is_ok() {
                    drop(installed);
                    tell();
                }
            });
        spawned.ok().map(|_| tx)
    }

    fn start_engine(
        &mut self,
        session: SessionId,
        (label, ctrl, peer): (&str, ConnId, std::net::SocketAddr),
        spec: EngineSpec,
        (mode, keys): (&'static str, CopyKeys),
    ) {
        let role = if spec.params.reverse {
            Role::Sender
        } else {
            Role::Receiver
        };
        let main = spec.kind == crate::proto::Phase::Main;
        let epoch = self.now;
        let waker = self.waker.clone();
        let notify: Notify = Arc::new(move || {
            let _ = waker.wake();
        });
        let files = self.file_work(&spec, role);
        if let Some(work) = &files {
            work.set_block_key(keys.block);
            if let Some(k) = &keys.aead {
                work.set_aead_key(k, spec.params.reverse);
            }
        }
        let engine = Engine::new(EngineConfig {
            files: files.clone(),
            role,
            pattern: Arc::new(Pattern::new(spec.params.seed, spec.params.message_size)),
            messages: spec.messages(),
            corrupt: if main {
                spec.params.corrupt_message
            } else {
                None
            },
            record_series: spec.params.samples && main,
            interval: None,
            epoch,
            idle_timeout: self.config.idle_timeout,
            notify: Some(notify),
        });
        let mut limits = tcptune_sys::sysctl::read_host_limits()
            .unwrap_or_else(|_| tcptune_core::HostLimits::linux_defaults());
        limits.can_force = self.force;
        let resume_route = (self.config.careful_resume && role == Role::Sender && main)
            .then(|| self.resume_route(session, (label, ctrl, peer), &spec, &limits))
            .flatten();
        self.phases.insert(
            session,
            Phase {
                engine,
                files,
                tuning: match (&self.budget, main) {
                    // Every session's streams draw from the server's budget, each through
                    // a view on its own clock.
                    (Some(b), true) => {
                        PhaseTuning::Mode(TunerFactory::new(spec.params.tune.clone()).with_budget(
                            b.pool.view(epoch.saturating_duration_since(b.epoch), label),
                        ))
                    }
                    _ => PhaseTuning::for_phase(spec.kind, &spec.params.tune),
                },
                spec: DriverSpec {
                    role,
                    limits,
                    hint: spec.hint.clone(),
                    force: self.force,
                    record_series: spec.params.samples && main,
                    epoch,
                },
                streams: spec.streams,
                congestion: spec.params.congestion.clone(),
                mode,
                counted: 0,
                resume_route,
                attached: 0,
            },
        );
    }

    /// The files of a copy's main phase, beneath the shared directory.
    fn file_work(&self, spec: &EngineSpec, role: Role) -> Option<Arc<FileWork>> {
        let job = spec.params.files.as_ref()?;
        if spec.kind != crate::proto::Phase::Main {
            return None;
        }
        let root = self.share.clone()?;
        let share = self.config.files.as_ref()?;
        let max_files = share.max_files;
        let work_spec = match role {
            Role::Sender => Spec::Send {
                source: FileSource::Share {
                    root,
                    sources: job.sources.clone(),
                    recursive: job.recursive,
                    limits: WalkLimits {
                        max_entries: max_files,
                        max_bytes: self.config.limits.max_total_bytes,
                    },
                },
            },
            Role::Receiver => {
                let dest = job.dest.clone().unwrap_or_default();
                Spec::Recv {
                    dest: DestSpec {
                        root,
                        base: dest_base(&dest, share.confined),
                        shown: crate::server::escape(&dest, 200),
                        must_be_dir: dest.ends_with('/') && dest.len() > 1,
                        expect_tops: None,
                    },
                    resume: job.resume,
                    fsync: job.fsync,
                    limits: CopyLimits {
                        max_entries: max_files,
                        max_file_size: share.max_file_size,
                        max_total_bytes: self.config.limits.max_total_bytes,
                        max_manifest_bytes: share.max_manifest_bytes,
                    },
                }
            }
        };
        Some(Arc::new(FileWork::new(work_spec)))
    }

    fn attach(&mut self, session: SessionId, conn: ConnId, index: u32) -> io::Result<()> {
        let Some(mut c) = self.conns.remove(&conn) else {
            return Err(io::Error::other("the connection is gone"));
        };
        let _ = self.poll.registry().deregister(&mut c.stream);
        let shrunk = c.shrunk;
        // SAFETY: the descriptor moves from the mio stream to a std stream that owns it.
        let stream = unsafe { std::net::TcpStream::from_raw_fd(c.stream.into_raw_fd()) };
        if let (true, Some(offered)) = (shrunk, self.offered_window) {
            // Back to the size it was offered (`SO_RCVBUF` takes half of what it stores);
            // the session's tuner may set its own next.
            let _ = tcptune_sys::sockopt::set_rcvbuf(
                stream.as_fd(),
                tcptune_core::Bytes(offered / 2),
                false,
            );
        }
        let Some(p) = self.phases.get_mut(&session) else {
            return Err(io::Error::other("no phase is running"));
        };
        let mut driver = p.spec.driver(&p.tuning, index, p.streams.max(index + 1));
        prepare_accepted(
            self.now,
            stream.as_fd(),
            &mut driver,
            &p.spec,
            p.congestion.as_deref(),
        )
        .map_err(io::Error::other)?;
        p.attached += 1;
        if p.attached >= p.streams {
            // Every stream asked for took its window from the route: it goes at once (other
            // connections to the client must not inherit it).
            p.resume_route = None;
        }
        p.engine.add_stream(self.now, index, stream, driver)
    }
}

#[cfg(test)]
mod tests {
    use super::{dest_base, resume_segments};
    use std::path::PathBuf;
    use std::time::Duration;
    use tcptune_core::{PathHint, Rate};

    #[test]
    fn careful_resume_takes_a_clients_word_only_when_this_server_sees_the_same_path() {
        let ms = Duration::from_millis;
        let hint = PathHint {
            rate: Some(Rate::gbit(1)),
            rtt: Some(ms(100)),
            resume: true,
            ..PathHint::default()
        };
        // 1 Gbit/s x 100 ms = 12.5 MB; four streams: 3.125 MB each, 2159 segments of 1448.
        assert_eq!(resume_segments(&hint, Some(ms(101)), 4, None), Ok(2159));
        // Within what one socket can hold for sending here.
        assert_eq!(
            resume_segments(&hint, Some(ms(101)), 4, Some(1_448_000)),
            Ok(1000)
        );
        // At least the kernel's own 10.
        assert_eq!(resume_segments(&hint, Some(ms(101)), 4, Some(1000)), Ok(10));
        // A client that claims a huge path gets at most RESUME_MAX_BURST_BYTES in all.
        let huge = PathHint {
            rate: Some(Rate::gbit(400)),
            ..hint.clone()
        };
        let per = resume_segments(&huge, Some(ms(100)), 64, None).expect("known");
        assert!(
            per * 1448 * 64 <= super::RESUME_MAX_BURST_BYTES + 64 * 1448,
            "{per}"
        );
        // The RTT this server measures must be the client's.
        let e = resume_segments(&hint, Some(ms(60)), 4, None).expect_err("rerouted");
        assert!(e.contains("is not the client's"), "{e}");
        assert!(resume_segments(&hint, Some(ms(130)), 4, None).is_err());
        assert!(resume_segments(&hint, None, 4, None).is_err());
        // Nothing asked, nothing given.
        let unknown = PathHint {
            resume: false,
            ..hint.clone()
        };
        assert!(resume_segments(&unknown, Some(ms(100)), 4, None).is_err());
        let no_rate = PathHint { rate: None, ..hint };
        assert!(resume_segments(&no_rate, Some(ms(100)), 4, None).is_err());
    }

    #[test]
    fn a_push_to_slash_lands_at_the_root_only_when_unconfined() {
        assert_eq!(dest_base("/", false), PathBuf::from("/"));
        assert_eq!(dest_base("//", false), PathBuf::from("/"));
        assert_eq!(dest_base("/", true), PathBuf::new());
        assert_eq!(dest_base("", false), PathBuf::new());
        assert_eq!(dest_base("/data/", false), PathBuf::from("/data"));
        assert_eq!(dest_base("isos/", true), PathBuf::from("isos"));
    }
}
