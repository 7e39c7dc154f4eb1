//! `tcptune emu run`: bring a path up, start --server on side B, run CMD on side A, tear
//! everything down, and exit with CMD's exit status; what goes to stdout and stderr.

use super::{dir_line, emu_fail, PathJson, PathOpts, EMU_SCHEMA_VERSION};
use crate::args::{self, ms, secs};
use crate::{exit, out};
use anyhow::{anyhow, Context};
use serde::Serialize;
use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;
use std::process::{ExitCode, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tcptune_emu::state::OwnerKind;
use tcptune_emu::{capacity_warning, unique_name, EmuStats, Mode, Side, Topology};
use tcptune_sys::process::{self, output, signals, Supervised, Waited};

/// How the --server command's output lines are marked on stderr.
const SERVER_PREFIX: &str = "[server] ";
/// SIGTERM to SIGKILL for the --server command when CMD has ended.
const SERVER_GRACE: Duration = Duration::from_secs(1);
/// SIGTERM to SIGKILL for CMD when the run is interrupted.
const CMD_GRACE: Duration = Duration::from_secs(2);

#[derive(clap::Args, Debug)]
pub(super) struct RunOpts {
    #[command(flatten)]
    path: PathOpts,
    /// Command started (through `sh -c`) on side B before CMD; stopped when CMD ends. Its
    /// output goes to stderr, each line prefixed with '[server] '.
    #[arg(long, value_name = "CMD")]
    server: Option<String>,
    /// Write the --server command's stdout and stderr to FILE instead of stderr.
    #[arg(long, value_name = "FILE", requires = "server")]
    server_log: Option<std::path::PathBuf>,
    /// Topology name (default: run-PID).
    #[arg(long)]
    name: Option<String>,
    /// Write the emulator's final counters as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<std::path::PathBuf>,
    /// Write emu's report (CMD's exit code and the final counters) as JSON on stdout when CMD
    /// ends, and send CMD's stdout to stderr (see "Output of emu run" below).
    #[arg(long)]
    json: bool,
    /// Reset the counters this long after CMD starts, so that the final counters describe
    /// the steady state (for example after TCP's slow start), e.g. 3s.
    #[arg(long, value_parser = args::duration(ms(1), secs(3600)), value_name = "DURATION")]
    warmup: Option<Duration>,
    /// The command to run on side A, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    cmd: Vec<OsString>,
}

/// What `emu run --json` prints on stdout when CMD has ended.
#[derive(Serialize)]
struct RunReport<'a> {
    schema_version: u32,
    name: &'a str,
    path: PathJson,
    /// The extra paths (`--extra-path`), to 198.19.0.2 on (empty: one path).
    extra_paths: Vec<PathJson>,
    /// CMD's exit code (128 + N if a signal N ended it), which is also emu run's.
    exit_code: u8,
    /// The stop signal (SIGINT, SIGTERM, SIGHUP) that cut the run short.
    interrupted_by: Option<String>,
    /// Why the run failed before CMD could finish (the server exited first, ...).
    error: Option<String>,
    /// "root" or "rootless" (see `tcptune emu --help`).
    mode: Mode,
    /// The emulator's final counters.
    stats: &'a EmuStats,
}

/// How CMD ended.
struct CmdEnd {
    code: u8,
    signal: Option<i32>,
}

pub(super) fn run(o: RunOpts) -> anyhow::Result<ExitCode> {
    let name = o.name.clone().unwrap_or_else(|| unique_name("run"));
    let cfg = o.path.topology(&name)?;
    let up_opts = o.path.up_options(OwnerKind::Run);
    if let Some(w) = capacity_warning(&cfg.path, up_opts.offload) {
        eprintln!("tcptune emu: warning: {w}");
    }
    signals::catch_stop_signals()?;
    eprintln!("tcptune emu: bringing up {name}: {}", cfg.describe_paths());
    let topo = Topology::up_with(&cfg, &up_opts).map_err(emu_fail)?;
    eprintln!("tcptune emu: mode {}", topo.mode_summary());
    for n in topo.notes() {
        eprintln!("tcptune emu: warning: {n}");
    }
    let mode = topo.mode();
    let mut copiers = Vec::new();
    let result = run_in_topology(&topo, &o, &mut copiers);
    let stats = topo.down().map_err(emu_fail)?;
    // Every namespace process is gone, so the server's pipes are closed: its last lines
    // are out before the report.
    for c in copiers {
        let _ = c.join();
    }
    if let Some(path) = &o.stats_json {
        let text = serde_json::to_string_pretty(&stats)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("writing the counters to {}", path.display()))?;
    }
    let (code, signal, error) = match &result {
        Ok(end) => (end.code, end.signal, None),
        Err(e) => (
            e.downcast_ref::<exit::Fail>()
                .map_or(exit::FAILURE, |f| f.code),
            None,
            Some(format!("{e:#}")),
        ),
    };
    if o.json {
        out::json(&RunReport {
            schema_version: EMU_SCHEMA_VERSION,
            name: &name,
            path: PathJson::from(&cfg.path),
            extra_paths: cfg.extra_paths.iter().map(PathJson::from).collect(),
            exit_code: code,
            interrupted_by: signal.map(signals::signal_name),
            error,
            mode,
            stats: &stats,
        })?;
    } else {
        eprintln!("tcptune emu: {}", dir_line("a->b", &stats.a_to_b));
        eprintln!("tcptune emu: {}", dir_line("b->a", &stats.b_to_a));
        for (i, p) in stats.extra.iter().enumerate() {
            let (ab, ba) = (
                format!("path {} a->b", i + 1),
                format!("path {} b->a", i + 1),
            );
            eprintln!("tcptune emu: {}", dir_line(&ab, &p.a_to_b));
            eprintln!("tcptune emu: {}", dir_line(&ba, &p.b_to_a));
        }
    }
    result?;
    Ok(ExitCode::from(code))
}

/// Start --server on side B with its output on our stderr (prefixed) or in --server-log.
fn start_server(
    topo: &Topology,
    o: &RunOpts,
    server: &str,
    copiers: &mut Vec<JoinHandle<()>>,
) -> anyhow::Result<Supervised> {
    let mut cmd = topo.command(Side::B, "sh");
    cmd.arg("-c").arg(server).stdin(Stdio::null());
    match &o.server_log {
        Some(path) => {
            let log = File::create(path)
                .with_context(|| format!("creating the server log {}", path.display()))?;
            let log2 = log
                .try_clone()
                .with_context(|| format!("duplicating {}", path.display()))?;
            cmd.stdout(log).stderr(log2);
        }
        None => {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
    }
    let mut child =
        process::spawn(&mut cmd, format!("the server '{server}' on side B"))?.grace(SERVER_GRACE);
    let c = child.child_mut();
    let pipes: Vec<Box<dyn Read + Send>> = [
        c.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
        c.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .collect();
    for p in pipes {
        copiers.push(
            output::prefix_to_stderr(p, SERVER_PREFIX)
                .context("starting a thread for the server's output")?,
        );
    }
    // Give the server up to 3 s to listen on a TCP port (a UDP server is simply given the
    // 3 s).
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline && signals::stop_requested().is_none() {
        if topo.tcp_listeners(Side::B).map_err(emu_fail)? > 0 {
            break;
        }
        if let Some(st) = child.try_wait()? {
            return Err(exit::fail(
                exit::FAILURE,
                anyhow!("the server on side B exited before CMD started ({st})"),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(child)
}

fn run_in_topology(
    topo: &Topology,
    o: &RunOpts,
    copiers: &mut Vec<JoinHandle<()>>,
) -> anyhow::Result<CmdEnd> {
    let mut server = match &o.server {
        Some(cmd) => Some(start_server(topo, o, cmd, copiers)?),
        None => None,
    };
    let (prog, args) = o
        .cmd
        .split_first()
        .ok_or_else(|| exit::fail(exit::USAGE, anyhow!("no command given after --")))?;
    let mut cmd = topo.command(Side::A, prog);
    cmd.args(args);
    if o.json {
        // stdout carries emu's report: CMD's stdout goes to stderr, so the two never mix.
        let err = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .context("duplicating stderr for CMD's stdout")?;
        cmd.stdout(Stdio::from(err));
    }
    let what = format!("{} on side A", prog.to_string_lossy());
    let mut child = process::spawn(&mut cmd, what)?.grace(CMD_GRACE);
    let started = Instant::now();
    let stop = || signals::stop_requested().is_some();
    let mut waited = match o.warmup {
        Some(w) => child.wait_until(Some(started + w), stop)?,
        None => child.wait_until(None, stop)?,
    };
    if waited == Waited::Deadline {
        topo.reset_stats();
        waited = child.wait_until(None, stop)?;
    }
    let end = match waited {
        Waited::Exited(st) => CmdEnd {
            code: process::exit_code(st),
            signal: None,
        },
        Waited::Interrupted | Waited::Deadline => {
            let sig = signals::stop_requested().unwrap_or(libc::SIGTERM);
            eprintln!(
                "tcptune emu: interrupted ({}); tearing down",
                signals::signal_name(sig)
            );
            if let Err(e) = child.terminate() {
                eprintln!("tcptune emu: {e}");
            }
            CmdEnd {
                code: u8::try_from(128 + sig).unwrap_or(1),
                signal: Some(sig),
            }
        }
    };
    if let Some(s) = server.as_mut() {
        if let Err(e) = s.terminate() {
            eprintln!("tcptune emu: {e}");
        }
    }
    Ok(end)
}
