//! A server on 127.0.0.1:0 for a test, stopped and joined on drop.
#![allow(dead_code)]

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
    pub(crate) fn start(mut cfg: ServerConfig) -> TestServer {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
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
