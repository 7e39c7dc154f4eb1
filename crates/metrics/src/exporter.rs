//! The exporter's listener loop and one thread per connection, bounded in number, size and
//! time.

use crate::http::{self, HeadError, Route};
use prometheus_client::registry::Registry;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown as NetShutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the exporter bounds what peers can make it do. `Default` is for a scrape by a
/// Prometheus server every few seconds; the setters change one bound each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExporterConfig {
    /// Connections served at once; more are answered `503` and closed at once.
    pub max_connections: usize,
    /// Longest a connection may take, from accept to the last byte of the answer (a peer
    /// that sends slowly or reads slowly is cut off).
    pub timeout: Duration,
    /// Largest request head read, bytes (`431` beyond).
    pub max_request_bytes: usize,
    /// The path of the metrics.
    pub path: String,
}

impl Default for ExporterConfig {
    /// 4 connections, 5 s each, 8 KiB request heads, `/metrics`.
    fn default() -> Self {
        ExporterConfig {
            max_connections: 4,
            timeout: Duration::from_secs(5),
            max_request_bytes: 8192,
            path: "/metrics".into(),
        }
    }
}

impl ExporterConfig {
    /// Set [`ExporterConfig::max_connections`] (at least 1).
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Set [`ExporterConfig::timeout`].
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = d;
        self
    }

    /// Set [`ExporterConfig::max_request_bytes`] (at least 64).
    pub fn max_request_bytes(mut self, n: usize) -> Self {
        self.max_request_bytes = n.max(64);
        self
    }
}

/// Tells a running exporter to stop.
#[derive(Clone, Debug, Default)]
pub struct Shutdown(Arc<AtomicBool>);

impl Shutdown {
    /// A handle that has not fired.
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Stop: [`run`] returns within about 100 ms, after the connections in progress end.
    pub fn trigger(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether [`Shutdown::trigger`] was called.
    pub fn is_triggered(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// What the exporter did, counted while it runs.
#[derive(Debug, Default)]
pub struct ExporterCounts {
    /// Scrapes answered with the metrics.
    pub scrapes: AtomicU64,
    /// Requests answered with a 4xx status (bad, too large, wrong path or method).
    pub refused: AtomicU64,
    /// Connections turned away because [`ExporterConfig::max_connections`] were busy.
    pub turned_away: AtomicU64,
    /// Connections that timed out or failed before an answer.
    pub failed: AtomicU64,
}

/// Why the exporter could not run.
#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    /// Binding the address failed.
    #[error("binding the metrics address {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The error.
        source: std::io::Error,
    },
    /// The listening socket failed.
    #[error("metrics listener: {what}: {source}")]
    Listener {
        /// What was attempted.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The exporter's thread could not start.
    #[error("starting the metrics exporter's thread: {0}")]
    Thread(std::io::Error),
}

fn wait_readable(fd: i32, timeout: Duration) -> std::io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd for the duration of the call.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        return if e.kind() == ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(r > 0)
}

/// Serve `registry` on `listener` until `shutdown` fires: each scrape encodes the registry
/// (every family and collector registered in it) in the OpenMetrics text format.
pub fn run(
    listener: TcpListener,
    registry: Arc<Registry>,
    config: ExporterConfig,
    shutdown: Shutdown,
    counts: Arc<ExporterCounts>,
) -> Result<(), ExporterError> {
    let config = Arc::new(config);
    let active = Arc::new(AtomicUsize::new(0));
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    listener
        .set_nonblocking(true)
        .map_err(|source| ExporterError::Listener {
            what: "making it non-blocking",
            source,
        })?;
    while !shutdown.is_triggered() {
        threads.retain(|t| !t.is_finished());
        match wait_readable(listener.as_raw_fd(), Duration::from_millis(100)) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(source) => {
                return Err(ExporterError::Listener {
                    what: "polling it",
                    source,
                })
            }
        }
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
            Err(_) => {
                // Out of descriptors, or reset before accept: back off a little.
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        if active.fetch_add(1, Ordering::AcqRel) >= config.max_connections {
            active.fetch_sub(1, Ordering::AcqRel);
            counts.turned_away.fetch_add(1, Ordering::Relaxed);
            turn_away(stream);
            continue;
        }
        let (registry, config, active2, counts2) = (
            registry.clone(),
            config.clone(),
            active.clone(),
            counts.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("tcptune-metrics".into())
            .spawn(move || {
                serve_connection(stream, &registry, &config, &counts2);
                active2.fetch_sub(1, Ordering::AcqRel);
            });
        match spawned {
            Ok(t) => threads.push(t),
            Err(_) => {
                active.fetch_sub(1, Ordering::AcqRel);
                counts.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

/// Answer 503 without reading, never waiting on the peer.
fn turn_away(mut stream: TcpStream) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.write(&http::error_response(503, "too many connections"));
}

/// Read one request head within the deadline; `Err(status)` when it must be refused, `None`
/// when the peer went away or ran out of time.
fn read_head(
    stream: &mut TcpStream,
    config: &ExporterConfig,
    deadline: Instant,
) -> Option<Result<http::RequestHead, HeadError>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        match http::parse_head(&buf, config.max_request_bytes) {
            Ok(Some(h)) => return Some(Ok(h)),
            Ok(None) => {}
            Err(e) => return Some(Err(e)),
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return None;
        }
        let room = (config.max_request_bytes + 1 - buf.len().min(config.max_request_bytes))
            .min(chunk.len());
        match stream.read(&mut chunk[..room]) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

fn serve_connection(
    mut stream: TcpStream,
    registry: &Registry,
    config: &ExporterConfig,
    counts: &ExporterCounts,
) {
    let deadline = Instant::now() + config.timeout;
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let answer = match read_head(&mut stream, config, deadline) {
        None => {
            counts.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Some(Err(e @ HeadError::TooLarge { .. })) => {
            counts.refused.fetch_add(1, Ordering::Relaxed);
            http::error_response(431, &e.to_string())
        }
        Some(Err(e)) => {
            counts.refused.fetch_add(1, Ordering::Relaxed);
            http::error_response(400, &e.to_string())
        }
        Some(Ok(head)) => match http::route(&head, &config.path) {
            Route::NotFound => {
                counts.refused.fetch_add(1, Ordering::Relaxed);
                http::error_response(404, &format!("only {} is served here", config.path))
            }
            Route::MethodNotAllowed => {
                counts.refused.fetch_add(1, Ordering::Relaxed);
                http::error_response(405, "only GET and HEAD")
            }
            Route::Metrics { head_only } => {
                let mut body = String::new();
                match prometheus_client::encoding::text::encode(&mut body, registry) {
                    Ok(()) => {
                        counts.scrapes.fetch_add(1, Ordering::Relaxed);
                        http::response(200, http::CONTENT_TYPE, body.as_bytes(), head_only)
                    }
                    Err(_) => {
                        counts.failed.fetch_add(1, Ordering::Relaxed);
                        http::error_response(500, "encoding the metrics failed")
                    }
                }
            }
        },
    };
    let Some(left) = deadline.checked_duration_since(Instant::now()) else {
        counts.failed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if stream
        .set_write_timeout(Some(left.max(Duration::from_millis(1))))
        .is_err()
        || stream.write_all(&answer).is_err()
    {
        counts.failed.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let _ = stream.shutdown(NetShutdown::Write);
}

/// An exporter running on its own thread: [`Exporter::start`] binds and starts it,
/// dropping it (or [`Exporter::stop`]) stops it.
#[derive(Debug)]
pub struct Exporter {
    addr: SocketAddr,
    shutdown: Shutdown,
    counts: Arc<ExporterCounts>,
    thread: Option<JoinHandle<Result<(), ExporterError>>>,
}

impl Exporter {
    /// Bind `addr` (`127.0.0.1:9310`, `[::]:9310`, port 0 for any) and serve `registry`
    /// there until stopped.
    pub fn start(
        addr: &str,
        registry: Arc<Registry>,
        config: ExporterConfig,
    ) -> Result<Exporter, ExporterError> {
        let listener = TcpListener::bind(addr).map_err(|source| ExporterError::Bind {
            addr: addr.to_string(),
            source,
        })?;
        let local = listener
            .local_addr()
            .map_err(|source| ExporterError::Listener {
                what: "reading its address",
                source,
            })?;
        let shutdown = Shutdown::new();
        let counts = Arc::new(ExporterCounts::default());
        let (sd, c) = (shutdown.clone(), counts.clone());
        let thread = std::thread::Builder::new()
            .name("tcptune-metrics-listener".into())
            .spawn(move || run(listener, registry, config, sd, c))
            .map_err(ExporterError::Thread)?;
        Ok(Exporter {
            addr: local,
            shutdown,
            counts,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What it did so far.
    pub fn counts(&self) -> &ExporterCounts {
        &self.counts
    }

    /// Stop and wait for it; returns the listener loop's error, if it failed.
    pub fn stop(mut self) -> Result<(), ExporterError> {
        self.halt()
    }

    fn halt(&mut self) -> Result<(), ExporterError> {
        self.shutdown.trigger();
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) | None => Ok(()),
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}
