//! `tcptune serve`: serve transfers for `tcptune send` clients.

mod posture;

use crate::args::{self, ms, secs};
use crate::exit;
use crate::out;
use anyhow::Context;
use serde::Serialize;
use std::fs::File;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcptune_core::{format_duration, Bytes};
use tcptune_transfer::server::{self, QueueOutcome, ServerConfig, ServerEvent, Shutdown};

mod stdio;

/// Options of `tcptune serve`.
///
/// Accepts any number of clients concurrently on one port: each a control connection plus
/// one data connection per stream, which names its session in its first bytes. An event
/// loop handles every connection that is not moving data, so thousands of idle or half-open
/// connections cost memory, not threads. Every bound below protects a public server; a
/// client that misbehaves only ends its own session, and a flood from some addresses does
/// not lock out the others.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  tcptune serve                                  # port 5310, IPv6 and IPv4 on one socket
  tcptune serve -4                               # IPv4 only (0.0.0.0)
  umask 077; tcptune secret new > /etc/tcptune.secret   # make a secret; clients get a copy
  tcptune serve --bind 10.0.0.2 --secret-file /etc/tcptune.secret
  tcptune serve --root /srv/data --secret-file /etc/tcptune.secret   # share files
  tcptune serve --root /srv/data --read-only     # share files for anyone to read
  tcptune serve -1 --json                        # one session, log as JSON lines
  tcptune serve --memory-budget 64m              # psc/auto send buffers of all sessions share 64 MiB
  tcptune serve --logfile /var/log/tcptune.log   # log lines appended to a file

  tcptune serve --metrics 127.0.0.1:9310         # Prometheus metrics on /metrics

`tcptune serve --stdio` is the far end of `tcptune cp HOST:PATH`, `send --ssh` and
`advise --ssh`: the client starts it through ssh, and it is not run by hand. It prints one
line on stdout, `tcptune-stdio 1 addr=IP port=PORT key=HEX` (version 1: the address and
port it listens on, from $SSH_CONNECTION's local address, and a one-time key of 256 random
bits that crosses only the ssh channel and is the session's shared secret), serves that one
session, resolving paths as scp does (relative to $HOME, absolute as given, with the user's
own permissions: no --root), and exits when it ends, when stdin closes (the client or ssh
died) or when no client connected within 30 s.

Everything (control and data connections) arrives on the one port: one firewall rule.
A writable --root without --secret-file on an address other hosts reach is refused (exit 2):
give a secret, listen on loopback (-B 127.0.0.1), add --read-only, or --allow-anonymous-writes.
Every start says its posture in one line (with --json: a `start` record with the limits):
the listening address, auth (shared secret or none), the share (writable, read-only, none).
What the server measures of each client's path (its own TCP_INFO of the data streams) goes
into its path database, bounded per client address and in all, at most a few writes a
minute per address; `tcptune advise` asks the server for it.
Refusals are counted by kind; the first of each kind from each address is logged, the rest
in a summary line every 10 s. Every log line starts with the time (UTC, RFC 3339).

Exit status: 0 success (with -1: the session succeeded), 1 failure (with -1: the session
failed), 2 usage (a bad option, an unreadable or short --secret-file, an unreadable --logfile,
a writable --root open to other hosts), 5 environment (the port is in use, or the address is
not this host's).")]
pub(crate) struct Opts {
    /// Address to listen on (default: every IPv6 and IPv4 address, on one socket).
    #[arg(short = 'B', long, value_name = "ADDR", conflicts_with_all = ["ipv4", "ipv6"])]
    bind: Option<IpAddr>,
    /// Listen on IPv4 only (0.0.0.0).
    #[arg(short = '4', long = "ipv4", conflicts_with = "ipv6")]
    ipv4: bool,
    /// Listen on IPv6 only ([::], no IPv4-mapped addresses).
    #[arg(short = '6', long = "ipv6")]
    ipv6: bool,
    /// Port of the control connection (0: any free port, printed at start).
    #[arg(short = 'p', long, default_value_t = server::DEFAULT_PORT)]
    port: u16,
    /// Sessions running at once (more wait in the queue, see --max-queue).
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    max_sessions: u32,
    /// Sessions running at once from one address (an IPv4 address, an IPv6 /64); not for
    /// clients that prove the --secret-file secret, which only the total limits.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    max_sessions_per_addr: u32,
    /// Connections not yet in a session (handshakes, early data connections); a new one
    /// beyond this replaces the oldest.
    #[arg(long, value_name = "N", default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    max_pending: u32,
    /// The same, from one address.
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..))]
    max_pending_per_addr: u32,
    /// Streams per session, including streams a tuner adds.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_streams: u32,
    /// Largest message a client may ask for.
    #[arg(long, value_name = "SIZE", default_value = "16MiB", value_parser = args::size(Bytes(1), Bytes::mib(1024)))]
    max_message_size: Bytes,
    /// Largest total of a message workload.
    #[arg(long, value_name = "SIZE", default_value = "1024GiB", value_parser = args::size(Bytes(1), Bytes(u64::MAX)))]
    max_total: Bytes,
    /// Longest duration workload or time cap a client may ask for (e.g. 60s, 1h).
    #[arg(long, value_name = "DURATION", default_value = "3600s", value_parser = args::duration(secs(1), secs(30 * 86_400)))]
    max_duration: Duration,
    /// How long a new connection has to send its first complete message.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = args::duration(ms(10), secs(3600)))]
    first_frame_timeout: Duration,
    /// How long a client has to complete its handshake or connect a data stream.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = args::duration(ms(10), secs(3600)))]
    handshake_timeout: Duration,
    /// End a session with no control message and no data for this long.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = args::duration(ms(10), secs(86_400)))]
    idle_timeout: Duration,
    /// Data a session must move per second (either way, after --grace, over --rate-window)
    /// to keep its slot when a new client needs one: the slowest session under it is then
    /// ended to admit the new client. Protocol chatter and trickles are not progress.
    #[arg(long, value_name = "SIZE", default_value = "64KiB", value_parser = args::size(Bytes(1), Bytes(u64::MAX)))]
    min_rate: Bytes,
    /// Time a new session has before its rate is judged (--min-rate).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = args::duration(ms(10), secs(3600)))]
    grace: Duration,
    /// The window a session's rate is measured over (--min-rate). With the default --grace,
    /// a session that moved nothing for 20 s gives up its slot when another client needs it.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = args::duration(ms(100), secs(3600)))]
    rate_window: Duration,
    /// Clients waiting for a slot when every slot is taken (a quarter of them, at least 1,
    /// from one address); more are refused saying when a slot is expected to free.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(0..=65_536))]
    max_queue: u32,
    /// Require clients to know the secret in this file (HMAC-SHA256 challenge-response): at
    /// least 128 bits (see `tcptune secret --help`), made with
    /// `umask 077; tcptune secret new > FILE`.
    #[arg(long, value_name = "FILE")]
    secret_file: Option<PathBuf>,
    /// Use SO_SNDBUFFORCE/SO_RCVBUFFORCE when privileged (ignores net.core.*mem_max).
    #[arg(long)]
    force_buffers: bool,
    /// Careful resume for clients that receive (cp pulls, send --reverse): when a client
    /// says its path is known (a fresh full-pipe measurement) and the RTT this server
    /// measures agrees, its data connections start with a large initial window, each its
    /// share of the path's bandwidth-delay product (64 MiB at most in all) within this
    /// host's send buffer, paced at the path's rate and lifted after two round trips or the
    /// first loss, as `send` does when it pushes. The window comes from a host route to the client that this server
    /// installs while the client's connections open and then removes (as `ip route replace
    /// CLIENT/32 ... initcwnd N`; needs CAP_NET_ADMIN). For clients that send (cp pushes,
    /// send), every connection is offered a 4 MiB receive window from its SYN-ACK on
    /// (at most half net.ipv4.tcp_rmem's maximum; Linux offers 64 KiB), still autotuned, so
    /// that a known path's first burst is taken at once; a data connection that waits for
    /// its session is held to 64 KiB meanwhile. Off by default: it changes this host's
    /// routes on a client's word.
    #[arg(long)]
    careful_resume: bool,
    /// Share this directory with `tcptune cp` clients. Every path a client names is resolved
    /// beneath it by the kernel (openat2 RESOLVE_BENEATH): `..`, absolute paths and
    /// symlinks that lead outside are refused. Without it, copies are refused.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Refuse every copy to this server (clients may still copy from it).
    #[arg(long, requires = "root")]
    read_only: bool,
    /// Serve a writable --root without --secret-file on addresses other hosts reach: anyone
    /// who reaches the port may then write and overwrite files in it. Without this flag
    /// such a server refuses to start (loopback only, -B 127.0.0.1, needs neither).
    #[arg(long)]
    allow_anonymous_writes: bool,
    /// Most files and directories in one copy (each costs the server some memory).
    #[arg(long, value_name = "N", default_value_t = server::DEFAULT_MAX_FILES)]
    max_files: u64,
    /// Largest file a client may push; a manifest that names a larger one is refused
    /// before anything is allocated for it.
    #[arg(long, value_name = "SIZE", default_value = "1TiB", requires = "root", value_parser = args::size(Bytes(1), Bytes(u64::MAX)))]
    max_file_size: Bytes,
    /// Most bytes of a pushed copy's manifest (its paths, sizes and times as sent): what a
    /// client's list of files may take in the server's memory (about as much again once
    /// parsed); a longer list is refused.
    #[arg(long, value_name = "SIZE", default_value = "40MiB", requires = "root", value_parser = args::size(Bytes::kib(64), Bytes::mib(64 * 1024)))]
    max_manifest: Bytes,
    /// Exit after the first session.
    #[arg(short = '1', long)]
    one_off: bool,
    /// Share this much send-buffer memory among the psc and auto streams of every session
    /// this server sends on (clients' --reverse), as PSC's autotuning does: each stream
    /// gets what its congestion window (psc) or its plan (auto) wants, up to a max-min
    /// fair share of the budget recomputed every 500 ms; streams joining or leaving
    /// reshare it within a second. SO_SNDBUF units (the kernel holds about twice). The
    /// shares are logged when streams join or leave and every 5 s; with --samples a
    /// client's report shows each stream's share over time. Other modes (fixed sizes,
    /// kernel) are not bounded by it.
    #[arg(long, value_name = "SIZE")]
    memory_budget: Option<Bytes>,
    /// Log sessions as JSON lines (each with `time` and `schema_version`).
    #[arg(long)]
    json: bool,
    /// Append the log to FILE instead of writing it on stdout.
    #[arg(long, value_name = "FILE")]
    logfile: Option<PathBuf>,
    /// Serve Prometheus metrics on ADDR (e.g. 127.0.0.1:9310, [::]:9310) at /metrics:
    /// sessions, bytes by direction and mode, refusals by reason, handshake times,
    /// throughput by mode, advice (docs/METRICS.md).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Record what the server measures of each client's path in this path database, and
    /// answer `tcptune advise` from it: a SQLite file, or a postgres:// URL shared by a
    /// fleet of hosts (default: $TCPTUNE_PATH_DB or ~/.cache/tcptune/paths.sqlite, as
    /// `tcptune paths` lists).
    #[arg(long, value_name = "FILE|URL", conflicts_with = "no_path_db")]
    path_db: Option<PathBuf>,
    /// Record nothing (every `tcptune advise` is then measured).
    #[arg(long)]
    no_path_db: bool,
    /// Paths one client address (an IPv6 /64) may have in the database; a new one replaces
    /// its own oldest.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    path_db_per_address: u32,
    /// Paths the server records in all; when full, only entries older than a day are
    /// replaced (a flood of addresses cannot push out what is in use).
    #[arg(long, value_name = "N", default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    path_db_max_entries: u32,
    /// Serve one session to a client that started this over ssh (see below); not for
    /// running by hand.
    #[arg(long, conflicts_with_all = ["root", "bind", "ipv4", "ipv6", "port", "secret_file", "one_off", "json", "logfile", "metrics"])]
    stdio: bool,
    /// With --stdio: listen on the first free port of FIRST-LAST (default: any free port),
    /// for a firewall that passes only those.
    #[arg(long, value_name = "FIRST-LAST", requires = "stdio")]
    port_range: Option<tcptune_transfer::remote::PortRange>,
}

/// Where log lines go: stdout, or the end of a file.
#[derive(Clone)]
enum Sink {
    Stdout,
    File(Arc<Mutex<File>>),
}

impl Sink {
    fn line(&self, text: &str) {
        match self {
            Sink::Stdout => out::line(text),
            Sink::File(f) => {
                if let Ok(mut f) = f.lock() {
                    // A full disk must not stop the server; the line is lost.
                    let _ = writeln!(f, "{text}");
                }
            }
        }
    }
}

/// Now as RFC 3339 in UTC with milliseconds: `2026-11-23T17:32:35.123Z`.
pub(crate) fn now_rfc3339() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(now.as_secs(), now.subsec_millis())
}

pub(crate) fn rfc3339(secs: u64, millis: u32) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days, for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// An IPv4 peer on the dual-stack socket shows as IPv4, not `::ffff:a.b.c.d`.
fn show_peer(peer: &SocketAddr) -> String {
    SocketAddr::new(peer.ip().to_canonical(), peer.port()).to_string()
}

/// One line of the JSON log.
#[derive(Serialize)]
struct LogLine<'a> {
    schema_version: u32,
    /// When, RFC 3339 UTC.
    time: String,
    event: &'static str,
    peer: Option<String>,
    session: Option<&'a str>,
    tune: Option<String>,
    streams: Option<u32>,
    reverse: Option<bool>,
    bytes: Option<u64>,
    error: Option<&'a str>,
    kind: Option<&'static str>,
    count: Option<u64>,
    /// Advice: which way the client's data flows (`send`: the client sends).
    direction: Option<&'static str>,
    /// Advice: where the path's numbers came from (`path_db`, `measured`).
    source: Option<&'static str>,
    /// Advice: the path's RTT.
    rtt_us: Option<u64>,
    /// Advice: the path's rate.
    rate_bps: Option<u64>,
    /// Advice: the rate is the path's (else a lower bound).
    full_pipe: Option<bool>,
    /// Queued: the client's place in the queue (from 1).
    place: Option<u32>,
    /// Queue left: `admitted`, `timed_out` or `gone`.
    outcome: Option<&'static str>,
    /// Queue left: how long the client waited.
    waited_ms: Option<u64>,
    /// Share: bulk sessions sharing the server.
    sessions: Option<u32>,
    /// Share: what the path delivers in all, as far as the server knows.
    path_bps: Option<u64>,
}

/// A JSON log line of the memory budget's shares.
#[derive(Serialize)]
struct BudgetLine<'a> {
    schema_version: u32,
    time: String,
    event: &'static str,
    budget_bytes: u64,
    fair_share_bytes: u64,
    held_bytes: u64,
    in_use_bytes: u64,
    shares: Vec<BudgetStreamLine<'a>>,
}

#[derive(Serialize)]
struct BudgetStreamLine<'a> {
    session: &'a str,
    stream: u32,
    wants_bytes: u64,
    held_bytes: u64,
    in_use_bytes: u64,
}

fn log_budget(sink: &Sink, json: bool, ev: &ServerEvent) {
    let ServerEvent::MemoryBudget {
        budget_bytes,
        fair_share_bytes,
        held_bytes,
        in_use_bytes,
        streams,
    } = ev
    else {
        return;
    };
    if json {
        let line = BudgetLine {
            schema_version: LOG_SCHEMA_VERSION,
            time: now_rfc3339(),
            event: "memory_budget",
            budget_bytes: *budget_bytes,
            fair_share_bytes: *fair_share_bytes,
            held_bytes: *held_bytes,
            in_use_bytes: *in_use_bytes,
            shares: streams
                .iter()
                .map(|s| BudgetStreamLine {
                    session: &s.session,
                    stream: s.stream,
                    wants_bytes: s.wants_bytes,
                    held_bytes: s.held_bytes,
                    in_use_bytes: s.in_use_bytes,
                })
                .collect(),
        };
        if let Ok(s) = serde_json::to_string(&line) {
            sink.line(&s);
        }
        return;
    }
    let per: Vec<String> = streams
        .iter()
        .map(|s| {
            format!(
                "{}#{} {} of {}",
                server::escape(&s.session, 40),
                s.stream,
                Bytes(s.held_bytes),
                Bytes(s.wants_bytes)
            )
        })
        .collect();
    sink.line(&format!(
        "{} memory budget: {} of {} held by {} stream(s) ({} in use), fair share {}{}{}",
        now_rfc3339(),
        Bytes(*held_bytes),
        Bytes(*budget_bytes),
        streams.len(),
        Bytes(*in_use_bytes),
        Bytes(*fair_share_bytes),
        if per.is_empty() { "" } else { ": " },
        per.join(", ")
    ));
}

impl LogLine<'_> {
    /// A line of `event` at the current time, every other field unknown.
    fn of(event: &'static str) -> Self {
        LogLine {
            schema_version: LOG_SCHEMA_VERSION,
            time: now_rfc3339(),
            event,
            peer: None,
            session: None,
            tune: None,
            streams: None,
            reverse: None,
            bytes: None,
            error: None,
            kind: None,
            count: None,
            direction: None,
            source: None,
            rtt_us: None,
            rate_bps: None,
            full_pipe: None,
            place: None,
            outcome: None,
            waited_ms: None,
            sessions: None,
            path_bps: None,
        }
    }
}

/// Version of the JSON log lines (2: `time`, canonical IPv4 peers; advice, warning,
/// queued and queue_left lines and their fields were added without breaking version 2's
/// readers).
const LOG_SCHEMA_VERSION: u32 = 2;

fn log_event(sink: &Sink, json: bool, ev: &ServerEvent) {
    if matches!(ev, ServerEvent::MemoryBudget { .. }) {
        return log_budget(sink, json, ev);
    }
    let line = match ev {
        ServerEvent::SessionStarted {
            peer,
            session,
            params,
        } => LogLine {
            peer: Some(show_peer(peer)),
            session: Some(session),
            tune: Some(params.tune.to_string()),
            streams: Some(params.streams),
            reverse: Some(params.reverse),
            ..LogLine::of("session_started")
        },
        ServerEvent::SessionEnded {
            peer,
            session,
            bytes,
            error,
        } => LogLine {
            peer: Some(show_peer(peer)),
            session: Some(session),
            bytes: Some(*bytes),
            error: error.as_deref(),
            ..LogLine::of("session_ended")
        },
        ServerEvent::Refused { peer, kind, reason } => LogLine {
            peer: Some(show_peer(peer)),
            error: Some(reason),
            kind: Some(kind),
            ..LogLine::of("refused")
        },
        ServerEvent::Suppressed { kind, count, .. } => LogLine {
            kind: Some(kind),
            count: Some(*count),
            ..LogLine::of("refusals_not_logged")
        },
        ServerEvent::Advice {
            peer,
            session,
            direction,
            source,
            rtt_us,
            rate_bps,
            full_pipe,
            streams,
        } => LogLine {
            peer: Some(show_peer(peer)),
            session: Some(session),
            streams: Some(*streams),
            direction: Some(match direction {
                tcptune_core::pathdb::Direction::Send => "send",
                tcptune_core::pathdb::Direction::Receive => "receive",
            }),
            source: Some(source),
            rtt_us: Some(*rtt_us),
            rate_bps: Some(*rate_bps),
            full_pipe: Some(*full_pipe),
            ..LogLine::of("advice")
        },
        ServerEvent::Warning { message } => LogLine {
            error: Some(message),
            ..LogLine::of("warning")
        },
        ServerEvent::Resume {
            peer,
            session,
            initcwnd_segs,
            why_not,
        } => LogLine {
            peer: Some(show_peer(peer)),
            session: Some(session),
            count: *initcwnd_segs,
            error: why_not.as_deref(),
            ..LogLine::of("resume")
        },
        ServerEvent::Share {
            peer,
            session,
            rate_bps,
            sessions,
            path_bps,
        } => LogLine {
            peer: Some(show_peer(peer)),
            session: Some(session),
            rate_bps: *rate_bps,
            sessions: Some(*sessions),
            path_bps: *path_bps,
            ..LogLine::of("share")
        },
        ServerEvent::Queued {
            peer,
            session,
            place,
            reason,
        } => LogLine {
            peer: Some(show_peer(peer)),
            session: Some(session),
            place: Some(*place),
            error: Some(reason),
            ..LogLine::of("queued")
        },
        ServerEvent::QueueLeft {
            peer,
            session,
            outcome,
            waited,
        } => LogLine {
            peer: Some(show_peer(peer)),
            session: Some(session),
            outcome: Some(outcome.as_str()),
            waited_ms: Some(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX)),
            ..LogLine::of("queue_left")
        },
        ServerEvent::MemoryBudget { .. } => return,
    };
    if json {
        if let Ok(s) = serde_json::to_string(&line) {
            sink.line(&s);
        }
        return;
    }
    // Everything a client supplied is escaped: no control character reaches the text log.
    let esc = |s: &str| server::escape(s, 300);
    let text = match ev {
        ServerEvent::SessionStarted { params, .. } => format!(
            "{} session {} started: tune {}, {} stream(s), {}{}",
            line.peer.as_deref().unwrap_or(""),
            esc(line.session.unwrap_or("")),
            params.tune,
            params.streams,
            match (&params.files, params.duration_ms) {
                (Some(job), _) if params.reverse => format!(
                    "copy of {} path(s) from the share ({}{})",
                    job.sources.len(),
                    esc(job.sources.first().map_or("", String::as_str)),
                    if job.sources.len() > 1 { ", ..." } else { "" }
                ),
                (Some(job), _) => format!(
                    "copy to '{}' in the share",
                    esc(job.dest.as_deref().unwrap_or(""))
                ),
                (None, Some(ms)) => format_duration(Duration::from_millis(ms)),
                (None, None) => format!("{} x {}", params.messages, Bytes(params.message_size)),
            },
            if params.reverse { ", server sends" } else { "" }
        ),
        ServerEvent::SessionEnded { bytes, error, .. } => format!(
            "{} session {} ended: {} moved{}",
            line.peer.as_deref().unwrap_or(""),
            esc(line.session.unwrap_or("")),
            Bytes(*bytes).human(),
            error
                .as_ref()
                .map_or(String::new(), |e| format!(", FAILED: {}", esc(e)))
        ),
        ServerEvent::Refused { reason, kind, .. } => {
            format!(
                "{} refused ({kind}): {}",
                line.peer.as_deref().unwrap_or(""),
                esc(reason)
            )
        }
        ServerEvent::Suppressed {
            kind,
            count,
            seconds,
        } => format!(
            "{count} more refusals of kind {kind} in the last {seconds} s (not logged one by one)"
        ),
        ServerEvent::MemoryBudget { .. } => return,
        ServerEvent::Advice {
            source,
            rtt_us,
            rate_bps,
            full_pipe,
            streams,
            ..
        } => format!(
            "{} session {} advised ({}, {}): RTT {}, {}{}, {streams} stream(s)",
            line.peer.as_deref().unwrap_or(""),
            esc(line.session.unwrap_or("")),
            line.direction.unwrap_or(""),
            if *source == "measured" {
                "measured now"
            } else {
                "from the path database"
            },
            format_duration(Duration::from_micros(*rtt_us)),
            tcptune_core::human_bps(*rate_bps as f64),
            if *full_pipe { "" } else { " (at least)" }
        ),
        ServerEvent::Warning { message } => format!("warning: {}", esc(message)),
        ServerEvent::Resume {
            initcwnd_segs,
            why_not,
            ..
        } => format!(
            "{} session {} careful resume: {}",
            line.peer.as_deref().unwrap_or(""),
            esc(line.session.unwrap_or("")),
            match (initcwnd_segs, why_not) {
                (Some(n), _) => format!("its streams start with an initial window of {n} segments"),
                (None, Some(w)) => format!("not given: {}", esc(w)),
                (None, None) => "not given".to_string(),
            }
        ),
        ServerEvent::Share {
            rate_bps,
            sessions,
            path_bps,
            ..
        } => format!(
            "{} session {} fair share: {} ({sessions} session(s) share {})",
            line.peer.as_deref().unwrap_or(""),
            esc(line.session.unwrap_or("")),
            rate_bps.map_or_else(
                || "no cap".to_string(),
                |r| format!("paced at {}", tcptune_core::human_bps(r as f64))
            ),
            path_bps.map_or_else(
                || "a path not measured yet".to_string(),
                |r| tcptune_core::human_bps(r as f64)
            ),
        ),
        ServerEvent::Queued { place, reason, .. } => format!(
            "{} session {} waits in the queue at place {place}: {}",
            line.peer.as_deref().unwrap_or(""),
            esc(line.session.unwrap_or("")),
            esc(reason)
        ),
        ServerEvent::QueueLeft {
            outcome, waited, ..
        } => format!(
            "{} session {} left the queue after {}: {}",
            line.peer.as_deref().unwrap_or(""),
            esc(line.session.unwrap_or("")),
            format_duration(*waited),
            match outcome {
                QueueOutcome::Admitted => "admitted",
                QueueOutcome::TimedOut => "no slot freed in time (refused)",
                QueueOutcome::Gone => "the client gave up",
            }
        ),
    };
    sink.line(&format!("{} {text}", line.time));
}

/// The listener `opts` asks for, and a note when IPv6 is not available here.
fn listen(opts: &Opts) -> anyhow::Result<(TcpListener, Option<String>)> {
    let in_use = |addr: String, e: std::io::Error| {
        let (code, hint) = match e.kind() {
            std::io::ErrorKind::AddrInUse => (
                exit::ENVIRONMENT,
                "another program listens there: stop it, or pick another port with -p",
            ),
            std::io::ErrorKind::AddrNotAvailable => (
                exit::ENVIRONMENT,
                "that address is not one of this host's: see `ip addr`, or leave out -B",
            ),
            std::io::ErrorKind::PermissionDenied => (
                exit::ENVIRONMENT,
                "ports below 1024 need root: pick a port above 1023 with -p",
            ),
            _ => (exit::FAILURE, "check -B and -p"),
        };
        exit::msg(code, format!("listening on {addr}: {e} ({hint})"))
    };
    if let Some(ip) = opts.bind {
        let addr = SocketAddr::new(ip, opts.port);
        return TcpListener::bind(addr)
            .map(|l| (l, None))
            .map_err(|e| in_use(addr.to_string(), e));
    }
    let v4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), opts.port);
    if opts.ipv4 {
        return TcpListener::bind(v4)
            .map(|l| (l, None))
            .map_err(|e| in_use(v4.to_string(), e));
    }
    let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), opts.port);
    match tcptune_sys::net::listen_any_v6(opts.port, opts.ipv6, 1024).map_err(|e| e.source) {
        Ok(l) => Ok((l, None)),
        Err(e) if !opts.ipv6 && e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
            let l = TcpListener::bind(v4).map_err(|e| in_use(v4.to_string(), e))?;
            Ok((
                l,
                Some("IPv6 is not available on this host: IPv4 only".into()),
            ))
        }
        Err(e) => Err(in_use(v6.to_string(), e)),
    }
}

/// The address `opts` asks to listen on (before binding it).
fn intended_addr(opts: &Opts) -> SocketAddr {
    let ip = match (opts.bind, opts.ipv4) {
        (Some(ip), _) => ip,
        (None, true) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        (None, false) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    SocketAddr::new(ip, opts.port)
}

/// The IP versions the bound socket `local` accepts.
fn ip_versions(opts: &Opts, local: &SocketAddr) -> &'static [&'static str] {
    let dual = opts.bind.is_none() && !opts.ipv6 && local.ip() == Ipv6Addr::UNSPECIFIED;
    match local {
        SocketAddr::V6(_) if dual => &["ipv6", "ipv4"],
        SocketAddr::V6(a) if a.ip().to_ipv4_mapped().is_some() => &["ipv4"],
        SocketAddr::V6(_) => &["ipv6"],
        SocketAddr::V4(_) => &["ipv4"],
    }
}

/// The server's bounds from `opts` (limits, sessions, timeouts, slots, buffers, memory
/// budget): the same for a service and for the far end of `--stdio`.
fn bounds(opts: &Opts) -> anyhow::Result<ServerConfig> {
    let mut cfg = ServerConfig::default();
    cfg.limits.max_streams = opts.max_streams;
    cfg.limits.max_message_size = opts.max_message_size.0;
    cfg.limits.max_total_bytes = opts.max_total.0;
    cfg.limits.max_duration_ms = u64::try_from(opts.max_duration.as_millis()).unwrap_or(u64::MAX);
    cfg.max_sessions = opts.max_sessions;
    cfg.max_sessions_per_addr = opts.max_sessions_per_addr;
    cfg.max_pending = opts.max_pending;
    cfg.max_pending_per_addr = opts.max_pending_per_addr;
    cfg.first_frame_timeout = opts.first_frame_timeout;
    cfg.handshake_timeout = opts.handshake_timeout;
    cfg.idle_timeout = opts.idle_timeout;
    cfg.slots.min_rate = opts.min_rate.0;
    cfg.slots.grace = opts.grace;
    cfg.slots.window = opts.rate_window;
    cfg.slots.max_queue = opts.max_queue;
    cfg.slots.max_queue_per_addr = (opts.max_queue / 4).max(1);
    cfg.force_buffers = opts.force_buffers;
    cfg.careful_resume = opts.careful_resume;
    if let Some(b) = opts.memory_budget {
        if b.0 < 64 * 1024 {
            return Err(exit::fail(
                exit::USAGE,
                anyhow::anyhow!(
                    "--memory-budget {b} is too small: every stream is entitled to 16 KiB, so a budget below 64 KiB cannot carry even four"
                ),
            ));
        }
        cfg.memory_budget = Some(b.0);
    }
    Ok(cfg)
}

/// What one pushed copy may claim of `share`, from `opts`.
fn share_bounds(opts: &Opts, mut share: server::FileShare) -> server::FileShare {
    share.max_files = opts.max_files.max(1);
    share.max_file_size = opts.max_file_size.0;
    share.max_manifest_bytes = opts.max_manifest.0;
    share
}

/// Run `tcptune serve`.
pub(crate) fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    if opts.stdio {
        return stdio::run(&opts);
    }
    let mut cfg = bounds(&opts)?;
    cfg.one_off = opts.one_off;
    if let Some(path) = &opts.secret_file {
        let secret = super::secret::load(
            path,
            &format!("make one with `{}`", super::secret::MAKE_ONE),
        )?;
        cfg.secret = Some(secret);
    }
    if let Some(root) = &opts.root {
        if !root.is_dir() {
            return Err(exit::fail(
                exit::USAGE,
                anyhow::anyhow!("--root {}: not a directory", root.display()),
            ));
        }
        let mut share = share_bounds(&opts, server::FileShare::new(root.clone()));
        share.read_only = opts.read_only;
        cfg.files = Some(share);
    }
    if let Some(why) = posture::refusal(
        intended_addr(&opts),
        opts.root.as_deref(),
        opts.read_only,
        cfg.secret.is_some(),
        opts.allow_anonymous_writes,
    ) {
        return Err(exit::msg(exit::USAGE, why));
    }
    let sink = match &opts.logfile {
        Some(path) => {
            let f = File::options()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| {
                    format!(
                        "--logfile: opening {} for appending (does its folder exist, may this user write there?)",
                        path.display()
                    )
                })
                .map_err(|e| exit::fail(exit::USAGE, e))?;
            Sink::File(Arc::new(Mutex::new(f)))
        }
        None => Sink::Stdout,
    };
    let json = opts.json;
    let log_sink = sink.clone();
    cfg.log = Some(Arc::new(move |ev: &ServerEvent| {
        log_event(&log_sink, json, ev)
    }));
    cfg.path_db = if opts.no_path_db {
        None
    } else {
        opts.path_db
            .clone()
            .or_else(tcptune_transfer::pathdb::default_location)
    };
    cfg.path_db_bounds = tcptune_core::pathdb::RecordBounds {
        per_group: opts.path_db_per_address as usize,
        max_entries: opts.path_db_max_entries as usize,
    };
    let _exporter = match &opts.metrics {
        Some(addr) => {
            let metrics = Arc::new(server::ServeMetrics::new());
            let mut registry = tcptune_metrics::Registry::default();
            metrics.register(&mut registry);
            let exporter = tcptune_metrics::Exporter::start(
                addr,
                Arc::new(registry),
                tcptune_metrics::ExporterConfig::default(),
            )
            .map_err(|e| {
                exit::msg(
                    exit::ENVIRONMENT,
                    format!("--metrics: {e} (is the address this host's, and the port free?)"),
                )
            })?;
            eprintln!(
                "tcptune serve: serving metrics on http://{}/metrics",
                exporter.local_addr()
            );
            cfg.metrics = Some(metrics);
            Some(exporter)
        }
        None => None,
    };
    let (listener, note) = listen(&opts)?;
    let local = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), opts.port));
    let stamp = |text: &str| sink.line(&format!("{} {text}", now_rfc3339()));
    let posture = posture::Posture {
        listen: local,
        ip_versions: ip_versions(&opts, &local),
        cfg: &cfg,
    };
    if json {
        let record = posture.record(now_rfc3339(), cfg.path_db.as_deref());
        if let Ok(s) = serde_json::to_string(&record) {
            sink.line(&s);
        }
    } else {
        let family = match (opts.bind, opts.ipv4, opts.ipv6) {
            (Some(_), _, _) => "",
            (None, true, _) => " (IPv4 only)",
            (None, _, true) => " (IPv6 only)",
            (None, false, false) if local.is_ipv6() => " (IPv6 and IPv4)",
            _ => "",
        };
        stamp(&format!("tcptune serve listening on {local}{family}"));
        if let Some(n) = &note {
            stamp(&format!("note: {n}"));
        }
        stamp(&posture.line());
        stamp(&format!("limits: {}", server::describe_limits(&cfg)));
        stamp(&match &cfg.path_db {
            Some(p) => {
                let shown = tcptune_pathdb::describe_location(p);
                format!("path database: {shown} (tcptune paths --path-db {shown} lists it)")
            }
            None => "path database: none (--no-path-db)".into(),
        });
        if let Some(b) = cfg.memory_budget {
            stamp(&format!(
                "memory budget: {} of send buffers shared by the psc and auto streams of every session (max-min fair, recomputed every 500 ms)",
                Bytes(b)
            ));
        }
    }
    let stats =
        server::run(listener, cfg, Shutdown::new()).map_err(|e| exit::fail(exit::FAILURE, e))?;
    if !json {
        stamp(&format!(
            "served {} session(s), {} failed; {} connection(s) refused or dropped{}",
            stats.sessions_ok,
            stats.sessions_failed,
            stats.refused,
            if stats.refused_by.is_empty() {
                String::new()
            } else {
                format!(
                    " ({})",
                    stats
                        .refused_by
                        .iter()
                        .map(|(k, n)| format!("{k} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ));
        if stats.queue_admitted + stats.queue_gave_up > 0 {
            stamp(&format!(
                "of the clients that waited in the queue, {} were admitted and {} gave up",
                stats.queue_admitted, stats.queue_gave_up
            ));
        }
    }
    Ok(if stats.sessions_failed > 0 && opts.one_off {
        ExitCode::from(exit::FAILURE)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_times_are_rfc3339_utc() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_449_952, 7), "2026-11-23T16:05:52.007Z");
        assert_eq!(rfc3339(951_782_400, 999), "2000-02-29T00:00:00.999Z");
    }

    #[test]
    fn the_queue_lines_escape_what_a_client_chose() {
        let path = std::env::temp_dir().join(format!("tcptune-queue-log-{}", std::process::id()));
        let file = File::create(&path).expect("log file");
        let sink = Sink::File(Arc::new(Mutex::new(file)));
        let peer: SocketAddr = "[2001:db8::1]:4000".parse().expect("addr");
        let session = "ab\u{1b}[2Jcd".to_string();
        log_event(
            &sink,
            false,
            &ServerEvent::Queued {
                peer,
                session: session.clone(),
                place: 3,
                reason: "server busy: all 16 session slots are in use".into(),
            },
        );
        log_event(
            &sink,
            false,
            &ServerEvent::QueueLeft {
                peer,
                session,
                outcome: QueueOutcome::Gone,
                waited: Duration::from_millis(2500),
            },
        );
        let text = std::fs::read_to_string(&path).expect("read log");
        let _ = std::fs::remove_file(&path);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(!text.contains('\u{1b}'), "{text:?}");
        assert!(
            lines[0].ends_with(
                "waits in the queue at place 3: server busy: all 16 session slots are in use"
            ),
            "{text}"
        );
        assert!(lines[0].contains("[2001:db8::1]:4000 session ab"), "{text}");
        assert!(lines[1].ends_with(": the client gave up"), "{text}");
        assert!(lines[1].contains("left the queue after 2.5"), "{text}");
    }

    #[test]
    fn ipv4_peers_of_the_dual_stack_socket_show_as_ipv4() {
        let mapped: SocketAddr = "[::ffff:10.0.0.2]:4000".parse().expect("addr");
        assert_eq!(show_peer(&mapped), "10.0.0.2:4000");
        let v6: SocketAddr = "[2001:db8::1]:4000".parse().expect("addr");
        assert_eq!(show_peer(&v6), "[2001:db8::1]:4000");
    }
}
