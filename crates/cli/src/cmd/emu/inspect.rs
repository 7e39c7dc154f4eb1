//! `tcptune emu exec` and `tcptune emu status`: use and look at running topologies.

use super::{dir_line, emu_fail, PathJson, EMU_SCHEMA_VERSION};
use crate::{exit, out};
use anyhow::anyhow;
use serde::Serialize;
use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;
use tcptune_core::format_duration;
use tcptune_emu::state::{self, OwnerKind, TopologyRecord};
use tcptune_emu::{EmuStats, Mode, Side};
use tcptune_sys::process::{self, signals};

#[derive(clap::Args, Debug)]
pub(super) struct ExecOpts {
    /// Topology name.
    name: String,
    /// Side: a (198.18.0.1) or b (198.19.0.1).
    side: Side,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    cmd: Vec<OsString>,
}

#[derive(clap::Args, Debug)]
pub(super) struct StatusOpts {
    /// Only this topology.
    name: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

pub(super) fn exec(o: ExecOpts) -> anyhow::Result<ExitCode> {
    let record = state::load(&o.name).map_err(emu_fail)?;
    if !record.owner_alive() {
        return Err(exit::fail(
            exit::FAILURE,
            anyhow!(
                "topology '{}' is stale (its owner, pid {}, is gone); 'tcptune emu down {}' removes it",
                o.name,
                record.owner_pid,
                o.name
            ),
        ));
    }
    let (prog, args) = o
        .cmd
        .split_first()
        .ok_or_else(|| exit::fail(exit::USAGE, anyhow!("no command given after --")))?;
    let mut cmd = record.command(o.side, prog).map_err(emu_fail)?;
    cmd.args(args);
    let what = format!("{} on side {}", prog.to_string_lossy(), o.side);
    let mut child = process::spawn(&mut cmd, what)?;
    // Like system(3): the child handles Ctrl-C; we wait for it and pass its status on.
    signals::ignore_interactive_signals()?;
    let status = child.wait()?;
    Ok(ExitCode::from(process::exit_code(status)))
}

/// One topology in `emu status --json`.
#[derive(Serialize)]
struct TopologyStatus {
    name: String,
    owner_kind: OwnerKind,
    owner_pid: u32,
    /// "root" or "rootless".
    mode: Mode,
    /// false: the owner died; the next up/run/down removes it.
    alive: bool,
    netns: [String; 2],
    addrs: [String; 2],
    path: PathJson,
    path_text: String,
    sysctls: Vec<(String, String)>,
    created_unix_ms: u64,
    stats: Option<EmuStats>,
}

/// `emu status --json`.
#[derive(Serialize)]
struct StatusReport {
    schema_version: u32,
    topologies: Vec<TopologyStatus>,
}

fn topology_status(r: TopologyRecord) -> TopologyStatus {
    let alive = r.owner_alive();
    TopologyStatus {
        stats: if alive { r.stats() } else { None },
        path_text: r.path.describe(),
        mode: r.mode(),
        addrs: [r.addrs[0].to_string(), r.addrs[1].to_string()],
        alive,
        name: r.name,
        owner_kind: r.owner_kind,
        owner_pid: r.owner_pid,
        netns: r.netns,
        path: PathJson::from(&r.path),
        sysctls: r.sysctls,
        created_unix_ms: r.created_unix_ms,
    }
}

pub(super) fn status(o: StatusOpts) -> anyhow::Result<ExitCode> {
    let records: Vec<TopologyRecord> = match &o.name {
        Some(n) => vec![state::load(n).map_err(emu_fail)?],
        None => state::list().into_iter().flatten().collect(),
    };
    let report = StatusReport {
        schema_version: EMU_SCHEMA_VERSION,
        topologies: records.into_iter().map(topology_status).collect(),
    };
    if o.json {
        out::json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    if report.topologies.is_empty() {
        out::line("no emulated topologies");
        return Ok(ExitCode::SUCCESS);
    }
    for t in &report.topologies {
        let kind = match t.owner_kind {
            OwnerKind::Daemon => "emu up",
            OwnerKind::Run => "emu run",
            OwnerKind::Library => "library",
        };
        let state = if t.alive {
            format!("{kind}, pid {}, {}", t.owner_pid, t.mode)
        } else {
            format!("STALE: owner pid {} is gone", t.owner_pid)
        };
        out::line(&format!("{} ({state})", t.name));
        match t.mode {
            Mode::Root => out::line(&format!(
                "  a {} netns {}   b {} netns {}",
                t.addrs[0], t.netns[0], t.addrs[1], t.netns[1]
            )),
            Mode::Rootless => out::line(&format!(
                "  a {}   b {}   (rootless: enter with tcptune emu exec {} a|b -- CMD)",
                t.addrs[0], t.addrs[1], t.name
            )),
        }
        out::line(&format!("  path: {}", t.path_text));
        for (k, v) in &t.sysctls {
            out::line(&format!("  sysctl {k}={v}"));
        }
        match &t.stats {
            Some(s) => {
                out::line(&format!(
                    "  up {}",
                    format_duration(Duration::from_secs_f64(s.uptime_s.max(0.0)))
                ));
                out::line(&format!("  {}", dir_line("a->b", &s.a_to_b)));
                out::line(&format!("  {}", dir_line("b->a", &s.b_to_a)));
            }
            None if t.alive => out::line("  (no counters yet)"),
            None => {}
        }
    }
    Ok(ExitCode::SUCCESS)
}
