//! How the report writes the core types it carries, with units in every name: the core
//! types keep the spelling of the wire protocol (`PathHint::rtt` is a `Duration`,
//! `HostLimits::rmem_max` a byte count), and the report writes `rtt_us`, `rate_bps`,
//! `rmem_max_bytes`. Reading accepts both spellings, so the lab reads its old records back.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::time::Duration;
use tcptune_core::{Action, Bytes, HostLimits, PathHint, Rate};

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

/// `changes[].action`: `{"action": "set_snd_buf", "value_bytes": N}` or
/// `{"action": "open_streams", "count": N, "reason": "..."}`.
pub(crate) mod action {
    use super::*;

    #[derive(Serialize, Deserialize)]
    struct Json {
        action: String,
        #[serde(default, alias = "value", skip_serializing_if = "Option::is_none")]
        value_bytes: Option<serde_json::Value>,
        /// `set_max_pacing_rate`: the cap, bit/s (`null`: the cap is lifted).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value_bps: Option<serde_json::Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    }

    pub(crate) fn serialize<S: Serializer>(a: &Action, s: S) -> Result<S::Ok, S::Error> {
        let (name, bytes) = match a {
            Action::SetSndBuf(b) => ("set_snd_buf", Some(b.0)),
            Action::SetRcvBuf(b) => ("set_rcv_buf", Some(b.0)),
            Action::SetWindowClamp(b) => ("set_window_clamp", Some(b.0)),
            Action::SetNotsentLowat(b) => ("set_notsent_lowat", Some(b.0)),
            Action::SetMaxPacingRate(r) => {
                return Json {
                    action: "set_max_pacing_rate".into(),
                    value_bytes: None,
                    value_bps: Some(r.map_or(serde_json::Value::Null, |r| r.0.into())),
                    count: None,
                    reason: None,
                }
                .serialize(s)
            }
            Action::OpenStreams { count, reason } => {
                return Json {
                    action: "open_streams".into(),
                    value_bytes: None,
                    value_bps: None,
                    count: Some(*count),
                    reason: Some(reason.clone()),
                }
                .serialize(s)
            }
        };
        Json {
            action: name.into(),
            value_bytes: bytes.map(serde_json::Value::from),
            value_bps: None,
            count: None,
            reason: None,
        }
        .serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Action, D::Error> {
        use serde::de::Error;
        let j = Json::deserialize(d)?;
        // The old spelling put open_streams' fields under "value".
        if j.action == "open_streams" {
            let (count, reason) = match (j.count, j.reason, j.value_bytes) {
                (Some(c), r, _) => (c, r.unwrap_or_default()),
                (None, _, Some(v)) => (
                    v.get("count")
                        .and_then(serde_json::Value::as_u64)
                        .and_then(|c| u32::try_from(c).ok())
                        .unwrap_or(0),
                    v.get("reason")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                ),
                (None, r, None) => (0, r.unwrap_or_default()),
            };
            return Ok(Action::OpenStreams { count, reason });
        }
        if j.action == "set_max_pacing_rate" {
            let rate = j.value_bps.as_ref().and_then(serde_json::Value::as_u64);
            return Ok(Action::SetMaxPacingRate(rate.map(Rate)));
        }
        let bytes = Bytes(
            j.value_bytes
                .as_ref()
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| D::Error::custom(format!("{} without value_bytes", j.action)))?,
        );
        Ok(match j.action.as_str() {
            "set_snd_buf" => Action::SetSndBuf(bytes),
            "set_rcv_buf" => Action::SetRcvBuf(bytes),
            "set_window_clamp" => Action::SetWindowClamp(bytes),
            "set_notsent_lowat" => Action::SetNotsentLowat(bytes),
            other => return Err(D::Error::custom(format!("unknown action '{other}'"))),
        })
    }
}

/// A count that is unknown at one end (retransmits and the congestion window of a receiver's
/// intervals): `null` in JSON, 0 in memory; `null` and numbers both read back.
pub(crate) fn null_as_zero<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(Option::<u64>::deserialize(d)?.unwrap_or(0))
}
