//! `tcptune doctor [HOST[:PORT]]`: audit this host's TCP settings (and a path's RTT), say
//! exactly what to change, and optionally write or apply it.

use crate::args::{self, ms, secs};
use crate::{exit, out};
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tcptune_core::Rate;
use tcptune_doctor::path::{self, PathError, RttConfig};
use tcptune_doctor::report::{render_text, DoctorReport, Mode, PathReport, ProbeResult};
use tcptune_doctor::sizing::{Sizing, Target, TargetSource};
use tcptune_doctor::{apply, checks, sysctl_file, FactSource, HostFacts};
use tcptune_transfer::client::{self, ClientConfig};

/// The port `doctor HOST` measures when none is given: `tcptune serve`'s default.
const DEFAULT_PORT: u16 = tcptune_transfer::server::DEFAULT_PORT;

/// Options of `tcptune doctor`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = "\
Examples:
  tcptune doctor                              audit this host for a 1 Gbit/s x 100 ms path
  tcptune doctor --target 10gbit --rtt 80ms   size the advice for your path
  tcptune doctor data.example.org             measure the path's RTT by TCP handshakes to
                                              port 5310 (a tcptune server: also a short
                                              bandwidth probe)
  tcptune doctor --target 10gbit --rtt 80ms --write-sysctl 90-tcptune.conf
  tcptune doctor --target 10gbit --rtt 80ms --apply   (changes the running system)

Exit status: 0 nothing stands in the way of the target, 1 a finding of severity warning or
worse stands (or a setting could not be applied), 2 usage error, 3 the path could not be
measured (unreachable, refused, filtered, name not resolved), 5 --apply without root.

Without --target/--rtt the advice is sized for the fastest interface's speed (1 Gbit/s if
unknown) at 100 ms: a long fat pipe. In path mode the RTT is the median handshake time.")]
pub(crate) struct Opts {
    /// Measure the path to HOST[:PORT] (port 5310, tcptune serve's, if omitted;
    /// [v6addr]:port for IPv6) by timing TCP handshakes, no ICMP needed. With a tcptune server
    /// there, also run a short bandwidth probe.
    #[arg(value_name = "HOST[:PORT]")]
    host: Option<String>,

    /// The rate one transfer should reach, e.g. 1gbit, 500mbit, 10Gbit/s (decimal bits).
    #[arg(long, value_name = "RATE", value_parser = args::rate(Rate(1_000), Rate(10_000_000_000_000)))]
    target: Option<Rate>,

    /// The path's round-trip time, e.g. 25ms, 0.15s (measured instead when HOST is given).
    #[arg(long, value_name = "RTT", value_parser = args::duration(Duration::from_micros(1), secs(10)), conflicts_with = "host")]
    rtt: Option<Duration>,

    /// Handshakes to time in path mode.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    samples: u32,

    /// How long one handshake may take before the port counts as filtered.
    #[arg(long, default_value = "3s", value_parser = args::duration(ms(1), secs(60)), value_name = "DURATION")]
    timeout: Duration,

    /// Write the fixes for the target as a commented /etc/sysctl.d/ file (does not change the
    /// running system).
    #[arg(long, value_name = "FILE")]
    write_sysctl: Option<PathBuf>,

    /// Change the running system: apply the fixes of every warning or error (not the
    /// optional ones), printing the previous values so the change can be undone. Needs root;
    /// net.core.* settings are global to the host.
    #[arg(long, conflicts_with = "write_sysctl")]
    apply: bool,

    /// Print the facts and findings as JSON (schema_version 2, docs/json.md).
    #[arg(long)]
    json: bool,

    /// Skip the bandwidth probe in path mode (only the handshakes are sent).
    #[arg(long)]
    no_probe: bool,

    /// How long the bandwidth probe sends.
    #[arg(long, default_value = "2s", value_parser = args::duration(ms(100), secs(60)), value_name = "DURATION")]
    probe_time: Duration,

    /// Parallel streams of the bandwidth probe (several, so that this host's buffer limits
    /// do not hide the path's capacity).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    probe_streams: u32,
}

/// A short transfer to a tcptune server at `addr`: the path's rate as the receiver saw it.
/// Any failure (no tcptune server there, authentication required) is a reason, not an error.
fn probe(opts: &Opts, addr: std::net::SocketAddr) -> Result<ProbeResult, String> {
    let mut cfg = ClientConfig::new(addr.to_string());
    cfg.duration = Some(opts.probe_time);
    cfg.streams = opts.probe_streams;
    // Kernel autotuning on both ends: the probe measures the path, not a tuner.
    cfg.tune = tcptune_core::TuneMode::Kernel;
    cfg.interval = Some(Duration::from_millis(250));
    cfg.connect_timeout = opts.timeout;
    cfg.idle_timeout = opts.timeout.max(Duration::from_secs(5));
    match client::run(&cfg, None) {
        Ok(r) => Ok(ProbeResult {
            bits_per_second: steady_rate(&r).max(0.0).round() as u64,
            seconds: r.end.sum_received.seconds,
            streams: opts.probe_streams,
        }),
        Err(e) => Err(format!("no usable tcptune server at {addr}: {e}")),
    }
}

/// The probe's rate once slow start is over: the intervals of its second half (on a long
/// path slow start takes a good part of a 2 s probe, and the whole-run average would
/// understate the path), else the whole run's average.
fn steady_rate(r: &tcptune_transfer::report::Report) -> f64 {
    let half = r.end.sum_received.seconds / 2.0;
    let (bytes, secs) = r
        .intervals
        .iter()
        .filter(|i| i.sum.start >= half)
        .fold((0u64, 0.0f64), |(b, s), i| {
            (b + i.sum.bytes, s + i.sum.seconds)
        });
    if secs >= 0.2 {
        bytes as f64 * 8.0 / secs
    } else {
        r.end.sum_received.bits_per_second
    }
}

fn default_rate(facts: &HostFacts) -> Rate {
    facts
        .up_interfaces()
        .filter(|i| i.physical)
        .filter_map(|i| i.speed_mbps)
        .max()
        .map(|m| Rate(m.saturating_mul(1_000_000)))
        .unwrap_or(Rate::gbit(1))
}

fn measure_path(opts: &Opts, spec: &str) -> anyhow::Result<PathReport> {
    let (host, port) =
        path::parse_host_port(spec, DEFAULT_PORT).map_err(|e| exit::fail(exit::USAGE, e))?;
    let addrs = path::resolve(&host, port).map_err(|e| exit::fail(exit::CONNECT, e))?;
    let cfg = RttConfig {
        samples: opts.samples,
        timeout: opts.timeout,
        ..RttConfig::default()
    };
    if !opts.json {
        eprintln!(
            "measuring the RTT to {host}:{port} ({} TCP handshakes)...",
            opts.samples
        );
    }
    // Try each address until one answers; report the first address's error otherwise,
    // unless a later one got further (refused beats unreachable: the host exists).
    let mut errors: Vec<PathError> = Vec::new();
    for addr in &addrs {
        match path::measure_rtt(*addr, &cfg) {
            Ok(rtt) => {
                let (probe, probe_skipped) = if opts.no_probe {
                    (None, Some("--no-probe".to_string()))
                } else {
                    if !opts.json {
                        eprintln!(
                            "probing the bandwidth for {} with {} streams...",
                            tcptune_core::format_duration(opts.probe_time),
                            opts.probe_streams
                        );
                    }
                    match probe(opts, *addr) {
                        Ok(p) => (Some(p), None),
                        Err(why) => (None, Some(why)),
                    }
                };
                return Ok(PathReport {
                    host,
                    port,
                    rtt,
                    probe,
                    probe_skipped,
                });
            }
            Err(e) => errors.push(e),
        }
    }
    let best = errors
        .into_iter()
        .min_by_key(|e| match e {
            PathError::Refused { .. } => 0,
            PathError::Filtered { .. } => 1,
            PathError::Unreachable { .. } => 2,
            _ => 3,
        })
        .context("no address to try")?;
    Err(exit::fail(exit::CONNECT, best))
}

/// Run `tcptune doctor`.
pub(crate) fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    // SAFETY: geteuid has no preconditions.
    if opts.apply && unsafe { libc::geteuid() } != 0 {
        return Err(exit::msg(
            exit::ENVIRONMENT,
            "--apply changes the running system's sysctls and needs root: run it with sudo, or write the changes to a file with --write-sysctl FILE and apply that with sysctl -p FILE",
        ));
    }
    let source = FactSource::host();
    let facts = source.gather();
    let path = match &opts.host {
        Some(spec) => Some(measure_path(&opts, spec)?),
        None => None,
    };
    let target = match &path {
        Some(p) => Target {
            rate: opts
                .target
                .or(p.probe.as_ref().map(|pr| Rate(pr.bits_per_second)))
                .unwrap_or_else(|| default_rate(&facts)),
            rtt: p.rtt.median(),
            source: TargetSource::Measured,
        },
        None => Target {
            rate: opts.target.unwrap_or_else(|| default_rate(&facts)),
            rtt: opts.rtt.unwrap_or(Duration::from_millis(100)),
            source: if opts.target.is_some() && opts.rtt.is_some() {
                TargetSource::User
            } else {
                TargetSource::Assumed
            },
        },
    };
    let mode = if path.is_some() {
        Mode::Path
    } else {
        Mode::Host
    };
    let version = env!("CARGO_PKG_VERSION");
    let findings = checks::run(&facts, &target);

    let mut written = None;
    if let Some(file) = &opts.write_sysctl {
        let text = sysctl_file::render(&findings, &facts, &target, version);
        std::fs::write(file, text).with_context(|| format!("writing {}", file.display()))?;
        written = Some(file.display().to_string());
    }

    let (facts, findings, applied) = if opts.apply {
        let changes = sysctl_file::changes(&findings, &facts);
        if !opts.json {
            eprintln!(
                "applying {} change(s) to the running system...",
                changes.iter().filter(|c| c.required).count()
            );
        }
        let applied = apply::apply(&changes);
        // Look again: the report shows what still stands after the change.
        let facts = source.gather();
        let findings = checks::run(&facts, &target);
        (facts, findings, applied)
    } else {
        (facts, findings, Vec::new())
    };
    let apply_failed = applied.iter().any(|a| a.error.is_some());

    let sizing = checks::Ctx {
        facts: &facts,
        target: &target,
    }
    .limits()
    .ok()
    .map(|l| Sizing::compute(&target, &l));
    let mut report = DoctorReport::new(version, mode, target, sizing, path, facts, findings);
    report.applied = applied;
    report.sysctl_file = written;
    if opts.json {
        out::json(&report)?;
    } else {
        out::text(&render_text(&report));
    }
    if apply_failed {
        return Err(exit::fail(
            exit::FAILURE,
            anyhow::anyhow!("some settings could not be applied (see above; are you root?)"),
        ));
    }
    Ok(ExitCode::from(if report.problems > 0 {
        exit::FAILURE
    } else {
        exit::OK
    }))
}
