//! `tcptune emu`: emulate a WAN path between two network namespaces (run, up, exec, status,
//! down). The emulator is the `tcptune-emu` library; this module parses options, runs
//! commands in the namespaces, and for `up` starts itself again as a background daemon.

use crate::{exit, out};
use anyhow::{anyhow, Context};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};
use tcptune_core::{format_duration, parse_duration, Bytes, Rate};
use tcptune_emu::config::parse_sysctl_arg;
use tcptune_emu::state::{self, OwnerKind, TopologyRecord};
use tcptune_emu::{
    capacity_warning, unique_name, DirStats, EmuError, EmuStats, PathConfig, QueueLimit, Side,
    Topology, TopologyConfig, UpOptions,
};

/// Options of `tcptune emu`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = "\
Examples:
  tcptune emu run --rtt 100ms --rate 1gbit --server 'iperf3 -s' -- iperf3 -c 198.19.0.1
  tcptune emu run --rtt 50ms --rate 500mbit --loss 0.01% --server 'tcptune serve' \\
      -- sh -c 'tcptune send $TCPTUNE_PEER --json'
  sudo tcptune emu up wan --delay 25ms --rate 500mbit --queue 1bdp --loss 0.01%
  tcptune emu exec wan b -- iperf3 -s -D
  tcptune emu exec wan a -- sh -c 'iperf3 -c $TCPTUNE_PEER -t 10'
  tcptune emu status wan --json
  tcptune emu down wan

Side A (198.18.0.1) and side B (198.19.0.1) are network namespaces tt-NAME-a and tt-NAME-b
joined by a TUN device each; the emulator threads carry packets between them through the
path, the same in both directions. Commands get TCPTUNE_SELF and TCPTUNE_PEER (the other
side's address) in their environment; CMD runs without a shell, so use sh -c '...' to expand
them. Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), /dev/net/tun and iproute2. Exit status 5: not permitted, no /dev/net/tun, or name taken.")]
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

/// Attach the exit code an emulator error deserves.
fn emu_fail(e: EmuError) -> anyhow::Error {
    let code = if e.is_environment() {
        exit::ENVIRONMENT
    } else if matches!(e, EmuError::Config(_)) {
        exit::USAGE
    } else {
        exit::FAILURE
    };
    exit::fail(code, e)
}

#[derive(clap::Args, Debug)]
struct RunOpts {
    #[command(flatten)]
    path: PathOpts,
    /// Command started (through `sh -c`) on side B before CMD; stopped when CMD ends.
    #[arg(long, value_name = "CMD")]
    server: Option<String>,
    /// Topology name (default: run-PID).
    #[arg(long)]
    name: Option<String>,
    /// Write the emulator's final counters as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<std::path::PathBuf>,
    /// Print the emulator's final counters (as JSON on stderr with --json).
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

/// What `emu up` hands to its daemon.
#[derive(Serialize, Deserialize)]
struct DaemonSpec {
    topology: TopologyConfig,
    offload: bool,
    realtime: bool,
    spin_ns: u64,
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

// ---- signals ----

/// The last SIGINT/SIGTERM/SIGHUP received (0: none).
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(sig, Ordering::SeqCst);
}

/// Catch SIGINT, SIGTERM and SIGHUP so that teardown runs (children started later get the
/// default dispositions back at exec).
fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installs an async-signal-safe handler (one atomic store).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

fn exit_code_of(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(1),
        _ => 1,
    }
}

fn terminate(child: &mut Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

// ---- run ----

fn run_cmd(o: RunOpts) -> anyhow::Result<ExitCode> {
    let name = o.name.clone().unwrap_or_else(|| unique_name("run"));
    let cfg = o.path.topology(&name)?;
    let up_opts = o.path.up_options(OwnerKind::Run);
    if let Some(w) = capacity_warning(&cfg.path, up_opts.offload) {
        eprintln!("tcptune emu: warning: {w}");
    }
    catch_signals();
    eprintln!("tcptune emu: bringing up {name}: {}", cfg.path.describe());
    let topo = Topology::up_with(&cfg, &up_opts).map_err(emu_fail)?;
    for n in topo.notes() {
        eprintln!("tcptune emu: warning: {n}");
    }
    let result = run_in_topology(&topo, &o);
    let stats = topo.down().map_err(emu_fail)?;
    if let Some(path) = &o.stats_json {
        let text = serde_json::to_string_pretty(&stats)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("writing the counters to {}", path.display()))?;
    }
    if o.json {
        eprintln!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        eprintln!("tcptune emu: {}", dir_line("a->b", &stats.a_to_b));
        eprintln!("tcptune emu: {}", dir_line("b->a", &stats.b_to_a));
    }
    let code = result?;
    Ok(ExitCode::from(code))
}

fn run_in_topology(topo: &Topology, o: &RunOpts) -> anyhow::Result<u8> {
    let mut server = match &o.server {
        Some(cmd) => {
            let child = topo
                .command(Side::B, "sh")
                .arg("-c")
                .arg(cmd)
                .stdin(Stdio::null())
                .spawn()
                .with_context(|| format!("starting the server '{cmd}' on side B"))?;
            Some(child)
        }
        None => None,
    };
    if let Some(s) = server.as_mut() {
        // Give the server up to 3 s to listen on a TCP port (a UDP server is simply given
        // the 3 s).
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline && SIGNALLED.load(Ordering::SeqCst) == 0 {
            if topo.tcp_listeners(Side::B).map_err(emu_fail)? > 0 {
                break;
            }
            if let Ok(Some(st)) = s.try_wait() {
                return Err(exit::fail(
                    exit::FAILURE,
                    anyhow!("the server on side B exited before CMD started ({st})"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let (prog, args) = o
        .cmd
        .split_first()
        .ok_or_else(|| exit::fail(exit::USAGE, anyhow!("no command given after --")))?;
    let mut child = topo
        .command(Side::A, prog)
        .args(args)
        .spawn()
        .with_context(|| format!("starting {} on side A", prog.to_string_lossy()))?;
    let started = Instant::now();
    let mut warmup = o.warmup;
    let status = loop {
        if warmup.is_some_and(|w| started.elapsed() >= w) {
            topo.reset_stats();
            warmup = None;
        }
        if SIGNALLED.load(Ordering::SeqCst) != 0 {
            terminate(&mut child, Duration::from_secs(2));
            break None;
        }
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(anyhow!("waiting for the command: {e}")),
        }
    };
    if let Some(s) = server.as_mut() {
        terminate(s, Duration::from_secs(1));
    }
    match status {
        Some(st) => Ok(exit_code_of(st)),
        None => {
            let sig = SIGNALLED.load(Ordering::SeqCst);
            eprintln!("tcptune emu: interrupted (signal {sig}); tearing down");
            Ok(u8::try_from(128 + sig).unwrap_or(1))
        }
    }
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
    let spec = DaemonSpec {
        topology: cfg.clone(),
        offload: up_opts.offload,
        realtime: up_opts.realtime,
        spin_ns: u64::try_from(up_opts.spin.as_nanos()).unwrap_or(u64::MAX),
    };
    let exe = std::env::current_exe().context("finding the tcptune executable")?;
    let mut cmd = Command::new(exe);
    cmd.args(["emu", "__daemon", "--spec"])
        .arg(serde_json::to_string(&spec)?)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // SAFETY: setsid(2) is async-signal-safe; it detaches the daemon from the terminal's
    // process group so that Ctrl-C in this shell does not stop it.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    if !o.json {
        eprintln!(
            "tcptune emu: bringing up {}: {}",
            o.name,
            cfg.path.describe()
        );
    }
    let mut child = cmd.spawn().context("starting the emulator daemon")?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("no pipe to the emulator daemon"))?;
    let mut ready = false;
    let mut error: Option<(u8, String)> = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading from the emulator daemon")?;
        if line == "ready" {
            ready = true;
            break;
        } else if let Some(w) = line.strip_prefix("warning ") {
            warnings.push(w.to_string());
        } else if let Some(rest) = line.strip_prefix("error ") {
            let (code, msg) = rest.split_once(' ').unwrap_or(("1", rest));
            error = Some((code.parse().unwrap_or(exit::FAILURE), msg.to_string()));
        }
    }
    if !ready {
        let status = child.wait().ok();
        let (code, msg) = error.unwrap_or_else(|| {
            (
                exit::FAILURE,
                format!("the emulator daemon exited before the path was ready ({status:?})"),
            )
        });
        return Err(exit::fail(code, anyhow!(msg)));
    }
    let record = state::load(&o.name).map_err(emu_fail)?;
    if o.json {
        out::json(&UpReport {
            schema_version: 1,
            name: o.name.clone(),
            daemon_pid: child.id(),
            netns_a: record.netns(Side::A).to_string(),
            netns_b: record.netns(Side::B).to_string(),
            addr_a: record.addr(Side::A).to_string(),
            addr_b: record.addr(Side::B).to_string(),
            path: cfg.path.clone(),
            warnings,
        })?;
    } else {
        for w in &warnings {
            eprintln!("tcptune emu: warning: {w}");
        }
        out::line(&format!(
            "{} up: side a {} (netns {}), side b {} (netns {}), daemon pid {}",
            o.name,
            record.addr(Side::A),
            record.netns(Side::A),
            record.addr(Side::B),
            record.netns(Side::B),
            child.id()
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// Write one line to the `up` process waiting on our stdout.
fn tell_parent(line: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}").and_then(|_| o.flush());
}

fn daemon(o: DaemonOpts) -> anyhow::Result<ExitCode> {
    let spec: DaemonSpec = serde_json::from_str(&o.spec).context("parsing the daemon spec")?;
    // Block the stop signals in every thread; the main thread waits for them below.
    // SAFETY: plain signal-mask manipulation with a local sigset.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let opts = UpOptions {
        offload: spec.offload,
        realtime: spec.realtime,
        spin: Duration::from_nanos(spec.spin_ns),
        owner: OwnerKind::Daemon,
        ..UpOptions::default()
    };
    let topo = match Topology::up_with(&spec.topology, &opts) {
        Ok(t) => t,
        Err(e) => {
            let code = if e.is_environment() {
                exit::ENVIRONMENT
            } else {
                exit::FAILURE
            };
            tell_parent(&format!("error {code} {e}"));
            return Ok(ExitCode::from(code));
        }
    };
    for n in topo.notes() {
        tell_parent(&format!("warning {n}"));
    }
    // From now on write to the log file, never to the parent (which is about to exit).
    let log = state::log_path(&spec.topology.name);
    if let Ok(f) = std::fs::File::create(&log) {
        use std::os::fd::AsRawFd;
        tell_parent("ready");
        // SAFETY: dup2 onto our own stdout/stderr.
        unsafe {
            libc::dup2(f.as_raw_fd(), 1);
            libc::dup2(f.as_raw_fd(), 2);
        }
    } else {
        tell_parent("ready");
        // SAFETY: as above, onto /dev/null.
        if let Ok(f) = std::fs::File::open("/dev/null") {
            use std::os::fd::AsRawFd;
            unsafe {
                libc::dup2(f.as_raw_fd(), 1);
                libc::dup2(f.as_raw_fd(), 2);
            }
        }
    }
    eprintln!(
        "tcptune emu daemon {}: up: {}",
        spec.topology.name,
        spec.topology.path.describe()
    );
    loop {
        let ts = libc::timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        // SAFETY: waits for one of the blocked signals, with a timeout.
        let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
        if sig > 0 {
            eprintln!("tcptune emu daemon: signal {sig}: taking the path down");
            break;
        }
        if !topo.is_running() {
            eprintln!(
                "tcptune emu daemon: emulator stopped: {:?}; taking the path down",
                topo.failures()
            );
            break;
        }
    }
    match topo.down() {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(e) => Err(emu_fail(e)),
    }
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
    let mut child = record
        .command(o.side, prog)
        .map_err(emu_fail)?
        .args(args)
        .spawn()
        .with_context(|| format!("starting {} on side {}", prog.to_string_lossy(), o.side))?;
    // Like system(3): the child handles Ctrl-C; we wait for it and pass its status on.
    // SAFETY: setting dispositions of this process after the child exists.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
    let status = child.wait().context("waiting for the command")?;
    Ok(ExitCode::from(exit_code_of(status)))
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
    if removed.iter().any(|n| n == &o.name) {
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
    let pid = i32::try_from(record.owner_pid).context("daemon pid out of range")?;
    if record.owner_alive() {
        // SAFETY: kill(2) on the daemon recorded as owner, just checked to be the same
        // process (pid and start time).
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while record.owner_alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if record.owner_alive() {
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        std::thread::sleep(Duration::from_millis(100));
        state::cleanup_stale().map_err(emu_fail)?;
        eprintln!("tcptune emu: the daemon did not stop in 10 s; killed it and cleaned up");
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
