//! What `doctor` knows about a host: plain data, gathered by [`crate::gather`] or loaded from a
//! fixture, and read by the pure checks in [`crate::checks`].
//!
//! Every fact that could not be read stays in the data as [`Fact::Missing`] or
//! [`Fact::Unreadable`], so a check can say "could not tell" instead of guessing, and a
//! fixture can reproduce a host where `/proc/sys/net/ipv4/tcp_rmem` does not exist.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tcptune_core::Bytes;
use tcptune_sys::sysctl::{parse_triple, parse_u64, SysctlError};

/// Version of the facts/findings JSON schema (`doctor --json`). Bump on incompatible change.
/// 2: units in names (`target.rate_bps`, `target.rtt_us`, `facts.page_size_bytes`,
/// `path.probe.rate_bps`, `path.probe.duration_s`).
pub const SCHEMA_VERSION: u32 = 2;

/// One gathered value, or why there is none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", content = "value", rename_all = "snake_case")]
pub enum Fact<T> {
    /// The value as read.
    Ok(T),
    /// The file does not exist on this kernel (an older kernel, a module not loaded).
    Missing,
    /// The file exists but could not be read; the text says why.
    Unreadable(String),
}

impl<T> Fact<T> {
    /// The value, if it was read.
    pub fn ok(&self) -> Option<&T> {
        match self {
            Fact::Ok(v) => Some(v),
            _ => None,
        }
    }
}

/// The sysctls `doctor` reads (dotted names, as `sysctl` prints them).
pub const SYSCTLS: &[&str] = &[
    keys::RMEM_MAX,
    keys::WMEM_MAX,
    keys::RMEM_DEFAULT,
    keys::WMEM_DEFAULT,
    keys::TCP_RMEM,
    keys::TCP_WMEM,
    keys::TCP_MEM,
    keys::WINDOW_SCALING,
    keys::TIMESTAMPS,
    keys::SACK,
    keys::MODERATE_RCVBUF,
    keys::CONGESTION_CONTROL,
    keys::AVAILABLE_CC,
    keys::ALLOWED_CC,
    keys::DEFAULT_QDISC,
    keys::MTU_PROBING,
    keys::NO_METRICS_SAVE,
    keys::NOTSENT_LOWAT,
    keys::SLOW_START_AFTER_IDLE,
    keys::ADV_WIN_SCALE,
];

/// Names of the sysctls, so checks and fixes never misspell them.
pub mod keys {
    /// Largest `SO_RCVBUF` an application may ask for (global, not per namespace).
    pub const RMEM_MAX: &str = "net.core.rmem_max";
    /// Largest `SO_SNDBUF` an application may ask for (global).
    pub const WMEM_MAX: &str = "net.core.wmem_max";
    /// Default receive buffer of non-TCP sockets.
    pub const RMEM_DEFAULT: &str = "net.core.rmem_default";
    /// Default send buffer of non-TCP sockets.
    pub const WMEM_DEFAULT: &str = "net.core.wmem_default";
    /// TCP receive buffer autotuning: min, default, max (bytes).
    pub const TCP_RMEM: &str = "net.ipv4.tcp_rmem";
    /// TCP send buffer autotuning: min, default, max (bytes).
    pub const TCP_WMEM: &str = "net.ipv4.tcp_wmem";
    /// Memory of all TCP sockets together: low, pressure, high (pages).
    pub const TCP_MEM: &str = "net.ipv4.tcp_mem";
    /// RFC 7323 window scaling.
    pub const WINDOW_SCALING: &str = "net.ipv4.tcp_window_scaling";
    /// RFC 7323 timestamps.
    pub const TIMESTAMPS: &str = "net.ipv4.tcp_timestamps";
    /// Selective acknowledgements.
    pub const SACK: &str = "net.ipv4.tcp_sack";
    /// Receive buffer autotuning.
    pub const MODERATE_RCVBUF: &str = "net.ipv4.tcp_moderate_rcvbuf";
    /// Default congestion control.
    pub const CONGESTION_CONTROL: &str = "net.ipv4.tcp_congestion_control";
    /// Congestion controls registered in the kernel.
    pub const AVAILABLE_CC: &str = "net.ipv4.tcp_available_congestion_control";
    /// Congestion controls unprivileged programs may choose.
    pub const ALLOWED_CC: &str = "net.ipv4.tcp_allowed_congestion_control";
    /// Queueing discipline given to new interfaces.
    pub const DEFAULT_QDISC: &str = "net.core.default_qdisc";
    /// Packetization-layer path MTU discovery.
    pub const MTU_PROBING: &str = "net.ipv4.tcp_mtu_probing";
    /// Do not cache ssthresh/RTT of closed connections.
    pub const NO_METRICS_SAVE: &str = "net.ipv4.tcp_no_metrics_save";
    /// Default `TCP_NOTSENT_LOWAT`.
    pub const NOTSENT_LOWAT: &str = "net.ipv4.tcp_notsent_lowat";
    /// Collapse cwnd after an idle period.
    pub const SLOW_START_AFTER_IDLE: &str = "net.ipv4.tcp_slow_start_after_idle";
    /// How much of a receive buffer is overhead (older kernels).
    pub const ADV_WIN_SCALE: &str = "net.ipv4.tcp_adv_win_scale";
}

/// Everything `doctor` gathered about one host (one network namespace).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFacts {
    /// `uname -r`.
    pub kernel_release: Fact<String>,
    /// The bytes of a memory page (`tcp_mem` counts pages).
    #[serde(rename = "page_size_bytes", alias = "page_size")]
    pub page_size: u64,
    /// Raw sysctl text by dotted name (tabs and trailing newline as the kernel prints them,
    /// minus the newline).
    pub sysctls: BTreeMap<String, Fact<String>>,
    /// Network interfaces.
    pub interfaces: Vec<Interface>,
    /// Counters from `/proc/net/snmp` and `/proc/net/netstat`, by group (`Tcp`, `TcpExt`, ...).
    pub counters: Fact<BTreeMap<String, BTreeMap<String, i64>>>,
    /// Which queueing disciplines this kernel has.
    pub qdiscs: QdiscFacts,
}

/// Which queueing disciplines exist, and how that was found out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QdiscFacts {
    /// Qdiscs known to be usable (built in, loaded, or loadable as a module). `None` when
    /// nothing could tell (then no check recommends a qdisc).
    pub available: Option<Vec<String>>,
    /// Where the answer came from (`/proc/config.gz`, `/proc/kallsyms`, ...).
    pub source: String,
}

/// One network interface, from `/sys/class/net/NAME`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    /// Interface name.
    pub name: String,
    /// MTU in bytes.
    pub mtu: Option<u32>,
    /// Link speed in Mbit/s as the driver reports it (`None`: not reported, e.g. virtual).
    pub speed_mbps: Option<u64>,
    /// Duplex as the driver reports it.
    pub duplex: Option<Duplex>,
    /// `operstate` (`up`, `down`, `unknown`, ...).
    pub operstate: String,
    /// Backed by a device (not loopback, veth, bridge, tun ...).
    pub physical: bool,
    /// The loopback interface.
    pub loopback: bool,
}

impl Interface {
    /// Whether the interface can carry traffic now (`up`, or `unknown` as loopback and many
    /// virtual devices report).
    pub fn is_up(&self) -> bool {
        self.operstate == "up" || self.operstate == "unknown"
    }
}

/// Link duplex.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Duplex {
    /// Both directions at once.
    Full,
    /// One direction at a time (collisions; a duplex mismatch makes links crawl).
    Half,
}

/// A fact that could not be used by a check, and why (`why` reads after the key:
/// "net.ipv4.tcp_rmem is not present on this kernel").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unusable {
    /// The sysctl.
    pub key: String,
    /// Why: missing, unreadable, or not in the expected form.
    pub why: String,
}

impl HostFacts {
    /// The raw text of a sysctl, if it was read.
    pub fn raw(&self, key: &str) -> Result<&str, Unusable> {
        match self.sysctls.get(key) {
            Some(Fact::Ok(v)) => Ok(v.as_str()),
            Some(Fact::Unreadable(e)) => Err(Unusable {
                key: key.to_string(),
                why: format!("is unreadable: {e}"),
            }),
            Some(Fact::Missing) | None => Err(Unusable {
                key: key.to_string(),
                why: "is not present on this kernel".to_string(),
            }),
        }
    }

    /// A single-integer sysctl.
    pub fn u64(&self, key: &str) -> Result<u64, Unusable> {
        let raw = self.raw(key)?;
        parse_u64(key, raw).map_err(|e| unusable(key, e))
    }

    /// A boolean sysctl (non-zero is on).
    pub fn flag(&self, key: &str) -> Result<bool, Unusable> {
        self.u64(key).map(|v| v != 0)
    }

    /// A `min default max` triple.
    pub fn triple(&self, key: &str) -> Result<[u64; 3], Unusable> {
        let raw = self.raw(key)?;
        parse_triple(key, raw).map_err(|e| unusable(key, e))
    }

    /// A triple of byte counts (`tcp_rmem`, `tcp_wmem`).
    pub fn byte_triple(&self, key: &str) -> Result<[Bytes; 3], Unusable> {
        self.triple(key).map(|t| t.map(Bytes))
    }

    /// A space-separated list (`tcp_available_congestion_control`).
    pub fn list(&self, key: &str) -> Result<Vec<String>, Unusable> {
        Ok(self
            .raw(key)?
            .split_whitespace()
            .map(str::to_string)
            .collect())
    }

    /// A word (`tcp_congestion_control`, `default_qdisc`).
    pub fn word(&self, key: &str) -> Result<String, Unusable> {
        let raw = self.raw(key)?.trim();
        if raw.is_empty() || raw.contains(char::is_whitespace) {
            return Err(Unusable {
                key: key.to_string(),
                why: format!("has an unexpected value '{raw}': expected one word"),
            });
        }
        Ok(raw.to_string())
    }

    /// A counter (`group` is `Tcp`, `TcpExt`, `Ip`, ...).
    pub fn counter(&self, group: &str, name: &str) -> Option<i64> {
        self.counters.ok()?.get(group)?.get(name).copied()
    }

    /// The interfaces that are up and not loopback.
    pub fn up_interfaces(&self) -> impl Iterator<Item = &Interface> {
        self.interfaces.iter().filter(|i| i.is_up() && !i.loopback)
    }
}

fn unusable(key: &str, e: SysctlError) -> Unusable {
    Unusable {
        key: key.to_string(),
        why: match e {
            SysctlError::Parse {
                value, expected, ..
            } => format!("has an unexpected value '{value}': expected {expected}"),
            other => other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts_with(pairs: &[(&str, Fact<String>)]) -> HostFacts {
        HostFacts {
            kernel_release: Fact::Ok("6.18.0".into()),
            page_size: 4096,
            sysctls: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            interfaces: vec![],
            counters: Fact::Missing,
            qdiscs: QdiscFacts {
                available: None,
                source: "test".into(),
            },
        }
    }

    #[test]
    fn triple_with_tabs_parses_and_garbage_says_why() {
        let f = facts_with(&[
            (keys::TCP_RMEM, Fact::Ok("4096\t131072\t33554432".into())),
            (keys::TCP_WMEM, Fact::Ok("4096 16384".into())),
        ]);
        assert_eq!(f.triple(keys::TCP_RMEM), Ok([4096, 131072, 33554432]));
        let e = f.triple(keys::TCP_WMEM).unwrap_err();
        assert!(e.why.contains("three unsigned integers"), "{}", e.why);
    }

    #[test]
    fn missing_and_unreadable_sysctls_are_distinguished() {
        let f = facts_with(&[(keys::RMEM_MAX, Fact::Unreadable("Permission denied".into()))]);
        assert!(f
            .u64(keys::RMEM_MAX)
            .unwrap_err()
            .why
            .contains("Permission"));
        assert!(f
            .u64(keys::WMEM_MAX)
            .unwrap_err()
            .why
            .contains("not present"));
    }

    #[test]
    fn sizes_past_32_bits_parse_as_u64() {
        let f = facts_with(&[(keys::RMEM_MAX, Fact::Ok("4294967296\n".into()))]);
        assert_eq!(f.u64(keys::RMEM_MAX), Ok(1 << 32));
    }

    #[test]
    fn fact_json_names_its_status() {
        let j = serde_json::to_string(&Fact::Ok(3u32)).unwrap();
        assert_eq!(j, r#"{"status":"ok","value":3}"#);
        let j = serde_json::to_string(&Fact::<u32>::Missing).unwrap();
        assert_eq!(j, r#"{"status":"missing"}"#);
    }
}
