//! What the lab writes down: one [`RunRecord`] per run (a line of `results.jsonl`), and one
//! [`LabMeta`] per lab (`meta.json`: the machine, the sysctls, what was changed and restored,
//! the calibration).
//!
//! Memory units: every `*_bytes` buffer figure is what the kernel holds (`sk_sndbuf`,
//! `sk_rcvbuf` from `SO_MEMINFO`), which for a buffer set with `setsockopt(SO_SNDBUF, v)` is
//! `2 v`. Sums are over the streams of a run.
//!
//! Time: a run's primary figure is its completion time, from the client command's start to
//! the last byte's arrival at the receiver ([`RunRecord::completion_s`]), and the throughput
//! over that time ([`RunRecord::throughput_bps`]): what a user waits for, and the closest
//! to the paper's timing (from the start of the first process to the end of the last).
//! [`RunRecord::first_to_last_bps`] is the receiver's first byte to its last byte, which
//! leaves out connecting, measuring and the first round trips.

use crate::plan::{CellKey, HostConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tcptune_transfer::report::{Report, StreamDetail};

/// Version of `results.jsonl` records and `meta.json`. 2: completion time from the
/// command's start (`completion_s`), `first_to_last_*` for the receiver's span (read from
/// version 1's `throughput_bps`/`seconds`), round trips, the measurement's source.
pub const RECORD_SCHEMA_VERSION: u32 = 2;

/// One run of one cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// [`RECORD_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The cell.
    #[serde(flatten)]
    pub cell: CellKey,
    /// Repetition number, 1-based.
    pub repetition: u32,
    /// Wall-clock start, seconds since the Unix epoch.
    pub started_unix_s: f64,
    /// Wall time the runner spent on this run (process start to exit), seconds.
    pub wall_s: f64,
    /// The run produced a usable report.
    pub ok: bool,
    /// What went wrong, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why this run was not made (the cell cannot be reproduced in the lab's mode, see
    /// [`crate::feasible`]); such a record is neither a result nor a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_run: Option<String>,
    /// Throughput from the receiver's first byte to its last
    /// (`end.sum_received.bits_per_second`), bit/s.
    #[serde(alias = "throughput_bps")]
    pub first_to_last_bps: f64,
    /// Bytes received.
    pub bytes: u64,
    /// The receiver's first byte to its last byte, seconds.
    #[serde(alias = "seconds")]
    pub first_to_last_s: f64,
    /// From the client command's start to the last byte's arrival at the receiver, seconds:
    /// `end.tcptune.session_seconds` less the round trips after the last byte
    /// (`finish_round_trips` x the control connection's RTT). `None` when the report has no
    /// session time.
    #[serde(default)]
    pub completion_s: Option<f64>,
    /// The client command's wall time (`end.tcptune.session_seconds`), seconds.
    #[serde(default)]
    pub session_s: Option<f64>,
    /// Round trips from the command's start to the first data byte
    /// (`end.tcptune.setup_round_trips`).
    #[serde(default)]
    pub setup_round_trips: Option<f64>,
    /// Round trips from the last byte's arrival to the command's end.
    #[serde(default)]
    pub finish_round_trips: Option<f64>,
    /// Where the path's rate came from (`start.tcptune.measurement.source`: `in_band`,
    /// `path_db`, `probe`, `none`).
    #[serde(default)]
    pub measurement_source: Option<String>,
    /// The time cap stopped the transfer; throughput is from the bytes that moved.
    pub capped: bool,
    /// Every message arrived and checked out.
    pub complete: bool,
    /// Streams used (more than requested when a tuner opened more).
    pub streams_used: u32,
    /// Why streams were added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams_reason: Option<String>,
    /// Sum over streams of the peak kernel-held send buffer at the sender.
    pub peak_sndbuf_bytes: u64,
    /// Sum over streams of the peak kernel-held receive buffer at the receiver.
    pub peak_rcvbuf_bytes: u64,
    /// Sum over streams of the peak memory queued for sending (`sk_wmem_queued`).
    pub peak_wmem_queued_bytes: u64,
    /// Sum over streams of the peak memory holding received data (`sk_rmem_alloc`).
    pub peak_rmem_alloc_bytes: u64,
    /// Retransmitted segments, all streams.
    pub retransmits: u64,
    /// RTT the engine measured before the transfer (control connection), microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint_rtt_us: Option<u64>,
    /// Seconds spent measuring the path before the transfer (the bandwidth probe of `probe`;
    /// in-band measurement costs none of its own), not part of `first_to_last_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measure_s: Option<f64>,
    /// Seconds spent opening the transfer's streams before its first byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_s: Option<f64>,
    /// Per stream: the summaries of the tuner's samples at both ends (no time series).
    pub per_stream: Vec<StreamSummary>,
    /// The emulator's counters for this run (differences over the run), if available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emu: Option<EmuRunStats>,
    /// A competing-transfers run: the second transfer and how the two shared the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub competing: Option<Box<Competing>>,
    /// A path-change run: the time series of the first stream and when the path changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<RunSeries>,
}

/// The second transfer of a competing-transfers run, and the fairness of the overlap.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Competing {
    /// The second transfer (same mode, started `second_at_s` after the first).
    pub second: RunRecord,
    /// When the second command started, seconds after the first.
    pub second_at_s: f64,
    /// The overlap both transfers were sending in, seconds (on the first transfer's clock).
    pub overlap_s: [f64; 2],
    /// Each transfer's throughput over the overlap, bit/s (from its interval reports, every
    /// 250 ms).
    pub overlap_bps: [f64; 2],
    /// Jain's fairness index of the two transfers over the overlap (1: equal shares; 0.5:
    /// one took everything).
    pub jain_transfers: Option<f64>,
    /// Jain's index over every stream of both transfers, from their whole-transfer rates.
    pub jain_streams: Option<f64>,
    /// The first transfer's throughput before the second started, bit/s.
    pub alone_bps: Option<f64>,
    /// Each transfer's throughput once the second had [`crate::scenario::SETTLE_S`] to
    /// settle, over the next [`crate::scenario::SETTLED_S`] of the overlap (issue 22's
    /// target: the incumbent's seconds 5-9 against the latecomer's 2-6), bit/s; `None`
    /// when the overlap is shorter.
    #[serde(default)]
    pub settled_bps: Option<[f64; 2]>,
    /// Jain's index over that window.
    #[serde(default)]
    pub jain_settled: Option<f64>,
}

/// One recorded time series (a path-change run).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSeries {
    /// When the path changed, seconds after the transfer's start (on the report's clock).
    pub change_at_s: Option<f64>,
    /// What changed (`rtt 25ms -> 100ms`).
    pub change: String,
    /// The first stream's sender samples.
    pub sender: Vec<tcptune_core::SampleRecord>,
    /// The first stream's receiver samples.
    pub receiver: Vec<tcptune_core::SampleRecord>,
    /// The changes the sender's tuner made (SO_SNDBUF etc.), with their times.
    pub sender_changes: Vec<tcptune_transfer::report::ChangeRecord>,
    /// The changes the receiver's tuner made.
    pub receiver_changes: Vec<tcptune_transfer::report::ChangeRecord>,
}

/// One stream of a run: the report's per-stream detail (the one statistics type the
/// driver, the report and the lab share), without the time series.
pub type StreamSummary = StreamDetail;

/// The emulator's view of one run, forward direction (A to B, the data); counted from the
/// start of the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EmuRunStats {
    /// Packets forwarded.
    pub packets: u64,
    /// Packets dropped (queue overflow and any other cause).
    pub drops: u64,
    /// Largest queue seen, bytes.
    pub queue_peak_bytes: u64,
    /// 99th percentile of how late packets left their due time, microseconds.
    pub lateness_p99_us: Option<f64>,
}

impl RunRecord {
    /// A record from a transfer report.
    pub fn from_report(
        cell: CellKey,
        repetition: u32,
        started_unix_s: f64,
        wall_s: f64,
        report: &Report,
    ) -> RunRecord {
        let end = &report.end;
        let t = &end.tcptune;
        let per_stream = t.streams.iter().map(StreamDetail::without_series).collect();
        let retransmits = end
            .sum_sent
            .retransmits
            .unwrap_or_else(|| t.streams.iter().map(|s| s.sender.stats.retransmits).sum());
        let error = report.error.clone();
        let rtt_s = report.start.tcptune.path_hint.rtt.map(|d| d.as_secs_f64());
        let completion_s = t.session_seconds.map(|session| {
            let after = match (t.finish_round_trips, rtt_s) {
                (Some(n), Some(rtt)) => n * rtt,
                _ => 0.0,
            };
            (session - after).max(end.sum_received.seconds)
        });
        RunRecord {
            schema_version: RECORD_SCHEMA_VERSION,
            cell,
            repetition,
            started_unix_s,
            wall_s,
            ok: error.is_none() && end.sum_received.bytes > 0,
            error: error
                .or_else(|| (end.sum_received.bytes == 0).then(|| "no bytes received".to_string())),
            not_run: None,
            first_to_last_bps: end.sum_received.bits_per_second,
            bytes: end.sum_received.bytes,
            first_to_last_s: end.sum_received.seconds,
            completion_s,
            session_s: t.session_seconds,
            setup_round_trips: t.setup_round_trips,
            finish_round_trips: t.finish_round_trips,
            measurement_source: report
                .start
                .tcptune
                .measurement
                .as_ref()
                .map(|m| m.source.clone()),
            capped: t.capped,
            complete: t.complete,
            streams_used: t.streams_used,
            streams_reason: t.streams_reason.clone(),
            peak_sndbuf_bytes: t.peak_sndbuf_bytes,
            peak_rcvbuf_bytes: t.peak_rcvbuf_bytes,
            peak_wmem_queued_bytes: t.peak_wmem_queued_bytes,
            peak_rmem_alloc_bytes: t.peak_rmem_alloc_bytes,
            retransmits,
            hint_rtt_us: report
                .start
                .tcptune
                .path_hint
                .rtt
                .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            measure_s: report.start.tcptune.measurement.as_ref().map(|m| m.seconds),
            setup_s: t.setup_seconds,
            per_stream,
            emu: None,
            competing: None,
            series: None,
        }
    }

    /// A record of a run that produced no report.
    pub fn failed(
        cell: CellKey,
        repetition: u32,
        started_unix_s: f64,
        wall_s: f64,
        error: String,
    ) -> RunRecord {
        RunRecord {
            schema_version: RECORD_SCHEMA_VERSION,
            cell,
            repetition,
            started_unix_s,
            wall_s,
            ok: false,
            error: Some(error),
            not_run: None,
            first_to_last_bps: 0.0,
            bytes: 0,
            first_to_last_s: 0.0,
            completion_s: None,
            session_s: None,
            setup_round_trips: None,
            finish_round_trips: None,
            measurement_source: None,
            capped: false,
            complete: false,
            streams_used: 0,
            streams_reason: None,
            peak_sndbuf_bytes: 0,
            peak_rcvbuf_bytes: 0,
            peak_wmem_queued_bytes: 0,
            peak_rmem_alloc_bytes: 0,
            retransmits: 0,
            hint_rtt_us: None,
            measure_s: None,
            setup_s: None,
            per_stream: Vec::new(),
            emu: None,
            competing: None,
            series: None,
        }
    }

    /// A record of a run the lab did not make, and why (see [`crate::feasible`]).
    pub fn not_run(cell: CellKey, repetition: u32, started_unix_s: f64, why: String) -> RunRecord {
        RunRecord {
            error: None,
            not_run: Some(why),
            ..RunRecord::failed(cell, repetition, started_unix_s, 0.0, String::new())
        }
    }

    /// Whether the run failed (a run not made is not a failure).
    pub fn failed_run(&self) -> bool {
        !self.ok && self.not_run.is_none()
    }

    /// The primary figure: bytes over [`RunRecord::completion_s`], bit/s. A record of a
    /// tcptune without session timing (schema 1) counts the receiver's span plus the time
    /// spent measuring the path and opening the streams instead.
    pub fn throughput_bps(&self) -> f64 {
        let t = self.completion_s.unwrap_or(
            self.first_to_last_s + self.measure_s.unwrap_or(0.0) + self.setup_s.unwrap_or(0.0),
        );
        if t > 0.0 {
            self.bytes as f64 * 8.0 / t
        } else {
            0.0
        }
    }

    /// Completion time, seconds (see [`RunRecord::throughput_bps`] for old records).
    pub fn completion(&self) -> f64 {
        self.completion_s.unwrap_or(
            self.first_to_last_s + self.measure_s.unwrap_or(0.0) + self.setup_s.unwrap_or(0.0),
        )
    }

    /// The congestion controls the data sockets used, read back from each socket: per end
    /// (sender, receiver), control -> sockets. Sockets whose control is unknown count under
    /// `"unknown"`.
    pub fn congestion_used(&self) -> [BTreeMap<String, u32>; 2] {
        let mut out = [BTreeMap::new(), BTreeMap::new()];
        for s in &self.per_stream {
            for (i, side) in [&s.sender, &s.receiver].into_iter().enumerate() {
                let cc = side
                    .stats
                    .congestion
                    .clone()
                    .unwrap_or_else(|| "unknown".into());
                *out[i].entry(cc).or_insert(0) += 1;
            }
        }
        out
    }

    /// The larger of the two ends' kernel-held buffer peaks (the memory figure the report
    /// compares).
    pub fn peak_buffer_bytes(&self) -> u64 {
        self.peak_sndbuf_bytes.max(self.peak_rcvbuf_bytes)
    }

    /// Smallest smoothed RTT any stream's sender saw, microseconds.
    pub fn rtt_min_us(&self) -> Option<u32> {
        self.per_stream
            .iter()
            .filter_map(|s| s.sender.stats.rtt_min_us)
            .min()
    }

    /// Total time the senders were limited by the receive window, microseconds.
    pub fn rwnd_limited_us(&self) -> u64 {
        self.per_stream
            .iter()
            .map(|s| s.sender.stats.rwnd_limited_us)
            .sum()
    }

    /// Total time the senders were limited by their send buffer, microseconds.
    pub fn sndbuf_limited_us(&self) -> u64 {
        self.per_stream
            .iter()
            .map(|s| s.sender.stats.sndbuf_limited_us)
            .sum()
    }
}

/// A global sysctl the lab changed, and the value it put back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SysctlChange {
    /// The sysctl.
    pub key: String,
    /// Its value before the lab.
    pub before: String,
    /// What the lab set.
    pub set: String,
    /// Whether the old value was written back (filled in at the end).
    pub restored: bool,
}

/// How the emulator was checked before the matrix.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The rate checked.
    pub rate_bps: u64,
    /// The round-trip time configured for the check, microseconds.
    pub rtt_configured_us: u64,
    /// Smallest RTT measured through it (TCP), microseconds.
    pub rtt_measured_us: Option<u64>,
    /// Throughput of one well-buffered transfer, receiver-measured, bit/s.
    pub throughput_bps: f64,
    /// 99th-percentile lateness of the emulator during that transfer, microseconds.
    pub lateness_p99_us: Option<f64>,
    /// Packets the emulator dropped during that transfer.
    pub drops: u64,
    /// Whether the emulator was judged faithful at this rate.
    pub faithful: bool,
    /// The sentence explaining the verdict.
    pub verdict: String,
    /// Lower rates tried when this one failed: (rate bit/s, faithful).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lower_rates: Vec<(u64, bool)>,
}

/// Everything about the lab other than the runs (`meta.json`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LabMeta {
    /// [`RECORD_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `tcptune --version` of the binary that ran the transfers.
    pub tcptune_version: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// CPUs online.
    pub cpus: usize,
    /// Seed given to the emulator.
    pub seed: u64,
    /// Wall-clock start, seconds since the Unix epoch.
    pub started_unix_s: f64,
    /// Wall-clock duration of the whole lab, seconds (filled in at the end).
    pub duration_s: f64,
    /// Per host configuration: the namespace sysctls that were in force (both sides).
    pub namespace_sysctls: Vec<(HostConfig, Vec<(String, String)>)>,
    /// Global sysctls changed for the raised configurations, and whether they were restored.
    pub global_changes: Vec<SysctlChange>,
    /// The emulator check.
    pub calibration: Option<Calibration>,
    /// Whether the lab ran to its end (false when interrupted; the results are partial).
    pub finished: bool,
    /// How the emulated paths were built: "root" or "rootless" (`None` in older results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// One line: the mode and what it cannot do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode_summary: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_record_has_no_throughput_and_round_trips() {
        let key = CellKey::new(500, HostConfig::Untuned, 1, "kernel");
        let r = RunRecord::failed(key.clone(), 2, 1.0, 3.5, "server died".into());
        assert!(!r.ok);
        let line = serde_json::to_string(&r).expect("serializes");
        assert!(line.contains("\"host\":\"untuned\""), "{line}");
        assert!(line.contains("\"rtt_us\":500"), "{line}");
        let back: RunRecord = serde_json::from_str(&line).expect("parses");
        assert_eq!(back, r);
        assert_eq!(back.cell, key);
        assert!(r.failed_run());
        assert!(!line.contains("not_run"), "{line}");
    }

    #[test]
    fn a_run_not_made_is_neither_a_result_nor_a_failure_and_says_why() {
        let key = CellKey::new(100_000, HostConfig::KernelOnly, 1, "auto");
        let r = RunRecord::not_run(key, 1, 1.0, "rootless mode: ...".into());
        assert!(!r.ok && !r.failed_run());
        assert_eq!(r.error, None);
        let line = serde_json::to_string(&r).expect("serializes");
        assert!(
            line.contains("\"not_run\":\"rootless mode: ...\""),
            "{line}"
        );
        let back: RunRecord = serde_json::from_str(&line).expect("parses");
        assert_eq!(back, r);
    }
}
