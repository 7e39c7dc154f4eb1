//! The headline: how `auto` does on every path and stream count, against `ideal` (the best
//! fixed size, user/kernel tuning), against `kernel` (Linux autotuning) under the namespace's
//! default limits and against the physical limit, on a path it has never seen (an empty
//! path database) and, where the plan has them, on a known path (a warm database).
//!
//! Every figure is timed from the client command's start to the last byte's arrival at the
//! receiver, for every mode alike ([`crate::record`]); the receiver's first-byte-to-last
//! figure is shown beside it under that name. The physical limit ([`crate::limit`]) is the
//! best completion any TCP sender could reach on the path.
//!
//! Goals, per row: `auto` at least 0.95 x `ideal` (completion at most 1/0.95 of ideal's),
//! never later than `kernel`, and memory no more than 2 x BDP. Memory is compared like with
//! like: the kernel-held peak (`sk_sndbuf`/`sk_rcvbuf`, the larger end, summed over streams)
//! is halved into `setsockopt` units (the kernel stores twice what `setsockopt` asks for), and
//! that is what must stay within 2 x BDP: the size the classic manual rule would ask for. The
//! buffer sizes are limits the kernel may fill; the memory actually in use at the peak
//! (`sk_wmem_queued`, `sk_rmem_alloc`) is reported beside them but not judged.

use crate::aggregate::{Aggregate, CellStats};
use crate::plan::{CellKey, ExpandedPlan, HostConfig, PathKnowledge};
use serde::{Deserialize, Serialize};

/// Throughput goal: `auto` at least this fraction of `ideal`.
pub const THROUGHPUT_GOAL: f64 = 0.95;
/// Memory goal: `auto`'s peak buffer, in `setsockopt` units, at most this many BDPs.
pub const MEMORY_GOAL_BDP: f64 = 2.0;

/// One mode's figures in a row (medians over repetitions).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModeFigures {
    /// The cell's mode (`auto`, `kernel`, or the fixed size that won `ideal`).
    pub tune: String,
    /// Host configuration it ran under.
    pub host: HostConfig,
    /// Throughput from the command's start to the last byte at the receiver, bit/s.
    pub bps: f64,
    /// Completion time from the command's start to the last byte at the receiver, s.
    pub completion_s: f64,
    /// Throughput from the receiver's first byte to its last, bit/s.
    pub first_to_last_bps: f64,
    /// Streams it actually used (tuners may open more than asked).
    pub streams_used: f64,
    /// Where its path rate came from (`in_band`, `path_db`, `probe`, `none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurement_source: Option<String>,
    /// Round trips from the command's start to the first data byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_round_trips: Option<f64>,
    /// Round trips from the last byte's arrival to the command's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_round_trips: Option<f64>,
    /// Peak kernel-held buffer (larger end, all streams), bytes.
    pub peak_buffer_bytes: u64,
    /// Peak memory in use (`sk_wmem_queued` or `sk_rmem_alloc`, larger end), bytes.
    pub peak_used_bytes: u64,
    /// Runs behind the medians.
    pub runs: usize,
}

impl ModeFigures {
    fn of(s: &CellStats) -> ModeFigures {
        ModeFigures {
            tune: s.key.tune.clone(),
            host: s.key.host,
            bps: s.throughput_bps.median,
            completion_s: s.completion_s.median,
            first_to_last_bps: s.first_to_last_bps.median,
            streams_used: s.streams_used.median,
            measurement_source: s.measurement_source.clone(),
            setup_round_trips: s.setup_round_trips.map(|x| x.median),
            finish_round_trips: s.finish_round_trips.map(|x| x.median),
            peak_buffer_bytes: s.peak_buffer_bytes.median as u64,
            peak_used_bytes: s.peak_used_bytes.median as u64,
            runs: s.runs,
        }
    }
}

/// One path, stream count and state of the path database.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeadlineRow {
    /// Round-trip time, ms.
    pub rtt_ms: f64,
    /// Streams requested.
    pub streams: u32,
    /// A path never seen (empty database) or a known one (warm).
    pub path: PathKnowledge,
    /// Bandwidth-delay product of the path, bytes.
    pub bdp_bytes: u64,
    /// Bytes per transfer.
    pub bytes: u64,
    /// The physical limit: the best completion time any TCP sender could reach, seconds.
    pub limit_s: f64,
    /// The same as a throughput over the completion time, bit/s.
    pub limit_bps: f64,
    /// `auto`.
    pub auto: Option<ModeFigures>,
    /// `ideal`: the best fixed size of the sweep (user/kernel tuning).
    pub ideal: Option<ModeFigures>,
    /// `kernel` under the namespace's default limits.
    pub kernel: Option<ModeFigures>,
    /// `auto` / `ideal` (throughput from the command's start).
    pub auto_over_ideal: Option<f64>,
    /// `auto` / `kernel`.
    pub auto_over_kernel: Option<f64>,
    /// `auto` / `ideal` on the receiver's first-to-last throughput.
    pub auto_over_ideal_first_to_last: Option<f64>,
    /// Physical limit / `auto`'s completion time (1: as fast as physics allows).
    pub auto_of_limit: Option<f64>,
    /// Physical limit / `ideal`'s completion time.
    pub ideal_of_limit: Option<f64>,
    /// Physical limit / `kernel`'s completion time.
    pub kernel_of_limit: Option<f64>,
    /// `auto`'s memory / `ideal`'s (kernel-held peaks).
    pub auto_mem_over_ideal: Option<f64>,
    /// `auto`'s peak in `setsockopt` units (kernel-held / 2) over the BDP.
    pub auto_mem_bdp: Option<f64>,
    /// `auto` >= 0.95 x `ideal`.
    pub throughput_goal_met: Option<bool>,
    /// `auto` finished no later than `kernel`.
    pub kernel_goal_met: Option<bool>,
    /// `auto_mem_bdp` <= 2.
    pub memory_goal_met: Option<bool>,
}

/// The headline of a lab.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Headline {
    /// One row per path and stream count where `auto` ran (new paths first, then known).
    pub rows: Vec<HeadlineRow>,
    /// Rows meeting every goal.
    pub goals_met: usize,
    /// Rows that could be judged (auto, ideal and kernel all measured).
    pub judged: usize,
    /// Plain sentences: where a goal is not met and by how much.
    pub shortfalls: Vec<String>,
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// Compute the headline.
pub fn headline(plan: &ExpandedPlan, agg: &Aggregate) -> Headline {
    let mut h = Headline::default();
    let p = &plan.plan;
    for path in [PathKnowledge::New, PathKnowledge::Known] {
        for &rtt in &p.rtts_us {
            for &n in &p.streams {
                let auto = [HostConfig::Untuned, HostConfig::KernelOnly]
                    .into_iter()
                    .find_map(|host| {
                        agg.cell(&CellKey {
                            path,
                            ..CellKey::new(rtt, host, n, "auto")
                        })
                    });
                let Some(auto) = auto else {
                    continue;
                };
                let ideal = agg.ideal.get(&(rtt, n));
                let kernel = agg.get(rtt, HostConfig::Untuned, n, "kernel");
                let row = row(plan, rtt, n, path, auto, ideal.map(|i| &i.stats), kernel);
                judge(&mut h, &row);
                h.rows.push(row);
            }
        }
    }
    h
}

fn row(
    plan: &ExpandedPlan,
    rtt: u64,
    n: u32,
    path: PathKnowledge,
    auto: &CellStats,
    ideal: Option<&CellStats>,
    kernel: Option<&CellStats>,
) -> HeadlineRow {
    let p = &plan.plan;
    let bdp = p.bdp(rtt);
    let bytes = p.transfer_bytes();
    let limit_s = crate::limit::limit_s(p.rate, p.mtu, rtt, bytes);
    let (a, i, k) = (
        ModeFigures::of(auto),
        ideal.map(ModeFigures::of),
        kernel.map(ModeFigures::of),
    );
    let bps = |m: &Option<ModeFigures>| m.as_ref().map(|m| m.bps);
    let of_limit = |m: Option<&ModeFigures>| {
        m.filter(|m| m.completion_s > 0.0)
            .map(|m| limit_s / m.completion_s)
    };
    let auto_over_ideal = ratio(Some(a.bps), bps(&i));
    let auto_buf = a.peak_buffer_bytes as f64;
    let auto_mem_bdp = auto_buf / 2.0 / bdp.0.max(1) as f64;
    HeadlineRow {
        rtt_ms: rtt as f64 / 1000.0,
        streams: n,
        path,
        bdp_bytes: bdp.0,
        bytes,
        limit_s,
        limit_bps: bytes as f64 * 8.0 / limit_s,
        auto_over_ideal,
        auto_over_kernel: ratio(Some(a.bps), bps(&k)),
        auto_over_ideal_first_to_last: ratio(
            Some(a.first_to_last_bps),
            i.as_ref().map(|m| m.first_to_last_bps),
        ),
        auto_of_limit: of_limit(Some(&a)),
        ideal_of_limit: of_limit(i.as_ref()),
        kernel_of_limit: of_limit(k.as_ref()),
        auto_mem_over_ideal: ratio(
            Some(auto_buf),
            i.as_ref().map(|m| m.peak_buffer_bytes as f64),
        ),
        auto_mem_bdp: Some(auto_mem_bdp),
        throughput_goal_met: auto_over_ideal.map(|r| r >= THROUGHPUT_GOAL),
        kernel_goal_met: k.as_ref().map(|k| a.completion_s <= k.completion_s),
        memory_goal_met: Some(auto_mem_bdp <= MEMORY_GOAL_BDP),
        auto: Some(a),
        ideal: i,
        kernel: k,
    }
}

fn judge(h: &mut Headline, row: &HeadlineRow) {
    let n = row.streams;
    let path = format!(
        "RTT {} ms, {} stream{}, {} path",
        row.rtt_ms,
        n,
        plural(n),
        match row.path {
            PathKnowledge::New => "new",
            PathKnowledge::Known => "known",
        }
    );
    let goals = [
        row.throughput_goal_met,
        row.kernel_goal_met,
        row.memory_goal_met,
    ];
    if goals.iter().all(Option::is_some) {
        h.judged += 1;
        if goals.iter().all(|g| *g == Some(true)) {
            h.goals_met += 1;
        }
    }
    let bps = |m: &Option<ModeFigures>| m.as_ref().map(|m| m.bps);
    if let (Some(false), Some(r)) = (row.throughput_goal_met, row.auto_over_ideal) {
        h.shortfalls.push(format!(
            "{path}: auto reached {:.3} of ideal ({} vs {}, from the command's start), below the {THROUGHPUT_GOAL} goal",
            r,
            fmt_mbps(bps(&row.auto)),
            fmt_mbps(bps(&row.ideal))
        ));
    }
    if let (Some(false), Some(a), Some(k)) = (row.kernel_goal_met, &row.auto, &row.kernel) {
        h.shortfalls.push(format!(
            "{path}: auto finished after kernel autotuning ({:.2} s vs {:.2} s)",
            a.completion_s, k.completion_s
        ));
    }
    if let (Some(false), Some(m)) = (row.memory_goal_met, row.auto_mem_bdp) {
        h.shortfalls.push(format!(
            "{path}: auto held {m:.1} x BDP of buffer (setsockopt units), above the {MEMORY_GOAL_BDP} x BDP goal"
        ));
    }
    if row.ideal.is_none() {
        h.shortfalls.push(format!(
            "{path}: no ideal measured (no fixed-size sweep under user_kernel), goal not judged"
        ));
    }
    if row.kernel.is_none() {
        h.shortfalls.push(format!(
            "{path}: no kernel autotuning run under the default limits, goal not judged"
        ));
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `412 Mbit/s`, or `-`.
pub fn fmt_mbps(bps: Option<f64>) -> String {
    match bps {
        Some(b) if b >= 100e6 => format!("{:.0} Mbit/s", b / 1e6),
        Some(b) if b >= 10e6 => format!("{:.1} Mbit/s", b / 1e6),
        Some(b) => format!("{:.2} Mbit/s", b / 1e6),
        None => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::aggregate;
    use crate::aggregate::tests::run;
    use crate::plan::Plan;

    fn plan() -> ExpandedPlan {
        let mut p = Plan::quick();
        p.rtts_us = vec![25_000];
        p.streams = vec![1];
        p.expand()
    }

    #[test]
    fn auto_close_to_ideal_and_ahead_of_kernel_with_small_buffers_meets_every_goal() {
        let bdp = 3_125_000u64;
        let mut a = run(25_000, HostConfig::Untuned, 1, "auto", 1, 900.0, 3 * bdp);
        a.streams_used = 2;
        let recs = [
            a,
            run(25_000, HostConfig::Untuned, 1, "kernel", 1, 450.0, 4 * bdp),
            run(
                25_000,
                HostConfig::UserKernel,
                1,
                "fixed:4194304",
                1,
                920.0,
                8 << 20,
            ),
        ];
        let h = headline(&plan(), &aggregate(&recs));
        assert_eq!(h.rows.len(), 1);
        let r = &h.rows[0];
        let auto = r.auto.as_ref().expect("auto");
        assert_eq!(auto.host, HostConfig::Untuned);
        assert_eq!(auto.streams_used, 2.0, "the streams auto really used");
        assert!((r.auto_over_ideal.unwrap_or(0.0) - 900.0 / 920.0).abs() < 1e-9);
        assert_eq!(r.auto_over_kernel, Some(2.0));
        // Kernel-held 3 BDP at the larger end is 1.5 BDP in setsockopt units.
        assert_eq!(r.auto_mem_bdp, Some(1.5));
        assert_eq!(
            (r.throughput_goal_met, r.kernel_goal_met, r.memory_goal_met),
            (Some(true), Some(true), Some(true))
        );
        assert_eq!((h.goals_met, h.judged), (1, 1));
        assert!(h.shortfalls.is_empty(), "{:?}", h.shortfalls);
        // The physical limit: 2.5 RTT plus 128 MiB at 96.5% of 1 Gbit/s.
        assert!(
            (r.limit_s - (0.0625 + 1.1123)).abs() < 0.001,
            "{}",
            r.limit_s
        );
        let of = r.auto_of_limit.expect("fraction of the limit");
        assert!((of - r.limit_s / auto.completion_s).abs() < 1e-12);
        assert!(of < 1.0);
        // The receiver's span is shown beside, under its own name.
        assert!(auto.first_to_last_bps > auto.bps);
    }

    #[test]
    fn shortfalls_say_where_and_by_how_much() {
        let bdp = 3_125_000u64;
        let recs = [
            run(25_000, HostConfig::Untuned, 1, "auto", 1, 500.0, 10 * bdp),
            run(25_000, HostConfig::Untuned, 1, "kernel", 1, 600.0, 10 * bdp),
            run(
                25_000,
                HostConfig::UserKernel,
                1,
                "fixed:4194304",
                1,
                1000.0,
                8 << 20,
            ),
        ];
        let h = headline(&plan(), &aggregate(&recs));
        assert_eq!((h.goals_met, h.judged), (0, 1));
        assert_eq!(h.shortfalls.len(), 3, "{:?}", h.shortfalls);
        assert!(
            h.shortfalls[0].contains("0.500 of ideal"),
            "{}",
            h.shortfalls[0]
        );
        assert!(
            h.shortfalls[1].contains("after kernel"),
            "{}",
            h.shortfalls[1]
        );
        assert!(h.shortfalls[2].contains("5.0 x BDP"), "{}", h.shortfalls[2]);
    }

    #[test]
    fn known_path_rows_follow_the_new_path_rows() {
        let mut warm = run(25_000, HostConfig::Untuned, 1, "auto", 1, 950.0, 1 << 22);
        warm.cell.path = PathKnowledge::Known;
        warm.measurement_source = Some("path_db".into());
        let recs = [
            run(25_000, HostConfig::Untuned, 1, "auto", 1, 800.0, 1 << 22),
            warm,
            run(25_000, HostConfig::Untuned, 1, "kernel", 1, 600.0, 1 << 22),
        ];
        let h = headline(&plan(), &aggregate(&recs));
        assert_eq!(h.rows.len(), 2);
        assert_eq!(h.rows[0].path, PathKnowledge::New);
        assert_eq!(h.rows[1].path, PathKnowledge::Known);
        let known = h.rows[1].auto.as_ref().expect("auto");
        assert_eq!(known.measurement_source.as_deref(), Some("path_db"));
        assert!((known.bps - 950e6).abs() < 1.0);
        // The same kernel figure on both rows: kernel does not use the database.
        assert_eq!(h.rows[0].kernel, h.rows[1].kernel);
        // No ideal was measured: said, not judged.
        assert_eq!(h.judged, 0);
        assert!(h.shortfalls.iter().any(|s| s.contains("known path")));
    }
}
