//! `tcptune emu up`, its background daemon (`__daemon`) and `tcptune emu down`.

use super::{emu_exit_code, emu_fail, PathJson, PathOpts, EMU_SCHEMA_VERSION};
use crate::{exit, out};
use anyhow::Context;
use serde::Serialize;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;
use tcptune_emu::daemon::{self, DaemonSpec};
use tcptune_emu::state::{self, OwnerKind};
use tcptune_emu::{capacity_warning, EmuError, EmuStats, Mode};
use tcptune_sys::process::{Ended, ProcessError, ProcessId};

/// SIGTERM to SIGKILL for an `emu up` daemon (it takes its path down in between).
const DAEMON_GRACE: Duration = Duration::from_secs(10);

#[derive(clap::Args, Debug)]
pub(super) struct UpOpts {
    /// Topology name: namespaces tt-NAME-a and tt-NAME-b.
    name: String,
    #[command(flatten)]
    path: PathOpts,
    /// Print what came up as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
pub(super) struct DownOpts {
    /// Topology name.
    name: String,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
pub(super) struct DaemonOpts {
    /// The topology and options as JSON.
    #[arg(long)]
    spec: String,
}

/// What `emu up --json` prints.
#[derive(Serialize)]
struct UpReport {
    schema_version: u32,
    name: String,
    daemon_pid: u32,
    netns_a: String,
    netns_b: String,
    addr_a: String,
    addr_b: String,
    path: PathJson,
    /// The extra paths (`--extra-path`), to 198.19.0.2 on (empty: one path).
    extra_paths: Vec<PathJson>,
    /// "root" or "rootless".
    mode: Mode,
    warnings: Vec<String>,
}

pub(super) fn up(o: UpOpts) -> anyhow::Result<ExitCode> {
    let cfg = o.path.topology(&o.name)?;
    let up_opts = o.path.up_options(OwnerKind::Daemon);
    let mut warnings: Vec<String> = capacity_warning(&cfg.path, up_opts.offload)
        .into_iter()
        .collect();
    let spec = DaemonSpec::new(cfg.clone(), &up_opts);
    let exe = std::env::current_exe().context("finding the tcptune executable")?;
    let mut cmd = Command::new(exe);
    cmd.args(["emu", "__daemon", "--spec"])
        .arg(serde_json::to_string(&spec)?)
        .stderr(Stdio::inherit());
    if !o.json {
        eprintln!(
            "tcptune emu: bringing up {}: {}",
            o.name,
            cfg.describe_paths()
        );
    }
    let d = daemon::start(&mut cmd).map_err(|e| match e {
        ProcessError::DaemonFailed { exit_code, .. } => exit::fail(exit_code, e),
        e => exit::fail(exit::FAILURE, e),
    })?;
    warnings.extend(d.ready.notes.iter().cloned());
    let [netns_a, netns_b] = d.ready.netns.clone();
    let [addr_a, addr_b] = d.ready.addrs.map(|a| a.to_string());
    if o.json {
        out::json(&UpReport {
            schema_version: EMU_SCHEMA_VERSION,
            name: o.name.clone(),
            daemon_pid: d.pid,
            netns_a,
            netns_b,
            addr_a,
            addr_b,
            path: PathJson::from(&cfg.path),
            extra_paths: cfg.extra_paths.iter().map(PathJson::from).collect(),
            mode: d.ready.mode,
            warnings,
        })?;
    } else {
        eprintln!("tcptune emu: mode {}", d.ready.mode_summary);
        for w in &warnings {
            eprintln!("tcptune emu: warning: {w}");
        }
        let (ns_a, ns_b) = match d.ready.mode {
            Mode::Root => (format!("netns {netns_a}"), format!("netns {netns_b}")),
            Mode::Rootless => ("rootless".to_string(), "rootless".to_string()),
        };
        out::line(&format!(
            "{} up: side a {addr_a} ({ns_a}), side b {addr_b} ({ns_b}), daemon pid {}",
            o.name, d.pid
        ));
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn daemon(o: DaemonOpts) -> anyhow::Result<ExitCode> {
    let spec: DaemonSpec = serde_json::from_str(&o.spec).context("parsing the daemon spec")?;
    Ok(ExitCode::from(daemon::serve(&spec, emu_exit_code)))
}

/// `emu down --json`.
#[derive(Serialize)]
struct DownReport {
    schema_version: u32,
    name: String,
    /// "stopped" (the daemon took it down) or "removed-stale" (its owner was gone).
    outcome: &'static str,
    /// The last counters the daemon published (at most a quarter second old).
    last_stats: Option<EmuStats>,
}

pub(super) fn down(o: DownOpts) -> anyhow::Result<ExitCode> {
    let report = |outcome, last_stats| -> anyhow::Result<ExitCode> {
        if o.json {
            out::json(&DownReport {
                schema_version: EMU_SCHEMA_VERSION,
                name: o.name.clone(),
                outcome,
                last_stats,
            })?;
        } else {
            out::line(&format!("{} {outcome}", o.name));
        }
        Ok(ExitCode::SUCCESS)
    };
    let removed = state::cleanup_stale().map_err(emu_fail)?;
    for e in &removed.errors {
        eprintln!("tcptune emu: cleaning up after a dead owner: {e}");
    }
    if removed.topologies.iter().any(|n| n == &o.name) {
        return report("removed-stale", None);
    }
    let record = state::load(&o.name).map_err(emu_fail)?;
    if record.owner_kind != OwnerKind::Daemon {
        let owner = match record.owner_kind {
            OwnerKind::Run => format!("a 'tcptune emu run' (pid {})", record.owner_pid),
            _ => format!("process {}", record.owner_pid),
        };
        return Err(exit::fail(
            exit::FAILURE,
            EmuError::NotOwned {
                name: o.name.clone(),
                owner,
            },
        ));
    }
    let last = record.stats();
    let daemon = ProcessId {
        pid: record.owner_pid,
        start: record.owner_start,
    };
    let what = format!("the emulator daemon of '{}' (pid {})", o.name, daemon.pid);
    // SIGTERM: the daemon takes its path down and exits.
    let ended = daemon.terminate(&what, DAEMON_GRACE)?;
    if ended == Ended::Killed {
        state::cleanup_stale().map_err(emu_fail)?;
        eprintln!(
            "tcptune emu: the daemon did not stop in {} s; killed it and cleaned up",
            DAEMON_GRACE.as_secs()
        );
    }
    report("stopped", last)
}
