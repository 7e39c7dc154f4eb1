//! Claims of the seeds that the paper's matrix cannot test, judged on the extra experiments
//! ([`crate::plan::extras`]): Tierney's 100 Mbit/s rule, the window scale at SYN time, the
//! transfer size, competing transfers, the congestion control, and PSC's Figure 1 on a path
//! that changes.

use super::{case, ms, Case, Claim, Ctx, Spec, PSC, TIERNEY, WAN_RTT_US, WF};
use crate::plan::{CellKey, HostConfig, ModeAt, PathKnowledge, Scenario};

pub(super) fn claims(c: &Ctx) -> Vec<Claim> {
    vec![
        tierney_100mbit(c),
        window_scale_at_syn(c),
        size_opens_the_window(c),
        size_does_not_differentiate(c),
        competing_fair(c),
        congestion_controls(c),
        known_path(c),
    ]
}

fn key(rtt: u64, m: &ModeAt, n: u32) -> CellKey {
    CellKey::new(rtt, m.host, n, m.tune.to_string())
}

fn tierney_100mbit(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "tierney-100mbit",
        source: TIERNEY,
        claim: "On fast (> 40 Mbit/s), long (> 10 ms) paths, buffers sized for an assumed 100 Mbit/s and the measured RTT are a good default",
        paper: "'run ping to determine the RTT and then just assume the bandwidth is 100Mbps' for high-bandwidth (> 40Mbps), high-latency (RTT > 10ms) networks",
        rule: "per path (RTT >= 10 ms) and stream count, when the link is faster than 40 Mbit/s: holds where manual:100mbit (2 x BDP at 100 Mbit/s, set with setsockopt) reaches >= 0.8 x ideal".into(),
    };
    if c.link_bps <= 40e6 {
        return spec.missing("a link faster than 40 Mbit/s");
    }
    let tierney = tcptune_core::TuneMode::Manual(Some(tcptune_core::Rate::mbit(100))).to_string();
    let mut cases = Vec::new();
    for (&(rtt, n), ideal) in c.agg.ideal.iter().filter(|((r, _), _)| *r >= 10_000) {
        for host in [HostConfig::UserKernel, HostConfig::Untuned] {
            if let Some(t) = c.agg.get(rtt, host, n, &tierney) {
                let r = t.mbps() / ideal.stats.mbps();
                cases.push(case(
                    format!("{} P={n} ({host})", ms(rtt)),
                    "good enough",
                    format!(
                        "{:.0} Mbit/s vs ideal {:.0} = {r:.2}",
                        t.mbps(),
                        ideal.stats.mbps()
                    ),
                    r >= 0.8,
                ));
                break;
            }
        }
    }
    if cases.is_empty() {
        return spec.missing("manual:100mbit and ideal on paths of 10 ms or more");
    }
    spec.judged(cases, None, false)
}

fn window_scale_at_syn(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "window-scale-at-syn",
        source: WF,
        claim: "With untuned default buffers, a connection advertises no window scaling, so raising the maxima later cannot help it",
        paper: "'the window scaling advertised in SYN packets is based on initial (default) buffer size, not the maximal buffer size ... with untuned default buffers, no window scaling is advertised' (Linux 2.4, Fig. 7)",
        rule: "per path, kernel autotuning untuned: holds where the receivers advertised a window scale of 0 (read from TCP_INFO, tcpi_rcv_wscale)".into(),
    };
    let cases: Vec<Case> = c
        .agg
        .rtts()
        .into_iter()
        .filter_map(|rtt| {
            let w = c
                .agg
                .series(rtt, HostConfig::Untuned, "kernel")
                .into_iter()
                .filter_map(|(_, s)| s.rcv_wscale)
                .max()?;
            Some(case(
                ms(rtt),
                "scale 0",
                format!(
                    "the receivers advertised a scale of {w} (windows up to {} bytes)",
                    65_535u64 << w
                ),
                w == 0,
            ))
        })
        .collect();
    if cases.is_empty() {
        return spec.missing("kernel untuned runs with the window scale recorded");
    }
    spec.judged(cases, None, false)
}

/// The size sweep's points of one mode, path and stream count: (bytes, Mbit/s).
fn size_points(c: &Ctx, rtt: u64, m: &ModeAt, n: u32) -> Vec<(u64, f64)> {
    let Some(s) = &c.plan.plan.extras.sizes else {
        return Vec::new();
    };
    let default = c.plan.plan.transfer_bytes();
    let mut v: Vec<(u64, f64)> = s
        .sizes
        .iter()
        .filter_map(|&b| {
            let bytes = c.plan.plan.whole_messages(b);
            let k = CellKey {
                bytes: (bytes != default).then_some(bytes),
                ..key(rtt, m, n)
            };
            c.agg.cell(&k).map(|x| (bytes, x.mbps()))
        })
        .collect();
    v.sort_by_key(|x| x.0);
    v
}

fn size_opens_the_window(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "size-128mb-enough",
        source: WF,
        claim: "128 MB transfers are large enough for the congestion window to open fully",
        paper: "'128MB transfers are large enough to allow the congestion window to fully open' (sec. III.B)",
        rule: "per path, stream count and mode of the size sweep: holds where the 128 MiB transfer's throughput (from the command's start) is >= 0.8 x the largest transfer's (a window that opened early leaves the average of a longer transfer little higher)".into(),
    };
    let Some(s) = &c.plan.plan.extras.sizes else {
        return spec.missing("the transfer-size sweep");
    };
    let default = c.plan.plan.transfer_bytes();
    let mut cases = Vec::new();
    for &rtt in &s.rtts_us {
        for &n in &s.streams {
            for m in &s.modes {
                let pts = size_points(c, rtt, m, n);
                let (Some(&(_, at)), Some(&(big, top))) =
                    (pts.iter().find(|p| p.0 == default), pts.last())
                else {
                    continue;
                };
                if big <= default {
                    continue;
                }
                cases.push(case(
                    format!("{m} {} P={n}", ms(rtt)),
                    "window open for most of 128 MB",
                    format!(
                        "{at:.0} Mbit/s at {} vs {top:.0} at {} ({:.2})",
                        tcptune_core::Bytes(default),
                        tcptune_core::Bytes(big),
                        at / top
                    ),
                    at >= 0.8 * top,
                ));
            }
        }
    }
    if cases.is_empty() {
        return spec.missing("the size sweep with the plan's size and a larger one");
    }
    spec.judged(cases, None, false)
}

fn size_does_not_differentiate(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "size-no-differentiation",
        source: WF,
        claim: "Longer transfers do not help differentiate among tuning techniques",
        paper: "'Longer transfers do not help differentiate among tuning techniques (tested, but results omitted)' (sec. III.B)",
        rule: "per path and stream count of the size sweep, over its modes: holds where the modes rank the same at 128 MiB and at the largest size and each mode's share of the best moves by less than 0.2".into(),
    };
    let Some(s) = &c.plan.plan.extras.sizes else {
        return spec.missing("the transfer-size sweep");
    };
    let default = c.plan.plan.transfer_bytes();
    let mut cases = Vec::new();
    for &rtt in &s.rtts_us {
        for &n in &s.streams {
            let mut small = Vec::new();
            let mut large = Vec::new();
            let mut big = 0;
            for m in &s.modes {
                let pts = size_points(c, rtt, m, n);
                if let (Some(a), Some(b)) = (pts.iter().find(|p| p.0 == default), pts.last()) {
                    if b.0 > default {
                        small.push((m.to_string(), a.1));
                        large.push((m.to_string(), b.1));
                        big = b.0;
                    }
                }
            }
            if small.len() < 2 {
                continue;
            }
            let share = |v: &[(String, f64)]| -> Vec<(String, f64)> {
                let best = v.iter().map(|x| x.1).fold(f64::MIN, f64::max).max(1e-9);
                v.iter().map(|(m, x)| (m.clone(), x / best)).collect()
            };
            let (a, b) = (share(&small), share(&large));
            let order = |v: &[(String, f64)]| {
                let mut o: Vec<&(String, f64)> = v.iter().collect();
                o.sort_by(|x, y| y.1.total_cmp(&x.1));
                o.into_iter().map(|x| x.0.clone()).collect::<Vec<_>>()
            };
            let moved = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (x.1 - y.1).abs())
                .fold(0.0, f64::max);
            let text = |v: &[(String, f64)]| {
                v.iter()
                    .map(|(m, x)| format!("{m} {x:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            cases.push(case(
                format!("{} P={n}", ms(rtt)),
                "same picture",
                format!(
                    "share of the best at {}: {}; at {}: {}",
                    tcptune_core::Bytes(default),
                    text(&a),
                    tcptune_core::Bytes(big),
                    text(&b)
                ),
                order(&a) == order(&b) && moved < 0.2,
            ));
        }
    }
    if cases.is_empty() {
        return spec
            .missing("two or more modes of the size sweep at the plan's size and a larger one");
    }
    spec.judged(cases, None, false)
}

fn competing_fair(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "competing-fair",
        source: PSC,
        claim: "Auto-tuning does not let a transfer take more than its fair share from a competing one",
        paper: "'none of the elements of auto-tuning allows a user to steal more than their fair share of bandwidth ... TCP tends to equalize the window (in packets) of all connections that share a bottleneck' (sec. 6); parallel connections 'appear to achieve fairness' (sec. 4.2)",
        rule: "per path, stream count and mode: holds where Jain's index of the two transfers over the time both were sending is >= 0.9 (shares within about 2:1); 1 is an equal split".into(),
    };
    let Some(x) = &c.plan.plan.extras.competing else {
        return spec.missing("the competing-transfers experiment");
    };
    let mut cases = Vec::new();
    for &rtt in &x.rtts_us {
        for &n in &x.streams {
            for m in &x.modes {
                let k = CellKey {
                    scenario: Some(Scenario::Competing),
                    ..key(rtt, m, n)
                };
                let Some(s) = c.agg.cell(&k) else {
                    continue;
                };
                let Some(j) = s.jain_transfers else {
                    continue;
                };
                cases.push(case(
                    format!("{m} {} P={n}", ms(rtt)),
                    "fair",
                    format!(
                        "Jain {:.3} (min {:.3}){}",
                        j.median,
                        j.min,
                        s.jain_streams
                            .map_or(String::new(), |j| format!(", over streams {:.3}", j.median))
                    ),
                    j.median >= 0.9,
                ));
            }
        }
    }
    if cases.is_empty() {
        return spec.missing("competing runs with a Jain's index");
    }
    spec.judged(cases, None, false)
}

fn congestion_controls(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "congestion-controls",
        source: WF,
        claim: "The congestion control is a constant of the experiment (Reno/SACK in 2002); today's choices change the picture",
        paper: "'congestion control for TCP Reno/SACK under Linux is a constant for all experiments' (sec. III.B)",
        rule: "no verdict: each mode of the congestion sweep under each control, Mbit/s from the command's start".into(),
    };
    let Some(x) = &c.plan.plan.extras.congestion else {
        return spec.missing("the congestion-control sweep");
    };
    let mut parts = Vec::new();
    for &rtt in &x.rtts_us {
        for &n in &x.streams {
            for m in &x.modes {
                let v: Vec<String> = x
                    .controls
                    .iter()
                    .filter_map(|cc| {
                        let k = CellKey {
                            cc: (c.plan.plan.congestion.as_deref() != Some(cc.as_str()))
                                .then(|| cc.clone()),
                            ..key(rtt, m, n)
                        };
                        c.agg.cell(&k).map(|s| format!("{cc} {:.0}", s.mbps()))
                    })
                    .collect();
                if !v.is_empty() {
                    parts.push(format!("{m} {} P={n}: {}", ms(rtt), v.join(", ")));
                }
            }
        }
    }
    if parts.is_empty() {
        return spec.missing("cells of the congestion sweep");
    }
    spec.reference(parts.join("; "))
}

fn known_path(c: &Ctx) -> Claim {
    let spec = Spec {
        id: "known-path",
        source: WF,
        claim: "Enable's idea: a path measured once and saved is fast to tune the next time",
        paper: "Enable 'gathers information about every pair of hosts ... and saves it in a database. Hosts then look up this information when opening a connection' (sec. II.A); Enable reported 10-20 x over untuned and 2-3 x over 2.4 autotuning",
        rule: "per path (RTT >= 20 ms) and stream count: holds where auto on a known path (warm database) finishes no later than auto on a new one (within 5% for noise)".into(),
    };
    let mut cases = Vec::new();
    for (k, known) in c.agg.cells.iter().filter(|(k, _)| {
        k.path == PathKnowledge::Known && k.tune == "auto" && k.rtt_us >= WAN_RTT_US
    }) {
        let new = CellKey {
            path: PathKnowledge::New,
            ..k.clone()
        };
        let Some(fresh) = c.agg.cell(&new) else {
            continue;
        };
        let (a, b) = (known.completion_s.median, fresh.completion_s.median);
        cases.push(case(
            format!("{} P={} ({})", ms(k.rtt_us), k.streams, k.host),
            "faster when known",
            format!(
                "{a:.2} s known ({}) vs {b:.2} s new",
                known.measurement_source.as_deref().unwrap_or("?")
            ),
            a <= b * 1.05,
        ));
    }
    if cases.is_empty() {
        return spec.missing("auto on known and new paths of 20 ms or more");
    }
    spec.judged(cases, None, false)
}
