//! `tcptune lab`: the option handling, `--quick` end to end (in the mode the test process
//! gets: root, or rootless as an ordinary user; CI runs it both ways), a rootless lab marking
//! the cells it cannot run, and a lab killed with SIGKILL mid-run leaving nothing behind once
//! the next lab or `lab --cleanup` ran (root only). Under CI=true they must run, never skip.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use tcptune_lab::plan::{ExpandedPlan, Scenario};
use tcptune_lab::record::{LabMeta, RunRecord};
use tcptune_lab::summary::Summary;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tcptune")
}

/// One test of this file at a time: labs share a host-wide lock and the global sysctls, and
/// the crash test compares the host's process list before and after.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LAB: Mutex<()> = Mutex::new(());
    LAB.lock().unwrap_or_else(|e| e.into_inner())
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
    let _one = one_at_a_time();
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
    let _one = one_at_a_time();
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
    let _one = one_at_a_time();
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
        &[tcptune_testkit::Need::Emulator],
    ) {
        return;
    }
    let rootless = tcptune_testkit::emulator_mode() == Some(tcptune_emu::Mode::Rootless);
    let _one = one_at_a_time();
    wait_until_no_lab_runs();
    let d = TempDir::new("quick");
    let out = d.0.join("results");
    let ns_before = lab_namespaces();
    let started = std::time::Instant::now();
    // --force: whether the emulator holds 1 Gbit/s here (the calibration's verdict) is a
    // rate, measured by bench/emu_rates.sh; this test checks that every planned cell runs
    // and reports, on a loaded machine and in a debug build too.
    let o = Command::new(bin())
        .args(["lab", "--quick", "--force", "--no-progress", "--out"])
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
    let mode = if rootless { "rootless" } else { "root" };
    assert_eq!(meta.mode.as_deref(), Some(mode));
    assert!(
        stderr.contains(&format!("tcptune lab: mode {mode}: ")),
        "{stderr}"
    );
    if rootless {
        assert!(meta.global_changes.is_empty(), "{:?}", meta.global_changes);
    }
    let cal = meta.calibration.as_ref().expect("the calibration ran");
    eprintln!("calibration: {}", cal.verdict);
    let records = read_records(&out);
    assert_eq!(records.len(), plan.runs(), "one record per planned run");
    let summary: Summary =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).expect("summary"))
            .expect("summary parses");
    // Only rootless mode leaves cells out, and each one is marked with why.
    assert!(rootless || summary.not_run_cells.is_empty());
    for c in &plan.cells {
        if summary.not_run_cells.iter().any(|n| n.cell == c.key.id()) {
            assert!(records.iter().filter(|r| r.cell == c.key).all(|r| r
                .not_run
                .as_deref()
                .is_some_and(|w| w.starts_with("rootless mode: "))));
            continue;
        }
        let ok = records.iter().filter(|r| r.cell == c.key && r.ok).count();
        assert!(ok > 0, "cell {} has no successful run", c.key.id());
    }
    assert!(records
        .iter()
        .filter(|r| r.ok)
        .all(|r| r.throughput_bps() > 0.0));
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

// ---- a lab killed with SIGKILL mid-run ----

const RMEM_MAX: &str = "net.core.rmem_max";
const WMEM_MAX: &str = "net.core.wmem_max";
/// What the test sets the host's maxima to, so that the lab's raise (to 128 MiB) shows.
const HOST_MAX: &str = "4194304";
/// What the lab raises them to (the plans' raised_max).
const RAISED_MAX: &str = "134217728";

fn sysctl_path(key: &str) -> PathBuf {
    Path::new("/proc/sys").join(key.replace('.', "/"))
}

fn read_sysctl(key: &str) -> String {
    std::fs::read_to_string(sysctl_path(key))
        .unwrap_or_else(|e| panic!("reading {key}: {e}"))
        .trim()
        .to_string()
}

fn write_sysctl(key: &str, value: &str) {
    std::fs::write(sysctl_path(key), value).unwrap_or_else(|e| panic!("writing {key}: {e}"));
}

/// The host's global maxima as they were, put back when dropped (also when the test fails).
struct HostMaxima(Vec<(&'static str, String)>);

impl HostMaxima {
    fn save() -> HostMaxima {
        HostMaxima(
            [RMEM_MAX, WMEM_MAX]
                .into_iter()
                .map(|k| (k, read_sysctl(k)))
                .collect(),
        )
    }
}

impl Drop for HostMaxima {
    fn drop(&mut self) {
        for (k, v) in &self.0 {
            let _ = std::fs::write(sysctl_path(k), v);
        }
    }
}

/// Whether another lab (of any checkout) holds the host-wide lab lock now.
fn a_lab_runs() -> bool {
    use std::os::fd::AsRawFd;
    // Read-only: an ordinary user may lock it too (a rootless lab does).
    let Ok(f) = std::fs::File::open("/run/tcptune-lab.lock") else {
        return false;
    };
    // SAFETY: flock on a descriptor we own; closing the file releases it.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) != 0 }
}

/// Labs of other test runs on this host hold the lock and change the same global sysctls:
/// wait for them to finish.
fn wait_until_no_lab_runs() {
    let waited = tcptune_testkit::wait_for(std::time::Duration::from_secs(900), || !a_lab_runs());
    assert!(
        waited,
        "another tcptune lab held the host-wide lab lock for 15 minutes"
    );
}

/// The labs' network namespaces on the host (`tt-lab<pid>...`; every lab's, not only this
/// test's; other namespaces belong to test runs that may share the host).
fn namespaces() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("tt-lab"))
                .collect()
        })
        .unwrap_or_default()
}

/// Processes running this test's tcptune binary, with their command lines.
fn tcptune_processes() -> std::collections::BTreeMap<u32, String> {
    let me = std::fs::canonicalize(bin()).unwrap_or_else(|_| PathBuf::from(bin()));
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Default::default();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == me))
        .map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            (pid, String::from_utf8_lossy(&cmd).replace('\0', " "))
        })
        .collect()
}

/// The children of `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|c| {
            std::fs::read_to_string(format!("/proc/{c}/stat")).is_ok_and(|s| {
                // Field 4 (ppid), counted after the command name's closing parenthesis.
                s.rfind(')')
                    .and_then(|i| s[i + 1..].split_whitespace().nth(1).map(str::to_string))
                    .is_some_and(|ppid| ppid == pid.to_string())
            })
        })
        .collect()
}

/// What must be the same before a crashed lab and after the cleanup.
#[derive(Debug, PartialEq)]
struct HostState {
    rmem_max: String,
    wmem_max: String,
    namespaces: std::collections::BTreeSet<String>,
    processes: std::collections::BTreeMap<u32, String>,
    journal: bool,
}

impl HostState {
    fn now() -> HostState {
        HostState {
            rmem_max: read_sysctl(RMEM_MAX),
            wmem_max: read_sysctl(WMEM_MAX),
            namespaces: namespaces(),
            processes: tcptune_processes(),
            journal: Path::new("/run/tcptune/host-sysctls.journal").exists(),
        }
    }
}

/// A tiny plan: one path, one stream, one mode under raised maxima. `messages` of 1 MiB.
fn tiny_plan(dir: &Path, name: &str, messages: u32, max_time: &str) -> PathBuf {
    let f = dir.join(format!("{name}.toml"));
    let text = format!(
        "name = \"{name}\"\nrate = \"100mbit\"\nrtts = [\"2ms\"]\nstreams = [1]\n\
         repetitions = 1\nmessages = {messages}\nmax_time = \"{max_time}\"\n\
         congestion = \"default\"\nraised_max = \"128m\"\n[hosts]\nkernel_only = [\"kernel\"]\n"
    );
    std::fs::write(&f, text).expect("write plan");
    f
}

fn lab_command(plan: &Path, out: &Path) -> Command {
    let mut c = Command::new(bin());
    c.args(["lab", "--no-calibrate", "--no-progress", "--plan"])
        .arg(plan)
        .arg("--out")
        .arg(out);
    c
}

/// Start a lab that would run for a minute, wait until it is mid-run (maxima raised, a
/// `send` running), kill it with SIGKILL, and check that its children died with it and that
/// it left its raised maxima behind (what the next lab must undo).
fn start_and_kill_a_lab(dir: &Path, tag: &str) {
    let plan = tiny_plan(dir, tag, 100_000, "60s");
    let log = std::fs::File::create(dir.join(format!("{tag}.log"))).expect("log file");
    let mut lab = lab_command(&plan, &dir.join(tag))
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("start the lab");
    let pid = lab.id();
    let mid_run = tcptune_testkit::wait_for(std::time::Duration::from_secs(90), || {
        read_sysctl(RMEM_MAX) == RAISED_MAX
            && children_of(pid).iter().any(|c| {
                tcptune_processes()
                    .get(c)
                    .is_some_and(|cmd| cmd.contains(" send "))
            })
    });
    let children = children_of(pid);
    let _ = lab.kill();
    let _ = lab.wait();
    let log = std::fs::read_to_string(dir.join(format!("{tag}.log"))).unwrap_or_default();
    assert!(
        mid_run,
        "the lab never got to a raised send; its output:\n{log}"
    );
    assert!(!children.is_empty());
    // The children (serve, send) die with the lab: PR_SET_PDEATHSIG.
    let orphans = || {
        children
            .iter()
            .filter(|c| Path::new(&format!("/proc/{c}")).exists())
            .count()
    };
    assert!(
        tcptune_testkit::wait_for(std::time::Duration::from_secs(5), || orphans() == 0),
        "children {children:?} of the killed lab survived it"
    );
    // What the crash left: raised maxima (journaled) and the path's namespaces. Reported,
    // not asserted: any tcptune program on a shared host may clean up after the dead lab
    // at any moment, which is the point.
    eprintln!(
        "after kill -9 of lab {pid}: rmem_max {}, journal {}, its namespaces {:?}",
        read_sysctl(RMEM_MAX),
        Path::new("/run/tcptune/host-sysctls.journal").exists(),
        namespaces()
            .into_iter()
            .filter(|n| n.starts_with(&format!("tt-lab{pid}")))
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_lab_killed_mid_run_leaves_nothing_behind_once_the_next_lab_or_cleanup_ran() {
    if !tcptune_testkit::require(
        "a_lab_killed_mid_run_leaves_nothing_behind_once_the_next_lab_or_cleanup_ran",
        &[tcptune_testkit::Need::Root, tcptune_testkit::Need::Tun],
    ) {
        return;
    }
    let _one = one_at_a_time();
    wait_until_no_lab_runs();
    let _host = HostMaxima::save();
    write_sysctl(RMEM_MAX, HOST_MAX);
    write_sysctl(WMEM_MAX, HOST_MAX);
    let d = TempDir::new("crash");
    let before = HostState::now();
    assert!(
        !before.journal,
        "a journal of another run is in /run/tcptune"
    );

    // 1. Killed mid-run, then the next lab: it puts the maxima back before it reads them,
    // so that it records (and restores) the host's own values, not the dead lab's.
    start_and_kill_a_lab(&d.0, "killed1");
    let next = d.0.join("next");
    let o = lab_command(&tiny_plan(&d.0, "next", 4, "10s"), &next)
        .output()
        .expect("run the next lab");
    assert!(
        o.status.success(),
        "next lab: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let meta: LabMeta =
        serde_json::from_str(&std::fs::read_to_string(next.join("meta.json")).expect("meta.json"))
            .expect("meta parses");
    assert!(!meta.global_changes.is_empty());
    for c in &meta.global_changes {
        assert_eq!(
            c.before, HOST_MAX,
            "{c:?}: the dead lab's value taken for the host's"
        );
        assert!(c.restored, "{c:?}");
    }
    assert_eq!(HostState::now(), before, "after the next lab");

    // 2. Killed mid-run, then `tcptune lab --cleanup`.
    start_and_kill_a_lab(&d.0, "killed2");
    let o = Command::new(bin())
        .args(["lab", "--cleanup"])
        .output()
        .expect("run lab --cleanup");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        stdout.contains(&format!("restored {RMEM_MAX}: {RAISED_MAX} -> {HOST_MAX}")),
        "{stdout}"
    );
    assert_eq!(HostState::now(), before, "after lab --cleanup");
    let o = Command::new(bin())
        .args(["lab", "--cleanup"])
        .output()
        .expect("run lab --cleanup");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "nothing to clean up\n");
}

// ---- a rootless lab ----

#[test]
fn a_rootless_lab_marks_the_cells_it_cannot_run_and_runs_the_rest() {
    if !tcptune_testkit::require(
        "a_rootless_lab_marks_the_cells_it_cannot_run_and_runs_the_rest",
        &[tcptune_testkit::Need::UserNs],
    ) {
        return;
    }
    let _one = one_at_a_time();
    wait_until_no_lab_runs();
    let d = TempDir::new("rootless");
    let plan = d.0.join("plan.toml");
    // kernel (autotuning up to the namespace's raised tcp_rmem) runs; auto and a fixed size
    // above the host's maximum need net.core.rmem_max raised, which rootless mode cannot do.
    let host_max: u64 = read_sysctl(RMEM_MAX)
        .parse::<u64>()
        .unwrap_or(0)
        .min(read_sysctl(WMEM_MAX).parse().unwrap_or(0));
    std::fs::write(
        &plan,
        format!(
            "name = \"rootless\"\nrate = \"100mbit\"\nrtts = [\"2ms\"]\nstreams = [1]\n\
             repetitions = 1\nmessages = 4\nmax_time = \"10s\"\ncongestion = \"default\"\n\
             raised_max = \"{}\"\n[hosts]\nkernel_only = [\"kernel\", \"auto\"]\n\
             user_kernel = [\"fixed:64k\", \"fixed:{}\"]\n",
            host_max * 2,
            host_max * 2
        ),
    )
    .expect("write plan");
    let out = d.0.join("out");
    let before = (read_sysctl(RMEM_MAX), read_sysctl(WMEM_MAX));
    let o = lab_command(&plan, &out)
        .env("TCPTUNE_EMU_MODE", "rootless")
        .output()
        .expect("run the lab");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("tcptune lab: mode rootless: "), "{stderr}");
    assert_eq!((read_sysctl(RMEM_MAX), read_sysctl(WMEM_MAX)), before);
    let meta: LabMeta =
        serde_json::from_str(&std::fs::read_to_string(out.join("meta.json")).expect("meta.json"))
            .expect("meta parses");
    assert_eq!(meta.mode.as_deref(), Some("rootless"));
    assert!(meta.global_changes.is_empty(), "{:?}", meta.global_changes);
    let records = read_records(&out);
    assert_eq!(records.len(), 4, "one record per planned run: {records:?}");
    let by = |tune: &str| {
        records
            .iter()
            .find(|r| r.cell.tune == tune)
            .unwrap_or_else(|| panic!("no record of {tune}"))
    };
    assert!(by("kernel").ok, "{:?}", by("kernel"));
    assert!(by("fixed:65536").ok, "{:?}", by("fixed:65536"));
    for tune in ["auto".to_string(), format!("fixed:{}", host_max * 2)] {
        let r = by(&tune);
        assert!(!r.ok && r.error.is_none(), "{r:?}");
        let why = r.not_run.as_deref().unwrap_or_default();
        assert!(why.contains("net.core.rmem_max/wmem_max"), "{why}");
    }
    let summary: Summary =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).expect("summary"))
            .expect("summary parses");
    assert_eq!(summary.failed_runs, 0);
    assert!(summary.missing_cells.is_empty());
    assert_eq!(
        summary.not_run_cells.len(),
        2,
        "{:?}",
        summary.not_run_cells
    );
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(html.contains("Not run (2)"), "the report lists them");
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("2 planned cell(s) not run in this mode"),
        "{table}"
    );
}

/// A tiny plan whose only cells are one `[competing]` and one `[path_change]` cell (and the
/// one matrix cell every plan has), short enough for a test.
fn scenario_plan(dir: &Path) -> PathBuf {
    let f = dir.join("scenarios.toml");
    std::fs::write(
        &f,
        "name = \"scenarios\"\nrate = \"50mbit\"\nrtts = [\"10ms\"]\nstreams = [1]\n\
         repetitions = 1\nmessages = 2\nmax_time = \"10s\"\ncongestion = \"default\"\n\
         [hosts]\nuntuned = [\"kernel\"]\n\
         [competing]\nrtts = [\"10ms\"]\nstreams = [1]\nmodes = [\"kernel\"]\n\
         first = \"2s\"\nsecond_at = \"0.5s\"\nsecond = \"1s\"\n\
         [[path_change]]\nrtt = \"10ms\"\nto_rtt = \"40ms\"\nat = \"1s\"\nduration = \"2s\"\n\
         modes = [\"kernel\"]\n",
    )
    .expect("write plan");
    f
}

#[test]
fn competing_and_path_change_cells_run_and_record_both_transfers_and_the_series() {
    if !tcptune_testkit::require(
        "competing_and_path_change_cells_run_and_record_both_transfers_and_the_series",
        &[tcptune_testkit::Need::Emulator],
    ) {
        return;
    }
    let _one = one_at_a_time();
    wait_until_no_lab_runs();
    let d = TempDir::new("scenarios");
    let out = d.0.join("out");
    let o = lab_command(&scenario_plan(&d.0), &out)
        .output()
        .expect("run the lab");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let records = read_records(&out);
    assert_eq!(records.len(), 3, "one record per planned run: {records:?}");
    assert!(records.iter().all(|r| r.not_run.is_none()), "{records:?}");
    let by = |s: Scenario| {
        records
            .iter()
            .find(|r| r.cell.scenario == Some(s))
            .unwrap_or_else(|| panic!("no {s:?} record"))
    };
    // Competing: both transfers recorded, with the overlap and Jain's index.
    let r = by(Scenario::Competing);
    assert!(r.ok, "{r:?}");
    let c = r
        .competing
        .as_ref()
        .expect("the second transfer is recorded");
    assert!(c.second.ok && c.second.bytes > 0, "{:?}", c.second);
    assert!(r.bytes > 0);
    assert!((0.3..1.5).contains(&c.second_at_s), "{}", c.second_at_s);
    assert!(c.overlap_s[1] > c.overlap_s[0], "{:?}", c.overlap_s);
    assert!(
        c.overlap_bps.iter().all(|&b| b > 0.0),
        "{:?}",
        c.overlap_bps
    );
    let j = c.jain_transfers.expect("Jain's index of the transfers");
    assert!((0.5..=1.0).contains(&j), "{j}");
    assert!(c.jain_streams.is_some());
    // Path change: the change came mid-transfer and the series is there.
    let r = by(Scenario::PathChange);
    assert!(r.ok, "{r:?}");
    let s = r.series.as_ref().expect("the path-change series");
    assert_eq!(s.change, "rtt 10ms -> 40ms");
    let at = s.change_at_s.expect("when the path changed");
    assert!((0.0..2.0).contains(&at), "{at}");
    assert!(s.sender.len() > 2 && !s.receiver.is_empty(), "{s:?}");
    let last = s.sender.last().map_or(0.0, |x| x.t_s);
    assert!(
        last > at,
        "samples after the change: last at {last}, change at {at}"
    );
    // The RTT after the change shows in the samples (generous: 40 ms vs 10 ms).
    let after: Vec<u32> = s
        .sender
        .iter()
        .filter(|x| x.t_s > at + 0.3)
        .map(|x| x.rtt_us)
        .collect();
    assert!(
        after.iter().any(|&rtt| rtt > 25_000),
        "RTT samples after the change: {after:?}"
    );
    let summary: Summary =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).expect("summary"))
            .expect("summary parses");
    assert!(
        summary.not_run_cells.is_empty(),
        "{:?}",
        summary.not_run_cells
    );
    assert_eq!(summary.failed_runs, 0);
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(
        html.contains("A path that changes mid-transfer"),
        "the report draws it"
    );
}
