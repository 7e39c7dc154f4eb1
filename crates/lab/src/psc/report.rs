//! The PSC results folder and every output built from it (pure, except reading and writing
//! the files):
//!
//! | file | what |
//! |---|---|
//! | `psc_plan.json` | the [`PscPlan`] |
//! | `meta.json` | machine and mode ([`LabMeta`]) |
//! | `psc_results.jsonl` | one [`PscRecord`] per run, appended as runs finish |
//! | `summary.json` | [`PscSummary`]: its `psc` section holds the claims and the cells |
//! | `report.html` | the page, figures inline |
//! | `psc-fig3.svg` ... | each figure on its own |

use super::aggregate::{aggregate, PscAggregate};
use super::claims::claims;
use super::figures;
use super::plan::PscPlan;
use super::record::PscRecord;
use crate::claims::Claim;
use crate::html::{claims_table, CSS};
use crate::record::LabMeta;
use crate::results::{read_json, write_json, ResultsError};
use crate::svg::esc;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

/// The plan.
pub const PSC_PLAN_FILE: &str = "psc_plan.json";
/// The runs.
pub const PSC_RESULTS_FILE: &str = "psc_results.jsonl";
/// Version of [`PscSummary`].
pub const PSC_SUMMARY_SCHEMA_VERSION: u32 = 1;

/// The `psc` section of `summary.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PscSection {
    /// Paper vs today.
    pub claims: Vec<Claim>,
    /// Every cell: aggregate throughput per path, per-connection throughput, fairness,
    /// memory.
    pub cells: Vec<super::aggregate::PscCellStats>,
}

/// `summary.json` of a PSC lab.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PscSummary {
    /// [`PSC_SUMMARY_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The plan's name.
    pub plan: String,
    /// Runs recorded.
    pub runs: usize,
    /// Runs in which a connection (or the run) failed.
    pub failed_runs: usize,
    /// The section.
    pub psc: PscSection,
}

/// Every output.
#[derive(Debug)]
pub struct PscBuilt {
    /// The aggregate.
    pub aggregate: PscAggregate,
    /// `summary.json`.
    pub summary: PscSummary,
    /// `report.html`.
    pub html: String,
    /// Figures: file name and SVG.
    pub figures: Vec<(String, String)>,
    /// Lines for the terminal.
    pub table: String,
}

/// Build every output (pure).
pub fn build(plan: &PscPlan, records: &[PscRecord], meta: &LabMeta) -> PscBuilt {
    let agg = aggregate(plan, records);
    let cl = claims(plan, &agg);
    let summary = PscSummary {
        schema_version: PSC_SUMMARY_SCHEMA_VERSION,
        plan: plan.name.clone(),
        runs: records.len(),
        failed_runs: records.iter().filter(|r| !r.ok).count(),
        psc: PscSection {
            claims: cl,
            cells: agg.cells.clone(),
        },
    };
    let mut figs = vec![
        ("psc-fig3.svg".to_string(), figures::figure3(plan, &agg)),
        ("psc-fig4.svg".to_string(), figures::figure4(plan, &agg)),
        ("psc-fig7.svg".to_string(), figures::figure7(plan, &agg)),
        ("psc-fig8.svg".to_string(), figures::figure8(plan, &agg)),
    ];
    if let Some(r) = figures::share_run(plan, records) {
        figs.push(("psc-shares.svg".into(), figures::shares(plan, r)));
    }
    let figures: Vec<(String, String)> = figs.into_iter().map(|(n, c)| (n, c.render())).collect();
    let html = render(plan, meta, &summary, &figures);
    PscBuilt {
        table: table(&summary),
        aggregate: agg,
        summary,
        html,
        figures,
    }
}

fn mbit(v: Option<crate::aggregate::Spread>) -> String {
    v.map_or("-".into(), |s| format!("{:.1}", s.median / 1e6))
}

fn kib(v: Option<crate::aggregate::Spread>) -> String {
    v.map_or("-".into(), |s| format!("{:.0}", s.median / 1024.0))
}

fn jain(v: Option<crate::aggregate::Spread>) -> String {
    v.map_or("-".into(), |s| format!("{:.2}", s.median))
}

/// The terminal table: one line per cell, then the claims.
pub fn table(s: &PscSummary) -> String {
    let mut t = format!(
        "{:<26} {:>4} {:>8} {:>8} {:>8} {:>6} {:>6} {:>8} {:>8} {:>5}\n",
        "cell",
        "ok",
        "remote",
        "local",
        "per-conn",
        "J-conn",
        "J-path",
        "peak KiB",
        "held KiB",
        "sust"
    );
    for c in &s.psc.cells {
        let _ = writeln!(
            t,
            "{:<26} {:>4} {:>8} {:>8} {:>8} {:>6} {:>6} {:>8} {:>8} {:>5}",
            c.cell.id(),
            format!("{}/{}", c.ok_runs, c.runs),
            mbit(c.remote_bps),
            mbit(c.local_bps),
            mbit(c.per_connection_bps),
            jain(c.jain_connections),
            jain(c.jain_paths),
            kib(c.peak_in_use),
            kib(c.peak_held),
            if c.sustained { "yes" } else { "no" }
        );
    }
    t.push('\n');
    for c in &s.psc.claims {
        let _ = writeln!(t, "{:<28} {:<13} {}", c.id, c.verdict.label(), c.measured);
    }
    t
}

fn render(plan: &PscPlan, meta: &LabMeta, s: &PscSummary, figures: &[(String, String)]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>tcptune lab --psc: {}</title><style>{CSS}</style></head><body>",
        esc(&plan.name)
    );
    let _ = write!(
        h,
        "<h1>tcptune lab --psc: automatic TCP buffer tuning under a memory budget</h1><p class=\"sub\">A reproduction of Semke, Mahdavi &amp; Mathis, <i>Automatic TCP Buffer Tuning</i> (SIGCOMM 1998), on Linux {} today. One sender (<code>tcptune serve --memory-budget {} KiB</code>) sends to receivers over two emulated paths at once: remote {:.0} Mbit/s x {} ms, local {:.0} Mbit/s x {} ms (MTU {}). Modes: {}. Basic experiment: {} connection(s) to the remote receiver; diverse: {} to each receiver. {} repetition(s), {} s transfers. {} runs ({} failed).</p>",
        esc(&meta.kernel),
        plan.budget / 1024,
        plan.remote.rate_bps as f64 / 1e6,
        plan.remote.rtt_us as f64 / 1000.0,
        plan.local.rate_bps as f64 / 1e6,
        plan.local.rtt_us as f64 / 1000.0,
        plan.mtu,
        esc(&plan.modes.join(", ")),
        join(&plan.basic),
        join(&plan.diverse),
        plan.repetitions,
        plan.seconds,
        s.runs,
        s.failed_runs
    );
    if let Some(line) = &meta.mode_summary {
        let _ = write!(h, "<p class=\"sub\">Mode {}</p>", esc(line));
    }
    h.push_str("<h2>Paper vs today</h2>");
    claims_table(&mut h, &s.psc.claims);
    h.push_str("<h2>Figures</h2><p class=\"sub\">Median over repetitions, whiskers min-max. Memory is what the sender's data sockets queue (<code>sk_wmem_queued</code>/2, <code>SO_SNDBUF</code> units, sampled every 500 ms with <code>ss -tmi</code>); default and hiperf are fixed buffers outside the budget, as PSC's were outside AUTO_SND_THRESH.</p>");
    h.push_str("<p class=\"legend\">");
    for m in &plan.modes {
        let _ = write!(
            h,
            "<span><i style=\"background:{}\"></i>{} ({})</span>",
            figures::color(m),
            esc(m),
            esc(super::plan::tune_of(m).unwrap_or("?"))
        );
    }
    h.push_str("<span>Figure 7: solid remote path, dashed local path; horizontal lines: link rates, the memory budget and PSC's network memory. Last figure: one line per data socket (dashed: local path), black: all held together.</span></p>");
    for (_, svg) in figures {
        let _ = write!(h, "<div class=\"fig\">{svg}</div>");
    }
    h.push_str("<h2>Cells</h2><table><tr><th class=\"l\">cell</th><th>runs ok</th><th>remote Mbit/s</th><th>local Mbit/s</th><th>per connection Mbit/s</th><th>Jain, connections</th><th>Jain, paths</th><th>peak in use KiB</th><th>peak held KiB</th><th>sustained</th><th>drops remote/local</th></tr>");
    for c in &s.psc.cells {
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&c.cell.id()),
            c.ok_runs,
            c.runs,
            mbit(c.remote_bps),
            mbit(c.local_bps),
            mbit(c.per_connection_bps),
            jain(c.jain_connections),
            jain(c.jain_paths),
            kib(c.peak_in_use),
            kib(c.peak_held),
            if c.sustained { "yes" } else { "no" },
            c.drops
                .map(|d| d.map_or("-".into(), |s| format!("{:.0}", s.median)))
                .join("/")
        );
    }
    h.push_str("</table></body></html>\n");
    h
}

fn join(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join("/")
}

/// Append one record.
pub fn append_record(dir: &Path, r: &PscRecord) -> Result<(), ResultsError> {
    let path = dir.join(PSC_RESULTS_FILE);
    let io = |what: &'static str, source| ResultsError::Io {
        what,
        path: path.clone(),
        source,
    };
    let line = serde_json::to_string(r).map_err(|source| ResultsError::Parse {
        path: path.clone(),
        line: 0,
        source,
    })?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| io("opening", e))?;
    f.write_all(format!("{line}\n").as_bytes())
        .and_then(|_| f.flush())
        .map_err(|e| io("appending to", e))
}

/// Read every record.
pub fn read_records(dir: &Path) -> Result<Vec<PscRecord>, ResultsError> {
    let path = dir.join(PSC_RESULTS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ResultsError::Io {
                what: "reading",
                path,
                source,
            })
        }
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            serde_json::from_str(l).map_err(|source| ResultsError::Parse {
                path: path.clone(),
                line: n + 1,
                source,
            })
        })
        .collect()
}

/// Write `summary.json`, `report.html` and the figures.
pub fn write_outputs(dir: &Path, b: &PscBuilt) -> Result<(), ResultsError> {
    write_json(&dir.join(crate::results::SUMMARY_FILE), &b.summary)?;
    let files = std::iter::once((crate::results::REPORT_FILE.to_string(), &b.html))
        .chain(b.figures.iter().map(|(n, s)| (n.clone(), s)));
    for (name, text) in files {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|source| ResultsError::Io {
            what: "writing",
            path: p.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Rebuild every output of a PSC results folder.
pub fn rebuild(dir: &Path) -> Result<PscBuilt, ResultsError> {
    let plan: PscPlan = read_json(&dir.join(PSC_PLAN_FILE))?;
    let meta: LabMeta = read_json(&dir.join(crate::results::META_FILE))?;
    let b = build(&plan, &read_records(dir)?, &meta);
    write_outputs(dir, &b)?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::psc::aggregate::tests::{cell, run};
    use crate::psc::plan::Experiment;

    #[test]
    fn summary_has_a_psc_section_with_claims_and_the_page_every_figure() {
        let plan = PscPlan::quick();
        let recs = vec![
            run(cell(Experiment::Basic, "psc", 1), &[30e6], 500_000, 400_000),
            run(
                cell(Experiment::Diverse, "psc", 1),
                &[30e6, 9e6],
                500_000,
                1,
            ),
        ];
        let b = build(&plan, &recs, &LabMeta::default());
        let v = serde_json::to_value(&b.summary).unwrap();
        let claims = v["psc"]["claims"].as_array().unwrap();
        assert!(claims.len() >= 4);
        for c in claims {
            for k in ["id", "claim", "paper", "measured", "verdict"] {
                assert!(c.get(k).is_some(), "{k} in {c}");
            }
        }
        assert_eq!(b.figures.len(), 5);
        assert!(b.html.contains("Figure 7") && b.html.contains("psc-fair-paths"));
        assert!(b.table.contains("diverse/psc/1+1"));
    }

    #[test]
    fn records_round_trip_through_the_folder() {
        let d = std::env::temp_dir().join(format!("tcptune-psc-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let r = run(cell(Experiment::Basic, "hiperf", 2), &[1e6, 2e6], 1, 1);
        append_record(&d, &r).unwrap();
        append_record(&d, &r).unwrap();
        assert_eq!(read_records(&d).unwrap(), vec![r.clone(), r]);
        write_json(&d.join(PSC_PLAN_FILE), &PscPlan::quick()).unwrap();
        write_json(&d.join(crate::results::META_FILE), &LabMeta::default()).unwrap();
        let b = rebuild(&d).unwrap();
        assert_eq!(b.summary.runs, 2);
        assert!(d.join("report.html").exists() && d.join("psc-fig3.svg").exists());
        let _ = std::fs::remove_dir_all(&d);
    }
}
