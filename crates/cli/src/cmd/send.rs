//! `tcptune send`: run a transfer against a `tcptune serve` server and report it.

use crate::args::{self, ms, secs};
use crate::exit;
use crate::out;
use crate::signals;
use std::io::{IsTerminal, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tcptune_core::{human_bps, Bytes, TuneMode};
use tcptune_transfer::client::{self, Cancel, ClientConfig, ClientError, Progress};
use tcptune_transfer::human;
use tcptune_transfer::report::{FailureReport, Report};

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
  tcptune send --ssh alice@dtn2 -t 10         # no server: the far end is started over ssh

As in iperf3, -t, -i, --max-time and --connect-timeout take a bare number as seconds (-t 10);
a unit is accepted too (-t 500ms). Ctrl-C ends the transfer at both ends and prints what moved
until then (with --json a complete report with \"interrupted\": true), exit status 130.

Exit status: 0 success, 1 failure, 2 usage, 3 connection (refused, unreachable, rejected),
4 integrity (a byte mismatch or a short transfer), 130 interrupted (Ctrl-C, SIGTERM).")]
pub(crate) struct Opts {
    /// Server: HOST, HOST:PORT or [IPV6]:PORT (a running `tcptune serve`).
    #[arg(value_name = "HOST[:PORT]", required_unless_present = "ssh")]
    server: Option<String>,
    /// Instead of a server, start the far end on [USER@]HOST over ssh (as `tcptune cp
    /// HOST:PATH` does: nothing to run there but the tcptune binary).
    #[arg(long, value_name = "[USER@]HOST", conflicts_with_all = ["server", "port", "secret_file"])]
    ssh: Option<String>,
    #[command(flatten)]
    remote: super::ssh::SshOpts,
    /// Server port when HOST has none [default: 5310].
    #[arg(short = 'p', long, value_parser = clap::value_parser!(u16).range(1..))]
    port: Option<u16>,
    /// Parallel streams to start with (a tuner may add more, up to --max-streams; `auto`
    /// measures a path never seen with enough streams to hold a fast path's BDP, then a
    /// transfer long enough to pay for it closes those its plan does not need; with
    /// --reverse, the server's writers close, when its tcptune does so).
    #[arg(
        short = 'P',
        long = "parallel",
        value_name = "STREAMS",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=4096)
    )]
    streams: u32,
    /// Messages to move (the message workload).
    #[arg(
        short = 'n',
        long,
        value_name = "MESSAGES",
        default_value_t = 128,
        value_parser = clap::value_parser!(u64).range(1..),
        conflicts_with = "duration"
    )]
    messages: u64,
    /// Bytes per message: 64k, 1m, 4MiB (binary), 1MB (decimal), 1000 (bytes).
    #[arg(
        short = 'l',
        long = "length",
        value_name = "SIZE",
        default_value = "1MiB",
        value_parser = args::size(Bytes(1), Bytes::mib(1024))
    )]
    message_size: Bytes,
    /// Send for this long instead of a message count (seconds, or with a unit: 500ms).
    #[arg(
        short = 't',
        long = "time",
        value_name = "DURATION",
        value_parser = args::seconds(ms(1), secs(7 * 86_400))
    )]
    duration: Option<Duration>,
    /// Cap the message workload: stop when it is hit and report throughput from the bytes
    /// that moved (`end.tcptune.capped` is then true).
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = args::seconds(ms(1), secs(7 * 86_400)),
        conflicts_with = "duration"
    )]
    max_time: Option<Duration>,
    /// The server sends and this end receives.
    #[arg(short = 'R', long)]
    reverse: bool,
    /// Tuning technique for both ends: none (64 KiB buffers), fixed:SIZE, kernel,
    /// manual[:RATE], psc, drs, probe, auto.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    tune: TuneMode,
    /// Print the report as JSON (iperf3's start/intervals/end shape plus tcptune fields).
    #[arg(long)]
    json: bool,
    /// Keep every tuner sample and change per stream in the report (large).
    #[arg(long)]
    samples: bool,
    /// Time between interval reports (seconds, or with a unit; 0: none).
    #[arg(
        short = 'i',
        long,
        value_name = "DURATION",
        default_value = "1s",
        value_parser = args::seconds(Duration::ZERO, secs(3600))
    )]
    interval: Duration,
    /// Congestion control for the data connections of both ends (cubic, bbr, reno; see
    /// /proc/sys/net/ipv4/tcp_available_congestion_control).
    #[arg(short = 'C', long, value_name = "NAME")]
    congestion: Option<String>,
    /// Local address to send from.
    #[arg(short = 'B', long, value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// File holding the shared secret of a server started with --secret-file.
    #[arg(long, value_name = "FILE")]
    secret_file: Option<PathBuf>,
    /// Give up connecting after this long (seconds, or with a unit).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = args::seconds(ms(1), secs(3600))
    )]
    connect_timeout: Duration,
    /// When the server has no session slot free, wait this long in its queue (its place is
    /// printed on stderr as it changes), then fail (seconds, or with a unit; 0: do not wait).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value = "60",
        value_parser = args::seconds(Duration::ZERO, secs(86_400))
    )]
    wait: Duration,
    /// Most streams to open when a tuner asks for more (the server's --max-streams also
    /// applies).
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_streams: u32,
    /// Use SO_SNDBUFFORCE/SO_RCVBUFFORCE on this end when privileged (ignores
    /// net.core.wmem_max/rmem_max); the server forces only if started with --force-buffers.
    #[arg(long)]
    force_buffers: bool,
    /// No live progress line on stderr.
    #[arg(long)]
    no_progress: bool,
    /// The database of per-path measurements (Enable's idea): modes that need the path's
    /// rate (auto, probe) use a fresh entry for this peer instead of probing, and every
    /// transfer records what it measured (`tcptune paths` lists it). A SQLite file, or a
    /// postgres://USER@HOST[:PORT]/DB[?sslmode=...] URL a fleet of hosts shares (looked up
    /// beside the handshake, waited for at most a quarter of the path's RTT). Default:
    /// $TCPTUNE_PATH_DB, else ~/.cache/tcptune/paths.sqlite.
    #[arg(long, value_name = "FILE|URL", conflicts_with = "no_path_db")]
    path_db: Option<PathBuf>,
    /// Neither read nor write the path database (every run measures the path afresh).
    /// With --ssh the far end is started with it too (serve --stdio --no-path-db): it
    /// neither reads nor records the path in the remote user's database.
    #[arg(long)]
    no_path_db: bool,
    /// Never measure the path's rate (neither auto's in-band measurement nor probe's
    /// pre-transfer probe): use a path-database entry of any kind, or go without a rate
    /// (auto then opens streams as the transfer itself shows they help).
    #[arg(long)]
    no_probe: bool,
    /// On a path the database knows, do not start at its saved rate. By default auto gives
    /// the data connections a large initial window (a route to the server with initcwnd,
    /// removed once they are connected; needs CAP_NET_ADMIN) and paces them at the saved
    /// rate for their first round trips, retreating on the first loss or a longer RTT.
    #[arg(long)]
    no_resume_rate: bool,
    /// Testing aid: flip one byte of this message to check that the run fails (status 4).
    #[arg(long, value_name = "MESSAGE", hide = true)]
    inject_corruption: Option<u64>,
}

/// `HOST[:PORT]` split: the host as given (brackets kept) and the port, if any.
pub(crate) fn split_port(spec: &str) -> (String, Option<u16>) {
    let s = spec.trim();
    if let Some(rest) = s.strip_prefix('[') {
        if let Some((host, tail)) = rest.split_once(']') {
            let port = tail.strip_prefix(':').and_then(|p| p.parse().ok());
            return (host.to_string(), port);
        }
    }
    match s.rsplit_once(':') {
        // More than one colon without brackets: a bare IPv6 address.
        Some((host, port)) if !host.contains(':') => match port.parse() {
            Ok(p) => (host.to_string(), Some(p)),
            Err(_) => (s.to_string(), None),
        },
        _ => (s.to_string(), None),
    }
}

/// The congestion controls this host offers, when it says.
fn available_congestion() -> Option<Vec<String>> {
    let text =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").ok()?;
    Some(text.split_whitespace().map(str::to_string).collect())
}

/// What `send` will do, validated: nothing is printed or connected before this exists.
struct Plan {
    cfg: ClientConfig,
    host: String,
    port: u16,
    /// The far end over ssh (`--ssh`), alive until the transfer ends.
    far: Option<super::ssh::Far>,
}

impl Opts {
    fn plan(&self) -> anyhow::Result<Plan> {
        let server = self.server.as_deref().unwrap_or("");
        let (host, spec_port) = split_port(server);
        if host.is_empty() && self.ssh.is_none() {
            return Err(exit::msg(
                exit::USAGE,
                "no server given: tcptune send HOST[:PORT]",
            ));
        }
        let port = match (spec_port, self.port) {
            (Some(_), Some(b)) => {
                return Err(exit::msg(
                    exit::USAGE,
                    format!(
                        "the port is given twice ({} and -p {b}): give it once, either as HOST:PORT or with -p",
                        server.trim()
                    ),
                ))
            }
            (Some(p), None) | (None, Some(p)) => p,
            (None, None) => tcptune_transfer::server::DEFAULT_PORT,
        };
        if self.streams > self.max_streams {
            return Err(exit::msg(
                exit::USAGE,
                format!(
                    "-P {} asks for more streams than --max-streams {}: ask for fewer, or raise --max-streams (the server's --max-streams applies too)",
                    self.streams, self.max_streams
                ),
            ));
        }
        if let Some(cc) = &self.congestion {
            if let Some(avail) = available_congestion() {
                if !avail.iter().any(|a| a == cc) {
                    return Err(exit::msg(
                        exit::USAGE,
                        format!(
                            "-C {cc}: this host offers no such congestion control (available: {}); load its module (modprobe tcp_{cc}) or pick one of those",
                            avail.join(", ")
                        ),
                    ));
                }
            }
        }
        let mut c = ClientConfig::new(host.clone());
        c.port = port;
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
        c.wait = self.wait;
        c.on_queued = Some(crate::out::queued_notice());
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
        c.resume_rate = !self.no_resume_rate;
        if let Some(path) = &self.secret_file {
            let secret = super::secret::load(path, "give the file the server was started with")?;
            c.secret = Some(secret);
        }
        // Everything is checked: now start the far end, if over ssh.
        let far = super::ssh::start_for(
            &self.remote,
            self.ssh.as_deref(),
            self.no_path_db,
            (&mut c.server, &mut c.port, &mut c.secret),
        )?;
        let (host, port) = (c.server.clone(), c.port);
        Ok(Plan {
            cfg: c,
            host,
            port,
            far,
        })
    }
}

fn progress_line(p: &Progress) -> String {
    let secs = p.elapsed.as_secs_f64();
    let rate = if secs > 0.0 {
        p.bytes as f64 * 8.0 / secs
    } else {
        0.0
    };
    let done = match p.total_bytes {
        Some(t) if t > 0 => format!(" ({:.0}%)", 100.0 * p.bytes as f64 / t as f64),
        _ => String::new(),
    };
    format!(
        "\r{:>8} {:6.1} s  {:>10}{}  {:>12}  {} stream(s)   ",
        p.phase,
        secs,
        Bytes(p.bytes).human(),
        done,
        human_bps(rate),
        p.streams
    )
}

/// The exit code of a failed run.
fn failure_code(e: &ClientError) -> u8 {
    match e {
        ClientError::Config(_) => exit::USAGE,
        ClientError::Integrity { .. } => exit::INTEGRITY,
        ClientError::Interrupted => exit::INTERRUPTED,
        e if e.is_connection() => exit::CONNECT,
        _ => exit::FAILURE,
    }
}

/// Run `tcptune send`.
pub(crate) fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    let Plan {
        mut cfg,
        host,
        port,
        far,
    } = opts.plan()?;
    let cancel = Cancel::new();
    cfg.cancel = Some(cancel.clone());
    signals::on_stop(move || cancel.trigger())?;
    let show_progress = !opts.no_progress && std::io::stderr().is_terminal();
    let live_intervals = !opts.json;
    if live_intervals {
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        out::line(&format!(
            "Connecting to {host} port {port}, {} stream(s), tune {}, {}",
            opts.streams,
            opts.tune.describe(),
            match opts.duration {
                Some(d) => tcptune_core::format_duration(d),
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
    // Over ssh, the far end exits with the session: wait for it (or end it) now.
    let far = far.map(super::ssh::Far::finish);
    let print = |r: &Report| -> anyhow::Result<()> {
        if opts.json {
            out::json(r)
        } else {
            out::text(&human::summary_with(r, false));
            Ok(())
        }
    };
    match result {
        Ok(report) => {
            // The path database's problems (unreachable, slow, damaged): one line each on
            // stderr; the transfer went on as on a path never seen.
            let db = report.start.tcptune.measurement.as_ref();
            for w in db
                .and_then(|m| m.path_db.as_ref())
                .map_or(&[][..], |d| &d.warnings)
            {
                eprintln!("tcptune: warning: {w}");
            }
            print(&report)?;
            if report.end.tcptune.interrupted {
                eprintln!(
                    "tcptune: interrupted ({}): the figures above are what moved until then",
                    signals::fired().unwrap_or_else(|| "stop signal".into())
                );
                return Ok(ExitCode::from(exit::INTERRUPTED));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            let code = failure_code(&e);
            if let Some(report) = e.report() {
                print(report)?;
            } else if opts.json {
                let interrupted = matches!(e, ClientError::Interrupted);
                out::json(&FailureReport::new(e.to_string()).with_exit(code, interrupted))?;
            }
            match &far {
                Some(f) => Err(exit::fail(code, f.explain(e))),
                None => Err(exit::fail(code, e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_found_in_every_spelling_of_a_host() {
        assert_eq!(split_port("10.0.0.2"), ("10.0.0.2".into(), None));
        assert_eq!(split_port("10.0.0.2:5999"), ("10.0.0.2".into(), Some(5999)));
        assert_eq!(split_port("[::1]:5999"), ("::1".into(), Some(5999)));
        assert_eq!(split_port("[::1]"), ("::1".into(), None));
        assert_eq!(split_port("::1"), ("::1".into(), None));
        assert_eq!(split_port("host.example"), ("host.example".into(), None));
    }
}
