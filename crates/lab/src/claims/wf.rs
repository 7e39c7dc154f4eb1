//! The claims of Weigle & Feng's comparison, each judged case by case against the paper's
//! own figure (see the parent module for the rules).

use super::{case, ms, Case, Claim, Ctx, Spec, LOW_RTT_US, WAN_RTT_US, WF};
use crate::aggregate::IDEAL_TIE;
use crate::plan::{CellKey, HostConfig};

/// The paper's three kernels as today's modes, with the paper's name and its untuned law's C.
const KERNELS: [(&str, &str, f64); 3] = [
    ("none", "2.2.20-none", 214.0),
    ("kernel", "2.4.17-Auto", 467.0),
    ("drs", "2.4.17-DRS", 355.0),
];

pub(super) fn claims(c: &Ctx) -> Vec<Claim> {
    vec![
        ceiling(c),
        autotuning_beats_fixed(c),
        parallel_helps_at_low_delay(c),
        ideal_above_bdp(c),
        ideal_above_bdp_over_n(c),
        untuned_below_20mbit(c),
        untuned_law(c),
        linear_speedup(c),
        drs_vs_kernel_untuned(c),
        raising_limits_does_not_help_kernel(c),
        drs_beats_kernel_when_limits_raised(c),
        drs_falls_with_streams(c),
        drs_eight_streams(c),
        hand_tuned_alike_at_high_delay(c),
    ]
}

impl Ctx<'_> {
    /// RTTs with a series of `mode` under `host`.
    fn rtts(&self, host: HostConfig, mode: &str) -> Vec<u64> {
        self.agg
            .rtts()
            .into_iter()
            .filter(|&r| !self.agg.series(r, host, mode).is_empty())
            .collect()
    }

    fn low_rtt(&self, host: HostConfig, mode: &str) -> Option<u64> {
        self.rtts(host, mode).into_iter().find(|&r| r <= LOW_RTT_US)
    }

    fn mbps(&self, rtt: u64, host: HostConfig, n: u32, mode: &str) -> Option<f64> {
        self.agg.get(rtt, host, n, mode).map(|s| s.mbps())
    }

    /// (fewest, most) streams of a series and their Mbit/s.
    fn ends(&self, rtt: u64, host: HostConfig, mode: &str) -> Option<((u32, f64), (u32, f64))> {
        let s = self.agg.series(rtt, host, mode);
        let (a, b) = (s.first()?, s.last()?);
        (a.0 < b.0).then(|| ((a.0, a.1.mbps()), (b.0, b.1.mbps())))
    }
}

fn ceiling(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "ceiling",
        source: WF,
        claim: "The best achievable throughput",
        paper:
            "about 800 Mbit/s on Gigabit Ethernet, limited by the NICs' firmware; taken as ideal",
        rule: "no verdict: the paper's ceiling was its network cards".into(),
    };
    let best = c
        .agg
        .cells
        .values()
        .filter(|s| s.key.is_plain())
        .max_by(|a, b| a.throughput_bps.median.total_cmp(&b.throughput_bps.median));
    let Some(s) = best else {
        return spec.missing("a successful run");
    };
    let limit = crate::limit::limit_bps(
        c.plan.plan.rate,
        c.plan.plan.mtu,
        s.key.rtt_us,
        c.plan.plan.transfer_bytes(),
    );
    spec.reference(format!(
        "best median {:.0} Mbit/s from the command's start ({:.0} Mbit/s first byte to last) of a {:.0} Mbit/s emulated link, {:.0}% of the physical limit for that path and size; {} at {} with {} stream(s), {}",
        s.mbps(),
        s.first_to_last_bps.median / 1e6,
        c.link_bps / 1e6,
        100.0 * s.throughput_bps.median / limit,
        s.key.tune,
        ms(s.key.rtt_us),
        s.key.streams,
        s.key.host
    ))
}

fn autotuning_beats_fixed(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "autotuning-vs-fixed",
        source: WF,
        claim: "With no tuning at 0.5 ms, the autotuning stack beats the stack with fixed small buffers",
        paper: "2.4.17-Auto beat 2.2.20-none by 100 Mbit/s or more at every process count (Fig. 2)",
        rule: "per stream count: holds where kernel - none >= 10% of the link rate (the paper's 100 Mbit/s was 12.5% of its 800 Mbit/s ceiling, less a fifth for noise)".into(),
    };
    let u = HostConfig::Untuned;
    let Some(rtt) = c
        .low_rtt(u, "kernel")
        .filter(|&r| c.low_rtt(u, "none") == Some(r))
    else {
        return spec.missing("kernel and none under untuned at a RTT <= 2 ms");
    };
    let need = 0.10 * c.link_bps / 1e6;
    let cases = c
        .agg
        .series(rtt, u, "kernel")
        .into_iter()
        .filter_map(|(n, k)| {
            let f = c.mbps(rtt, u, n, "none")?;
            let d = k.mbps() - f;
            Some(case(
                format!("{} P={n}", ms(rtt)),
                ">= 100 Mbit/s ahead",
                format!("kernel {:.0} - none {f:.0} = {d:+.0} Mbit/s", k.mbps()),
                d >= need,
            ))
        })
        .collect();
    spec.judged(cases, None, true)
}

fn parallel_helps_at_low_delay(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "parallel-low-delay",
        source: WF,
        claim: "Even at 0.5 ms, every stack gains from parallel streams",
        paper: "improvements of 55-70% with more processes, all kernels, no tuning (Fig. 2)",
        rule: "per kernel (none, kernel, drs): holds where the gain from the fewest to the most streams is >= 41% (the paper's low end, 55%, less a quarter)".into(),
    };
    let u = HostConfig::Untuned;
    let mut cases = Vec::new();
    for (m, name, _) in KERNELS {
        let Some(rtt) = c.low_rtt(u, m) else {
            continue;
        };
        if let Some(((n1, t1), (n2, t2))) = c.ends(rtt, u, m) {
            let gain = t2 / t1 - 1.0;
            cases.push(case(
                format!("{m} ({name}) at {}", ms(rtt)),
                "+55-70%",
                format!("{:+.0}% from P={n1} to P={n2}", gain * 100.0),
                gain >= 0.41,
            ));
        }
    }
    if cases.is_empty() {
        return spec.missing("untuned none/kernel/drs at a RTT <= 2 ms with two stream counts");
    }
    let rests_on_none = cases.iter().any(|x: &Case| x.case.starts_with("none"));
    spec.judged(cases, None, rests_on_none)
}

/// The best of a sweep: the smallest size within [`IDEAL_TIE`] of the best median.
fn best_of(sweep: &[(tcptune_core::Bytes, &crate::aggregate::CellStats)]) -> Option<(u64, f64)> {
    let best = sweep
        .iter()
        .map(|(_, s)| s.throughput_bps.median)
        .fold(f64::MIN, f64::max);
    sweep
        .iter()
        .find(|(_, s)| s.throughput_bps.median >= best * (1.0 - IDEAL_TIE))
        .map(|(b, s)| (b.0, s.mbps()))
}

fn ideal_above_bdp(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "ideal-above-bdp",
        source: WF,
        claim: "At low delay the best buffer is much larger than the bandwidth-delay product",
        paper: "peak at about 1 MB per process at 0.5 ms, against an expected 64 KB (~16 x the BDP; Fig. 5)",
        rule: "per stream count of Figure 5's sweep at a RTT <= 2 ms: holds where the best per-stream size (the smallest within 3% of the best throughput) is >= 8 x BDP (the paper's ~16 x within one power of two); judged only where the sweep reaches 32 x BDP".into(),
    };
    let Some(b) = &c.plan.plan.buffer_sweep else {
        return spec.missing("Figure 5's buffer sweep");
    };
    let mut cases = Vec::new();
    let mut notes = Vec::new();
    for &rtt in b.rtts_us.iter().filter(|&&r| r <= LOW_RTT_US) {
        let bdp = c.plan.plan.bdp(rtt).0 as f64;
        for &n in &b.streams {
            let sweep = c.agg.sweep(rtt, n);
            let Some((size, mbps)) = best_of(&sweep) else {
                continue;
            };
            let top = sweep.last().map_or(0, |(b, _)| b.0) as f64;
            if top < 32.0 * bdp {
                notes.push(format!(
                    "{} P={n} not judged: the sweep stops at {:.0} x BDP",
                    ms(rtt),
                    top / bdp
                ));
                continue;
            }
            let x = size as f64 / bdp;
            cases.push(case(
                format!("{} P={n}", ms(rtt)),
                "~16 x BDP",
                format!(
                    "best {} per stream = {x:.1} x BDP ({mbps:.0} Mbit/s)",
                    tcptune_core::Bytes(size)
                ),
                x >= 8.0,
            ));
        }
    }
    if cases.is_empty() {
        let need = if notes.is_empty() {
            "Figure 5's sweep at a RTT <= 2 ms".to_string()
        } else {
            notes.join("; ")
        };
        return spec.missing(&need);
    }
    spec.judged(cases, (!notes.is_empty()).then(|| notes.join("; ")), false)
}

fn ideal_above_bdp_over_n(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "per-stream-ideal",
        source: WF,
        claim: "With parallel streams the best per-stream buffer is larger than BDP / streams",
        paper: "dividing the BDP by the number of processes is incorrect: scheduling delays need more buffer per process (HPDC version, sec. 4.1)",
        rule: "per path and stream count > 1 of the ideal sweep: holds where ideal (the smallest size within 3% of the best) is >= 2 x BDP/streams, one power of two above it; judged only where the sweep reaches 2 x BDP/streams".into(),
    };
    let mut cases = Vec::new();
    for (&(rtt, n), p) in c.agg.ideal.iter().filter(|((_, n), _)| *n > 1) {
        let per = c.plan.plan.bdp(rtt).0 as f64 / f64::from(n);
        let top = p.candidates.last().map_or(0, |b| b.0) as f64;
        if top < 2.0 * per {
            continue;
        }
        let x = p.size.0 as f64 / per;
        cases.push(case(
            format!("{} P={n}", ms(rtt)),
            "> BDP/streams",
            format!("{} per stream = {x:.1} x BDP/streams", p.size),
            x >= 2.0,
        ));
    }
    if cases.is_empty() {
        return spec.missing("fixed-size sweeps with more than one stream");
    }
    spec.judged(cases, None, false)
}

fn untuned_below_20mbit(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "untuned-25ms",
        source: WF,
        claim: "At 25 ms a single untuned stream gets less than 20 Mbit/s",
        paper: "below 20 Mbit/s for one process with all kernels (Fig. 6)",
        rule: "per kernel (none, kernel, drs), untuned, 1 stream at a RTT of 20-30 ms: holds below 24 Mbit/s (the paper's 20 plus a fifth)".into(),
    };
    let u = HostConfig::Untuned;
    let Some(rtt) = c
        .agg
        .rtts()
        .into_iter()
        .find(|&r| (20_000..=30_000).contains(&r))
    else {
        return spec.missing("untuned runs at a RTT of 20-30 ms");
    };
    let cases: Vec<Case> = KERNELS
        .iter()
        .filter_map(|(m, name, _)| {
            let v = c.mbps(rtt, u, 1, m)?;
            Some(case(
                format!("{m} ({name}) at {}", ms(rtt)),
                "< 20 Mbit/s",
                format!("{v:.1} Mbit/s"),
                v < 24.0,
            ))
        })
        .collect();
    if cases.is_empty() {
        return spec.missing("none/kernel/drs untuned with 1 stream at 20-30 ms");
    }
    let on_none = cases.iter().any(|x| x.case.starts_with("none"));
    spec.judged(cases, None, on_none)
}

fn untuned_law(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "untuned-law",
        source: WF,
        claim: "Untuned throughput follows processes x C / delay",
        paper: "Mbit/s = processes x C / delay(ms) within 20% at 25-100 ms: C = 214 (2.2.20-none), 467 (2.4.17-Auto), 355 (2.4.17-DRS)",
        rule: "per kernel, RTT >= 20 ms and stream count, untuned: holds where the measured throughput is within 20% of processes x C / RTT with the paper's C for that kernel".into(),
    };
    let u = HostConfig::Untuned;
    let mut cases = Vec::new();
    for (m, name, law) in KERNELS {
        for rtt in c.rtts(u, m).into_iter().filter(|&r| r >= WAN_RTT_US) {
            for (n, s) in c.agg.series(rtt, u, m) {
                let predicted = f64::from(n) * law / (rtt as f64 / 1000.0);
                let v = s.mbps();
                cases.push(case(
                    format!("{m} ({name}) {} P={n}", ms(rtt)),
                    format!("{predicted:.1} Mbit/s (C = {law:.0})"),
                    format!(
                        "{v:.1} Mbit/s (C = {:.0})",
                        v * rtt as f64 / 1000.0 / f64::from(n)
                    ),
                    (v / predicted - 1.0).abs() <= 0.2,
                ));
            }
        }
    }
    if cases.is_empty() {
        return spec.missing("untuned none/kernel/drs at RTT >= 20 ms");
    }
    let on_none = cases.iter().any(|x| x.case.starts_with("none"));
    spec.judged(
        cases,
        Some("a 64 KiB window alone would give C = 524".into()),
        on_none,
    )
}

fn linear_speedup(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "linear-speedup",
        source: WF,
        claim: "Parallel streams speed untuned transfers up linearly at WAN delays",
        paper: "a linear speed-up with the number of processes at 25 ms, all kernels (Fig. 6), and the same patterns at 50-100 ms",
        rule: "per kernel (none, kernel, drs) and RTT >= 20 ms, untuned: holds where the speed-up from the fewest to the most streams is >= 80% of the ratio of stream counts".into(),
    };
    let u = HostConfig::Untuned;
    let mut cases = Vec::new();
    for (m, name, _) in KERNELS {
        for rtt in c.rtts(u, m).into_iter().filter(|&r| r >= WAN_RTT_US) {
            let Some(((n1, t1), (n2, t2))) = c.ends(rtt, u, m) else {
                continue;
            };
            let ratio = f64::from(n2) / f64::from(n1);
            let eff = (t2 / t1) / ratio;
            let capped = t1 * ratio * 1e6 > 0.9 * c.link_bps;
            cases.push(case(
                format!("{m} ({name}) {}", ms(rtt)),
                format!("{ratio:.0} x from P={n1} to P={n2}"),
                format!(
                    "{:.1} x ({:.0}% of linear){}",
                    t2 / t1,
                    eff * 100.0,
                    if capped {
                        "; one stream already runs at more than the link / streams: the link caps it"
                    } else {
                        ""
                    }
                ),
                eff >= 0.8,
            ));
        }
    }
    if cases.is_empty() {
        return spec.missing("untuned none/kernel/drs at RTT >= 20 ms with two stream counts");
    }
    let on_none = cases.iter().any(|x| x.case.starts_with("none"));
    spec.judged(cases, None, on_none)
}

fn drs_vs_kernel_untuned(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "drs-vs-kernel-untuned",
        source: WF,
        claim: "No tuning: DRS beats kernel autotuning at 0.5 ms, kernel autotuning beats DRS at 25 ms",
        paper: "DRS +30-50 Mbit/s at 0.5 ms (Fig. 2); at 25 ms simple autotuning outperforms DRS (Fig. 6)",
        rule: "per path and stream count, untuned: at RTT <= 2 ms holds where drs >= 1.03 x kernel (the paper's +30 Mbit/s of 800, less a fifth); at RTT >= 20 ms holds where drs <= 0.97 x kernel".into(),
    };
    let u = HostConfig::Untuned;
    let mut cases = Vec::new();
    for rtt in c.rtts(u, "drs") {
        let low = rtt <= LOW_RTT_US;
        if !low && rtt < WAN_RTT_US {
            continue;
        }
        for (n, d) in c.agg.series(rtt, u, "drs") {
            let Some(k) = c.mbps(rtt, u, n, "kernel") else {
                continue;
            };
            let r = d.mbps() / k;
            cases.push(case(
                format!("{} P={n}", ms(rtt)),
                if low { "drs ahead" } else { "kernel ahead" },
                format!("drs {:.0} / kernel {k:.0} = {r:.2}", d.mbps()),
                if low { r >= 1.03 } else { r <= 0.97 },
            ));
        }
    }
    if cases.is_empty() {
        return spec.missing("drs and kernel under untuned");
    }
    spec.judged(cases, None, false)
}

fn raising_limits_does_not_help_kernel(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "raised-limits-kernel",
        source: WF,
        claim: "Raising the maxima alone does not help kernel autotuning",
        paper: "2.4.17-Auto constant with kernel-only tuning: the SYN's window scale came from the default buffer (a 2.4 bug; Fig. 7)",
        rule: "per path (RTT >= 20 ms) and stream count: holds where kernel with raised maxima is within 0.85-1.15 x kernel with the defaults".into(),
    };
    let k = HostConfig::KernelOnly;
    let mut cases = Vec::new();
    for rtt in c.rtts(k, "kernel").into_iter().filter(|&r| r >= WAN_RTT_US) {
        for (n, raised) in c.agg.series(rtt, k, "kernel") {
            let Some(d) = c.mbps(rtt, HostConfig::Untuned, n, "kernel") else {
                continue;
            };
            let r = raised.mbps() / d;
            cases.push(case(
                format!("{} P={n}", ms(rtt)),
                "unchanged",
                format!("raised {:.0} / default {d:.0} = {r:.2}", raised.mbps()),
                (0.85..=1.15).contains(&r),
            ));
        }
    }
    if cases.is_empty() {
        return spec.missing("kernel under untuned and kernel_only at RTT >= 20 ms");
    }
    spec.judged(cases, None, false)
}

fn drs_beats_kernel_when_limits_raised(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "drs-vs-kernel-raised",
        source: WF,
        claim: "With raised maxima, DRS beats kernel autotuning by a wide margin at 50-100 ms",
        paper: "DRS ahead of 2.4.17-Auto by a factor of 5 to 15 (Figs. 7, 9)",
        rule: "per path (RTT >= 40 ms) and stream count, kernel_only: holds where drs >= 4 x kernel (the paper's low end, 5, less a fifth)".into(),
    };
    let k = HostConfig::KernelOnly;
    let mut cases = Vec::new();
    for rtt in c
        .rtts(k, "drs")
        .into_iter()
        .filter(|&r| r >= 2 * WAN_RTT_US)
    {
        for (n, d) in c.agg.series(rtt, k, "drs") {
            let Some(b) = c.mbps(rtt, k, n, "kernel") else {
                continue;
            };
            let r = d.mbps() / b;
            cases.push(case(
                format!("{} P={n}", ms(rtt)),
                "5-15 x",
                format!("drs {:.0} / kernel {b:.0} = {r:.2}", d.mbps()),
                r >= 4.0,
            ));
        }
    }
    if cases.is_empty() {
        return spec.missing("drs and kernel under kernel_only at RTT >= 40 ms");
    }
    spec.judged(cases, None, false)
}

fn drs_falls_with_streams(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "drs-many-streams",
        source: WF,
        claim: "At low delay with raised maxima, DRS does best with 1-2 streams and loses throughput as streams are added",
        paper: "DRS better with 1-2 processes, then worse as processes increase: it over-allocates (Fig. 3)",
        rule: "at a RTT <= 2 ms, kernel_only: holds where the best stream count is 1 or 2 and the most streams give < 0.95 x the best (the 5% is run-to-run noise)".into(),
    };
    let k = HostConfig::KernelOnly;
    let Some(rtt) = c.low_rtt(k, "drs") else {
        return spec.missing("drs under kernel_only at a RTT <= 2 ms");
    };
    let s = c.agg.series(rtt, k, "drs");
    let Some((last_n, last)) = s.last().filter(|_| s.len() >= 2) else {
        return spec.missing("drs under kernel_only at two stream counts");
    };
    let Some((best_n, best)) = s
        .iter()
        .max_by(|a, b| a.1.mbps().total_cmp(&b.1.mbps()))
        .map(|(n, x)| (*n, x.mbps()))
    else {
        return spec.missing("drs under kernel_only at two stream counts");
    };
    let pts: Vec<String> = s
        .iter()
        .map(|(n, x)| format!("P={n} {:.0}", x.mbps()))
        .collect();
    let holds = best_n <= 2 && last.mbps() < 0.95 * best;
    spec.judged(
        vec![case(
            format!("drs at {}", ms(rtt)),
            "best at 1-2 streams, falling after",
            format!(
                "{} Mbit/s: best at P={best_n}, P={last_n} at {:.2} of it",
                pts.join(", "),
                last.mbps() / best
            ),
            holds,
        )],
        None,
        false,
    )
}

fn drs_eight_streams(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "drs-8-streams",
        source: WF,
        claim: "DRS with raised maxima and 8 processes reaches about 310 Mbit/s at 50 ms and 180 Mbit/s at 100 ms",
        paper: "310 Mbit/s at 50 ms and 180 Mbit/s at 100 ms (kernel-only tuning, 8 processes)",
        rule: "per path (50 and 100 ms), 8 streams, kernel_only: holds within 20% of the paper's Mbit/s".into(),
    };
    let k = HostConfig::KernelOnly;
    let cases: Vec<Case> = [(50_000u64, 310.0), (100_000, 180.0)]
        .into_iter()
        .filter_map(|(rtt, paper)| {
            let v = c.mbps(rtt, k, 8, "drs")?;
            Some(case(
                ms(rtt),
                format!("{paper:.0} Mbit/s"),
                format!("{v:.0} Mbit/s ({:.2} x the paper's)", v / paper),
                (v / paper - 1.0).abs() <= 0.2,
            ))
        })
        .collect();
    if cases.is_empty() {
        return spec.missing("drs under kernel_only with 8 streams at 50 or 100 ms");
    }
    spec.judged(cases, None, false)
}

fn hand_tuned_alike_at_high_delay(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "hand-tuned-high-delay",
        source: WF,
        claim: "At 100 ms, hand-tuned stacks perform alike: slow start and AIMD dominate, not buffers, and the differences shrink as delay grows",
        paper: "2.4.17-DRS and 2.4.17-Auto identical with ideal sizes at 100 ms, 2.2.20 slightly worse; 'as delay increases the performance difference falls' (Figs. 8-10)",
        rule: "today's stacks differ in congestion control: with the same hand-tuned buffers (manual, 2 x BDP, user_kernel) under every control of the congestion sweep, per stream count: at RTT >= 100 ms holds where the best/worst ratio is <= 1.25; and holds where that ratio is smaller at the longest RTT than at the shortest WAN RTT".into(),
    };
    let Some(sweep) = &c.plan.plan.extras.congestion else {
        return spec.missing("the congestion-control sweep with manual@user_kernel");
    };
    let uk = HostConfig::UserKernel;
    let spread = |rtt: u64, n: u32| -> Option<(f64, String)> {
        let v: Vec<(String, f64)> = sweep
            .controls
            .iter()
            .filter_map(|cc| {
                let key = CellKey {
                    cc: (c.plan.plan.congestion.as_deref() != Some(cc.as_str()))
                        .then(|| cc.clone()),
                    ..CellKey::new(rtt, uk, n, "manual")
                };
                c.agg.cell(&key).map(|s| (cc.clone(), s.mbps()))
            })
            .collect();
        if v.len() < 2 {
            return None;
        }
        let hi = v.iter().map(|x| x.1).fold(f64::MIN, f64::max);
        let lo = v.iter().map(|x| x.1).fold(f64::MAX, f64::min);
        (lo > 0.0).then(|| {
            (
                hi / lo,
                v.iter()
                    .map(|(cc, b)| format!("{cc} {b:.0}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        })
    };
    let mut cases = Vec::new();
    let wan: Vec<u64> = sweep
        .rtts_us
        .iter()
        .copied()
        .filter(|&r| r >= WAN_RTT_US)
        .collect();
    for &n in &sweep.streams {
        for &rtt in wan.iter().filter(|&&r| r >= 5 * WAN_RTT_US) {
            if let Some((x, text)) = spread(rtt, n) {
                cases.push(case(
                    format!("{} P={n}", ms(rtt)),
                    "alike",
                    format!("{text} Mbit/s (spread {x:.2} x)"),
                    x <= 1.25,
                ));
            }
        }
        let (Some(&lo), Some(&hi)) = (wan.iter().min(), wan.iter().max()) else {
            continue;
        };
        if lo < hi {
            if let (Some((a, _)), Some((b, _))) = (spread(lo, n), spread(hi, n)) {
                cases.push(case(
                    format!("spread {} vs {} P={n}", ms(hi), ms(lo)),
                    "falls with delay",
                    format!("{b:.2} x vs {a:.2} x"),
                    b < a,
                ));
            }
        }
    }
    if cases.is_empty() {
        return spec
            .missing("manual@user_kernel under two or more congestion controls at RTT >= 100 ms");
    }
    spec.judged(cases, None, false)
}
