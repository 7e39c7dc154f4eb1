//! `summary.json` (also `tcptune lab --json`): per path and stream count, each mode's median
//! throughput and peak buffer memory, so scripts can compare modes; plus the headline and the
//! paper-vs-today verdicts. And the terminal table printed at the end of a lab.

use crate::aggregate::{Aggregate, CellStats};
use crate::claims::Claim;
use crate::headline::Headline;
use crate::plan::{ExpandedPlan, HostConfig, PlanMode};
use crate::record::RunRecord;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Version of `summary.json`.
pub const SUMMARY_SCHEMA_VERSION: u32 = 1;

/// The whole summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// [`SUMMARY_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Plan name.
    pub plan: String,
    /// Bottleneck rate, bit/s.
    pub rate_bps: u64,
    /// MTU.
    pub mtu: u32,
    /// Repetitions per cell.
    pub repetitions: u32,
    /// How to read the byte figures.
    pub units: String,
    /// Runs recorded, and how many failed.
    pub runs: usize,
    /// Runs that failed.
    pub failed_runs: usize,
    /// Planned cells without any successful run (cells not run on purpose are not counted).
    pub missing_cells: Vec<String>,
    /// Planned cells the lab did not run in its mode, and why (rootless mode: cells that
    /// need the host's global maxima raised; see `tcptune_lab::feasible`).
    #[serde(default)]
    pub not_run_cells: Vec<NotRunCell>,
    /// Per path.
    pub paths: Vec<PathSummary>,
    /// `auto` against `ideal` and `kernel`.
    pub headline: Headline,
    /// Paper vs today.
    pub claims: Vec<Claim>,
    /// The congestion control every data socket ran, read back from each socket.
    pub congestion_proof: CongestionProof,
}

/// Proof of the congestion control each socket used: every data socket reads its control
/// back (`getsockopt(TCP_CONGESTION)`) once connected, and every run records it per stream
/// and end (`results.jsonl`, `per_stream[].sender.congestion`, `.receiver.congestion`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CongestionProof {
    /// What the plan asks every socket for (`None`: the namespace's default).
    pub asked: Option<String>,
    /// Sender sockets per control, over every successful run.
    pub sender_sockets: BTreeMap<String, u64>,
    /// Receiver sockets per control.
    pub receiver_sockets: BTreeMap<String, u64>,
    /// Successful runs checked.
    pub runs: usize,
    /// Runs with a socket whose control is not what its cell asked for (cell id and
    /// repetition), or unknown.
    pub mismatched_runs: Vec<String>,
}

impl CongestionProof {
    /// Count the sockets of `records`.
    pub fn of(plan: &ExpandedPlan, records: &[RunRecord]) -> CongestionProof {
        let mut p = CongestionProof {
            asked: plan.plan.congestion.clone(),
            ..CongestionProof::default()
        };
        for r in records.iter().filter(|r| r.ok) {
            p.runs += 1;
            let want = r.cell.cc.clone().or_else(|| plan.plan.congestion.clone());
            let [snd, rcv] = r.congestion_used();
            let mut bad = false;
            for (m, total) in [(snd, &mut p.sender_sockets), (rcv, &mut p.receiver_sockets)] {
                for (cc, n) in m {
                    bad |= cc == "unknown" || want.as_ref().is_some_and(|w| *w != cc);
                    *total.entry(cc).or_insert(0) += u64::from(n);
                }
            }
            if bad || r.per_stream.is_empty() {
                p.mismatched_runs
                    .push(format!("{} rep {}", r.cell.id(), r.repetition));
            }
        }
        p
    }

    /// One sentence for the report.
    pub fn sentence(&self) -> String {
        let list = |m: &BTreeMap<String, u64>| {
            m.iter()
                .map(|(cc, n)| format!("{cc} on {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let asked = self.asked.as_deref().map_or(
            "the namespace's default (no control asked for)".to_string(),
            |a| format!("{a}, asked for on every socket with TCP_CONGESTION (a cell of the congestion sweep asks for its own)"),
        );
        let mut s = format!(
            "{asked}; read back from every data socket of {} successful runs: sender sockets {}; receiver sockets {}",
            self.runs,
            if self.sender_sockets.is_empty() { "none recorded".into() } else { list(&self.sender_sockets) },
            if self.receiver_sockets.is_empty() { "none recorded".into() } else { list(&self.receiver_sockets) },
        );
        if self.mismatched_runs.is_empty() {
            s.push_str("; every socket ran what its cell asked for");
        } else {
            s.push_str(&format!(
                "; {} run(s) had a socket running something else or not recorded: {}",
                self.mismatched_runs.len(),
                self.mismatched_runs
                    .iter()
                    .take(10)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        s
    }
}

/// A planned cell the lab did not run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NotRunCell {
    /// The cell's id.
    pub cell: String,
    /// Why.
    pub reason: String,
}

/// One path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathSummary {
    /// Round-trip time, ms.
    pub rtt_ms: f64,
    /// Bandwidth-delay product, bytes.
    pub bdp_bytes: u64,
    /// Per stream count.
    pub streams: Vec<StreamsSummary>,
}

/// One stream count on a path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamsSummary {
    /// Streams requested.
    pub streams: u32,
    /// Each mode under each host configuration it ran in.
    pub modes: Vec<ModeSummary>,
}

/// One mode in one host configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModeSummary {
    /// Mode (`auto`, `kernel`, `ideal`, `fixed:4194304`, ...).
    pub mode: String,
    /// Host configuration.
    pub host: HostConfig,
    /// For `ideal`: the fixed mode that won the sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tune: Option<String>,
    /// Median throughput from the client command's start to the last byte at the
    /// receiver, bit/s.
    pub throughput_bps: f64,
    /// Smallest over repetitions.
    pub throughput_min_bps: f64,
    /// Largest over repetitions.
    pub throughput_max_bps: f64,
    /// Median completion time (command start to last byte at the receiver), seconds.
    pub completion_s: f64,
    /// Median throughput from the receiver's first byte to its last, bit/s.
    pub first_to_last_bps: f64,
    /// Median peak kernel-held buffer (larger end, all streams), bytes.
    pub peak_buffer_bytes: u64,
    /// Median peak kernel-held send buffer (sender, all streams), bytes.
    pub peak_sndbuf_bytes: u64,
    /// Median peak memory in use (`sk_wmem_queued` or `sk_rmem_alloc`, larger end), bytes.
    pub peak_used_bytes: u64,
    /// Median peak kernel-held receive buffer (receiver, all streams), bytes.
    pub peak_rcvbuf_bytes: u64,
    /// Median streams used.
    pub streams_used: f64,
    /// Successful runs.
    pub runs: usize,
    /// Runs stopped by the time cap.
    pub capped: usize,
}

/// The modes the report shows for a host configuration: the plan's list, `ideal` in place,
/// plus fixed sizes listed explicitly.
pub fn shown_modes(plan: &ExpandedPlan, host: HostConfig) -> Vec<String> {
    plan.plan
        .hosts
        .get(&host)
        .map(|v| v.iter().map(PlanMode::to_string).collect())
        .unwrap_or_default()
}

fn mode_summary(mode: &str, host: HostConfig, s: &CellStats, tune: Option<String>) -> ModeSummary {
    ModeSummary {
        mode: mode.to_string(),
        host,
        tune,
        throughput_bps: s.throughput_bps.median,
        throughput_min_bps: s.throughput_bps.min,
        throughput_max_bps: s.throughput_bps.max,
        completion_s: s.completion_s.median,
        first_to_last_bps: s.first_to_last_bps.median,
        peak_buffer_bytes: s.peak_buffer_bytes.median as u64,
        peak_sndbuf_bytes: s.peak_sndbuf_bytes.median as u64,
        peak_used_bytes: s.peak_used_bytes.median as u64,
        peak_rcvbuf_bytes: s.peak_rcvbuf_bytes.median as u64,
        streams_used: s.streams_used.median,
        runs: s.runs,
        capped: s.capped,
    }
}

/// Build the summary.
pub fn summarize(
    plan: &ExpandedPlan,
    agg: &Aggregate,
    records: &[RunRecord],
    headline: Headline,
    claims: Vec<Claim>,
) -> Summary {
    let runs = records.len();
    let failed_runs = records.iter().filter(|r| r.failed_run()).count();
    let mut paths = Vec::new();
    for &rtt in &plan.plan.rtts_us {
        let mut streams = Vec::new();
        for &n in &plan.plan.streams {
            let mut modes = Vec::new();
            for host in HostConfig::ALL {
                for m in shown_modes(plan, host) {
                    if m == "ideal" {
                        if let Some(p) = agg.ideal.get(&(rtt, n)) {
                            let tune = Some(p.stats.key.tune.clone());
                            modes.push(mode_summary("ideal", host, &p.stats, tune));
                        }
                    } else if let Some(s) = agg.get(rtt, host, n, &m) {
                        modes.push(mode_summary(&m, host, s, None));
                    }
                }
            }
            streams.push(StreamsSummary { streams: n, modes });
        }
        paths.push(PathSummary {
            rtt_ms: rtt as f64 / 1000.0,
            bdp_bytes: plan.plan.bdp(rtt).0,
            streams,
        });
    }
    let missing_cells = plan
        .cells
        .iter()
        .filter(|c| !agg.cells.contains_key(&c.key) && !agg.not_run.contains_key(&c.key))
        .map(|c| c.key.id())
        .collect();
    let not_run_cells = plan
        .cells
        .iter()
        .filter_map(|c| {
            agg.not_run.get(&c.key).map(|why| NotRunCell {
                cell: c.key.id(),
                reason: why.clone(),
            })
        })
        .collect();
    Summary {
        schema_version: SUMMARY_SCHEMA_VERSION,
        plan: plan.plan.name.clone(),
        rate_bps: plan.plan.rate.0,
        mtu: plan.plan.mtu,
        repetitions: plan.plan.repetitions,
        units: UNITS.into(),
        runs,
        failed_runs,
        missing_cells,
        not_run_cells,
        paths,
        headline,
        claims,
        congestion_proof: CongestionProof::of(plan, records),
    }
}

/// The sentence about units, shared by the summary and the report.
pub const UNITS: &str =
    "Throughput is bytes over the time from the client command's start to the last byte's \
arrival at the receiver (completion time), for every mode alike, in bit/s (decimal: 1 Mbit/s = \
10^6 bit/s); first_to_last is the receiver's first byte to its last byte, which leaves out \
connecting, measuring and the first round trips. Buffer figures are kernel-held bytes (sk_sndbuf at the sender, \
sk_rcvbuf at the receiver, from SO_MEMINFO), summed over streams; peak_buffer is the larger end. \
These are limits the kernel may fill; peak_used is the memory actually queued at the peak \
(sk_wmem_queued at the sender, sk_rmem_alloc at the receiver, the larger end). \
The kernel holds twice what setsockopt asks for, so a fixed:S run holds about 2 S per stream; \
sizes of fixed modes and of ideal are setsockopt values. 1 MiB = 2^20 bytes.";

/// The terminal table: per path, one row per mode/host, one column per stream count
/// (median Mbit/s, `*` when capped), then the headline.
pub fn terminal_table(s: &Summary) -> String {
    let mut out = String::new();
    for p in &s.paths {
        let counts: Vec<u32> = p.streams.iter().map(|x| x.streams).collect();
        let _ = writeln!(
            out,
            "\nRTT {} ms (BDP {:.2} MiB) - median Mbit/s by parallel streams; * = time-capped",
            p.rtt_ms,
            p.bdp_bytes as f64 / (1 << 20) as f64
        );
        let mut rows: Vec<(String, HostConfig)> = Vec::new();
        for st in &p.streams {
            for m in &st.modes {
                if !rows.iter().any(|(mm, h)| *mm == m.mode && *h == m.host) {
                    rows.push((m.mode.clone(), m.host));
                }
            }
        }
        let mut header = format!("  {:<24}", "mode @ host");
        for n in &counts {
            let _ = write!(header, "{:>10}", format!("P={n}"));
        }
        let _ = writeln!(out, "{header}");
        for (mode, host) in rows {
            let mut line = format!("  {:<24}", format!("{mode} @ {host}"));
            for st in &p.streams {
                let cell = st
                    .modes
                    .iter()
                    .find(|m| m.mode == mode && m.host == host)
                    .map(|m| {
                        format!(
                            "{:.1}{}",
                            m.throughput_bps / 1e6,
                            if m.capped > 0 { "*" } else { "" }
                        )
                    })
                    .unwrap_or_else(|| "-".into());
                let _ = write!(line, "{cell:>10}");
            }
            let _ = writeln!(out, "{line}");
        }
    }
    let h = &s.headline;
    if !h.rows.is_empty() {
        let _ = writeln!(
            out,
            "\nHeadline: auto vs ideal (best fixed size), kernel autotuning at default limits and the physical limit;\n\
             Mbit/s from the command's start to the last byte at the receiver (streams actually used)"
        );
        let _ = writeln!(
            out,
            "  {:>6} {:>2} {:>5} {:>13} {:>13} {:>13} {:>8} {:>10} {:>11} {:>10} {:>10}",
            "RTT ms",
            "P",
            "path",
            "auto",
            "ideal",
            "kernel",
            "limit",
            "auto/ideal",
            "auto/kernel",
            "auto/limit",
            "mem/BDP"
        );
        for r in &h.rows {
            let f = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.2}"));
            let m = |x: &Option<crate::headline::ModeFigures>| {
                x.as_ref().map_or("-".into(), |m| {
                    format!("{:.0} ({:.0})", m.bps / 1e6, m.streams_used)
                })
            };
            let _ = writeln!(
                out,
                "  {:>6} {:>2} {:>5} {:>13} {:>13} {:>13} {:>8.0} {:>10} {:>11} {:>10} {:>10}",
                r.rtt_ms,
                r.streams,
                match r.path {
                    crate::plan::PathKnowledge::New => "new",
                    crate::plan::PathKnowledge::Known => "known",
                },
                m(&r.auto),
                m(&r.ideal),
                m(&r.kernel),
                r.limit_bps / 1e6,
                f(r.auto_over_ideal),
                f(r.auto_over_kernel),
                f(r.auto_of_limit),
                f(r.auto_mem_bdp)
            );
        }
        let _ = writeln!(
            out,
            "  goals (auto >= 0.95 x ideal, not later than kernel, memory <= 2 x BDP in setsockopt units) met on {} of {} judged rows",
            h.goals_met, h.judged
        );
        for sf in &h.shortfalls {
            let _ = writeln!(out, "  - {sf}");
        }
    }
    if !s.not_run_cells.is_empty() {
        let _ = writeln!(
            out,
            "\n{} planned cell(s) not run in this mode (see the report): {}",
            s.not_run_cells.len(),
            s.not_run_cells
                .iter()
                .map(|c| c.cell.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some(c) = s.not_run_cells.first() {
            let _ = writeln!(out, "  why: {}", c.reason);
        }
    }
    if s.failed_runs > 0 || !s.missing_cells.is_empty() {
        let _ = writeln!(
            out,
            "\n{} of {} runs failed; {} planned cells have no result",
            s.failed_runs,
            s.runs,
            s.missing_cells.len()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::aggregate;
    use crate::aggregate::tests::run;
    use crate::plan::Plan;

    #[test]
    fn summary_lists_modes_per_path_and_marks_capped_cells() {
        let mut p = Plan::quick();
        p.rtts_us = vec![25_000];
        p.streams = vec![1];
        let plan = p.expand();
        let mut capped = run(25_000, HostConfig::Untuned, 1, "none", 1, 18.0, 1 << 17);
        capped.capped = true;
        let recs = vec![
            capped,
            run(25_000, HostConfig::Untuned, 1, "auto", 1, 900.0, 8 << 20),
            run(
                25_000,
                HostConfig::UserKernel,
                1,
                "fixed:4194304",
                1,
                950.0,
                8 << 20,
            ),
        ];
        let agg = aggregate(&recs);
        let h = crate::headline::headline(&plan, &agg);
        let s = summarize(&plan, &agg, &recs, h, Vec::new());
        assert_eq!(s.paths.len(), 1);
        let modes = &s.paths[0].streams[0].modes;
        let ideal = modes.iter().find(|m| m.mode == "ideal").expect("ideal");
        assert_eq!(ideal.tune.as_deref(), Some("fixed:4194304"));
        assert_eq!(ideal.host, HostConfig::UserKernel);
        assert!(
            !s.missing_cells.is_empty(),
            "kernel etc. were planned but not run"
        );
        let t = terminal_table(&s);
        assert!(t.contains("18.0*"), "{t}");
        assert!(t.contains("auto @ untuned"), "{t}");
        assert!(t.contains("0.95"), "{t}");
        assert!(t.contains("950 (1)"), "{t}");
        let json = serde_json::to_string(&s).expect("serializes");
        let back: Summary = serde_json::from_str(&json).expect("parses");
        assert_eq!(back.paths, s.paths);
        assert_eq!(back.missing_cells, s.missing_cells);
    }

    #[test]
    fn congestion_proof_counts_sockets_and_names_runs_that_ran_something_else() {
        let plan = Plan::quick().expand();
        let with = |snd: &str, rcv: &str| {
            let mut r = run(25_000, HostConfig::Untuned, 1, "kernel", 1, 500.0, 1);
            let mut s = tcptune_transfer::report::StreamDetail {
                socket: 1,
                opened_at_s: 0.0,
                messages: 1,
                sender: Default::default(),
                receiver: Default::default(),
            };
            s.sender.stats.congestion = Some(snd.into());
            s.receiver.stats.congestion = Some(rcv.into());
            r.per_stream = vec![s.clone(), s];
            r
        };
        let p = CongestionProof::of(&plan, &[with("cubic", "cubic")]);
        assert_eq!(p.sender_sockets.get("cubic"), Some(&2));
        assert!(p.mismatched_runs.is_empty());
        assert!(p
            .sentence()
            .contains("every socket ran what its cell asked for"));
        let p = CongestionProof::of(&plan, &[with("cubic", "cubic"), with("bbr", "cubic")]);
        assert_eq!(p.mismatched_runs, vec!["rtt25ms/untuned/P1/kernel rep 1"]);
        assert!(p.sentence().contains("bbr on 2"), "{}", p.sentence());
    }
}
