//! `tcptune serve`: serve transfers for `tcptune send` clients.

use crate::exit;
use crate::out;
use serde::Serialize;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tcptune_core::Bytes;
use tcptune_transfer::auth::Secret;
use tcptune_transfer::server::{self, ServerConfig, ServerEvent, Shutdown};

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
  tcptune serve                                  # port 5310 on all addresses
  tcptune serve --bind 10.0.0.2 --secret-file /etc/tcptune.secret
  tcptune serve -1 --json                        # one session, log as JSON lines

Everything (control and data connections) arrives on the one port: one firewall rule.
Refusals are counted by kind; the first of each kind from each address is logged, the rest
in a summary line every 10 s.")]
pub(crate) struct Opts {
    /// Address to listen on.
    #[arg(short = 'B', long, value_name = "ADDR", default_value = "0.0.0.0")]
    bind: IpAddr,
    /// Port of the control connection.
    #[arg(short = 'p', long, default_value_t = server::DEFAULT_PORT)]
    port: u16,
    /// Sessions running at once (more are refused with "server busy" and when to retry).
    #[arg(long, value_name = "N", default_value_t = 16)]
    max_sessions: u32,
    /// Sessions running at once from one address.
    #[arg(long, value_name = "N", default_value_t = 4)]
    max_sessions_per_addr: u32,
    /// Connections not yet in a session (handshakes, early data connections); a new one
    /// beyond this replaces the oldest.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    max_pending: u32,
    /// The same, from one address.
    #[arg(long, value_name = "N", default_value_t = 128)]
    max_pending_per_addr: u32,
    /// Streams per session, including streams a tuner adds.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_streams: u32,
    /// Largest message a client may ask for.
    #[arg(long, value_name = "SIZE", default_value = "16m")]
    max_message_size: Bytes,
    /// Largest total of a message workload.
    #[arg(long, value_name = "SIZE", default_value = "1024g")]
    max_total: Bytes,
    /// Longest duration workload or time cap, seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    max_duration: u64,
    /// Seconds a new connection has to send its first complete message.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    first_frame_timeout: u64,
    /// Seconds a client has to complete its handshake or connect a data stream.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    handshake_timeout: u64,
    /// End a session with no control message and no data for this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    idle_timeout: u64,
    /// Require clients to know the secret in this file (HMAC-SHA256 challenge-response).
    #[arg(long, value_name = "FILE")]
    secret_file: Option<PathBuf>,
    /// Use SO_SNDBUFFORCE/SO_RCVBUFFORCE when privileged (ignores net.core.*mem_max).
    #[arg(long)]
    force_buffers: bool,
    /// Share this directory with `tcptune cp` clients. Every path a client names is resolved
    /// beneath it by the kernel (openat2 RESOLVE_BENEATH): `..`, absolute paths and
    /// symlinks that lead outside are refused. Without it, copies are refused.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Refuse every copy to this server (clients may still copy from it).
    #[arg(long, requires = "root")]
    read_only: bool,
    /// Most files and directories in one copy (each costs the server some memory).
    #[arg(long, value_name = "N", default_value_t = server::DEFAULT_MAX_FILES)]
    max_files: u64,
    /// Exit after the first session.
    #[arg(short = '1', long)]
    one_off: bool,
    /// Log sessions as JSON lines on stdout.
    #[arg(long)]
    json: bool,
}

/// One line of the JSON log.
#[derive(Serialize)]
struct LogLine<'a> {
    schema_version: u32,
    event: &'static str,
    peer: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tune: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    streams: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reverse: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    count: Option<u64>,
}

fn log_event(json: bool, ev: &ServerEvent) {
    let line = match ev {
        ServerEvent::SessionStarted {
            peer,
            session,
            params,
        } => LogLine {
            schema_version: 1,
            event: "session_started",
            peer: peer.to_string(),
            session: Some(session),
            tune: Some(params.tune.to_string()),
            streams: Some(params.streams),
            reverse: Some(params.reverse),
            bytes: None,
            error: None,
            kind: None,
            count: None,
        },
        ServerEvent::SessionEnded {
            peer,
            session,
            bytes,
            error,
        } => LogLine {
            schema_version: 1,
            event: "session_ended",
            peer: peer.to_string(),
            session: Some(session),
            tune: None,
            streams: None,
            reverse: None,
            bytes: Some(*bytes),
            error: error.as_deref(),
            kind: None,
            count: None,
        },
        ServerEvent::Refused { peer, kind, reason } => LogLine {
            schema_version: 1,
            event: "refused",
            peer: peer.to_string(),
            session: None,
            tune: None,
            streams: None,
            reverse: None,
            bytes: None,
            error: Some(reason),
            kind: Some(kind),
            count: None,
        },
        ServerEvent::Suppressed { kind, count, .. } => LogLine {
            schema_version: 1,
            event: "refusals_not_logged",
            peer: String::new(),
            session: None,
            tune: None,
            streams: None,
            reverse: None,
            bytes: None,
            error: None,
            kind: Some(kind),
            count: Some(*count),
        },
    };
    if json {
        if let Ok(s) = serde_json::to_string(&line) {
            out::line(&s);
        }
        return;
    }
    // Everything a client supplied is escaped: no control character reaches the text log.
    let esc = |s: &str| server::escape(s, 300);
    let text = match ev {
        ServerEvent::SessionStarted { params, .. } => format!(
            "{} session {} started: tune {}, {} stream(s), {}{}",
            line.peer,
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
                (None, Some(ms)) => format!("{:.1} s", ms as f64 / 1000.0),
                (None, None) => format!("{} x {}", params.messages, Bytes(params.message_size)),
            },
            if params.reverse { ", server sends" } else { "" }
        ),
        ServerEvent::SessionEnded { bytes, error, .. } => format!(
            "{} session {} ended: {} moved{}",
            line.peer,
            esc(line.session.unwrap_or("")),
            Bytes(*bytes),
            error
                .as_ref()
                .map_or(String::new(), |e| format!(", FAILED: {}", esc(e)))
        ),
        ServerEvent::Refused { reason, kind, .. } => {
            format!("{} refused ({kind}): {}", line.peer, esc(reason))
        }
        ServerEvent::Suppressed {
            kind,
            count,
            seconds,
        } => format!(
            "{count} more refusals of kind {kind} in the last {seconds} s (not logged one by one)"
        ),
    };
    out::line(&text);
}

/// Run `tcptune serve`.
pub(crate) fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    let mut cfg = ServerConfig::default();
    cfg.limits.max_streams = opts.max_streams;
    cfg.limits.max_message_size = opts.max_message_size.0;
    cfg.limits.max_total_bytes = opts.max_total.0;
    cfg.limits.max_duration_ms = opts.max_duration.saturating_mul(1000);
    cfg.max_sessions = opts.max_sessions;
    cfg.max_sessions_per_addr = opts.max_sessions_per_addr;
    cfg.max_pending = opts.max_pending;
    cfg.max_pending_per_addr = opts.max_pending_per_addr;
    cfg.first_frame_timeout = Duration::from_secs(opts.first_frame_timeout.max(1));
    cfg.handshake_timeout = Duration::from_secs(opts.handshake_timeout.max(1));
    cfg.idle_timeout = Duration::from_secs(opts.idle_timeout.max(1));
    cfg.force_buffers = opts.force_buffers;
    cfg.one_off = opts.one_off;
    if let Some(path) = &opts.secret_file {
        cfg.secret = Some(Secret::from_file(path).map_err(|e| exit::fail(exit::USAGE, e))?);
    }
    if let Some(root) = &opts.root {
        if !root.is_dir() {
            return Err(exit::fail(
                exit::USAGE,
                anyhow::anyhow!("--root {}: not a directory", root.display()),
            ));
        }
        let mut share = server::FileShare::new(root.clone());
        share.read_only = opts.read_only;
        share.max_files = opts.max_files.max(1);
        cfg.files = Some(share);
    }
    let json = opts.json;
    cfg.log = Some(Arc::new(move |ev: &ServerEvent| log_event(json, ev)));
    let addr = SocketAddr::new(opts.bind, opts.port);
    let listener = std::net::TcpListener::bind(addr).map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::AddrInUse {
            exit::ENVIRONMENT
        } else {
            exit::FAILURE
        };
        exit::fail(code, anyhow::anyhow!("listening on {addr}: {e}"))
    })?;
    let local = listener.local_addr().unwrap_or(addr);
    if !json {
        out::line(&format!("tcptune serve listening on {local}"));
        out::line(&format!("limits: {}", server::describe_limits(&cfg)));
    }
    let stats =
        server::run(listener, cfg, Shutdown::new()).map_err(|e| exit::fail(exit::FAILURE, e))?;
    if !json {
        out::line(&format!(
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
    }
    Ok(if stats.sessions_failed > 0 && opts.one_off {
        ExitCode::from(exit::FAILURE)
    } else {
        ExitCode::SUCCESS
    })
}
