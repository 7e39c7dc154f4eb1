//! `tcptune watch`: a live, top-like view of this host's TCP connections (inet_diag netlink,
//! IPv4 and IPv6) and what limits each one.

use crate::args::{self, ms, secs};
use crate::{exit, out};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tcptune_core::Rate;
use tcptune_doctor::diag::{dump_tcp, DiagSocket};
use tcptune_doctor::procmap::socket_owners;
use tcptune_doctor::watch::metrics::{WatchMetrics, DEFAULT_MAX_CONNECTION_SERIES};
use tcptune_doctor::watch::{
    filter_rows, render_table, sort_rows, AddrMatch, Filter, HintContext, LimitKind, ProcessMatch,
    SortKey, TableStyle, Tracker, WatchReport, WATCH_SCHEMA_VERSION,
};
use tcptune_metrics::{Exporter, ExporterConfig, Registry};

/// Options of `tcptune watch`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = "\
Columns: RTT ms (smoothed), CWND segs, DELIV (the kernel's delivery rate estimate, bit/s),
RATE (bits acknowledged or received per second since the last refresh; --once looks twice,
--interval apart), SNDBUF/RCVBUF fill (the buffer's size, and how full it is: the kernel
counts its bookkeeping too, so a busy buffer shows 'full'), RWND% and SBUF% (share of the
connection's busy time limited by the peer's receive window or by this host's send buffer,
since the last refresh, or over --interval with --once), RETR segs
(retransmitted segments). Connections limited more than 10% of
the time are highlighted with a one-line hint: which limit to raise, and to what.

Examples:
  tcptune watch                       live view, refreshed every second
  tcptune watch --port 5201 --once    one snapshot of connections to/from port 5201
  tcptune watch --process iperf3      only iperf3's connections (reads /proc/*/fd)
  tcptune watch --once --json         for scripts
  tcptune watch --limited --target 1gbit   limited connections, hints sized for 1 Gbit/s
  tcptune watch --metrics 127.0.0.1:9310 --port 5310   Prometheus metrics of one service

With --metrics, /metrics on ADDR serves connections by limiting factor (receive_window,
send_buffer, congestion_window, application, receiving) and, for the connections that moved
the most bytes (at most --metrics-max-connections), series of their own; the rest are summed
and counted (tcptune_watch_unlisted_connections). The table is then shown only on a
terminal; --json still prints a line per refresh. docs/grafana/tcptune.json is a dashboard
for these metrics.")]
pub(crate) struct Opts {
    /// Print one snapshot and exit (it looks twice, --interval apart, to measure RATE).
    #[arg(long, conflicts_with = "count")]
    once: bool,

    /// Print JSON (with --once one document; otherwise one line per refresh).
    #[arg(long)]
    json: bool,

    /// Time between refreshes.
    #[arg(long, default_value = "1s", value_parser = args::duration(ms(50), secs(3600)), value_name = "DURATION")]
    interval: Duration,

    /// Stop after this many refreshes (default: run until interrupted).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,

    /// Only connections with this local or remote port.
    #[arg(long)]
    port: Option<u16>,

    /// Only connections with this local or remote address, or in this network (ADDR/PREFIX).
    #[arg(long, value_name = "ADDR[/PREFIX]", value_parser = parse_addr)]
    addr: Option<AddrMatch>,

    /// Only connections of this process (pid, or part of the command name). Maps sockets to
    /// processes through /proc/*/fd, which costs time on busy hosts.
    #[arg(long, value_name = "PID|NAME", value_parser = parse_process)]
    process: Option<ProcessMatch>,

    /// Show the owning pid/command of each connection (reads /proc/*/fd every refresh).
    #[arg(long)]
    show_process: bool,

    /// Only connections limited by the receive window or the send buffer.
    #[arg(long)]
    limited: bool,

    /// Sort by: rate, rtt, cwnd, limited, sndbuf, rcvbuf, retrans, peer.
    #[arg(long, default_value = "rate", value_parser = parse_sort)]
    sort: SortKey,

    /// Size the hints for this rate per connection (e.g. 1gbit, 500Mbit/s).
    #[arg(long, value_name = "RATE", value_parser = args::rate(Rate(1_000), Rate(10_000_000_000_000)))]
    target: Option<Rate>,

    /// Show at most this many connections (default: what fits the terminal; all with --once).
    #[arg(long, value_name = "N")]
    max_rows: Option<usize>,

    /// No colors even on a terminal.
    #[arg(long)]
    no_color: bool,

    /// Serve Prometheus metrics on ADDR (e.g. 127.0.0.1:9310, [::]:9310) at /metrics.
    #[arg(long, value_name = "ADDR", conflicts_with = "once")]
    metrics: Option<String>,

    /// Most connections with metric series of their own (the busiest); the others are
    /// only summed.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTION_SERIES)]
    metrics_max_connections: usize,
}

fn parse_addr(s: &str) -> Result<AddrMatch, String> {
    s.parse()
}

fn parse_process(s: &str) -> Result<ProcessMatch, String> {
    s.parse()
}

fn parse_sort(s: &str) -> Result<SortKey, String> {
    s.parse()
}

fn terminal_rows() -> Option<usize> {
    // SAFETY: TIOCGWINSZ fills a winsize; a zeroed winsize is valid input.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: fd 1 and a valid pointer to ws.
    let r = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_row > 0).then_some(usize::from(ws.ws_row))
}

/// Run `tcptune watch`.
pub(crate) fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    let mut sock = DiagSocket::open().map_err(|e| exit::fail(exit::ENVIRONMENT, e))?;
    let ctx = HintContext {
        limits: tcptune_sys::sysctl::read_host_limits().ok(),
        target: opts.target,
    };
    let filter = Filter {
        port: opts.port,
        addr: opts.addr,
        process: opts.process.clone(),
        limited_only: opts.limited,
    };
    let tty = std::io::stdout().is_terminal();
    let live = !opts.once && !opts.json && tty;
    let (metrics, _exporter) = match &opts.metrics {
        Some(addr) => {
            let (m, e) = start_metrics(addr, opts.metrics_max_connections)?;
            (Some(m), Some(e))
        }
        None => (None, None),
    };
    // A metrics service prints nothing but what was asked for.
    let table = live || (metrics.is_none() && !opts.json);
    let style = TableStyle {
        color: tty && !opts.no_color,
        owner: opts.show_process || opts.process.is_some(),
        max_rows: match (opts.max_rows, live) {
            (Some(n), _) => n,
            (None, true) => terminal_rows().map_or(40, |r| r.saturating_sub(4).max(5)),
            (None, false) => 0,
        },
    };
    let need_owners = style.owner;
    let start = Instant::now();
    let mut tracker = Tracker::new();
    let mut refresh = 0u64;
    if opts.once {
        // A first look, so that RATE (bytes since the previous look) is known.
        let conns = dump_tcp(&mut sock).map_err(|e| exit::fail(exit::ENVIRONMENT, e))?;
        let _ = tracker.rows(start.elapsed(), conns, &ctx);
        std::thread::sleep(opts.interval);
    }
    loop {
        let t0 = Instant::now();
        let conns = dump_tcp(&mut sock).map_err(|e| exit::fail(exit::ENVIRONMENT, e))?;
        let dump_us = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
        let total = conns.len();
        let mut rows = tracker.rows(start.elapsed(), conns, &ctx);
        if need_owners {
            let owners = socket_owners(std::path::Path::new("/proc"));
            for r in &mut rows {
                r.owner = owners.get(&r.inode).cloned();
            }
        }
        let mut rows = filter_rows(rows, &filter);
        sort_rows(&mut rows, opts.sort);
        if let Some(m) = &metrics {
            m.update(&rows, Duration::from_micros(dump_us));
        }
        let count = |k: LimitKind| {
            rows.iter()
                .filter(|r| r.limit.as_ref().is_some_and(|l| l.kind == k))
                .count()
        };
        let report = WatchReport {
            schema_version: WATCH_SCHEMA_VERSION,
            refresh,
            total,
            limited_by_rwnd: count(LimitKind::ReceiveWindow),
            limited_by_sndbuf: count(LimitKind::SendBuffer),
            dump_us,
            connections: rows,
        };
        if opts.json {
            if opts.once {
                out::json(&report)?;
            } else {
                out::line(&serde_json::to_string(&report)?);
            }
        } else if table {
            let table = render_table(&report, style);
            if live {
                // Home the cursor and clear the screen, as top does.
                out::text(&format!("\x1b[H\x1b[2J{table}"));
            } else {
                out::text(&table);
                if !opts.once {
                    out::line("");
                }
            }
        }
        refresh += 1;
        if opts.once || opts.count.is_some_and(|n| refresh >= n) {
            return Ok(ExitCode::from(exit::OK));
        }
        std::thread::sleep(opts.interval.saturating_sub(t0.elapsed()));
    }
}

/// Start the exporter of `--metrics`; its first line on stderr says where it listens.
fn start_metrics(addr: &str, max_series: usize) -> anyhow::Result<(WatchMetrics, Exporter)> {
    let metrics = WatchMetrics::new(max_series);
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let exporter = Exporter::start(addr, Arc::new(registry), ExporterConfig::default())
        .map_err(|e| exit::fail(exit::ENVIRONMENT, e))?;
    eprintln!(
        "tcptune watch: serving metrics on http://{}/metrics",
        exporter.local_addr()
    );
    Ok((metrics, exporter))
}
