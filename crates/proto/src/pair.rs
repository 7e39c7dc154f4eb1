//! A client session against a server endpoint in memory (quinn-proto's `Pair`): the
//! control connection's frames and the data streams' opens, last bytes and closes travel
//! between a [`ClientSession`] and an [`Endpoint`] with a simulated one-way delay of half
//! an RTT, on a simulated clock. The engines are simulated the way the drivers run them:
//! a data connection takes one RTT to connect (its hello reaches the server with the
//! handshake's last ACK, half an RTT later), a stream writes its share for a fixed time,
//! its last byte reaches the receiver half an RTT later, and the receiver's close reaches
//! the sender half an RTT after that.
//!
//! Time starts when the command starts: the control connection's TCP handshake takes one
//! RTT before the session's first flight (the driver connects first, to read the RTT).
//!
//! Beyond that honest network, a pair can shuffle (seeded random extra delays per
//! connection: data hellos before, between or after the control frames, which stay in
//! order as TCP keeps them), mutate one field of one message of either side, cut the
//! control connection, and let intruders open data connections with hellos of their own.
//! The tests in [`seeded`], [`auth`] and [`hostile_server`] use them.

#[cfg(test)]
mod auth;
#[cfg(test)]
mod hostile_server;
#[cfg(test)]
mod seeded;

use crate::auth::Secret;
use crate::events::ServerEvent;
use crate::keys::{test_kx, SessionKeys};
use crate::result::{SideResult, StreamSide};
use crate::session::client::{
    ClientOutput, ClientPlan, ClientSession, Failure, Goal, InBand, Observe, PhaseOutcome,
    PhaseRequest, Violation,
};
use crate::session::endpoint::{Endpoint, EndpointConfig, EndpointEvent, HostInfo, ReadLimit};
use crate::session::fuzz::Rng;
use crate::session::server::Observation;
use crate::session::{ConnId, Event, SessionId};
use crate::wire::{
    self, DataHello, FrameReader, ServerLimits, ServerMsg, TestParams, Token, DATA_HELLO_LEN,
    MAX_SERVER_FRAME,
};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tcptune_core::{HostLimits, PathHint, TuneMode};

/// The control connection's number at the endpoint.
const CTRL: ConnId = 1;
/// The clock both ends read for authentication (Unix seconds).
const UNIX_S: u64 = 1_800_000_000;

/// What happens next, at a simulated time.
#[derive(Debug)]
enum Ev {
    /// Control bytes reach the server.
    ToServer(Vec<u8>),
    /// Control bytes reach the client.
    ToClient(Vec<u8>),
    /// The server closed the control connection; the client sees it now.
    ClientSeesClose,
    /// The client's driver closed the control connection (its session failed); the server
    /// sees it now.
    ServerSeesClose,
    /// A data connection is accepted at the server with its hello.
    Accept {
        conn: ConnId,
        hello: [u8; DATA_HELLO_LEN],
    },
    /// The client's connect of data connection `conn` (stream `stream` of phase `seq`)
    /// returned: it sends its hello once the client has the session's keys.
    Up { conn: ConnId, seq: u32, stream: u32 },
    /// The client's connect of stream `index` returned.
    Connected(u32),
    /// The client's stream `index` wrote its last byte and closed its side.
    Written(u32),
    /// The server's receiver of stream `index` read the last byte and the close.
    ServerDone(u32),
    /// The server's close of stream `index` reaches the client.
    ClientDone(u32),
}

/// How the pair is set up.
#[derive(Clone, Debug)]
pub(crate) struct PairConfig {
    pub(crate) rtt: Duration,
    /// How long each stream writes.
    pub(crate) write_time: Duration,
    pub(crate) streams: u32,
    /// The server's secret (else it wants no authentication).
    pub(crate) secret: Option<&'static [u8]>,
    /// The client's secret (else it proves nothing).
    pub(crate) client_secret: Option<&'static [u8]>,
    /// The client's wall clock (Unix seconds) for its proof; the server's is `UNIX_S`.
    pub(crate) client_unix_s: u64,
}

impl PairConfig {
    /// Both ends share `secret`.
    pub(crate) fn with_secret(secret: &'static [u8]) -> PairConfig {
        PairConfig {
            secret: Some(secret),
            client_secret: Some(secret),
            ..PairConfig::default()
        }
    }
}

impl Default for PairConfig {
    fn default() -> Self {
        PairConfig {
            rtt: Duration::from_millis(40),
            write_time: Duration::from_millis(500),
            streams: 2,
            secret: None,
            client_secret: None,
            client_unix_s: UNIX_S,
        }
    }
}

/// What a run showed.
#[derive(Debug, Default)]
pub(crate) struct Trace {
    /// When the client's first data stream began to write (from the command's start).
    pub(crate) first_data: Option<Duration>,
    /// When the last byte of the data reached the server.
    pub(crate) last_byte: Option<Duration>,
    /// When the client's phase was done and it said `Bye` (the command returns).
    pub(crate) returned: Option<Duration>,
    /// The client's outcome.
    pub(crate) outcome: Option<PhaseOutcome>,
    /// The client's failure.
    pub(crate) failure: Option<Failure>,
    /// What the server logged.
    pub(crate) log: Vec<ServerEvent>,
    /// Control messages delivered so far (both ways).
    pub(crate) delivered: usize,
    /// The endpoint's sessions at the end.
    pub(crate) sessions_left: usize,
    /// How many times the client reported a failure (it must be at most once).
    pub(crate) failures: usize,
    /// The client's control messages as sent (after any mutation), in order.
    pub(crate) client_msgs: Vec<serde_json::Value>,
    /// The server's control messages as sent (after any mutation), in order.
    pub(crate) server_msgs: Vec<serde_json::Value>,
    /// Data connections the server handed to the session's engine, with their stream index.
    pub(crate) attached: Vec<(ConnId, u32)>,
    /// Data connections the server closed (refused) without attaching them.
    pub(crate) closed_data: Vec<ConnId>,
    /// Data hellos that arrived before the server had admitted their session.
    pub(crate) early_hellos: usize,
}

impl Trace {
    /// The server's log lines that end something with an error (a refusal or a session
    /// that ended with one).
    pub(crate) fn error_lines(&self) -> usize {
        self.log
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    ServerEvent::Refused { .. } | ServerEvent::SessionEnded { error: Some(_), .. }
                )
            })
            .count()
    }

    /// The same, for the control connection's peer only (not its data connections').
    pub(crate) fn control_error_lines(&self) -> usize {
        self.log
            .iter()
            .filter(|e| match e {
                ServerEvent::Refused { peer: p, .. } => *p == peer(1000),
                ServerEvent::SessionEnded { error: Some(_), .. } => true,
                _ => false,
            })
            .count()
    }
}

/// Seeded random extra delays, per connection: the control connection's frames keep their
/// order in each direction (TCP), data connections overtake them and each other.
pub(crate) struct Shuffle {
    rng: Rng,
    /// The largest extra delay.
    max: Duration,
    last_to_server: Option<Instant>,
    last_to_client: Option<Instant>,
}

impl Shuffle {
    pub(crate) fn new(seed: u64, max: Duration) -> Shuffle {
        Shuffle {
            rng: Rng(seed | 1),
            max,
            last_to_server: None,
            last_to_client: None,
        }
    }

    fn extra(&mut self) -> Duration {
        let max = u64::try_from(self.max.as_micros()).unwrap_or(u64::MAX);
        Duration::from_micros(self.rng.below(max.saturating_add(1)))
    }
}

pub(crate) struct Pair {
    cfg: PairConfig,
    t0: Instant,
    now: Instant,
    pub(crate) client: ClientSession,
    pub(crate) server: Endpoint,
    queue: BTreeMap<(Instant, u64), Ev>,
    order: u64,
    reader: FrameReader,
    next_conn: ConnId,
    session: Option<SessionId>,
    /// The server's bytes per stream of the running phase.
    received: BTreeMap<u32, u64>,
    /// Bytes each stream carries.
    per_stream: u64,
    /// Cut the control connection once this many control messages were delivered.
    pub(crate) cut_after: Option<usize>,
    /// A hostile client: replace the field at this path of its message number `.0` (from
    /// 0, in the order it sends them) with `.2`.
    pub(crate) mutate: Option<(usize, Vec<String>, serde_json::Value)>,
    /// A hostile server: the same, for its control messages to the client.
    pub(crate) mutate_server: Option<(usize, Vec<String>, serde_json::Value)>,
    /// Random extra delays (else the honest network above).
    pub(crate) shuffle: Option<Shuffle>,
    sent: usize,
    server_sent: usize,
    cut: bool,
    /// Streams whose last byte reached the server before their connection was attached
    /// (its hello parked): their receiver finishes when it is.
    waiting_done: BTreeSet<u32>,
    attached: BTreeSet<u32>,
    /// Connections from another host than the client's.
    foreign: BTreeSet<ConnId>,
    /// The client's X25519 secret key, until the server's key share gives the keys.
    client_kx: Option<x25519_dalek::StaticSecret>,
    /// The client's session keys, once derived.
    client_keys: Option<SessionKeys>,
    /// Data connections that are up and wait for the keys to send their hello.
    keyless: Vec<(ConnId, u32, u32)>,
    pub(crate) trace: Trace,
}

pub(crate) fn params(streams: u32) -> TestParams {
    TestParams {
        tune: TuneMode::Kernel,
        streams,
        message_size: 1 << 20,
        messages: 16,
        duration_ms: None,
        max_time_ms: None,
        reverse: false,
        samples: false,
        congestion: None,
        seed: 1,
        corrupt_message: None,
        files: None,
        share: false,
    }
}

pub(crate) fn endpoint_config(secret: Option<Secret>) -> EndpointConfig {
    EndpointConfig {
        limits: ServerLimits {
            max_streams: 8,
            max_message_size: 16 << 20,
            max_messages: 1 << 24,
            max_total_bytes: 1 << 40,
            max_duration_ms: 3_600_000,
        },
        max_sessions: 4,
        max_sessions_per_addr: 2,
        max_pending: 16,
        // A client's data hellos may all overtake its control connection's first frame
        // (the shuffled schedules do that): every one of them is pending until its session
        // is admitted, so an address needs room for the streams plus the control connection
        // (and here for the seeded tests' intruders on the client's host).
        max_pending_per_addr: 16,
        max_parked: 16,
        max_parked_per_addr: 16,
        first_frame_timeout: Duration::from_secs(5),
        handshake_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(30),
        secret,
        fd_budget: 10_000,
        files: None,
        slots: crate::session::endpoint::SlotRules::default(),
    }
}

pub(crate) fn host() -> HostInfo {
    HostInfo {
        limits: HostLimits::linux_defaults(),
        congestion: "cubic".into(),
        available_cc: vec!["cubic".into()],
    }
}

fn peer(port: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 2], port))
}

struct Flat(u64);

impl Observe for Flat {
    fn progress(&mut self) -> u64 {
        self.0
    }
    fn delivered(&mut self) -> u64 {
        self.0
    }
}

/// Every path to a leaf of `v` (object keys and array indices).
/// Values a hostile side puts in a field: numbers at and past every bound, empty and
/// oversized strings, the wrong types, and `message` (a whole message where a value was).
pub(crate) fn hostile_values(message: serde_json::Value) -> Vec<serde_json::Value> {
    use serde_json::json;
    vec![
        json!(u64::MAX),
        json!(-1),
        json!(1e308),
        json!(0),
        json!(""),
        json!("x".repeat(70_000)),
        json!(null),
        json!(true),
        message,
        json!([1, 2, 3]),
    ]
}

pub(crate) fn leaves(v: &serde_json::Value) -> Vec<Vec<String>> {
    match v {
        serde_json::Value::Object(m) => m
            .iter()
            .flat_map(|(k, x)| {
                leaves(x).into_iter().map(move |mut p| {
                    p.insert(0, k.clone());
                    p
                })
            })
            .collect(),
        serde_json::Value::Array(a) => a
            .iter()
            .enumerate()
            .flat_map(|(i, x)| {
                leaves(x).into_iter().map(move |mut p| {
                    p.insert(0, i.to_string());
                    p
                })
            })
            .collect(),
        _ => vec![Vec::new()],
    }
}

/// Replace the leaf at `path` of `v` with `to` (nothing when the path is not there).
pub(crate) fn set(v: &mut serde_json::Value, path: &[String], to: serde_json::Value) {
    let Some((first, rest)) = path.split_first() else {
        *v = to;
        return;
    };
    let next = match v {
        serde_json::Value::Object(m) => m.get_mut(first),
        serde_json::Value::Array(a) => first.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
        _ => None,
    };
    if let Some(n) = next {
        set(n, rest, to);
    }
}

impl Pair {
    /// A pair at `t0`; the client's command starts there.
    pub(crate) fn new(t0: Instant, cfg: PairConfig) -> Pair {
        let secret = cfg.secret.and_then(Secret::from_bytes);
        let p = params(cfg.streams);
        let per_stream = p.message_size * p.messages / u64::from(cfg.streams.max(1));
        let (client_kx, key_share) = test_kx::pair(200);
        let plan = ClientPlan {
            params: p,
            token: Token([9; 16]),
            auth: cfg
                .client_secret
                .and_then(Secret::from_bytes)
                .map(|s| (s, [3; 32], cfg.client_unix_s)),
            key_share,
            max_streams: 8,
            connect_timeout: Duration::from_secs(10),
            wait: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(30),
            duration: None,
            max_time: None,
            sender: true,
        };
        // The control connection's handshake: one RTT before the first flight.
        let now = t0 + cfg.rtt;
        let mut server = Endpoint::new(
            t0,
            endpoint_config(secret),
            host(),
            Box::new(|| [5; 32]),
            Box::new(test_kx::Server(0)),
        );
        server.on_accept(now + cfg.rtt / 2, CTRL, peer(1000));
        let mut client = ClientSession::new(now, plan);
        client.start_phase(
            now,
            PhaseRequest {
                goal: Goal::Main,
                in_band: InBand::Off,
                hint: PathHint {
                    rtt: Some(cfg.rtt),
                    ..PathHint::default()
                },
                streams: cfg.streams,
                reason: None,
            },
        );
        Pair {
            t0,
            now,
            client,
            server,
            queue: BTreeMap::new(),
            order: 0,
            reader: FrameReader::new(MAX_SERVER_FRAME),
            next_conn: CTRL + 1,
            session: None,
            received: BTreeMap::new(),
            per_stream,
            cut_after: None,
            mutate: None,
            mutate_server: None,
            shuffle: None,
            sent: 0,
            server_sent: 0,
            cut: false,
            waiting_done: BTreeSet::new(),
            attached: BTreeSet::new(),
            foreign: BTreeSet::new(),
            client_kx: Some(client_kx),
            client_keys: None,
            keyless: Vec::new(),
            trace: Trace::default(),
            cfg,
        }
    }

    /// As the client's driver does: once the server sent its key share, derive the keys
    /// and send the hellos that waited for them (a key share that does not contribute
    /// fails the client).
    fn take_keys(&mut self) {
        if self.client_keys.is_some() {
            return;
        }
        let Some((server, secret)) = self.client.key_agreement() else {
            return;
        };
        let secret = secret.cloned();
        let Some(kx) = self.client_kx.take() else {
            return;
        };
        let dh = test_kx::dh(&kx, &server);
        let (_, client) = test_kx::pair(200);
        match SessionKeys::derive(&dh, secret.as_ref(), &Token([9; 16]), &client, &server) {
            Ok(k) => self.client_keys = Some(k),
            Err(_) => {
                self.trace.failures += 1;
                self.trace
                    .failure
                    .get_or_insert(Failure::Protocol(Violation::WeakKeyShare));
                if !self.cut {
                    let at = self.ctrl_arrival(true);
                    self.at(at, Ev::ServerSeesClose);
                }
                return;
            }
        }
        for (conn, seq, stream) in std::mem::take(&mut self.keyless) {
            self.send_hello(conn, seq, stream);
        }
    }

    /// Data connection `conn` sends its hello (tagged with the client's keys).
    fn send_hello(&mut self, conn: ConnId, seq: u32, stream: u32) {
        let Some(keys) = &self.client_keys else {
            return self.keyless.push((conn, seq, stream));
        };
        let hello = DataHello::sealed(keys, Token([9; 16]), seq, stream).encode();
        let at = self.now + self.half();
        self.at(at, Ev::Accept { conn, hello });
    }

    fn at(&mut self, when: Instant, ev: Ev) {
        self.order += 1;
        self.queue.insert((when, self.order), ev);
    }

    fn since(&self) -> Duration {
        self.now - self.t0
    }

    fn half(&self) -> Duration {
        self.cfg.rtt / 2
    }

    /// When a control frame sent now arrives: half an RTT, plus the shuffle's extra delay,
    /// never before the frame sent before it in the same direction.
    fn ctrl_arrival(&mut self, to_server: bool) -> Instant {
        let base = self.now + self.half();
        let Some(s) = self.shuffle.as_mut() else {
            return base;
        };
        let extra = s.extra();
        let last = if to_server {
            &mut s.last_to_server
        } else {
            &mut s.last_to_client
        };
        let at = last.map_or(base + extra, |l| (base + extra).max(l));
        *last = Some(at);
        at
    }

    /// The extra delay of a new data connection.
    fn data_extra(&mut self) -> Duration {
        self.shuffle.as_mut().map_or(Duration::ZERO, Shuffle::extra)
    }

    /// An intruder opens a data connection at `at` (from the command's start) and sends
    /// `hello`: from the client's address (a hostile process on the client's host) or from
    /// another host.
    pub(crate) fn inject_hello(
        &mut self,
        at: Duration,
        hello: [u8; DATA_HELLO_LEN],
        from_client_host: bool,
    ) {
        let conn = self.next_conn;
        self.next_conn += 1;
        if !from_client_host {
            self.foreign.insert(conn);
        }
        let when = self.t0 + at;
        self.at(when, Ev::Accept { conn, hello });
    }

    /// Run until both ends are done or `limit` of simulated time passed; `true` when the
    /// client finished (completed or failed) and the server holds no session.
    pub(crate) fn run(&mut self, limit: Duration) -> bool {
        for _ in 0..100_000 {
            self.drain_client();
            self.drain_server();
            let done = self.trace.returned.is_some() || self.trace.failure.is_some();
            if done && self.server.sessions() == 0 && self.queue.is_empty() {
                break;
            }
            let next = [
                self.queue.keys().next().map(|k| k.0),
                self.client.poll_timeout(),
                self.server.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next else { break };
            if next > self.t0 + limit {
                break;
            }
            self.now = self.now.max(next);
            self.step();
        }
        self.trace.sessions_left = self.server.sessions();
        let done = self.trace.returned.is_some() || self.trace.failure.is_some();
        done && self.trace.sessions_left == 0
    }

    fn step(&mut self) {
        let now = self.now;
        if let Some(e) = self.queue.first_key_value().map(|(k, _)| *k) {
            if e.0 <= now {
                if let Some(ev) = self.queue.remove(&e) {
                    self.deliver(ev);
                }
                return;
            }
        }
        if self.client.poll_timeout().is_some_and(|t| t <= now) {
            let moved = u64::try_from(self.since().as_micros()).unwrap_or(u64::MAX);
            self.client.handle_timeout(now, &mut Flat(moved));
        }
        if self.server.poll_timeout().is_some_and(|t| t <= now) {
            // Data moves steadily while the phase runs (the simulated engine).
            let moved = u64::try_from(self.since().as_micros()).unwrap_or(u64::MAX);
            let o = Observation {
                progress: moved,
                delivered: moved,
                min_rtt: Some(self.cfg.rtt),
                out_of_order: None,
            };
            self.server.on_timeout(now, &|_| Some(o));
        }
    }

    fn cut_now(&mut self) -> bool {
        if self.cut || self.cut_after.is_some_and(|n| self.trace.delivered >= n) {
            if !self.cut {
                self.cut = true;
                self.server.on_closed(self.now, CTRL);
                if self.trace.returned.is_none() {
                    self.client.handle_closed(self.now);
                }
            }
            return true;
        }
        false
    }

    fn deliver(&mut self, ev: Ev) {
        let now = self.now;
        match ev {
            Ev::ToServer(b) => {
                if self.cut_now() {
                    return;
                }
                self.trace.delivered += 1;
                if self.server.read_limit(CTRL) != ReadLimit::None {
                    self.server.on_bytes(now, UNIX_S, CTRL, &b);
                }
            }
            Ev::ToClient(b) => {
                if self.cut_now() {
                    return;
                }
                self.trace.delivered += 1;
                self.reader.push(&b);
                loop {
                    match self.reader.take_frame() {
                        Ok(Some(f)) => match wire::decode::<ServerMsg>(&f) {
                            Ok(m) => {
                                self.client.handle_msg(now, m);
                                self.take_keys();
                            }
                            Err(_) => self.client.handle_closed(now),
                        },
                        Ok(None) => break,
                        // A frame past the client's limit: its driver drops the connection.
                        Err(_) => {
                            self.client.handle_closed(now);
                            break;
                        }
                    }
                }
            }
            // After `Bye` the command has returned and reads no more.
            Ev::ClientSeesClose if self.trace.returned.is_some() => {}
            Ev::ClientSeesClose => self.client.handle_closed(now),
            Ev::ServerSeesClose if self.cut => {}
            Ev::ServerSeesClose => {
                self.cut = true;
                self.server.on_closed(now, CTRL);
            }
            Ev::Accept { conn, hello } => {
                if self.session.is_none() {
                    self.trace.early_hellos += 1;
                }
                let from = if self.foreign.contains(&conn) {
                    SocketAddr::from(([10, 0, 0, 3], 2000 + conn as u16))
                } else {
                    peer(2000 + conn as u16)
                };
                self.server.on_accept(now, conn, from);
                // As the driver reads: never past what the endpoint allows.
                let mut rest = &hello[..];
                while let ReadLimit::Exact(n) = self.server.read_limit(conn) {
                    if rest.is_empty() {
                        break;
                    }
                    let (now_bytes, later) = rest.split_at(n.min(rest.len()));
                    self.server.on_bytes(now, UNIX_S, conn, now_bytes);
                    rest = later;
                }
            }
            Ev::Up { conn, seq, stream } => self.send_hello(conn, seq, stream),
            Ev::Connected(i) => {
                self.trace.first_data.get_or_insert(self.since());
                self.client.handle_stream_open(now, i);
                self.at(now + self.cfg.write_time, Ev::Written(i));
            }
            Ev::Written(i) => {
                self.client.handle_engine(now, Event::StreamWritten(i));
                let at = now + self.half();
                self.at(at, Ev::ServerDone(i));
            }
            Ev::ServerDone(i) if !self.attached.contains(&i) => {
                self.waiting_done.insert(i);
            }
            Ev::ServerDone(i) => self.server_done(i),
            Ev::ClientDone(i) => self.client.handle_engine(now, Event::StreamDone(i)),
        }
    }

    /// The server's receiver of stream `i` read the last byte and the close.
    fn server_done(&mut self, i: u32) {
        let now = self.now;
        self.received.insert(i, self.per_stream);
        let since = self.since();
        self.trace.last_byte = Some(self.trace.last_byte.map_or(since, |t| t.max(since)));
        if let Some(s) = self.session {
            self.server.on_engine(now, s, Event::StreamDone(i));
        }
        let at = now + self.half();
        self.at(at, Ev::ClientDone(i));
    }

    fn drain_client(&mut self) {
        let now = self.now;
        while let Some(o) = self.client.poll_output() {
            match o {
                ClientOutput::Send(m) => {
                    let mut v = serde_json::to_value(&m).unwrap_or_default();
                    if let Some((n, path, to)) = &self.mutate {
                        if *n == self.sent {
                            set(&mut v, path, to.clone());
                        }
                    }
                    self.sent += 1;
                    if let Ok(b) = wire::encode(&v) {
                        self.trace.client_msgs.push(v);
                        let at = self.ctrl_arrival(true);
                        self.at(at, Ev::ToServer(b));
                    }
                }
                ClientOutput::OpenStreams { seq, from, to, .. } => {
                    for i in from..to {
                        let conn = self.next_conn;
                        self.next_conn += 1;
                        let rtt = self.cfg.rtt;
                        let extra = self.data_extra();
                        self.at(now + rtt + extra, Ev::Connected(i));
                        let up = Ev::Up {
                            conn,
                            seq,
                            stream: i,
                        };
                        self.at(now + rtt + extra, up);
                    }
                }
                ClientOutput::PhaseDone { outcome, .. } => {
                    self.trace.outcome = Some(outcome);
                    self.trace.returned = Some(self.since());
                    self.client.finish();
                }
                ClientOutput::Failed(f) => {
                    self.trace.failures += 1;
                    self.trace.failure.get_or_insert(f);
                    // The driver returns and its control connection closes.
                    if !self.cut {
                        let at = self.ctrl_arrival(true);
                        self.at(at, Ev::ServerSeesClose);
                    }
                }
                ClientOutput::Measured(_)
                | ClientOutput::LocalHint { .. }
                | ClientOutput::StopSenders
                | ClientOutput::RetireStreams { .. }
                | ClientOutput::AbortEngine
                | ClientOutput::Queued { .. }
                | ClientOutput::Pace { .. } => {}
            }
        }
    }

    fn drain_server(&mut self) {
        let now = self.now;
        while let Some(e) = self.server.poll_event() {
            match e {
                EndpointEvent::Send { conn, frame } if conn == CTRL && !self.cut => {
                    let frame = self.server_frame(frame);
                    let at = self.ctrl_arrival(false);
                    self.at(at, Ev::ToClient(frame));
                }
                EndpointEvent::Close { conn } if conn == CTRL && !self.cut => {
                    let at = self.ctrl_arrival(false);
                    self.at(at, Ev::ClientSeesClose);
                }
                EndpointEvent::Close { conn }
                    if conn != CTRL && !self.trace.attached.iter().any(|(c, _)| *c == conn) =>
                {
                    self.trace.closed_data.push(conn);
                }
                EndpointEvent::StartEngine { session, .. } => {
                    self.session = Some(session);
                    self.received.clear();
                    // Streams whose data already arrived (their hellos parked until now)
                    // stay waiting for their attach.
                    self.attached.clear();
                }
                EndpointEvent::Attach { conn, index, .. } => {
                    self.trace.attached.push((conn, index));
                    self.attached.insert(index);
                    if self.waiting_done.remove(&index) {
                        self.server_done(index);
                    }
                }
                EndpointEvent::FinishEngine { session, seq } => {
                    let r = self.server_side();
                    self.server.on_phase_result(now, session, seq, r);
                }
                EndpointEvent::Lookup { session, .. } => {
                    self.server
                        .on_lookup(now, session, None, None, UNIX_S as f64);
                }
                EndpointEvent::Log(ev) => self.trace.log.push(ev),
                _ => {}
            }
        }
    }

    /// A control frame of the server as the client gets it: recorded, and mutated when the
    /// server is hostile and this is the message to mutate.
    fn server_frame(&mut self, frame: Vec<u8>) -> Vec<u8> {
        let n = self.server_sent;
        self.server_sent += 1;
        let Some(mut v) = frame
            .get(4..)
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        else {
            return frame;
        };
        let mut out = frame;
        if let Some((m, path, to)) = &self.mutate_server {
            if *m == n {
                set(&mut v, path, to.clone());
                if let Ok(b) = wire::encode(&v) {
                    out = b;
                }
            }
        }
        self.trace.server_msgs.push(v);
        out
    }

    /// The server's side of the phase, as its engine would report it.
    fn server_side(&self) -> SideResult {
        SideResult {
            streams: self
                .received
                .iter()
                .map(|(i, b)| StreamSide {
                    stream: i + 1,
                    sender: false,
                    bytes: *b,
                    messages: b / (1 << 20),
                    partial_bytes: 0,
                    first_s: Some(0.0),
                    last_s: Some(self.cfg.write_time.as_secs_f64()),
                    opened_at_s: 0.0,
                    tail_bits_per_second: None,
                    local: String::new(),
                    remote: String::new(),
                    detail: Default::default(),
                    error: None,
                })
                .collect(),
            congestion: "cubic".into(),
            ..SideResult::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Instant {
        // Any instant will do: the pair only ever adds simulated time to it.
        Instant::now()
    }

    fn run(cfg: PairConfig, cut_after: Option<usize>) -> (bool, Trace) {
        let mut p = Pair::new(origin(), cfg);
        p.cut_after = cut_after;
        let ok = p.run(Duration::from_secs(600));
        (ok, p.trace)
    }

    #[test]
    fn a_transfer_completes_and_both_ends_agree_on_the_result() {
        for secret in [None, Some(&b"pair secret"[..])] {
            let cfg = PairConfig {
                secret,
                client_secret: secret,
                ..PairConfig::default()
            };
            let (ok, t) = run(cfg.clone(), None);
            assert!(ok, "secret {secret:?}: {t:?}");
            assert!(t.failure.is_none(), "{:?}", t.failure);
            let outcome = t.outcome.expect("the phase ended");
            let remote = outcome.remote.expect("the server's side came back");
            let p = params(cfg.streams);
            assert_eq!(remote.streams.len() as u32, cfg.streams);
            let bytes: u64 = remote.streams.iter().map(|s| s.bytes).sum();
            assert_eq!(bytes, p.message_size * p.messages, "the server got it all");
            assert!(t
                .log
                .iter()
                .any(|e| matches!(e, ServerEvent::SessionEnded { error: None, .. })));
        }
    }

    #[test]
    fn data_flows_two_rtt_after_the_command_and_it_returns_one_rtt_after_the_last_write() {
        for rtt_ms in [1, 40, 200] {
            let cfg = PairConfig {
                rtt: Duration::from_millis(rtt_ms),
                ..PairConfig::default()
            };
            let (rtt, write) = (cfg.rtt, cfg.write_time);
            let (ok, t) = run(cfg, None);
            assert!(ok && t.failure.is_none(), "{t:?}");
            // Control handshake (1 RTT), then the data connections' handshakes (1 RTT):
            // the first flight does not wait for the server's answer.
            assert_eq!(t.first_data, Some(2 * rtt));
            // The last byte arrives half an RTT after it was written; the server's result
            // (sent when every stream ended at its end) arrives half an RTT later.
            let last = 2 * rtt + write + rtt / 2;
            assert_eq!(t.last_byte, Some(last));
            assert_eq!(t.returned, Some(last + rtt / 2));
        }
    }

    /// Values a hostile client puts in a field.
    fn hostile() -> Vec<serde_json::Value> {
        super::hostile_values(serde_json::json!({"type": "bye"}))
    }

    #[test]
    fn a_hostile_client_mutating_every_field_of_every_message_is_refused_in_one_line() {
        // The messages an honest client sends, in order.
        let mut honest = Pair::new(origin(), PairConfig::default());
        let mut msgs = Vec::new();
        while let Some(o) = honest.client.poll_output() {
            if let ClientOutput::Send(m) = o {
                msgs.push(serde_json::to_value(&m).unwrap_or_default());
            }
        }
        msgs.push(serde_json::json!({"type": "end_phase", "streams": 2}));
        msgs.push(serde_json::json!({"type": "bye"}));
        let mut runs = 0;
        for (n, m) in msgs.iter().enumerate() {
            for path in leaves(m) {
                for to in hostile() {
                    let mut p = Pair::new(origin(), PairConfig::default());
                    p.mutate = Some((n, path.clone(), to.clone()));
                    let ok = p.run(Duration::from_secs(600));
                    runs += 1;
                    let what = format!("message {n} field {path:?} = {to:.40}");
                    assert!(ok, "{what}: a side hangs: {:?}", p.trace.failure);
                    let lines = p
                        .trace
                        .log
                        .iter()
                        .filter(|e| {
                            matches!(
                                e,
                                ServerEvent::Refused { .. }
                                    | ServerEvent::SessionEnded { error: Some(_), .. }
                            )
                        })
                        .count();
                    assert!(lines <= 1, "{what}: {lines} lines: {:?}", p.trace.log);
                }
            }
        }
        println!("{runs} hostile runs over {} messages", msgs.len());
        assert!(runs > 100, "every field was tried");
    }

    #[test]
    fn a_lost_control_connection_at_each_step_ends_both_sides_with_an_error() {
        let (_, whole) = run(PairConfig::default(), None);
        for n in 0..whole.delivered {
            let (ok, t) = run(PairConfig::default(), Some(n));
            assert!(ok, "cut after {n} messages: a side hangs: {t:?}");
            if n + 1 == whole.delivered {
                // Only the client's `Bye` was lost: its command had returned.
                assert!(t.returned.is_some() && t.failure.is_none(), "{t:?}");
            } else {
                assert!(
                    t.failure.is_some() && t.returned.is_none(),
                    "cut after {n} messages: the client did not fail: {t:?}"
                );
            }
            assert!(
                t.log.iter().any(|e| matches!(
                    e,
                    ServerEvent::SessionEnded { error: Some(_), .. } | ServerEvent::Refused { .. }
                )) || !t
                    .log
                    .iter()
                    .any(|e| matches!(e, ServerEvent::SessionStarted { .. })),
                "cut after {n}: the server did not end the session with an error: {:?}",
                t.log
            );
        }
    }
}
