//! The server's whole control plane as one state machine (quinn's `Endpoint` is the
//! model): connections and their bytes, engine events and time in; bytes to send,
//! connections to close, engine commands and log records out. The driver
//! ([`crate::server`]) only moves bytes and runs engines.
//!
//! # What it decides
//!
//! * **What a connection is.** Everything arrives on one port. The first bytes tell a data
//!   connection (its [`DataHello`]) from a control connection (a frame). The endpoint never
//!   lets the driver read past a data hello: the bytes after it belong to the engine.
//! * **Admission, bounded per address.** A connection that has not become part of a
//!   session yet is *pending*. Pending connections are bounded per address and in all; a
//!   new one over either bound evicts the oldest pending one (of its address, or of all),
//!   so a flood of idle or half-open connections cannot lock a good client out. A pending
//!   connection has [`EndpointConfig::first_frame_timeout`] to send its first complete
//!   message and [`EndpointConfig::handshake_timeout`] to be admitted. "Address" is a group
//!   of addresses: an IPv4 address, an IPv6 /64 (see [`crate::session::guard`]).
//! * **Slots** ([`SlotRules`]): sessions are bounded in all and, for clients that
//!   did not prove a shared secret, per address. A session's slot is kept by payload at the
//!   minimum rate after a grace period: when a client needs a slot and every one is taken,
//!   the slowest session below the rate is shed (told why, logged). When no slot can be had
//!   the client waits in a bounded queue ([`ServerMsg::Queued`], told its place as it
//!   changes) and is admitted in order when a slot frees; its pipelined data connections
//!   wait with it. A refusal's retry hint is the expected time until a slot frees from the
//!   running sessions' progress.
//! * **Authentication** (see [`crate::auth`]): proofs checked in constant time, nonces
//!   remembered within the clock-skew window, a challenge when freshness cannot be checked,
//!   and a per-address backoff after each failure.
//! * **File descriptors**: every pending connection costs one and every session reserves
//!   one plus its stream allowance against [`EndpointConfig::fd_budget`]; the allowance is
//!   what the client is told it may open.
//! * **Keys**: every admitted session gets keys from an X25519 exchange (the driver's
//!   [`KeyExchange`]) mixed with the shared secret if any ([`crate::keys`]).
//! * **Data connections** join the session whose token they carry, from its control
//!   connection's address only, with a hello tagged under the session's keys (a wrong tag
//!   closes that connection, never the session); one that arrives before its session or phase waits, parked,
//!   until its handshake deadline.
//! * **Logs**: every refusal is counted by kind; the first of each kind from each address is
//!   logged, the rest in periodic summaries.
//! * **The path database** ([`EndpointEvent::Record`], [`EndpointEvent::Lookup`]): what each
//!   session measured of its client's path is handed to the driver for the server's path
//!   database, at most a few times a minute per group of addresses
//!   ([`tcptune_core::pathdb::peer_group`]) and so many per second in all; an advice
//!   session's measurement likewise has its own, stricter rate per group.
//! * **Monitoring** ([`EndpointEvent::Monitor`]): admissions, handshake times, refusals by
//!   kind, ends of sessions and advice, for `serve --metrics`.
//! * **Fair shares** ([`crate::session::fair`]): every session's main phase shares the path
//!   with the others'; each session that takes shares ([`crate::wire::TestParams::share`])
//!   is told its own ([`ServerMsg::Share`]) when it changes, and when the server sends
//!   (`reverse`) the driver paces the session's engine at it ([`EndpointEvent::Pace`]).
//!
//! # Calling order
//!
//! For each accepted connection [`Endpoint::on_accept`]; then, whenever it is readable,
//! read at most what [`Endpoint::read_limit`] allows and pass it to [`Endpoint::on_bytes`]
//! (repeat while the limit allows and data comes); [`Endpoint::on_closed`] when the peer
//! closed or the connection failed. Engine events go to [`Endpoint::on_engine`], finished
//! phases to [`Endpoint::on_phase_result`], the path database's answers to
//! [`Endpoint::on_lookup`]. Call [`Endpoint::on_timeout`] at
//! [`Endpoint::poll_timeout`]. After every call drain [`Endpoint::poll_event`] and carry the
//! events out in order.

use super::fair::{FairConfig, FairShare, Share};
use super::guard::{addr_group, Backoff, LogDecision, LogLimiter, RateLimiter, ReplayCache};
use super::server::advise::{KnownPath, LookupAnswer};
use super::server::{EngineSpec, Observation, ServerSession, SessionEnd, SessionOutput};
use super::{ConnId, SessionId};
use crate::auth::Secret;
use crate::events::{QueueOutcome, ServerEvent, ServerStats};
use crate::keys::{CopyKeys, KeyExchange, KeyShare, SessionKeys};
use crate::result::SideResult;
use crate::session::Event;
use crate::wire::{
    self, ClientMsg, DataHello, FrameReader, Phase, ProtoError, ServerLimits, ServerMsg, Token,
    DATA_HELLO_LEN, DATA_MAGIC, MAX_CLIENT_FRAME, MAX_SERVER_FRAME,
};
use slots::{Progress, WaitQueue};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use tcptune_core::pathdb::{peer_group, Direction, Measurement};
use tcptune_core::HostLimits;

/// Frames a handshake discards after a challenge before it gives up on the client.
const MAX_DISCARDED: u32 = 16;
/// How long a kind of refusal from one address stays quiet after it was logged.
const LOG_PERIOD: Duration = Duration::from_secs(10);
/// Measurements recorded per group of addresses: 4 at once, then one every 15 s.
const RECORD_BURST: u32 = 4;
const RECORD_EVERY: Duration = Duration::from_secs(15);
/// Measurements recorded in all: 64 at once, then 20 a second.
const RECORD_ALL_BURST: u32 = 64;
const RECORD_ALL_EVERY: Duration = Duration::from_millis(50);
/// Measurements made to answer advice, per group of addresses: 2 at once, then one a
/// minute; in all: 8 at once, then one a second.
const MEASURE_BURST: u32 = 2;
const MEASURE_EVERY: Duration = Duration::from_secs(60);
const MEASURE_ALL_BURST: u32 = 8;
const MEASURE_ALL_EVERY: Duration = Duration::from_secs(1);
/// Groups of addresses each limiter remembers.
const LIMITER_KEYS: usize = 4096;

/// The endpoint's bounds.
#[derive(Clone, Debug)]
pub struct EndpointConfig {
    /// What a session may ask for.
    pub limits: ServerLimits,
    /// Most sessions at once.
    pub max_sessions: u32,
    /// Most sessions at once from one address.
    pub max_sessions_per_addr: u32,
    /// Most connections not yet in a session.
    pub max_pending: u32,
    /// Most connections not yet in a session from one address.
    pub max_pending_per_addr: u32,
    /// Most data connections waiting for a session nobody knows yet (no session, no keys
    /// agreed for their token: a Hello still on its way, or a stranger's), in all and from
    /// one address: what the kernel buffers for them before they are made small
    /// ([`EndpointEvent::Parked`]) is the driver's receive window, which may be large (`serve
    /// --careful-resume`). The streams of a session being admitted are bounded by its streams.
    pub max_parked: u32,
    /// See `max_parked`.
    pub max_parked_per_addr: u32,
    /// Time for a new connection's first frame.
    pub first_frame_timeout: Duration,
    /// Time for a control connection to be admitted.
    pub handshake_timeout: Duration,
    /// Longest time a session may go without progress.
    pub idle_timeout: Duration,
    /// The shared secret clients must prove, if any.
    pub secret: Option<Secret>,
    /// File descriptors the sessions may use in all.
    pub fd_budget: u64,
    /// The directory shared with `tcptune cp` clients, if any: whether it is read-only.
    pub files: Option<ShareRules>,
    /// The minimum rate that keeps a slot, and the wait queue's bounds.
    pub slots: SlotRules,
}

/// What admission needs to know of a shared directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareRules {
    /// Clients may only read from it.
    pub read_only: bool,
}

/// What the host offers sessions (refreshed by the driver).
#[derive(Clone, Debug, PartialEq)]
pub struct HostInfo {
    /// The host's buffer limits.
    pub limits: HostLimits,
    /// The namespace's default congestion control.
    pub congestion: String,
    /// Congestion controls a socket may choose.
    pub available_cc: Vec<String>,
}

/// What the driver must do.
#[derive(Debug, PartialEq)]
pub enum EndpointEvent {
    /// Write these bytes on the connection (after what was queued before).
    Send {
        /// The connection.
        conn: ConnId,
        /// The bytes.
        frame: Vec<u8>,
    },
    /// Close the connection once what was queued is written (or at once if it cannot be).
    Close {
        /// The connection.
        conn: ConnId,
    },
    /// Start the engine of a session's new phase.
    StartEngine {
        /// The session.
        session: SessionId,
        /// The session's label (as in the log).
        label: String,
        /// Its control connection (for what the server measured of the client's path).
        ctrl: ConnId,
        /// Where its control connection came from (its data connections come from the same
        /// host).
        peer: SocketAddr,
        /// What the engine runs.
        spec: Box<EngineSpec>,
        /// The session's tuning mode (`advise` for an advice's measurement), for monitoring.
        mode: &'static str,
        /// The keys of the copy's block tags and, when the job asks for it, of its sealed
        /// bodies (see [`crate::keys`]).
        keys: Box<CopyKeys>,
    },
    /// A data connection waits for its session (not admitted yet, its phase not started,
    /// or queued): until it is attached, what the kernel buffers for it should be small (a
    /// server that offers large receive windows from the SYN-ACK on holds no more than that
    /// for connections nobody reads).
    Parked {
        /// The data connection.
        conn: ConnId,
    },
    /// Stop reading this connection: hand it to the session's engine as stream `index`.
    Attach {
        /// The session.
        session: SessionId,
        /// The data connection.
        conn: ConnId,
        /// Its stream number.
        index: u32,
    },
    /// Pace the session's engine (its senders, this end sends): its streams together at
    /// most at `rate` (`None`: no cap). Its fair share (see [`crate::session::fair`]).
    Pace {
        /// The session.
        session: SessionId,
        /// The cap.
        rate: Option<tcptune_core::Rate>,
    },
    /// Tell the engine's tuners what is now known of the path.
    Hint {
        /// The session.
        session: SessionId,
        /// What is known of the path.
        hint: tcptune_core::PathHint,
        /// Streams of the phase.
        streams: u32,
    },
    /// The senders of streams `keep..` finish what they are sending and close.
    RetireSenders {
        /// The session.
        session: SessionId,
        /// Streams that stay.
        keep: u32,
    },
    /// Senders stop.
    StopSenders {
        /// The session.
        session: SessionId,
    },
    /// Tear the engine down.
    AbortEngine {
        /// The session.
        session: SessionId,
    },
    /// Join the engine and call [`Endpoint::on_phase_result`].
    FinishEngine {
        /// The session.
        session: SessionId,
        /// The phase.
        seq: u32,
    },
    /// The session is over: drop its engine (and its data connections).
    SessionGone {
        /// The session.
        session: SessionId,
    },
    /// Something for the log.
    Log(ServerEvent),
    /// Look the session's client path up in the path database (read the control
    /// connection's RTT) and call [`Endpoint::on_lookup`].
    Lookup {
        /// The session.
        session: SessionId,
        /// Its control connection.
        conn: ConnId,
        /// The client's address.
        peer: IpAddr,
        /// Which way the client's data flows (seen from the client).
        direction: Direction,
    },
    /// Record a measurement of a client's path in the path database.
    Record {
        /// The client's address.
        peer: IpAddr,
        /// Which way the client's data flowed (seen from the client).
        direction: Direction,
        /// What was measured.
        measurement: Measurement,
        /// It answered an advice (else a session measured it in passing).
        advice: bool,
    },
    /// Something for monitoring.
    Monitor(MonitorEvent),
}

/// What monitoring (`serve --metrics`) counts.
#[derive(Clone, Debug, PartialEq)]
pub enum MonitorEvent {
    /// A session was admitted.
    Admitted {
        /// The session's tuning mode.
        mode: &'static str,
    },
    /// A transfer's first phase started this long after its control connection was
    /// accepted.
    Handshake {
        /// Seconds.
        seconds: f64,
    },
    /// A connection was refused or dropped.
    Refused {
        /// The kind of refusal.
        kind: &'static str,
    },
    /// A session ended; `rate_bps` is its main phase's throughput at the server.
    Ended {
        /// The session's tuning mode.
        mode: &'static str,
        /// It completed (else it failed).
        completed: bool,
        /// Its main phase's throughput at the server, bit/s.
        rate_bps: Option<f64>,
    },
    /// An advice was given, from the path database or a measurement.
    Advice {
        /// `path_db` or `measured`.
        source: &'static str,
    },
    /// A measurement was not handed to the path database: too many from its group, or in
    /// all, lately.
    RecordLimited,
}

/// How much the driver may read from a connection now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadLimit {
    /// At most this many bytes (a hello is being read: not one byte more).
    Exact(usize),
    /// Frames: as much as is there.
    Frames,
    /// Nothing (it waits, or an engine owns it).
    None,
}

#[derive(Debug)]
/// What a handshake waits for.
enum Stage {
    Hello,
    Auth {
        nonce: [u8; 32],
        discarded: u32,
    },
    Setup,
    /// In the wait queue with its request, for a slot.
    Queued(Box<Request>),
}

/// A request that waits for a slot.
#[derive(Debug)]
enum Request {
    Setup(crate::wire::TestParams),
    Advise(crate::wire::AdviseRequest),
}

#[derive(Debug)]
struct Handshake {
    reader: FrameReader,
    stage: Stage,
    token: Option<Token>,
    /// The client's X25519 public key (from `Hello`).
    key_share: Option<KeyShare>,
    /// The server's key share and the session's keys, once agreed (at a challenge, or at
    /// admission).
    agreed: Option<(KeyShare, SessionKeys)>,
}

#[derive(Debug)]
enum ConnState {
    Unknown(Vec<u8>),
    Hello(Vec<u8>),
    Parked(DataHello),
    Handshake(Box<Handshake>),
    Control(SessionId),
    Data(SessionId),
}

#[derive(Debug)]
struct Conn {
    peer: SocketAddr,
    state: ConnState,
    deadline: Option<Instant>,
    accepted: Instant,
    /// It waits in the queue (a queued handshake, or a data connection of one): counted
    /// against the queue's bounds, not the pending ones.
    held: bool,
}

impl Conn {
    fn pending(&self) -> bool {
        !self.held && !matches!(self.state, ConnState::Control(_) | ConnState::Data(_))
    }
}

#[derive(Debug, Default)]
struct AddrState {
    pending: VecDeque<ConnId>,
    sessions: u32,
    backoff: Backoff,
}

#[derive(Debug)]
struct SessionEntry {
    session: ServerSession,
    reader: FrameReader,
    ctrl: ConnId,
    peer: SocketAddr,
    token: Token,
    label: String,
    reserved: u64,
    /// When its control connection was accepted; `None` once its first phase started.
    accepted: Option<Instant>,
    /// The session's keys: its data connections' hellos and its blocks are tagged with them.
    keys: SessionKeys,
    /// The payload it moved, for the minimum rate.
    progress: Progress,
    /// It takes fair shares (the client said so), and the server sends.
    share: (bool, bool),
}

/// The server's control plane. See the module documentation.
pub struct Endpoint {
    cfg: EndpointConfig,
    host: HostInfo,
    conns: HashMap<ConnId, Conn>,
    addrs: HashMap<IpAddr, AddrState>,
    tokens: HashMap<Token, SessionId>,
    parked: HashMap<Token, Vec<ConnId>>,
    /// Handshakes whose keys are agreed (at a challenge, or in the queue), by token: a data
    /// connection that arrives before its session is checked against them before it may
    /// wait, so that nobody without the keys can take a place its session's streams need.
    agreed: HashMap<Token, ConnId>,
    sessions: BTreeMap<SessionId, SessionEntry>,
    deadlines: BTreeSet<(Instant, ConnId)>,
    order: VecDeque<ConnId>,
    pending: u64,
    reserved: u64,
    replay: ReplayCache,
    limiter: LogLimiter,
    events: VecDeque<EndpointEvent>,
    stats: ServerStats,
    next_session: SessionId,
    nonces: Box<dyn FnMut() -> [u8; 32] + Send>,
    kx: Box<dyn KeyExchange>,
    records: RateLimiter,
    measures: RateLimiter,
    /// Clients waiting for a slot.
    queue: WaitQueue,
    /// Connections held in the queue.
    held: u64,
    /// A session is being shed for a client that is being admitted: its slot is that
    /// client's, not the queue's.
    shedding: bool,
    /// The queue is being served (no re-entry).
    serving: bool,
    /// The fair shares of the path between the sessions' main phases.
    fair: FairShare,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("conns", &self.conns.len())
            .field("sessions", &self.sessions.len())
            .field("pending", &self.pending)
            .finish()
    }
}

impl Endpoint {
    /// An endpoint created at `now`; `nonces` gives fresh random challenges, `kx` the
    /// server's half of each session's key exchange (see [`crate::keys`]).
    pub fn new(
        now: Instant,
        cfg: EndpointConfig,
        host: HostInfo,
        nonces: Box<dyn FnMut() -> [u8; 32] + Send>,
        kx: Box<dyn KeyExchange>,
    ) -> Endpoint {
        Endpoint {
            cfg,
            host,
            conns: HashMap::new(),
            addrs: HashMap::new(),
            tokens: HashMap::new(),
            parked: HashMap::new(),
            agreed: HashMap::new(),
            sessions: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            order: VecDeque::new(),
            pending: 0,
            reserved: 0,
            replay: ReplayCache::new(1 << 16),
            limiter: LogLimiter::new(LOG_PERIOD, 4096),
            events: VecDeque::new(),
            stats: ServerStats::default(),
            next_session: 1,
            nonces,
            kx,
            records: RateLimiter::new(
                now,
                RECORD_BURST,
                RECORD_EVERY,
                RECORD_ALL_BURST,
                RECORD_ALL_EVERY,
                LIMITER_KEYS,
            ),
            measures: RateLimiter::new(
                now,
                MEASURE_BURST,
                MEASURE_EVERY,
                MEASURE_ALL_BURST,
                MEASURE_ALL_EVERY,
                LIMITER_KEYS,
            ),
            queue: WaitQueue::default(),
            held: 0,
            shedding: false,
            serving: false,
            fair: FairShare::new(FairConfig::default()),
        }
    }

    /// Refresh what the host offers (limits, congestion controls).
    pub fn set_host(&mut self, host: HostInfo) {
        self.host = host;
    }

    /// What happened so far.
    pub fn stats(&self) -> ServerStats {
        let mut s = self.stats.clone();
        s.sessions_active = self.sessions.len() as u64;
        s.pending = self.pending;
        s
    }

    /// Sessions running.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// The next thing to do.
    pub fn poll_event(&mut self) -> Option<EndpointEvent> {
        self.events.pop_front()
    }

    /// When [`Endpoint::on_timeout`] is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let conns = self.deadlines.first().map(|(t, _)| *t);
        let sessions = self
            .sessions
            .values()
            .filter_map(|e| e.session.poll_timeout())
            .min();
        let samples = self
            .sessions
            .values()
            .map(|e| e.progress.next_sample())
            .min();
        [
            conns,
            sessions,
            self.limiter.next_due(),
            samples,
            self.queue.next_tell(),
            self.fair.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// How much may be read from `conn` now.
    pub fn read_limit(&self, conn: ConnId) -> ReadLimit {
        match self.conns.get(&conn).map(|c| &c.state) {
            Some(ConnState::Unknown(got)) => ReadLimit::Exact(DATA_MAGIC.len() - got.len()),
            Some(ConnState::Hello(got)) => ReadLimit::Exact(DATA_HELLO_LEN - got.len()),
            Some(ConnState::Handshake(_) | ConnState::Control(_)) => ReadLimit::Frames,
            Some(ConnState::Parked(_) | ConnState::Data(_)) | None => ReadLimit::None,
        }
    }

    // ----- connections -----

    /// A connection was accepted from `peer`.
    pub fn on_accept(&mut self, now: Instant, conn: ConnId, peer: SocketAddr) {
        self.stats.connections += 1;
        let ip = addr_group(peer.ip());
        // Descriptors first: a session's reservation is never given to a stranger.
        let no_fds = self.pending + self.held + self.reserved + 1 > self.cfg.fd_budget
            && !self.evict_oldest(now, None);
        let per_addr = self.addrs.get(&ip).map_or(0, |a| a.pending.len()) as u32;
        if per_addr >= self.cfg.max_pending_per_addr {
            self.evict_oldest(now, Some(ip));
        }
        if self.pending >= u64::from(self.cfg.max_pending) {
            self.evict_oldest(now, None);
        }
        let deadline = now + self.cfg.first_frame_timeout;
        self.conns.insert(
            conn,
            Conn {
                peer,
                state: ConnState::Unknown(Vec::new()),
                deadline: Some(deadline),
                accepted: now,
                held: false,
            },
        );
        self.deadlines.insert((deadline, conn));
        self.addrs.entry(ip).or_default().pending.push_back(conn);
        self.order.push_back(conn);
        self.pending += 1;
        self.compact_order();
        if no_fds {
            let why = "server out of file descriptors (RLIMIT_NOFILE): retry later".to_string();
            self.reject(now, conn, "fds", why, Some(Duration::from_secs(10)));
        }
    }

    fn compact_order(&mut self) {
        if self.order.len() as u64 > 2 * self.pending + 64 {
            let conns = &self.conns;
            self.order
                .retain(|c| conns.get(c).is_some_and(|c| c.pending()));
        }
    }

    /// Drop the oldest pending connection (of `ip`, or of all). Whether one was dropped.
    fn evict_oldest(&mut self, now: Instant, ip: Option<IpAddr>) -> bool {
        let victim = match ip {
            Some(ip) => self.addrs.get(&ip).and_then(|a| a.pending.front().copied()),
            None => {
                while let Some(&c) = self.order.front() {
                    if self.conns.get(&c).is_some_and(Conn::pending) {
                        break;
                    }
                    self.order.pop_front();
                }
                self.order.front().copied()
            }
        };
        let Some(victim) = victim else { return false };
        let Some(peer) = self.conns.get(&victim).map(|c| c.peer) else {
            return false;
        };
        self.stats.dropped += 1;
        let why = match ip {
            Some(_) => format!(
                "dropped a pending connection: {} pending from this address (the limit per address)",
                self.cfg.max_pending_per_addr
            ),
            None => format!(
                "dropped a pending connection: {} pending in all (the limit)",
                self.pending
            ),
        };
        self.close_conn(now, victim);
        self.refused(now, peer, "pending_limit", why);
        true
    }

    /// Forget a connection and tell the driver to close it.
    fn close_conn(&mut self, now: Instant, conn: ConnId) {
        if let Some(c) = self.conns.remove(&conn) {
            self.forget(now, conn, &c);
            self.events.push_back(EndpointEvent::Close { conn });
        }
    }

    fn forget(&mut self, now: Instant, conn: ConnId, c: &Conn) {
        if let Some(d) = c.deadline {
            self.deadlines.remove(&(d, conn));
        }
        if c.held {
            self.held = self.held.saturating_sub(1);
            if let Some(w) = self.queue.remove(conn) {
                let token = match &c.state {
                    ConnState::Handshake(h) => h.token,
                    _ => None,
                };
                self.left_queue(now, c.peer, token, w, QueueOutcome::Gone);
            }
        } else if c.pending() {
            self.pending = self.pending.saturating_sub(1);
            if let Some(a) = self.addrs.get_mut(&addr_group(c.peer.ip())) {
                a.pending.retain(|x| *x != conn);
            }
        }
        if let ConnState::Handshake(h) = &c.state {
            if let Some(t) = h.token {
                if self.agreed.get(&t) == Some(&conn) {
                    self.agreed.remove(&t);
                }
            }
        }
        if let ConnState::Parked(h) = &c.state {
            if let Some(v) = self.parked.get_mut(&h.token) {
                v.retain(|x| *x != conn);
                if v.is_empty() {
                    self.parked.remove(&h.token);
                }
            }
        }
        self.tidy_addr(now, addr_group(c.peer.ip()));
    }

    fn tidy_addr(&mut self, now: Instant, ip: IpAddr) {
        if self.addrs.len() < 4096 {
            return;
        }
        if self
            .addrs
            .get(&ip)
            .is_some_and(|a| a.pending.is_empty() && a.sessions == 0 && a.backoff.forgettable(now))
        {
            self.addrs.remove(&ip);
        }
    }

    /// Count and (rate-limited) log a refusal.
    fn refused(&mut self, now: Instant, peer: SocketAddr, kind: &'static str, reason: String) {
        if self.count_refusal(now, peer, kind) {
            self.events
                .push_back(EndpointEvent::Log(ServerEvent::Refused {
                    peer,
                    kind,
                    reason,
                }));
        }
    }

    /// Count a refusal of `kind` from `peer` (also a client put in the queue, `queued`);
    /// whether it is logged (the log limiter's decision).
    fn count_refusal(&mut self, now: Instant, peer: SocketAddr, kind: &'static str) -> bool {
        self.stats.refused += 1;
        *self.stats.refused_by.entry(kind.to_string()).or_insert(0) += 1;
        self.events
            .push_back(EndpointEvent::Monitor(MonitorEvent::Refused { kind }));
        self.limiter.decide(now, kind, peer.ip()) == LogDecision::Log
    }

    /// Refuse a client that can still hear it: `Rejected`, then close.
    fn reject(
        &mut self,
        now: Instant,
        conn: ConnId,
        kind: &'static str,
        reason: String,
        retry_after: Option<Duration>,
    ) {
        let Some(peer) = self.conns.get(&conn).map(|c| c.peer) else {
            return;
        };
        let msg = ServerMsg::Rejected {
            reason: reason.clone(),
            retry_after_s: retry_after.map(ceil_secs),
        };
        if let Ok(frame) = wire::encode_limited(&msg, MAX_SERVER_FRAME) {
            self.events.push_back(EndpointEvent::Send { conn, frame });
        }
        self.close_conn(now, conn);
        self.refused(now, peer, kind, reason);
    }

    /// The peer closed `conn`, or it failed.
    pub fn on_closed(&mut self, now: Instant, conn: ConnId) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        self.forget(now, conn, &c);
        if let ConnState::Control(sid) = c.state {
            if let Some(e) = self.sessions.get_mut(&sid) {
                e.session
                    .protocol_error("the control connection closed".into());
            }
            self.pump(now, sid);
        }
    }

    /// Bytes read from `conn` (never more than [`Endpoint::read_limit`] allowed).
    pub fn on_bytes(&mut self, now: Instant, unix_s: u64, conn: ConnId, data: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        match &mut c.state {
            ConnState::Unknown(got) => {
                got.extend_from_slice(data);
                if !DataHello::could_start(got) {
                    // A control connection: what was read is the start of its first frame.
                    let mut reader = FrameReader::new(MAX_CLIENT_FRAME);
                    reader.push(got);
                    c.state = ConnState::Handshake(Box::new(Handshake {
                        reader,
                        stage: Stage::Hello,
                        token: None,
                        key_share: None,
                        agreed: None,
                    }));
                    self.handshake_frames(now, unix_s, conn);
                } else if got.len() >= DATA_MAGIC.len() {
                    let got = std::mem::take(got);
                    c.state = ConnState::Hello(got);
                }
            }
            ConnState::Hello(got) => {
                got.extend_from_slice(data);
                if got.len() >= DATA_HELLO_LEN {
                    match DataHello::decode(&got[..DATA_HELLO_LEN]) {
                        Some(h) => self.route_data(now, conn, h),
                        None => {
                            let peer = c.peer;
                            self.close_conn(now, conn);
                            self.refused(now, peer, "garbage", "a malformed data hello".into());
                        }
                    }
                }
            }
            ConnState::Handshake(h) => {
                h.reader.push(data);
                self.handshake_frames(now, unix_s, conn);
            }
            ConnState::Control(sid) => {
                let sid = *sid;
                if let Some(e) = self.sessions.get_mut(&sid) {
                    e.reader.push(data);
                    loop {
                        match e.reader.take_frame() {
                            Ok(None) => break,
                            Ok(Some(body)) => match wire::decode::<ClientMsg>(&body) {
                                Ok(m) => e.session.handle_msg(now, m),
                                Err(err) => e.session.protocol_error(err.to_string()),
                            },
                            Err(err) => e.session.protocol_error(err.to_string()),
                        }
                        if e.session.is_closed() {
                            break;
                        }
                    }
                }
                self.pump(now, sid);
            }
            ConnState::Parked(_) | ConnState::Data(_) => {}
        }
    }

    /// When a session slot (of the group `ip`, or any) is expected to free: the soonest
    /// expected end of a running session, from its progress (remaining bytes at its rate),
    /// else when it is gone at the latest.
    fn retry_after(&self, now: Instant, ip: Option<IpAddr>) -> Option<Duration> {
        self.expected_free(now, ip, 1)
    }

    // ----- data connections -----

    fn route_data(&mut self, now: Instant, conn: ConnId, hello: DataHello) {
        let Some(peer) = self.conns.get(&conn).map(|c| c.peer) else {
            return;
        };
        let sid = match self.tokens.get(&hello.token) {
            Some(&sid)
                if self
                    .sessions
                    .get(&sid)
                    .is_some_and(|e| e.token.ct_eq(&hello.token)) =>
            {
                sid
            }
            _ => return self.before_session(now, conn, peer, hello),
        };
        let Some(e) = self.sessions.get_mut(&sid) else {
            return;
        };
        if e.peer.ip() != peer.ip() {
            let why = format!(
                "a data connection for session {} from another address than its control connection",
                e.label
            );
            self.close_conn(now, conn);
            return self.refused(now, peer, "data_address", why);
        }
        if !hello.verify(&e.keys) {
            // Someone who read the token off the wire, without the session's keys: that
            // connection goes, the session stays.
            let why = format!(
                "a data connection for session {} without the session's key (a wrong tag)",
                e.label
            );
            self.close_conn(now, conn);
            return self.refused(now, peer, "data_key", why);
        }
        match e.session.accepts(hello.seq, hello.stream) {
            Ok(()) => {
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                let old = std::mem::replace(&mut c.state, ConnState::Data(sid));
                if let Some(d) = c.deadline.take() {
                    self.deadlines.remove(&(d, conn));
                }
                self.pending = self.pending.saturating_sub(1);
                if let Some(a) = self.addrs.get_mut(&addr_group(peer.ip())) {
                    a.pending.retain(|x| *x != conn);
                }
                if let ConnState::Parked(h) = old {
                    if let Some(v) = self.parked.get_mut(&h.token) {
                        v.retain(|x| *x != conn);
                    }
                }
                if let Some(e) = self.sessions.get_mut(&sid) {
                    e.session.attach(now, conn, hello.seq, hello.stream);
                }
                self.pump(now, sid);
            }
            Err(_) if e.session.phase_is_future(hello.seq) => self.park(now, conn, hello),
            Err(why) => {
                self.close_conn(now, conn);
                self.refused(now, peer, "data_refused", why);
            }
        }
    }

    /// A data connection whose session is not admitted yet. An honest client connects its
    /// streams only once it has the session's keys, which the server agreed first (at a
    /// challenge, or while the session waits in the queue): a hello whose token has no
    /// agreed keys, or a wrong tag, is nobody's stream and goes at once; a right one waits.
    fn before_session(&mut self, now: Instant, conn: ConnId, peer: SocketAddr, hello: DataHello) {
        let keys = self
            .agreed
            .get(&hello.token)
            .and_then(|h| self.conns.get(h))
            .and_then(|c| match &c.state {
                ConnState::Handshake(h) => h.agreed.as_ref().map(|(_, k)| k),
                _ => None,
            });
        match keys {
            Some(k) if hello.verify(k) => self.park(now, conn, hello),
            Some(_) => {
                self.close_conn(now, conn);
                let why =
                    "a data connection for a session being admitted without its key (a wrong tag)";
                self.refused(now, peer, "data_key", why.into());
            }
            // Its session's Hello may still be on its way: it waits (its deadline bounds
            // it), and is checked when the keys are agreed ([`Endpoint::purge_parked`]).
            None => self.park(now, conn, hello),
        }
    }

    /// The keys of `token`'s session were just agreed: the connections waiting for it that
    /// are not tagged with them (someone who read the token, without the keys) go now, so
    /// that they cannot hold the places its streams will need.
    pub(super) fn purge_parked(&mut self, now: Instant, token: Token, keys: &SessionKeys) {
        let Some(list) = self.parked.get(&token).cloned() else {
            return;
        };
        for conn in list {
            let Some(c) = self.conns.get(&conn) else {
                continue;
            };
            let (peer, bad) = match &c.state {
                ConnState::Parked(h) => (c.peer, !h.verify(keys)),
                _ => continue,
            };
            if bad {
                self.close_conn(now, conn);
                let why =
                    "a data connection for a session being admitted without its key (a wrong tag)";
                self.refused(now, peer, "data_key", why.into());
            }
        }
    }

    fn park(&mut self, now: Instant, conn: ConnId, hello: DataHello) {
        let max = self.cfg.limits.max_streams as usize;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if matches!(c.state, ConnState::Parked(_)) {
            return;
        }
        let peer = c.peer;
        let group = addr_group(peer.ip());
        // Streams of a session that exists or whose keys were agreed are bounded by its
        // streams and the sessions an address may have; those of a token nobody knows yet
        // (a Hello still on its way, or a stranger's) by the waiting budget.
        let stranger = |t: &Token| !self.tokens.contains_key(t) && !self.agreed.contains_key(t);
        let waiting = self
            .parked
            .iter()
            .filter(|(t, _)| stranger(t))
            .flat_map(|(_, v)| v);
        let (all, mine) = waiting.fold((0u32, 0u32), |(all, mine), w| {
            let same = self
                .conns
                .get(w)
                .is_some_and(|x| addr_group(x.peer.ip()) == group);
            (all + 1, mine + u32::from(same))
        });
        if stranger(&hello.token)
            && (all >= self.cfg.max_parked || mine >= self.cfg.max_parked_per_addr)
        {
            self.close_conn(now, conn);
            let why = format!(
                "too many data connections waiting for their sessions ({all} in all, {mine} from \
                 this address; at most {} and {})",
                self.cfg.max_parked, self.cfg.max_parked_per_addr
            );
            return self.refused(now, peer, "data_refused", why);
        }
        if self.parked.get(&hello.token).map_or(0, Vec::len) >= max {
            self.close_conn(now, conn);
            return self.refused(now, peer, "data_refused", "too many streams waiting".into());
        }
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.state = ConnState::Parked(hello);
        self.parked.entry(hello.token).or_default().push(conn);
        self.events.push_back(EndpointEvent::Parked { conn });
        // It waits at most a handshake timeout from its arrival for its session.
        self.set_deadline(conn, now + self.cfg.handshake_timeout);
        // Or with its session in the queue.
        if let Some(until) = self.queued_until(&hello.token) {
            self.hold(conn);
            self.set_deadline(conn, until);
        }
    }

    fn unpark(&mut self, now: Instant, token: Token) {
        let Some(list) = self.parked.get(&token).cloned() else {
            return;
        };
        for conn in list {
            if let Some(ConnState::Parked(h)) = self.conns.get(&conn).map(|c| &c.state) {
                let h = *h;
                self.route_data(now, conn, h);
            }
        }
    }

    // ----- sessions -----

    /// An event of a session's engine.
    pub fn on_engine(&mut self, now: Instant, session: SessionId, ev: Event) {
        if let Some(e) = self.sessions.get_mut(&session) {
            e.session.handle_engine(now, ev);
            self.pump(now, session);
        }
    }

    /// The result of a finished phase.
    pub fn on_phase_result(&mut self, now: Instant, session: SessionId, seq: u32, r: SideResult) {
        if let Some(e) = self.sessions.get_mut(&session) {
            e.progress
                .phase_ended(r.streams.iter().map(|s| s.bytes).sum());
            e.session.handle_phase_result(now, seq, r);
            self.pump(now, session);
        }
    }

    /// The route this session's control connection takes changed (careful resume gave its
    /// client's data connections their initial window through it). On Linux 6.18 the first
    /// message a connection sends after its route changed leaves in segments of a few
    /// hundred bytes, so a large one (the phase's result, 6 kB with 8 streams) waits a
    /// round trip for its congestion window; a small message sent now takes that turn
    /// instead. The session is told again the share it was told last, which changes
    /// nothing for it; a session that takes no shares (or was told none) is sent nothing.
    pub fn on_route_changed(&mut self, _now: Instant, session: SessionId) {
        let Some(e) = self.sessions.get(&session) else {
            return;
        };
        if !e.share.0 {
            return;
        }
        let Some(share) = self.fair.told(session) else {
            return;
        };
        let ctrl = e.ctrl;
        self.send_share(ctrl, &share);
    }

    /// Queue `share` as a message on control connection `ctrl`.
    fn send_share(&mut self, ctrl: ConnId, share: &Share) {
        let msg = ServerMsg::Share {
            rate_bps: share.rate.map(|r| r.0),
            sessions: share.sessions,
            path_bps: share.path.map(|r| r.0),
        };
        if let Ok(frame) = wire::encode_limited(&msg, MAX_SERVER_FRAME) {
            self.events
                .push_back(EndpointEvent::Send { conn: ctrl, frame });
        }
    }

    /// The driver failed a session's duty (a stream could not be set up, a thread could not
    /// start): the session ends with `reason`.
    pub fn on_session_error(&mut self, now: Instant, session: SessionId, reason: String) {
        if let Some(e) = self.sessions.get_mut(&session) {
            e.session.protocol_error(reason);
            self.pump(now, session);
        }
    }

    /// The driver could not write to a session's control connection (its peer does not
    /// read, or the connection broke).
    pub fn on_write_failed(&mut self, now: Instant, conn: ConnId) {
        self.on_closed(now, conn);
    }

    /// Carry a session's outputs out.
    fn pump(&mut self, now: Instant, sid: SessionId) {
        loop {
            let Some(e) = self.sessions.get_mut(&sid) else {
                return;
            };
            let Some(out) = e.session.poll_output() else {
                return;
            };
            let ctrl = e.ctrl;
            match out {
                SessionOutput::Send(msg) => {
                    let advice_log = match &msg {
                        ServerMsg::Advice { advice } => Some(ServerEvent::Advice {
                            peer: e.peer,
                            session: e.label.clone(),
                            direction: advice.direction,
                            source: advice.path.source.as_str(),
                            rtt_us: advice.path.rtt_us,
                            rate_bps: advice.path.rate_bps,
                            full_pipe: advice.path.full_pipe,
                            streams: advice.sizing.streams,
                        }),
                        _ => None,
                    };
                    let frame = match wire::encode_limited(&msg, MAX_SERVER_FRAME) {
                        Ok(f) => Some(f),
                        Err(ProtoError::TooLong { .. }) => match msg {
                            ServerMsg::PhaseResult { seq, mut result } => {
                                // Too large with its series: send the summaries.
                                result.strip_series();
                                wire::encode_limited(
                                    &ServerMsg::PhaseResult { seq, result },
                                    MAX_SERVER_FRAME,
                                )
                                .ok()
                            }
                            _ => None,
                        },
                        Err(_) => None,
                    };
                    if let Some(frame) = frame {
                        self.events
                            .push_back(EndpointEvent::Send { conn: ctrl, frame });
                    }
                    if let Some(ev) = advice_log {
                        self.events
                            .push_back(EndpointEvent::Monitor(MonitorEvent::Advice {
                                source: match &ev {
                                    ServerEvent::Advice { source, .. } => source,
                                    _ => "",
                                },
                            }));
                        self.events.push_back(EndpointEvent::Log(ev));
                    }
                }
                SessionOutput::StartEngine(spec) => {
                    e.progress.phase_started();
                    if spec.kind == Phase::Main && e.session.mode() != "advise" {
                        e.share = (spec.params.share, spec.params.reverse);
                        // A rate measured with a full pipe, fresh (careful resume's).
                        let known = spec.hint.rate.filter(|_| spec.hint.resume);
                        self.fair.join(now, sid, known);
                    }
                    let token = e.token;
                    if let Some(t) = e.accepted.take() {
                        if e.session.mode() != "advise" {
                            let seconds = now.saturating_duration_since(t).as_secs_f64();
                            self.events.push_back(EndpointEvent::Monitor(
                                MonitorEvent::Handshake { seconds },
                            ));
                        }
                    }
                    let mode = e.session.mode();
                    let encrypt = spec.params.files.as_ref().is_some_and(|f| f.encrypt);
                    self.events.push_back(EndpointEvent::StartEngine {
                        session: sid,
                        label: e.label.clone(),
                        ctrl: e.ctrl,
                        peer: e.peer,
                        keys: Box::new(CopyKeys {
                            block: e.keys.block_key(),
                            aead: encrypt.then(|| e.keys.aead_key()),
                        }),
                        spec: Box::new(spec),
                        mode,
                    });
                    self.unpark(now, token);
                }
                SessionOutput::AttachStream { conn, index } => {
                    self.events.push_back(EndpointEvent::Attach {
                        session: sid,
                        conn,
                        index,
                    });
                }
                SessionOutput::Hint { hint, streams } => {
                    if let (Some(rate), false) = (hint.rate, hint.rate_is_lower_bound) {
                        self.fair.path_rate(sid, rate);
                    }
                    self.events.push_back(EndpointEvent::Hint {
                        session: sid,
                        hint,
                        streams,
                    });
                }
                SessionOutput::StopSenders => {
                    self.fair.leave(now, sid);
                    self.events
                        .push_back(EndpointEvent::StopSenders { session: sid });
                }
                SessionOutput::RetireSenders { keep } => {
                    self.events
                        .push_back(EndpointEvent::RetireSenders { session: sid, keep });
                }
                SessionOutput::AbortEngine => {
                    self.fair.leave(now, sid);
                    self.events
                        .push_back(EndpointEvent::AbortEngine { session: sid });
                }
                SessionOutput::FinishEngine { seq } => {
                    self.fair.leave(now, sid);
                    self.events
                        .push_back(EndpointEvent::FinishEngine { session: sid, seq });
                }
                SessionOutput::Measured(m) => {
                    let (peer, advice) = (e.peer.ip().to_canonical(), e.session.mode() == "advise");
                    self.record(now, peer, m, advice);
                }
                SessionOutput::Lookup { direction } => {
                    let peer = e.peer.ip().to_canonical();
                    self.events.push_back(EndpointEvent::Lookup {
                        session: sid,
                        conn: ctrl,
                        peer,
                        direction,
                    });
                }
                SessionOutput::Close(end) => {
                    self.end_session(now, sid, end);
                    return self.tell_shares();
                }
            }
            self.tell_shares();
        }
    }

    /// Tell the sessions whose fair share changed (a message to each that takes shares, the
    /// pacing of the server's own senders when it sends) and log it.
    fn tell_shares(&mut self) {
        while let Some((sid, share)) = self.fair.poll_share() {
            let Some(e) = self.sessions.get(&sid) else {
                continue;
            };
            let (tell, reverse) = e.share;
            if !tell {
                continue;
            }
            let (ctrl, peer, label) = (e.ctrl, e.peer, e.label.clone());
            self.send_share(ctrl, &share);
            if reverse {
                self.events.push_back(EndpointEvent::Pace {
                    session: sid,
                    rate: share.rate,
                });
            }
            self.events
                .push_back(EndpointEvent::Log(ServerEvent::Share {
                    peer,
                    session: label,
                    rate_bps: share.rate.map(|r| r.0),
                    sessions: share.sessions,
                    path_bps: share.path.map(|r| r.0),
                }));
        }
    }

    fn end_session(&mut self, now: Instant, sid: SessionId, end: SessionEnd) {
        let Some(e) = self.sessions.remove(&sid) else {
            return;
        };
        self.fair.leave(now, sid);
        self.tokens.remove(&e.token);
        self.reserved = self.reserved.saturating_sub(e.reserved);
        if let Some(a) = self.addrs.get_mut(&addr_group(e.peer.ip())) {
            a.sessions = a.sessions.saturating_sub(1);
        }
        let error = match end {
            SessionEnd::Completed => {
                self.stats.sessions_ok += 1;
                None
            }
            SessionEnd::Failed { reason, .. } => {
                self.stats.sessions_failed += 1;
                Some(reason)
            }
        };
        self.events
            .push_back(EndpointEvent::Monitor(MonitorEvent::Ended {
                mode: e.session.mode(),
                completed: error.is_none(),
                rate_bps: e.session.main_rate(),
            }));
        self.events
            .push_back(EndpointEvent::SessionGone { session: sid });
        if let Some(c) = self.conns.remove(&e.ctrl) {
            self.forget(now, e.ctrl, &c);
            self.events.push_back(EndpointEvent::Close { conn: e.ctrl });
        }
        // Data connections belong to the engine, which the driver drops; forget them here.
        let data: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(c.state, ConnState::Data(s) if s == sid))
            .map(|(id, _)| *id)
            .collect();
        for c in data {
            self.conns.remove(&c);
        }
        if let Some(parked) = self.parked.remove(&e.token) {
            for c in parked {
                self.close_conn(now, c);
            }
        }
        self.events
            .push_back(EndpointEvent::Log(ServerEvent::SessionEnded {
                peer: e.peer,
                session: e.label,
                bytes: e.session.main_bytes(),
                error,
            }));
        if !self.shedding {
            self.serve_queue(now);
        }
    }

    // ----- time -----

    /// Time passed: expire pending connections, run sessions' timers, log summaries.
    /// `observe` reads a session's running engine.
    pub fn on_timeout(&mut self, now: Instant, observe: &dyn Fn(SessionId) -> Option<Observation>) {
        while let Some(&(t, conn)) = self.deadlines.first() {
            if t > now {
                break;
            }
            self.deadlines.pop_first();
            let Some(c) = self.conns.get(&conn) else {
                continue;
            };
            let peer = c.peer;
            match &c.state {
                ConnState::Unknown(_) | ConnState::Hello(_) => {
                    self.close_conn(now, conn);
                    let why = format!(
                        "no complete hello within {:.0} s",
                        self.cfg.first_frame_timeout.as_secs_f64()
                    );
                    self.refused(now, peer, "timeout", why);
                }
                ConnState::Handshake(h) => {
                    let token = h.token;
                    let what = match h.stage {
                        Stage::Hello if h.reader.partial() => "the rest of the client's hello",
                        Stage::Hello => "the client's hello",
                        Stage::Auth { .. } => "the answer to the challenge",
                        Stage::Setup => "the client's setup",
                        Stage::Queued(_) => {
                            if let Some(w) = self.queue.remove(conn) {
                                self.left_queue(now, peer, token, w, QueueOutcome::TimedOut);
                            }
                            let why = format!(
                                "no session slot freed within {:.0} s of waiting in the queue",
                                self.cfg.slots.queue_timeout.as_secs_f64()
                            );
                            let retry = self.retry_after(now, None);
                            self.reject(now, conn, "queue_timeout", why, retry);
                            continue;
                        }
                    };
                    let why = format!("timed out waiting for {what}");
                    self.reject(now, conn, "timeout", why, None);
                }
                ConnState::Parked(h) => {
                    let why = if self.tokens.contains_key(&h.token) {
                        format!(
                            "stream {} of phase {} was not wanted in time",
                            h.stream + 1,
                            h.seq
                        )
                    } else {
                        "a data connection for an unknown session".to_string()
                    };
                    self.close_conn(now, conn);
                    self.refused(now, peer, "data_unknown", why);
                }
                ConnState::Control(_) | ConnState::Data(_) => {}
            }
        }
        let due: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, e)| e.session.poll_timeout().is_some_and(|t| t <= now))
            .map(|(id, _)| *id)
            .collect();
        for sid in due {
            if let Some(e) = self.sessions.get_mut(&sid) {
                e.session.handle_timeout(now, observe(sid));
            }
            self.pump(now, sid);
        }
        self.sample_progress(now, observe);
        if self.fair.poll_timeout().is_some_and(|t| t <= now) {
            self.fair
                .tick(now, &|sid| observe(sid).map(|o| o.delivered));
            self.tell_shares();
        }
        self.serve_queue(now);
        self.tell_places(now);
        for (kind, count) in self.limiter.due_summaries(now) {
            if count > 0 {
                self.events
                    .push_back(EndpointEvent::Log(ServerEvent::Suppressed {
                        kind,
                        count,
                        seconds: LOG_PERIOD.as_secs(),
                    }));
            }
        }
    }
}

impl Endpoint {
    /// Hand a session's measurement to the path database, within the rate limits.
    fn record(
        &mut self,
        now: Instant,
        peer: IpAddr,
        m: super::server::PathMeasurement,
        advice: bool,
    ) {
        let group = peer_group(&peer.to_string());
        // A measurement made to answer an advice was rate-limited when it was allowed.
        if !advice && self.records.check(now, &group).is_err() {
            self.stats.records_limited += 1;
            self.events
                .push_back(EndpointEvent::Monitor(MonitorEvent::RecordLimited));
            return;
        }
        self.events.push_back(EndpointEvent::Record {
            peer,
            direction: m.direction,
            measurement: Measurement {
                rate: m.rate,
                min_rtt: m.min_rtt,
                full_pipe: m.full_pipe,
                at_unix_s: 0.0,
            },
            advice,
        });
    }

    /// The path database's answer for an advice session: the control connection's RTT and
    /// the fresh entry, if any; `now_unix_s` is the wall clock.
    pub fn on_lookup(
        &mut self,
        now: Instant,
        session: SessionId,
        rtt: Option<Duration>,
        known: Option<KnownPath>,
        now_unix_s: f64,
    ) {
        let Some(e) = self.sessions.get_mut(&session) else {
            return;
        };
        let may_measure = if e.session.wants_measurement(known.as_ref()) {
            self.measures
                .check(now, &peer_group(&e.peer.ip().to_canonical().to_string()))
        } else {
            Ok(())
        };
        e.session.handle_lookup(
            now,
            LookupAnswer {
                rtt,
                known,
                now_unix_s,
            },
            may_measure,
        );
        self.pump(now, session);
    }
}

/// Whole seconds, rounded up (at least 1): "retry in N s" must not be too early.
fn ceil_secs(d: Duration) -> u64 {
    d.as_secs()
        .saturating_add(u64::from(d.subsec_nanos() > 0))
        .max(1)
}

mod handshake;
mod queue;
mod slots;
pub use slots::SlotRules;
#[cfg(test)]
mod tests;
