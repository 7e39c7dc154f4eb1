//! A server on 127.0.0.1:0 for a test, stopped and joined on drop; [`push`]: the start of a
//! push by a raw client.
#![allow(dead_code)]

pub(crate) mod push;

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tcptune_transfer::client::ClientConfig;
use tcptune_transfer::server::{run, ServerConfig, ServerEvent, ServerStats, Shutdown};

pub(crate) struct TestServer {
    pub(crate) addr: SocketAddr,
    shutdown: Shutdown,
    thread: Option<JoinHandle<ServerStats>>,
    /// Sessions that ended without an error so far (the server's own log events).
    ended_ok: Arc<AtomicU64>,
}

impl TestServer {
    pub(crate) fn start(cfg: ServerConfig) -> TestServer {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        TestServer::start_on(l, cfg)
    }

    /// A server on `l` (a listener of the test's own, e.g. in a network namespace; the
    /// server's thread is spawned from the calling thread and so shares its namespace).
    pub(crate) fn start_on(l: TcpListener, mut cfg: ServerConfig) -> TestServer {
        let addr = l.local_addr().expect("addr");
        let shutdown = Shutdown::new();
        let sd = shutdown.clone();
        let ended_ok = Arc::new(AtomicU64::new(0));
        let counter = ended_ok.clone();
        let inner = cfg.log.take();
        cfg.log = Some(Arc::new(move |ev: &ServerEvent| {
            if let ServerEvent::SessionEnded { error: None, .. } = ev {
                counter.fetch_add(1, Ordering::SeqCst);
            }
            if let Some(f) = &inner {
                f(ev);
            }
        }));
        let thread = std::thread::spawn(move || run(l, cfg, sd).expect("server runs"));
        TestServer {
            addr,
            shutdown,
            thread: Some(thread),
            ended_ok,
        }
    }

    /// Wait until `n` sessions ended well at the server: a client returns when its report
    /// is complete, a moment before the server closes its side of the session. Only a hang
    /// reaches the bound.
    pub(crate) fn await_sessions_ok(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.ended_ok.load(Ordering::SeqCst) < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub(crate) fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new(self.addr.to_string());
        c.interval = Some(std::time::Duration::from_millis(200));
        c
    }

    pub(crate) fn stop(mut self) -> ServerStats {
        self.shutdown.trigger();
        self.thread
            .take()
            .expect("running")
            .join()
            .expect("server thread")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.trigger();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A raw client's half of a session's key exchange (as the real client's driver does it):
/// its X25519 key pair, its `Hello`, and the session's keys once the server answered.
pub(crate) struct RawKeys {
    secret: x25519_dalek::StaticSecret,
    /// This end's public key.
    pub(crate) share: [u8; 32],
}

impl RawKeys {
    /// A key pair from a seed byte (tests are deterministic).
    pub(crate) fn new(seed: u8) -> RawKeys {
        let secret = x25519_dalek::StaticSecret::from([seed | 1; 32]);
        let share = x25519_dalek::PublicKey::from(&secret).to_bytes();
        RawKeys { secret, share }
    }

    /// A `Hello` for the session of `token`, without a secret.
    pub(crate) fn hello(&self, token: u8, version: &str) -> tcptune_transfer::proto::ClientMsg {
        tcptune_transfer::proto::ClientMsg::Hello {
            protocol: tcptune_transfer::proto::PROTOCOL_VERSION,
            version: version.into(),
            token: Some(tcptune_transfer::proto::Token([token; 16])),
            auth: None,
            key_share: Some(tcptune_transfer::proto::to_hex(&self.share)),
        }
    }

    /// The session's keys, the server having answered with `msg` (`Accepted`).
    pub(crate) fn keys(
        &self,
        msg: &tcptune_transfer::proto::ServerMsg,
        token: u8,
    ) -> tcptune_proto::keys::SessionKeys {
        let tcptune_transfer::proto::ServerMsg::Accepted { key_share, .. } = msg else {
            panic!("expected accepted, got {msg:?}");
        };
        let server = tcptune_transfer::proto::from_hex::<32>(key_share).expect("key share");
        let dh = self
            .secret
            .diffie_hellman(&x25519_dalek::PublicKey::from(server))
            .to_bytes();
        let token = tcptune_transfer::proto::Token([token; 16]);
        tcptune_proto::keys::SessionKeys::derive(&dh, None, &token, &self.share, &server)
            .expect("contributory")
    }
}

/// A deterministic pseudo-random byte stream.
pub(crate) fn bytes(seed: u64, n: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
