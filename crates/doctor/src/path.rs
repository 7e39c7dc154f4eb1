//! `doctor HOST[:PORT]`: the round-trip time of a path measured without ICMP, by timing TCP
//! handshakes to a port (as the article's `synack` tool did), and the errors that tell
//! unreachable, refused, filtered and unresolvable apart.
//!
//! The statistics and the parsing are pure; [`measure_rtt`] is the small I/O part (one
//! non-blocking `connect()` with a timeout per sample).

use serde::Serialize;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Why a path could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// `HOST[:PORT]` is malformed.
    #[error("'{0}' is not HOST[:PORT] (IPv6 addresses with a port go in brackets: [::1]:5201)")]
    BadTarget(String),
    /// The name did not resolve.
    #[error("cannot resolve '{host}': {reason}")]
    Resolve {
        /// The name.
        host: String,
        /// The resolver's answer.
        reason: String,
    },
    /// The host answered with a reset: reachable, but nothing listens on the port.
    #[error("connection to {addr} refused: the host is reachable but nothing listens on port {port} (is the server running? right port?)", port = addr.port())]
    Refused {
        /// The address tried.
        addr: SocketAddr,
    },
    /// No route, or the network said the host is unreachable.
    #[error("{addr} is unreachable: {reason} (check the address, routes and VPN)")]
    Unreachable {
        /// The address tried.
        addr: SocketAddr,
        /// The kernel's error.
        reason: String,
    },
    /// Nothing came back within the timeout: a firewall drops the packets, or the host is down.
    #[error("no answer from {addr} within {timeout:?}: a firewall probably drops packets to port {port}, or the host is down", port = addr.port())]
    Filtered {
        /// The address tried.
        addr: SocketAddr,
        /// How long we waited.
        timeout: Duration,
    },
    /// Any other failure of `connect()`.
    #[error("connect to {addr}: {source}")]
    Connect {
        /// The address tried.
        addr: SocketAddr,
        /// The error.
        source: io::Error,
    },
}

/// Split `HOST[:PORT]` (`example.org`, `example.org:5201`, `10.0.0.1:22`, `::1`, `[::1]:22`).
pub fn parse_host_port(text: &str, default_port: u16) -> Result<(String, u16), PathError> {
    let t = text.trim();
    let bad = || PathError::BadTarget(text.to_string());
    if t.is_empty() {
        return Err(bad());
    }
    if let Some(rest) = t.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        let port = match after {
            "" => default_port,
            p => p
                .strip_prefix(':')
                .and_then(|p| p.parse().ok())
                .ok_or_else(bad)?,
        };
        if host.is_empty() {
            return Err(bad());
        }
        return Ok((host.to_string(), port));
    }
    if t.parse::<IpAddr>().is_ok() {
        return Ok((t.to_string(), default_port));
    }
    match t.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => {
            let port = p.parse().map_err(|_| bad())?;
            if h.is_empty() || port == 0 {
                return Err(bad());
            }
            Ok((h.to_string(), port))
        }
        Some(_) => Err(bad()),
        None => Ok((t.to_string(), default_port)),
    }
}

/// Resolve a host name (or literal address) to the addresses to try, IPv4 and IPv6.
pub fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, PathError> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| PathError::Resolve {
            host: host.to_string(),
            reason: e.to_string(),
        })?
        .collect();
    if addrs.is_empty() {
        return Err(PathError::Resolve {
            host: host.to_string(),
            reason: "no addresses".to_string(),
        });
    }
    Ok(addrs)
}

/// Turn a `connect()` error into the kind of failure it means.
pub fn classify(addr: SocketAddr, timeout: Duration, e: io::Error) -> PathError {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => return PathError::Refused { addr },
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
            return PathError::Filtered { addr, timeout }
        }
        _ => {}
    }
    match e.raw_os_error() {
        Some(
            libc::EHOSTUNREACH
            | libc::ENETUNREACH
            | libc::EHOSTDOWN
            | libc::ENETDOWN
            | libc::EADDRNOTAVAIL,
        ) => PathError::Unreachable {
            addr,
            reason: e.to_string(),
        },
        Some(libc::ECONNREFUSED) => PathError::Refused { addr },
        Some(libc::ETIMEDOUT) => PathError::Filtered { addr, timeout },
        _ => PathError::Connect { addr, source: e },
    }
}

/// How to sample handshakes.
#[derive(Clone, Copy, Debug)]
pub struct RttConfig {
    /// Handshakes to time.
    pub samples: u32,
    /// How long one handshake may take.
    pub timeout: Duration,
    /// Pause between handshakes (not to look like a SYN flood).
    pub interval: Duration,
}

impl Default for RttConfig {
    fn default() -> Self {
        RttConfig {
            samples: 10,
            timeout: Duration::from_secs(3),
            interval: Duration::from_millis(50),
        }
    }
}

/// Handshake times, summarised.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RttStats {
    /// The address measured.
    pub addr: SocketAddr,
    /// Every successful handshake time, in microseconds, in the order taken.
    pub samples_us: Vec<u64>,
    /// Handshakes that failed after the first success (a busy server, a lossy path).
    pub failed: u32,
    /// Shortest: the best estimate of the path's propagation delay.
    pub min_us: u64,
    /// Median: the typical RTT, which the sizing uses.
    pub median_us: u64,
    /// Longest.
    pub max_us: u64,
}

impl RttStats {
    /// Summarise samples (`None` if there are none).
    pub fn from_samples(addr: SocketAddr, samples: &[Duration], failed: u32) -> Option<RttStats> {
        if samples.is_empty() {
            return None;
        }
        let us: Vec<u64> = samples
            .iter()
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .collect();
        let mut sorted = us.clone();
        sorted.sort_unstable();
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2
        };
        Some(RttStats {
            addr,
            min_us: sorted[0],
            median_us: median,
            max_us: sorted[n - 1],
            samples_us: us,
            failed,
        })
    }

    /// The median as a `Duration`.
    pub fn median(&self) -> Duration {
        Duration::from_micros(self.median_us)
    }

    /// The minimum as a `Duration`.
    pub fn min(&self) -> Duration {
        Duration::from_micros(self.min_us)
    }
}

/// Time `cfg.samples` TCP handshakes to `addr`. The first failure ends the measurement with
/// its classified error; failures after a success are counted and skipped.
pub fn measure_rtt(addr: SocketAddr, cfg: &RttConfig) -> Result<RttStats, PathError> {
    let mut samples = Vec::new();
    let mut failed = 0u32;
    let mut first_error = None;
    for i in 0..cfg.samples.max(1) {
        if i > 0 {
            std::thread::sleep(cfg.interval);
        }
        let start = Instant::now();
        // connect_timeout: a non-blocking connect() and a poll() for writability.
        match TcpStream::connect_timeout(&addr, cfg.timeout) {
            Ok(stream) => {
                samples.push(start.elapsed());
                drop(stream);
            }
            Err(e) => {
                let err = classify(addr, cfg.timeout, e);
                if samples.is_empty() {
                    first_error = Some(err);
                    break;
                }
                failed += 1;
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    RttStats::from_samples(addr, &samples, failed).ok_or(PathError::Filtered {
        addr,
        timeout: cfg.timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_forms_parse() {
        assert_eq!(
            parse_host_port("example.org", 5201).ok(),
            Some(("example.org".into(), 5201))
        );
        assert_eq!(
            parse_host_port("10.0.0.1:22", 5201).ok(),
            Some(("10.0.0.1".into(), 22))
        );
        assert_eq!(parse_host_port("::1", 7).ok(), Some(("::1".into(), 7)));
        assert_eq!(
            parse_host_port("[fe80::1]:80", 7).ok(),
            Some(("fe80::1".into(), 80))
        );
        for bad in [
            "",
            "host:",
            "host:x",
            "host:70000",
            "[::1",
            "[::1]x",
            "a:b:c",
            ":80",
            "h:0",
        ] {
            assert!(parse_host_port(bad, 1).is_err(), "{bad}");
        }
    }

    #[test]
    fn stats_of_even_and_odd_sample_counts() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let ms = |v: &[u64]| {
            v.iter()
                .map(|&x| Duration::from_micros(x))
                .collect::<Vec<_>>()
        };
        let s = RttStats::from_samples(a, &ms(&[300, 100, 200]), 0).unwrap();
        assert_eq!((s.min_us, s.median_us, s.max_us), (100, 200, 300));
        let s = RttStats::from_samples(a, &ms(&[400, 100, 200, 300]), 1).unwrap();
        assert_eq!(s.median_us, 250);
        assert_eq!(s.samples_us, [400, 100, 200, 300]);
        assert!(RttStats::from_samples(a, &[], 0).is_none());
    }

    #[test]
    fn errors_are_classified_by_kind_and_errno() {
        let a: SocketAddr = "192.0.2.1:9".parse().unwrap();
        let t = Duration::from_secs(1);
        let e = |k| io::Error::from(k);
        assert!(matches!(
            classify(a, t, e(io::ErrorKind::ConnectionRefused)),
            PathError::Refused { .. }
        ));
        assert!(matches!(
            classify(a, t, e(io::ErrorKind::TimedOut)),
            PathError::Filtered { .. }
        ));
        assert!(matches!(
            classify(a, t, io::Error::from_raw_os_error(libc::EHOSTUNREACH)),
            PathError::Unreachable { .. }
        ));
        assert!(matches!(
            classify(a, t, io::Error::from_raw_os_error(libc::ENETUNREACH)),
            PathError::Unreachable { .. }
        ));
        assert!(matches!(
            classify(a, t, io::Error::from_raw_os_error(libc::EACCES)),
            PathError::Connect { .. }
        ));
    }

    #[test]
    fn refused_port_on_loopback_is_refused() {
        // Bind then drop a listener so the port is (very likely) free.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("bind loopback");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let r = measure_rtt(addr, &RttConfig::default());
        assert!(matches!(r, Err(PathError::Refused { .. })), "{r:?}");
    }

    #[test]
    fn loopback_listener_gives_samples() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let cfg = RttConfig {
            samples: 5,
            interval: Duration::from_millis(1),
            ..RttConfig::default()
        };
        let s = measure_rtt(addr, &cfg).expect("measured");
        assert_eq!(s.samples_us.len(), 5);
        assert!(s.min_us <= s.median_us && s.median_us <= s.max_us);
        // Loopback handshakes take well under a second even on a loaded machine.
        assert!(s.median_us < 1_000_000, "{s:?}");
    }

    #[test]
    fn unresolvable_names_fail_to_resolve() {
        // .invalid never resolves (RFC 6761).
        assert!(matches!(
            resolve("no-such-host.invalid", 80),
            Err(PathError::Resolve { .. })
        ));
    }
}
