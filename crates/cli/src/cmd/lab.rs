//! `tcptune lab`: the paper's comparison of tuning techniques on emulated long fat pipes, and
//! `tcptune lab report DIR` to rebuild the report from saved results.

use crate::args::{self, secs};
use crate::exit;
use crate::out;
use anyhow::Context as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tcptune_core::Rate;
use tcptune_emu::host::RestoreAction;
use tcptune_lab::plan::{Plan, PlanError};
use tcptune_lab::psc::{PscBuilt, PscPlan};
use tcptune_lab::runner::psc::PscRunnerConfig;
use tcptune_lab::runner::{self, env, NotFaithful, RunnerConfig, Unavailable};

/// Options of `tcptune lab`.
///
/// Builds emulated paths (two network namespaces joined by tcptune's user-space emulator;
/// RTT 0.5 to 200 ms at 1 Gbit/s by default), runs every tuning mode over them with the
/// paper's workload (128 x 1 MiB messages over 1-8 parallel streams) under three host
/// configurations (no tuning, kernel-only tuning with raised maxima, user+kernel tuning with
/// setsockopt), and writes raw results (results.jsonl, results.csv, cells.csv),
/// summary.json and report.html into a results folder. As root, the global
/// net.core.rmem_max/wmem_max are raised for the tuned configurations and restored at the end
/// (also on error or Ctrl-C); meta.json records what was changed. As anyone else it runs in
/// the emulator's rootless mode (a user namespace), which cannot raise them: the cells that
/// need them raised are marked "not run" (in results.jsonl, summary.json and the report).
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, after_long_help = AFTER_HELP)]
pub(crate) struct Opts {
    #[command(subcommand)]
    command: Option<LabCommand>,

    /// A small subset that finishes in under 10 minutes on 2 cores (3 paths, 1 and 4 streams,
    /// one repetition, a coarse buffer sweep); the CI smoke test.
    #[arg(long, conflicts_with = "plan")]
    quick: bool,

    /// Run Semke, Mahdavi & Mathis's (PSC, SIGCOMM 1998) experiments instead: one
    /// `tcptune serve --memory-budget 2MiB` sender, clients over a 40 Mbit/s x 68 ms and a
    /// 10 Mbit/s x 1 ms path at once, modes default (16 kB), hiperf (400 kB), psc and auto,
    /// 1 to 30 concurrent connections (with --quick: 1, 4, 10, 20; under 15 minutes). With
    /// --plan FILE the file is a PSC plan (see tcptune_lab::psc::plan).
    #[arg(long, conflicts_with_all = ["rate", "mtu", "max_time", "no_calibrate", "force"])]
    psc: bool,

    /// Run the experiment described by a TOML plan file (see the documentation of
    /// tcptune_lab::plan for the keys; missing keys take the full matrix's values).
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,

    /// Results folder (default: a new timestamped folder under ./lab-results/).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,

    /// Bottleneck rate of every path (decimal bits: 500mbit, 1Gbit/s).
    #[arg(long, value_name = "RATE", value_parser = args::rate(Rate::mbit(1), Rate::gbit(400)))]
    rate: Option<Rate>,

    /// MTU of the emulated paths.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(576..=65535))]
    mtu: Option<u32>,

    /// Runs per cell (median and min-max are reported).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    repetitions: Option<u32>,

    /// Time cap of each run (e.g. 20s); a capped run's throughput comes from the bytes moved.
    #[arg(long, value_name = "DURATION", value_parser = args::duration(secs(1), secs(24 * 3600)))]
    max_time: Option<Duration>,

    /// Seed of the emulator.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,

    /// Print summary.json on stdout instead of the table.
    #[arg(long)]
    json: bool,

    /// Skip the emulator calibration (results may then reflect the emulator, not TCP).
    #[arg(long)]
    no_calibrate: bool,

    /// Run even if the calibration finds the emulator unfaithful at the rate.
    #[arg(long)]
    force: bool,

    /// No progress bar on stderr.
    #[arg(long)]
    no_progress: bool,

    /// Print the expanded plan (cells and expected time) and exit without running.
    #[arg(long)]
    dry_run: bool,

    /// Undo what a lab killed mid-run (kill -9, a crash) left behind and exit: put the
    /// host's net.core.rmem_max/wmem_max back to the values journaled before they were
    /// raised, then remove its namespaces and the processes in them. A lab does this by
    /// itself when it starts. Refused while a lab runs.
    #[arg(long, conflicts_with_all = ["quick", "plan", "dry_run"])]
    cleanup: bool,

    /// Run the matrix across the real path to [USER@]HOST instead of emulated paths: each
    /// cell is one `tcptune send --ssh HOST` (the far end started over ssh, as `cp` starts
    /// it; -e/--rsh and --remote-tcptune as for cp). The report states the path's measured
    /// RTT and rate, and marks the cells that cannot be applied there (the ideal sweep; the
    /// raised host configurations without root on both hosts). The untuned cells run first
    /// under both hosts' own limits; then, for kernel_only and user_kernel, both hosts'
    /// net.core.rmem_max/wmem_max and tcp_rmem/tcp_wmem maxima are raised to the plan's
    /// raised_max while those cells run (here by this process, there by `tcptune
    /// hold-limits` over the same ssh; journaled, put back after them, after a dropped
    /// connection, and after a crash by the next lab --remote or hold-limits). `manual`
    /// runs last in each part, sized from the best rate measured before it (its bandwidth
    /// test). The report also gives both hosts' limits and what they let one stream reach
    /// (`tcptune doctor` on each, the far one over the same ssh). With --out DIR:
    /// results.json and report.html there.
    #[arg(long, value_name = "[USER@]HOST", conflicts_with_all = ["psc", "cleanup", "rate", "mtu", "no_calibrate", "force", "seed"])]
    remote: Option<String>,

    #[command(flatten)]
    ssh: super::ssh::SshOpts,
}

const AFTER_HELP: &str = "\
What runs: for each host configuration (untuned: the namespace's defaults; kernel_only: raised
net.core.{r,w}mem_max and tcp_{r,w}mem maxima; user_kernel: raised maxima plus setsockopt), each
path and each stream count, every mode the plan lists there; `ideal` is the best fixed:SIZE of a
sweep around BDP/streams. Before the matrix, one well-buffered transfer checks that the emulator
holds the rate (exit 5 with the highest faithful rate if not).

Outputs in the results folder: plan.json, meta.json, results.jsonl (one record per run),
results.csv, cells.csv, summary.json and report.html.

A plan file (--plan FILE, TOML; every key optional, missing keys take the full matrix's):
  name = \"mine\"
  rate = \"1gbit\"
  rtts = [\"0.5ms\", \"25ms\", \"100ms\"]
  streams = [1, 2, 4, 8]
  repetitions = 3
  max_time = \"20s\"
  congestion = \"cubic\"          # or \"default\"
  [hosts]
  untuned = [\"none\", \"kernel\", \"auto\"]
  kernel_only = [\"kernel\", \"drs\", \"auto\"]
  user_kernel = [\"manual\", \"ideal\", \"fixed:4m\"]
  [ideal]                        # sweep around BDP/streams, in powers of two
  below = 1
  above = 2
  [buffer_sweep]                 # the paper's Figure 5
  rtts = [\"0.5ms\"]
  streams = [1, 2]
  min = \"8k\"
  max = \"64m\"
Other keys: mtu, queue_bdp, messages, message_size, seed, raised_max.

Modes: as root the paths are named namespaces with TUN devices and the global maxima are
raised; as anyone else (rootless, a user namespace of the lab's own) they cannot be, and the
cells that need them are marked not run. The lab says which on stderr ('mode ...').

PSC's experiments (--psc): section 4.1 (N connections to the remote receiver; Figures 3
and 4) and 4.3 (N to each receiver at once; Figures 7 and 8), each connection a
`tcptune send --reverse` client bound to its path's address, all served by one
`tcptune serve --memory-budget` whose psc/auto streams share the budget. Per connection it
records throughput and path, and samples the server's send buffers (ss -tmi) every 500 ms.
Outputs: psc_plan.json, meta.json, psc_results.jsonl, summary.json (its `psc` section: the
claims and every cell), report.html and the figures as psc-fig*.svg. A PSC plan file:
  basic = [1, 2, 4, 8, 16, 30]     # connections to the remote receiver
  diverse = [1, 2, 5, 10, 15]      # connections to each receiver
  modes = [\"default\", \"hiperf\", \"psc\", \"auto\"]
  repetitions = 2
  seconds = 20.0                   # each transfer's length
  budget = 2097152                 # bytes
Other keys: name, network_memory, queue_bdp, mtu, seed, remote/local = { rate_bps, rtt_us }.

Examples:
  tcptune lab --quick
  tcptune lab --psc --quick
  tcptune lab --rate 500mbit --out lab-results/500m
  tcptune lab --plan my-sweep.toml
  tcptune lab --cleanup                 # after a lab was killed with kill -9
  tcptune lab --remote alice@dtn2 --plan one-cell.toml   # across the real path to dtn2
  tcptune lab report lab-results/20261122-101500";

#[derive(clap::Subcommand, Debug)]
enum LabCommand {
    /// Rebuild report.html, summary.json and the CSVs from a saved results folder.
    Report {
        /// The results folder (holds plan.json, meta.json, results.jsonl).
        dir: PathBuf,
        /// Print summary.json on stdout instead of the table.
        #[arg(long)]
        json: bool,
    },
}

fn usage(e: impl Into<anyhow::Error>) -> anyhow::Error {
    exit::fail(exit::USAGE, e)
}

fn build_plan(o: &Opts) -> anyhow::Result<Plan> {
    let mut plan = if let Some(f) = &o.plan {
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("reading plan file {}", f.display()))
            .map_err(usage)?;
        Plan::from_toml(&text).map_err(usage)?
    } else if o.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    if let Some(r) = o.rate {
        plan.rate = r;
    }
    if let Some(m) = o.mtu {
        plan.mtu = m;
    }
    if let Some(n) = o.repetitions {
        plan.repetitions = n;
    }
    if let Some(s) = o.seed {
        plan.seed = s;
    }
    if let Some(d) = o.max_time {
        plan.max_time_ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    }
    plan.validate().map_err(|e: PlanError| usage(e))?;
    Ok(plan)
}

/// `tcptune lab --cleanup`.
fn cleanup(json: bool) -> anyhow::Result<ExitCode> {
    let c = runner::cleanup().map_err(|e| {
        let code = if e.downcast_ref::<Unavailable>().is_some() {
            exit::ENVIRONMENT
        } else {
            exit::FAILURE
        };
        exit::fail(code, e)
    })?;
    if json {
        out::json(&c)?;
    } else if c.is_empty() {
        out::line("nothing to clean up");
    } else {
        for r in &c.sysctls {
            out::line(&match r.action {
                RestoreAction::Restored => {
                    format!("restored {}: {} -> {}", r.key, r.found, r.original)
                }
                RestoreAction::AlreadyOriginal => {
                    format!("{} already at its original {}", r.key, r.original)
                }
                RestoreAction::LeftAlone => format!(
                    "left {} at {} (changed by someone else since; the original was {})",
                    r.key, r.found, r.original
                ),
            });
        }
        for t in &c.topologies {
            out::line(&format!(
                "removed emulated path {t} (namespaces and processes)"
            ));
        }
        for e in &c.errors {
            eprintln!("tcptune lab: {e}");
        }
    }
    Ok(if c.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::FAILURE)
    })
}

/// Run `tcptune lab`.
pub(crate) fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    if opts.cleanup {
        return cleanup(opts.json);
    }
    if let Some(LabCommand::Report { dir, json }) = &opts.command {
        if dir.join(tcptune_lab::psc::report::PSC_PLAN_FILE).exists() {
            let built = tcptune_lab::psc::rebuild(dir)
                .with_context(|| format!("rebuilding the PSC report in {}", dir.display()))?;
            return print_psc(&built, dir, *json);
        }
        let built = tcptune_lab::rebuild(dir)
            .with_context(|| format!("rebuilding the report in {}", dir.display()))?;
        if *json {
            out::json(&built.summary)?;
        } else {
            out::text(&built.table);
            out::line(&format!(
                "\nreport: {}",
                dir.join(tcptune_lab::results::REPORT_FILE).display()
            ));
        }
        return Ok(ExitCode::SUCCESS);
    }
    if opts.psc {
        return run_psc(&opts);
    }
    if let Some(remote) = &opts.remote {
        let plan = build_plan(&opts)?;
        return super::lab_remote::run(&plan, remote, &opts.ssh, opts.json, opts.out.as_deref());
    }
    opts.ssh.only_over_ssh("lab without --remote")?;
    let plan = build_plan(&opts)?;
    if opts.dry_run {
        let e = plan.expand();
        let secs: f64 = e
            .cells
            .iter()
            .map(|c| runner::progress::expected_seconds(&plan, &c.key))
            .sum::<f64>()
            * f64::from(plan.repetitions);
        if opts.json {
            out::json(&e)?;
        } else {
            for c in &e.cells {
                out::line(&c.key.id());
            }
            out::line(&format!(
                "{} cells x {} repetition(s) = {} runs, expected about {}",
                e.cells.len(),
                plan.repetitions,
                e.runs(),
                runner::progress::fmt_secs(std::time::Duration::from_secs_f64(secs))
            ));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let tcptune = std::env::current_exe().context("finding the tcptune binary")?;
    let cfg = RunnerConfig {
        tcptune,
        out: opts.out.clone().unwrap_or_else(env::default_out_dir),
        plan,
        calibrate: !opts.no_calibrate,
        force: opts.force,
        progress: !opts.no_progress,
        port: 5310,
    };
    let outcome = match runner::run_lab(&cfg) {
        Ok(o) => o,
        Err(e) => {
            let code = if e.downcast_ref::<Unavailable>().is_some()
                || e.downcast_ref::<NotFaithful>().is_some()
            {
                exit::ENVIRONMENT
            } else {
                exit::FAILURE
            };
            return Err(exit::fail(code, e));
        }
    };
    let b = &outcome.built;
    if opts.json {
        out::json(&b.summary)?;
    } else {
        out::text(&b.table);
        out::line(&format!(
            "\nreport: {}",
            outcome
                .dir
                .join(tcptune_lab::results::REPORT_FILE)
                .display()
        ));
    }
    if outcome.interrupted {
        eprintln!(
            "tcptune lab: interrupted; the results in {} are partial",
            outcome.dir.display()
        );
        return Ok(ExitCode::from(exit::FAILURE));
    }
    if !b.summary.missing_cells.is_empty() {
        eprintln!(
            "tcptune lab: {} planned cell(s) have no successful run (see the report's failed runs and {}/logs)",
            b.summary.missing_cells.len(),
            outcome.dir.display()
        );
        // Say why, once per cell: the last error of each missing cell's runs.
        let records = tcptune_lab::results::read_records(&outcome.dir).unwrap_or_default();
        for id in &b.summary.missing_cells {
            let why = records
                .iter()
                .rev()
                .find(|r| &r.cell.id() == id)
                .and_then(|r| r.error.clone())
                .unwrap_or_else(|| "no run recorded".into());
            eprintln!("tcptune lab:   {id}: {}", why.replace(['\n', '\r'], " "));
        }
        return Ok(ExitCode::from(exit::FAILURE));
    }
    Ok(ExitCode::SUCCESS)
}

fn psc_plan(o: &Opts) -> anyhow::Result<PscPlan> {
    let mut plan = if let Some(f) = &o.plan {
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("reading plan file {}", f.display()))
            .map_err(usage)?;
        PscPlan::from_toml(&text).map_err(|e| usage(anyhow::anyhow!(e)))?
    } else if o.quick {
        PscPlan::quick()
    } else {
        PscPlan::full()
    };
    if let Some(n) = o.repetitions {
        plan.repetitions = n;
    }
    if let Some(s) = o.seed {
        plan.seed = s;
    }
    plan.validate().map_err(usage)?;
    Ok(plan)
}

fn print_psc(b: &PscBuilt, dir: &std::path::Path, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        out::json(&b.summary)?;
    } else {
        out::text(&b.table);
        out::line(&format!(
            "\nreport: {}",
            dir.join(tcptune_lab::results::REPORT_FILE).display()
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// `tcptune lab --psc`.
fn run_psc(opts: &Opts) -> anyhow::Result<ExitCode> {
    let plan = psc_plan(opts)?;
    if opts.dry_run {
        if opts.json {
            out::json(&plan)?;
        } else {
            for c in plan.cells() {
                out::line(&c.id());
            }
            out::line(&format!(
                "{} cells x {} repetition(s), expected about {}",
                plan.cells().len(),
                plan.repetitions,
                runner::progress::fmt_secs(Duration::from_secs_f64(plan.expected_seconds()))
            ));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let cfg = PscRunnerConfig {
        tcptune: std::env::current_exe().context("finding the tcptune binary")?,
        out: opts.out.clone().unwrap_or_else(env::default_out_dir),
        plan,
        progress: !opts.no_progress,
        port: 5310,
    };
    let outcome = runner::psc::run_psc(&cfg).map_err(|e| {
        let code = if e.downcast_ref::<Unavailable>().is_some() {
            exit::ENVIRONMENT
        } else {
            exit::FAILURE
        };
        exit::fail(code, e)
    })?;
    print_psc(&outcome.built, &outcome.dir, opts.json)?;
    if outcome.interrupted {
        eprintln!(
            "tcptune lab --psc: interrupted; the results in {} are partial",
            outcome.dir.display()
        );
        return Ok(ExitCode::from(exit::FAILURE));
    }
    if outcome.built.summary.failed_runs > 0 {
        eprintln!(
            "tcptune lab --psc: {} run(s) failed (see the report and {}/logs)",
            outcome.built.summary.failed_runs,
            outcome.dir.display()
        );
        return Ok(ExitCode::from(exit::FAILURE));
    }
    Ok(ExitCode::SUCCESS)
}
