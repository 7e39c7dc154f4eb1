//! How the report writes the core types it carries, with units in every name: the core
//! types keep the spelling of the wire protocol (`PathHint::rtt` is a `Duration`,
//! `HostLimits::rmem_max` a byte count), and the report writes `rtt_us`, `rate_bps`,
//! `rmem_max_bytes`. Reading accepts both spellings, so the lab reads its old records back.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::time::Duration;
use tcptune_core::{Bytes, HostLimits, PathHint, Rate};

/// `start.tcptune.path_hint`.
pub(crate) mod path_hint {
    use super::*;

    #[derive(Serialize)]
    struct Out {
        rtt_us: Option<u64>,
        rate_bps: Option<u64>,
        rate_is_lower_bound: bool,
        rate_in_band: bool,
        resume: bool,
    }

    /// The old `rtt` was serde's `{"secs", "nanos"}`.
    #[derive(Deserialize)]
    struct OldDuration {
        secs: u64,
        nanos: u32,
    }

    #[derive(Deserialize)]
    struct In {
        #[serde(default)]
        rtt_us: Option<u64>,
        #[serde(default)]
        rtt: Option<OldDuration>,
        #[serde(default, alias = "rate")]
        rate_bps: Option<u64>,
        #[serde(default)]
        rate_is_lower_bound: bool,
        #[serde(default)]
        rate_in_band: bool,
        #[serde(default)]
        resume: bool,
    }

    pub(crate) fn serialize<S: Serializer>(h: &PathHint, s: S) -> Result<S::Ok, S::Error> {
        Out {
            rtt_us: h
                .rtt
                .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            rate_bps: h.rate.map(|r| r.0),
            rate_is_lower_bound: h.rate_is_lower_bound,
            rate_in_band: h.rate_in_band,
            resume: h.resume,
        }
        .serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathHint, D::Error> {
        let i = In::deserialize(d)?;
        Ok(PathHint {
            rtt: i
                .rtt_us
                .map(Duration::from_micros)
                .or(i.rtt.map(|o| Duration::new(o.secs, o.nanos))),
            rate: i.rate_bps.map(Rate),
            rate_is_lower_bound: i.rate_is_lower_bound,
            rate_in_band: i.rate_in_band,
            resume: i.resume,
            // Advice between the ends, not part of the report.
            streams_asked: None,
        })
    }
}

/// `start.tcptune.sender_limits` / `receiver_limits`.
pub(crate) mod limits {
    use super::*;

    #[derive(Serialize, Deserialize)]
    struct Json {
        #[serde(alias = "rmem_max")]
        rmem_max_bytes: u64,
        #[serde(alias = "wmem_max")]
        wmem_max_bytes: u64,
        #[serde(alias = "tcp_rmem")]
        tcp_rmem_bytes: [u64; 3],
        #[serde(alias = "tcp_wmem")]
        tcp_wmem_bytes: [u64; 3],
        moderate_rcvbuf: bool,
        can_force: bool,
    }

    pub(crate) fn serialize<S: Serializer>(l: &HostLimits, s: S) -> Result<S::Ok, S::Error> {
        Json {
            rmem_max_bytes: l.rmem_max.0,
            wmem_max_bytes: l.wmem_max.0,
            tcp_rmem_bytes: l.tcp_rmem.map(|b| b.0),
            tcp_wmem_bytes: l.tcp_wmem.map(|b| b.0),
            moderate_rcvbuf: l.moderate_rcvbuf,
            can_force: l.can_force,
        }
        .serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<HostLimits, D::Error> {
        let j = Json::deserialize(d)?;
        Ok(HostLimits {
            rmem_max: Bytes(j.rmem_max_bytes),
            wmem_max: Bytes(j.wmem_max_bytes),
            tcp_rmem: j.tcp_rmem_bytes.map(Bytes),
            tcp_wmem: j.tcp_wmem_bytes.map(Bytes),
            moderate_rcvbuf: j.moderate_rcvbuf,
            can_force: j.can_force,
        })
    }
}

/// A count that is unknown at one end (retransmits and the congestion window of a receiver's
/// intervals): `null` in JSON, 0 in memory; `null` and numbers both read back.
pub(crate) fn null_as_zero<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(Option::<u64>::deserialize(d)?.unwrap_or(0))
}
