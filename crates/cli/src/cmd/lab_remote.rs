//! `tcptune lab --remote [USER@]HOST`: the lab's matrix across the real path to HOST, no
//! emulator. Each cell is one `tcptune send --ssh HOST` (the far end started over ssh, as
//! `cp` and `send --ssh` start it); the report states the path's measured RTT and rate
//! instead of emulated ones, what the two hosts' limits let one stream reach on it, and
//! marks the cells it cannot apply there.
//!
//! The order: [`cells`] (pure: the plan's host configurations, modes and stream counts, each
//! runnable or with the reason it is not), then [`run`] drives one `send` per runnable cell
//! and repetition: first the untuned host configuration's cells under both hosts' own
//! limits, then the raised ones (kernel-only and user/kernel tuning) with both hosts' maxima
//! raised for as long as they run (`lab_raise`: here in this process, there by a
//! `hold-limits` over the same ssh; root on both hosts, else those cells are marked with the
//! reason). In each part `manual` (the paper's ping + bandwidth test, 2 x BDP) runs last,
//! with the best rate the cells before it measured as its bandwidth test. [`summarize`]
//! (pure) turns the reports into the path's figures, `tcptune doctor --json` on each host
//! (the far one over the same ssh) gives its limits, and [`render`]/[`html`] (pure) write
//! the report.

use crate::cmd::lab_raise::{RaisedReport, Raising};
use crate::cmd::ssh::SshOpts;
use crate::{exit, out};
use anyhow::Context as _;
use serde::Serialize;
use std::io::Read as _;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};
use tcptune_lab::plan::{HostConfig, Plan, PlanMode};
use tcptune_lab::svg::esc;
use tcptune_transfer::remote::RemoteSpec;

/// Version of `lab --remote --json` (and of `results.json` under `--out`). 2: `manual`
/// cells run (`tuned_with`), `hosts` added. 3: the raised host configurations run (cells'
/// `raised`, the report's `raised`).
const REMOTE_SCHEMA_VERSION: u32 = 3;
/// The most of a host's `doctor --json` read (it is a few kB).
const DOCTOR_OUTPUT_BUDGET: u64 = 1 << 20;
/// How long `doctor` may take on a host (ssh's setup included).
const DOCTOR_DEADLINE: Duration = Duration::from_secs(60);
/// Files written under `--out`.
pub(crate) const REMOTE_RESULTS_FILE: &str = "results.json";
/// The report written under `--out`.
pub(crate) const REMOTE_REPORT_FILE: &str = "report.html";

/// One cell of the remote matrix.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct RemoteCell {
    host: String,
    mode: String,
    streams: u32,
    /// Whether it runs with both hosts' buffer maxima raised (kernel-only and user/kernel
    /// tuning).
    raised: bool,
    /// Why the cell cannot be applied across a real path (`None`: it runs).
    not_applied: Option<String>,
    /// The `--tune` value it ran with, when that is not `mode` (`manual` with the measured
    /// rate: `manual:941000000bit`).
    tuned_with: Option<String>,
    /// Rate each repetition delivered, bit/s (the receiver's count).
    rates_bps: Vec<f64>,
    /// The smallest RTT the control connection measured, microseconds, per repetition.
    rtts_us: Vec<u64>,
    /// Repetitions that failed, with their first line of error.
    failures: Vec<String>,
}

/// `manual` without a rate: it needs the path's bandwidth, which the other cells measure.
fn needs_measured_rate(mode: &str) -> bool {
    mode == "manual"
}

/// The cells of `plan` across a real path. The raised host configurations (kernel-only and
/// user/kernel tuning) run with both hosts' maxima raised, which needs root on both (see
/// [`mark_not_raisable`]); `ideal` is a sweep of fixed sizes around the emulated path's BDP
/// and is not run. `manual` runs after the others of its part, with the best rate they
/// measured.
pub(crate) fn cells(plan: &Plan) -> Vec<RemoteCell> {
    let mut out = Vec::new();
    for (host, modes) in &plan.hosts {
        for mode in modes {
            for &streams in &plan.streams {
                let not_applied = match mode {
                    PlanMode::Ideal => Some(
                        "ideal is a sweep of fixed sizes around the BDP of an emulated path: not \
                         run across a real path"
                            .to_string(),
                    ),
                    PlanMode::Tune(_) => None,
                };
                out.push(RemoteCell {
                    host: host.to_string(),
                    mode: mode.to_string(),
                    streams,
                    raised: *host != HostConfig::Untuned,
                    not_applied,
                    tuned_with: None,
                    rates_bps: Vec::new(),
                    rtts_us: Vec::new(),
                    failures: Vec::new(),
                });
            }
        }
    }
    out
}

/// Mark the raised cells not applied with `why` (the hosts' maxima could not be raised).
pub(crate) fn mark_not_raisable(cells: &mut [RemoteCell], why: &str) {
    for c in cells
        .iter_mut()
        .filter(|c| c.raised && c.not_applied.is_none())
    {
        c.not_applied = Some(why.to_string());
    }
}

/// What the matrix measured of the path.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct PathFigures {
    /// The smallest RTT any run measured, microseconds.
    min_rtt_us: Option<u64>,
    /// The highest rate any run delivered, bit/s.
    best_rate_bps: Option<f64>,
}

/// The path's RTT and rate as the runs measured them.
pub(crate) fn summarize(cells: &[RemoteCell]) -> PathFigures {
    PathFigures {
        min_rtt_us: cells.iter().flat_map(|c| c.rtts_us.iter().copied()).min(),
        best_rate_bps: cells
            .iter()
            .flat_map(|c| c.rates_bps.iter().copied())
            .max_by(f64::total_cmp),
    }
}

/// `manual`'s `--tune` value from the measured path: the paper's manual tuning sizes
/// buffers from a ping and a bandwidth test; the other cells were the bandwidth test.
/// `None` when nothing measured a rate.
pub(crate) fn manual_tune(path: &PathFigures) -> Option<String> {
    let r = path.best_rate_bps?;
    (r.is_finite() && r >= 1.0).then(|| format!("manual:{}bit", r.floor() as u64))
}

/// One host's limits and what they let one stream reach on the measured path, from its
/// `tcptune doctor --json` (`None` where it did not say).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct HostLimits {
    /// "sender" (this host: `send` pushes) or "receiver" (the far host).
    role: &'static str,
    /// This host, or `[USER@]HOST`.
    host: String,
    /// net.core.wmem_max / rmem_max, bytes.
    wmem_max: Option<u64>,
    rmem_max: Option<u64>,
    /// The third field of tcp_wmem / tcp_rmem (what autotuning reaches), bytes.
    tcp_wmem_max: Option<u64>,
    tcp_rmem_max: Option<u64>,
    /// The fastest one stream can go on the measured RTT in this host's role, bit/s: with
    /// kernel autotuning, and with the largest buffer an application may set.
    one_stream_autotuned_bps: Option<u64>,
    one_stream_best_bps: Option<u64>,
    /// Why the limits are unknown (doctor failed or is too old).
    error: Option<String>,
}

fn sysctl_u64(doctor: &serde_json::Value, key: &str, field: usize) -> Option<u64> {
    doctor["facts"]["sysctls"][key]["value"]
        .as_str()?
        .split_whitespace()
        .nth(field)?
        .parse()
        .ok()
}

/// A host's limits from its `doctor --json` (pure).
pub(crate) fn host_limits(
    role: &'static str,
    host: &str,
    doctor: &serde_json::Value,
) -> HostLimits {
    let side = if role == "sender" { "send" } else { "recv" };
    let sizing = &doctor["sizing"][side];
    HostLimits {
        role,
        host: host.to_string(),
        wmem_max: sysctl_u64(doctor, "net.core.wmem_max", 0),
        rmem_max: sysctl_u64(doctor, "net.core.rmem_max", 0),
        tcp_wmem_max: sysctl_u64(doctor, "net.ipv4.tcp_wmem", 2),
        tcp_rmem_max: sysctl_u64(doctor, "net.ipv4.tcp_rmem", 2),
        one_stream_autotuned_bps: sizing["autotune_rate_bps"].as_u64(),
        one_stream_best_bps: sizing["best_rate_bps"].as_u64(),
        error: None,
    }
}

/// `doctor --json` arguments sized for the measured path.
fn doctor_args(path: &PathFigures) -> Vec<String> {
    let mut a = vec!["doctor".to_string(), "--json".to_string()];
    if let Some(us) = path.min_rtt_us.filter(|us| *us > 0) {
        a.push("--rtt".into());
        a.push(format!("{us}us"));
    }
    if let Some(r) = path.best_rate_bps.filter(|r| r.is_finite() && *r >= 1.0) {
        a.push("--target".into());
        a.push(format!("{}bit", r.floor() as u64));
    }
    a
}

/// Run `argv` with a deadline; its stdout (at most [`DOCTOR_OUTPUT_BUDGET`]) parsed as
/// JSON, or why not. doctor's exit status says whether it found problems: not a failure.
fn doctor_json(argv: &[String]) -> Result<serde_json::Value, String> {
    let (prog, args) = argv.split_first().ok_or("no command")?;
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = tcptune_sys::process::spawn(&mut cmd, format!("{prog} doctor"))
        .map_err(|e| e.to_string())?;
    let stdout = child.child_mut().stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.take(DOCTOR_OUTPUT_BUDGET).read_to_end(&mut buf);
        buf
    });
    match child
        .wait_until(Some(Instant::now() + DOCTOR_DEADLINE), || false)
        .map_err(|e| e.to_string())?
    {
        tcptune_sys::process::Waited::Exited(_) => {}
        _ => {
            let _ = child.terminate();
            return Err(format!(
                "doctor did not answer within {} s",
                DOCTOR_DEADLINE.as_secs()
            ));
        }
    }
    let buf = reader.join().map_err(|_| "reading doctor's output")?;
    serde_json::from_slice(&buf).map_err(|e| format!("doctor --json gave no report ({e})"))
}

/// Both hosts' limits: this one's from its own doctor, the far one's over the same ssh.
fn both_hosts(remote: &str, ssh: &SshOpts, path: &PathFigures) -> anyhow::Result<Vec<HostLimits>> {
    let args = doctor_args(path);
    let exe = std::env::current_exe().context("finding this tcptune")?;
    let mut here = vec![exe.display().to_string()];
    here.extend(args.iter().cloned());
    let spec = RemoteSpec::new(
        remote,
        ssh.rsh.as_deref(),
        ssh.remote_tcptune.as_deref(),
        None,
    )
    .map_err(|m| exit::msg(exit::USAGE, m))?;
    let there = spec.argv_running(&args);
    let local = Some(tcptune_pathdb::hostname())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "this host".into());
    Ok([
        ("sender", local.as_str(), here),
        ("receiver", remote, there),
    ]
    .into_iter()
    .map(|(role, host, argv)| match doctor_json(&argv) {
        Ok(v) => host_limits(role, host, &v),
        Err(e) => HostLimits {
            role,
            host: host.to_string(),
            error: Some(e),
            ..HostLimits::default()
        },
    })
    .collect())
}

#[derive(Debug, Serialize)]
struct RemoteReport<'a> {
    schema_version: u32,
    tcptune_version: &'a str,
    remote: &'a str,
    path: PathFigures,
    hosts: Vec<HostLimits>,
    bytes_per_run: u64,
    repetitions: u32,
    /// What was raised for the raised cells (`None`: none ran).
    raised: Option<RaisedReport>,
    cells: &'a [RemoteCell],
}

/// Run one `send --ssh` per repetition of `cell` with `--tune tune`.
fn run_cell(
    exe: &Path,
    plan: &Plan,
    remote: &str,
    ssh: &SshOpts,
    cell: &mut RemoteCell,
    tune: &str,
    (i, runnable): (usize, usize),
) -> anyhow::Result<()> {
    for rep in 0..plan.repetitions {
        eprintln!(
            "lab --remote: cell {i}/{runnable}: {tune} -P {} ({}/{})",
            cell.streams,
            rep + 1,
            plan.repetitions
        );
        let mut cmd = Command::new(exe);
        cmd.args([
            "send",
            "--ssh",
            remote,
            "--json",
            "--no-progress",
            "--no-path-db",
        ])
        .args(["--tune", tune, "-P", &cell.streams.to_string()])
        .args(["-n", &plan.messages.to_string()])
        .args(["-l", &plan.message_size.0.to_string()])
        .args(["--max-time", &format!("{}", plan.max_time_ms as f64 / 1e3)]);
        if let Some(r) = &ssh.rsh {
            cmd.args(["-e", r]);
        }
        if let Some(t) = &ssh.remote_tcptune {
            cmd.args(["--remote-tcptune", t]);
        }
        if let Some(cc) = &plan.congestion {
            cmd.args(["-C", cc]);
        }
        let o = cmd
            .stdin(Stdio::null())
            .output()
            .context("running tcptune send")?;
        let report: Option<serde_json::Value> = serde_json::from_slice(&o.stdout).ok();
        let rate = report
            .as_ref()
            .and_then(|v| v["end"]["sum_received"]["bits_per_second"].as_f64());
        match (o.status.success(), rate) {
            (true, Some(r)) => {
                cell.rates_bps.push(r);
                if let Some(rtt) = report
                    .as_ref()
                    .and_then(|v| v["start"]["tcptune"]["path_hint"]["rtt_us"].as_u64())
                {
                    cell.rtts_us.push(rtt);
                }
            }
            _ => {
                let err = String::from_utf8_lossy(&o.stderr);
                cell.failures.push(
                    err.lines()
                        .find(|l| !l.trim().is_empty())
                        .unwrap_or("no report")
                        .to_string(),
                );
            }
        }
    }
    Ok(())
}

/// Run the runnable cells of one part (`raised` or not): the measuring cells first, then
/// `manual` with the best rate measured so far as its bandwidth test. `n` counts the cells
/// run, for the progress lines.
fn run_part(
    exe: &Path,
    plan: &Plan,
    remote: &str,
    ssh: &SshOpts,
    cells: &mut [RemoteCell],
    raised: bool,
    n: &mut usize,
) -> anyhow::Result<()> {
    let runnable = cells.iter().filter(|c| c.not_applied.is_none()).count();
    let part = |c: &RemoteCell| c.raised == raised && c.not_applied.is_none();
    for cell in cells
        .iter_mut()
        .filter(|c| part(c) && !needs_measured_rate(&c.mode))
    {
        *n += 1;
        let tune = cell.mode.clone();
        run_cell(exe, plan, remote, ssh, cell, &tune, (*n, runnable))?;
    }
    let manual = manual_tune(&summarize(cells));
    for cell in cells
        .iter_mut()
        .filter(|c| part(c) && needs_measured_rate(&c.mode))
    {
        *n += 1;
        match &manual {
            Some(tune) => {
                cell.tuned_with = Some(tune.clone());
                run_cell(exe, plan, remote, ssh, cell, tune, (*n, runnable))?;
            }
            None => cell.failures.push(
                "manual needs the path's rate, and no other cell measured it (add one, e.g. \
                 kernel, to the plan)"
                    .to_string(),
            ),
        }
    }
    Ok(())
}

/// Run every runnable cell of `plan` across the path to `remote`, print the report, and
/// with `out_dir` write `results.json` and `report.html` there.
pub(crate) fn run(
    plan: &Plan,
    remote: &str,
    ssh: &SshOpts,
    json: bool,
    out_dir: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("finding this tcptune")?;
    if let Some(d) = out_dir {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    crate::cmd::lab_raise::recover_here()?;
    let mut cells = cells(plan);
    let mut n = 0;
    // The untuned cells under both hosts' own limits, then the raised ones.
    run_part(&exe, plan, remote, ssh, &mut cells, false, &mut n)?;
    let mut raised = None;
    if cells.iter().any(|c| c.raised && c.not_applied.is_none()) {
        let max = plan.raised_limit();
        eprintln!(
            "lab --remote: raising both hosts' socket-buffer maxima to {max} for the raised \
             host configurations"
        );
        match Raising::start(remote, ssh, max) {
            Ok(hold) => {
                let result = run_part(&exe, plan, remote, ssh, &mut cells, true, &mut n);
                let report = hold.finish();
                for e in &report.restore_errors {
                    eprintln!("tcptune: {e}");
                }
                raised = Some(report);
                result?;
            }
            Err(why) => {
                eprintln!("lab --remote: the raised host configurations are not applied: {why}");
                mark_not_raisable(&mut cells, &why);
            }
        }
    }
    let path = summarize(&cells);
    let hosts = both_hosts(remote, ssh, &path)?;
    let report = RemoteReport {
        schema_version: REMOTE_SCHEMA_VERSION,
        tcptune_version: crate::VERSION,
        remote,
        path,
        hosts,
        bytes_per_run: plan.transfer_bytes(),
        repetitions: plan.repetitions,
        raised,
        cells: &cells,
    };
    if let Some(d) = out_dir {
        let write = |name: &str, body: &str| {
            let p = d.join(name);
            std::fs::write(&p, body).with_context(|| format!("writing {}", p.display()))
        };
        write(
            REMOTE_RESULTS_FILE,
            &(serde_json::to_string_pretty(&report)? + "\n"),
        )?;
        write(
            REMOTE_REPORT_FILE,
            &html(
                remote,
                &report.path,
                &report.hosts,
                report.raised.as_ref(),
                &cells,
                plan,
            ),
        )?;
    }
    if json {
        out::json(&report)?;
    } else {
        out::text(&render(
            remote,
            &report.path,
            &report.hosts,
            report.raised.as_ref(),
            &cells,
        ));
        if let Some(d) = out_dir {
            out::line(&format!(
                "\nreport: {}",
                d.join(REMOTE_REPORT_FILE).display()
            ));
        }
    }
    let failed = cells.iter().any(|c| !c.failures.is_empty());
    Ok(ExitCode::from(if failed {
        exit::FAILURE
    } else {
        exit::OK
    }))
}

fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

fn mbit(bps: f64) -> String {
    tcptune_core::human_bps(bps)
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or("?".into(), |b| {
        if b >= 1 << 20 {
            format!("{:.1} MiB", b as f64 / f64::from(1u32 << 20))
        } else {
            format!("{} KiB", b / 1024)
        }
    })
}

/// The path line: measured RTT and best rate.
fn path_line(remote: &str, path: &PathFigures) -> String {
    format!(
        "Across the real path to {remote}: RTT {} (measured), best rate {} (measured)",
        path.min_rtt_us
            .map_or("unknown".into(), |us| format!("{:.2} ms", us as f64 / 1e3)),
        path.best_rate_bps.map_or("unknown".into(), mbit)
    )
}

/// One host's limits in a sentence.
fn host_line(h: &HostLimits) -> String {
    if let Some(e) = &h.error {
        return format!("{} ({}): limits unknown: {e}", h.host, h.role);
    }
    let (core, tcp, name) = if h.role == "sender" {
        (h.wmem_max, h.tcp_wmem_max, ("wmem_max", "tcp_wmem"))
    } else {
        (h.rmem_max, h.tcp_rmem_max, ("rmem_max", "tcp_rmem"))
    };
    let mut s = format!(
        "{} ({}): net.core.{} {}, {}[2] {}",
        h.host,
        h.role,
        name.0,
        mib(core),
        name.1,
        mib(tcp)
    );
    if let (Some(a), Some(b)) = (h.one_stream_autotuned_bps, h.one_stream_best_bps) {
        s.push_str(&format!(
            "; one stream can reach at most {} autotuned, {} with its own buffer, at this RTT",
            mbit(a as f64),
            mbit(b as f64)
        ));
    }
    s
}

/// What a cell's row says: the median rate (or "-"/"failed") and a note.
fn cell_row(c: &RemoteCell) -> (String, String) {
    match (&c.not_applied, median(&c.rates_bps)) {
        (Some(why), _) => ("-".to_string(), format!("not applied: {why}")),
        (None, Some(r)) => {
            let mut note = c
                .tuned_with
                .as_ref()
                .map(|t| format!("ran as {t} (the best rate measured)"))
                .unwrap_or_default();
            if let Some(f) = c.failures.first() {
                if !note.is_empty() {
                    note.push_str("; ");
                }
                note.push_str(f);
            }
            (mbit(r), note)
        }
        (None, None) => (
            "failed".to_string(),
            c.failures.first().cloned().unwrap_or_default(),
        ),
    }
}

/// What was raised for the raised cells, in a sentence (`None`: nothing ran raised).
fn raised_line(raised: Option<&RaisedReport>) -> Option<String> {
    let r = raised?;
    let list = |c: &[crate::cmd::hold_limits::Change]| {
        if c.is_empty() {
            "nothing (already at or above it)".to_string()
        } else {
            c.iter()
                .map(|c| format!("{} {} -> {}", c.key, c.before, c.set))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let mut s = format!(
        "Raised host configurations ran with the maxima at {}: here {}; there {}",
        mib(Some(r.max_bytes)),
        list(&r.here),
        list(&r.there)
    );
    for n in &r.notes {
        s.push_str(&format!(" ({n})"));
    }
    s.push_str("; put back after them");
    for e in &r.restore_errors {
        s.push_str(&format!("; {e}"));
    }
    Some(s)
}

/// The report for people: the measured path, the hosts' limits, then one line per cell.
pub(crate) fn render(
    remote: &str,
    path: &PathFigures,
    hosts: &[HostLimits],
    raised: Option<&RaisedReport>,
    cells: &[RemoteCell],
) -> String {
    let mut s = path_line(remote, path);
    s.push('\n');
    for h in hosts {
        s.push_str(&host_line(h));
        s.push('\n');
    }
    if let Some(l) = raised_line(raised) {
        s.push_str(&l);
        s.push('\n');
    }
    s.push('\n');
    let rows: Vec<(String, String)> = cells.iter().map(cell_row).collect();
    let mode_w = cells.iter().map(|c| c.mode.len()).max().unwrap_or(0).max(4);
    let rate_w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(13);
    s.push_str(&format!(
        "{:<12} {:<mode_w$} {:>7} {:>rate_w$}  {}\n",
        "HOST", "MODE", "STREAMS", "RATE (MEDIAN)", "NOTE"
    ));
    for (c, (rate, note)) in cells.iter().zip(rows) {
        s.push_str(&format!(
            "{:<12} {:<mode_w$} {:>7} {:>rate_w$}  {}\n",
            c.host, c.mode, c.streams, rate, note
        ));
    }
    s
}

/// `report.html`: the path, the hosts' limits, a bar per cell that ran (median, with the
/// runs' range as a whisker) and the table. Self-contained: no scripts, no external files.
pub(crate) fn html(
    remote: &str,
    path: &PathFigures,
    hosts: &[HostLimits],
    raised: Option<&RaisedReport>,
    cells: &[RemoteCell],
    plan: &Plan,
) -> String {
    let mut h = String::from("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n");
    h.push_str(&format!(
        "<title>tcptune lab --remote {}</title>\n<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.2em .5em;text-align:left}}td.n{{text-align:right}}.na{{color:#777}}.fail{{color:#b00}}</style></head><body>\n",
        esc(remote)
    ));
    h.push_str(&format!("<h1>{}</h1>\n", esc(&path_line(remote, path))));
    h.push_str(&format!(
        "<p>{} x {} bytes per run, {} repetition(s) per cell, plan {}; tcptune {}.</p>\n",
        plan.messages,
        plan.message_size.0,
        plan.repetitions,
        esc(&plan.name),
        esc(crate::VERSION)
    ));
    h.push_str("<h2>The hosts' limits</h2>\n<ul>\n");
    for l in hosts {
        h.push_str(&format!("<li>{}</li>\n", esc(&host_line(l))));
    }
    h.push_str("</ul>\n");
    if let Some(l) = raised_line(raised) {
        h.push_str(&format!("<p>{}</p>\n", esc(&l)));
    }
    h.push_str("<h2>Cells</h2>\n");
    let ran: Vec<&RemoteCell> = cells.iter().filter(|c| !c.rates_bps.is_empty()).collect();
    if !ran.is_empty() {
        let top = tcptune_lab::svg::nice_ceil(
            ran.iter()
                .flat_map(|c| c.rates_bps.iter().copied())
                .fold(0.0, f64::max)
                / 1e6,
        );
        let (label_w, bar_w, row_h) = (220.0, 440.0, 26.0);
        let height = row_h * ran.len() as f64 + 40.0;
        h.push_str(&format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" role=\"img\" aria-label=\"median rate per cell\">\n",
            label_w + bar_w + 80.0
        ));
        let x = |mbps: f64| label_w + bar_w * (mbps / top).clamp(0.0, 1.0);
        for (i, c) in ran.iter().enumerate() {
            let y = 10.0 + row_h * i as f64;
            let med = median(&c.rates_bps).unwrap_or(0.0) / 1e6;
            let lo = c.rates_bps.iter().copied().fold(f64::INFINITY, f64::min) / 1e6;
            let hi = c.rates_bps.iter().copied().fold(0.0, f64::max) / 1e6;
            let label = format!("{} {} -P {}", c.host, c.mode, c.streams);
            h.push_str(&format!(
                "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"12\">{}</text>\n",
                label_w - 6.0,
                y + 15.0,
                esc(&label)
            ));
            h.push_str(&format!(
                "<rect x=\"{label_w}\" y=\"{y}\" width=\"{:.1}\" height=\"18\" fill=\"#4a7ebb\"><title>{}: median {:.1} Mbit/s, runs {:.1}-{:.1} Mbit/s</title></rect>\n",
                x(med) - label_w,
                esc(&label),
                med,
                lo,
                hi
            ));
            h.push_str(&format!(
                "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{}\" y2=\"{}\" stroke=\"#222\"/>\n",
                x(lo),
                x(hi),
                y + 9.0,
                y + 9.0
            ));
            h.push_str(&format!(
                "<text x=\"{:.1}\" y=\"{}\" font-size=\"12\">{med:.1}</text>\n",
                x(hi) + 4.0,
                y + 14.0
            ));
        }
        let axis_y = 10.0 + row_h * ran.len() as f64 + 4.0;
        h.push_str(&format!(
            "<line x1=\"{label_w}\" x2=\"{}\" y1=\"{axis_y}\" y2=\"{axis_y}\" stroke=\"#222\"/>\n<text x=\"{label_w}\" y=\"{}\" font-size=\"12\">0</text>\n<text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"end\">{} Mbit/s</text>\n</svg>\n",
            label_w + bar_w,
            axis_y + 16.0,
            label_w + bar_w,
            axis_y + 16.0,
            tcptune_lab::svg::tick_label(top)
        ));
    }
    h.push_str("<table>\n<tr><th>host</th><th>mode</th><th>streams</th><th>median</th><th>runs</th><th>note</th></tr>\n");
    for c in cells {
        let (rate, note) = cell_row(c);
        let class = if c.not_applied.is_some() {
            " class=\"na\""
        } else if c.rates_bps.is_empty() {
            " class=\"fail\""
        } else {
            ""
        };
        h.push_str(&format!(
            "<tr{class}><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
            esc(&c.host),
            esc(&c.mode),
            c.streams,
            esc(&rate),
            c.rates_bps.len(),
            esc(&note)
        ));
    }
    h.push_str("</table>\n</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raised_cells_run_unless_the_limits_cannot_be_raised_and_manual_waits_for_a_rate() {
        let plan = Plan::quick();
        let mut cells = cells(&plan);
        let run = |cells: &[RemoteCell]| -> Vec<String> {
            cells
                .iter()
                .filter(|c| c.not_applied.is_none())
                .map(|c| format!("{} {} {}", c.host, c.mode, c.streams))
                .collect()
        };
        let all = run(&cells);
        assert!(all.iter().any(|r| r.starts_with("untuned ")), "{all:?}");
        assert!(all.iter().any(|r| r.starts_with("kernel_only ")), "{all:?}");
        assert!(
            cells.iter().all(|c| c.raised == (c.host != "untuned")),
            "raised: exactly the kernel-only and user/kernel cells"
        );
        // ideal (a sweep around an emulated BDP) never runs across a real path.
        assert!(cells.iter().filter(|c| c.mode == "ideal").all(|c| c
            .not_applied
            .as_deref()
            .is_some_and(|w| w.contains("sweep"))));
        mark_not_raisable(&mut cells, "needs root on the remote host");
        let left = run(&cells);
        assert!(!left.is_empty());
        assert!(left.iter().all(|r| r.starts_with("untuned ")), "{left:?}");
        assert!(cells
            .iter()
            .filter(|c| c.raised && c.mode != "ideal")
            .all(|c| c.not_applied.as_deref() == Some("needs root on the remote host")));
        assert!(needs_measured_rate("manual"));
        assert!(
            !needs_measured_rate("manual:100mbit"),
            "a given rate runs at once"
        );
        let measured = PathFigures {
            min_rtt_us: Some(25_000),
            best_rate_bps: Some(941_234_567.8),
        };
        assert_eq!(
            manual_tune(&measured).as_deref(),
            Some("manual:941234567bit")
        );
        let nothing = PathFigures {
            min_rtt_us: None,
            best_rate_bps: None,
        };
        assert_eq!(manual_tune(&nothing), None);
        assert_eq!(doctor_args(&nothing), ["doctor", "--json"]);
        assert_eq!(
            doctor_args(&measured),
            [
                "doctor",
                "--json",
                "--rtt",
                "25000us",
                "--target",
                "941234567bit"
            ]
        );
    }

    fn doctor_sample() -> serde_json::Value {
        serde_json::json!({
            "sizing": {
                "send": {"autotune_rate_bps": 234_880_960u64, "best_rate_bps": 469_762_000u64},
                "recv": {"autotune_rate_bps": 1_744_830_400u64, "best_rate_bps": 1_744_830_400u64}
            },
            "facts": {"sysctls": {
                "net.core.wmem_max": {"status": "ok", "value": "4194304"},
                "net.core.rmem_max": {"status": "ok", "value": "4194304"},
                "net.ipv4.tcp_wmem": {"status": "ok", "value": "4096\t16384\t4194304"},
                "net.ipv4.tcp_rmem": {"status": "ok", "value": "4096\t131072\t33554432"}
            }}
        })
    }

    #[test]
    fn a_hosts_limits_come_from_its_doctor_report_in_its_role() {
        let s = host_limits("sender", "dtn1", &doctor_sample());
        assert_eq!(s.wmem_max, Some(4_194_304));
        assert_eq!(s.tcp_wmem_max, Some(4_194_304));
        assert_eq!(s.tcp_rmem_max, Some(33_554_432));
        assert_eq!(s.one_stream_autotuned_bps, Some(234_880_960));
        let r = host_limits("receiver", "dtn2", &doctor_sample());
        assert_eq!(r.one_stream_autotuned_bps, Some(1_744_830_400));
        let line = host_line(&s);
        assert!(line.contains("net.core.wmem_max 4.0 MiB"), "{line}");
        assert!(line.contains("235 Mbit/s autotuned"), "{line}");
        // An old far end, or a report without the fields: unknown, not zero.
        let old = host_limits(
            "receiver",
            "dtn2",
            &serde_json::json!({"schema_version": 1}),
        );
        assert_eq!(old.rmem_max, None);
        assert_eq!(old.one_stream_best_bps, None);
    }

    #[test]
    fn the_path_is_what_the_runs_measured_and_the_report_says_it() {
        let mut c = cells(&Plan::quick());
        c[0].rtts_us = vec![25_300, 25_100];
        c[0].rates_bps = vec![9e8, 9.4e8];
        c[1].rtts_us = vec![25_200];
        c[1].rates_bps = vec![5e8];
        c[1].tuned_with = Some("manual:940000000bit".into());
        let p = summarize(&c);
        assert_eq!(p.min_rtt_us, Some(25_100));
        assert_eq!(p.best_rate_bps, Some(9.4e8));
        let hosts = vec![
            host_limits("sender", "dtn1", &doctor_sample()),
            HostLimits {
                role: "receiver",
                host: "dtn2".into(),
                error: Some("doctor did not answer within 60 s".into()),
                ..HostLimits::default()
            },
        ];
        let raised = RaisedReport {
            max_bytes: 128 << 20,
            here: vec![crate::cmd::hold_limits::Change {
                key: "net.core.wmem_max".into(),
                before: "4194304".into(),
                set: "134217728".into(),
            }],
            ..RaisedReport::default()
        };
        let text = render("dtn2", &p, &hosts, Some(&raised), &c);
        assert!(
            text.contains("here net.core.wmem_max 4194304 -> 134217728; there nothing"),
            "{text}"
        );
        assert!(text.contains("RTT 25.10 ms (measured)"), "{text}");
        assert!(text.contains("not applied"), "{text}");
        assert!(text.contains("ran as manual:940000000bit"), "{text}");
        assert!(text.contains("dtn2 (receiver): limits unknown"), "{text}");
        let page = html("dtn2", &p, &hosts, None, &c, &Plan::quick());
        assert_eq!(
            page.matches("<rect ").count(),
            2,
            "one bar per cell that ran"
        );
        assert!(page.contains("class=\"na\""));
        assert!(page.ends_with("</html>\n"));
    }

    #[test]
    fn the_html_report_escapes_what_it_did_not_write_itself() {
        let mut c = cells(&Plan::quick());
        c[0].rates_bps = vec![1e8];
        c[0].failures = vec!["<script>alert(1)</script>".into()];
        let p = summarize(&c);
        let page = html("<b>evil</b>@host", &p, &[], None, &c, &Plan::quick());
        assert!(!page.contains("<script>"), "{page}");
        assert!(!page.contains("<b>evil"), "{page}");
        assert!(page.contains("&lt;script&gt;"));
    }
}
