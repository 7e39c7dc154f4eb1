//! A server under attack keeps serving: random bytes, truncated handshakes, oversized
//! lengths, wrong data hellos, clients vanishing mid-transfer and thousands of connections
//! opened and dropped, while a good transfer completes byte-exact.

mod common;

use common::TestServer;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use tcptune_core::{PathHint, TuneMode};
use tcptune_transfer::client::run;
use tcptune_transfer::proto::{
    self, data_hello, ClientMsg, FrameReader, Phase, ServerMsg, TestParams, PROTOCOL_VERSION,
};
use tcptune_transfer::server::ServerConfig;

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

fn hello() -> ClientMsg {
    ClientMsg::Hello {
        protocol: PROTOCOL_VERSION,
        version: "test".into(),
    }
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
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    s
}

fn recv(s: &mut TcpStream, r: &mut FrameReader) -> ServerMsg {
    r.recv_until(s, Instant::now() + Duration::from_secs(10), "reply")
        .expect("server reply")
}

/// One attack; returns what the server answered last, if anything.
fn attack(addr: SocketAddr, kind: usize, seed: u64) -> Option<ServerMsg> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut r = FrameReader::new(proto::MAX_SERVER_FRAME);
    match kind {
        // Random bytes.
        0 => {
            let _ = s.write_all(&noise(seed, 1 + (seed as usize % 3000)));
        }
        // A length far beyond the limit.
        1 => {
            let _ = s.write_all(&[0xff, 0xff, 0xff, 0xf0, b'{']);
        }
        // Half a frame, then silence past the handshake timeout.
        2 => {
            let f = proto::encode(&hello()).ok()?;
            let _ = s.write_all(&f[..f.len() / 2]);
            std::thread::sleep(Duration::from_millis(1500));
        }
        // A valid hello, then garbage JSON.
        3 => {
            proto::write_msg(&mut s, &hello()).ok()?;
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
                },
            )
            .ok()?;
        }
        // Setup asking for absurd sizes.
        _ => {
            proto::write_msg(&mut s, &hello()).ok()?;
            let mut p = params();
            p.message_size = u64::MAX;
            p.streams = u32::MAX;
            proto::write_msg(
                &mut s,
                &ClientMsg::Setup {
                    auth: None,
                    params: p,
                },
            )
            .ok()?;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = None;
    while let Ok(m) = r.recv_until::<ServerMsg>(&mut s, deadline, "anything") {
        last = Some(m);
    }
    last
}

#[test]
fn garbage_and_connection_floods_do_not_hurt_a_good_transfer() {
    let server = TestServer::start(ServerConfig {
        handshake_timeout: Duration::from_secs(1),
        ..ServerConfig::default()
    });
    let addr = server.addr;
    // Attackers run while the good transfer runs.
    let attackers: Vec<_> = (0..6)
        .map(|kind| {
            std::thread::spawn(move || {
                let mut answers = Vec::new();
                for i in 0..8u64 {
                    answers.push(attack(addr, kind, i * 7919 + kind as u64));
                }
                answers
            })
        })
        .collect();
    let flood = std::thread::spawn(move || {
        let mut n = 0;
        for _ in 0..3000 {
            if TcpStream::connect(addr).is_ok() {
                n += 1;
            }
        }
        n
    });
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
                Some(ServerMsg::Rejected { reason }) => {
                    assert!(!reason.is_empty());
                    refused_with_reason += 1;
                }
                Some(ServerMsg::Welcome { .. }) | None => {}
                Some(other) => panic!("attack {kind} got {other:?}"),
            }
        }
    }
    assert!(
        refused_with_reason >= 16,
        "hello-based attacks hear why: {refused_with_reason}"
    );
    assert!(flood.join().expect("flood") > 1000);
    // Still serving after all that.
    assert!(run(&c, None).expect("again").end.tcptune.complete);
    let stats = server.stop();
    assert!(stats.refused >= 30, "{stats:?}");
    assert_eq!(stats.sessions_ok, 2, "{stats:?}");
}

/// Handshake by hand up to an open data stream; returns control, reader and data address.
fn open_session(addr: SocketAddr) -> (TcpStream, FrameReader, SocketAddr, [u8; 16]) {
    let mut s = connect(addr);
    let mut r = FrameReader::new(proto::MAX_SERVER_FRAME);
    proto::write_msg(&mut s, &hello()).expect("hello");
    assert!(matches!(recv(&mut s, &mut r), ServerMsg::Welcome { .. }));
    proto::write_msg(
        &mut s,
        &ClientMsg::Setup {
            auth: None,
            params: params(),
        },
    )
    .expect("setup");
    let ServerMsg::Accepted { session, .. } = recv(&mut s, &mut r) else {
        panic!("not accepted")
    };
    let session = proto::from_hex::<16>(&session).expect("session id");
    proto::write_msg(
        &mut s,
        &ClientMsg::StartPhase {
            phase: Phase::Main,
            hint: PathHint::default(),
        },
    )
    .expect("start");
    assert_eq!(recv(&mut s, &mut r), ServerMsg::PhaseReady);
    proto::write_msg(&mut s, &ClientMsg::OpenStream { stream: 0 }).expect("open");
    let ServerMsg::StreamPort { port, .. } = recv(&mut s, &mut r) else {
        panic!("no port")
    };
    (s, r, SocketAddr::new(addr.ip(), port), session)
}

#[test]
fn a_client_vanishing_mid_transfer_frees_its_session_for_the_next() {
    let server = TestServer::start(ServerConfig {
        max_sessions: 1,
        ..ServerConfig::default()
    });
    let (mut ctrl, _r, data_addr, session) = open_session(server.addr);
    // A stranger connects to the data port first with a wrong hello: dropped, not fatal.
    let mut stranger = TcpStream::connect(data_addr).expect("stranger");
    let _ = stranger.write_all(&[0u8; 32]);
    let mut d = TcpStream::connect(data_addr).expect("data");
    d.write_all(&data_hello(&session, 0)).expect("hello");
    proto::write_msg(&mut ctrl, &ClientMsg::Go).expect("go");
    // Half a message of garbage-free but truncated data, then vanish.
    d.write_all(&tcptune_transfer_header_only()).expect("data");
    drop(d);
    drop(ctrl);
    drop(stranger);
    // The only session slot comes free: a good client gets served.
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
            Err(e) if Instant::now() < deadline && e.to_string().contains("busy") => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("{e}"),
        }
    }
    let stats = server.stop();
    assert_eq!(stats.sessions_failed, 1, "{stats:?}");
}

/// 16 bytes that are not a valid message header.
fn tcptune_transfer_header_only() -> Vec<u8> {
    noise(3, 16)
}

#[test]
fn a_sender_of_garbage_data_is_told_it_failed_integrity() {
    let server = TestServer::start(ServerConfig::default());
    let (mut ctrl, mut r, data_addr, session) = open_session(server.addr);
    let mut d = TcpStream::connect(data_addr).expect("data");
    d.write_all(&data_hello(&session, 0)).expect("hello");
    proto::write_msg(&mut ctrl, &ClientMsg::Go).expect("go");
    let _ = d.write_all(&noise(11, 4096));
    let deadline = Instant::now() + Duration::from_secs(10);
    let m: ServerMsg = r
        .recv_until(&mut ctrl, deadline, "abort")
        .expect("the server says why");
    match m {
        ServerMsg::Abort { integrity, reason } => {
            assert!(integrity, "{reason}");
            assert!(reason.contains("bad message header"), "{reason}");
        }
        other => panic!("expected abort, got {other:?}"),
    }
    // The data connection is closed by the server.
    d.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut b = [0u8; 8];
    assert!(matches!(d.read(&mut b), Ok(0) | Err(_)));
}

#[test]
fn absurd_probe_lengths_and_hints_end_only_that_session() {
    let server = TestServer::start(ServerConfig::default());
    for (phase, hint) in [
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
    ] {
        let mut s = connect(server.addr);
        let mut r = FrameReader::new(proto::MAX_SERVER_FRAME);
        proto::write_msg(&mut s, &hello()).expect("hello");
        assert!(matches!(recv(&mut s, &mut r), ServerMsg::Welcome { .. }));
        let mut p = params();
        p.tune = TuneMode::Fixed(tcptune_core::Bytes::kib(64));
        proto::write_msg(
            &mut s,
            &ClientMsg::Setup {
                auth: None,
                params: p,
            },
        )
        .expect("setup");
        assert!(matches!(recv(&mut s, &mut r), ServerMsg::Accepted { .. }));
        proto::write_msg(&mut s, &ClientMsg::StartPhase { phase, hint }).expect("start");
        match recv(&mut s, &mut r) {
            ServerMsg::Abort { reason, .. } => assert!(reason.contains("probe"), "{reason}"),
            ServerMsg::PhaseReady => {
                proto::write_msg(&mut s, &ClientMsg::OpenStream { stream: 0 }).expect("open");
                assert!(matches!(recv(&mut s, &mut r), ServerMsg::StreamPort { .. }));
            }
            other => panic!("{other:?}"),
        }
    }
    let mut c = server.client();
    c.tune = TuneMode::Kernel;
    c.messages = 2;
    assert!(run(&c, None).expect("still serving").end.tcptune.complete);
}
