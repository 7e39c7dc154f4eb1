//! The runner: the I/O side of the lab.
//!
//! Order of work: check privileges (root mode, or the rootless mode of `tcptune_emu::mode`,
//! which cannot raise the global maxima: the cells that need them are recorded as not run,
//! see [`crate::feasible`]), write `plan.json` and `meta.json`, calibrate the emulator
//! (refuse if it is not faithful at the plan's rate), then for each path: bring up a
//! `tcptune_emu::Topology`, start `tcptune serve` on side B, and run every cell of that path
//! `repetitions` times with `tcptune send ... --json` on side A, in a seeded random order per
//! repetition so that drift of a shared machine spreads over all cells. Before each run whose
//! host configuration differs from the previous one, the namespaces' `tcp_rmem`/`tcp_wmem`
//! and the global `net.core.{r,w}mem_max` are switched (raised through a guard, or put back
//! to the host's values for the untuned configuration). Each run's record is appended to
//! `results.jsonl` as soon as it finishes. At the end (also after an error or Ctrl-C) the
//! global sysctls are restored, `meta.json` is completed and every report is built.
//!
//! Crash safety: the children (`serve`, `send`) are supervised (`tcptune_sys::process`) and
//! die with the lab, even when it is killed with SIGKILL; the global sysctls' original values
//! are journaled before they are raised (`tcptune_emu::host`). The next lab (or
//! `tcptune lab --cleanup`, [`cleanup`]) puts back what a dead lab left raised before it
//! reads anything, then removes its namespaces and whatever still ran in them.

mod bed;
pub mod calibrate;
pub mod env;
pub mod globals;
mod lock;
pub mod progress;
pub mod psc;

use crate::feasible::{self, HostLimits};
use crate::plan::{CellKey, ExpandedPlan, HostConfig, Plan};
use crate::record::{Calibration, LabMeta, RunRecord};
use crate::results::{self, Built};
use anyhow::{bail, Context as _};
use bed::{Bed, BedSpec};
use globals::GlobalSysctls;
use progress::{expected_seconds, Progress};
use std::collections::BTreeMap;
use std::path::PathBuf;
use tcptune_core::{Bytes, Rate};
use tcptune_emu::host::{Cleanup, RestoreAction};
use tcptune_emu::mode::{self as emu_mode, Mode, ModeChoice};
use tcptune_sys::process::{signals, Descendants};

/// Whether a stop signal (Ctrl-C, SIGTERM, SIGHUP) asked the lab to stop.
pub(crate) fn interrupted() -> bool {
    signals::stop_requested().is_some()
}

/// How to run a lab.
#[derive(Clone, Debug)]
pub struct RunnerConfig {
    /// The `tcptune` binary to run as `serve` and `send` (the CLI passes its own path).
    pub tcptune: PathBuf,
    /// Results folder (created; must not already hold results).
    pub out: PathBuf,
    /// The plan.
    pub plan: Plan,
    /// Check the emulator before the matrix.
    pub calibrate: bool,
    /// Run even if the calibration finds the emulator unfaithful.
    pub force: bool,
    /// Show the progress bar.
    pub progress: bool,
    /// Port of the server inside the namespace.
    pub port: u16,
}

/// What a finished (or interrupted) lab produced.
#[derive(Debug)]
pub struct LabOutcome {
    /// The results folder.
    pub dir: PathBuf,
    /// Every output.
    pub built: Built,
    /// Ctrl-C stopped it; the results are partial.
    pub interrupted: bool,
}

/// The lab refused to run: the emulator cannot hold the rate faithfully here.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct NotFaithful {
    /// The whole explanation.
    pub message: String,
    /// The calibration that failed.
    pub calibration: Calibration,
    /// The highest rate found faithful, if any.
    pub max_rate: Option<Rate>,
}

/// The lab cannot run here (privileges, devices, binary).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// Namespace sysctls set when a path comes up, whatever the host configuration.
pub fn base_sysctls() -> Vec<(String, String)> {
    // The paper's guideline: do not let one run's cached ssthresh steer the next. (The
    // congestion control is set per transfer with `send -C`: a namespace's default can only
    // be one of the host's tcp_allowed_congestion_control.)
    vec![("net.ipv4.tcp_no_metrics_save".to_string(), "1".to_string())]
}

/// The per-namespace buffer sysctls of a host configuration; `defaults` are the namespace's
/// own `tcp_rmem`/`tcp_wmem` (what the untuned configuration puts back).
pub fn host_sysctls(
    plan: &Plan,
    host: HostConfig,
    defaults: &[(String, String)],
) -> Vec<(String, String)> {
    if host.raises_limits() {
        let max = plan.raised_limit().0;
        vec![
            ("net.ipv4.tcp_rmem".into(), format!("4096 131072 {max}")),
            ("net.ipv4.tcp_wmem".into(), format!("4096 16384 {max}")),
        ]
    } else {
        defaults.to_vec()
    }
}

fn restore_globals(globals: &mut GlobalSysctls) -> anyhow::Result<()> {
    let errs = globals.restore();
    if !errs.is_empty() {
        bail!("restoring global sysctls: {}", errs.join("; "));
    }
    Ok(())
}

/// Put the path's namespaces and the global maxima into a host configuration.
fn switch_host(
    bed: &Bed,
    plan: &Plan,
    host: HostConfig,
    defaults: &[(String, String)],
    globals: &mut GlobalSysctls,
) -> anyhow::Result<()> {
    if host.raises_limits() {
        let raised = plan.raised_limit().0;
        globals.raise_to("net.core.rmem_max", raised)?;
        globals.raise_to("net.core.wmem_max", raised)?;
    } else {
        restore_globals(globals)?;
    }
    for (k, v) in host_sysctls(plan, host, defaults) {
        bed.set_sysctl(&k, &v)
            .with_context(|| format!("setting {k}={v} for the {host} configuration"))?;
    }
    Ok(())
}

/// Fisher-Yates with a small xorshift generator (deterministic for a seed).
fn shuffle<T>(v: &mut [T], state: &mut u64) {
    for i in (1..v.len()).rev() {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        let j = (*state % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// The sysctls read back from a namespace for the record.
const RECORDED_SYSCTLS: &[&str] = &[
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_moderate_rcvbuf",
    "net.ipv4.tcp_window_scaling",
    "net.ipv4.tcp_no_metrics_save",
];

/// The mode the lab's paths get, and its one-line summary.
fn check_environment(cfg: &RunnerConfig) -> anyhow::Result<(Mode, String)> {
    let (mode, facts) = emu_mode::detect(ModeChoice::from_env());
    let mode = match mode {
        Ok(m) => m,
        Err(tcptune_emu::EmuError::NoTun(_)) => bail!(Unavailable(
            "/dev/net/tun is missing: load the tun module (modprobe tun), give the container \
             the device, or run the lab as an ordinary user (rootless mode)"
                .into()
        )),
        Err(e) => bail!(Unavailable(format!(
            "tcptune lab cannot build its paths: {e}"
        ))),
    };
    let summary = mode.summary(&facts);
    if let Some(cc) = &cfg.plan.congestion {
        let avail = tcptune_sys::sysctl::read_sysctl("net.ipv4.tcp_available_congestion_control")
            .unwrap_or_default();
        if !avail.split_whitespace().any(|a| a == cc) {
            bail!(Unavailable(format!(
                "congestion control '{cc}' is not available on this kernel (available: {avail}); \
                 load its module (modprobe tcp_{cc}) or set congestion = \"default\" in a plan"
            )));
        }
    }
    if !cfg.tcptune.exists() {
        bail!(Unavailable(format!(
            "the tcptune binary {} does not exist",
            cfg.tcptune.display()
        )));
    }
    Ok((mode, summary))
}

/// What the lab may do to the host's global buffer limits in `mode`, and their values now.
fn host_limits(mode: Mode) -> HostLimits {
    let read = |k: &str| {
        tcptune_sys::sysctl::read_sysctl(k)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    HostLimits {
        can_raise: mode.can_raise_global_limits(),
        rmem_max: read("net.core.rmem_max"),
        wmem_max: read("net.core.wmem_max"),
    }
}

/// SIGTERM to SIGKILL for a process the lab's children left behind.
pub(crate) const DESCENDANTS_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Run a lab from start to end.
pub fn run_lab(cfg: &RunnerConfig) -> anyhow::Result<LabOutcome> {
    let (mode, mode_summary) = check_environment(cfg)?;
    cfg.plan.validate()?;
    // Two labs at once would each take the other's raised maxima for the host's own.
    let _lock = match mode {
        Mode::Root => lock::LabLock::acquire()?,
        Mode::Rootless => lock::LabLock::acquire_rootless()?,
    };
    // From here on, a Ctrl-C lets the lab finish what it is doing (the cleanup below
    // included) and stop its children; and whatever they start is adopted and stopped
    // before the lab returns, so that it exits only after every process it started is gone.
    signals::catch_stop_signals()?;
    let mut descendants = Descendants::adopt("the lab's processes", DESCENDANTS_GRACE)?;
    // What a lab killed mid-run left behind goes first: its raised maxima are put back
    // before anything reads the host's values.
    let cleaned = tcptune_emu::state::cleanup_stale()
        .context("cleaning up after an earlier lab or emulator that died")?;
    report_cleanup(&cleaned, cfg.progress);
    eprintln!("tcptune lab: mode {mode_summary}");
    let mut globals = match mode {
        Mode::Root => GlobalSysctls::acquire()?.0,
        Mode::Rootless => GlobalSysctls::untouchable(),
    };
    let limits = host_limits(mode);
    let expanded = cfg.plan.expand();
    let dir = cfg.out.clone();
    if dir.join(results::RESULTS_FILE).exists() {
        bail!(
            "{} already holds lab results: choose another --out, or rebuild its report with `tcptune lab report {}`",
            dir.display(),
            dir.display()
        );
    }
    std::fs::create_dir_all(dir.join("logs"))
        .with_context(|| format!("creating the results folder {}", dir.display()))?;
    results::write_json(&dir.join(results::PLAN_FILE), &expanded)?;
    let mut meta = LabMeta {
        schema_version: crate::record::RECORD_SCHEMA_VERSION,
        tcptune_version: env::binary_version(&cfg.tcptune),
        kernel: env::kernel_release(),
        cpus: env::cpus(),
        seed: cfg.plan.seed,
        started_unix_s: env::unix_now(),
        mode: Some(mode.to_string()),
        mode_summary: Some(mode_summary),
        ..LabMeta::default()
    };
    results::write_json(&dir.join(results::META_FILE), &meta)?;

    let result = run_matrix(cfg, &expanded, &dir, &mut meta, &mut globals, &limits);
    // Every path is down and every guard of a child dropped: stop and reap what is left.
    if let Err(e) = descendants.stop() {
        eprintln!("tcptune lab: {e}");
    }
    let restore_errors = globals.restore();
    meta.global_changes = globals.changes().to_vec();
    meta.duration_s = env::unix_now() - meta.started_unix_s;
    let interrupted = interrupted();
    meta.finished = result.is_ok() && !interrupted;
    results::write_json(&dir.join(results::META_FILE), &meta)?;
    let records = results::read_records(&dir)?;
    let built = results::build(&expanded, &records, &meta);
    results::write_outputs(&dir, &built)?;
    if !restore_errors.is_empty() {
        bail!(
            "could not restore global sysctls: {} (set them back by hand)",
            restore_errors.join("; ")
        );
    }
    result?;
    Ok(LabOutcome {
        dir,
        built,
        interrupted,
    })
}

/// Say what a cleanup undid.
fn report_cleanup(c: &Cleanup, verbose: bool) {
    for r in &c.sysctls {
        if r.action == RestoreAction::Restored {
            eprintln!(
                "tcptune lab: put the host's {} back to {} (a lab that died had left it at {})",
                r.key, r.original, r.found
            );
        } else if r.action == RestoreAction::LeftAlone {
            eprintln!(
                "tcptune lab: left the host's {} at {}: changed since a dead lab raised it (its original was {})",
                r.key, r.found, r.original
            );
        }
    }
    if verbose && !c.topologies.is_empty() {
        eprintln!(
            "tcptune lab: removed {} emulated path(s) whose owner had died: {}",
            c.topologies.len(),
            c.topologies.join(", ")
        );
    }
    for e in &c.errors {
        eprintln!("tcptune lab: cleaning up: {e}");
    }
}

/// `tcptune lab --cleanup`: undo what a lab (or emulator) killed mid-run left behind: put
/// the host's global sysctls back, then remove its namespaces and the processes in them.
/// Refused while a lab runs. Errors are in [`Cleanup::errors`].
/// As an ordinary user it cleans up after the user's own (rootless) labs.
pub fn cleanup() -> anyhow::Result<Cleanup> {
    // SAFETY: geteuid has no preconditions.
    let _lock = if unsafe { libc::geteuid() } == 0 {
        lock::LabLock::acquire()?
    } else {
        lock::LabLock::acquire_rootless()?
    };
    tcptune_emu::state::cleanup_stale().context("cleaning up after a lab or emulator that died")
}

fn unique_name(tag: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    // Namespaces become tt-NAME-a/b: unique per process and per topology.
    format!("lab{}{tag}{n}", std::process::id())
}

fn run_matrix(
    cfg: &RunnerConfig,
    plan: &ExpandedPlan,
    dir: &std::path::Path,
    meta: &mut LabMeta,
    globals: &mut GlobalSysctls,
    limits: &HostLimits,
) -> anyhow::Result<()> {
    let p = &plan.plan;
    if interrupted() {
        // Stopped during the setup: nothing to run.
        return Ok(());
    }
    if cfg.calibrate {
        if cfg.progress {
            eprintln!(
                "tcptune lab: checking that the emulator holds {} (one well-buffered transfer at {} ms RTT)",
                p.rate,
                calibrate::CALIBRATION_RTT_US / 1000
            );
        }
        let cal = calibrate_rate(cfg, dir)?;
        if cfg.progress {
            eprintln!("tcptune lab: calibration: {}", cal.verdict);
        }
        meta.calibration = Some(cal.clone());
        results::write_json(&dir.join(results::META_FILE), meta)?;
        if !cal.faithful && !cfg.force {
            let max_rate = cal
                .lower_rates
                .iter()
                .filter(|(_, ok)| *ok)
                .map(|(r, _)| Rate(*r))
                .max();
            let hint = match max_rate {
                Some(r) => format!(
                    "the highest rate it held faithfully was {r}: rerun with --rate {r} (or --force to run anyway)"
                ),
                None => "no lower rate tried was faithful either (use --force to run anyway)".into(),
            };
            bail!(NotFaithful {
                message: format!(
                    "the emulator is not faithful at {} on this machine: {}; {hint}",
                    p.rate, cal.verdict
                ),
                calibration: cal,
                max_rate,
            });
        }
    }

    // Cells this mode cannot reproduce: recorded as not run (once per repetition, so that
    // every planned run has its record), never silently dropped.
    let not_run: BTreeMap<&CellKey, String> = plan
        .cells
        .iter()
        .filter_map(|c| feasible::not_runnable(p, &c.key, limits).map(|why| (&c.key, why)))
        .collect();
    if !not_run.is_empty() {
        eprintln!(
            "tcptune lab: {} of {} cells are not run (marked in the results and the report):",
            not_run.len(),
            plan.cells.len()
        );
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        for why in not_run.values() {
            *reasons.entry(why.as_str()).or_default() += 1;
        }
        for (why, n) in reasons {
            eprintln!("tcptune lab:   {n} cell(s): {why}");
        }
        for (key, why) in &not_run {
            for rep in 1..=p.repetitions {
                let rec = RunRecord::not_run((*key).clone(), rep, env::unix_now(), why.clone());
                results::append_record(dir, &rec)?;
            }
        }
    }
    // Group the cells by path; the host configuration is switched run by run.
    let mut groups: BTreeMap<u64, Vec<&CellKey>> = BTreeMap::new();
    for c in plan.cells.iter().filter(|c| !not_run.contains_key(&c.key)) {
        groups.entry(c.key.rtt_us).or_default().push(&c.key);
    }
    let total_runs = plan.runs() - not_run.len() * p.repetitions as usize;
    let total_cost: f64 = plan
        .cells
        .iter()
        .filter(|c| !not_run.contains_key(&c.key))
        .map(|c| expected_seconds(p, &c.key) * f64::from(p.repetitions))
        .sum();
    let mut progress = Progress::new(total_runs, total_cost, cfg.progress);
    progress.note(&format!(
        "tcptune lab: {} cells x {} repetition(s) = {total_runs} runs, expected about {} (results in {})",
        plan.cells.len() - not_run.len(),
        p.repetitions,
        progress::fmt_secs(std::time::Duration::from_secs_f64(total_cost)),
        dir.display()
    ));
    let mut rng = p.seed ^ 0x9e37_79b9_7f4a_7c15;
    for (rtt_us, cells) in groups {
        if interrupted() {
            break;
        }
        // Bring the path up under the host's own global limits.
        restore_globals(globals)?;
        let spec = BedSpec {
            name: unique_name("p"),
            rtt_us,
            rate: p.rate,
            mtu: p.mtu,
            queue_bdp: p.queue_bdp,
            seed: p.seed,
            sysctls: base_sysctls(),
            tcptune: cfg.tcptune.clone(),
            port: cfg.port,
            log_dir: dir.join("logs"),
            careful_resume: p.careful_resume_server,
        };
        let mut bed = Bed::up(&spec).with_context(|| {
            format!(
                "bringing up the emulated path for RTT {} ms",
                rtt_us as f64 / 1000.0
            )
        })?;
        let defaults = bed.read_sysctls(&["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"]);
        let mut current: Option<HostConfig> = None;
        'reps: for rep in 1..=p.repetitions {
            // A fresh seeded order each repetition, so that drift of a shared machine does
            // not favour the host configurations or modes that happen to run first.
            let mut order = cells.clone();
            shuffle(&mut order, &mut rng);
            for key in order {
                if interrupted() {
                    break 'reps;
                }
                if current != Some(key.host) {
                    switch_host(&bed, p, key.host, &defaults, globals)?;
                    current = Some(key.host);
                    meta.global_changes = globals.changes().to_vec();
                    if !meta.namespace_sysctls.iter().any(|(h, _)| *h == key.host) {
                        meta.namespace_sysctls
                            .push((key.host, bed.read_sysctls(RECORDED_SYSCTLS)));
                        meta.namespace_sysctls.sort_by_key(|(h, _)| *h);
                    }
                    results::write_json(&dir.join(results::META_FILE), meta)?;
                }
                let what = key.id();
                progress.starting(&what);
                let rec = bed.run(key, rep, p);
                if interrupted() {
                    // The run was cut short by Ctrl-C: not a result.
                    break 'reps;
                }
                let result = if rec.ok {
                    format!(
                        "{:.1} Mbit/s in {:.2} s{}",
                        rec.throughput_bps() / 1e6,
                        rec.completion(),
                        if rec.capped { " (capped)" } else { "" }
                    )
                } else {
                    format!("FAILED: {}", rec.error.as_deref().unwrap_or("?"))
                };
                results::append_record(dir, &rec)?;
                progress.finished(expected_seconds(p, key), &what, &result);
            }
        }
        bed.down();
    }
    progress.done();
    if interrupted() {
        progress.note("tcptune lab: interrupted; writing the partial report");
    }
    Ok(())
}

/// Calibrate at the plan's rate; when that fails, try lower rates to tell the user what the
/// machine can hold.
fn calibrate_rate(cfg: &RunnerConfig, dir: &std::path::Path) -> anyhow::Result<Calibration> {
    let p = &cfg.plan;
    let mut cal = calibrate_once(cfg, dir, p.rate)?;
    if !cal.faithful {
        // A loaded machine can spoil one transfer: try once more before judging.
        let again = calibrate_once(cfg, dir, p.rate)?;
        if again.faithful || again.throughput_bps > cal.throughput_bps {
            cal = again;
        }
    }
    if cal.faithful {
        return Ok(cal);
    }
    let mut lower = Vec::new();
    let mut r = p.rate.0 / 2;
    while r >= 50_000_000 && lower.len() < 4 {
        let c = calibrate_once(cfg, dir, Rate(r))?;
        lower.push((r, c.faithful));
        if c.faithful {
            break;
        }
        r /= 2;
    }
    cal.lower_rates = lower;
    Ok(cal)
}

fn calibrate_once(
    cfg: &RunnerConfig,
    dir: &std::path::Path,
    rate: Rate,
) -> anyhow::Result<Calibration> {
    let p = &cfg.plan;
    let rtt_us = calibrate::CALIBRATION_RTT_US;
    let spec = BedSpec {
        name: unique_name("c"),
        rtt_us,
        rate,
        mtu: p.mtu,
        queue_bdp: p.queue_bdp,
        seed: p.seed,
        sysctls: base_sysctls(),
        tcptune: cfg.tcptune.clone(),
        port: cfg.port,
        log_dir: dir.join("logs"),
        // The calibration measures the emulated path: a plain server.
        careful_resume: false,
    };
    let mut bed = Bed::up(&spec).context("bringing up the calibration path")?;
    // Two BDPs of buffer per end (within the default 4 MiB caps at 10 ms and 1 Gbit/s):
    // enough to fill the pipe without touching global sysctls.
    let bdp = rate.bdp(std::time::Duration::from_micros(rtt_us)).0;
    let size = (2 * bdp).clamp(256 * 1024, 4 << 20);
    let mut cplan = p.clone();
    cplan.max_time_ms = 15_000;
    let key = CellKey::new(
        rtt_us,
        HostConfig::UserKernel,
        1,
        format!("fixed:{}", Bytes(size).0),
    );
    let rec = bed.run(&key, 1, &cplan);
    let stats = bed.stats();
    bed.down();
    if !rec.ok {
        bail!(
            "the calibration transfer failed: {}",
            rec.error.unwrap_or_default()
        );
    }
    let m = calibrate::Measured {
        rate_bps: rate.0,
        throughput_bps: rec.first_to_last_bps,
        rtt_us: rec.hint_rtt_us.or(rec.rtt_min_us().map(u64::from)),
        lateness_p99_us: stats.as_ref().map(|s| s.a_to_b.lateness.p99_us),
        drops: stats.as_ref().map_or(0, |s| s.a_to_b.drops.total()),
    };
    Ok(calibrate::judge(&m, rtt_us))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raised_configurations_lift_both_maxima_and_untuned_puts_defaults_back() {
        let plan = Plan::quick();
        let defaults = vec![
            (
                "net.ipv4.tcp_rmem".to_string(),
                "4096 131072 33554432".to_string(),
            ),
            (
                "net.ipv4.tcp_wmem".to_string(),
                "4096 16384 4194304".to_string(),
            ),
        ];
        assert_eq!(
            host_sysctls(&plan, HostConfig::Untuned, &defaults),
            defaults
        );
        let raised = host_sysctls(&plan, HostConfig::KernelOnly, &defaults);
        assert_eq!(raised[0].1, "4096 131072 134217728");
        assert_eq!(raised[1].1, "4096 16384 134217728");
        assert_eq!(
            host_sysctls(&plan, HostConfig::UserKernel, &defaults),
            raised
        );
    }

    #[test]
    fn shuffle_is_a_seeded_permutation() {
        let mut a: Vec<u32> = (0..20).collect();
        let mut b = a.clone();
        let (mut s1, mut s2) = (7u64, 7u64);
        shuffle(&mut a, &mut s1);
        shuffle(&mut b, &mut s2);
        assert_eq!(a, b, "same seed, same order");
        assert_ne!(a, (0..20).collect::<Vec<u32>>());
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..20).collect::<Vec<u32>>());
    }
}
