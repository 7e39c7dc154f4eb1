//! Every claim fed data that holds it and data that refutes it: no check that cannot fail.

use super::*;
use crate::aggregate::aggregate;
use crate::aggregate::tests::{run, run_cell};
use crate::plan::{CellKey, HostConfig, PathKnowledge, Plan, Scenario};
use crate::record::{Competing, RunRecord};

const U: HostConfig = HostConfig::Untuned;
const K: HostConfig = HostConfig::KernelOnly;
const UK: HostConfig = HostConfig::UserKernel;

fn verdict_of(recs: &[RunRecord], id: &str) -> Claim {
    let cs = claims(&Plan::full().expand(), &aggregate(recs));
    cs.into_iter().find(|c| c.id == id).expect("claim present")
}

/// `id` holds on `good` and is refuted on `bad`.
fn holds_and_refuted(id: &str, good: &[RunRecord], bad: &[RunRecord]) -> (Claim, Claim) {
    let g = verdict_of(good, id);
    assert_eq!(
        g.verdict,
        Verdict::Holds,
        "{id} on holding data: {}",
        g.measured
    );
    let b = verdict_of(bad, id);
    assert_eq!(
        b.verdict,
        Verdict::Refuted,
        "{id} on refuting data: {}",
        b.measured
    );
    assert!(!g.rule.is_empty() && !b.cases.is_empty());
    (g, b)
}

fn r(rtt: u64, host: HostConfig, n: u32, mode: &str, mbps: f64) -> RunRecord {
    run(rtt, host, n, mode, 1, mbps, 1 << 20)
}

fn cc(rtt: u64, host: HostConfig, n: u32, mode: &str, control: &str, mbps: f64) -> RunRecord {
    let k = CellKey {
        cc: (control != "cubic").then(|| control.to_string()),
        ..CellKey::new(rtt, host, n, mode)
    };
    run_cell(&k, 1, mbps, 1 << 20)
}

#[test]
fn every_claim_without_data_says_not_measured_except_references() {
    let cs = claims(&Plan::full().expand(), &aggregate(&[]));
    assert!(cs.len() >= 20);
    for c in &cs {
        assert_eq!(c.verdict, Verdict::NotMeasured, "{}: {}", c.id, c.measured);
        assert!(c.measured.contains("needs"), "{}", c.measured);
    }
    let mut ids: Vec<&str> = cs.iter().map(|c| c.id.as_str()).collect();
    ids.sort_unstable();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "unique ids");
}

#[test]
fn autotuning_vs_fixed_is_judged_per_stream_count_and_partly_names_the_cases() {
    let good = [
        r(500, U, 1, "kernel", 900.0),
        r(500, U, 1, "none", 500.0),
        r(500, U, 4, "kernel", 950.0),
        r(500, U, 4, "none", 700.0),
    ];
    let bad = [r(500, U, 1, "kernel", 520.0), r(500, U, 1, "none", 500.0)];
    let (g, _) = holds_and_refuted("autotuning-vs-fixed", &good, &bad);
    assert!(g.caveat.as_deref().is_some_and(|c| c.contains("64 KiB")));
    let mixed = [
        r(500, U, 1, "kernel", 900.0),
        r(500, U, 1, "none", 500.0),
        r(500, U, 4, "kernel", 720.0),
        r(500, U, 4, "none", 700.0),
    ];
    let m = verdict_of(&mixed, "autotuning-vs-fixed");
    assert_eq!(m.verdict, Verdict::Partly);
    assert!(
        m.measured.starts_with("holds for 1 of 2 cases: 0.5 ms P=1"),
        "{}",
        m.measured
    );
    assert!(
        m.measured.contains("Refuted for: 0.5 ms P=4"),
        "{}",
        m.measured
    );
}

#[test]
fn parallel_streams_must_gain_about_as_much_as_the_paper_says() {
    holds_and_refuted(
        "parallel-low-delay",
        &[r(500, U, 1, "none", 100.0), r(500, U, 4, "none", 160.0)],
        &[r(500, U, 1, "none", 100.0), r(500, U, 4, "none", 110.0)],
    );
}

#[test]
fn best_buffer_far_above_the_bdp_needs_a_wide_sweep() {
    let sweep = |peak: u64| -> Vec<RunRecord> {
        let mut v = Vec::new();
        let mut size = 8 << 10;
        while size <= 64 << 20 {
            let mbps = if size == peak { 900.0 } else { 500.0 };
            v.push(r(500, UK, 1, &format!("fixed:{size}"), mbps));
            size *= 2;
        }
        v
    };
    let (g, b) = holds_and_refuted("ideal-above-bdp", &sweep(1 << 20), &sweep(64 << 10));
    assert!(g.measured.contains("16.8 x BDP"), "{}", g.measured);
    assert!(b.measured.contains("1.0 x BDP"), "{}", b.measured);
    // A sweep that stops below 32 x BDP cannot show it: not judged.
    let narrow = [
        r(500, UK, 1, "fixed:65536", 500.0),
        r(500, UK, 1, "fixed:131072", 900.0),
    ];
    assert_eq!(
        verdict_of(&narrow, "ideal-above-bdp").verdict,
        Verdict::NotMeasured
    );
}

#[test]
fn per_stream_ideal_must_exceed_bdp_over_streams_by_a_power_of_two() {
    // 25 ms, 2 streams: BDP/2 = 1.56 MB.
    let sweep = |best: u64| -> Vec<RunRecord> {
        [1u64 << 20, 2 << 20, 4 << 20, 8 << 20]
            .into_iter()
            .map(|s| {
                r(
                    25_000,
                    UK,
                    2,
                    &format!("fixed:{s}"),
                    if s == best { 900.0 } else { 400.0 },
                )
            })
            .collect()
    };
    holds_and_refuted("per-stream-ideal", &sweep(4 << 20), &sweep(2 << 20));
}

#[test]
fn untuned_single_stream_at_25ms_is_below_20_mbit() {
    let (g, _) = holds_and_refuted(
        "untuned-25ms",
        &[r(25_000, U, 1, "none", 19.0)],
        &[r(25_000, U, 1, "kernel", 500.0)],
    );
    assert!(g.caveat.is_some(), "rests on none");
}

#[test]
fn untuned_law_compares_with_the_papers_own_constant() {
    // 2.2.20-none: 214 / 25 = 8.56 Mbit/s per process.
    let (_, b) = holds_and_refuted(
        "untuned-law",
        &[r(25_000, U, 1, "none", 8.6), r(50_000, U, 2, "none", 8.5)],
        // A 64 KiB window's 21 Mbit/s is not the paper's law, however well it fits itself.
        &[r(25_000, U, 1, "none", 21.0), r(50_000, U, 2, "none", 21.0)],
    );
    assert!(b.caveat.is_some());
    assert!(b.measured.contains("C = 524"), "{}", b.measured);
}

#[test]
fn linear_speedup_counts_saturated_paths_as_cases() {
    holds_and_refuted(
        "linear-speedup",
        &[r(25_000, U, 1, "none", 10.0), r(25_000, U, 4, "none", 40.0)],
        &[
            r(25_000, U, 1, "kernel", 600.0),
            r(25_000, U, 4, "kernel", 900.0),
        ],
    );
}

#[test]
fn drs_against_kernel_untuned_flips_with_delay() {
    holds_and_refuted(
        "drs-vs-kernel-untuned",
        &[
            r(500, U, 1, "drs", 940.0),
            r(500, U, 1, "kernel", 900.0),
            r(25_000, U, 1, "drs", 300.0),
            r(25_000, U, 1, "kernel", 400.0),
        ],
        &[
            r(500, U, 1, "drs", 880.0),
            r(500, U, 1, "kernel", 900.0),
            r(25_000, U, 1, "drs", 500.0),
            r(25_000, U, 1, "kernel", 400.0),
        ],
    );
}

#[test]
fn raised_limits_leave_kernel_unchanged_per_stream_count() {
    let (_, b) = holds_and_refuted(
        "raised-limits-kernel",
        &[
            r(100_000, U, 1, "kernel", 250.0),
            r(100_000, K, 1, "kernel", 260.0),
        ],
        &[
            r(100_000, U, 1, "kernel", 250.0),
            r(100_000, K, 1, "kernel", 800.0),
        ],
    );
    assert!(b.measured.contains("3.20"), "{}", b.measured);
}

#[test]
fn drs_with_raised_limits_needs_a_wide_margin() {
    holds_and_refuted(
        "drs-vs-kernel-raised",
        &[
            r(100_000, K, 1, "drs", 800.0),
            r(100_000, K, 1, "kernel", 100.0),
        ],
        &[
            r(100_000, K, 1, "drs", 820.0),
            r(100_000, K, 1, "kernel", 800.0),
        ],
    );
}

#[test]
fn drs_peaks_at_few_streams_and_falls() {
    let series = |pts: [f64; 4]| -> Vec<RunRecord> {
        [1u32, 2, 4, 8]
            .into_iter()
            .zip(pts)
            .map(|(n, m)| r(500, K, n, "drs", m))
            .collect()
    };
    holds_and_refuted(
        "drs-many-streams",
        &series([900.0, 880.0, 700.0, 600.0]),
        &series([600.0, 700.0, 800.0, 900.0]),
    );
}

#[test]
fn drs_at_eight_streams_is_compared_with_the_papers_mbit() {
    holds_and_refuted(
        "drs-8-streams",
        &[
            r(50_000, K, 8, "drs", 300.0),
            r(100_000, K, 8, "drs", 190.0),
        ],
        &[
            r(50_000, K, 8, "drs", 900.0),
            r(100_000, K, 8, "drs", 850.0),
        ],
    );
}

#[test]
fn hand_tuned_stacks_alike_at_high_delay_uses_the_congestion_sweep() {
    let set = |at100: [f64; 3], at25: [f64; 3]| -> Vec<RunRecord> {
        let mut v = Vec::new();
        for (i, control) in ["reno", "cubic", "bbr"].into_iter().enumerate() {
            v.push(cc(100_000, UK, 1, "manual", control, at100[i]));
            v.push(cc(25_000, UK, 1, "manual", control, at25[i]));
        }
        v
    };
    holds_and_refuted(
        "hand-tuned-high-delay",
        &set([500.0, 520.0, 510.0], [400.0, 900.0, 600.0]),
        &set([200.0, 900.0, 600.0], [880.0, 900.0, 850.0]),
    );
}

#[test]
fn tierney_rule_is_judged_against_ideal() {
    let tierney = tcptune_core::TuneMode::Manual(Some(tcptune_core::Rate::mbit(100))).to_string();
    let ideal = r(25_000, UK, 1, "fixed:4194304", 900.0);
    holds_and_refuted(
        "tierney-100mbit",
        &[ideal.clone(), r(25_000, UK, 1, &tierney, 850.0)],
        &[ideal, r(25_000, UK, 1, &tierney, 200.0)],
    );
}

#[test]
fn window_scale_claim_reads_the_receivers_scale() {
    let with_scale = |w: u8| {
        let mut rec = r(25_000, U, 1, "kernel", 500.0);
        let mut s = tcptune_transfer::report::StreamDetail {
            socket: 1,
            opened_at_s: 0.0,
            messages: 128,
            sender: Default::default(),
            receiver: Default::default(),
        };
        s.receiver.stats.rcv_wscale = Some(w);
        rec.per_stream = vec![s];
        rec
    };
    let (_, b) = holds_and_refuted("window-scale-at-syn", &[with_scale(0)], &[with_scale(7)]);
    assert!(b.measured.contains("scale of 7"), "{}", b.measured);
}

fn sized(rtt: u64, host: HostConfig, mode: &str, bytes: Option<u64>, mbps: f64) -> RunRecord {
    let k = CellKey {
        bytes,
        ..CellKey::new(rtt, host, 1, mode)
    };
    run_cell(&k, 1, mbps, 1 << 20)
}

#[test]
fn size_claims_compare_the_plans_size_with_the_largest() {
    let gib = Some(1u64 << 30);
    holds_and_refuted(
        "size-128mb-enough",
        &[
            sized(100_000, U, "auto", None, 850.0),
            sized(100_000, U, "auto", gib, 900.0),
        ],
        &[
            sized(100_000, U, "auto", None, 500.0),
            sized(100_000, U, "auto", gib, 900.0),
        ],
    );
    let three = |small: [f64; 3], large: [f64; 3]| -> Vec<RunRecord> {
        let mut v = Vec::new();
        for (i, (mode, host)) in [("kernel", U), ("auto", U), ("manual", UK)]
            .into_iter()
            .enumerate()
        {
            v.push(sized(100_000, host, mode, None, small[i]));
            v.push(sized(100_000, host, mode, gib, large[i]));
        }
        v
    };
    holds_and_refuted(
        "size-no-differentiation",
        &three([300.0, 700.0, 800.0], [320.0, 750.0, 850.0]),
        &three([300.0, 700.0, 800.0], [900.0, 750.0, 850.0]),
    );
}

#[test]
fn competing_transfers_are_fair_above_a_jain_index_of_0_9() {
    let with = |j: f64| {
        let k = CellKey {
            scenario: Some(Scenario::Competing),
            ..CellKey::new(25_000, U, 1, "auto")
        };
        let mut rec = run_cell(&k, 1, 500.0, 1 << 20);
        rec.competing = Some(Box::new(Competing {
            settled_bps: None,
            jain_settled: None,
            second: run_cell(&k, 1, 400.0, 1 << 20),
            second_at_s: 4.0,
            overlap_s: [4.0, 8.0],
            overlap_bps: [450e6, 450e6 * j],
            jain_transfers: Some(j),
            jain_streams: None,
            alone_bps: Some(900e6),
        }));
        rec
    };
    holds_and_refuted("competing-fair", &[with(0.99)], &[with(0.6)]);
}

#[test]
fn known_path_must_not_be_slower_than_a_new_one() {
    let known = |mbps: f64| {
        let k = CellKey {
            path: PathKnowledge::Known,
            ..CellKey::new(100_000, U, 1, "auto")
        };
        run_cell(&k, 1, mbps, 1 << 20)
    };
    holds_and_refuted(
        "known-path",
        &[r(100_000, U, 1, "auto", 600.0), known(800.0)],
        &[r(100_000, U, 1, "auto", 800.0), known(500.0)],
    );
}

#[test]
fn references_have_no_verdict_but_say_what_was_measured() {
    let c = verdict_of(&[r(500, U, 1, "kernel", 900.0)], "ceiling");
    assert_eq!(c.verdict, Verdict::Reference);
    assert!(c.measured.contains("physical limit"), "{}", c.measured);
    let c = verdict_of(
        &[
            cc(25_000, K, 1, "kernel", "reno", 300.0),
            cc(25_000, K, 1, "kernel", "cubic", 600.0),
        ],
        "congestion-controls",
    );
    assert_eq!(c.verdict, Verdict::Reference);
    assert!(c.measured.contains("reno 300, cubic 600"), "{}", c.measured);
}
