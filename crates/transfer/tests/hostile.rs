//! A server under attack keeps serving: floods of idle and half-open connections, garbage,
//! truncated handshakes, oversized lengths, idle sessions holding slots, strangers on the
//! port, clients vanishing mid-transfer; while good transfers complete byte-exact.

mod common;

use common::{RawKeys, TestServer};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tcptune_core::{PathHint, TuneMode};
use tcptune_proto::keys::SessionKeys;
use tcptune_transfer::client::{run, ClientError, OnQueued};
use tcptune_transfer::proto::{
    self, ClientMsg, DataHello, FrameReader, Phase, ServerMsg, TestParams, Token,
};
use tcptune_transfer::server::{ServerConfig, ServerEvent};

/// xorshift64*: deterministic "random" bytes for the attacks.
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

fn hello(token: u8) -> ClientMsg {
    RawKeys::new(token).hello(token, "test")
}

fn params() -> TestParams {
    TestParams {
        tune: TuneMode::Kernel,
        streams: 1,
        message_size: 1 << 20,
        messages: 1000,
        duration_ms: None,
        max_time_ms: None,
        reverse: false,
        samples: false,
        congestion: None,
        seed: 7,
        corrupt_message: None,
        files: None,
        share: false,
    }
}

/// Connect from `from` (any loopback address) to the server.
fn connect_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let fd = tcptune_sys::net::tcp_socket(&to).map_err(|e| e.source)?;
    tcptune_sys::net::bind(&fd, &SocketAddr::new(from, 0)).map_err(|e| e.source)?;
    tcptune_sys::net::connect(fd, &to, Duration::from_secs(5)).map_err(|e| e.source)
}

fn recv(s: &mut TcpStream, r: &mut FrameReader) -> Option<ServerMsg> {
    s.set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match r.poll_msg(s) {
            Ok(Some(m)) => return Some(m),
            Ok(None) if Instant::now() < deadline => {}
            _ => return None,
        }
    }
}

fn loopback(n: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, n])
}

/// One attack; returns what the server answered last, if anything.
fn attack(addr: SocketAddr, kind: usize, seed: u64) -> Option<ServerMsg> {
    let mut s = connect_from(loopback(100 + kind as u8), addr).ok()?;
    let mut r = FrameReader::new(proto::MAX_SERVER_FRAME);
    match kind {
        // Random bytes.
        0 => {
            let _ = s.write_all(&noise(seed, 1 + (seed as usize % 3000)));
        }
        // A length far beyond the limit.
        1 => {
            let _ = s.write_all(&[0x00, 0xff, 0xff, 0xf0, b'{']);
        }
        // Half a frame, then silence past the first-frame timeout.
        2 => {
            let f = proto::encode(&hello(1)).ok()?;
            let _ = s.write_all(&f[..f.len() / 2]);
            std::thread::sleep(Duration::from_millis(1500));
        }
        // A valid hello, then garbage JSON.
        3 => {
            proto::write_msg(&mut s, &hello(seed as u8)).ok()?;
            let mut f = 20u32.to_be_bytes().to_vec();
            f.extend_from_slice(&noise(seed, 20));
            let _ = s.write_all(&f);
        }
        // A hello of a future protocol.
        4 => {
            proto::write_msg(
                &mut s,
                &ClientMsg::Hello {
                    protocol: 99,
                    version: "x".into(),
                    token: None,
                    auth: None,
                    key_share: None,
                },
            )
            .ok()?;
        }
        // Setup asking for absurd sizes.
        _ => {
            proto::write_msg(&mut s, &hello(seed as u8)).ok()?;
            let mut p = params();
            p.message_size = u64::MAX;
            p.streams = u32::MAX;
            proto::write_msg(&mut s, &ClientMsg::Setup { params: p }).ok()?;
        }
    }
    let mut last = None;
    while let Some(m) = recv(&mut s, &mut r) {
        last = Some(m);
    }
    last
}

#[test]
fn garbage_and_handshake_attacks_are_refused_with_a_reason_and_hurt_no_one() {
    let server = TestServer::start(ServerConfig {
        first_frame_timeout: Duration::from_secs(1),
        ..ServerConfig::default()
    });
    let addr = server.addr;
    let attackers: Vec<_> = (0..6)
        .map(|kind| {
            std::thread::spawn(move || {
                (0..6u64)
                    .map(|i| attack(addr, kind, i * 7919 + kind as u64 + 1))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut c = server.client();
    c.tune = TuneMode::Kernel;
    c.streams = 2;
    c.messages = 48;
    let report = run(&c, None).expect("the good transfer completes");
    assert!(report.end.tcptune.complete);
    assert_eq!(report.end.sum_received.bytes, 48 << 20);
    let mut refused_with_reason = 0;
    for (kind, t) in attackers.into_iter().enumerate() {
        for answer in t.join().expect("attacker") {
            match answer {
                Some(ServerMsg::Rejected { reason, .. }) => {
                    assert!(!reason.is_empty());
                    refused_with_reason += 1;
                }
                None => {}
                Some(other) => panic!("attack {kind} got {other:?}"),
            }
        }
    }
    assert!(
        refused_with_reason >= 12,
        "hello-based attacks hear why: {refused_with_reason}"
    );
    assert!(run(&c, None).expect("again").end.tcptune.complete);
    server.await_sessions_ok(2);
    let stats = server.stop();
    assert!(stats.refused >= 30, "{stats:?}");
    assert_eq!(stats.sessions_ok, 2, "{stats:?}");
}

/// The first acceptance test: 3,000 idle or half-open connections, re-opened as the
/// server closes them, from many addresses, while a good `-P 2 -n 64` completes in 20 s.
/// How long the good transfer takes under the flood depends on the machine's load and the
/// build: its target (64 MiB within 20 s, asserted here before) is measured by
/// `bench/test_timings.sh` (ONLY=flood); this checks it completes byte-exact, and a bound
/// that only a hang breaks.
#[test]
fn three_thousand_idle_and_half_open_connections_do_not_stop_a_good_client() {
    let server = TestServer::start(ServerConfig::default());
    let addr = server.addr;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let opened = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let last_error = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    // 4 threads x 750 connections from 127.0.1.x: half send nothing, half half a hello.
    let floods: Vec<_> = (0..4u8)
        .map(|t| {
            let (stop, opened, last_error) = (stop.clone(), opened.clone(), last_error.clone());
            std::thread::spawn(move || {
                let half = proto::encode(&hello(9)).unwrap_or_default();
                let mut held: Vec<Option<TcpStream>> = (0..750).map(|_| None).collect();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for (i, slot) in held.iter_mut().enumerate() {
                        let alive = slot.as_mut().is_some_and(|s| {
                            s.set_nonblocking(true).is_ok()
                                && !matches!(s.read(&mut [0u8; 64]), Ok(0))
                        });
                        if alive {
                            continue;
                        }
                        let from = IpAddr::from([127, 0, 1 + t, (i % 250) as u8 + 1]);
                        let conn = connect_from(from, addr);
                        if let Err(e) = &conn {
                            if let Ok(mut l) = last_error.lock() {
                                *l = Some(e.to_string());
                            }
                        }
                        *slot = conn.ok().map(|mut s| {
                            if i % 2 == 1 {
                                let _ = s.write_all(&half[..half.len() / 2]);
                            }
                            opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            s
                        });
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    // Let the flood build up.
    let t0 = Instant::now();
    while opened.load(std::sync::atomic::Ordering::Relaxed) < 3000
        && t0.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut c = server.client();
    c.tune = TuneMode::Kernel;
    c.streams = 2;
    c.messages = 64;
    let start = Instant::now();
    let report = run(&c, None).expect("the good transfer completes under the flood");
    let took = start.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for f in floods {
        let _ = f.join();
    }
    assert!(report.end.tcptune.complete);
    assert_eq!(report.end.sum_received.bytes, 64 << 20);
    assert!(took < Duration::from_secs(300), "took {took:?}");
    let opened = opened.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        opened >= 3000,
        "the flood opened {opened} (last connect error: {:?})",
        last_error.lock().ok().and_then(|l| l.clone())
    );
    server.await_sessions_ok(1);
    let stats = server.stop();
    println!("flood: {opened} connections, good transfer in {took:?}; server: {stats:?}");
    assert_eq!(stats.sessions_ok, 1, "{stats:?}");
}

/// Admit a session by hand from `from`; returns its control connection.
fn idle_session(addr: SocketAddr, from: IpAddr, token: u8) -> (TcpStream, Option<ServerMsg>) {
    let mut s = connect_from(from, addr).expect("connect");
    let mut r = FrameReader::new(proto::MAX_SERVER_FRAME);
    proto::write_msg(&mut s, &hello(token)).expect("hello");
    proto::write_msg(&mut s, &ClientMsg::Setup { params: params() }).expect("setup");
    let answer = recv(&mut s, &mut r);
    (s, answer)
}

#[test]
fn idle_sessions_cannot_lock_out_a_client_from_another_address() {
    let server = TestServer::start(ServerConfig {
        idle_timeout: Duration::from_secs(2),
        ..ServerConfig::default()
    });
    // 16 sessions that never start a phase, from 4 addresses (the limit is 4 per address):
    // every slot is taken.
    let mut held = Vec::new();
    for i in 0..16u8 {
        let (s, a) = idle_session(server.addr, loopback(10 + i / 4), i + 1);
        assert!(matches!(a, Some(ServerMsg::Accepted { .. })), "{i}: {a:?}");
        held.push(s);
    }
    // A fifth session from one of those addresses waits in the queue (its address's limit;
    // until issue 21 it was refused).
    let (_s, a) = idle_session(server.addr, loopback(10), 99);
    assert!(
        matches!(&a, Some(ServerMsg::Queued { place: 1, .. })),
        "{a:?}"
    );
    // Messages that are not a phase do not keep a session alive.
    for s in held.iter_mut() {
        let _ = proto::write_msg(s, &ClientMsg::Stop { capped: false });
    }
    // A 17th client from elsewhere waits in the queue, told its place, and runs once the
    // idle sessions end at the idle timeout (until issue 21 it was refused as busy).
    let told = Arc::new(AtomicU32::new(0));
    let count = told.clone();
    let mut c = server.client();
    c.tune = TuneMode::Kernel;
    c.messages = 4;
    c.bind = Some(loopback(50));
    c.on_queued = Some(OnQueued(Arc::new(move |place, expected| {
        assert!(
            place >= 1 && expected.is_some_and(|s| s <= 3),
            "{place} {expected:?}"
        );
        count.fetch_add(1, Ordering::SeqCst);
    })));
    let r = run(&c, None).expect("admitted from the queue");
    assert!(r.end.tcptune.complete);
    assert!(told.load(Ordering::SeqCst) >= 1);
}

#[test]
fn strangers_on_the_port_do_not_end_a_session() {
    let server = TestServer::start(ServerConfig::default());
    // Strangers connect first: one silent, one with a wrong token, one with garbage.
    let _silent = TcpStream::connect(server.addr).expect("stranger");
    let mut wrong = TcpStream::connect(server.addr).expect("stranger");
    let _ = wrong.write_all(
        &DataHello {
            token: Token([0xee; 16]),
            seq: 0,
            stream: 0,
            tag: [0; 16],
        }
        .encode(),
    );
    let mut garbage = TcpStream::connect(server.addr).expect("stranger");
    let _ = garbage.write_all(b"tcptune\x03 but not a hello at all, nor its tag.....");
    let mut c = server.client();
    c.tune = TuneMode::Kernel;
    c.streams = 2;
    c.messages = 16;
    let r = run(&c, None).expect("the session is not disturbed");
    assert!(r.end.tcptune.complete);
}

/// Open a session by hand up to its main phase; returns the control connection and the
/// session's keys.
fn open_phase(addr: SocketAddr, token: u8) -> (TcpStream, FrameReader, SessionKeys) {
    let mut s = TcpStream::connect(addr).expect("connect");
    let mut r = FrameReader::new(proto::MAX_SERVER_FRAME);
    proto::write_msg(&mut s, &hello(token)).expect("hello");
    proto::write_msg(&mut s, &ClientMsg::Setup { params: params() }).expect("setup");
    proto::write_msg(
        &mut s,
        &ClientMsg::StartPhase {
            seq: 0,
            phase: Phase::Main,
            hint: PathHint::default(),
            streams: 1,
        },
    )
    .expect("start");
    let accepted = recv(&mut s, &mut r).expect("an answer");
    let keys = RawKeys::new(token).keys(&accepted, token);
    (s, r, keys)
}

fn data(addr: SocketAddr, keys: &SessionKeys, token: u8, stream: u32) -> TcpStream {
    let mut d = TcpStream::connect(addr).expect("data");
    d.write_all(&DataHello::sealed(keys, Token([token; 16]), 0, stream).encode())
        .expect("hello");
    d
}

#[test]
fn a_client_vanishing_mid_transfer_frees_its_session_for_the_next() {
    let server = TestServer::start(ServerConfig {
        max_sessions: 1,
        ..ServerConfig::default()
    });
    let (ctrl, _r, keys) = open_phase(server.addr, 5);
    let mut d = data(server.addr, &keys, 5, 0);
    d.write_all(&noise(3, 16)).expect("data");
    drop(d);
    drop(ctrl);
    let mut c = server.client();
    c.tune = TuneMode::Kernel;
    c.messages = 4;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match run(&c, None) {
            Ok(r) => {
                assert!(r.end.tcptune.complete);
                break;
            }
            Err(ClientError::Rejected { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("{e}"),
        }
    }
    let stats = server.stop();
    assert_eq!(stats.sessions_failed, 1, "{stats:?}");
}

#[test]
fn a_sender_of_garbage_data_is_told_it_failed_integrity() {
    let server = TestServer::start(ServerConfig::default());
    let (mut ctrl, mut r, keys) = open_phase(server.addr, 6);
    let mut d = data(server.addr, &keys, 6, 0);
    let _ = d.write_all(&noise(11, 4096));
    match recv(&mut ctrl, &mut r) {
        Some(ServerMsg::Abort { integrity, reason }) => {
            assert!(integrity, "{reason}");
            assert!(reason.contains("bad message header"), "{reason}");
        }
        other => panic!("expected abort, got {other:?}"),
    }
    d.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut b = [0u8; 8];
    assert!(matches!(d.read(&mut b), Ok(0) | Err(_)));
}

#[test]
fn absurd_probe_lengths_and_hints_end_only_that_session() {
    let server = TestServer::start(ServerConfig::default());
    for (i, (phase, hint)) in [
        (
            Phase::Probe {
                duration_ms: u64::MAX,
            },
            PathHint::default(),
        ),
        (
            Phase::Main,
            PathHint {
                rtt: Some(Duration::MAX),
                rate: Some(tcptune_core::Rate(u64::MAX)),
                ..Default::default()
            },
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let mut s = TcpStream::connect(server.addr).expect("connect");
        let mut r = FrameReader::new(proto::MAX_SERVER_FRAME);
        let mut p = params();
        p.tune = TuneMode::Fixed(tcptune_core::Bytes::kib(64));
        proto::write_msg(&mut s, &hello(20 + i as u8)).expect("hello");
        proto::write_msg(&mut s, &ClientMsg::Setup { params: p }).expect("setup");
        proto::write_msg(
            &mut s,
            &ClientMsg::StartPhase {
                seq: 0,
                phase,
                hint,
                streams: 1,
            },
        )
        .expect("start");
        assert!(matches!(
            recv(&mut s, &mut r),
            Some(ServerMsg::Accepted { .. })
        ));
        if let Phase::Probe { .. } = phase {
            match recv(&mut s, &mut r) {
                Some(ServerMsg::Abort { reason, .. }) => {
                    assert!(reason.contains("probe"), "{reason}")
                }
                other => panic!("{other:?}"),
            }
        }
    }
    let mut c = server.client();
    c.tune = TuneMode::Kernel;
    c.messages = 2;
    assert!(run(&c, None).expect("still serving").end.tcptune.complete);
}

/// A man on the path: forwards every connection to `to` and hands out the token of each
/// control connection's `Hello`, which crosses the network in clear.
fn tap(to: SocketAddr) -> (SocketAddr, std::sync::mpsc::Receiver<Token>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the tap");
    let addr = l.local_addr().expect("addr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            let Ok(mut s) = TcpStream::connect(to) else {
                return;
            };
            let (mut c2, mut s2) = match (c.try_clone(), s.try_clone()) {
                (Ok(a), Ok(b)) => (a, b),
                _ => return,
            };
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut s2, &mut c2);
                let _ = c2.shutdown(std::net::Shutdown::Write);
            });
            let tx = tx.clone();
            std::thread::spawn(move || {
                // A control connection starts with a frame: read its Hello as it passes.
                let mut len = [0u8; 4];
                if c.read_exact(&mut len).is_err() || s.write_all(&len).is_err() {
                    return;
                }
                if len[0] == 0 {
                    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
                    if c.read_exact(&mut body).is_err() || s.write_all(&body).is_err() {
                        return;
                    }
                    if let Ok(ClientMsg::Hello { token: Some(t), .. }) = proto::decode(&body) {
                        let _ = tx.send(t);
                    }
                }
                let _ = std::io::copy(&mut c, &mut s);
                let _ = s.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    (addr, rx)
}

#[test]
fn a_stream_with_a_stolen_token_but_no_key_is_refused_and_the_transfer_completes() {
    let refused = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = refused.clone();
    let server = TestServer::start(ServerConfig {
        log: Some(std::sync::Arc::new(move |ev: &ServerEvent| {
            if let ServerEvent::Refused { kind, reason, .. } = ev {
                if let Ok(mut v) = seen.lock() {
                    v.push(format!("{kind}: {reason}"));
                }
            }
        })),
        ..ServerConfig::default()
    });
    let (tapped, tokens) = tap(server.addr);
    let mut c = tcptune_transfer::client::ClientConfig::new(tapped.to_string());
    c.tune = TuneMode::Kernel;
    c.streams = 2;
    c.messages = 64;
    let client = std::thread::spawn(move || run(&c, None));
    let token = tokens
        .recv_timeout(Duration::from_secs(10))
        .expect("the tap saw the hello");
    // The thief, on the client's host (behind the same NAT), opens streams into the
    // session with the stolen token and a tag it had to guess, and feeds them data.
    let thieves: Vec<TcpStream> = (0..2)
        .map(|stream| {
            let mut d = TcpStream::connect(server.addr).expect("thief connects");
            let hello = DataHello {
                token,
                seq: 0,
                stream,
                tag: [0; 16],
            };
            let _ = d.write_all(&hello.encode());
            let _ = d.write_all(&noise(u64::from(stream) + 5, 4096));
            d
        })
        .collect();
    let r = client
        .join()
        .expect("client thread")
        .expect("the real transfer completes");
    assert!(r.end.tcptune.complete);
    assert_eq!(r.end.sum_received.bytes, 64 << 20);
    // The thief's connections were closed by the server.
    for mut d in thieves {
        d.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut b = [0u8; 16];
        assert!(
            matches!(d.read(&mut b), Ok(0) | Err(_)),
            "a thief's stream is still open"
        );
    }
    let lines = refused.lock().map(|v| v.clone()).unwrap_or_default();
    assert!(
        lines.iter().any(|l| l.starts_with("data_key:")),
        "{lines:?}"
    );
    server.stop();
}

/// How many bytes a connection that sent `prefix` can get the server's kernel to take, from
/// a sender whose own buffer is small: what the server holds for it, give or take the
/// sender's buffer and what is in flight on loopback.
fn bytes_taken(addr: SocketAddr, prefix: &[u8]) -> usize {
    let s = TcpStream::connect(addr).expect("connect");
    tcptune_sys::sockopt::set_sndbuf(
        std::os::fd::AsFd::as_fd(&s),
        tcptune_core::Bytes::kib(16),
        false,
    )
    .expect("sndbuf");
    (&s).write_all(prefix).expect("hello");
    // The server parks it (and makes it small) at its hello.
    std::thread::sleep(Duration::from_millis(300));
    s.set_nonblocking(true).expect("non-blocking");
    let chunk = vec![0u8; 64 << 10];
    let (mut taken, deadline) = (0, Instant::now() + Duration::from_secs(2));
    while Instant::now() < deadline && taken < 16 << 20 {
        match (&s).write(&chunk) {
            Ok(n) => taken += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(_) => break,
        }
    }
    taken
}

/// The window the server advertises to a connection once it has acknowledged `prefix`
/// (`tcpi_snd_wnd` of the connecting side), or 0 if it never does within 2 s.
fn window_after(addr: SocketAddr, prefix: &[u8]) -> u32 {
    let s = TcpStream::connect(addr).expect("connect");
    (&s).write_all(prefix).expect("prefix");
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let snap = tcptune_sys::sockopt::snapshot(std::os::fd::AsFd::as_fd(&s)).expect("TCP_INFO");
        let acked = snap.bytes_acked.unwrap_or(0) >= prefix.len() as u64;
        if acked && snap.unacked_segs == 0 {
            return snap.snd_wnd_bytes.unwrap_or(0);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    0
}

#[test]
fn a_server_offering_large_windows_holds_a_waiting_stranger_to_a_small_one() {
    // With careful resume every connection is offered a large window from its SYN-ACK on;
    // a data connection that waits for a session nobody opened is made small at its hello.
    let server = TestServer::start(ServerConfig {
        careful_resume: true,
        ..ServerConfig::default()
    });
    let hello = DataHello {
        token: Token([0xee; 16]),
        seq: 0,
        stream: 0,
        tag: [0; 16],
    }
    .encode();
    // A stranger that has sent its hello's first bytes is offered the large window (what the
    // budget of waiting connections bounds; the parking makes it small once the hello is
    // whole): the window the server advertises in its ACK of those bytes, as the stranger's
    // kernel sees it. (Pushing data to see the window fill raced with the server parking the
    // connection as soon as the hello completed: 0.26-2.5 MB got in on one host, always
    // over 1 MiB on another.) The offer is made when the server's loop starts, and a
    // connection the kernel completed before that keeps Linux's window: ask until it took
    // (at most ten times).
    let mut offered = 0;
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(300));
        offered = window_after(server.addr, &hello[..8]);
        if offered > 1 << 20 {
            break;
        }
    }
    assert!(
        offered > 1 << 20,
        "the offer did not take: a {offered}-byte window after the hello's first bytes"
    );
    // With the offer in place, a stranger whose hello is whole waits for its session and is
    // made small.
    let parked = bytes_taken(server.addr, &hello);
    assert!(
        parked < 1 << 20,
        "a waiting stranger got {parked} bytes into the server's kernel"
    );
    let mut c = server.client();
    c.tune = TuneMode::Kernel;
    c.messages = 8;
    let r = run(&c, None).expect("the server still serves");
    assert!(r.end.tcptune.complete);
}
