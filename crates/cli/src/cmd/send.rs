//! `tcptune send`: run a transfer against a `tcptune serve` server and report it.

use crate::exit;
use crate::out;
use std::io::{IsTerminal, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tcptune_core::{parse_duration, Bytes, TuneMode};
use tcptune_transfer::auth::Secret;
use tcptune_transfer::client::{self, ClientConfig, ClientError, Progress};
use tcptune_transfer::human;

/// Options of `tcptune send`.
///
/// Moves M messages of S bytes (default: the paper's 128 x 1 MiB) over N parallel streams
/// to a `tcptune serve` server, with a buffer tuner on every stream at both ends, and
/// reports the throughput measured at the receiver from the first byte to the last. Every
/// byte is verified; a mismatch or a short transfer exits with status 4.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  tcptune send 10.0.0.2                       # 128 x 1 MiB, 1 stream, --tune auto
  tcptune send 10.0.0.2 -P 4 --tune fixed:4m  # 4 streams with 4 MiB buffers
  tcptune send 10.0.0.2 -t 10 -R --json       # 10 s from the server to us, JSON report

Exit status: 0 success, 1 failure, 2 usage, 3 connection (refused, unreachable, rejected),
4 integrity (a byte mismatch or a short transfer).")]
pub(crate) struct Opts {
    /// Server: HOST, HOST:PORT or [IPV6]:PORT.
    #[arg(value_name = "HOST[:PORT]")]
    server: String,
    /// Server port when HOST has none.
    #[arg(short = 'p', long, default_value_t = tcptune_transfer::server::DEFAULT_PORT)]
    port: u16,
    /// Parallel streams to start with (a tuner may add more).
    #[arg(
        short = 'P',
        long = "parallel",
        value_name = "STREAMS",
        default_value_t = 1
    )]
    streams: u32,
    /// Messages to move (the message workload).
    #[arg(short = 'n', long, value_name = "MESSAGES", default_value_t = 128)]
    messages: u64,
    /// Bytes per message (binary suffixes: 64k, 1m).
    #[arg(
        short = 'l',
        long = "length",
        value_name = "SIZE",
        default_value = "1m"
    )]
    message_size: Bytes,
    /// Send for this long instead of a message count (seconds, or with a unit: 500ms).
    #[arg(short = 't', long = "time", value_name = "SECONDS", value_parser = parse_seconds)]
    duration: Option<Duration>,
    /// Cap the message workload: stop when it is hit and report throughput from the bytes
    /// that moved (`end.tcptune.capped` is then true).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    max_time: Option<Duration>,
    /// The server sends and this end receives.
    #[arg(short = 'R', long)]
    reverse: bool,
    /// Tuning technique for both ends: none, fixed:SIZE, kernel, manual[:RATE], psc, drs,
    /// probe, auto.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    tune: TuneMode,
    /// Print the report as JSON (iperf3's start/intervals/end shape plus tcptune fields).
    #[arg(long)]
    json: bool,
    /// Keep every tuner sample and change per stream in the report (large).
    #[arg(long)]
    samples: bool,
    /// Seconds between interval reports (0: none).
    #[arg(short = 'i', long, value_name = "SECONDS", default_value = "1", value_parser = parse_seconds_or_zero)]
    interval: Duration,
    /// Congestion control for the data connections of both ends (cubic, bbr, reno).
    #[arg(short = 'C', long, value_name = "NAME")]
    congestion: Option<String>,
    /// Local address to send from.
    #[arg(short = 'B', long, value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// File holding the shared secret of a server started with --secret-file.
    #[arg(long, value_name = "FILE")]
    secret_file: Option<PathBuf>,
    /// Give up connecting after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = parse_seconds)]
    connect_timeout: Duration,
    /// Most streams to open when a tuner asks for more.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_streams: u32,
    /// Use SO_SNDBUFFORCE/SO_RCVBUFFORCE on this end when privileged (ignores
    /// net.core.wmem_max/rmem_max).
    #[arg(long)]
    force_buffers: bool,
    /// No live progress line on stderr.
    #[arg(long)]
    no_progress: bool,
    /// The database of per-path measurements (Enable's idea): modes that need the path's
    /// rate (auto, probe) use a fresh entry for this peer instead of probing, and every
    /// transfer records what it measured (`tcptune paths` lists it). Default:
    /// $TCPTUNE_PATH_DB, else ~/.cache/tcptune/paths.sqlite.
    #[arg(long, value_name = "FILE", conflicts_with = "no_path_db")]
    path_db: Option<PathBuf>,
    /// Neither read nor write the path database (every run measures the path afresh).
    #[arg(long)]
    no_path_db: bool,
    /// Never run the pre-transfer bandwidth probe: use a path-database entry of any kind, or
    /// go without a rate (auto then opens streams as the transfer itself shows they help).
    #[arg(long)]
    no_probe: bool,
    /// Testing aid: flip one byte of this message to check that the run fails (status 4).
    #[arg(long, value_name = "MESSAGE", hide = true)]
    inject_corruption: Option<u64>,
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let d = parse_seconds_or_zero(s)?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

fn parse_seconds_or_zero(s: &str) -> Result<Duration, String> {
    if let Ok(v) = s.trim().parse::<f64>() {
        if !v.is_finite() || !(0.0..=1e9).contains(&v) {
            return Err(format!("'{s}' is not a number of seconds"));
        }
        return Ok(Duration::from_secs_f64(v));
    }
    parse_duration(s).map_err(|e| e.to_string())
}

impl Opts {
    fn config(&self) -> anyhow::Result<ClientConfig> {
        let mut c = ClientConfig::new(self.server.clone());
        c.port = self.port;
        c.bind = self.bind;
        c.tune = self.tune.clone();
        c.streams = self.streams;
        c.messages = self.messages;
        c.message_size = self.message_size.0;
        c.duration = self.duration;
        c.max_time = self.max_time;
        c.reverse = self.reverse;
        c.samples = self.samples;
        c.interval = (!self.interval.is_zero()).then_some(self.interval);
        c.congestion = self.congestion.clone();
        c.connect_timeout = self.connect_timeout;
        c.max_streams = self.max_streams;
        c.force_buffers = self.force_buffers;
        c.corrupt_message = self.inject_corruption;
        c.path_db = if self.no_path_db {
            None
        } else {
            self.path_db
                .clone()
                .or_else(tcptune_transfer::pathdb::default_location)
        };
        c.probe = !self.no_probe;
        if let Some(path) = &self.secret_file {
            c.secret = Some(Secret::from_file(path).map_err(|e| exit::fail(exit::USAGE, e))?);
        }
        Ok(c)
    }
}

fn progress_line(p: &Progress) -> String {
    let secs = p.elapsed.as_secs_f64();
    let rate = if secs > 0.0 {
        p.bytes as f64 * 8.0 / secs / 1e6
    } else {
        0.0
    };
    let done = match p.total_bytes {
        Some(t) if t > 0 => format!(" ({:.0}%)", 100.0 * p.bytes as f64 / t as f64),
        _ => String::new(),
    };
    format!(
        "\r{:>8} {:6.1}s  {:>10}{}  {:9.1} Mbit/s  {} stream(s)   ",
        p.phase,
        secs,
        Bytes(p.bytes).to_string(),
        done,
        rate,
        p.streams
    )
}

/// Run `tcptune send`.
pub(crate) fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    let cfg = opts.config()?;
    let show_progress = !opts.no_progress && std::io::stderr().is_terminal();
    let live_intervals = !opts.json;
    if live_intervals {
        out::line(&format!(
            "Connecting to {} (port {} unless given), {} stream(s), tune {}, {}",
            opts.server,
            opts.port,
            opts.streams,
            opts.tune,
            match opts.duration {
                Some(d) => format!("{:.1} s", d.as_secs_f64()),
                None => format!("{} x {}", opts.messages, opts.message_size),
            }
        ));
    }
    let mut progress_shown = false;
    let mut header_shown = false;
    let mut cb = |p: &Progress| {
        if progress_shown {
            eprint!("\r{:79}\r", "");
            progress_shown = false;
        }
        if live_intervals {
            for iv in &p.intervals {
                if !header_shown {
                    out::line(&human::interval_header());
                    header_shown = true;
                }
                for l in human::interval_lines(iv) {
                    out::line(&l);
                }
            }
        }
        if show_progress {
            let mut e = std::io::stderr().lock();
            let _ = e.write_all(progress_line(p).as_bytes());
            let _ = e.flush();
            progress_shown = true;
        }
    };
    let result = client::run(&cfg, Some(&mut cb));
    if progress_shown {
        eprint!("\r{:79}\r", "");
    }
    let print = |r: &tcptune_transfer::report::Report| -> anyhow::Result<()> {
        if opts.json {
            out::json(r)
        } else {
            out::text(&human::summary_with(r, false));
            Ok(())
        }
    };
    match result {
        Ok(report) => {
            print(&report)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if let Some(report) = e.report() {
                print(report)?;
            } else if opts.json {
                out::json(&tcptune_transfer::report::FailureReport::new(e.to_string()))?;
            }
            let code = match &e {
                ClientError::Config(_) => exit::USAGE,
                ClientError::Integrity { .. } => exit::INTEGRITY,
                e if e.is_connection() => exit::CONNECT,
                _ => exit::FAILURE,
            };
            Err(exit::fail(code, e))
        }
    }
}
