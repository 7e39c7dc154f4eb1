//! What each end reports of a phase, carried in `ServerMsg::PhaseResult`: per stream
//! ([`StreamSide`], with the tuner's [`SideDetail`]) and in all ([`SideResult`]). The
//! transfer's engine fills them; the sessions only pass them on and read their counters.

use serde::{Deserialize, Serialize};
use std::time::Instant;
use tcptune_core::{Action, SampleRecord, StreamStats};

/// What one end saw of one stream, sent by the server to the client at the end of a phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamSide {
    /// Stream number (1-based).
    pub stream: u32,
    /// Whether this end sent on it.
    pub sender: bool,
    /// Payload bytes written (sender) or received and verified (receiver).
    pub bytes: u64,
    /// Complete messages written or verified.
    pub messages: u64,
    /// Receiver: bytes of a message cut short at the end (duration workload or cap).
    pub partial_bytes: u64,
    /// Seconds after this end's start (its first stream) of the first write's call / the first byte's
    /// arrival.
    pub first_s: Option<f64>,
    /// Seconds after this end's start of the last write / last byte's arrival.
    pub last_s: Option<f64>,
    /// Seconds after this end's start at which the stream was added.
    pub opened_at_s: f64,
    /// Receiver: throughput over the second half of this stream's receive time (bit/s),
    /// past slow start.
    pub tail_bits_per_second: Option<f64>,
    /// Local address.
    pub local: String,
    /// Peer address.
    pub remote: String,
    /// Tuner summaries (and series with `--samples`).
    pub detail: SideDetail,
    /// What went wrong on this stream, if anything.
    pub error: Option<String>,
}

/// The most all streams of one end held at once (each stream as last sampled): the memory
/// the host had to provide, where the per-stream peaks (which may come at different times)
/// only bound it from above.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TotalPeaks {
    /// Largest sum of `sk_sndbuf`.
    pub sndbuf_bytes: u64,
    /// Largest sum of `sk_rcvbuf`.
    pub rcvbuf_bytes: u64,
    /// Largest sum of `sk_wmem_queued`.
    pub wmem_queued_bytes: u64,
    /// Largest sum of `sk_rmem_alloc`.
    pub rmem_alloc_bytes: u64,
}

impl TotalPeaks {
    /// Keep the larger of each peak and `now`'s.
    pub fn fold(&mut self, now: &TotalPeaks) {
        self.sndbuf_bytes = self.sndbuf_bytes.max(now.sndbuf_bytes);
        self.rcvbuf_bytes = self.rcvbuf_bytes.max(now.rcvbuf_bytes);
        self.wmem_queued_bytes = self.wmem_queued_bytes.max(now.wmem_queued_bytes);
        self.rmem_alloc_bytes = self.rmem_alloc_bytes.max(now.rmem_alloc_bytes);
    }
}

/// One end's result of a phase.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SideResult {
    /// The most all streams held at once.
    #[serde(default)]
    pub peaks: TotalPeaks,
    /// Per stream, ordered by stream number.
    pub streams: Vec<StreamSide>,
    /// CPU of the phase's threads, user seconds.
    pub cpu_user_s: f64,
    /// CPU of the phase's threads, system seconds.
    pub cpu_system_s: f64,
    /// Seconds from this end's start to the end of the last stream.
    pub wall_s: f64,
    /// The data did not check out (receiver).
    pub integrity_error: Option<String>,
    /// What a copy did at this end (`tcptune cp`; absent for the pattern).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<crate::files::FilesSide>,
    /// Congestion control of the data sockets.
    pub congestion: String,
    /// This end's start (its first stream added): what `first_s` and `last_s` count from.
    /// Local only (an instant of this process's clock).
    #[serde(skip)]
    pub started: Option<Instant>,
}

impl SideResult {
    /// Drop the time series (samples and changes) of every stream, keeping the summaries:
    /// for a result too large to send.
    pub fn strip_series(&mut self) {
        for s in &mut self.streams {
            let d = &mut s.detail;
            d.samples_dropped += d.samples.len() as u64;
            d.samples = Vec::new();
            d.changes = Vec::new();
        }
    }
}

/// One end of one stream: the summaries of the tuner's samples (the one per-stream
/// statistics type, [`StreamStats`], flattened into this object), and optionally the series.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SideDetail {
    /// RTT, congestion window, peak buffers, time limited by each buffer, samples taken.
    #[serde(flatten)]
    pub stats: StreamStats,
    /// The recorded snapshots (`--samples` only): at most
    /// `tcptune_sys::driver::SERIES_CAPACITY` per stream and end, decimated evenly over the
    /// stream's life when it ran longer.
    #[serde(default)]
    pub samples: Vec<SampleRecord>,
    /// Snapshots taken but not kept in `samples` (decimation or the size of the result).
    #[serde(default)]
    pub samples_dropped: u64,
    /// The changes (`--samples`: all, at most `tcptune_sys::driver::CHANGES_CAPACITY`;
    /// without, the first few that failed or that the kernel did not take as asked).
    #[serde(default)]
    pub changes: Vec<ChangeRecord>,
}

/// One change a tuner asked for, and what happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChangeRecord {
    /// Seconds since the transfer started (negative: before the transfer, e.g. at connect).
    pub t_s: f64,
    /// What the tuner asked for: `{"action": "set_snd_buf", "value_bytes": N}`, or
    /// `{"action": "open_streams", "count": N, "reason": "..."}`.
    #[serde(with = "action_serde")]
    pub action: Action,
    /// The value the kernel holds afterwards (e.g. `SO_SNDBUF` read back), if applicable.
    #[serde(rename = "effective_bytes", alias = "effective")]
    pub effective: Option<u64>,
    /// For a pacing cap (`set_max_pacing_rate`): the cap the kernel holds afterwards, bit/s
    /// (`null`: no cap, or another action).
    #[serde(default)]
    pub effective_bps: Option<u64>,
    /// The error, if applying it failed.
    #[serde(default)]
    pub error: Option<String>,
    /// Why something else than asked was applied, if it was.
    #[serde(default)]
    pub note: Option<String>,
}

/// `changes[].action`: `{"action": "set_snd_buf", "value_bytes": N}` or
/// `{"action": "open_streams", "count": N, "reason": "..."}`.
mod action_serde {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use tcptune_core::{Action, Bytes, Rate};

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
