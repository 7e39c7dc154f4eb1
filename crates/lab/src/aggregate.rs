//! From runs to cells: median and min-max over repetitions, and `ideal` (the best fixed size
//! of a sweep) for every path and stream count.

use crate::plan::{CellKey, HostConfig};
use crate::record::RunRecord;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tcptune_core::{Bytes, TuneMode};

/// Median and range of a few numbers.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// The median (mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// How many values.
    pub n: usize,
}

impl Spread {
    /// The spread of `values` (`None` when empty; NaNs are ignored).
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }
}

/// One cell's runs, summarized. Only successful runs count in the spreads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellStats {
    /// The cell.
    pub key: CellKey,
    /// Successful runs.
    pub runs: usize,
    /// Failed runs (not in the spreads).
    pub failed: usize,
    /// Runs stopped by the time cap (throughput from the bytes that moved).
    pub capped: usize,
    /// The primary throughput: bytes over the time from the client command's start to the
    /// last byte at the receiver ([`RunRecord::throughput_bps`]), bit/s.
    pub throughput_bps: Spread,
    /// Completion time: the client command's start to the last byte at the receiver, s.
    pub completion_s: Spread,
    /// Throughput from the receiver's first byte to its last, bit/s.
    pub first_to_last_bps: Spread,
    /// Seconds spent measuring the path before the transfer (a probe phase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measure_s: Option<Spread>,
    /// Round trips before the first data byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_round_trips: Option<Spread>,
    /// Round trips after the last data byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_round_trips: Option<Spread>,
    /// Where the path's rate came from, as most runs say (`in_band`, `path_db`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurement_source: Option<String>,
    /// Kernel-held buffer, the larger end, summed over streams.
    pub peak_buffer_bytes: Spread,
    /// Kernel-held send buffers at the sender, summed over streams.
    pub peak_sndbuf_bytes: Spread,
    /// Kernel-held receive buffers at the receiver, summed over streams.
    pub peak_rcvbuf_bytes: Spread,
    /// Memory in use (`sk_wmem_queued` at the sender or `sk_rmem_alloc` at the receiver,
    /// whichever is larger), summed over streams.
    pub peak_used_bytes: Spread,
    /// Streams used.
    pub streams_used: Spread,
    /// Retransmitted segments.
    pub retransmits: Spread,
    /// Smallest RTT the senders saw, microseconds (median over runs).
    pub rtt_min_us: Option<f64>,
    /// Share of the transfer time the senders were limited by the peer's receive window
    /// (summed over streams, divided by streams x duration; median over runs).
    pub rwnd_limited_share: Option<f64>,
    /// Same, limited by their own send buffer.
    pub sndbuf_limited_share: Option<f64>,
    /// The largest window scale the receivers advertised at SYN time (`tcpi_rcv_wscale`),
    /// over every stream of every run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcv_wscale: Option<u8>,
    /// Competing runs: Jain's index of the two transfers over their overlap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jain_transfers: Option<Spread>,
    /// Competing runs: Jain's index over every stream of both transfers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jain_streams: Option<Spread>,
}

impl CellStats {
    /// Median throughput in Mbit/s.
    pub fn mbps(&self) -> f64 {
        self.throughput_bps.median / 1e6
    }
}

/// Throughputs within this fraction of the best count as ties when picking `ideal`.
pub const IDEAL_TIE: f64 = 0.03;

/// `ideal` on one path and stream count: the fixed per-stream size with the highest median
/// throughput under user/kernel tuning; sizes within [`IDEAL_TIE`] of the best median count as
/// ties and the smallest of them wins (run-to-run noise is about that large, and the smaller
/// buffer is the better answer to "what size is enough").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IdealPick {
    /// Per-stream `setsockopt` value of the winner.
    pub size: Bytes,
    /// The winner's statistics.
    pub stats: CellStats,
    /// Sizes tried.
    pub candidates: Vec<Bytes>,
    /// The winner is the smallest or largest size tried: the sweep may be too narrow.
    pub at_edge: bool,
}

/// Everything the report needs, computed from the runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    /// Every cell with at least one successful run.
    pub cells: BTreeMap<CellKey, CellStats>,
    /// Cells whose every run failed, with the last error.
    pub failed_cells: BTreeMap<CellKey, String>,
    /// Cells not run in the lab's mode, with why (see [`crate::feasible`]).
    #[serde(default)]
    pub not_run: BTreeMap<CellKey, String>,
    /// `ideal` per (RTT in microseconds, streams).
    pub ideal: BTreeMap<(u64, u32), IdealPick>,
}

fn share(limited_us: u64, streams: u32, seconds: f64) -> Option<f64> {
    (seconds > 0.0 && streams > 0).then(|| limited_us as f64 / 1e6 / (seconds * f64::from(streams)))
}

/// Summarize the runs.
pub fn aggregate(records: &[RunRecord]) -> Aggregate {
    let mut by_cell: BTreeMap<CellKey, Vec<&RunRecord>> = BTreeMap::new();
    let mut agg = Aggregate::default();
    for r in records {
        match &r.not_run {
            Some(why) => {
                agg.not_run.insert(r.cell.clone(), why.clone());
            }
            None => by_cell.entry(r.cell.clone()).or_default().push(r),
        }
    }
    for (key, runs) in by_cell {
        let ok: Vec<&RunRecord> = runs.iter().copied().filter(|r| r.ok).collect();
        let failed = runs.len() - ok.len();
        let f = |g: &dyn Fn(&RunRecord) -> f64| Spread::of(ok.iter().map(|r| g(r)));
        let Some(throughput_bps) = f(&|r| r.throughput_bps()) else {
            let err = runs
                .iter()
                .rev()
                .find_map(|r| r.error.clone())
                .unwrap_or_else(|| "no successful run".into());
            agg.failed_cells.insert(key, err);
            continue;
        };
        let zero = Spread {
            median: 0.0,
            min: 0.0,
            max: 0.0,
            n: 0,
        };
        let stats = CellStats {
            runs: ok.len(),
            failed,
            capped: ok.iter().filter(|r| r.capped).count(),
            throughput_bps,
            completion_s: f(&|r| r.completion()).unwrap_or(zero),
            first_to_last_bps: f(&|r| r.first_to_last_bps).unwrap_or(zero),
            measure_s: f(&|r| r.measure_s.unwrap_or(0.0)),
            setup_round_trips: Spread::of(ok.iter().filter_map(|r| r.setup_round_trips)),
            finish_round_trips: Spread::of(ok.iter().filter_map(|r| r.finish_round_trips)),
            measurement_source: most_common(ok.iter().filter_map(|r| r.measurement_source.clone())),
            peak_buffer_bytes: f(&|r| r.peak_buffer_bytes() as f64).unwrap_or(zero),
            peak_sndbuf_bytes: f(&|r| r.peak_sndbuf_bytes as f64).unwrap_or(zero),
            peak_rcvbuf_bytes: f(&|r| r.peak_rcvbuf_bytes as f64).unwrap_or(zero),
            peak_used_bytes: f(&|r| r.peak_wmem_queued_bytes.max(r.peak_rmem_alloc_bytes) as f64)
                .unwrap_or(zero),
            streams_used: f(&|r| f64::from(r.streams_used)).unwrap_or(zero),
            retransmits: f(&|r| r.retransmits as f64).unwrap_or(zero),
            rtt_min_us: Spread::of(ok.iter().filter_map(|r| r.rtt_min_us().map(f64::from)))
                .map(|s| s.median),
            rwnd_limited_share: Spread::of(
                ok.iter()
                    .filter_map(|r| share(r.rwnd_limited_us(), r.streams_used, r.first_to_last_s)),
            )
            .map(|s| s.median),
            sndbuf_limited_share: Spread::of(
                ok.iter().filter_map(|r| {
                    share(r.sndbuf_limited_us(), r.streams_used, r.first_to_last_s)
                }),
            )
            .map(|s| s.median),
            rcv_wscale: ok
                .iter()
                .flat_map(|r| r.per_stream.iter())
                .filter_map(|s| s.receiver.stats.rcv_wscale)
                .max(),
            jain_transfers: Spread::of(
                ok.iter()
                    .filter_map(|r| r.competing.as_ref().and_then(|c| c.jain_transfers)),
            ),
            jain_streams: Spread::of(
                ok.iter()
                    .filter_map(|r| r.competing.as_ref().and_then(|c| c.jain_streams)),
            ),
            key: key.clone(),
        };
        agg.cells.insert(key, stats);
    }
    agg.ideal = pick_ideal(&agg.cells);
    agg
}

/// The value most items have (the first of equals in sorted order).
fn most_common(items: impl Iterator<Item = String>) -> Option<String> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for i in items {
        *counts.entry(i).or_insert(0) += 1;
    }
    let best = counts.values().copied().max()?;
    counts.into_iter().find(|(_, n)| *n == best).map(|(k, _)| k)
}

fn fixed_size(key: &CellKey) -> Option<Bytes> {
    match key.mode() {
        Some(TuneMode::Fixed(b)) => Some(b),
        _ => None,
    }
}

fn pick_ideal(cells: &BTreeMap<CellKey, CellStats>) -> BTreeMap<(u64, u32), IdealPick> {
    let mut groups: BTreeMap<(u64, u32), Vec<(Bytes, &CellStats)>> = BTreeMap::new();
    for (k, s) in cells {
        if k.host != HostConfig::UserKernel || !k.is_plain() {
            continue;
        }
        if let Some(b) = fixed_size(k) {
            groups
                .entry((k.rtt_us, k.streams))
                .or_default()
                .push((b, s));
        }
    }
    let mut out = BTreeMap::new();
    for (g, mut cands) in groups {
        cands.sort_by_key(|(b, _)| *b);
        let best = cands
            .iter()
            .map(|(_, s)| s.throughput_bps.median)
            .fold(f64::MIN, f64::max);
        // Smallest size within IDEAL_TIE of the best median.
        let Some(idx) = cands
            .iter()
            .position(|(_, s)| s.throughput_bps.median >= best * (1.0 - IDEAL_TIE))
        else {
            continue;
        };
        let (size, stats) = cands[idx];
        out.insert(
            g,
            IdealPick {
                size,
                stats: stats.clone(),
                candidates: cands.iter().map(|(b, _)| *b).collect(),
                at_edge: cands.len() > 1 && (idx == 0 || idx == cands.len() - 1),
            },
        );
    }
    out
}

impl Aggregate {
    /// The statistics of a mode (`"auto"`, `"fixed:65536"`, or `"ideal"`) in a cell.
    pub fn get(
        &self,
        rtt_us: u64,
        host: HostConfig,
        streams: u32,
        mode: &str,
    ) -> Option<&CellStats> {
        if mode == "ideal" {
            return (host == HostConfig::UserKernel)
                .then(|| self.ideal.get(&(rtt_us, streams)).map(|p| &p.stats))
                .flatten();
        }
        self.cells
            .get(&CellKey::new(rtt_us, host, streams, mode.to_string()))
    }

    /// Median throughput of a mode in a cell, bit/s.
    pub fn bps(&self, rtt_us: u64, host: HostConfig, streams: u32, mode: &str) -> Option<f64> {
        self.get(rtt_us, host, streams, mode)
            .map(|s| s.throughput_bps.median)
    }

    /// A line of the throughput-vs-streams figure: (streams, stats) in stream order.
    pub fn series(&self, rtt_us: u64, host: HostConfig, mode: &str) -> Vec<(u32, &CellStats)> {
        let mut streams: Vec<u32> = self
            .cells
            .keys()
            .filter(|k| k.rtt_us == rtt_us && k.host == host && k.is_plain())
            .map(|k| k.streams)
            .collect();
        streams.sort_unstable();
        streams.dedup();
        streams
            .into_iter()
            .filter_map(|n| self.get(rtt_us, host, n, mode).map(|s| (n, s)))
            .collect()
    }

    /// Figure 5's curve: (per-stream size, stats) of every fixed size under user/kernel
    /// tuning on one path and stream count, by size.
    pub fn sweep(&self, rtt_us: u64, streams: u32) -> Vec<(Bytes, &CellStats)> {
        let mut v: Vec<(Bytes, &CellStats)> = self
            .cells
            .iter()
            .filter(|(k, _)| {
                k.rtt_us == rtt_us
                    && k.streams == streams
                    && k.host == HostConfig::UserKernel
                    && k.is_plain()
            })
            .filter_map(|(k, s)| fixed_size(k).map(|b| (b, s)))
            .collect();
        v.sort_by_key(|(b, _)| *b);
        v
    }

    /// The statistics of any cell, extra experiments' included.
    pub fn cell(&self, key: &CellKey) -> Option<&CellStats> {
        self.cells.get(key)
    }

    /// Every RTT with results of plain matrix cells, ascending.
    pub fn rtts(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .cells
            .keys()
            .filter(|k| k.is_plain())
            .map(|k| k.rtt_us)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Every stream count with results of plain matrix cells, ascending.
    pub fn stream_counts(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .cells
            .keys()
            .filter(|k| k.is_plain())
            .map(|k| k.streams)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::record::RunRecord;

    /// A successful fixture run.
    pub(crate) fn run(
        rtt_us: u64,
        host: HostConfig,
        streams: u32,
        tune: &str,
        rep: u32,
        mbps: f64,
        buf: u64,
    ) -> RunRecord {
        let mut r = RunRecord::failed(
            CellKey::new(rtt_us, host, streams, tune),
            rep,
            0.0,
            1.0,
            String::new(),
        );
        r.ok = true;
        r.error = None;
        r.bytes = 128 << 20;
        // The primary figure is `mbps`; the receiver's first-to-last span is 90% of it.
        r.completion_s = Some(r.bytes as f64 * 8.0 / (mbps * 1e6));
        r.first_to_last_s = r.completion_s.unwrap_or(0.0) * 0.9;
        r.first_to_last_bps = r.bytes as f64 * 8.0 / r.first_to_last_s;
        r.session_s = r.completion_s;
        r.setup_round_trips = Some(2.0);
        r.finish_round_trips = Some(1.0);
        r.complete = true;
        r.streams_used = streams;
        r.peak_sndbuf_bytes = buf;
        r.peak_rcvbuf_bytes = buf / 2;
        r
    }

    /// A successful fixture run of any cell (extra experiments' included).
    pub(crate) fn run_cell(key: &CellKey, rep: u32, mbps: f64, buf: u64) -> RunRecord {
        let mut r = run(key.rtt_us, key.host, key.streams, &key.tune, rep, mbps, buf);
        r.cell = key.clone();
        r
    }

    #[test]
    fn spread_takes_median_and_range() {
        let s = Spread::of([3.0, 1.0, 2.0]).expect("values");
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        let s = Spread::of([4.0, 1.0, 2.0, 3.0]).expect("values");
        assert_eq!(s.median, 2.5);
        assert!(Spread::of([]).is_none());
        assert_eq!(Spread::of([f64::NAN, 1.0]).map(|s| s.n), Some(1));
    }

    #[test]
    fn repetitions_fold_into_median_and_failures_are_excluded() {
        let u = HostConfig::Untuned;
        let mut recs = vec![
            run(25_000, u, 1, "kernel", 1, 100.0, 1000),
            run(25_000, u, 1, "kernel", 2, 300.0, 3000),
            run(25_000, u, 1, "kernel", 3, 200.0, 2000),
        ];
        let mut bad = run(25_000, u, 1, "kernel", 4, 999.0, 9);
        bad.ok = false;
        recs.push(bad);
        let mut lost = run(25_000, u, 1, "auto", 1, 1.0, 1);
        lost.ok = false;
        lost.error = Some("engine crashed".into());
        recs.push(lost);
        let a = aggregate(&recs);
        let s = a.get(25_000, u, 1, "kernel").expect("cell");
        assert_eq!(s.runs, 3);
        assert_eq!(s.failed, 1);
        assert_eq!(s.throughput_bps.median, 200e6);
        assert_eq!(s.throughput_bps.min, 100e6);
        assert_eq!(s.throughput_bps.max, 300e6);
        assert_eq!(s.peak_buffer_bytes.median, 2000.0);
        assert!(a.get(25_000, u, 1, "auto").is_none());
        assert_eq!(
            a.failed_cells.values().next().map(String::as_str),
            Some("engine crashed")
        );
    }

    #[test]
    fn ideal_is_the_best_fixed_size_with_ties_going_to_the_smaller() {
        let uk = HostConfig::UserKernel;
        let recs = vec![
            run(500, uk, 1, "fixed:65536", 1, 400.0, 1 << 17),
            run(500, uk, 1, "fixed:262144", 1, 700.0, 1 << 19),
            run(500, uk, 1, "fixed:1048576", 1, 900.0, 1 << 21),
            run(500, uk, 1, "fixed:4194304", 1, 920.0, 1 << 23),
            run(500, uk, 1, "fixed:16777216", 1, 850.0, 1 << 25),
            // Another host configuration never competes.
            run(500, HostConfig::Untuned, 1, "fixed:8388608", 1, 990.0, 1),
        ];
        let a = aggregate(&recs);
        let p = a.ideal.get(&(500, 1)).expect("ideal");
        assert_eq!(p.size, Bytes::mib(1));
        assert!(!p.at_edge);
        assert_eq!(p.candidates.len(), 5);
        assert_eq!(a.bps(500, uk, 1, "ideal"), Some(900e6));
        assert!(a.get(500, HostConfig::Untuned, 1, "ideal").is_none());
        let sweep = a.sweep(500, 1);
        assert_eq!(sweep.len(), 5);
        assert_eq!(sweep[0].0, Bytes::kib(64));
    }

    #[test]
    fn ideal_at_the_largest_size_is_flagged_as_edge() {
        let uk = HostConfig::UserKernel;
        let a = aggregate(&[
            run(100_000, uk, 1, "fixed:1048576", 1, 80.0, 1),
            run(100_000, uk, 1, "fixed:2097152", 1, 160.0, 1),
        ]);
        assert!(a
            .ideal
            .get(&(100_000, 1))
            .map(|p| p.at_edge)
            .unwrap_or(false));
    }

    #[test]
    fn series_lists_stream_counts_in_order() {
        let u = HostConfig::Untuned;
        let a = aggregate(&[
            run(500, u, 4, "none", 1, 40.0, 1),
            run(500, u, 1, "none", 1, 10.0, 1),
            run(500, u, 2, "none", 1, 20.0, 1),
        ]);
        let s: Vec<(u32, f64)> = a
            .series(500, u, "none")
            .into_iter()
            .map(|(n, s)| (n, s.mbps()))
            .collect();
        assert_eq!(s, vec![(1, 10.0), (2, 20.0), (4, 40.0)]);
    }
}
