//! "Paper vs today": each claim of Weigle & Feng, what they measured (quoted from the paper),
//! what this lab measured (computed from the results) and a verdict computed from the numbers
//! with a stated threshold. Nothing here is a conclusion written in advance: a claim whose
//! cells are not in the results says so.
//!
//! Mapping of the paper's kernels to today's modes: 2.2.20-none (no autotuning, small fixed
//! buffers) -> `none` (fixed 64 KiB); 2.4.17-Auto (Linux autotuning) -> `kernel`; 2.4.17-DRS
//! -> `drs`. The paper's "delay" is the round-trip time here.

use crate::aggregate::Aggregate;
use crate::plan::{ExpandedPlan, HostConfig};
use serde::{Deserialize, Serialize};

/// What the numbers say about a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The data agree with the claim.
    Holds,
    /// Some of the data agree.
    Partly,
    /// The data contradict the claim.
    DoesNotHold,
    /// The cells needed are not in the results.
    NotMeasured,
    /// A number to compare, with no yes/no.
    Reference,
}

impl Verdict {
    /// Words for the report.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Partly => "partly",
            Verdict::DoesNotHold => "does not hold",
            Verdict::NotMeasured => "not measured",
            Verdict::Reference => "for reference",
        }
    }
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// Short id.
    pub id: String,
    /// The claim, in a sentence.
    pub claim: String,
    /// What the paper measured.
    pub paper: String,
    /// What we measured.
    pub today: String,
    /// The verdict.
    pub verdict: Verdict,
    /// How the verdict is decided.
    pub rule: String,
}

const LOW_RTT_US: u64 = 2_000;
const WAN_RTT_US: u64 = 20_000;

struct Ctx<'a> {
    agg: &'a Aggregate,
    link_bps: f64,
    plan: &'a ExpandedPlan,
}

impl Ctx<'_> {
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
    /// (first, last) points of the throughput-vs-streams line, Mbit/s.
    fn ends(&self, rtt: u64, host: HostConfig, mode: &str) -> Option<((u32, f64), (u32, f64))> {
        let s = self.agg.series(rtt, host, mode);
        let (a, b) = (s.first()?, s.last()?);
        (a.0 < b.0).then(|| ((a.0, a.1.mbps()), (b.0, b.1.mbps())))
    }
}

fn ms(rtt_us: u64) -> String {
    let v = rtt_us as f64 / 1000.0;
    if v.fract() == 0.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v} ms")
    }
}

fn missing(id: &str, claim: &str, paper: &str, need: &str) -> Claim {
    Claim {
        id: id.into(),
        claim: claim.into(),
        paper: paper.into(),
        today: format!("needs {need}; not in these results"),
        verdict: Verdict::NotMeasured,
        rule: String::new(),
    }
}

fn tally(hits: usize, total: usize) -> Verdict {
    if total == 0 {
        Verdict::NotMeasured
    } else if hits == total {
        Verdict::Holds
    } else if hits == 0 {
        Verdict::DoesNotHold
    } else {
        Verdict::Partly
    }
}

/// Every claim, in the paper's order.
pub fn claims(plan: &ExpandedPlan, agg: &Aggregate) -> Vec<Claim> {
    let c = Ctx {
        agg,
        link_bps: plan.plan.rate.0 as f64,
        plan,
    };
    vec![
        peak_vs_link(&c),
        autotuning_beats_fixed(&c),
        parallel_helps_at_low_delay(&c),
        ideal_above_bdp(&c),
        ideal_above_bdp_over_n(&c),
        untuned_below_20mbit(&c),
        untuned_law(&c),
        linear_speedup(&c),
        drs_vs_kernel_untuned(&c),
        raising_limits_does_not_help_kernel(&c),
        drs_beats_kernel_when_limits_raised(&c),
        drs_falls_with_streams(&c),
        drs_eight_streams(&c),
        hand_tuned_alike_at_high_delay(&c),
    ]
}

fn peak_vs_link(c: &Ctx) -> Claim {
    let best = c
        .agg
        .cells
        .values()
        .max_by(|a, b| a.throughput_bps.median.total_cmp(&b.throughput_bps.median));
    let today = match best {
        Some(s) => format!(
            "best median {:.0} Mbit/s of a {:.0} Mbit/s emulated link ({:.0}%), {} at {} with {} stream(s), {}",
            s.mbps(),
            c.link_bps / 1e6,
            100.0 * s.throughput_bps.median / c.link_bps,
            s.key.tune,
            ms(s.key.rtt_us),
            s.key.streams,
            s.key.host
        ),
        None => "no successful run".into(),
    };
    Claim {
        id: "ceiling".into(),
        claim: "The best achievable throughput".into(),
        paper:
            "about 800 Mbit/s on Gigabit Ethernet, limited by the NICs' firmware; taken as ideal"
                .into(),
        today,
        verdict: if best.is_some() {
            Verdict::Reference
        } else {
            Verdict::NotMeasured
        },
        rule: String::new(),
    }
}

fn autotuning_beats_fixed(c: &Ctx) -> Claim {
    let (id, claim, paper) = (
        "autotuning-vs-fixed",
        "With no tuning at 0.5 ms, the autotuning stack beats the stack with fixed small buffers",
        "2.4.17-Auto beat 2.2.20-none by 100 Mbit/s or more at every process count (Fig. 2)",
    );
    let u = HostConfig::Untuned;
    let Some(rtt) = c
        .low_rtt(u, "kernel")
        .filter(|&r| c.low_rtt(u, "none") == Some(r))
    else {
        return missing(
            id,
            claim,
            paper,
            "kernel and none under untuned at a RTT <= 2 ms",
        );
    };
    let mut parts = Vec::new();
    let (mut hits, mut total) = (0, 0);
    for (n, k) in c.agg.series(rtt, u, "kernel") {
        if let Some(f) = c.agg.get(rtt, u, n, "none") {
            total += 1;
            let d = k.mbps() - f.mbps();
            if k.mbps() > f.mbps() * 1.05 {
                hits += 1;
            }
            parts.push(format!("P={n}: {:+.0} Mbit/s", d));
        }
    }
    Claim {
        id: id.into(),
        claim: claim.into(),
        paper: paper.into(),
        today: format!("kernel minus none at {}: {}", ms(rtt), parts.join(", ")),
        verdict: tally(hits, total),
        rule: "holds where kernel > 1.05 x none".into(),
    }
}

fn parallel_helps_at_low_delay(c: &Ctx) -> Claim {
    let (id, claim, paper) = (
        "parallel-low-delay",
        "Even at 0.5 ms, every stack gains from parallel streams",
        "improvements of 55-70% with more processes, all kernels, no tuning (Fig. 2)",
    );
    let u = HostConfig::Untuned;
    let modes = c.plan.plan.hosts.get(&u).cloned().unwrap_or_default();
    let (mut hits, mut total, mut parts) = (0, 0, Vec::new());
    let mut at = None;
    for m in modes {
        let m = m.to_string();
        let Some(rtt) = c.low_rtt(u, &m) else {
            continue;
        };
        if let Some(((n1, t1), (n2, t2))) = c.ends(rtt, u, &m) {
            at = Some(rtt);
            total += 1;
            let gain = t2 / t1 - 1.0;
            if gain >= 0.10 {
                hits += 1;
            }
            parts.push(format!("{m} {:+.0}% (P={n1} to P={n2})", gain * 100.0));
        }
    }
    let Some(rtt) = at else {
        return missing(
            id,
            claim,
            paper,
            "untuned runs at a RTT <= 2 ms with two stream counts",
        );
    };
    Claim {
        id: id.into(),
        claim: claim.into(),
        paper: paper.into(),
        today: format!("at {}: {}", ms(rtt), parts.join("; ")),
        verdict: tally(hits, total),
        rule: "holds for a mode whose gain from fewest to most streams is >= 10%".into(),
    }
}

fn ideal_above_bdp(c: &Ctx) -> Claim {
    let (id, claim, paper) = (
        "ideal-above-bdp",
        "At low delay the best buffer is much larger than the bandwidth-delay product",
        "peak at about 1 MB per process at 0.5 ms, against a BDP of 64 KB (~16x; Fig. 5)",
    );
    let low = c.agg.ideal.iter().find(|((r, _), _)| *r <= LOW_RTT_US);
    let Some((&(rtt, n), pick)) = low else {
        return missing(
            id,
            claim,
            paper,
            "a fixed-size sweep under user_kernel at a RTT <= 2 ms",
        );
    };
    let bdp = c.plan.plan.bdp(rtt).0 as f64 / f64::from(n);
    let r = pick.size.0 as f64 / bdp;
    let mut today =
        format!(
        "best size at {} with {n} stream(s): {} per stream = {:.1} x BDP/streams ({:.0} Mbit/s){}",
        ms(rtt),
        pick.size,
        r,
        pick.stats.mbps(),
        if pick.at_edge { "; at the edge of the sweep" } else { "" }
    );
    // Contrast with the WAN paths.
    let wan: Vec<String> = c
        .agg
        .ideal
        .iter()
        .filter(|((r, s), _)| *r >= WAN_RTT_US && *s == n)
        .map(|((r, _), p)| {
            let b = c.plan.plan.bdp(*r).0 as f64 / f64::from(n);
            format!("{}: {:.1} x", ms(*r), p.size.0 as f64 / b)
        })
        .collect();
    if !wan.is_empty() {
        today.push_str(&format!("; at WAN delays {}", wan.join(", ")));
    }
    Claim {
        id: id.into(),
        claim: claim.into(),
        paper: paper.into(),
        today,
        verdict: if r >= 2.0 {
            Verdict::Holds
        } else {
            Verdict::DoesNotHold
        },
        rule: "holds when the best setsockopt size is >= 2 x BDP/streams".into(),
    }
}

fn ideal_above_bdp_over_n(c: &Ctx) -> Claim {
    let (id, claim, paper) = (
        "per-stream-ideal",
        "With parallel streams the best per-stream buffer is larger than BDP / streams",
        "dividing the BDP by the number of processes is incorrect: scheduling delays need more buffer per process (HPDC version, sec. 4.1)",
    );
    let picks: Vec<_> = c.agg.ideal.iter().filter(|((_, n), _)| *n > 1).collect();
    if picks.is_empty() {
        return missing(
            id,
            claim,
            paper,
            "fixed-size sweeps with more than one stream",
        );
    }
    let mut hits = 0;
    let parts: Vec<String> = picks
        .iter()
        .map(|((r, n), p)| {
            let per = c.plan.plan.bdp(*r).0 as f64 / f64::from(*n);
            let x = p.size.0 as f64 / per;
            if x >= 2.0 {
                hits += 1;
            }
            format!("{} P={n}: {:.1} x", ms(*r), x)
        })
        .collect();
    Claim {
        id: id.into(),
        claim: claim.into(),
        paper: paper.into(),
        today: format!("best size / (BDP/streams): {}", parts.join(", ")),
        verdict: tally(hits, picks.len()),
        rule: "holds where the best size is >= 2 x BDP/streams".into(),
    }
}

fn untuned_below_20mbit(c: &Ctx) -> Claim {
    let (id, claim, paper) = (
        "untuned-25ms",
        "At 25 ms a single untuned stream gets less than 20 Mbit/s",
        "below 20 Mbit/s for one process with all kernels (Fig. 6)",
    );
    let u = HostConfig::Untuned;
    let rtt = c
        .agg
        .rtts()
        .into_iter()
        .find(|&r| (20_000..=30_000).contains(&r));
    let Some(rtt) = rtt else {
        return missing(id, claim, paper, "untuned runs at a RTT of 20-30 ms");
    };
    let mut parts = Vec::new();
    let (mut hits, mut total) = (0, 0);
    for m in ["none", "kernel", "drs"] {
        if let Some(s) = c.agg.get(rtt, u, 1, m) {
            total += 1;
            if s.mbps() < 20.0 {
                hits += 1;
            }
            parts.push(format!("{m} {:.1} Mbit/s", s.mbps()));
        }
    }
    if total == 0 {
        return missing(
            id,
            claim,
            paper,
            "none/kernel/drs untuned with 1 stream at 20-30 ms",
        );
    }
    Claim {
        id: id.into(),
        claim: claim.into(),
        paper: paper.into(),
        today: format!("1 stream at {}: {}", ms(rtt), parts.join(", ")),
        verdict: tally(hits, total),
        rule: "holds for a mode below 20 Mbit/s".into(),
    }
}

fn untuned_law(c: &Ctx) -> Claim {
    let (id, claim, paper) = (
        "untuned-law",
        "Untuned throughput follows processes x C / delay",
        "Mbit/s = processes x C / delay(ms) within 20%, 25-100 ms: C = 214 (2.2.20-none), 467 (2.4.17-Auto), 355 (2.4.17-DRS)",
    );
    let u = HostConfig::Untuned;
    let mut parts = Vec::new();
    let (mut hits, mut total) = (0, 0);
    for m in ["none", "kernel", "drs"] {
        let mut cs = Vec::new();
        let mut saturated = 0;
        for rtt in c.rtts(u, m).into_iter().filter(|&r| r >= WAN_RTT_US) {
            for (n, s) in c.agg.series(rtt, u, m) {
                if s.throughput_bps.median < 0.5 * c.link_bps {
                    cs.push(s.mbps() * rtt as f64 / 1000.0 / f64::from(n));
                } else {
                    saturated += 1;
                }
            }
        }
        if cs.len() < 2 {
            if saturated > 0 {
                total += 1;
                parts.push(format!(
                    "{m}: not window-limited ({saturated} of {} cells at >= 50% of the link)",
                    saturated + cs.len()
                ));
            }
            continue;
        }
        let Some(fit) = crate::aggregate::Spread::of(cs.iter().copied()) else {
            continue;
        };
        let err = cs
            .iter()
            .map(|x| (x / fit.median - 1.0).abs())
            .fold(0.0, f64::max);
        total += 1;
        if err < 0.2 {
            hits += 1;
        }
        parts.push(format!(
            "{m}: C = {:.0} (max error {:.0}% over {} cells{})",
            fit.median,
            err * 100.0,
            cs.len(),
            if saturated > 0 {
                format!(", {saturated} near link rate left out")
            } else {
                String::new()
            }
        ));
    }
    if total == 0 {
        return missing(id, claim, paper, "untuned runs at RTT >= 20 ms");
    }
    parts.push(
        "a 64 KiB window would give C = 524; setsockopt(64 KiB) lets the kernel hold 128 KiB, so none's window can be larger"
            .into(),
    );
    Claim {
        id: id.into(),
        claim: claim.into(),
        paper: paper.into(),
        today: parts.join("; "),
        verdict: tally(hits, total),
        rule: "holds for a mode whose C fits every window-limited cell (< 50% of link, RTT >= 20 ms) within 20%".into(),
    }
}

fn linear_speedup(c: &Ctx) -> Claim {
    let (id, claim, paper) = (
        "linear-speedup",
        "Parallel streams speed untuned transfers up linearly at WAN delays",
        "linear speed-up with the number of processes at 25 ms (Fig. 6) and beyond",
    );
    let u = HostConfig::Untuned;
    let (mut hits, mut total, mut parts) = (0, 0, Vec::new());
    for rtt in c.rtts(u, "none").into_iter().filter(|&r| r >= WAN_RTT_US) {
        if let Some(((n1, t1), (n2, t2))) = c.ends(rtt, u, "none") {
            if t2 * 1e6 >= 0.8 * c.link_bps {
                parts.push(format!("{}: saturates the link", ms(rtt)));
                continue;
            }
            let eff = (t2 / t1) / (f64::from(n2) / f64::from(n1));
            total += 1;
            if eff >= 0.8 {
                hits += 1;
            }
            parts.push(format!(
                "{}: {:.1}x from P={n1} to P={n2} ({:.0}% of linear)",
                ms(rtt),
                t2 / t1,
                eff * 100.0
            ));
        }
    }
    if total == 0 {
        return missing(
            id,
            claim,
            paper,
            "'none' untuned at RTT >= 20 ms with two stream counts",
        );
    }
    Claim {
        id: id.into(),
        claim: claim.into(),
        paper: paper.into(),
        today: format!("none, untuned: {}", parts.join("; ")),
        verdict: tally(hits, total),
        rule: "holds on a path where the speed-up is >= 80% of the stream ratio".into(),
    }
}

fn drs_vs_kernel_untuned(c: &Ctx) -> Claim {
    let (id, claim, paper) = (
        "drs-vs-kernel-untuned",
        "No tuning: DRS beats kernel autotuning at 0.5 ms, kernel autotuning beats DRS at 25 ms",
        "DRS +30-50 Mbit/s at 0.5 ms (Fig. 2); at 25 ms simple autotuning outperforms DRS (Fig. 6)",
    );
    let u = HostConfig::Untuned;
    let mut parts = Vec::new();
    let (mut hits, mut total) = (0, 0);
    for rtt in c.rtts(u, "drs") {
        let ratios: Vec<f64> = c
            .agg
            .series(rtt, u, "drs")
            .into_iter()
            .filter_map(|(n, d)| {
                c.agg
                    .bps(rtt, u, n, "kernel")
                    .map(|k| d.throughput_bps.median / k)
            })
            .collect();
        let Some(r) = crate::aggregate::Spread::of(ratios) else {
            continue;
        };
        let want_drs_ahead = rtt <= LOW_RTT_US;
        if rtt > LOW_RTT_US && rtt < WAN_RTT_US {
            continue;
        }
        total += 1;
        if (want_drs_ahead && r.median > 1.0) || (!want_drs_ahead && r.median < 1.0) {
            hits += 1;
        }
        parts.push(format!(
            "{}: drs/kernel = {:.2} (median over stream counts)",
            ms(rtt),
            r.median
        ));
    }
    if total == 0 {
        return missing(id, claim, paper, "drs and kernel under untuned");
    }
    Claim {
        id: id.into(),
        claim: claim.into(),
        paper: paper.into(),
        today: parts.join("; "),
        verdict: tally(hits, total),
        rule:
            "holds on a path where the ordering matches (drs ahead at <= 2 ms, behind at >= 20 ms)"
                .into(),
    }
}

fn raising_limits_does_not_help_kernel(c: &Ctx) -> Claim {
    let (id, claim, paper) = (
        "raised-limits-kernel",
        "Raising the maxima alone does not help kernel autotuning",
        "2.4.17-Auto constant with kernel-only tuning: the SYN's window scale came from the default buffer (a 2.4 bug; Fig. 7)",
    );
    let mut parts = Vec::new();
    let (mut hits, mut total) = (0, 0);
    for rtt in c
        .rtts(HostConfig::KernelOnly, "kernel")
        .into_iter()
        .filter(|&r| r >= WAN_RTT_US)
    {
        let ratios: Vec<f64> = c
            .agg
            .series(rtt, HostConfig::KernelOnly, "kernel")
            .into_iter()
            .filter_map(|(n, k)| {
                c.agg
                    .bps(rtt, HostConfig::Untuned, n, "kernel")
                    .map(|d| k.throughput_bps.median / d)
            })
            .collect();
        if let Some(r) = crate::aggregate::Spread::of(ratios) {
            total += 1;
            if (0.85..=1.15).contains(&r.median) {
                hits += 1;
            }
            parts.push(format!("{}: raised/default = {:.2}", ms(rtt), r.median));
        }
    }
    if total == 0 {
        return missing(
            id,
            claim,
            paper,
            "kernel under untuned and kernel_only at RTT >= 20 ms",
        );
    }
    Claim {
        id: id.into(),
        claim: claim.into(),
        paper: paper.into(),
        today: format!(
            "kernel autotuning, median over stream counts: {}",
            parts.join("; ")
        ),
        verdict: tally(hits, total),
        rule: "holds on a path where raised/default is within 0.85-1.15".into(),
    }
}

fn drs_beats_kernel_when_limits_raised(c: &Ctx) -> Claim {
    let (id, claim, paper) = (
        "drs-vs-kernel-raised",
        "With raised maxima, DRS beats kernel autotuning by a wide margin at 50-100 ms",
        "DRS ahead of 2.4.17-Auto by a factor of 5 to 15 (Figs. 7, 9)",
    );
    let k = HostConfig::KernelOnly;
    let mut parts = Vec::new();
    let (mut hits, mut total) = (0, 0);
    for rtt in c
        .rtts(k, "drs")
        .into_iter()
        .filter(|&r| r >= 2 * WAN_RTT_US)
    {
        let ratios: Vec<f64> = c
            .agg
            .series(rtt, k, "drs")
            .into_iter()
            .filter_map(|(n, d)| {
                c.agg
                    .bps(rtt, k, n, "kernel")
                    .map(|b| d.throughput_bps.median / b)
            })
            .collect();
        if let Some(r) = crate::aggregate::Spread::of(ratios) {
            total += 1;
            if r.median >= 2.0 {
                hits += 1;
            }
            parts.push(format!("{}: drs/kernel = {:.2}", ms(rtt), r.median));
        }
    }
    if total == 0 {
        return missing(
            id,
            claim,
            paper,
            "drs and kernel under kernel_only at RTT >= 40 ms",
        );
    }
    Claim {
        id: id.into(),
        claim: claim.into(),
        paper: paper.into(),
        today: format!("median over stream counts: {}", parts.join("; ")),
        verdict: tally(hits, total),
        rule: "holds on a path where drs >= 2 x kernel".into(),
    }
}

fn drs_falls_with_streams(c: &Ctx) -> Claim {
    let (id, claim, paper) = (
        "drs-many-streams",
        "At low delay with raised maxima, DRS loses throughput as streams are added",
        "DRS better with 1-2 processes, then worse as processes increase: it over-allocates (Fig. 3)",
    );
    let k = HostConfig::KernelOnly;
    let Some(rtt) = c.low_rtt(k, "drs") else {
        return missing(id, claim, paper, "drs under kernel_only at a RTT <= 2 ms");
    };
    let s = c.agg.series(rtt, k, "drs");
    let (Some(last), true) = (s.last(), s.len() >= 2) else {
        return missing(
            id,
            claim,
            paper,
            "drs under kernel_only at two stream counts",
        );
    };
    let peak = s.iter().map(|(_, x)| x.mbps()).fold(0.0, f64::max);
    let falls = last.1.mbps() < 0.95 * peak;
    let pts: Vec<String> = s
        .iter()
        .map(|(n, x)| format!("P={n} {:.0}", x.mbps()))
        .collect();
    Claim {
        id: id.into(),
        claim: claim.into(),
        paper: paper.into(),
        today: format!("drs at {} (Mbit/s): {}", ms(rtt), pts.join(", ")),
        verdict: if falls {
            Verdict::Holds
        } else {
            Verdict::DoesNotHold
        },
        rule: "holds when the most streams give < 0.95 x the best stream count".into(),
    }
}

fn drs_eight_streams(c: &Ctx) -> Claim {
    let (id, claim, paper) = (
        "drs-8-streams",
        "DRS with raised maxima and 8 processes at 50 and 100 ms",
        "310 Mbit/s at 50 ms and 180 Mbit/s at 100 ms",
    );
    let k = HostConfig::KernelOnly;
    let parts: Vec<String> = [50_000u64, 100_000]
        .into_iter()
        .filter_map(|rtt| {
            let s = c.agg.series(rtt, k, "drs");
            s.last()
                .map(|(n, x)| format!("{}: {:.0} Mbit/s with {n} stream(s)", ms(rtt), x.mbps()))
        })
        .collect();
    if parts.is_empty() {
        return missing(id, claim, paper, "drs under kernel_only at 50 or 100 ms");
    }
    Claim {
        id: id.into(),
        claim: claim.into(),
        paper: paper.into(),
        today: parts.join("; "),
        verdict: Verdict::Reference,
        rule: String::new(),
    }
}

fn hand_tuned_alike_at_high_delay(c: &Ctx) -> Claim {
    let (id, claim, paper) = (
        "hand-tuned-high-delay",
        "At 100 ms, hand-tuned techniques perform alike: slow start and AIMD dominate, not buffers",
        "2.4.17-DRS and 2.4.17-Auto identical with ideal sizes at 100 ms, 2.2.20 slightly worse (Fig. 10)",
    );
    let uk = HostConfig::UserKernel;
    let modes: Vec<String> = c
        .plan
        .plan
        .hosts
        .get(&uk)
        .map(|v| v.iter().map(|m| m.to_string()).collect())
        .unwrap_or_default();
    let (mut hits, mut total, mut parts) = (0, 0, Vec::new());
    for rtt in c.agg.rtts().into_iter().filter(|&r| r >= 5 * WAN_RTT_US) {
        for n in c.agg.stream_counts() {
            let v: Vec<(String, f64)> = modes
                .iter()
                .filter_map(|m| c.agg.bps(rtt, uk, n, m).map(|b| (m.clone(), b)))
                .collect();
            if v.len() < 2 {
                continue;
            }
            let hi = v.iter().map(|x| x.1).fold(f64::MIN, f64::max);
            let lo = v.iter().map(|x| x.1).fold(f64::MAX, f64::min);
            if lo <= 0.0 {
                continue;
            }
            total += 1;
            if hi / lo <= 1.25 {
                hits += 1;
            }
            parts.push(format!(
                "{} P={n}: {} (spread {:.2}x)",
                ms(rtt),
                v.iter()
                    .map(|(m, b)| format!("{m} {:.0}", b / 1e6))
                    .collect::<Vec<_>>()
                    .join(", "),
                hi / lo
            ));
        }
    }
    if total == 0 {
        return missing(
            id,
            claim,
            paper,
            "two or more modes under user_kernel at RTT >= 100 ms",
        );
    }
    Claim {
        id: id.into(),
        claim: claim.into(),
        paper: paper.into(),
        today: format!("user_kernel, Mbit/s: {}", parts.join("; ")),
        verdict: tally(hits, total),
        rule: "holds where the best/worst ratio among user_kernel modes is <= 1.25".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::aggregate;
    use crate::aggregate::tests::run;
    use crate::plan::Plan;
    use crate::record::RunRecord;

    fn plan() -> ExpandedPlan {
        Plan::full().expand()
    }

    fn find<'a>(cs: &'a [Claim], id: &str) -> &'a Claim {
        cs.iter().find(|c| c.id == id).expect("claim present")
    }

    #[test]
    fn window_limited_untuned_runs_fit_the_law_and_scale_linearly() {
        let u = HostConfig::Untuned;
        // 64 KiB windows: 524 / rtt_ms Mbit/s per stream, exactly.
        let mut recs: Vec<RunRecord> = Vec::new();
        for rtt in [25_000u64, 50_000, 100_000] {
            for n in [1u32, 2, 4] {
                let mbps = f64::from(n) * 524.0 / (rtt as f64 / 1000.0);
                recs.push(run(rtt, u, n, "none", 1, mbps, 1 << 17));
            }
        }
        let cs = claims(&plan(), &aggregate(&recs));
        let law = find(&cs, "untuned-law");
        assert_eq!(law.verdict, Verdict::Holds, "{}", law.today);
        assert!(law.today.contains("none: C = 524"), "{}", law.today);
        let lin = find(&cs, "linear-speedup");
        assert_eq!(lin.verdict, Verdict::Holds, "{}", lin.today);
        let u20 = find(&cs, "untuned-25ms");
        // 524/25 = 21 Mbit/s: not below 20.
        assert_eq!(u20.verdict, Verdict::DoesNotHold, "{}", u20.today);
        // Claims with no data say so instead of guessing.
        assert_eq!(
            find(&cs, "drs-vs-kernel-raised").verdict,
            Verdict::NotMeasured
        );
    }

    #[test]
    fn saturated_kernel_runs_are_reported_as_not_window_limited() {
        let u = HostConfig::Untuned;
        let recs = vec![
            run(25_000, u, 1, "kernel", 1, 900.0, 1),
            run(50_000, u, 1, "kernel", 1, 850.0, 1),
        ];
        let cs = claims(&plan(), &aggregate(&recs));
        let law = find(&cs, "untuned-law");
        assert_eq!(law.verdict, Verdict::DoesNotHold);
        assert!(law.today.contains("not window-limited"), "{}", law.today);
    }

    #[test]
    fn ideal_far_above_bdp_at_low_delay_holds() {
        let uk = HostConfig::UserKernel;
        let recs = vec![
            run(500, uk, 1, "fixed:65536", 1, 500.0, 1),
            run(500, uk, 1, "fixed:1048576", 1, 900.0, 1),
            run(500, uk, 2, "fixed:32768", 1, 300.0, 1),
            run(500, uk, 2, "fixed:262144", 1, 900.0, 1),
        ];
        let cs = claims(&plan(), &aggregate(&recs));
        let c = find(&cs, "ideal-above-bdp");
        assert_eq!(c.verdict, Verdict::Holds, "{}", c.today);
        assert!(c.today.contains("16.8 x"), "{}", c.today);
        let p = find(&cs, "per-stream-ideal");
        assert_eq!(p.verdict, Verdict::Holds, "{}", p.today);
    }

    #[test]
    fn kernel_helped_by_raised_limits_contradicts_the_2_4_bug() {
        let recs = vec![
            run(100_000, HostConfig::Untuned, 1, "kernel", 1, 250.0, 1),
            run(100_000, HostConfig::KernelOnly, 1, "kernel", 1, 800.0, 1),
            run(100_000, HostConfig::KernelOnly, 1, "drs", 1, 820.0, 1),
        ];
        let cs = claims(&plan(), &aggregate(&recs));
        let c = find(&cs, "raised-limits-kernel");
        assert_eq!(c.verdict, Verdict::DoesNotHold, "{}", c.today);
        assert!(c.today.contains("3.20"), "{}", c.today);
        let d = find(&cs, "drs-vs-kernel-raised");
        assert_eq!(d.verdict, Verdict::DoesNotHold, "{}", d.today);
    }
}
