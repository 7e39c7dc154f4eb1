//! `tcptune lab --remote [USER@]HOST`: the lab's matrix across the real path to HOST, no
//! emulator. Each cell is one `tcptune send --ssh HOST` (the far end started over ssh, as
//! `cp` and `send --ssh` start it); the report states the path's measured RTT and rate
//! instead of emulated ones, and marks the cells it cannot apply there.
//!
//! The order: [`cells`] (pure: the plan's host configurations, modes and stream counts, each
//! runnable or with the reason it is not), then [`run`] drives one `send` per runnable cell
//! and repetition, then [`summarize`] (pure) turns the reports into the path's figures.

use crate::cmd::ssh::SshOpts;
use crate::{exit, out};
use anyhow::Context as _;
use serde::Serialize;
use std::process::{Command, ExitCode, Stdio};
use tcptune_lab::plan::{HostConfig, Plan, PlanMode};

/// Version of `lab --remote --json`.
const REMOTE_SCHEMA_VERSION: u32 = 1;

/// One cell of the remote matrix.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct RemoteCell {
    host: String,
    mode: String,
    streams: u32,
    /// Why the cell cannot be applied across a real path (`None`: it runs).
    not_applied: Option<String>,
    /// Rate each repetition delivered, bit/s (the receiver's count).
    rates_bps: Vec<f64>,
    /// The smallest RTT the control connection measured, microseconds, per repetition.
    rtts_us: Vec<u64>,
    /// Repetitions that failed, with their first line of error.
    failures: Vec<String>,
}

/// The cells of `plan` across a real path: only the untuned host configuration can be
/// applied (the others raise the hosts' global maxima, which needs root on the remote host,
/// and tcptune changes no remote host's sysctls); `ideal` needs a sweep of fixed sizes
/// around the BDP and `manual` the path's rate, neither known before the path is measured.
pub(crate) fn cells(plan: &Plan) -> Vec<RemoteCell> {
    let mut out = Vec::new();
    for (host, modes) in &plan.hosts {
        for mode in modes {
            for &streams in &plan.streams {
                let name = mode.to_string();
                let not_applied = if *host != HostConfig::Untuned {
                    Some(format!(
                        "{host} raises net.core.rmem_max/wmem_max on both hosts: needs root on \
                         the remote host, and tcptune changes no remote host's sysctls"
                    ))
                } else {
                    match mode {
                        PlanMode::Ideal => Some(
                            "ideal is a sweep of fixed sizes around the BDP: not run across a \
                             real path"
                                .to_string(),
                        ),
                        PlanMode::Tune(_) if name.starts_with("manual") => {
                            Some("manual needs the path's rate, unknown here".to_string())
                        }
                        PlanMode::Tune(_) => None,
                    }
                };
                out.push(RemoteCell {
                    host: host.to_string(),
                    mode: name,
                    streams,
                    not_applied,
                    rates_bps: Vec::new(),
                    rtts_us: Vec::new(),
                    failures: Vec::new(),
                });
            }
        }
    }
    out
}

/// What the matrix measured of the path.
#[derive(Debug, PartialEq, Serialize)]
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

#[derive(Debug, Serialize)]
struct RemoteReport<'a> {
    schema_version: u32,
    remote: &'a str,
    path: PathFigures,
    bytes_per_run: u64,
    repetitions: u32,
    cells: &'a [RemoteCell],
}

/// Run every runnable cell of `plan` across the path to `remote`, print the report.
pub(crate) fn run(
    plan: &Plan,
    remote: &str,
    ssh: &SshOpts,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("finding this tcptune")?;
    let mut cells = cells(plan);
    let runnable = cells.iter().filter(|c| c.not_applied.is_none()).count();
    for (i, cell) in cells
        .iter_mut()
        .filter(|c| c.not_applied.is_none())
        .enumerate()
    {
        for rep in 0..plan.repetitions {
            eprintln!(
                "lab --remote: cell {}/{runnable}: {} -P {} ({}/{})",
                i + 1,
                cell.mode,
                cell.streams,
                rep + 1,
                plan.repetitions
            );
            let mut cmd = Command::new(&exe);
            cmd.args([
                "send",
                "--ssh",
                remote,
                "--json",
                "--no-progress",
                "--no-path-db",
            ])
            .args(["--tune", &cell.mode, "-P", &cell.streams.to_string()])
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
    }
    let path = summarize(&cells);
    if json {
        out::json(&RemoteReport {
            schema_version: REMOTE_SCHEMA_VERSION,
            remote,
            path,
            bytes_per_run: plan.transfer_bytes(),
            repetitions: plan.repetitions,
            cells: &cells,
        })?;
    } else {
        out::text(&render(remote, &path, &cells));
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

/// The report for people: the measured path, then one line per cell.
fn render(remote: &str, path: &PathFigures, cells: &[RemoteCell]) -> String {
    let mut s = format!(
        "Across the real path to {remote}: RTT {} (measured), best rate {} (measured)\n\n",
        path.min_rtt_us
            .map_or("unknown".into(), |us| format!("{:.2} ms", us as f64 / 1e3)),
        path.best_rate_bps
            .map_or("unknown".into(), |r| format!("{:.1} Mbit/s", r / 1e6))
    );
    s.push_str(&format!(
        "{:<12} {:<10} {:>7} {:>16}  {}\n",
        "HOST", "MODE", "STREAMS", "RATE (MEDIAN)", "NOTE"
    ));
    for c in cells {
        let (rate, note) = match (&c.not_applied, median(&c.rates_bps)) {
            (Some(why), _) => ("-".to_string(), format!("not applied: {why}")),
            (None, Some(r)) => (
                format!("{:.1} Mbit/s", r / 1e6),
                c.failures.first().cloned().unwrap_or_default(),
            ),
            (None, None) => (
                "failed".to_string(),
                c.failures.first().cloned().unwrap_or_default(),
            ),
        };
        s.push_str(&format!(
            "{:<12} {:<10} {:>7} {:>16}  {}\n",
            c.host, c.mode, c.streams, rate, note
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_untuned_cells_that_need_no_path_rate_run_across_a_real_path() {
        let plan = Plan::quick();
        let cells = cells(&plan);
        let run: Vec<String> = cells
            .iter()
            .filter(|c| c.not_applied.is_none())
            .map(|c| format!("{} {} {}", c.host, c.mode, c.streams))
            .collect();
        assert!(!run.is_empty());
        assert!(run.iter().all(|r| r.starts_with("untuned ")), "{run:?}");
        let not: Vec<&RemoteCell> = cells.iter().filter(|c| c.not_applied.is_some()).collect();
        assert!(not
            .iter()
            .any(|c| c.mode == "ideal"
                && c.not_applied.as_deref().is_some_and(|w| w.contains("root"))));
        assert!(not.iter().any(|c| c.host != "untuned"));
    }

    #[test]
    fn the_path_is_what_the_runs_measured() {
        let mut c = cells(&Plan::quick());
        c[0].rtts_us = vec![25_300, 25_100];
        c[0].rates_bps = vec![9e8, 9.4e8];
        c[1].rtts_us = vec![25_200];
        c[1].rates_bps = vec![5e8];
        let p = summarize(&c);
        assert_eq!(p.min_rtt_us, Some(25_100));
        assert_eq!(p.best_rate_bps, Some(9.4e8));
        let text = render("dtn2", &p, &c);
        assert!(text.contains("RTT 25.10 ms (measured)"), "{text}");
        assert!(text.contains("not applied"), "{text}");
    }
}
