//! The results directory and building every output from it.
//!
//! | file | what |
//! |---|---|
//! | `plan.json` | the expanded plan ([`ExpandedPlan`]): every planned cell |
//! | `meta.json` | machine, sysctls, global changes, calibration ([`LabMeta`]) |
//! | `results.jsonl` | one [`RunRecord`] per line, appended as runs finish |
//! | `results.csv` | the same runs, flat, for spreadsheets |
//! | `cells.csv` | one row per cell: median and min-max over repetitions |
//! | `summary.json` | [`Summary`]: per path and stream count, each mode's median throughput and peak buffer; headline; claims |
//! | `report.html` | the page |

use crate::aggregate::{aggregate, Aggregate};
use crate::claims::claims;
use crate::headline::headline;
use crate::html::{render, ReportInput};
use crate::plan::ExpandedPlan;
use crate::record::{LabMeta, RunRecord};
use crate::summary::{summarize, terminal_table, Summary};
use serde::Serialize;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The expanded plan.
pub const PLAN_FILE: &str = "plan.json";
/// Machine and changes.
pub const META_FILE: &str = "meta.json";
/// Runs, one JSON object per line.
pub const RESULTS_FILE: &str = "results.jsonl";
/// Runs as CSV.
pub const RESULTS_CSV: &str = "results.csv";
/// Cells as CSV.
pub const CELLS_CSV: &str = "cells.csv";
/// The summary.
pub const SUMMARY_FILE: &str = "summary.json";
/// The page.
pub const REPORT_FILE: &str = "report.html";

/// Why a results file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    /// A file operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done ("reading", "writing", "creating").
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A file's contents did not parse.
    #[error("{path}:{line}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Line number (1 for whole-file JSON).
        line: usize,
        /// The error.
        source: serde_json::Error,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> ResultsError + 'a {
    move |source| ResultsError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Write a value as pretty JSON.
pub fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<(), ResultsError> {
    let s = serde_json::to_string_pretty(v).map_err(|source| ResultsError::Parse {
        path: path.to_path_buf(),
        line: 0,
        source,
    })?;
    std::fs::write(path, s + "\n").map_err(io("writing", path))
}

/// Read a JSON file.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ResultsError> {
    let s = std::fs::read_to_string(path).map_err(io("reading", path))?;
    serde_json::from_str(&s).map_err(|source| ResultsError::Parse {
        path: path.to_path_buf(),
        line: source.line(),
        source,
    })
}

/// Append one record to `results.jsonl` (one line, flushed).
pub fn append_record(dir: &Path, r: &RunRecord) -> Result<(), ResultsError> {
    let path = dir.join(RESULTS_FILE);
    let line = serde_json::to_string(r).map_err(|source| ResultsError::Parse {
        path: path.clone(),
        line: 0,
        source,
    })?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(io("opening", &path))?;
    f.write_all(format!("{line}\n").as_bytes())
        .and_then(|_| f.flush())
        .map_err(io("appending to", &path))
}

/// Read `results.jsonl` (blank lines skipped; a bad line is an error naming it).
pub fn read_records(dir: &Path) -> Result<Vec<RunRecord>, ResultsError> {
    let path = dir.join(RESULTS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("reading", &path)(e)),
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

/// Every output, built from the plan, the runs and the meta.
#[derive(Debug)]
pub struct Built {
    /// Aggregated cells.
    pub aggregate: Aggregate,
    /// `summary.json`.
    pub summary: Summary,
    /// `report.html`.
    pub html: String,
    /// `results.csv`.
    pub results_csv: String,
    /// `cells.csv`.
    pub cells_csv: String,
    /// The terminal table.
    pub table: String,
}

/// Build every output (pure).
pub fn build(plan: &ExpandedPlan, records: &[RunRecord], meta: &LabMeta) -> Built {
    let agg = aggregate(records);
    let hl = headline(plan, &agg);
    let cl = claims(plan, &agg);
    let summary = summarize(plan, &agg, records, hl, cl);
    let html = render(&ReportInput {
        plan,
        records,
        meta,
        agg: &agg,
        summary: &summary,
    });
    Built {
        results_csv: results_csv(records),
        cells_csv: cells_csv(&agg),
        table: terminal_table(&summary),
        aggregate: agg,
        summary,
        html,
    }
}

/// Write the built outputs into `dir`.
pub fn write_outputs(dir: &Path, b: &Built) -> Result<(), ResultsError> {
    write_json(&dir.join(SUMMARY_FILE), &b.summary)?;
    for (name, text) in [
        (REPORT_FILE, &b.html),
        (RESULTS_CSV, &b.results_csv),
        (CELLS_CSV, &b.cells_csv),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(io("writing", &p))?;
    }
    Ok(())
}

/// `tcptune lab report DIR`: read the saved plan, meta and runs, and rebuild every output.
pub fn rebuild(dir: &Path) -> Result<Built, ResultsError> {
    let plan: ExpandedPlan = read_json(&dir.join(PLAN_FILE))?;
    let meta: LabMeta = read_json(&dir.join(META_FILE))?;
    let records = read_records(dir)?;
    let b = build(&plan, &records, &meta);
    write_outputs(dir, &b)?;
    Ok(b)
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or(String::new(), |x| x.to_string())
}

/// The congestion controls of a run's sockets: `cubic*4` per end, ends joined by `/`.
fn cc_used(r: &RunRecord) -> String {
    r.congestion_used()
        .iter()
        .map(|m| {
            m.iter()
                .map(|(cc, n)| format!("{cc}*{n}"))
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// One row per run.
pub fn results_csv(records: &[RunRecord]) -> String {
    let mut s = String::from("rtt_ms,host,streams,tune,path,cc,size_bytes,scenario,repetition,ok,capped,complete,throughput_bps,completion_s,first_to_last_bps,first_to_last_s,bytes,session_s,setup_round_trips,finish_round_trips,measurement_source,streams_used,peak_sndbuf_bytes,peak_rcvbuf_bytes,peak_wmem_queued_bytes,peak_rmem_alloc_bytes,retransmits,rtt_min_us,rwnd_limited_us,sndbuf_limited_us,emu_drops,emu_lateness_p99_us,measure_s,setup_s,congestion_used,wall_s,error\n");
    for r in records {
        let k = &r.cell;
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{:.0},{:.6},{:.0},{:.6},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.3},{}",
            k.rtt_ms(),
            k.host,
            k.streams,
            csv_field(&k.tune),
            if k.path.is_new() { "new" } else { "known" },
            k.cc.as_deref().unwrap_or(""),
            opt(k.bytes),
            match k.scenario {
                Some(crate::plan::Scenario::Competing) => "competing",
                Some(crate::plan::Scenario::PathChange) => "path_change",
                None => "",
            },
            r.repetition,
            r.ok,
            r.capped,
            r.complete,
            r.throughput_bps(),
            r.completion(),
            r.first_to_last_bps,
            r.first_to_last_s,
            r.bytes,
            opt(r.session_s.map(|m| format!("{m:.3}"))),
            opt(r.setup_round_trips),
            opt(r.finish_round_trips),
            csv_field(r.measurement_source.as_deref().unwrap_or("")),
            r.streams_used,
            r.peak_sndbuf_bytes,
            r.peak_rcvbuf_bytes,
            r.peak_wmem_queued_bytes,
            r.peak_rmem_alloc_bytes,
            r.retransmits,
            opt(r.rtt_min_us()),
            r.rwnd_limited_us(),
            r.sndbuf_limited_us(),
            opt(r.emu.as_ref().map(|e| e.drops)),
            opt(r
                .emu
                .as_ref()
                .and_then(|e| e.lateness_p99_us)
                .map(|l| l.round())),
            opt(r.measure_s.map(|m| format!("{m:.3}"))),
            opt(r.setup_s.map(|m| format!("{m:.3}"))),
            csv_field(&cc_used(r)),
            r.wall_s,
            csv_field(&match (&r.error, &r.not_run) {
                (Some(e), _) => e.clone(),
                (None, Some(why)) => format!("not run: {why}"),
                (None, None) => String::new(),
            })
        );
    }
    s
}

/// One row per cell.
pub fn cells_csv(agg: &Aggregate) -> String {
    let mut s = String::from("rtt_ms,host,streams,tune,path,cc,size_bytes,scenario,runs,failed,capped,throughput_median_bps,throughput_min_bps,throughput_max_bps,completion_median_s,first_to_last_median_bps,peak_buffer_median_bytes,peak_sndbuf_median_bytes,peak_rcvbuf_median_bytes,peak_used_median_bytes,streams_used_median,rtt_min_us,rwnd_limited_share,sndbuf_limited_share,is_ideal\n");
    for (k, c) in &agg.cells {
        let is_ideal = agg
            .ideal
            .get(&(k.rtt_us, k.streams))
            .is_some_and(|p| p.stats.key == *k);
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{:.0},{:.0},{:.0},{:.6},{:.0},{:.0},{:.0},{:.0},{:.0},{},{},{},{},{}",
            k.rtt_ms(),
            k.host,
            k.streams,
            csv_field(&k.tune),
            if k.path.is_new() { "new" } else { "known" },
            k.cc.as_deref().unwrap_or(""),
            opt(k.bytes),
            match k.scenario {
                Some(crate::plan::Scenario::Competing) => "competing",
                Some(crate::plan::Scenario::PathChange) => "path_change",
                None => "",
            },
            c.runs,
            c.failed,
            c.capped,
            c.throughput_bps.median,
            c.throughput_bps.min,
            c.throughput_bps.max,
            c.completion_s.median,
            c.first_to_last_bps.median,
            c.peak_buffer_bytes.median,
            c.peak_sndbuf_bytes.median,
            c.peak_rcvbuf_bytes.median,
            c.peak_used_bytes.median,
            c.streams_used.median,
            opt(c.rtt_min_us.map(|v| v.round())),
            opt(c.rwnd_limited_share.map(|v| format!("{v:.4}"))),
            opt(c.sndbuf_limited_share.map(|v| format!("{v:.4}"))),
            is_ideal
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::tests::{run, run_cell};
    use crate::plan::{HostConfig, Plan};

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tcptune-lab-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }

    #[test]
    fn records_round_trip_through_jsonl_and_bad_lines_are_named() {
        let d = tmpdir("jsonl");
        let a = run(500, HostConfig::Untuned, 1, "kernel", 1, 100.0, 1);
        let b = run(500, HostConfig::Untuned, 1, "kernel", 2, 200.0, 1);
        append_record(&d, &a).expect("append");
        append_record(&d, &b).expect("append");
        assert_eq!(read_records(&d).expect("read"), vec![a, b]);
        std::fs::write(d.join(RESULTS_FILE), "{}\n\n{\"x\":1}\n").expect("write");
        let e = read_records(&d).expect_err("bad");
        assert!(e.to_string().contains("results.jsonl:1"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_size_sweep_record_keeps_its_size_beside_the_bytes_it_moved() {
        let d = tmpdir("size");
        let mut a = run(25_000, HostConfig::Untuned, 1, "kernel", 1, 100.0, 1);
        a.cell.bytes = Some(8 << 20);
        a.bytes = 8 << 20;
        append_record(&d, &a).expect("append");
        assert_eq!(read_records(&d).expect("read"), vec![a]);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn report_is_rebuilt_from_a_saved_directory() {
        let d = tmpdir("rebuild");
        let mut p = Plan::quick();
        p.rtts_us = vec![500, 25_000];
        let plan = p.expand();
        write_json(&d.join(PLAN_FILE), &plan).expect("plan");
        let meta = LabMeta {
            kernel: "6.18-test".into(),
            finished: true,
            ..LabMeta::default()
        };
        write_json(&d.join(META_FILE), &meta).expect("meta");
        for c in &plan.cells {
            let mbps = if c.key.tune == "none" { 20.0 } else { 500.0 };
            append_record(&d, &run_cell(&c.key, 1, mbps, 1 << 20)).expect("append");
        }
        let b = rebuild(&d).expect("rebuild");
        assert!(b.summary.missing_cells.is_empty());
        for f in [REPORT_FILE, SUMMARY_FILE, RESULTS_CSV, CELLS_CSV] {
            assert!(d.join(f).exists(), "{f}");
        }
        let html = std::fs::read_to_string(d.join(REPORT_FILE)).expect("html");
        assert!(html.contains("<svg"));
        assert!(html.contains("Paper vs today"));
        assert!(html.contains("6.18-test"));
        assert!(
            !html.contains("http://") || !html.contains("src=\"http"),
            "no external fetches"
        );
        let csv = std::fs::read_to_string(d.join(RESULTS_CSV)).expect("csv");
        assert_eq!(csv.lines().count(), plan.cells.len() + 1);
        let s: Summary = read_json(&d.join(SUMMARY_FILE)).expect("summary");
        assert_eq!(s.paths.len(), 2);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn cells_not_run_are_marked_everywhere_and_are_not_failures() {
        let mut p = Plan::quick();
        p.rtts_us = vec![500];
        let plan = p.expand();
        let meta = LabMeta {
            finished: true,
            mode: Some("rootless".into()),
            mode_summary: Some("rootless: cannot raise the global maxima".into()),
            ..LabMeta::default()
        };
        let why = "rootless mode: auto asks setsockopt for up to 128MiB";
        let mut records = Vec::new();
        for c in &plan.cells {
            if c.key.host == HostConfig::KernelOnly && c.key.tune == "auto" {
                records.push(RunRecord::not_run(c.key.clone(), 1, 0.0, why.into()));
            } else {
                let (rtt, h, n, t) = (c.key.rtt_us, c.key.host, c.key.streams, &c.key.tune);
                // The cell's whole key (a known path's cells too).
                let mut r = run(rtt, h, n, t, 1, 500.0, 1 << 20);
                r.cell = c.key.clone();
                records.push(r);
            }
        }
        let b = build(&plan, &records, &meta);
        let s = &b.summary;
        assert!(s.missing_cells.is_empty(), "{:?}", s.missing_cells);
        assert_eq!(s.failed_runs, 0);
        assert_eq!(s.runs, records.len());
        let n_auto = plan
            .cells
            .iter()
            .filter(|c| c.key.host == HostConfig::KernelOnly && c.key.tune == "auto")
            .count();
        assert!(n_auto >= plan.plan.streams.len());
        assert_eq!(s.not_run_cells.len(), n_auto, "{:?}", s.not_run_cells);
        assert!(s
            .not_run_cells
            .iter()
            .all(|c| c.reason == why && c.cell.contains("auto")));
        assert!(b.html.contains("not run in this mode"), "header");
        assert!(b.html.contains(&format!("Not run ({n_auto})")), "table");
        assert!(b.html.contains("Mode rootless: cannot raise"), "mode line");
        assert!(b.table.contains("not run in this mode"), "{}", b.table);
        assert!(b.results_csv.contains(&format!("not run: {why}")));
        // The aggregate has no statistics for them (no zero throughput).
        assert!(b
            .aggregate
            .cells
            .keys()
            .all(|k| !(k.host == HostConfig::KernelOnly && k.tune == "auto")));
    }

    #[test]
    fn csv_quotes_fields_with_commas() {
        let mut r = run(500, HostConfig::Untuned, 1, "kernel", 1, 1.0, 1);
        r.error = Some("refused, \"twice\"".into());
        let s = results_csv(&[r]);
        assert!(s.contains("\"refused, \"\"twice\"\"\""), "{s}");
    }
}
