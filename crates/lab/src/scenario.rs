//! The pure side of the scenario cells ([`crate::plan::Scenario`]): how two competing
//! transfers shared the path ([`competing`]), and what a path change was and when it came
//! on the transfer's clock ([`change_text`], [`series`]). The runner gathers the reports and
//! times; everything here is computed from them.

use crate::record::{Competing, RunRecord, RunSeries};
use std::time::Duration;
use tcptune_core::{format_duration, Rate};
use tcptune_transfer::report::Report;

/// Jain's fairness index of `x`: `(Σx)² / (n Σx²)`, 1 for equal shares, `1/n` when one
/// takes everything. `None` when `x` is empty or all zero.
pub fn jain(x: &[f64]) -> Option<f64> {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if x.is_empty() || squares <= 0.0 {
        return None;
    }
    Some(sum * sum / (x.len() as f64 * squares))
}

/// What the fairness computations need of one transfer's report.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    /// When its data started, seconds after its command started (the time it spent
    /// measuring the path and opening its streams; the report's clock starts there).
    pub data_start_s: f64,
    /// Its interval reports on its own clock: (start s, end s, bytes over all streams).
    pub intervals: Vec<(f64, f64, u64)>,
    /// Each stream's whole-transfer rate at the receiver, bit/s.
    pub stream_bps: Vec<f64>,
}

impl Timeline {
    /// The timeline of a transfer report.
    pub fn of(report: &Report) -> Timeline {
        let t = &report.start.tcptune;
        Timeline {
            data_start_s: t.measurement.as_ref().map_or(0.0, |m| m.seconds)
                + report.end.tcptune.setup_seconds.unwrap_or(0.0),
            intervals: report
                .intervals
                .iter()
                .map(|i| (i.sum.start, i.sum.end, i.sum.bytes))
                .collect(),
            stream_bps: report
                .end
                .streams
                .iter()
                .map(|s| s.receiver.bits_per_second)
                .collect(),
        }
    }

    /// When its last interval ended, on its own clock.
    pub fn end_s(&self) -> f64 {
        self.intervals.iter().map(|i| i.1).fold(0.0, f64::max)
    }

    /// Its rate over `[from, to]` of its own clock, bit/s: each interval's bytes count in
    /// proportion to the part of it inside. `None` for an empty span.
    pub fn rate_between(&self, from: f64, to: f64) -> Option<f64> {
        if to <= from {
            return None;
        }
        let bytes: f64 = self
            .intervals
            .iter()
            .filter(|(s, e, _)| e > s)
            .map(|&(s, e, b)| {
                let inside = (e.min(to) - s.max(from)).max(0.0);
                b as f64 * inside / (e - s)
            })
            .sum();
        Some(bytes * 8.0 / (to - from))
    }
}

/// How long the latecomer has to settle before [`Competing::settled_bps`] is measured.
pub const SETTLE_S: f64 = 2.0;
/// How long [`Competing::settled_bps`] is measured over.
pub const SETTLED_S: f64 = 4.0;

/// How two transfers shared the path: `second` started `second_started_s` after `first`'s
/// command (both on the runner's clock). The overlap is where both were moving data, on the
/// first transfer's clock; each one's rate over it gives Jain's index of the transfers, and
/// every stream's whole-transfer rate Jain's index of the streams.
pub fn competing(
    first: &Timeline,
    second: &Timeline,
    second_started_s: f64,
    second_record: RunRecord,
) -> Competing {
    // The second transfer's clock, shifted onto the first's.
    let shift = second_started_s + second.data_start_s - first.data_start_s;
    let from = shift.max(0.0);
    let to = first.end_s().min(shift + second.end_s());
    let overlap_bps = if to > from {
        [
            first.rate_between(from, to).unwrap_or(0.0),
            second.rate_between(from - shift, to - shift).unwrap_or(0.0),
        ]
    } else {
        [0.0, 0.0]
    };
    let (s_from, s_to) = (from + SETTLE_S, from + SETTLE_S + SETTLED_S);
    let settled_bps = (to >= s_to).then(|| {
        [
            first.rate_between(s_from, s_to).unwrap_or(0.0),
            second
                .rate_between(s_from - shift, s_to - shift)
                .unwrap_or(0.0),
        ]
    });
    let streams: Vec<f64> = first
        .stream_bps
        .iter()
        .chain(&second.stream_bps)
        .copied()
        .collect();
    Competing {
        second: second_record,
        second_at_s: second_started_s,
        overlap_s: [from, to.max(from)],
        overlap_bps,
        jain_transfers: if to > from { jain(&overlap_bps) } else { None },
        jain_streams: jain(&streams),
        alone_bps: first.rate_between(0.0, from.min(first.end_s())),
        jain_settled: settled_bps.as_ref().and_then(|b| jain(b)),
        settled_bps,
    }
}

/// What a path change does, for humans: `rtt 25ms -> 100ms, rate 1Gbit/s -> 300Mbit/s`.
pub fn change_text(
    rtt_us: u64,
    rate: Rate,
    to_rtt_us: Option<u64>,
    to_rate: Option<Rate>,
) -> String {
    let us = |v: u64| format_duration(Duration::from_micros(v));
    let mut parts = Vec::new();
    if let Some(to) = to_rtt_us {
        parts.push(format!("rtt {} -> {}", us(rtt_us), us(to)));
    }
    if let Some(to) = to_rate {
        parts.push(format!("rate {rate} -> {to}"));
    }
    parts.join(", ")
}

/// The time series of a path-change run: the first stream's samples and tuner changes, and
/// when the path changed on the report's clock (`changed_after_s` after the command
/// started, less the time before its data started).
pub fn series(report: &Report, changed_after_s: Option<f64>, change: String) -> RunSeries {
    let start = Timeline::of(report).data_start_s;
    let first = report.end.tcptune.streams.first();
    RunSeries {
        change_at_s: changed_after_s.map(|t| t - start),
        change,
        sender: first.map(|s| s.sender.samples.clone()).unwrap_or_default(),
        receiver: first
            .map(|s| s.receiver.samples.clone())
            .unwrap_or_default(),
        sender_changes: first.map(|s| s.sender.changes.clone()).unwrap_or_default(),
        receiver_changes: first
            .map(|s| s.receiver.changes.clone())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{CellKey, HostConfig};

    fn second_record() -> RunRecord {
        let key = CellKey::new(25_000, HostConfig::Untuned, 1, "auto");
        RunRecord::failed(key, 1, 0.0, 0.0, String::new())
    }

    /// `n` one-second intervals of `mbit` each.
    fn steady(n: usize, mbit: f64) -> Vec<(f64, f64, u64)> {
        (0..n)
            .map(|i| (i as f64, i as f64 + 1.0, (mbit * 1e6 / 8.0) as u64))
            .collect()
    }

    #[test]
    fn jain_is_one_for_equal_shares_and_one_over_n_for_a_hog() {
        assert_eq!(jain(&[5.0, 5.0]), Some(1.0));
        assert_eq!(jain(&[10.0, 0.0]), Some(0.5));
        assert_eq!(jain(&[3.0, 0.0, 0.0]).map(|j| (j * 3.0).round()), Some(1.0));
        assert_eq!(jain(&[]), None);
        assert_eq!(jain(&[0.0, 0.0]), None);
    }

    #[test]
    fn rate_between_counts_the_inside_part_of_each_interval() {
        let t = Timeline {
            intervals: steady(4, 80.0),
            ..Timeline::default()
        };
        let r = t.rate_between(0.5, 2.5).unwrap_or_default();
        assert!((r - 80e6).abs() < 1.0, "{r}");
        assert_eq!(t.rate_between(2.0, 2.0), None);
        assert_eq!(t.end_s(), 4.0);
    }

    #[test]
    fn competing_halves_share_the_overlap_equally() {
        // First: 2 s alone at 100 Mbit/s, then 4 s at 50; second from 2 s on, 4 s at 50.
        let mut first = steady(2, 100.0);
        first.extend(
            steady(4, 50.0)
                .into_iter()
                .map(|(s, e, b)| (s + 2.0, e + 2.0, b)),
        );
        let first = Timeline {
            data_start_s: 0.5,
            intervals: first,
            stream_bps: vec![66e6],
        };
        let second = Timeline {
            data_start_s: 0.5,
            intervals: steady(4, 50.0),
            stream_bps: vec![50e6],
        };
        let c = competing(&first, &second, 2.0, second_record());
        assert_eq!(c.overlap_s, [2.0, 6.0]);
        assert!((c.overlap_bps[0] - 50e6).abs() < 1.0, "{:?}", c.overlap_bps);
        assert!((c.overlap_bps[1] - 50e6).abs() < 1.0, "{:?}", c.overlap_bps);
        assert_eq!(c.jain_transfers.map(|j| (j * 1000.0).round()), Some(1000.0));
        assert!(c.jain_streams.is_some_and(|j| j < 1.0 && j > 0.9));
        assert!(c.alone_bps.is_some_and(|a| (a - 100e6).abs() < 1.0));
        assert_eq!(c.second_at_s, 2.0);
        // 4 s of overlap: too short for the settled window (2 s to settle, 4 s measured).
        assert_eq!(c.settled_bps, None);
        assert_eq!(c.jain_settled, None);
    }

    #[test]
    fn the_settled_window_skips_the_latecomers_first_two_seconds() {
        // First: 2 s alone at 100, then 6 s at 50; second from 2 s: 2 s at 10, 4 s at 50.
        let mut first = steady(2, 100.0);
        first.extend(
            steady(6, 50.0)
                .into_iter()
                .map(|(s, e, b)| (s + 2.0, e + 2.0, b)),
        );
        let mut second = steady(2, 10.0);
        second.extend(
            steady(4, 50.0)
                .into_iter()
                .map(|(s, e, b)| (s + 2.0, e + 2.0, b)),
        );
        let first = Timeline {
            intervals: first,
            ..Timeline::default()
        };
        let second = Timeline {
            intervals: second,
            ..Timeline::default()
        };
        let c = competing(&first, &second, 2.0, second_record());
        assert!(
            c.jain_transfers.is_some_and(|j| j < 0.99),
            "{:?}",
            c.jain_transfers
        );
        let s = c.settled_bps.expect("a settled window");
        assert!(
            (s[0] - 50e6).abs() < 1.0 && (s[1] - 50e6).abs() < 1.0,
            "{s:?}"
        );
        assert_eq!(c.jain_settled.map(|j| (j * 1000.0).round()), Some(1000.0));
    }

    #[test]
    fn second_transfer_after_the_first_ended_has_no_overlap_and_no_index() {
        let first = Timeline {
            intervals: steady(2, 10.0),
            ..Timeline::default()
        };
        let second = Timeline {
            intervals: steady(2, 10.0),
            ..Timeline::default()
        };
        let c = competing(&first, &second, 3.0, second_record());
        assert_eq!(c.overlap_bps, [0.0, 0.0]);
        assert_eq!(c.jain_transfers, None);
        assert_eq!(c.overlap_s[0], c.overlap_s[1]);
    }

    #[test]
    fn change_text_names_what_changes() {
        assert_eq!(
            change_text(25_000, Rate::mbit(40), Some(100_000), None),
            "rtt 25ms -> 100ms"
        );
        let both = change_text(25_000, Rate::mbit(40), Some(2_000), Some(Rate::mbit(10)));
        assert!(both.starts_with("rtt 25ms -> 2ms, rate "), "{both}");
        assert!(both.contains("->"), "{both}");
    }
}
