//! `tcptune lab`: the option handling, and `--quick` end to end (root only; under CI=true it
//! must run, never skip).

use std::path::{Path, PathBuf};
use std::process::Command;
use tcptune_lab::plan::ExpandedPlan;
use tcptune_lab::record::{LabMeta, RunRecord};
use tcptune_lab::summary::Summary;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tcptune")
}

/// A scratch folder removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("tcptune-labtest-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("create temp dir");
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn dry_run_lists_every_planned_cell_without_running() {
    let o = Command::new(bin())
        .args(["lab", "--quick", "--dry-run", "--json"])
        .output()
        .expect("run tcptune");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let plan: ExpandedPlan = serde_json::from_slice(&o.stdout).expect("expanded plan JSON");
    assert_eq!(plan.plan.name, "quick");
    assert!(plan.cells.iter().any(|c| c.key.tune == "auto"));
    assert!(plan.cells.iter().any(|c| c.key.tune.starts_with("fixed:")));
}

#[test]
fn bad_plan_file_is_a_usage_error_naming_the_problem() {
    let d = TempDir::new("badplan");
    let f = d.0.join("plan.toml");
    std::fs::write(&f, "rtts = [\"25\"]\n").expect("write plan");
    let o = Command::new(bin())
        .args(["lab", "--dry-run", "--plan"])
        .arg(&f)
        .output()
        .expect("run tcptune");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("rtt '25'"), "{err}");
    let o = Command::new(bin())
        .args(["lab", "--quick", "--rate", "fast", "--dry-run"])
        .output()
        .expect("run tcptune");
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn report_of_a_missing_folder_fails_clearly() {
    let o = Command::new(bin())
        .args(["lab", "report", "/nonexistent/tcptune-lab"])
        .output()
        .expect("run tcptune");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("plan.json"), "{err}");
}

fn read_records(dir: &Path) -> Vec<RunRecord> {
    std::fs::read_to_string(dir.join("results.jsonl"))
        .expect("results.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("record parses"))
        .collect()
}

#[test]
fn quick_lab_runs_every_planned_cell_and_writes_a_report() {
    if !tcptune_testkit::require(
        "quick_lab_runs_every_planned_cell_and_writes_a_report",
        &[tcptune_testkit::Need::Root, tcptune_testkit::Need::Tun],
    ) {
        return;
    }
    let d = TempDir::new("quick");
    let out = d.0.join("results");
    let ns_before = lab_namespaces();
    let started = std::time::Instant::now();
    let o = Command::new(bin())
        .args(["lab", "--quick", "--no-progress", "--out"])
        .arg(&out)
        .output()
        .expect("run tcptune lab");
    let secs = started.elapsed().as_secs();
    let stderr = String::from_utf8_lossy(&o.stderr);
    let stdout = String::from_utf8_lossy(&o.stdout);
    eprintln!("tcptune lab --quick took {secs} s\n{stdout}");
    assert!(
        o.status.success(),
        "lab failed ({}):\n{stderr}\n{stdout}",
        o.status
    );
    for f in [
        "plan.json",
        "meta.json",
        "results.jsonl",
        "results.csv",
        "cells.csv",
        "summary.json",
        "report.html",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let plan: ExpandedPlan =
        serde_json::from_str(&std::fs::read_to_string(out.join("plan.json")).expect("plan.json"))
            .expect("plan parses");
    let meta: LabMeta =
        serde_json::from_str(&std::fs::read_to_string(out.join("meta.json")).expect("meta.json"))
            .expect("meta parses");
    assert!(meta.finished);
    assert!(
        meta.global_changes.iter().all(|c| c.restored),
        "{:?}",
        meta.global_changes
    );
    assert!(meta.calibration.as_ref().is_some_and(|c| c.faithful));
    let records = read_records(&out);
    assert_eq!(records.len(), plan.runs(), "one record per planned run");
    for c in &plan.cells {
        let ok = records.iter().filter(|r| r.cell == c.key && r.ok).count();
        assert!(ok > 0, "cell {} has no successful run", c.key.id());
    }
    assert!(records
        .iter()
        .filter(|r| r.ok)
        .all(|r| r.throughput_bps > 0.0));
    let summary: Summary =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).expect("summary"))
            .expect("summary parses");
    assert!(
        summary.missing_cells.is_empty(),
        "{:?}",
        summary.missing_cells
    );
    assert_eq!(summary.paths.len(), plan.plan.rtts_us.len());
    assert!(!summary.headline.rows.is_empty());
    assert!(!summary.claims.is_empty());
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(html.contains("<svg"));
    assert!(html.contains("Paper vs today"));
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http"),
        "no network fetches"
    );
    assert!(!html.contains("<script"));
    let csv = std::fs::read_to_string(out.join("results.csv")).expect("csv");
    assert_eq!(csv.lines().count(), records.len() + 1);
    // The report rebuilds from the saved folder to the same summary.
    let o = Command::new(bin())
        .args(["lab", "report", "--json"])
        .arg(&out)
        .output()
        .expect("run tcptune lab report");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let again: Summary = serde_json::from_slice(&o.stdout).expect("summary JSON");
    assert_eq!(again.paths.len(), summary.paths.len());
    assert_eq!(again.runs, summary.runs);
    // No namespace of the lab's is left behind.
    let left: Vec<String> = lab_namespaces()
        .into_iter()
        .filter(|n| !ns_before.contains(n))
        .collect();
    assert!(left.is_empty(), "left-over namespaces: {left:?}");
}

/// The lab's namespaces (`tt-lab<pid>...`) that exist now.
fn lab_namespaces() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("tt-lab"))
                .collect()
        })
        .unwrap_or_default()
}
