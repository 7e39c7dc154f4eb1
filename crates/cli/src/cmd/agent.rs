//! `tcptune agent`: tune the sockets of unmodified programs per destination, from the path
//! database, with the sock_ops program of `tcptune_agent` attached to a cgroup v2.
//!
//! `agent run` attaches to a service's cgroup (`--cgroup`) or the whole host (`--host-wide`)
//! until SIGTERM or Ctrl-C; `agent exec -- CMD` runs CMD in a fresh cgroup of its own under
//! the agent and exits with CMD's status. Both hold the BPF link themselves: it detaches when
//! the agent exits, even on `kill -9`.

use crate::cmd::agent_limits::{self, Raised};
use crate::{exit, out, signals};
use anyhow::anyhow;
use serde::Serialize;
use std::collections::HashMap;
use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tcptune_agent::advice::{advice_line, AdviceLog};
use tcptune_agent::cgroup::{cgroup2_mount, check_cgroup2_dir, sweep_stale_children, ChildCgroup};
use tcptune_agent::limits::{raise_plan, unbounded};
use tcptune_agent::loader::Loaded;
use tcptune_agent::metrics::{AgentMetrics, DEFAULT_MAX_GROUPS};
use tcptune_agent::policy::{
    human_bytes, listen_offer, policies, prefix_policies, unconnected_needs, HostLimits,
    ListenOffer, PolicyOptions, Settings,
};
use tcptune_agent::record::{self, ConnRecord, Event, Kind};
use tcptune_agent::{caps, maps, stale, Mode};
use tcptune_core::pathdb::{PathDbPolicy, RecordBounds};
use tcptune_doctor::sizing::human_rate;
use tcptune_metrics::{Exporter, ExporterConfig, Registry};
use tcptune_pathdb::{PathStore, Source};
use tcptune_sys::os::unix_now;
use tcptune_sys::process;

/// Version of each JSON line of `agent --json`.
const AGENT_SCHEMA_VERSION: u32 = 1;
/// How often the policy map is refilled from the path database.
const REFRESH_EVERY: Duration = Duration::from_secs(30);
/// The name of `agent exec`'s cgroups: `<tag>-<pid>-<n>` under the cgroup2 mount.
const EXEC_CGROUP_TAG: &str = "tcptune-agent-exec";
/// The longest `agent exec` keeps reading records after CMD exits: it stops as soon as every
/// connection CMD made has reported its close (about one round trip after the last one was
/// closed: the FIN exchange), or after this if a peer never closes its side.
const EXEC_LINGER: Duration = Duration::from_secs(1);

/// Options of `tcptune agent`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = "\
The agent loads an eBPF sock_ops program and attaches it to a cgroup v2. For each new TCP
connection of the processes in that cgroup whose destination has a fresh entry in the path
database, and whose handshake RTT falls inside that entry's RTT bucket (a rerouted path is
another path), it sets: a send buffer sized from the path's rate and RTT (within
net.core.wmem_max, and only when that exceeds what autotuning reaches), a receive buffer on
accepted connections (the same rule), pacing at the path's rate divided by the connections
that share it (those that carry data or just opened) and a larger initial window (both only for paths measured with a full pipe), and
--congestion if given. A listener opened under the agent (enforce) offers its known peers a
receive window from the handshake on (half the BDP, within what SO_RCVBUF gives a listener
under net.core.rmem_max); a peer without an entry gets the 64 KiB Linux offered before
6.10. The listener keeps its larger buffer until it closes. What an application set itself
wins: its own pacing (SO_MAX_PACING_RATE, before the connection or over the agent's cap; the
agent then sets no larger initial window either, and tcptune's own engine, which paces its
streams on a known path, keeps its pacing) and its congestion control are left alone, and so
are buffers it fixed, unless
--override-app-buffers: then an application's SO_SNDBUF/SO_RCVBUF request below what the path
needs (within what autotuning reaches when the destination is not known yet) is raised to
that need and logged with the process and destination. Unknown
destinations are only observed. At each close the connection becomes a measurement in the
path database (a lower bound, source 'agent'), so `tcptune paths` shows what unmodified
programs achieved.

Needs root, or CAP_BPF and CAP_NET_ADMIN, and a kernel with BTF. The program detaches when
the agent exits (even on kill -9); tuned sockets keep what was set. No sysctl is changed
unless --raise-limits: then net.core.wmem_max/rmem_max are raised to what the known paths
need and restored on exit (after a crash, by the next agent, from the journal).

Examples:
  tcptune agent run --cgroup system.slice/gridftp.service
  tcptune agent run --host-wide --mode advise
  tcptune agent exec -- iperf3 -c 10.0.0.2 -n 1G
  tcptune agent exec --json -- curl -O http://10.0.0.2/big.iso > records.jsonl
  tcptune agent run --cgroup system.slice/backup.service --metrics 127.0.0.1:9311

Exit status: run: 0 once stopped by SIGTERM or Ctrl-C; exec: CMD's status; 5 without the
capabilities or the BPF program; 1 other failures.")]
pub(crate) struct Opts {
    #[command(subcommand)]
    command: AgentCommand,
}

#[derive(clap::Subcommand, Debug)]
enum AgentCommand {
    /// Attach to a cgroup (or the whole host) until SIGTERM or Ctrl-C.
    Run(RunOpts),
    /// Run CMD in a fresh cgroup under the agent; exit with CMD's status.
    Exec(ExecOpts),
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum ModeArg {
    /// Record every connection; set nothing.
    Observe,
    /// Log what would be set (each distinct advice once per destination per day); set nothing.
    Advise,
    /// Set what the path database says.
    Enforce,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Mode {
        match m {
            ModeArg::Observe => Mode::Observe,
            ModeArg::Advise => Mode::Advise,
            ModeArg::Enforce => Mode::Enforce,
        }
    }
}

#[derive(clap::Args, Debug)]
struct CommonOpts {
    /// What to do with known destinations.
    #[arg(long, value_enum, default_value = "enforce")]
    mode: ModeArg,
    /// The path database (default: $TCPTUNE_PATH_DB, else ~/.cache/tcptune/paths.sqlite).
    #[arg(long, value_name = "FILE")]
    path_db: Option<PathBuf>,
    /// Also raise buffers an application fixed below its path's need: its SO_SNDBUF and
    /// SO_RCVBUF requests below the need are raised to it (an application that reads its
    /// buffer back sees at least what it asked for), each logged with the process and
    /// destination.
    #[arg(long)]
    override_app_buffers: bool,
    /// Raise net.core.wmem_max and net.core.rmem_max so that the known paths' buffers fit
    /// (at most 256 MiB); restored when the agent exits, or by the next agent after a crash
    /// (journal: $TCPTUNE_AGENT_JOURNAL, else /run/tcptune/agent-limits.json).
    #[arg(long)]
    raise_limits: bool,
    /// A congestion control to set on tuned connections (one the kernel has loaded: no
    /// module is loaded for it).
    #[arg(long, value_name = "NAME")]
    congestion: Option<String>,
    /// Stream one JSON object per connection (and advice) on stdout, then a summary.
    #[arg(long)]
    json: bool,
    /// Serve Prometheus metrics on ADDR (e.g. 127.0.0.1:9311) at /metrics: connections by
    /// destination group and outcome, and their bytes (the first 256 groups; later ones
    /// are summed up as `other`).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
}

#[derive(clap::Args, Debug)]
struct RunOpts {
    #[command(flatten)]
    common: CommonOpts,
    /// The cgroup v2 to attach to: a path, or one relative to the cgroup2 mount
    /// (system.slice/gridftp.service).
    #[arg(long, value_name = "PATH", required_unless_present = "host_wide")]
    cgroup: Option<PathBuf>,
    /// Attach to the root cgroup: every process of the host.
    #[arg(long, conflicts_with = "cgroup")]
    host_wide: bool,
}

#[derive(clap::Args, Debug)]
struct ExecOpts {
    #[command(flatten)]
    common: CommonOpts,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    cmd: Vec<OsString>,
}

/// One line of `agent --json`.
#[derive(Serialize)]
struct RecordLine<'a> {
    schema_version: u32,
    #[serde(flatten)]
    record: &'a ConnRecord,
    /// Recorded in the path database as a lower bound.
    recorded: bool,
}

/// An `override` line of `agent --json`.
#[derive(Serialize)]
struct OverrideLine<'a> {
    schema_version: u32,
    #[serde(flatten)]
    record: &'a record::OverrideRecord,
}

/// The last line of `agent --json`.
#[derive(Serialize)]
struct SummaryLine {
    schema_version: u32,
    kind: &'static str,
    mode: Mode,
    cgroup: String,
    sockets_tuned: u64,
    sockets_observed: u64,
    sockets_advised: u64,
    records_dropped: u64,
    /// Connections still open (or closing) when the program was detached: their close, and
    /// so their measurement, was not seen.
    sockets_unclosed: u64,
    /// Listeners opened under the program that offered the known peers' receive window.
    listeners_raised: u64,
    measurements_recorded: u64,
    app_requests_overridden: u64,
}

/// Run `tcptune agent`.
pub(crate) fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    match opts.command {
        AgentCommand::Run(o) => run_attached(o),
        AgentCommand::Exec(o) => exec(o),
    }
}

fn env_fail(e: impl std::fmt::Display) -> anyhow::Error {
    exit::fail(exit::ENVIRONMENT, anyhow!("{e}"))
}

/// The agent between load and detach: the program, the database, and what it learned.
struct Agent {
    loaded: Loaded,
    mode: Mode,
    json: bool,
    cgroup: PathBuf,
    store: Option<PathStore>,
    db_policy: PathDbPolicy,
    limits: HostLimits,
    options: PolicyOptions,
    settings: HashMap<IpAddr, Settings>,
    /// Operator prefixes (`paths add`), for advice lines.
    prefixes: Vec<((IpAddr, u8), Settings)>,
    override_app_buffers: bool,
    /// What listeners opened from now on offer (enforce mode).
    listen: ListenOffer,
    /// `--raise-limits`: what was raised (restored on drop).
    raised: Option<Raised>,
    advice: AdviceLog,
    refreshed: Instant,
    recorded: u64,
    overridden: u64,
    bad_records: u64,
    /// `--metrics`: the families, and the exporter serving them (stops when dropped).
    metrics: Option<(AgentMetrics, Exporter)>,
}

impl Agent {
    /// Check the capabilities, load the program, sweep stale programs from `cgroup`, fill
    /// the maps. Attaching is the caller's next step.
    fn prepare(common: &CommonOpts, cgroup: &Path) -> anyhow::Result<Agent> {
        caps::check().map_err(env_fail)?;
        agent_limits::recover(&agent_limits::journal_path(), common.raise_limits)?;
        let loaded = Loaded::load().map_err(env_fail)?;
        match stale::detach_stale(cgroup) {
            Ok(ids) if !ids.is_empty() => eprintln!(
                "tcptune: detached {} stale program(s) of a dead agent from {} (ids {ids:?})",
                ids.len(),
                cgroup.display()
            ),
            Ok(_) => {}
            Err(e) => eprintln!("tcptune: warning: looking for stale programs: {e}"),
        }
        let path = common
            .path_db
            .clone()
            .or_else(tcptune_pathdb::default_location)
            .ok_or_else(|| {
                exit::fail(
                    exit::USAGE,
                    anyhow!(
                        "no path database location: set HOME or TCPTUNE_PATH_DB, or pass --path-db"
                    ),
                )
            })?;
        let mut store = PathStore::open(&path).map_err(|e| exit::fail(exit::FAILURE, e))?;
        for w in store.take_warnings() {
            eprintln!("tcptune: warning: {w}");
        }
        let limits = HostLimits::read().map_err(|e| anyhow!("reading the socket limits: {e}"))?;
        let metrics = match &common.metrics {
            Some(addr) => Some(start_metrics(addr)?),
            None => None,
        };
        let mode: Mode = common.mode.into();
        let mut agent = Agent {
            loaded,
            mode,
            json: common.json,
            cgroup: cgroup.to_path_buf(),
            store: Some(store),
            db_policy: PathDbPolicy::default(),
            limits,
            options: PolicyOptions {
                congestion: common.congestion.clone(),
            },
            settings: HashMap::new(),
            prefixes: Vec::new(),
            override_app_buffers: common.override_app_buffers,
            listen: ListenOffer::default(),
            raised: None,
            advice: AdviceLog::new(),
            refreshed: Instant::now(),
            recorded: 0,
            overridden: 0,
            bad_records: 0,
            metrics,
        };
        agent.refresh()?;
        if common.raise_limits {
            agent.raise_limits()?;
        }
        Ok(agent)
    }

    /// `--raise-limits`: raise the maxima the known paths need, then recompute the
    /// policies under the new limits.
    fn raise_limits(&mut self) -> anyhow::Result<()> {
        let entries = self.entries()?;
        let unbounded = unbounded(&self.limits);
        let mut all: Vec<Settings> = policies(
            &entries,
            unix_now(),
            self.db_policy.fresh_for,
            &unbounded,
            &self.options,
        )
        .into_iter()
        .map(|(_, s)| s)
        .collect();
        all.extend(
            prefix_policies(&entries, &unbounded, &self.options)
                .into_iter()
                .map(|(_, s)| s),
        );
        let plan = raise_plan(&all, &self.limits);
        if plan.is_empty() {
            eprintln!("tcptune: --raise-limits: the host's limits already fit every known path");
            return Ok(());
        }
        self.raised = agent_limits::raise(&agent_limits::journal_path(), &plan)?;
        self.limits = HostLimits::read().map_err(|e| anyhow!("reading the socket limits: {e}"))?;
        self.refresh()
    }

    fn entries(&mut self) -> anyhow::Result<Vec<tcptune_core::pathdb::PathEntry>> {
        let entries = match self.store.as_mut() {
            Some(s) => s.entries()?,
            None => Vec::new(),
        };
        Ok(entries.into_iter().map(|e| e.entry).collect())
    }

    /// Refill the policy map from the path database.
    fn refresh(&mut self) -> anyhow::Result<()> {
        let entries = self.entries()?;
        let all = policies(
            &entries,
            unix_now(),
            self.db_policy.fresh_for,
            &self.limits,
            &self.options,
        );
        let values: Vec<_> = all.iter().map(|(ip, s)| (*ip, s.to_value())).collect();
        self.loaded.replace_policies(&values)?;
        let prefixes = prefix_policies(&entries, &self.limits, &self.options);
        let prefix_values: Vec<_> = prefixes.iter().map(|(p, s)| (*p, s.to_value())).collect();
        self.loaded.replace_prefixes(&prefix_values)?;
        let settings: Vec<Settings> = all
            .iter()
            .map(|(_, s)| s.clone())
            .chain(prefixes.iter().map(|(_, s)| s.clone()))
            .collect();
        let needs = self
            .override_app_buffers
            .then(|| unconnected_needs(&settings, &self.limits));
        // Listeners are raised only to enforce: advise and observe leave them alone.
        let listen = if self.mode == Mode::Enforce {
            listen_offer(&settings)
        } else {
            ListenOffer::default()
        };
        self.loaded.set_config(self.mode, needs, listen)?;
        self.listen = listen;
        self.settings = all.into_iter().collect();
        self.prefixes = prefixes;
        self.refreshed = Instant::now();
        Ok(())
    }

    /// Read what the ring buffer holds: record, print, advise.
    fn pump(&mut self, wait: Duration) -> anyhow::Result<()> {
        self.pump_or(wait, None)
    }

    /// [`pump`](Self::pump), waiting at most until `also` is readable (a child's pidfd).
    fn pump_or(
        &mut self,
        wait: Duration,
        also: Option<std::os::fd::BorrowedFd<'_>>,
    ) -> anyhow::Result<()> {
        self.loaded.wait_readable_or(wait, also)?;
        for raw in self.loaded.drain(4096) {
            let r = match record::parse_event(&raw) {
                Ok(Event::Conn(r)) => r,
                Ok(Event::Override(o)) => {
                    self.overridden += 1;
                    eprintln!("tcptune: {}", o.line());
                    if self.json {
                        out::line(&serde_json::to_string(&OverrideLine {
                            schema_version: AGENT_SCHEMA_VERSION,
                            record: &o,
                        })?);
                    }
                    continue;
                }
                Err(e) => {
                    self.bad_records += 1;
                    if self.bad_records == 1 {
                        eprintln!("tcptune: warning: skipping {e}");
                    }
                    continue;
                }
            };
            self.handle(&r)?;
        }
        if self.refreshed.elapsed() >= REFRESH_EVERY {
            if let Err(e) = self.refresh() {
                eprintln!("tcptune: warning: refreshing the policies: {e:#}");
            }
        }
        Ok(())
    }

    fn handle(&mut self, r: &ConnRecord) -> anyhow::Result<()> {
        if let Some((m, _)) = &self.metrics {
            m.observe(r);
        }
        let mut recorded = false;
        if let (Some(m), Some(store)) = (record::to_measurement(r, unix_now()), self.store.as_mut())
        {
            match store.record_bounded(
                &m.peer,
                m.direction,
                &m.measurement,
                &Source::Agent,
                &self.db_policy,
                &RecordBounds::default(),
            ) {
                Ok(_) => {
                    recorded = true;
                    self.recorded += 1;
                }
                Err(e) => eprintln!("tcptune: warning: recording {}: {e}", m.peer),
            }
        }
        if r.kind == Kind::Advice {
            if let Some(s) = self
                .settings
                .get(&r.peer)
                .or_else(|| longest_prefix(&self.prefixes, r.peer))
            {
                if self.advice.should_log(r.peer, r.policy_id, unix_now()) {
                    eprintln!("tcptune: {}", advice_line(r, s));
                }
            }
        }
        if self.json {
            out::line(&serde_json::to_string(&RecordLine {
                schema_version: AGENT_SCHEMA_VERSION,
                record: r,
                recorded,
            })?);
        }
        Ok(())
    }

    /// Connections established under the program and not closed yet: (seen, not closed), or
    /// `None` if the counters cannot be read.
    fn unclosed(&self) -> Option<u64> {
        let stat = |i| self.loaded.stat(i).ok();
        let seen = stat(maps::STAT_TUNED)? + stat(maps::STAT_OBSERVED)? + stat(maps::STAT_ADVISED)?;
        Some(seen.saturating_sub(stat(maps::STAT_CLOSED)?))
    }

    /// Has every connection established under the program reported its close?
    fn all_closed(&self) -> bool {
        self.unclosed() == Some(0)
    }

    /// Detach (drop the program) and say what it did.
    fn finish(self) -> anyhow::Result<()> {
        let stat = |i| self.loaded.stat(i).unwrap_or(0);
        let unclosed = self.unclosed().unwrap_or(0);
        let summary = SummaryLine {
            schema_version: AGENT_SCHEMA_VERSION,
            kind: "summary",
            mode: self.mode,
            cgroup: self.cgroup.display().to_string(),
            sockets_tuned: stat(maps::STAT_TUNED),
            sockets_observed: stat(maps::STAT_OBSERVED),
            sockets_advised: stat(maps::STAT_ADVISED),
            records_dropped: stat(maps::STAT_DROPPED),
            sockets_unclosed: unclosed,
            listeners_raised: stat(maps::STAT_LISTENERS),
            measurements_recorded: self.recorded,
            app_requests_overridden: self.overridden,
        };
        drop(self.loaded);
        if let Some(r) = self.raised {
            r.restore();
        }
        eprintln!(
            "tcptune: agent detached from {}: {} socket(s) tuned, {} observed, {} advised, {} application request(s) overridden; {} measurement(s) recorded{}{}{}",
            summary.cgroup,
            summary.sockets_tuned,
            summary.sockets_observed,
            summary.sockets_advised,
            summary.app_requests_overridden,
            summary.measurements_recorded,
            if summary.listeners_raised > 0 {
                format!(
                    "; {} listener(s) raised (they keep their larger buffer until closed)",
                    summary.listeners_raised
                )
            } else {
                String::new()
            },
            if summary.records_dropped > 0 {
                format!("; {} record(s) lost (ring buffer full)", summary.records_dropped)
            } else {
                String::new()
            },
            if summary.sockets_unclosed > 0 {
                format!(
                    "; {} connection(s) still open, not measured",
                    summary.sockets_unclosed
                )
            } else {
                String::new()
            }
        );
        if self.json {
            out::line(&serde_json::to_string(&summary)?);
        }
        Ok(())
    }

    fn describe(&self) -> String {
        let known = self.settings.len();
        let fastest = self
            .settings
            .values()
            .map(|s| s.rate_bps)
            .max()
            .map_or(String::new(), |r| format!(", fastest {}", human_rate(r)));
        let listen = if self.listen.window_bytes > 0 {
            format!(
                "; listeners opened from now on offer the known peers a {} receive window from the handshake on, others {}",
                human_bytes(u64::from(self.listen.window_bytes)),
                human_bytes(
                    u64::from(self.listen.stranger_segments) * tcptune_agent::policy::MSS
                )
            )
        } else {
            String::new()
        };
        format!(
            "mode {}, {known} known destination(s){fastest}{listen}",
            self.mode.as_str()
        )
    }
}

/// Start the exporter of `--metrics`; its line on stderr says where it listens.
fn start_metrics(addr: &str) -> anyhow::Result<(AgentMetrics, Exporter)> {
    let metrics = AgentMetrics::new(DEFAULT_MAX_GROUPS);
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let exporter = Exporter::start(addr, Arc::new(registry), ExporterConfig::default())
        .map_err(|e| exit::fail(exit::ENVIRONMENT, e))?;
    eprintln!(
        "tcptune agent: serving metrics on http://{}/metrics",
        exporter.local_addr()
    );
    Ok((metrics, exporter))
}

/// The settings of the longest operator prefix holding `ip`.
fn longest_prefix(prefixes: &[((IpAddr, u8), Settings)], ip: IpAddr) -> Option<&Settings> {
    let holds = |p: IpAddr, len: u8| match (p, ip) {
        (IpAddr::V4(p), IpAddr::V4(a)) => {
            len == 0 || (u32::from(p) ^ u32::from(a)) >> (32 - u32::from(len.min(32))) == 0
        }
        (IpAddr::V6(p), IpAddr::V6(a)) => {
            len == 0 || (u128::from(p) ^ u128::from(a)) >> (128 - u32::from(len.min(128))) == 0
        }
        _ => false,
    };
    prefixes
        .iter()
        .filter(|((p, len), _)| holds(*p, *len))
        .max_by_key(|((_, len), _)| *len)
        .map(|(_, s)| s)
}

/// The cgroup `--cgroup` names: absolute, or relative to the cgroup2 mount.
fn resolve_cgroup(given: &Path, mount: &Path) -> PathBuf {
    if given.is_absolute() {
        given.to_path_buf()
    } else {
        mount.join(given)
    }
}

fn run_attached(o: RunOpts) -> anyhow::Result<ExitCode> {
    let mount = cgroup2_mount().map_err(env_fail)?;
    let cgroup = match (&o.cgroup, o.host_wide) {
        (Some(c), _) => resolve_cgroup(c, &mount),
        (None, true) => mount.clone(),
        (None, false) => {
            return Err(exit::fail(
                exit::USAGE,
                anyhow!("give --cgroup PATH or --host-wide"),
            ))
        }
    };
    check_cgroup2_dir(&cgroup).map_err(|e| exit::fail(exit::USAGE, anyhow!("{e}")))?;
    let mut agent = Agent::prepare(&o.common, &cgroup)?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    signals::on_stop(move || flag.store(true, Ordering::Relaxed))?;
    agent
        .loaded
        .attach(&cgroup, o.common.override_app_buffers)?;
    eprintln!(
        "tcptune: agent attached to {} ({}); SIGTERM or Ctrl-C detaches",
        cgroup.display(),
        agent.describe()
    );
    while !stop.load(Ordering::Relaxed) {
        agent.pump(Duration::from_millis(200))?;
    }
    agent.pump(Duration::ZERO)?;
    agent.finish()?;
    Ok(ExitCode::from(exit::OK))
}

fn exec(o: ExecOpts) -> anyhow::Result<ExitCode> {
    let mount = cgroup2_mount().map_err(env_fail)?;
    // The capabilities first: creating the cgroup would fail less clearly.
    caps::check().map_err(env_fail)?;
    for gone in sweep_stale_children(&mount, EXEC_CGROUP_TAG) {
        eprintln!("tcptune: removed {}, left by a dead agent", gone.display());
    }
    let cgroup = ChildCgroup::create(&mount, EXEC_CGROUP_TAG).map_err(env_fail)?;
    let mut agent = Agent::prepare(&o.common, cgroup.path())?;
    agent
        .loaded
        .attach(cgroup.path(), o.common.override_app_buffers)?;
    let (prog, args) = o
        .cmd
        .split_first()
        .ok_or_else(|| exit::fail(exit::USAGE, anyhow!("no command given after --")))?;
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args);
    cgroup.add_to(&mut cmd).map_err(env_fail)?;
    // Caught before CMD starts (CMD gets the default dispositions back at exec). Ctrl-C
    // reaches CMD too (it is in our process group); SIGTERM to the agent is passed
    // on to CMD. Either way we wait for CMD, then detach and remove its cgroup.
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    signals::on_stop(move || flag.store(true, Ordering::Relaxed))?;
    let mut child = process::spawn(&mut cmd, prog.to_string_lossy().into_owned())?;
    // CMD's exit wakes the loop at once (without a pidfd, within the 50 ms of a pump).
    let pidfd = child.pidfd();
    let mut forwarded = false;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if stop.load(Ordering::Relaxed) && !forwarded {
            forwarded = true;
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: kill(2) on our own child, not yet reaped.
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
            }
        }
        agent.pump_or(
            Duration::from_millis(50),
            pidfd.as_ref().map(std::os::fd::AsFd::as_fd),
        )?;
    };
    // Every connection CMD made reports its close; wait for those still closing.
    let until = Instant::now() + EXEC_LINGER;
    loop {
        let closed = agent.all_closed();
        agent.pump(Duration::ZERO)?;
        if closed || Instant::now() >= until {
            break;
        }
        agent.pump(Duration::from_millis(10))?;
    }
    agent.finish()?;
    drop(cgroup);
    Ok(ExitCode::from(process::exit_code(status)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advice_finds_the_longest_prefix() {
        use tcptune_agent::policy::parse_prefix;
        let s = |rate: u64| Settings {
            sndbuf_request: 0,
            rcvbuf_request: 0,
            pacing_bytes_per_s: rate,
            initial_window: 0,
            receive_window: 0,
            congestion: None,
            rtt_lo_us: 0,
            rtt_hi_us: 1,
            full_pipe: true,
            rate_bps: rate,
            need_snd: 0,
            need_rcv: 0,
            limits: Vec::new(),
        };
        let p = |t: &str| parse_prefix(t).expect("prefix");
        let all = vec![
            (p("10.0.0.0/8"), s(1)),
            (p("10.1.0.0/16"), s(2)),
            (p("::/0"), s(3)),
        ];
        let ip = |t: &str| t.parse::<IpAddr>().expect("ip");
        assert_eq!(
            longest_prefix(&all, ip("10.1.2.3")).map(|s| s.rate_bps),
            Some(2)
        );
        assert_eq!(
            longest_prefix(&all, ip("10.2.0.1")).map(|s| s.rate_bps),
            Some(1)
        );
        assert_eq!(
            longest_prefix(&all, ip("11.0.0.1")).map(|s| s.rate_bps),
            None
        );
        assert_eq!(
            longest_prefix(&all, ip("2001:db8::1")).map(|s| s.rate_bps),
            Some(3)
        );
    }

    #[test]
    fn a_relative_cgroup_is_under_the_cgroup2_mount() {
        let mount = Path::new("/sys/fs/cgroup/unified");
        assert_eq!(
            resolve_cgroup(Path::new("system.slice/gridftp.service"), mount),
            PathBuf::from("/sys/fs/cgroup/unified/system.slice/gridftp.service")
        );
        assert_eq!(
            resolve_cgroup(Path::new("/sys/fs/cgroup/unified/x"), mount),
            PathBuf::from("/sys/fs/cgroup/unified/x")
        );
    }
}
