//! The headline: how `auto` does on every path and stream count, against `ideal` (the best
//! fixed size, user/kernel tuning) and against `kernel` (Linux autotuning) under the
//! namespace's default limits, and how much buffer memory it holds.
//!
//! Goal: `auto` >= 0.95 x `ideal` everywhere, with memory no more than 2 x BDP. Memory is
//! compared like with like: the kernel-held peak (`sk_sndbuf`/`sk_rcvbuf`, the larger end,
//! summed over streams) is halved into `setsockopt` units (the kernel stores twice what
//! `setsockopt` asks for), and that is what must stay within 2 x BDP: the size the classic
//! manual rule would ask for. The buffer sizes are limits the kernel may fill (a receive
//! buffer fills with out-of-order data after a loss); the memory actually in use at the peak
//! (`sk_wmem_queued`, `sk_rmem_alloc`) is reported beside them but not judged.

use crate::aggregate::Aggregate;
use crate::plan::{ExpandedPlan, HostConfig};
use serde::{Deserialize, Serialize};

/// Throughput goal: `auto` at least this fraction of `ideal`.
pub const THROUGHPUT_GOAL: f64 = 0.95;
/// Memory goal: `auto`'s peak buffer, in `setsockopt` units, at most this many BDPs.
pub const MEMORY_GOAL_BDP: f64 = 2.0;

/// One path and stream count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeadlineRow {
    /// Round-trip time, ms.
    pub rtt_ms: f64,
    /// Streams requested.
    pub streams: u32,
    /// Bandwidth-delay product of the path, bytes.
    pub bdp_bytes: u64,
    /// Host configuration `auto` ran under for this row (untuned if it ran there).
    pub auto_host: HostConfig,
    /// `auto`'s median throughput, bit/s.
    pub auto_bps: Option<f64>,
    /// `ideal`'s median throughput, bit/s.
    pub ideal_bps: Option<f64>,
    /// `ideal`'s per-stream `setsockopt` size, bytes.
    pub ideal_size_bytes: Option<u64>,
    /// `kernel`'s median throughput under the namespace's default limits, bit/s.
    pub kernel_default_bps: Option<f64>,
    /// `auto` / `ideal`.
    pub auto_over_ideal: Option<f64>,
    /// `auto`'s median throughput counting its measurement (probe) and stream setup time,
    /// bit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_incl_measure_bps: Option<f64>,
    /// `auto`'s median seconds spent measuring the path before the transfer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_measure_s: Option<f64>,
    /// The same ratio with both sides' measurement and setup time counted (the sweep that
    /// found `ideal` is not charged to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_over_ideal_incl_measure: Option<f64>,
    /// `auto` / `kernel` (default limits).
    pub auto_over_kernel: Option<f64>,
    /// `auto`'s peak kernel-held buffer (larger end, all streams), bytes.
    pub auto_peak_buffer_bytes: Option<u64>,
    /// `auto`'s peak memory actually in use (`sk_wmem_queued` or `sk_rmem_alloc`, the larger
    /// end, all streams), bytes.
    pub auto_peak_used_bytes: Option<u64>,
    /// `ideal`'s peak kernel-held buffer, bytes.
    pub ideal_peak_buffer_bytes: Option<u64>,
    /// `auto`'s memory / `ideal`'s.
    pub auto_mem_over_ideal: Option<f64>,
    /// `auto`'s peak in `setsockopt` units (kernel-held / 2) over the BDP.
    pub auto_mem_bdp: Option<f64>,
    /// `auto` >= 0.95 x `ideal`.
    pub throughput_goal_met: Option<bool>,
    /// `auto_mem_bdp` <= 2.
    pub memory_goal_met: Option<bool>,
}

/// The headline of a lab.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Headline {
    /// One row per path and stream count where `auto` ran.
    pub rows: Vec<HeadlineRow>,
    /// Rows meeting both goals / rows that could be judged.
    pub goals_met: usize,
    /// Rows that could be judged (auto and ideal both measured).
    pub judged: usize,
    /// Plain sentences: where the goal is not met and by how much.
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
    for &rtt in &plan.plan.rtts_us {
        for &n in &plan.plan.streams {
            let auto_host = [HostConfig::Untuned, HostConfig::KernelOnly]
                .into_iter()
                .find(|&host| agg.get(rtt, host, n, "auto").is_some());
            let Some(auto_host) = auto_host else {
                continue;
            };
            let auto = agg.get(rtt, auto_host, n, "auto");
            let ideal = agg.ideal.get(&(rtt, n));
            let bdp = plan.plan.bdp(rtt);
            let auto_bps = auto.map(|s| s.throughput_bps.median);
            let ideal_bps = ideal.map(|p| p.stats.throughput_bps.median);
            let kernel_default_bps = agg.bps(rtt, HostConfig::Untuned, n, "kernel");
            let auto_buf = auto.map(|s| s.peak_buffer_bytes.median);
            let ideal_buf = ideal.map(|p| p.stats.peak_buffer_bytes.median);
            let auto_over_ideal = ratio(auto_bps, ideal_bps);
            let auto_mem_bdp = auto_buf.map(|b| b / 2.0 / bdp.0.max(1) as f64);
            let row = HeadlineRow {
                rtt_ms: rtt as f64 / 1000.0,
                streams: n,
                bdp_bytes: bdp.0,
                auto_host,
                auto_bps,
                ideal_bps,
                ideal_size_bytes: ideal.map(|p| p.size.0),
                kernel_default_bps,
                auto_over_ideal,
                auto_incl_measure_bps: auto
                    .and_then(|s| s.throughput_incl_measure_bps)
                    .map(|s| s.median),
                auto_measure_s: auto.and_then(|s| s.measure_s).map(|s| s.median),
                auto_over_ideal_incl_measure: ratio(
                    auto.and_then(|s| s.throughput_incl_measure_bps)
                        .map(|s| s.median),
                    ideal
                        .and_then(|p| p.stats.throughput_incl_measure_bps)
                        .map(|s| s.median),
                ),
                auto_over_kernel: ratio(auto_bps, kernel_default_bps),
                auto_peak_buffer_bytes: auto_buf.map(|b| b as u64),
                auto_peak_used_bytes: auto.map(|s| s.peak_used_bytes.median as u64),
                ideal_peak_buffer_bytes: ideal_buf.map(|b| b as u64),
                auto_mem_over_ideal: ratio(auto_buf, ideal_buf),
                auto_mem_bdp,
                throughput_goal_met: auto_over_ideal.map(|r| r >= THROUGHPUT_GOAL),
                memory_goal_met: auto_mem_bdp.map(|m| m <= MEMORY_GOAL_BDP),
            };
            let path = format!("RTT {} ms, {} stream{}", row.rtt_ms, n, plural(n));
            if let (Some(t), Some(m)) = (row.throughput_goal_met, row.memory_goal_met) {
                h.judged += 1;
                if t && m {
                    h.goals_met += 1;
                }
            }
            if let (Some(false), Some(r)) = (row.throughput_goal_met, row.auto_over_ideal) {
                h.shortfalls.push(format!(
                    "{path}: auto reached {:.3} of ideal ({} vs {}), below the {THROUGHPUT_GOAL} goal",
                    r,
                    fmt_mbps(auto_bps),
                    fmt_mbps(ideal_bps)
                ));
            }
            if let (Some(false), Some(m)) = (row.memory_goal_met, row.auto_mem_bdp) {
                h.shortfalls.push(format!(
                    "{path}: auto held {m:.1} x BDP of buffer (setsockopt units), above the {MEMORY_GOAL_BDP} x BDP goal"
                ));
            }
            if row.ideal_bps.is_none() {
                h.shortfalls.push(format!(
                    "{path}: no ideal measured (no fixed-size sweep under user_kernel), goal not judged"
                ));
            }
            h.rows.push(row);
        }
    }
    h
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
    fn auto_close_to_ideal_with_small_buffers_meets_both_goals() {
        let bdp = 3_125_000u64;
        let a = aggregate(&[
            run(25_000, HostConfig::Untuned, 1, "auto", 1, 960.0, 3 * bdp),
            run(25_000, HostConfig::Untuned, 1, "kernel", 1, 480.0, 4 * bdp),
            run(
                25_000,
                HostConfig::UserKernel,
                1,
                "fixed:4194304",
                1,
                990.0,
                8 << 20,
            ),
        ]);
        let h = headline(&plan(), &a);
        assert_eq!(h.rows.len(), 1);
        let r = &h.rows[0];
        assert_eq!(r.auto_host, HostConfig::Untuned);
        assert!((r.auto_over_ideal.unwrap_or(0.0) - 960.0 / 990.0).abs() < 1e-9);
        assert_eq!(r.auto_over_kernel, Some(2.0));
        // Kernel-held 3 BDP at the larger end is 1.5 BDP in setsockopt units.
        assert_eq!(r.auto_mem_bdp, Some(1.5));
        assert_eq!(r.throughput_goal_met, Some(true));
        assert_eq!(r.memory_goal_met, Some(true));
        assert_eq!((h.goals_met, h.judged), (1, 1));
        assert!(h.shortfalls.is_empty(), "{:?}", h.shortfalls);
    }

    #[test]
    fn shortfalls_say_where_and_by_how_much() {
        let bdp = 3_125_000u64;
        let a = aggregate(&[
            run(25_000, HostConfig::Untuned, 1, "auto", 1, 500.0, 10 * bdp),
            run(
                25_000,
                HostConfig::UserKernel,
                1,
                "fixed:4194304",
                1,
                1000.0,
                8 << 20,
            ),
        ]);
        let h = headline(&plan(), &a);
        assert_eq!((h.goals_met, h.judged), (0, 1));
        assert_eq!(h.shortfalls.len(), 2, "{:?}", h.shortfalls);
        assert!(
            h.shortfalls[0].contains("0.500 of ideal"),
            "{}",
            h.shortfalls[0]
        );
        assert!(h.shortfalls[1].contains("5.0 x BDP"), "{}", h.shortfalls[1]);
    }
}
