//! What an emulated path looks like: [`PathConfig`] (one direction's delay, rate, queue,
//! loss, jitter), [`QueueLimit`], and the two-namespace [`TopologyConfig`].

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;
use tcptune_core::{format_duration, Bytes, ParseQuantityError, Rate};

/// The smallest queue a BDP-sized limit is given, so that a TSO burst fits even on a path
/// with a tiny delay: 64 KiB plus one 9000-byte packet.
pub const MIN_BDP_QUEUE: Bytes = Bytes(64 * 1024 + 9000);

/// The largest one-way delay accepted (10 s).
pub const MAX_DELAY: Duration = Duration::from_secs(10);

/// The emulated path, applied in each direction (both directions are alike).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathConfig {
    /// One-way propagation delay (the RTT is twice this). JSON: `delay_ns`.
    #[serde(rename = "delay_ns", with = "duration_ns")]
    pub delay: Duration,
    /// Bottleneck rate; `None` means unlimited (no serialization, no queue).
    pub rate: Option<Rate>,
    /// Drop-tail queue in front of the bottleneck.
    pub queue: QueueLimit,
    /// Random loss probability per packet, 0.0 to 1.0.
    pub loss: f64,
    /// Delay variation: each packet's delay is `delay ± jitter` (uniform, never below zero).
    /// JSON: `jitter_ns`.
    #[serde(rename = "jitter_ns", with = "duration_ns")]
    pub jitter: Duration,
    /// Seed of the random loss and jitter (each direction derives its own stream).
    pub seed: u64,
    /// MTU of the emulated link (the TUN devices' MTU).
    pub mtu: u32,
    /// Let jitter reorder packets (default `false`: a packet never overtakes an earlier one,
    /// so jitter then only ever adds delay to keep the order).
    pub reorder: bool,
}

impl Default for PathConfig {
    fn default() -> Self {
        PathConfig {
            delay: Duration::ZERO,
            rate: None,
            queue: QueueLimit::Bdp(1.0),
            loss: 0.0,
            jitter: Duration::ZERO,
            seed: 1,
            mtu: 1500,
            reorder: false,
        }
    }
}

/// Why a path or topology configuration is unusable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// Loss outside 0..=1.
    #[error("loss must be between 0 and 1 (0% to 100%), got {0}")]
    Loss(f64),
    /// Delay too large.
    #[error("one-way delay {} is above the maximum of 10s", format_duration(*.0))]
    Delay(Duration),
    /// Jitter too large.
    #[error("jitter {} is above the maximum of 10s", format_duration(*.0))]
    Jitter(Duration),
    /// MTU out of range.
    #[error("MTU must be between 576 and 65535, got {0}")]
    Mtu(u32),
    /// Zero rate.
    #[error("rate must be above zero (omit it for an unlimited path)")]
    ZeroRate,
    /// A queue that cannot hold one packet.
    #[error("queue limit {limit} cannot hold one {mtu}-byte packet")]
    QueueTooSmall {
        /// The limit as given.
        limit: QueueLimit,
        /// The MTU.
        mtu: u32,
    },
    /// More extra paths than [`MAX_EXTRA_PATHS`].
    #[error("{0} extra paths: at most {MAX_EXTRA_PATHS} are supported")]
    TooManyPaths(usize),
    /// Paths of one topology share its devices, hence their MTU.
    #[error(
        "every path of a topology has the MTU of its devices ({first}); an extra path asks \
         for {other}"
    )]
    PathMtu {
        /// Path 0's MTU.
        first: u32,
        /// The differing path's MTU.
        other: u32,
    },
    /// A change to a running path that cannot be made while it runs.
    #[error("{0} cannot change while the path runs (delay, jitter, rate, queue and loss can)")]
    Unchangeable(&'static str),
    /// A path index the topology does not have.
    #[error("path {index} does not exist: the topology has {count} path(s)")]
    NoSuchPath {
        /// The index asked for.
        index: usize,
        /// How many paths there are.
        count: usize,
    },
    /// A topology name that cannot name namespaces and files.
    #[error(
        "invalid topology name '{0}': use 1-24 characters from a-z, A-Z, 0-9, '_' and '-', \
         starting with a letter or digit"
    )]
    Name(String),
    /// A sysctl that is not per network namespace.
    #[error(
        "sysctl {0} is not per network namespace: setting it would change the whole host \
         (the emulator only sets net.* sysctls that each namespace has its own copy of)"
    )]
    GlobalSysctl(String),
    /// A sysctl key that is malformed.
    #[error(
        "invalid sysctl '{0}': expected KEY=VALUE with a dotted key such as net.ipv4.tcp_wmem"
    )]
    BadSysctl(String),
}

impl PathConfig {
    /// The round-trip propagation delay (twice the one-way delay).
    pub fn rtt(&self) -> Duration {
        self.delay * 2
    }

    /// Bandwidth-delay product of the path (rate × RTT), if it has a rate.
    pub fn bdp(&self) -> Option<Bytes> {
        self.rate.map(|r| r.bdp(self.rtt()))
    }

    /// Check the values.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.loss) || self.loss.is_nan() {
            return Err(ConfigError::Loss(self.loss));
        }
        if self.delay > MAX_DELAY {
            return Err(ConfigError::Delay(self.delay));
        }
        if self.jitter > MAX_DELAY {
            return Err(ConfigError::Jitter(self.jitter));
        }
        if !(576..=65535).contains(&self.mtu) {
            return Err(ConfigError::Mtu(self.mtu));
        }
        if self.rate == Some(Rate(0)) {
            return Err(ConfigError::ZeroRate);
        }
        let too_small = match self.queue {
            QueueLimit::Bdp(f) => !(f > 0.0 && f.is_finite()),
            QueueLimit::Bytes(b) => b.get() < u64::from(self.mtu),
            QueueLimit::Packets(n) => n == 0,
        };
        if too_small {
            return Err(ConfigError::QueueTooSmall {
                limit: self.queue,
                mtu: self.mtu,
            });
        }
        Ok(())
    }

    /// The queue limit in bytes and packets (`None` = no limit of that kind).
    ///
    /// A BDP-sized queue is at least [`MIN_BDP_QUEUE`]; a path without a rate has no queue.
    pub fn queue_caps(&self) -> QueueCaps {
        match self.queue {
            QueueLimit::Bdp(f) => {
                let bdp = self.bdp().map_or(0.0, |b| b.get() as f64);
                let bytes = ((bdp * f).round() as u64).max(MIN_BDP_QUEUE.get());
                QueueCaps {
                    bytes: Some(bytes),
                    packets: None,
                }
            }
            QueueLimit::Bytes(b) => QueueCaps {
                bytes: Some(b.get()),
                packets: None,
            },
            QueueLimit::Packets(n) => QueueCaps {
                bytes: None,
                packets: Some(u64::from(n)),
            },
        }
    }

    /// One line for humans: `delay 25ms (rtt 50ms), rate 1gbit, queue 1bdp (6.0MiB), ...`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "delay {} (rtt {}), rate {}, queue {}",
            format_duration(self.delay),
            format_duration(self.rtt()),
            self.rate.map_or("unlimited".to_string(), |r| r.to_string()),
            self.queue
        );
        if self.rate.is_some() {
            if let Some(b) = self.queue_caps().bytes {
                s.push_str(&format!(" ({})", Bytes(b)));
            }
        }
        if self.loss > 0.0 {
            s.push_str(&format!(", loss {}%", self.loss * 100.0));
        }
        if !self.jitter.is_zero() {
            s.push_str(&format!(", jitter {}", format_duration(self.jitter)));
            if self.reorder {
                s.push_str(" (may reorder)");
            }
        }
        s.push_str(&format!(", mtu {}, seed {}", self.mtu, self.seed));
        s
    }
}

/// Durations as integer nanoseconds in JSON.
mod duration_ns {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_nanos)
    }
}

/// A queue limit resolved to numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueCaps {
    /// At most this many IP bytes queued.
    pub bytes: Option<u64>,
    /// At most this many packets (segments) queued.
    pub packets: Option<u64>,
}

/// The size of the drop-tail queue in front of the bottleneck.
///
/// Spellings: `1bdp`, `0.5bdp` (multiples of rate × RTT), `256kb` (bytes, binary suffixes),
/// `1000pkt` (packets).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueLimit {
    /// Multiples of the bandwidth-delay product.
    Bdp(f64),
    /// IP bytes.
    Bytes(Bytes),
    /// Packets.
    Packets(u32),
}

impl FromStr for QueueLimit {
    type Err = ParseQuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        let number = |n: &str| -> Result<f64, ParseQuantityError> {
            let v: f64 = n
                .trim()
                .parse()
                .map_err(|_| ParseQuantityError::BadNumber(s.to_string()))?;
            if !v.is_finite() || v < 0.0 {
                return Err(ParseQuantityError::BadNumber(s.to_string()));
            }
            Ok(v)
        };
        if let Some(n) = t.strip_suffix("bdp") {
            return Ok(QueueLimit::Bdp(number(n)?));
        }
        for suffix in ["packets", "pkts", "pkt", "p"] {
            if let Some(n) = t.strip_suffix(suffix) {
                let v = number(n)?;
                if v.fract() != 0.0 || v > f64::from(u32::MAX) {
                    return Err(ParseQuantityError::BadNumber(s.to_string()));
                }
                return Ok(QueueLimit::Packets(v as u32));
            }
        }
        match t.parse::<Bytes>() {
            Ok(b) => Ok(QueueLimit::Bytes(b)),
            Err(ParseQuantityError::BadUnit { unit, .. }) => Err(ParseQuantityError::BadUnit {
                text: s.to_string(),
                unit,
                expected: "bdp, pkt, or a byte size such as 256kb",
            }),
            Err(e) => Err(e),
        }
    }
}

impl fmt::Display for QueueLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueLimit::Bdp(x) => write!(f, "{x}bdp"),
            QueueLimit::Bytes(b) => write!(f, "{b}"),
            QueueLimit::Packets(n) => write!(f, "{n}pkt"),
        }
    }
}

/// The two sides of a topology: A (the client side, where `emu run`'s command runs) and B
/// (the server side).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The client side.
    A,
    /// The server side.
    B,
}

impl Side {
    /// The other side.
    pub fn peer(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }

    /// 0 for A, 1 for B.
    pub fn index(self) -> usize {
        match self {
            Side::A => 0,
            Side::B => 1,
        }
    }

    /// `"a"` or `"b"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::A => "a",
            Side::B => "b",
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Side {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "a" => Ok(Side::A),
            "b" => Ok(Side::B),
            _ => Err(format!("side must be 'a' or 'b', got '{s}'")),
        }
    }
}

/// The most extra paths a topology may have (besides its first path).
pub const MAX_EXTRA_PATHS: usize = 8;

/// A topology: two network namespaces joined by the emulated path (and, optionally, more
/// paths to more addresses of side B).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopologyConfig {
    /// Name: the namespaces are `tt-NAME-a` and `tt-NAME-b`.
    pub name: String,
    /// The path, the same in both directions: path 0, to side B's first address
    /// ([`path_addr`](crate::path_addr)`(0)`, 198.19.0.1).
    pub path: PathConfig,
    /// More paths, each to an address of its own on side B: extra path `i` is path `i + 1`,
    /// reaching [`path_addr`](crate::path_addr)`(i + 1)` (198.19.0.2, 198.19.0.3, ...).
    /// Each has its own queue, rate, delay, loss and counters in both directions.
    #[serde(default)]
    pub extra_paths: Vec<PathConfig>,
    /// Sysctls applied in both namespaces, in order (for example
    /// `("net.ipv4.tcp_wmem", "4096 16384 268435456")`).
    pub sysctls: Vec<(String, String)>,
}

impl TopologyConfig {
    /// A topology named `name` with path `path` and no sysctls.
    pub fn new(name: impl Into<String>, path: PathConfig) -> Self {
        TopologyConfig {
            name: name.into(),
            path,
            extra_paths: Vec::new(),
            sysctls: Vec::new(),
        }
    }

    /// Add a path to the next address of side B (see [`extra_paths`](Self::extra_paths)).
    pub fn extra_path(mut self, p: PathConfig) -> Self {
        self.extra_paths.push(p);
        self
    }

    /// The paths for humans: path 0's description, then each extra path's with its address
    /// (`; path 1 to 198.19.0.2: delay 1ms ...`).
    pub fn describe_paths(&self) -> String {
        let mut s = self.path.describe();
        for (i, p) in self.extra_paths.iter().enumerate() {
            s.push_str(&format!(
                "; path {} to {}: {}",
                i + 1,
                crate::addr::path_addr(i + 1),
                p.describe()
            ));
        }
        s
    }

    /// Every path: path 0 then the extra paths.
    pub fn paths(&self) -> impl Iterator<Item = &PathConfig> {
        std::iter::once(&self.path).chain(&self.extra_paths)
    }

    /// Add a sysctl applied in both namespaces.
    pub fn sysctl(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.sysctls.push((key.into(), value.into()));
        self
    }

    /// Check the name, the paths and the sysctls.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_name(&self.name)?;
        self.path.validate()?;
        if self.extra_paths.len() > MAX_EXTRA_PATHS {
            return Err(ConfigError::TooManyPaths(self.extra_paths.len()));
        }
        for p in &self.extra_paths {
            p.validate()?;
            if p.mtu != self.path.mtu {
                return Err(ConfigError::PathMtu {
                    first: self.path.mtu,
                    other: p.mtu,
                });
            }
        }
        for (k, _) in &self.sysctls {
            check_namespaced_sysctl(k)?;
        }
        Ok(())
    }
}

/// A topology name usable in namespace and file names.
pub fn validate_name(name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 24
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Name(name.to_string()))
    }
}

/// Sysctls under `net.` that are nevertheless one copy for the whole host.
pub(crate) const GLOBAL_NET_SYSCTLS: &[&str] = &[
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.core.rmem_default",
    "net.core.wmem_default",
    "net.core.optmem_max",
    "net.core.netdev_max_backlog",
    "net.core.netdev_budget",
    "net.core.netdev_budget_usecs",
    "net.core.dev_weight",
    "net.core.default_qdisc",
    "net.ipv4.tcp_mem",
    "net.ipv4.udp_mem",
];

/// Refuse sysctls that would change the whole host instead of one namespace.
pub fn check_namespaced_sysctl(key: &str) -> Result<(), ConfigError> {
    let valid = !key.is_empty()
        && key.split('.').all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        });
    if !valid {
        return Err(ConfigError::BadSysctl(key.to_string()));
    }
    if !key.starts_with("net.") || GLOBAL_NET_SYSCTLS.contains(&key) {
        return Err(ConfigError::GlobalSysctl(key.to_string()));
    }
    Ok(())
}

/// Parse `KEY=VALUE` (the value may contain spaces and `=`).
pub fn parse_sysctl_arg(s: &str) -> Result<(String, String), ConfigError> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| ConfigError::BadSysctl(s.to_string()))?;
    let k = k.trim().to_string();
    check_namespaced_sysctl(&k)?;
    Ok((k, v.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_limit_parses_all_three_spellings() {
        assert_eq!("1bdp".parse::<QueueLimit>(), Ok(QueueLimit::Bdp(1.0)));
        assert_eq!("0.5BDP".parse::<QueueLimit>(), Ok(QueueLimit::Bdp(0.5)));
        assert_eq!(
            "256kb".parse::<QueueLimit>(),
            Ok(QueueLimit::Bytes(Bytes(256_000)))
        );
        assert_eq!(
            "1000pkt".parse::<QueueLimit>(),
            Ok(QueueLimit::Packets(1000))
        );
        assert_eq!("10pkts".parse::<QueueLimit>(), Ok(QueueLimit::Packets(10)));
        assert!("1.5pkt".parse::<QueueLimit>().is_err());
        assert!("lots".parse::<QueueLimit>().is_err());
        assert!("bdp".parse::<QueueLimit>().is_err());
    }

    #[test]
    fn default_path_is_unlimited_with_one_bdp_queue() {
        let p = PathConfig::default();
        assert_eq!(p.queue, QueueLimit::Bdp(1.0));
        assert_eq!((p.seed, p.mtu, p.rate), (1, 1500, None));
        assert!(p.validate().is_ok());
    }

    #[test]
    fn bdp_queue_is_rate_times_rtt_with_a_floor() {
        let mut p = PathConfig {
            delay: Duration::from_millis(50),
            rate: Some(Rate::gbit(1)),
            ..PathConfig::default()
        };
        assert_eq!(p.queue_caps().bytes, Some(12_500_000));
        p.delay = Duration::ZERO;
        assert_eq!(p.queue_caps().bytes, Some(MIN_BDP_QUEUE.get()));
    }

    #[test]
    fn invalid_values_are_rejected_with_reasons() {
        let bad = |f: fn(&mut PathConfig)| {
            let mut p = PathConfig::default();
            f(&mut p);
            p.validate().is_err()
        };
        assert!(bad(|p| p.loss = 1.5));
        assert!(bad(|p| p.loss = f64::NAN));
        assert!(bad(|p| p.mtu = 100));
        assert!(bad(|p| p.rate = Some(Rate(0))));
        assert!(bad(|p| p.queue = QueueLimit::Bytes(Bytes(1000))));
        assert!(bad(|p| p.queue = QueueLimit::Packets(0)));
        assert!(bad(|p| p.delay = Duration::from_secs(11)));
    }

    #[test]
    fn global_sysctls_are_refused_and_namespaced_ones_pass() {
        assert!(check_namespaced_sysctl("net.ipv4.tcp_wmem").is_ok());
        assert!(check_namespaced_sysctl("net.ipv4.tcp_congestion_control").is_ok());
        assert!(check_namespaced_sysctl("net.core.rmem_max").is_err());
        assert!(check_namespaced_sysctl("vm.swappiness").is_err());
        assert!(check_namespaced_sysctl("net/../x").is_err());
        assert_eq!(
            parse_sysctl_arg("net.ipv4.tcp_rmem=4096 131072 268435456"),
            Ok((
                "net.ipv4.tcp_rmem".to_string(),
                "4096 131072 268435456".to_string()
            ))
        );
    }

    #[test]
    fn names_must_fit_namespace_and_file_names() {
        assert!(validate_name("lab-1").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("-x").is_err());
        assert!(validate_name("a/b").is_err());
        assert!(validate_name(&"x".repeat(25)).is_err());
    }

    #[test]
    fn config_without_extra_paths_still_loads() {
        let cfg = TopologyConfig::new("old", PathConfig::default());
        let mut v = serde_json::to_value(&cfg).expect("serialize");
        v.as_object_mut().map(|o| o.remove("extra_paths"));
        let back: TopologyConfig = serde_json::from_value(v).expect("old config loads");
        assert!(back.extra_paths.is_empty());
        assert_eq!(back, cfg);
    }

    #[test]
    fn extra_paths_are_validated_count_values_and_mtu() {
        let cfg = |n: usize, p: PathConfig| {
            (0..n).fold(TopologyConfig::new("t", PathConfig::default()), |c, _| {
                c.extra_path(p.clone())
            })
        };
        assert!(cfg(MAX_EXTRA_PATHS, PathConfig::default())
            .validate()
            .is_ok());
        assert_eq!(
            cfg(MAX_EXTRA_PATHS + 1, PathConfig::default()).validate(),
            Err(ConfigError::TooManyPaths(MAX_EXTRA_PATHS + 1))
        );
        let lossy = PathConfig {
            loss: 2.0,
            ..PathConfig::default()
        };
        assert_eq!(cfg(1, lossy).validate(), Err(ConfigError::Loss(2.0)));
        let jumbo = PathConfig {
            mtu: 9000,
            ..PathConfig::default()
        };
        assert!(matches!(
            cfg(1, jumbo).validate(),
            Err(ConfigError::PathMtu { .. })
        ));
        assert_eq!(cfg(3, PathConfig::default()).paths().count(), 4);
    }
}
