//! A server on 127.0.0.1:0 for a test, stopped and joined on drop.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::thread::JoinHandle;
use tcptune_transfer::client::ClientConfig;
use tcptune_transfer::server::{run, ServerConfig, ServerStats, Shutdown};

pub(crate) struct TestServer {
    pub(crate) addr: SocketAddr,
    shutdown: Shutdown,
    thread: Option<JoinHandle<ServerStats>>,
}

impl TestServer {
    pub(crate) fn start(cfg: ServerConfig) -> TestServer {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = l.local_addr().expect("addr");
        let shutdown = Shutdown::new();
        let sd = shutdown.clone();
        let thread = std::thread::spawn(move || run(l, cfg, sd).expect("server runs"));
        TestServer {
            addr,
            shutdown,
            thread: Some(thread),
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
