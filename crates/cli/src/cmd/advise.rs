//! `tcptune advise HOST[:PORT]`: ask a tcptune server which socket buffers and how many
//! streams an application should use on the path between this host and it, with the exact
//! `setsockopt` calls and sysctl changes (Enable's advice).

use crate::args::{self, ms, secs};
use crate::exit;
use crate::out;
use serde::Serialize;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tcptune_core::pathdb::Direction;
use tcptune_core::{human_bps, human_duration, Bytes, HostLimits};
use tcptune_sys::os::unix_now;
use tcptune_transfer::advice::{Advice, Host, Sockopt, Sysctl};
use tcptune_transfer::client::advise::{advise, AdviceResult, AdviseConfig};
use tcptune_transfer::client::ClientError;

/// Options of `tcptune advise`.
///
/// Asks a `tcptune serve` server for the buffer sizes and the number of parallel streams
/// that fill the path between this host and it: from the server's path database when it
/// measured the path in the last day (any transfer or advice from this host counts), else
/// after a measurement of a few round trips (a second or so; a server measures each
/// address at most twice a minute). The numbers are tcptune's own `--tune auto` plan for
/// that path, for any application to set before it connects.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  tcptune advise dtn.example.org                 # sending to dtn.example.org
  tcptune advise dtn.example.org -R --json       # receiving from it, as JSON
  tcptune advise 10.0.0.2:5310 --fresh           # measure now, even if the server knows
  tcptune advise --ssh alice@dtn2                # no server: the far end is started over ssh

The advice is for an application on this host that sends (or with -R receives) data to (or
from) a peer on the server's host, or on a host with the same limits:
  * the sender sets SO_SNDBUF (and optionally TCP_NOTSENT_LOWAT), the receiver SO_RCVBUF,
    before connect() or listen(); setting both to buffer_bytes serves either role;
  * with more than one stream, the data is split over that many connections;
  * the sysctl lines raise a host's net.core.*mem_max so that fewer streams do it.
In a script: tcptune advise HOST --json | jq .buffer_bytes (README, 'Advice for any
application', has a Python example).

Exit status: 0 success, 1 failure, 2 usage, 3 connection (refused, unreachable, rejected or
refused by the server: a recent measurement, busy, wrong secret).")]
pub(crate) struct Opts {
    /// Server: HOST, HOST:PORT or [IPV6]:PORT (a running `tcptune serve`).
    #[arg(value_name = "HOST[:PORT]", required_unless_present = "ssh")]
    server: Option<String>,
    /// Instead of a server, start the far end on [USER@]HOST over ssh (as `tcptune cp
    /// HOST:PATH` does) and measure the path to it.
    #[arg(long, value_name = "[USER@]HOST", conflicts_with_all = ["server", "port", "secret_file"])]
    ssh: Option<String>,
    #[command(flatten)]
    remote: super::ssh::SshOpts,
    /// Server port when HOST has none (default 5310).
    #[arg(short = 'p', long)]
    port: Option<u16>,
    /// The application receives (the server's host sends); by default it sends.
    #[arg(short = 'R', long)]
    reverse: bool,
    /// Most parallel streams the application will open.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=256))]
    max_streams: u32,
    /// Ask the server to measure now, even if its database knows the path (at most twice a
    /// minute per address; otherwise the database's numbers come with a note).
    #[arg(long)]
    fresh: bool,
    /// With --ssh: start the far end with --no-path-db (serve --stdio --no-path-db): it
    /// neither reads nor records the path in the remote user's database, so the advice is
    /// measured now. (A running server's database is the server's to keep.)
    #[arg(long)]
    no_path_db: bool,
    /// The application may use SO_SNDBUFFORCE/SO_RCVBUFFORCE (it has CAP_NET_ADMIN): the
    /// advice is then not capped by this host's net.core.*mem_max.
    #[arg(long)]
    force_buffers: bool,
    /// Local address to connect from.
    #[arg(short = 'B', long, value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// File holding the shared secret of a server started with --secret-file.
    #[arg(long, value_name = "FILE")]
    secret_file: Option<PathBuf>,
    /// Give up connecting, or waiting for the server's answer, after this long.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = args::duration(ms(10), secs(3600)))]
    connect_timeout: Duration,
    /// When the server has no session slot free, wait this long in its queue (its place is
    /// printed on stderr as it changes), then fail (seconds, or with a unit; 0: do not wait).
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = args::seconds(Duration::ZERO, secs(86_400)))]
    wait: Duration,
    /// Print the advice as JSON (schema_version 1, docs/schema/advise.schema.json).
    #[arg(long)]
    json: bool,
}

/// Version of `advise --json`.
const SCHEMA_VERSION: u32 = 1;

/// A host's buffer limits, units in the names.
#[derive(Serialize)]
struct LimitsDoc {
    wmem_max_bytes: u64,
    rmem_max_bytes: u64,
    tcp_wmem_bytes: [u64; 3],
    tcp_rmem_bytes: [u64; 3],
    moderate_rcvbuf: bool,
    can_force: bool,
}

impl From<&HostLimits> for LimitsDoc {
    fn from(l: &HostLimits) -> Self {
        LimitsDoc {
            wmem_max_bytes: l.wmem_max.0,
            rmem_max_bytes: l.rmem_max.0,
            tcp_wmem_bytes: l.tcp_wmem.map(|b| b.0),
            tcp_rmem_bytes: l.tcp_rmem.map(|b| b.0),
            moderate_rcvbuf: l.moderate_rcvbuf,
            can_force: l.can_force,
        }
    }
}

#[derive(Serialize)]
struct BothLimits {
    /// This host's.
    local: LimitsDoc,
    /// The server's host's.
    server: LimitsDoc,
}

#[derive(Serialize)]
struct UnboundedDoc {
    sndbuf_bytes: u64,
    rcvbuf_bytes: u64,
    streams: u32,
}

#[derive(Serialize)]
struct MeasurementDoc {
    seconds: Option<f64>,
    streams: Option<u32>,
    rounds: Option<u32>,
}

/// `advise --json`.
#[derive(Serialize)]
struct AdviseDoc<'a> {
    schema_version: u32,
    server: String,
    direction: Direction,
    rtt_ms: f64,
    rate_bps: u64,
    rate_is_lower_bound: bool,
    bdp_bytes: u64,
    buffer_bytes: u64,
    sndbuf_bytes: u64,
    rcvbuf_bytes: u64,
    notsent_lowat_bytes: u64,
    streams: u32,
    streams_reason: Option<&'a str>,
    limits: BothLimits,
    unbounded: UnboundedDoc,
    measured_at: String,
    measured_at_unix_s: f64,
    age_s: f64,
    source: &'static str,
    samples: u32,
    measurement: Option<MeasurementDoc>,
    note: Option<&'a str>,
    setsockopt: Vec<Sockopt>,
    sysctl: Vec<Sysctl>,
    seconds: f64,
}

fn doc(r: &AdviceResult) -> AdviseDoc<'_> {
    let a = &r.advice;
    let p = &a.path;
    let at = p.measured_at_unix_s.max(0.0);
    AdviseDoc {
        schema_version: SCHEMA_VERSION,
        server: r.server.to_string(),
        direction: a.direction,
        rtt_ms: p.rtt_us as f64 / 1000.0,
        rate_bps: p.rate_bps,
        rate_is_lower_bound: !p.full_pipe,
        bdp_bytes: a.bdp_bytes,
        buffer_bytes: a.buffer_bytes(),
        sndbuf_bytes: a.sizing.sndbuf_bytes,
        rcvbuf_bytes: a.sizing.rcvbuf_bytes,
        notsent_lowat_bytes: a.sizing.notsent_lowat_bytes,
        streams: a.sizing.streams,
        streams_reason: a.streams_reason.as_deref(),
        limits: BothLimits {
            local: LimitsDoc::from(&a.client_limits),
            server: LimitsDoc::from(&a.server_limits),
        },
        unbounded: UnboundedDoc {
            sndbuf_bytes: a.unbounded.sndbuf_bytes,
            rcvbuf_bytes: a.unbounded.rcvbuf_bytes,
            streams: a.unbounded.streams,
        },
        measured_at: super::serve::rfc3339(at as u64, ((at.fract()) * 1000.0) as u32),
        measured_at_unix_s: at,
        age_s: (unix_now() - at).max(0.0),
        source: p.source.as_str(),
        samples: p.samples,
        measurement: p.measure_streams.map(|streams| MeasurementDoc {
            seconds: p.measure_seconds,
            streams: Some(streams),
            rounds: p.measure_rounds,
        }),
        note: p.note.as_deref(),
        setsockopt: a.sockopts(),
        sysctl: a.sysctls(),
        seconds: r.seconds,
    }
}

fn host_name(h: Host) -> &'static str {
    match h {
        Host::Local => "this host",
        Host::Server => "the server's host",
    }
}

/// The advice for people.
fn text(r: &AdviceResult) -> String {
    let a: &Advice = &r.advice;
    let p = &a.path;
    let mut s = String::new();
    let way = match a.direction {
        Direction::Send => "sending to",
        Direction::Receive => "receiving from",
    };
    let whence = match (p.measure_streams, p.measure_seconds) {
        (Some(n), Some(secs)) => format!(
            "measured now with {n} streams in {}",
            human_duration(Duration::from_secs_f64(secs.min(1e9)))
        ),
        _ => {
            let age = (unix_now() - p.measured_at_unix_s).max(0.0);
            format!(
                "the server's path database: {} sample(s), {} old",
                p.samples,
                human_duration(Duration::from_secs_f64(age.min(1e9)))
            )
        }
    };
    s += &format!("advice for {way} {} ({whence})\n", r.server);
    s += &format!(
        "path: RTT {}, {} ({}), bandwidth-delay product {}\n",
        human_duration(Duration::from_micros(p.rtt_us)),
        human_bps(p.rate_bps as f64),
        if p.full_pipe {
            "the path's rate: the pipe was full"
        } else {
            "at least: a lower bound, the path may be faster"
        },
        Bytes(a.bdp_bytes).human()
    );
    if let Some(n) = &p.note {
        s += &format!("note: {n}\n");
    }
    s += &format!(
        "use {} stream(s){}, each with:\n",
        a.sizing.streams,
        a.streams_reason
            .as_deref()
            .map_or(String::new(), |r| format!(" ({r})"))
    );
    for c in a.sockopts() {
        s += &format!(
            "  {:<18} {} {}{}, {}:  {}\n",
            format!("{}:", host_name(c.host)),
            c.option,
            Bytes(c.value_bytes).human(),
            if c.optional { " (optional)" } else { "" },
            c.when,
            c.c
        );
    }
    s += &format!(
        "  (or set SO_SNDBUF and SO_RCVBUF both to {} at both ends)\n",
        Bytes(a.buffer_bytes()).human()
    );
    let sysctls = a.sysctls();
    if sysctls.is_empty() {
        s += "limits: both hosts allow these buffers; nothing to raise\n";
    } else {
        s += &format!(
            "limits: to fill the path with {} stream(s) instead of {}, raise (as root):\n",
            a.unbounded.streams, a.sizing.streams
        );
        for c in &sysctls {
            s += &format!(
                "  {:<18} {}   (now {})\n",
                format!("{}:", host_name(c.host)),
                c.command,
                Bytes(c.current_bytes).human()
            );
        }
        s += "  (add the same key = value lines to /etc/sysctl.d/90-tcptune.conf to keep them)\n";
    }
    s
}

/// The exit code of a failed advice.
fn failure_code(e: &ClientError) -> u8 {
    match e {
        ClientError::Config(_) => exit::USAGE,
        e if e.is_connection() => exit::CONNECT,
        _ => exit::FAILURE,
    }
}

/// Run `tcptune advise`.
pub(crate) fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    let server = opts.server.as_deref().unwrap_or("");
    let (host, spec_port) = super::send::split_port(server);
    if opts.no_path_db && opts.ssh.is_none() {
        return Err(exit::msg(
            exit::USAGE,
            "--no-path-db is for --ssh (the far end it starts); a running server keeps its own path database",
        ));
    }
    if host.is_empty() && opts.ssh.is_none() {
        return Err(exit::msg(
            exit::USAGE,
            "no server given: tcptune advise HOST[:PORT]",
        ));
    }
    let port = match (spec_port, opts.port) {
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
    let mut cfg = AdviseConfig::new(host);
    cfg.port = port;
    cfg.bind = opts.bind;
    cfg.direction = if opts.reverse {
        Direction::Receive
    } else {
        Direction::Send
    };
    cfg.max_streams = opts.max_streams;
    cfg.fresh = opts.fresh;
    cfg.force_buffers = opts.force_buffers;
    cfg.connect_timeout = opts.connect_timeout;
    cfg.wait = opts.wait;
    cfg.on_queued = Some(crate::out::queued_notice());
    if let Some(path) = &opts.secret_file {
        let secret = super::secret::load(path, "give the file the server was started with")?;
        cfg.secret = Some(secret);
    }
    let far = super::ssh::start_for(
        &opts.remote,
        opts.ssh.as_deref(),
        opts.no_path_db,
        (&mut cfg.server, &mut cfg.port, &mut cfg.secret),
    )?;
    let result = advise(&cfg);
    // Over ssh, the far end exits with the session: wait for it (or end it) now.
    let far = far.map(super::ssh::Far::finish);
    match result {
        Ok(r) => {
            if opts.json {
                out::json(&doc(&r))?;
            } else {
                out::text(&text(&r));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            let code = failure_code(&e);
            match &far {
                Some(f) => Err(exit::fail(code, f.explain(e))),
                None => Err(exit::fail(code, e)),
            }
        }
    }
}
