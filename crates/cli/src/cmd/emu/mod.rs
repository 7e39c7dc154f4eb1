//! `tcptune emu`: emulate a WAN path between two network namespaces (run, up, exec, status,
//! down). The emulator, its process supervision and its daemon are the `tcptune-emu` library;
//! this module holds the options shared by the subcommands, and one module per subcommand
//! its options and `run` function ([`run`], [`background`] for up/down, [`inspect`] for
//! exec/status).

mod background;
mod inspect;
mod run;

use crate::args::{self, ms, secs};
use crate::exit;
use anyhow::anyhow;
use serde::Serialize;
use std::process::ExitCode;
use std::time::Duration;
use tcptune_core::{Bytes, Rate};
use tcptune_emu::config::parse_sysctl_arg;
use tcptune_emu::state::OwnerKind;
use tcptune_emu::{DirStats, EmuError, PathConfig, QueueLimit, TopologyConfig, UpOptions};

/// Options of `tcptune emu`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = "\
Examples:
  tcptune emu run --rtt 100ms --rate 1gbit --server 'iperf3 -s -1' -- iperf3 -c 198.19.0.1 -J | jq .end
  tcptune emu run --rtt 50ms --rate 500mbit --loss 0.01% --server 'tcptune serve' \\
      -- sh -c 'tcptune send $TCPTUNE_PEER --json' > report.json
  tcptune emu run --rtt 20ms --json -- ping -c 5 198.19.0.1 | jq .stats.a_to_b.lateness
  tcptune emu up wan --delay 25ms --rate 500mbit --queue 1bdp --loss 0.01%
  tcptune emu run --rtt 68ms --rate 40mbit --extra-path rtt=1ms,rate=10mbit \\
      -- sh -c 'ping -c 3 198.19.0.1; ping -c 3 198.19.0.2'
  tcptune emu exec wan b -- iperf3 -s -D
  tcptune emu exec wan a -- sh -c 'iperf3 -c $TCPTUNE_PEER -t 10'
  tcptune emu status wan --json
  tcptune emu down wan

Side A (198.18.0.1) and side B (198.19.0.1) are network namespaces tt-NAME-a and tt-NAME-b
joined by a TUN device each; the emulator threads carry packets between them through the
path, the same in both directions. Each --extra-path adds an address to side B (198.19.0.2,
198.19.0.3, ...) reached over a path of its own (its own queue, rate, delay, loss and
counters): one sender in A can so reach several receivers over different paths at once.
Commands get TCPTUNE_SELF and TCPTUNE_PEER (the other
side's address) in their environment; CMD runs without a shell, so use sh -c '...' to expand
them. Needs iproute2. Two modes, said on stderr as 'mode ...': as root (CAP_NET_ADMIN and
CAP_SYS_ADMIN) the namespaces are named (ip netns) and joined by TUN devices (/dev/net/tun);
as anyone else (rootless mode) they live in a user namespace of the topology's own, where you
are root, joined by veth pairs and packet sockets; emu exec enters it, and everything goes away
with the emu process. Rootless mode cannot raise the host's global net.core.rmem_max/wmem_max
or use SO_*BUFFORCE. TCPTUNE_EMU_MODE=root|rootless forces a mode. Exit status 5: not
permitted (no root and no user namespaces), no /dev/net/tun, or name taken.

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
    Run(run::RunOpts),
    /// Bring a named path up in the background and return once packets flow.
    Up(background::UpOpts),
    /// Run a command inside side a or b of a running topology.
    Exec(inspect::ExecOpts),
    /// Show running topologies and their live counters.
    Status(inspect::StatusOpts),
    /// Take a topology started by `emu up` down.
    Down(background::DownOpts),
    /// The background emulator of `emu up` (internal).
    #[command(name = "__daemon", hide = true)]
    Daemon(background::DaemonOpts),
}

/// The emulated path (the same in both directions).
#[derive(clap::Args, Debug, Clone)]
struct PathOpts {
    /// One-way propagation delay, e.g. 25ms, 0.5ms (sub-millisecond resolution, up to 10s).
    #[arg(long, value_parser = args::duration(Duration::ZERO, secs(10)), value_name = "DURATION", conflicts_with = "rtt")]
    delay: Option<Duration>,
    /// Round-trip propagation delay (twice the one-way delay), e.g. 50ms.
    #[arg(long, value_parser = args::duration(Duration::ZERO, secs(20)), value_name = "DURATION")]
    rtt: Option<Duration>,
    /// Bottleneck rate, e.g. 100mbit, 1Gbit/s, 500M (decimal bits; unlimited if omitted).
    #[arg(long, value_name = "RATE", value_parser = args::rate(Rate(100_000), Rate::gbit(400)))]
    rate: Option<Rate>,
    /// Drop-tail queue before the bottleneck: 1bdp (rate x RTT, the default), 256KiB, 1000pkt.
    #[arg(long, default_value = "1bdp", value_name = "LIMIT")]
    queue: QueueLimit,
    /// Random loss per packet: 0.1% or a fraction such as 0.001.
    #[arg(long, value_parser = parse_loss, value_name = "LOSS", default_value = "0")]
    loss: f64,
    /// Delay variation: each packet gets delay ± jitter (uniform); order is kept unless
    /// --reorder.
    #[arg(long, value_parser = args::duration(Duration::ZERO, secs(10)), value_name = "DURATION")]
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
    /// A further path to a further address of side B (repeatable): the first reaches
    /// 198.19.0.2, the next 198.19.0.3, ... (the path above reaches 198.19.0.1). SPEC is a
    /// comma-separated list of delay=, rtt=, rate=, queue=, loss=, jitter= (as the options
    /// above; unset: as for the path above, rate unlimited unless given), e.g.
    /// --extra-path rtt=2ms,rate=10mbit. Each path has its own queue, rate, delay, loss and
    /// counters; MTU, seed and --reorder are the first path's.
    #[arg(long = "extra-path", value_name = "SPEC", value_parser = ExtraPathSpec::parse)]
    extra_paths: Vec<ExtraPathSpec>,
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
    #[arg(long, hide = true, value_parser = args::duration(Duration::ZERO, ms(100)), value_name = "DURATION")]
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

/// One `--extra-path` SPEC: only what it sets.
#[derive(Debug, Clone, Default, PartialEq)]
struct ExtraPathSpec {
    delay: Option<Duration>,
    rate: Option<Rate>,
    queue: Option<QueueLimit>,
    loss: Option<f64>,
    jitter: Option<Duration>,
}

impl ExtraPathSpec {
    fn parse(s: &str) -> Result<ExtraPathSpec, String> {
        let mut spec = ExtraPathSpec::default();
        let dur = |v: &str| {
            tcptune_core::parse_duration(v).map_err(|e| format!("--extra-path '{s}': {e}"))
        };
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item.split_once('=').ok_or_else(|| {
                format!("--extra-path '{s}': expected KEY=VALUE items, got '{item}'")
            })?;
            let v = v.trim();
            match k.trim().to_ascii_lowercase().as_str() {
                "delay" => spec.delay = Some(dur(v)?),
                "rtt" => spec.delay = Some(dur(v)? / 2),
                "rate" => {
                    spec.rate = Some(
                        v.parse::<Rate>()
                            .map_err(|e| format!("--extra-path '{s}': {e}"))?,
                    )
                }
                "queue" => {
                    spec.queue = Some(
                        v.parse::<QueueLimit>()
                            .map_err(|e| format!("--extra-path '{s}': {e}"))?,
                    )
                }
                "loss" => spec.loss = Some(parse_loss(v)?),
                "jitter" => spec.jitter = Some(dur(v)?),
                other => {
                    return Err(format!(
                        "--extra-path '{s}': unknown key '{other}' (use delay, rtt, rate, \
                         queue, loss, jitter)"
                    ))
                }
            }
        }
        Ok(spec)
    }

    /// The path: `first` with what the spec sets (no rate unless it sets one).
    fn path(&self, first: &PathConfig) -> PathConfig {
        PathConfig {
            delay: self.delay.unwrap_or(first.delay),
            rate: self.rate,
            queue: self.queue.unwrap_or(first.queue),
            loss: self.loss.unwrap_or(first.loss),
            jitter: self.jitter.unwrap_or(first.jitter),
            ..first.clone()
        }
    }
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
        let path = self.path();
        let mut cfg = TopologyConfig::new(name, path.clone());
        cfg.sysctls = self.sysctls.clone();
        cfg.extra_paths = self.extra_paths.iter().map(|e| e.path(&path)).collect();
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

/// The emulated path in `--json` outputs (schema 2): units in every name.
#[derive(Serialize)]
struct PathJson {
    /// One-way delay.
    delay_us: f64,
    /// Round-trip propagation delay (twice the one-way delay).
    rtt_us: f64,
    /// Bottleneck rate; `null`: unlimited.
    rate_bps: Option<u64>,
    /// The queue as given (`1bdp`, `256KiB`, `1000pkt`).
    queue: String,
    /// The queue in bytes, when known (`null` for a BDP multiple without a rate).
    queue_bytes: Option<u64>,
    /// Per-packet loss probability, 0 to 1.
    loss: f64,
    /// Delay variation, each packet delay +- jitter.
    jitter_us: f64,
    reorder: bool,
    seed: u64,
    mtu_bytes: u32,
}

impl From<&PathConfig> for PathJson {
    fn from(p: &PathConfig) -> Self {
        let us = |d: Duration| d.as_nanos() as f64 / 1000.0;
        PathJson {
            delay_us: us(p.delay),
            rtt_us: us(p.delay * 2),
            rate_bps: p.rate.map(|r| r.0),
            queue: match p.queue {
                QueueLimit::Bdp(x) => format!("{x}bdp"),
                QueueLimit::Bytes(b) => b.to_string(),
                QueueLimit::Packets(n) => format!("{n}pkt"),
            },
            queue_bytes: match p.queue {
                QueueLimit::Bytes(b) => Some(b.0),
                QueueLimit::Bdp(x) => p
                    .rate
                    .map(|r| (r.bdp(p.delay * 2).0 as f64 * x).round() as u64),
                QueueLimit::Packets(n) => Some(u64::from(n) * u64::from(p.mtu)),
            },
            loss: p.loss,
            jitter_us: us(p.jitter),
            reorder: p.reorder,
            seed: p.seed,
            mtu_bytes: p.mtu,
        }
    }
}

/// Version of `emu run/up/down/status --json` (2: the path with units in names).
const EMU_SCHEMA_VERSION: u32 = 2;

/// Exit 5 for a permission error anywhere in the chain (not root, no CAP_NET_ADMIN), with
/// what to do; the error's own code otherwise.
fn permission_fail(e: anyhow::Error) -> anyhow::Error {
    let denied = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
            || c.to_string().contains("Permission denied")
            || c.to_string().contains("Operation not permitted")
    });
    if denied && exit::code_of(&e) != exit::ENVIRONMENT {
        let line = exit::one_line(&e);
        exit::msg(
            exit::ENVIRONMENT,
            format!("{line} (entering an emulated path's namespaces needs root: run it with sudo)"),
        )
    } else {
        e
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

/// Run `tcptune emu`.
pub(crate) fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    match opts.command {
        EmuCommand::Run(o) => run::run(o),
        EmuCommand::Up(o) => background::up(o),
        EmuCommand::Exec(o) => inspect::exec(o).map_err(permission_fail),
        EmuCommand::Status(o) => inspect::status(o),
        EmuCommand::Down(o) => background::down(o).map_err(permission_fail),
        EmuCommand::Daemon(o) => background::daemon(o),
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

    #[test]
    fn extra_path_spec_sets_only_what_it_names() {
        let first = PathConfig {
            delay: Duration::from_millis(34),
            rate: Some(Rate::mbit(40)),
            seed: 9,
            ..PathConfig::default()
        };
        let spec = ExtraPathSpec::parse("rtt=2ms, rate=10mbit,loss=1%");
        let p = spec.map(|s| s.path(&first));
        assert_eq!(
            p,
            Ok(PathConfig {
                delay: Duration::from_millis(1),
                rate: Some(Rate::mbit(10)),
                loss: 0.01,
                ..first.clone()
            })
        );
        let bare = ExtraPathSpec::parse("delay=5ms").map(|s| s.path(&first));
        assert_eq!(
            bare.map(|p| (p.delay, p.rate)),
            Ok((Duration::from_millis(5), None))
        );
    }

    #[test]
    fn extra_path_spec_refuses_unknown_keys_and_bad_values() {
        assert!(ExtraPathSpec::parse("speed=1gbit").is_err());
        assert!(ExtraPathSpec::parse("delay").is_err());
        assert!(ExtraPathSpec::parse("rate=fast").is_err());
        assert!(ExtraPathSpec::parse("loss=200%").is_err());
    }
}
