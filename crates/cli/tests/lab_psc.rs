//! `tcptune lab --psc`: option handling, and a tiny PSC plan end to end (one sender under a
//! memory budget, clients over two emulated paths) checking that every planned run has a
//! complete record, that summary.json has its `psc` section and that the report and figures
//! exist (no rate assertions). Under CI=true it must run, never skip.

use std::path::PathBuf;
use std::process::Command;
use tcptune_lab::psc::{PscPlan, PscRecord, PscSummary};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tcptune")
}

/// A scratch folder removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("tcptune-psctest-{tag}-{}", std::process::id()));
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

/// Whether another lab holds the host-wide lab lock now.
fn a_lab_runs() -> bool {
    use std::os::fd::AsRawFd;
    let Ok(f) = std::fs::File::open("/run/tcptune-lab.lock") else {
        return false;
    };
    // SAFETY: flock on a descriptor we own; closing the file releases it.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) != 0 }
}

#[test]
fn psc_dry_run_lists_both_experiments_and_refuses_options_it_does_not_use() {
    let o = Command::new(bin())
        .args(["lab", "--psc", "--quick", "--dry-run", "--json"])
        .output()
        .expect("run tcptune");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let plan: PscPlan = serde_json::from_slice(&o.stdout).expect("PSC plan JSON");
    assert_eq!(plan.basic, vec![1, 4, 10, 20]);
    assert_eq!(plan.remote.rtt_us, 68_000);
    assert!(plan.modes.iter().any(|m| m == "hiperf"));
    let o = Command::new(bin())
        .args(["lab", "--psc", "--rate", "1gbit", "--dry-run"])
        .output()
        .expect("run tcptune");
    assert_eq!(o.status.code(), Some(2), "--rate does not apply to --psc");
    let help = Command::new(bin())
        .args(["lab", "--help"])
        .output()
        .expect("run tcptune");
    assert!(String::from_utf8_lossy(&help.stdout).contains("--psc"));
}

#[test]
fn tiny_psc_lab_records_every_connection_and_writes_its_summary_and_report() {
    if !tcptune_testkit::require(
        "tiny_psc_lab_records_every_connection_and_writes_its_summary_and_report",
        &[tcptune_testkit::Need::Emulator],
    ) {
        return;
    }
    assert!(
        tcptune_testkit::wait_for(std::time::Duration::from_secs(900), || !a_lab_runs()),
        "another tcptune lab held the host-wide lab lock for 15 minutes"
    );
    let d = TempDir::new("tiny");
    let plan = d.0.join("psc.toml");
    std::fs::write(
        &plan,
        "name = \"tiny\"\nbasic = [1, 3]\ndiverse = [1]\nmodes = [\"default\", \"hiperf\", \"psc\"]\nseconds = 2.0\nrepetitions = 1\n",
    )
    .expect("write plan");
    let out = d.0.join("results");
    let started = std::time::Instant::now();
    let o = Command::new(bin())
        .args(["lab", "--psc", "--no-progress", "--plan"])
        .arg(&plan)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run tcptune lab --psc");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    eprintln!(
        "tcptune lab --psc took {} s\n{stdout}",
        started.elapsed().as_secs()
    );
    assert!(
        o.status.success(),
        "lab --psc failed ({}):\n{stderr}\n{stdout}",
        o.status
    );
    for f in [
        "psc_plan.json",
        "meta.json",
        "psc_results.jsonl",
        "summary.json",
        "report.html",
        "psc-fig3.svg",
        "psc-fig7.svg",
        "psc-shares.svg",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let text = std::fs::read_to_string(out.join("psc_results.jsonl")).expect("records");
    let records: Vec<PscRecord> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("record"))
        .collect();
    // (1 + 3 basic + 1 diverse) x 3 modes.
    assert_eq!(records.len(), 9);
    // A failed run's clients' output is kept in logs/failed-*: show it.
    let failed_logs = || -> String {
        std::fs::read_dir(out.join("logs"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().starts_with("failed-"))
                    .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    };
    for r in &records {
        assert!(r.ok, "{}: {:?}\n{}", r.cell.id(), r.error, failed_logs());
        assert_eq!(
            r.connections.len() as u32,
            r.cell.total(),
            "{}",
            r.cell.id()
        );
        assert!(r.connections.iter().all(|c| c.bytes > 0));
        assert!(!r.memory.is_empty(), "{}: no memory samples", r.cell.id());
        assert_eq!(r.paths.len(), 2, "{}: both paths' counters", r.cell.id());
        assert!(
            r.paths[0].packets > 0,
            "{}: nothing crossed the remote path",
            r.cell.id()
        );
        let paths: std::collections::BTreeSet<usize> =
            r.connections.iter().map(|c| c.path).collect();
        assert_eq!(paths.len(), if r.cell.connections[1] > 0 { 2 } else { 1 });
    }
    // The local connections really went over the second path: its sockets' peer is .2.
    let diverse = records
        .iter()
        .find(|r| r.cell.connections[1] > 0)
        .expect("a diverse run");
    assert!(diverse
        .memory
        .iter()
        .flat_map(|m| &m.sockets)
        .any(|s| s.peer.ip().to_string() == "198.19.0.2"));
    let summary: PscSummary =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
            .expect("summary.json");
    assert_eq!(summary.runs, 9);
    assert!(summary.psc.claims.len() >= 4);
    assert_eq!(summary.psc.cells.len(), 9);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("Figure 3") && html.contains("psc-connections-sustained"));
    // `lab report` rebuilds a PSC folder.
    let o = Command::new(bin())
        .args(["lab", "report", "--json"])
        .arg(&out)
        .output()
        .expect("run tcptune lab report");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let again: PscSummary = serde_json::from_slice(&o.stdout).expect("rebuilt summary");
    assert_eq!(again.psc.cells, summary.psc.cells);
}
