//! `advise` and the server's path database on loopback: a first advice is measured and
//! recorded, the next comes from the database, every session's measurement is recorded
//! (concurrent sessions included), and hostile requests get bounded answers.

mod common;

use common::TestServer;
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;
use tcptune_core::pathdb::Direction;
use tcptune_pathdb::PathStore;
use tcptune_transfer::advice::FactsSource;
use tcptune_transfer::auth::Secret;
use tcptune_transfer::client::advise::{advise, AdviseConfig};
use tcptune_transfer::client::{run, ClientError};
use tcptune_transfer::proto::{self, AdviseRequest, ClientMsg, FrameReader, ServerMsg, Token};
use tcptune_transfer::server::ServerConfig;

/// A folder removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("tcptune-advise-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        TempDir(d)
    }
    fn db(&self) -> PathBuf {
        self.0.join("serve.sqlite")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn server_with_db(dir: &TempDir) -> TestServer {
    TestServer::start(ServerConfig {
        path_db: Some(dir.db()),
        ..ServerConfig::default()
    })
}

fn entries(dir: &TempDir) -> Vec<tcptune_pathdb::StoredEntry> {
    PathStore::open(&dir.db())
        .expect("open the server's database")
        .entries()
        .expect("list")
}

/// The server records asynchronously: wait for `n` entries.
fn wait_entries(dir: &TempDir, n: usize) -> Vec<tcptune_pathdb::StoredEntry> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let e = entries(dir);
        if e.len() >= n || std::time::Instant::now() >= deadline {
            return e;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_first_advice_is_measured_and_recorded_and_the_next_comes_from_the_database() {
    let dir = TempDir::new("first");
    let server = server_with_db(&dir);
    let mut cfg = AdviseConfig::new(server.addr.to_string());
    cfg.direction = Direction::Receive;
    let first = advise(&cfg).expect("first advice");
    let p = &first.advice.path;
    assert_eq!(p.source, FactsSource::Measured, "{first:?}");
    assert!(p.rate_bps > 0 && p.rtt_us > 0);
    assert!(p.measure_streams.is_some_and(|n| n >= 2));
    assert!(first.advice.sizing.streams >= 1);
    assert!(first.advice.sizing.sndbuf_bytes > 0 && first.advice.sizing.rcvbuf_bytes > 0);
    // What this host derives is what the server advised (same limits on one host).
    assert_eq!(first.advice.sizing, first.server_advice.sizing);
    let e = wait_entries(&dir, 1);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].entry.peer, "127.0.0.1");
    // The client receives: the server sent.
    assert_eq!(e[0].entry.direction, Direction::Send);
    assert_eq!(e[0].source.as_str(), "advise");

    // A full pipe is answered from the database; a lower bound is measured again (at most
    // twice a minute per address), then answered from the database with a note.
    let second = advise(&cfg).expect("second advice");
    if p.full_pipe {
        assert_eq!(second.advice.path.source, FactsSource::PathDb);
        assert_eq!(second.advice.path.rate_bps, p.rate_bps);
    } else {
        assert_eq!(second.advice.path.source, FactsSource::Measured);
        let third = advise(&cfg).expect("third advice");
        assert_eq!(third.advice.path.source, FactsSource::PathDb);
        assert!(third.advice.path.note.is_some(), "{third:?}");
    }
    let stats = server.stop();
    assert_eq!(stats.sessions_failed, 0, "{stats:?}");
}

#[test]
fn a_fresh_advice_is_measured_within_the_rate_limit_and_then_refused_with_a_retry() {
    let dir = TempDir::new("fresh");
    // No database: every advice needs a measurement.
    let server = TestServer::start(ServerConfig::default());
    let _ = &dir;
    let mut cfg = AdviseConfig::new(server.addr.to_string());
    cfg.fresh = true;
    for _ in 0..2 {
        let a = advise(&cfg).expect("measured");
        assert_eq!(a.advice.path.source, FactsSource::Measured);
    }
    match advise(&cfg) {
        Err(ClientError::Rejected {
            reason,
            retry_after_s,
        }) => {
            assert!(reason.contains("retry in"), "{reason}");
            assert!(retry_after_s.is_some_and(|s| (1..=60).contains(&s)));
        }
        other => panic!("a third measurement within a minute: {other:?}"),
    }
}

#[test]
fn every_session_of_concurrent_clients_is_recorded_by_the_server() {
    let dir = TempDir::new("concurrent");
    let server = server_with_db(&dir);
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let mut c = server.client();
            c.tune = "kernel".parse().expect("mode");
            c.streams = 2;
            c.messages = 16;
            c.message_size = 1 << 20;
            c.reverse = i % 2 == 1;
            std::thread::spawn(move || run(&c, None).map(|_| ()))
        })
        .collect();
    for t in threads {
        t.join().expect("client thread").expect("transfer");
    }
    // Two directions of one peer (loopback RTT: one bucket): two paths, four samples.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let e = loop {
        let e = entries(&dir);
        let samples: u32 = e.iter().map(|x| x.entry.samples).sum();
        if samples >= 4 || std::time::Instant::now() >= deadline {
            break e;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let samples: u32 = e.iter().map(|x| x.entry.samples).sum();
    assert_eq!(samples, 4, "{e:?}");
    let mut dirs: Vec<Direction> = e.iter().map(|x| x.entry.direction).collect();
    dirs.sort_by_key(|d| format!("{d:?}"));
    dirs.dedup();
    assert_eq!(dirs.len(), 2, "{e:?}");
    for x in &e {
        assert_eq!(x.source.as_str(), "server");
        assert!(
            !x.entry.full_pipe,
            "kernel transfers give lower bounds: {x:?}"
        );
    }
    server.stop();
}

/// A raw control connection that sent `msgs`; returns the server's answers until it
/// closes (or 5 s pass).
fn raw(addr: std::net::SocketAddr, msgs: &[ClientMsg]) -> Vec<ServerMsg> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    for m in msgs {
        proto::write_msg(&mut s, m).expect("send");
    }
    let mut r = FrameReader::new(proto::MAX_SERVER_FRAME);
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        match r.fill(&mut s) {
            Ok(_) => {}
            Err(_) => break,
        }
        while let Ok(Some(b)) = r.take_frame() {
            let m: ServerMsg = proto::decode(&b).expect("a valid message");
            let last = matches!(
                m,
                ServerMsg::Advice { .. } | ServerMsg::Rejected { .. } | ServerMsg::Abort { .. }
            );
            out.push(m);
            if last {
                return out;
            }
        }
    }
    out
}

fn hello(t: u8) -> ClientMsg {
    ClientMsg::Hello {
        protocol: proto::PROTOCOL_VERSION,
        version: "test".into(),
        token: Some(Token([t; 16])),
        auth: None,
        key_share: Some(proto::to_hex(&[9; 32])),
    }
}

#[test]
fn hostile_advice_requests_get_bounded_answers_and_the_server_serves_on() {
    let dir = TempDir::new("hostile");
    let server = TestServer::start(ServerConfig {
        path_db: Some(dir.db()),
        secret: Secret::from_bytes(b"s3cret"),
        ..ServerConfig::default()
    });
    // Without the secret: refused like a transfer.
    let ask = |limits| ClientMsg::Advise {
        request: AdviseRequest {
            direction: Direction::Send,
            limits,
            max_streams: u32::MAX,
            fresh: true,
        },
    };
    let a = raw(server.addr, &[hello(1), ask(None)]);
    assert!(
        matches!(a.as_slice(), [ServerMsg::Rejected { reason, .. }] if reason.contains("secret")),
        "{a:?}"
    );
    // Advise in the middle of a transfer's handshake, or twice: a protocol error.
    let a = raw(server.addr, &[hello(2), ClientMsg::Bye, ask(None)]);
    assert!(
        matches!(a.as_slice(), [ServerMsg::Rejected { .. }]),
        "{a:?}"
    );
    // With the secret, absurd stream counts are bounded.
    let mut cfg = AdviseConfig::new(server.addr.to_string());
    cfg.secret = Secret::from_bytes(b"s3cret");
    cfg.max_streams = 100_000;
    let good = advise(&cfg).expect("advice with the secret");
    assert!(good.advice.sizing.streams <= 256);
    assert!(good.server_advice.sizing.streams <= 256);
    let stats = server.stop();
    assert!(stats.refused >= 2, "{stats:?}");
}

#[test]
fn a_measurement_whose_client_opens_no_streams_ends_and_says_why() {
    let server = TestServer::start(ServerConfig::default());
    let wild = tcptune_core::HostLimits {
        rmem_max: tcptune_core::Bytes(u64::MAX),
        wmem_max: tcptune_core::Bytes(0),
        tcp_rmem: [tcptune_core::Bytes(u64::MAX); 3],
        tcp_wmem: [tcptune_core::Bytes(1); 3],
        moderate_rcvbuf: false,
        can_force: true,
    };
    let a = raw(
        server.addr,
        &[
            hello(9),
            ClientMsg::Advise {
                request: AdviseRequest {
                    direction: Direction::Send,
                    limits: Some(wild),
                    max_streams: 0,
                    fresh: false,
                },
            },
        ],
    );
    match a.as_slice() {
        [ServerMsg::Measure {
            streams,
            duration_ms,
            ..
        }, ServerMsg::Rejected { reason, .. }] => {
            assert!((1..=8).contains(streams));
            assert!(*duration_ms <= 10_000);
            assert!(reason.contains("no data"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // The server serves on.
    let ok = advise(&AdviseConfig::new(server.addr.to_string())).expect("advice");
    assert_eq!(ok.advice.path.source, FactsSource::Measured);
    let stats = server.stop();
    assert_eq!(stats.sessions_failed, 1, "{stats:?}");
}
