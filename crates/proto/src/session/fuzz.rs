//! A time-bounded random-walk fuzzer for the state machines: the server's [`Endpoint`] and
//! the client's [`ClientSession`] get random connections, random bytes, random and
//! half-valid messages in every state, engine events, phase results and jumps in time, and
//! must never panic nor break their bounds (pending connections, sessions, descriptors).
//!
//! It runs as a test for `TCPTUNE_FUZZ_SECONDS` (default 2 s; CI sets more) with a seed
//! from `TCPTUNE_FUZZ_SEED`, else a fixed one (or one from the clock when
//! `TCPTUNE_FUZZ_SECONDS` is set), printed so that a failure can be replayed.

use super::client::{ClientPlan, ClientSession, Goal, Observe, PhaseRequest};
use super::endpoint::{Endpoint, EndpointConfig, EndpointEvent, HostInfo, ReadLimit};
use super::server::advise::KnownPath;
use super::server::Observation;
use crate::keys::test_kx;
use crate::result::SideResult;
use crate::session::Event;
use crate::wire::{
    self, AdviseRequest, ClientAuth, ClientMsg, DataHello, Phase, ServerLimits, ServerMsg,
    TestParams, Token, PROTOCOL_VERSION,
};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tcptune_core::pathdb::Direction;
use tcptune_core::StreamRequest;
use tcptune_core::{Bytes, HostLimits, PathHint, Rate, TuneMode};

/// xorshift64* (also the `Pair`'s seeded schedules and mutations).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    pub(crate) fn pick_u64(&mut self) -> u64 {
        match self.below(6) {
            0 => 0,
            1 => u64::MAX,
            2 => self.below(10),
            3 => 1 << self.below(40),
            _ => self.next(),
        }
    }
}

/// The walk's seed: `TCPTUNE_FUZZ_SEED`; else a fixed one in a normal run (the same walks
/// every time, as far as the time box reaches), and one from the clock when
/// `TCPTUNE_FUZZ_SECONDS` asks for a longer, random run (CI's time-boxed part). Printed
/// either way, so that a failure can be replayed.
fn seed() -> u64 {
    const FIXED: u64 = 0x7c97_2a5e_5eed_0001;
    if let Some(s) = std::env::var("TCPTUNE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return s;
    }
    if std::env::var_os("TCPTUNE_FUZZ_SECONDS").is_none() {
        return FIXED;
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(FIXED, |d| d.as_nanos() as u64)
        | 1
}

fn budget() -> Duration {
    let secs = std::env::var("TCPTUNE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(2.0);
    Duration::from_secs_f64(secs)
}

fn params(r: &mut Rng) -> TestParams {
    let tunes = [
        TuneMode::None,
        TuneMode::Kernel,
        TuneMode::Auto,
        TuneMode::Psc,
        TuneMode::Drs,
        TuneMode::Probe,
        TuneMode::Fixed(Bytes(r.pick_u64())),
        TuneMode::Manual(Some(Rate(r.pick_u64()))),
    ];
    TestParams {
        tune: tunes[r.below(tunes.len() as u64) as usize].clone(),
        streams: if r.chance(70) {
            1 + r.below(4) as u32
        } else {
            r.next() as u32
        },
        message_size: if r.chance(70) { 1 << 20 } else { r.pick_u64() },
        messages: if r.chance(70) { 8 } else { r.pick_u64() },
        duration_ms: r.chance(30).then(|| r.pick_u64()),
        max_time_ms: r.chance(20).then(|| r.pick_u64()),
        reverse: r.chance(50),
        samples: r.chance(30),
        congestion: match r.below(4) {
            0 => Some("cubic".into()),
            1 => Some(String::from_utf8_lossy(&r.bytes(5)).into_owned()),
            _ => None,
        },
        seed: r.next(),
        corrupt_message: r.chance(5).then(|| r.below(10)),
        files: None,
        share: r.chance(50),
    }
}

fn advise_request(r: &mut Rng) -> AdviseRequest {
    let mut b = || Bytes(r.pick_u64());
    let limits = HostLimits {
        rmem_max: b(),
        wmem_max: b(),
        tcp_rmem: [b(), b(), b()],
        tcp_wmem: [b(), b(), b()],
        moderate_rcvbuf: true,
        can_force: false,
    };
    AdviseRequest {
        direction: if r.chance(50) {
            Direction::Send
        } else {
            Direction::Receive
        },
        limits: r.chance(50).then_some(limits),
        max_streams: r.next() as u32,
        fresh: r.chance(30),
    }
}

fn known(r: &mut Rng) -> KnownPath {
    KnownPath {
        rate: Rate(r.pick_u64()),
        full_pipe: r.chance(60),
        min_rtt: Duration::from_micros(r.pick_u64() >> r.below(64)),
        measured_at_unix_s: if r.chance(90) {
            1.7e9
        } else {
            f64::from_bits(r.next())
        },
        samples: r.next() as u32,
    }
}

fn message(r: &mut Rng, tokens: &[u8]) -> ClientMsg {
    let token = tokens[r.below(tokens.len() as u64) as usize];
    match r.below(9) {
        7 => ClientMsg::Advise {
            request: advise_request(r),
        },
        0 => ClientMsg::Hello {
            protocol: if r.chance(90) {
                PROTOCOL_VERSION
            } else {
                r.next() as u32
            },
            version: "fuzz".into(),
            key_share: match r.below(10) {
                0 => None,
                1 => Some(wire::to_hex(&r.bytes(31))),
                2 => Some(wire::to_hex(&[0; 32])),
                _ => Some(wire::to_hex(&test_kx::pair(token).1)),
            },
            token: r.chance(95).then_some(Token([token; 16])),
            auth: r.chance(20).then(|| ClientAuth {
                nonce: wire::to_hex(&r.bytes(32)),
                time_unix_s: r.pick_u64(),
                mac: if r.chance(50) {
                    wire::to_hex(&r.bytes(32))
                } else {
                    "zz".into()
                },
            }),
        },
        1 => ClientMsg::Auth {
            mac: wire::to_hex(&r.bytes(32)),
        },
        2 => ClientMsg::Setup { params: params(r) },
        3 => ClientMsg::StartPhase {
            seq: r.below(3) as u32,
            phase: if r.chance(70) {
                Phase::Main
            } else {
                Phase::Probe {
                    duration_ms: r.pick_u64(),
                }
            },
            hint: PathHint {
                rtt: r
                    .chance(50)
                    .then(|| Duration::from_micros(r.pick_u64() >> 20)),
                rate: r.chance(50).then(|| Rate(r.pick_u64())),
                rate_is_lower_bound: r.chance(50),
                rate_in_band: r.chance(50),
                resume: r.chance(50),
                streams_asked: r.chance(50).then(|| r.below(u64::from(u32::MAX)) as u32),
            },
            streams: r.below(10) as u32,
        },
        4 => ClientMsg::Stop {
            capped: r.chance(50),
        },
        5 => ClientMsg::EndPhase {
            streams: r.below(10) as u32,
        },
        _ => ClientMsg::Bye,
    }
}

fn config() -> EndpointConfig {
    EndpointConfig {
        limits: ServerLimits {
            max_streams: 8,
            max_message_size: 16 << 20,
            max_messages: 1 << 24,
            max_total_bytes: 1 << 40,
            max_duration_ms: 60_000,
        },
        max_sessions: 4,
        max_sessions_per_addr: 2,
        max_pending: 32,
        max_pending_per_addr: 8,
        max_parked: 4096,
        max_parked_per_addr: 4096,
        first_frame_timeout: Duration::from_secs(5),
        handshake_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(30),
        secret: None,
        fd_budget: 120,
        files: None,
        slots: crate::session::endpoint::SlotRules::default(),
    }
}

#[test]
fn the_endpoint_survives_random_walks_within_its_bounds() {
    let seed = seed();
    let budget = budget();
    println!("endpoint fuzz: seed {seed} (TCPTUNE_FUZZ_SEED), {budget:?}");
    let mut r = Rng(seed);
    let started = Instant::now();
    let mut steps = 0u64;
    let mut walks = 0u64;
    let (mut admitted, mut phases, mut attached, mut results) = (0u64, 0u64, 0u64, 0u64);
    let (mut advised, mut measures) = (0u64, 0u64);
    while started.elapsed() < budget {
        walks += 1;
        let mut cfg = config();
        if r.chance(30) {
            cfg.secret = crate::auth::Secret::from_bytes(b"fuzz");
        }
        let limits = cfg.clone();
        let host = HostInfo {
            limits: HostLimits::linux_defaults(),
            congestion: "cubic".into(),
            available_cc: vec!["cubic".into()],
        };
        let mut now = Instant::now();
        let mut e = Endpoint::new(
            now,
            cfg,
            host,
            Box::new(|| [7; 32]),
            Box::new(test_kx::Server(0)),
        );
        let mut conns: Vec<u64> = Vec::new();
        let mut next_conn = 1u64;
        let mut finishing: Vec<(u64, u32)> = Vec::new();
        let mut sessions: Vec<u64> = Vec::new();
        let mut peers: std::collections::HashMap<u64, std::net::IpAddr> = Default::default();
        let mut flights: Vec<(u64, u8, std::net::IpAddr)> = Vec::new();
        let mut lookups: Vec<u64> = Vec::new();
        let delivered = std::cell::Cell::new(0u64);
        let tokens = [1u8, 2, 3, 4];
        for _ in 0..400 {
            steps += 1;
            match r.below(14) {
                12 if !lookups.is_empty() => {
                    // The path database answers an advice session.
                    let s = lookups.swap_remove(r.below(lookups.len() as u64) as usize);
                    let rtt = r
                        .chance(80)
                        .then(|| Duration::from_micros(r.pick_u64() >> r.below(64)));
                    let k = r.chance(50).then(|| known(&mut r));
                    e.on_lookup(now, s, rtt, k, 1.7e9);
                }
                0 | 1 => {
                    let peer =
                        SocketAddr::from(([10, 0, 0, r.below(6) as u8], 1000 + next_conn as u16));
                    e.on_accept(now, next_conn, peer);
                    peers.insert(next_conn, peer.ip());
                    conns.push(next_conn);
                    next_conn += 1;
                }
                11 if !flights.is_empty() => {
                    // A data connection for a session that sent a valid first flight, or
                    // its end of phase: the happy path with random timing.
                    let (ctrl, t, ip) = flights[r.below(flights.len() as u64) as usize];
                    if r.chance(70) {
                        let peer = SocketAddr::from((ip, 2000 + next_conn as u16));
                        e.on_accept(now, next_conn, peer);
                        let token = Token([t; 16]);
                        let (seq, stream) = (r.below(2) as u32, r.below(3) as u32);
                        let mut hello = if r.chance(85) {
                            let keys = test_kx::client_keys(t, 0, None, &token);
                            DataHello::sealed(&keys, token, seq, stream)
                        } else {
                            DataHello {
                                token,
                                seq,
                                stream,
                                tag: [0; 16],
                            }
                        };
                        if r.chance(5) {
                            hello.tag[r.below(16) as usize] ^= 1;
                        }
                        let hello = hello.encode();
                        e.on_bytes(now, 0, next_conn, &hello[..8]);
                        e.on_bytes(now, 0, next_conn, &hello[8..]);
                        conns.push(next_conn);
                        next_conn += 1;
                    } else {
                        let f = wire::encode(&ClientMsg::EndPhase {
                            streams: r.below(3) as u32,
                        })
                        .unwrap_or_default();
                        if e.read_limit(ctrl) == ReadLimit::Frames {
                            e.on_bytes(now, 0, ctrl, &f);
                        }
                    }
                }
                2..=5 if !conns.is_empty() => {
                    let c = conns[r.below(conns.len() as u64) as usize];
                    let data = match r.below(4) {
                        0 => {
                            let n = 1 + r.below(64) as usize;
                            r.bytes(n)
                        }
                        1 => DataHello {
                            token: Token([tokens[r.below(4) as usize]; 16]),
                            seq: r.below(3) as u32,
                            stream: r.below(10) as u32,
                            tag: r.bytes(16).try_into().unwrap_or([0; 16]),
                        }
                        .encode()
                        .to_vec(),
                        2 => {
                            // A valid first flight, so that the walk reaches running phases.
                            let t = tokens[r.below(4) as usize];
                            if let Some(ip) = peers.get(&c) {
                                flights.push((c, t, *ip));
                            }
                            let mut p = params(&mut r);
                            p.streams = 1 + r.below(3) as u32;
                            p.message_size = 1 << 20;
                            p.messages = 4;
                            p.duration_ms = None;
                            p.max_time_ms = None;
                            p.congestion = None;
                            let hello = ClientMsg::Hello {
                                protocol: PROTOCOL_VERSION,
                                version: "fuzz".into(),
                                token: Some(Token([t; 16])),
                                auth: None,
                                key_share: Some(wire::to_hex(&test_kx::pair(t).1)),
                            };
                            let flight = if r.chance(40) {
                                vec![
                                    hello,
                                    ClientMsg::Advise {
                                        request: advise_request(&mut r),
                                    },
                                ]
                            } else {
                                vec![
                                    hello,
                                    ClientMsg::Setup { params: p },
                                    ClientMsg::StartPhase {
                                        seq: 0,
                                        phase: Phase::Main,
                                        hint: PathHint::default(),
                                        streams: 2,
                                    },
                                ]
                            };
                            flight
                                .iter()
                                .flat_map(|m| wire::encode(m).unwrap_or_default())
                                .collect()
                        }
                        _ => wire::encode(&message(&mut r, &tokens)).unwrap_or_default(),
                    };
                    let mut rest = &data[..];
                    while !rest.is_empty() {
                        let n = match e.read_limit(c) {
                            ReadLimit::None => break,
                            ReadLimit::Exact(n) => n.min(rest.len()),
                            ReadLimit::Frames => rest.len().min(1 + r.below(200) as usize),
                        };
                        e.on_bytes(now, 1_000_000 + r.below(1000), c, &rest[..n]);
                        rest = &rest[n..];
                    }
                }
                6 if !conns.is_empty() => {
                    let i = r.below(conns.len() as u64) as usize;
                    e.on_closed(now, conns.swap_remove(i));
                }
                7 if !sessions.is_empty() => {
                    let s = sessions[r.below(sessions.len() as u64) as usize];
                    let ev = match r.below(4) {
                        0 => Event::StreamDone(r.below(3) as u32),
                        3 => Event::StreamWritten(r.below(3) as u32),
                        1 => Event::MoreStreams(StreamRequest {
                            known_streams: r.below(10) as u32,
                            count: r.next() as u32,
                            reason: "fuzz".into(),
                        }),
                        _ => Event::Integrity("fuzz".into()),
                    };
                    e.on_engine(now, s, ev);
                }
                8 if !finishing.is_empty() => {
                    let (s, seq) = finishing.swap_remove(0);
                    e.on_phase_result(now, s, seq, SideResult::default());
                }
                9 => {
                    now += Duration::from_millis(if r.chance(50) {
                        r.below(100)
                    } else {
                        r.below(20_000)
                    });
                    // Engines that deliver in bursts, and an RTT now and then.
                    let step = if r.chance(80) { r.below(1 << 24) } else { 0 };
                    delivered.set(delivered.get().saturating_add(step));
                    let rtt = r
                        .chance(70)
                        .then(|| Duration::from_micros(1 + r.below(200_000)));
                    let d = &delivered;
                    e.on_timeout(now, &|_| {
                        Some(Observation {
                            progress: d.get(),
                            delivered: d.get(),
                            min_rtt: rtt,
                            out_of_order: None,
                        })
                    });
                }
                10 if !sessions.is_empty() => {
                    let s = sessions[r.below(sessions.len() as u64) as usize];
                    e.on_session_error(now, s, "fuzz".into());
                }
                _ => {}
            }
            while let Some(ev) = e.poll_event() {
                match ev {
                    EndpointEvent::StartEngine { session, .. } => {
                        phases += 1;
                        if !sessions.contains(&session) {
                            sessions.push(session);
                        }
                    }
                    EndpointEvent::FinishEngine { session, seq } => {
                        results += 1;
                        finishing.push((session, seq));
                    }
                    EndpointEvent::Attach { .. } => attached += 1,
                    EndpointEvent::Log(crate::events::ServerEvent::SessionStarted { .. }) => {
                        admitted += 1
                    }
                    EndpointEvent::SessionGone { session } => sessions.retain(|s| *s != session),
                    EndpointEvent::Send { frame, .. } => {
                        assert!(frame.len() >= 4);
                        let m: ServerMsg =
                            wire::decode(&frame[4..]).expect("the server sends valid frames");
                        match m {
                            ServerMsg::Advice { advice } => {
                                advised += 1;
                                assert!(advice.sizing.streams >= 1);
                                assert!(advice.sizing.sndbuf_bytes <= i32::MAX as u64);
                            }
                            ServerMsg::Measure { .. } => measures += 1,
                            _ => {}
                        }
                    }
                    EndpointEvent::Lookup { session, .. } => lookups.push(session),
                    EndpointEvent::Record { measurement, .. } => {
                        assert!(measurement.rate.0 > 0);
                    }
                    _ => {}
                }
            }
            let s = e.stats();
            assert!(s.pending <= u64::from(limits.max_pending), "{s:?}");
            assert!(s.sessions_active <= u64::from(limits.max_sessions), "{s:?}");
        }
    }
    println!(
        "endpoint fuzz: {walks} walks, {steps} steps, no panic; reached {admitted} admissions, {phases} phases, {attached} streams joined, {results} phases finished, {advised} advice, {measures} measurements"
    );
    assert!(
        admitted > 0 && phases > 0 && attached > 0 && results > 0,
        "the walk must reach running phases"
    );
    assert!(
        advised > 0 && measures > 0,
        "the walk must reach advice, answered and measured"
    );
}

struct Still;

impl Observe for Still {
    fn progress(&mut self) -> u64 {
        1
    }
    fn delivered(&mut self) -> u64 {
        1
    }
}

#[test]
fn the_client_session_survives_random_servers() {
    let seed = seed() ^ 0x5555;
    let budget = budget();
    println!("client fuzz: seed {seed}, {budget:?}");
    let mut r = Rng(seed | 1);
    let started = Instant::now();
    let mut steps = 0u64;
    while started.elapsed() < budget {
        let mut now = Instant::now();
        let mut s = ClientSession::new(
            now,
            ClientPlan {
                params: params(&mut r),
                token: Token([1; 16]),
                key_share: [4; 32],
                auth: r
                    .chance(30)
                    .then(|| crate::auth::Secret::from_bytes(b"x"))
                    .flatten()
                    .map(|k| (k, [3; 32], 1000)),
                max_streams: 1 + r.below(16) as u32,
                connect_timeout: Duration::from_secs(10),
                wait: Duration::from_secs(60),
                idle_timeout: Duration::from_secs(30),
                duration: r.chance(30).then(|| Duration::from_millis(r.below(5000))),
                max_time: r.chance(20).then(|| Duration::from_millis(r.below(5000))),
                sender: r.chance(50),
            },
        );
        for _ in 0..200 {
            steps += 1;
            match r.below(9) {
                0 => s.start_phase(
                    now,
                    PhaseRequest {
                        goal: Goal::Main,
                        in_band: super::client::InBand::Measure,
                        hint: PathHint::default(),
                        streams: r.below(10) as u32,
                        reason: None,
                    },
                ),
                1..=3 => {
                    let m = match r.below(8) {
                        0 => ServerMsg::Challenge {
                            nonce: wire::to_hex(&r.bytes(32)),
                            reason: "fuzz".into(),
                            key_share: r.chance(50).then(|| wire::to_hex(&r.bytes(32))),
                        },
                        1 => ServerMsg::Accepted {
                            limits: config().limits,
                            host_limits: HostLimits::linux_defaults(),
                            congestion: "cubic".into(),
                            can_force: false,
                            auth_required: r.chance(50),
                            key_share: if r.chance(90) {
                                wire::to_hex(&r.bytes(32))
                            } else {
                                let n = r.below(40) as usize;
                                wire::to_hex(&r.bytes(n))
                            },
                            encrypt: r.chance(50),
                            retires: r.chance(50),
                        },
                        2 => ServerMsg::WantStreams {
                            known_streams: r.below(10) as u32,
                            count: r.next() as u32,
                            reason: "fuzz".into(),
                        },
                        3 => ServerMsg::PhaseResult {
                            seq: r.below(3) as u32,
                            result: Box::default(),
                        },
                        4 => ServerMsg::Abort {
                            integrity: r.chance(50),
                            reason: "fuzz".into(),
                        },
                        5 => ServerMsg::Queued {
                            place: r.next() as u32,
                            expected_wait_s: r.chance(50).then(|| r.next()),
                        },
                        6 => ServerMsg::Share {
                            rate_bps: r.chance(80).then(|| r.pick_u64()),
                            sessions: r.next() as u32,
                            path_bps: r.chance(50).then(|| r.pick_u64()),
                        },
                        _ => ServerMsg::Rejected {
                            reason: "fuzz".into(),
                            retry_after_s: r.chance(50).then(|| r.next()),
                        },
                    };
                    s.handle_msg(now, m);
                }
                4 => s.handle_stream_open(now, r.below(10) as u32),
                5 if r.chance(50) => s.handle_engine(now, Event::StreamDone(r.below(10) as u32)),
                5 => s.handle_engine(now, Event::StreamWritten(r.below(10) as u32)),
                6 => {
                    now += Duration::from_millis(r.below(10_000));
                    s.handle_timeout(now, &mut Still);
                }
                7 => s.handle_engine(
                    now,
                    Event::MoreStreams(StreamRequest {
                        known_streams: r.below(10) as u32,
                        count: r.next() as u32,
                        reason: "fuzz".into(),
                    }),
                ),
                _ => s.finish(),
            }
            while s.poll_output().is_some() {}
        }
    }
    println!("client fuzz: {steps} steps, no panic");
}
