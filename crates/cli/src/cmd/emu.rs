//! `tcptune emu`: emulate a WAN path between two network namespaces (run, up, exec, status,
//! down). The emulator is the `tcptune-emu` library; this module parses options, runs
//! commands in the namespaces, and for `up` starts itself again as a background daemon.

use crate::{exit, out};
use anyhow::{anyhow, Context};
use serde::Serialize;
use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;
use std::process::{Command, ExitCode, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tcptune_core::{format_duration, parse_duration, Bytes, Rate};
use tcptune_emu::config::parse_sysctl_arg;
use tcptune_emu::daemon::{self, DaemonSpec};
use tcptune_emu::process::{
    self, output, signals, Ended, ProcessError, ProcessId, Supervised, Waited,
};
use tcptune_emu::state::{self, OwnerKind, TopologyRecord};
use tcptune_emu::{
    capacity_warning, unique_name, DirStats, EmuError, EmuStats, PathConfig, QueueLimit, Side,
    Topology, TopologyConfig, UpOptions,
};

/// How the --server command's output lines are marked on stderr.
const SERVER_PREFIX: &str = "[server] ";
/// SIGTERM to SIGKILL for the --server command when CMD has ended.
const SERVER_GRACE: Duration = Duration::from_secs(1);
/// SIGTERM to SIGKILL for CMD when the run is interrupted.
const CMD_GRACE: Duration = Duration::from_secs(2);
/// SIGTERM to SIGKILL for an `emu up` daemon (it takes its path down in between).
const DAEMON_GRACE: Duration = Duration::from_secs(10);

/// Options of `tcptune emu`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = "\
Examples:
  tcptune emu run --rtt 100ms --rate 1gbit --server 'iperf3 -s -1' -- iperf3 -c 198.19.0.1 -J | jq .end
  tcptune emu run --rtt 50ms --rate 500mbit --loss 0.01% --server 'tcptune serve' \\
      -- sh -c 'tcptune send $TCPTUNE_PEER --json' > report.json
  tcptune emu run --rtt 20ms --json -- ping -c 5 198.19.0.1 | jq .stats.a_to_b.lateness
  sudo tcptune emu up wan --delay 25ms --rate 500mbit --queue 1bdp --loss 0.01%
  tcptune emu exec wan b -- iperf3 -s -D
  tcptune emu exec wan a -- sh -c 'iperf3 -c $TCPTUNE_PEER -t 10'
  tcptune emu status wan --json
  tcptune emu down wan

Side A (198.18.0.1) and side B (198.19.0.1) are network namespaces tt-NAME-a and tt-NAME-b
joined by a TUN device each; the emulator threads carry packets between them through the
path, the same in both directions. Commands get TCPTUNE_SELF and TCPTUNE_PEER (the other
side's address) in their environment; CMD runs without a shell, so use sh -c '...' to expand
them. Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), /dev/net/tun and iproute2. Exit status 5: not permitted, no /dev/net/tun, or name taken.

Output of emu run: stdout is CMD's stdout, untouched, so that it can be piped into a parser.
The --server command's stdout and stderr go to stderr, each line prefixed with '[server] ' (or
to the file --server-log names). emu's own messages and final counters go to stderr. With
--json, stdout carries exactly one JSON document instead, emu's report (CMD's exit code and the
final counters), written when CMD has ended; CMD's stdout is then sent to stderr so that the two
never mix. To keep CMD's stdout clean and also get the counters as JSON, use --stats-json FILE.
Children of emu run, emu exec and the lab get SIGKILL if their parent dies.")]
pub(crate) struct Opts {
    #[command(subcommand)]
    command: EmuCommand,
}

#[derive(clap::Subcommand, Debug)]
enum EmuCommand {
    /// Bring a path up, start --server on side B, run CMD on side A, tear everything down,
    /// and exit with CMD's exit status.
    Run(RunOpts),
    /// Bring a named path up in the background and return once packets flow.
    Up(UpOpts),
    /// Run a command inside side a or b of a running topology.
    Exec(ExecOpts),
    /// Show running topologies and their live counters.
    Status(StatusOpts),
    /// Take a topology started by `emu up` down.
    Down(DownOpts),
    /// The background emulator of `emu up` (internal).
    #[command(name = "__daemon", hide = true)]
    Daemon(DaemonOpts),
}

/// The emulated path (the same in both directions).
#[derive(clap::Args, Debug, Clone)]
struct PathOpts {
    /// One-way propagation delay, e.g. 25ms, 0.5ms (sub-millisecond resolution, up to 10s).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", conflicts_with = "rtt")]
    delay: Option<Duration>,
    /// Round-trip propagation delay (twice the one-way delay), e.g. 50ms.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    rtt: Option<Duration>,
    /// Bottleneck rate, e.g. 100mbit, 1gbit (decimal units; unlimited if omitted).
    #[arg(long, value_name = "RATE")]
    rate: Option<Rate>,
    /// Drop-tail queue before the bottleneck: 1bdp (rate x RTT, the default), 256kb, 1000pkt.
    #[arg(long, default_value = "1bdp", value_name = "LIMIT")]
    queue: QueueLimit,
    /// Random loss per packet: 0.1% or a fraction such as 0.001.
    #[arg(long, value_parser = parse_loss, value_name = "LOSS", default_value = "0")]
    loss: f64,
    /// Delay variation: each packet gets delay ± jitter (uniform); order is kept unless
    /// --reorder.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    jitter: Option<Duration>,
    /// Let jitter reorder packets.
    #[arg(long)]
    reorder: bool,
    /// Seed of the random loss and jitter (same seed, same losses).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// MTU of the emulated link.
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u32).range(576..=65535))]
    mtu: u32,
    /// Set a sysctl in both namespaces, e.g. net.ipv4.tcp_wmem='4096 16384 268435456'
    /// (repeatable; only per-namespace net.* sysctls: net.core.rmem_max/wmem_max are global
    /// and refused).
    #[arg(long = "sysctl", value_name = "KEY=VALUE", value_parser = parse_sysctl)]
    sysctls: Vec<(String, String)>,
    /// Do not pass GSO/TSO super-packets (one read and write per packet; for benchmarks).
    #[arg(long, hide = true)]
    no_offload: bool,
    /// Do not run the emulator threads at real-time priority (for benchmarks).
    #[arg(long, hide = true)]
    no_realtime: bool,
    /// Spin this long before a packet is due instead of sleeping (for benchmarks).
    #[arg(long, hide = true, value_parser = parse_duration, value_name = "DURATION")]
    spin: Option<Duration>,
}

fn parse_loss(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(n) => (n, 0.01),
        None => (t, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a loss rate (use 0.1% or 0.001)"))?;
    let v = v * scale;
    if !(0.0..=1.0).contains(&v) {
        return Err(format!("loss '{s}' is outside 0%..100%"));
    }
    Ok(v)
}

fn parse_sysctl(s: &str) -> Result<(String, String), String> {
    parse_sysctl_arg(s).map_err(|e| e.to_string())
}

impl PathOpts {
    fn path(&self) -> PathConfig {
        let delay = self.delay.or(self.rtt.map(|r| r / 2)).unwrap_or_default();
        PathConfig {
            delay,
            rate: self.rate,
            queue: self.queue,
            loss: self.loss,
            jitter: self.jitter.unwrap_or_default(),
            seed: self.seed,
            mtu: self.mtu,
            reorder: self.reorder,
        }
    }

    fn topology(&self, name: &str) -> anyhow::Result<TopologyConfig> {
        let cfg = TopologyConfig {
            name: name.to_string(),
            path: self.path(),
            sysctls: self.sysctls.clone(),
        };
        cfg.validate()
            .map_err(|e| exit::fail(exit::USAGE, anyhow!("{e}")))?;
        Ok(cfg)
    }

    fn up_options(&self, owner: OwnerKind) -> UpOptions {
        let default = UpOptions::default();
        UpOptions {
            offload: !self.no_offload,
            realtime: !self.no_realtime,
            spin: self.spin.unwrap_or(default.spin),
            owner,
            ..default
        }
    }
}

/// The exit code an emulator error deserves.
fn emu_exit_code(e: &EmuError) -> u8 {
    if e.is_environment() {
        exit::ENVIRONMENT
    } else if matches!(e, EmuError::Config(_)) {
        exit::USAGE
    } else {
        exit::FAILURE
    }
}

/// Attach the exit code an emulator error deserves.
fn emu_fail(e: EmuError) -> anyhow::Error {
    exit::fail(emu_exit_code(&e), e)
}

#[derive(clap::Args, Debug)]
struct RunOpts {
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
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    warmup: Option<Duration>,
    /// The command to run on side A, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    cmd: Vec<OsString>,
}

#[derive(clap::Args, Debug)]
struct UpOpts {
    /// Topology name: namespaces tt-NAME-a and tt-NAME-b.
    name: String,
    #[command(flatten)]
    path: PathOpts,
    /// Print what came up as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct ExecOpts {
    /// Topology name.
    name: String,
    /// Side: a (198.18.0.1) or b (198.19.0.1).
    side: Side,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    cmd: Vec<OsString>,
}

#[derive(clap::Args, Debug)]
struct StatusOpts {
    /// Only this topology.
    name: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct DownOpts {
    /// Topology name.
    name: String,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct DaemonOpts {
    /// The topology and options as JSON.
    #[arg(long)]
    spec: String,
}

/// Run `tcptune emu`.
pub(crate) fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    match opts.command {
        EmuCommand::Run(o) => run_cmd(o),
        EmuCommand::Up(o) => up(o),
        EmuCommand::Exec(o) => exec(o),
        EmuCommand::Status(o) => status(o),
        EmuCommand::Down(o) => down(o),
        EmuCommand::Daemon(o) => daemon(o),
    }
}

// ---- run ----

/// What `emu run --json` prints on stdout when CMD has ended.
#[derive(Serialize)]
struct RunReport<'a> {
    schema_version: u32,
    name: &'a str,
    path: &'a PathConfig,
    /// CMD's exit code (128 + N if a signal N ended it), which is also emu run's.
    exit_code: u8,
    /// The stop signal (SIGINT, SIGTERM, SIGHUP) that cut the run short.
    interrupted_by: Option<String>,
    /// Why the run failed before CMD could finish (the server exited first, ...).
    error: Option<String>,
    /// The emulator's final counters.
    stats: &'a EmuStats,
}

/// How CMD ended.
struct CmdEnd {
    code: u8,
    signal: Option<i32>,
}

fn run_cmd(o: RunOpts) -> anyhow::Result<ExitCode> {
    let name = o.name.clone().unwrap_or_else(|| unique_name("run"));
    let cfg = o.path.topology(&name)?;
    let up_opts = o.path.up_options(OwnerKind::Run);
    if let Some(w) = capacity_warning(&cfg.path, up_opts.offload) {
        eprintln!("tcptune emu: warning: {w}");
    }
    signals::catch_stop_signals()?;
    eprintln!("tcptune emu: bringing up {name}: {}", cfg.path.describe());
    let topo = Topology::up_with(&cfg, &up_opts).map_err(emu_fail)?;
    for n in topo.notes() {
        eprintln!("tcptune emu: warning: {n}");
    }
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
            schema_version: 1,
            name: &name,
            path: &cfg.path,
            exit_code: code,
            interrupted_by: signal.map(signals::signal_name),
            error,
            stats: &stats,
        })?;
    } else {
        eprintln!("tcptune emu: {}", dir_line("a->b", &stats.a_to_b));
        eprintln!("tcptune emu: {}", dir_line("b->a", &stats.b_to_a));
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

fn dir_line(label: &str, d: &DirStats) -> String {
    format!(
        "{label}: {} pkts {}, drops queue {} loss {}{}, queue peak {} / {} pkts, lateness p50 {:.0}us p99 {:.0}us max {:.0}us",
        d.packets_out,
        Bytes(d.bytes_out),
        d.drops.queue,
        d.drops.loss,
        if d.drops.malformed + d.drops.write_failed + d.drops.device > 0 {
            format!(
                " device {} malformed {} write-failed {}",
                d.drops.device, d.drops.malformed, d.drops.write_failed
            )
        } else {
            String::new()
        },
        Bytes(d.queue_peak_bytes),
        d.queue_peak_packets,
        d.lateness.p50_us,
        d.lateness.p99_us,
        d.lateness.max_us,
    )
}

// ---- up / daemon ----

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
    path: PathConfig,
    warnings: Vec<String>,
}

fn up(o: UpOpts) -> anyhow::Result<ExitCode> {
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
            cfg.path.describe()
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
            schema_version: 1,
            name: o.name.clone(),
            daemon_pid: d.pid,
            netns_a,
            netns_b,
            addr_a,
            addr_b,
            path: cfg.path.clone(),
            warnings,
        })?;
    } else {
        for w in &warnings {
            eprintln!("tcptune emu: warning: {w}");
        }
        out::line(&format!(
            "{} up: side a {addr_a} (netns {netns_a}), side b {addr_b} (netns {netns_b}), daemon pid {}",
            o.name, d.pid
        ));
    }
    Ok(ExitCode::SUCCESS)
}

fn daemon(o: DaemonOpts) -> anyhow::Result<ExitCode> {
    let spec: DaemonSpec = serde_json::from_str(&o.spec).context("parsing the daemon spec")?;
    Ok(ExitCode::from(daemon::serve(&spec, emu_exit_code)))
}

// ---- exec ----

fn exec(o: ExecOpts) -> anyhow::Result<ExitCode> {
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

// ---- status ----

/// One topology in `emu status --json`.
#[derive(Serialize)]
struct TopologyStatus {
    name: String,
    owner_kind: OwnerKind,
    owner_pid: u32,
    /// false: the owner died; the next up/run/down removes it.
    alive: bool,
    netns: [String; 2],
    addrs: [String; 2],
    path: PathConfig,
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
        addrs: [r.addrs[0].to_string(), r.addrs[1].to_string()],
        alive,
        name: r.name,
        owner_kind: r.owner_kind,
        owner_pid: r.owner_pid,
        netns: r.netns,
        path: r.path,
        sysctls: r.sysctls,
        created_unix_ms: r.created_unix_ms,
    }
}

fn status(o: StatusOpts) -> anyhow::Result<ExitCode> {
    let records: Vec<TopologyRecord> = match &o.name {
        Some(n) => vec![state::load(n).map_err(emu_fail)?],
        None => state::list().into_iter().flatten().collect(),
    };
    let report = StatusReport {
        schema_version: 1,
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
            format!("{kind}, pid {}", t.owner_pid)
        } else {
            format!("STALE: owner pid {} is gone", t.owner_pid)
        };
        out::line(&format!("{} ({state})", t.name));
        out::line(&format!(
            "  a {} netns {}   b {} netns {}",
            t.addrs[0], t.netns[0], t.addrs[1], t.netns[1]
        ));
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

// ---- down ----

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

fn down(o: DownOpts) -> anyhow::Result<ExitCode> {
    let report = |outcome, last_stats| -> anyhow::Result<ExitCode> {
        if o.json {
            out::json(&DownReport {
                schema_version: 1,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_accepts_percent_and_fraction() {
        assert_eq!(parse_loss("0.1%"), Ok(0.001));
        assert_eq!(parse_loss("0.001"), Ok(0.001));
        assert_eq!(parse_loss("100%"), Ok(1.0));
        assert!(parse_loss("101%").is_err());
        assert!(parse_loss("2").is_err());
        assert!(parse_loss("x").is_err());
    }
}
