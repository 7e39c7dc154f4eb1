//! `watch`'s model: successive inet_diag dumps in, rows out. Pure: the caller passes `now`
//! (a monotonic duration), the sockets and the host limits; [`Tracker`] keeps the previous
//! counters of each connection (by socket cookie) so shares of time limited by the receive
//! window or the send buffer are measured over the last refresh, not the connection's life.
//!
//! Call order: build a [`Tracker`], then for each refresh call [`Tracker::rows`] with the
//! new dump, then [`filter_rows`] / [`sort_rows`] and [`render_table`] (and, for
//! `--metrics`, [`metrics::WatchMetrics::update`]).

use crate::diag::DiagConn;
use crate::procmap::Owner;
use crate::sizing::{human_bytes, human_duration, human_rate};
use serde::Serialize;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;
use tcptune_core::{Bytes, HostLimits, Rate};

pub mod factor;
pub mod metrics;

pub use factor::{limiting_factor, LimitingFactor};

/// Version of the `watch --json` schema.
pub const WATCH_SCHEMA_VERSION: u32 = 1;

/// The share of busy time from which a connection counts as limited.
pub const LIMITED_SHARE: f64 = 0.10;

/// What limits a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// The peer's advertised receive window.
    ReceiveWindow,
    /// This host's send buffer.
    SendBuffer,
}

/// A limitation and what to do about it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Limit {
    /// What limits.
    pub kind: LimitKind,
    /// Share of the connection's busy time spent limited by it (0..1).
    pub share: f64,
    /// One line: raise which limit, to what.
    pub hint: String,
}

/// Over what time the limited shares were measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareBasis {
    /// Since the previous refresh.
    Interval,
    /// Since the connection started (first sight, or `--once`).
    Lifetime,
}

/// One connection, ready to show.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// Local address.
    pub local: SocketAddr,
    /// Peer address.
    pub peer: SocketAddr,
    /// TCP state as `ss` names it.
    pub state: &'static str,
    /// Congestion control.
    pub congestion: Option<String>,
    /// Socket cookie (stable identity).
    pub cookie: u64,
    /// Socket inode.
    pub inode: u32,
    /// Owning process, when looked up.
    pub owner: Option<Owner>,
    /// Smoothed RTT (us).
    pub rtt_us: u32,
    /// Minimum RTT (us).
    pub min_rtt_us: Option<u32>,
    /// Congestion window (segments).
    pub cwnd_segs: u32,
    /// Congestion window (bytes).
    pub cwnd_bytes: u64,
    /// The kernel's delivery rate estimate (bit/s).
    pub delivery_rate_bps: Option<u64>,
    /// The delivery rate sample was limited by the application (not the network).
    pub app_limited: bool,
    /// Bytes acknowledged per second over the last refresh (bit/s).
    pub send_rate_bps: Option<u64>,
    /// Bytes received per second over the last refresh (bit/s).
    pub recv_rate_bps: Option<u64>,
    /// Send buffer size (`sk_sndbuf`).
    pub sndbuf_bytes: Option<u32>,
    /// Send buffer in use (`sk_wmem_queued`).
    pub sndbuf_used_bytes: Option<u32>,
    /// Receive buffer size (`sk_rcvbuf`).
    pub rcvbuf_bytes: Option<u32>,
    /// Receive buffer in use (`sk_rmem_alloc`).
    pub rcvbuf_used_bytes: Option<u32>,
    /// The peer's advertised window.
    pub snd_wnd_bytes: Option<u32>,
    /// The window this host advertises.
    pub rcv_wnd_bytes: Option<u32>,
    /// Retransmitted segments over the connection's life.
    pub retrans_segs: u32,
    /// Share of busy time limited by the peer's receive window.
    pub rwnd_limited: Option<f64>,
    /// Share of busy time limited by this host's send buffer.
    pub sndbuf_limited: Option<f64>,
    /// What the shares cover.
    pub share_basis: ShareBasis,
    /// The dominant limitation, when a share passes [`LIMITED_SHARE`].
    pub limit: Option<Limit>,
    /// Share of the time since the last refresh the connection had data to send
    /// (`tcpi_busy_time` over wall time); `None` on first sight.
    pub busy_share: Option<f64>,
    /// Bytes acknowledged over the connection's life.
    pub bytes_acked: Option<u64>,
    /// Bytes received over the connection's life.
    pub bytes_received: Option<u64>,
    /// What limits it, in one word ([`factor::limiting_factor`]).
    pub factor: LimitingFactor,
}

#[derive(Clone, Copy, Debug)]
struct Prev {
    at: Duration,
    busy_us: u64,
    rwnd_us: u64,
    sndbuf_us: u64,
    acked: u64,
    received: u64,
}

/// Remembers each connection's counters between refreshes.
#[derive(Debug, Default)]
pub struct Tracker {
    prev: HashMap<u64, Prev>,
}

/// What the hints are sized for.
#[derive(Clone, Debug, Default)]
pub struct HintContext {
    /// The host's buffer limits, if readable.
    pub limits: Option<HostLimits>,
    /// The rate the user wants one connection to reach (`--target`).
    pub target: Option<Rate>,
}

fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| (part as f64 / whole as f64).clamp(0.0, 1.0))
}

fn rate_over(bytes: u64, dt: Duration) -> Option<u64> {
    (dt > Duration::ZERO).then(|| Rate::from_bytes_over(Bytes(bytes), dt).bits_per_sec())
}

impl Tracker {
    /// A tracker that has seen nothing.
    pub fn new() -> Tracker {
        Tracker::default()
    }

    /// Turn one dump into rows; `now` is a monotonic time (the same clock every call).
    /// Connections not in this dump are forgotten.
    pub fn rows(&mut self, now: Duration, conns: Vec<DiagConn>, ctx: &HintContext) -> Vec<Row> {
        let mut next = HashMap::with_capacity(conns.len());
        let mut rows = Vec::with_capacity(conns.len());
        // Both ends of connections within this namespace (loopback) are in the dump: the
        // receiving socket's buffer tells a locked SO_RCVBUF from autotuning's cap.
        let rcvbufs: HashMap<(SocketAddr, SocketAddr), PeerBuf> = conns
            .iter()
            .filter_map(|c| {
                let t = c.tcp.as_ref()?;
                Some((
                    (c.local, c.remote),
                    PeerBuf {
                        size: t.rcvbuf_bytes?,
                        used: t.rmem_alloc_bytes.unwrap_or(0),
                    },
                ))
            })
            .collect();
        for c in conns {
            let Some(t) = c.tcp.as_ref() else {
                continue;
            };
            let cur = Prev {
                at: now,
                busy_us: t.busy_time_us.unwrap_or(0),
                rwnd_us: t.rwnd_limited_us.unwrap_or(0),
                sndbuf_us: t.sndbuf_limited_us.unwrap_or(0),
                acked: t.bytes_acked.unwrap_or(0),
                received: t.bytes_received.unwrap_or(0),
            };
            let prev = self.prev.get(&c.cookie).copied();
            let (basis, rwnd, sndbuf, send_rate, recv_rate, busy_share) = match prev {
                Some(p) if cur.busy_us >= p.busy_us && now > p.at => {
                    let busy = cur.busy_us - p.busy_us;
                    let dt = now - p.at;
                    let dt_us = u64::try_from(dt.as_micros()).unwrap_or(u64::MAX);
                    (
                        ShareBasis::Interval,
                        ratio(cur.rwnd_us.saturating_sub(p.rwnd_us), busy),
                        ratio(cur.sndbuf_us.saturating_sub(p.sndbuf_us), busy),
                        rate_over(cur.acked.saturating_sub(p.acked), dt),
                        rate_over(cur.received.saturating_sub(p.received), dt),
                        t.busy_time_us.and_then(|_| ratio(busy, dt_us)),
                    )
                }
                _ => (
                    ShareBasis::Lifetime,
                    t.rwnd_limited_us.and_then(|v| ratio(v, cur.busy_us)),
                    t.sndbuf_limited_us.and_then(|v| ratio(v, cur.busy_us)),
                    None,
                    None,
                    None,
                ),
            };
            next.insert(c.cookie, cur);
            let mut row = Row {
                local: c.local,
                peer: c.remote,
                state: c.state.ss_name(),
                congestion: c.congestion.clone(),
                cookie: c.cookie,
                inode: c.inode,
                owner: None,
                rtt_us: t.rtt_us,
                min_rtt_us: t.min_rtt_us,
                cwnd_segs: t.snd_cwnd_segs,
                cwnd_bytes: t.cwnd_bytes(),
                delivery_rate_bps: t.delivery_rate_bytes_per_sec.map(|b| b.saturating_mul(8)),
                app_limited: t.delivery_rate_app_limited,
                send_rate_bps: send_rate,
                recv_rate_bps: recv_rate,
                sndbuf_bytes: t.sndbuf_bytes,
                sndbuf_used_bytes: t.wmem_queued_bytes,
                rcvbuf_bytes: t.rcvbuf_bytes,
                rcvbuf_used_bytes: t.rmem_alloc_bytes,
                snd_wnd_bytes: t.snd_wnd_bytes,
                rcv_wnd_bytes: t.rcv_wnd_bytes,
                retrans_segs: t.total_retrans_segs,
                rwnd_limited: rwnd,
                sndbuf_limited: sndbuf,
                share_basis: basis,
                limit: None,
                busy_share,
                bytes_acked: t.bytes_acked,
                bytes_received: t.bytes_received,
                factor: LimitingFactor::Application,
            };
            let peer = rcvbufs.get(&(row.peer, row.local)).copied();
            row.limit = limit_of(&row, peer, ctx);
            row.factor = limiting_factor(&row);
            rows.push(row);
        }
        self.prev = next;
        rows
    }
}

/// The receive buffer of a connection's other end, when that end is a socket of this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerBuf {
    /// `sk_rcvbuf`.
    pub size: u32,
    /// `sk_rmem_alloc`: memory holding data not yet read.
    pub used: u32,
}

/// The dominant limitation of a row and its hint.
pub fn limit_of(row: &Row, peer: Option<PeerBuf>, ctx: &HintContext) -> Option<Limit> {
    let rwnd = row.rwnd_limited.unwrap_or(0.0);
    let sndbuf = row.sndbuf_limited.unwrap_or(0.0);
    if rwnd.max(sndbuf) < LIMITED_SHARE {
        return None;
    }
    let rtt = Duration::from_micros(u64::from(row.min_rtt_us.unwrap_or(row.rtt_us).max(1)));
    let wanted = ctx.target.map(|r| r.bdp(rtt).0.saturating_mul(2));
    let target_words = ctx
        .target
        .map(|r| format!(" for {}", human_rate(r.bits_per_sec())))
        .unwrap_or_default();
    // A closed window means the reader stalls; the send buffer then fills too, and the
    // kernel books the time as send-buffer limited (it ranks above receive-window limited).
    let window_closed = row.snd_wnd_bytes == Some(0);
    if rwnd >= sndbuf || window_closed {
        let w = u64::from(row.snd_wnd_bytes.unwrap_or(0));
        let ceiling = Rate::from_bytes_over(Bytes(w), rtt).bits_per_sec();
        let head = format!(
            "receive window {} caps it at {} at {} RTT",
            human_bytes(w),
            human_rate(ceiling),
            human_duration(rtt)
        );
        let peer_full = peer.is_some_and(|p| u64::from(p.used) * 2 >= u64::from(p.size));
        let hint = match (wanted, peer.map(|p| p.size), &ctx.limits) {
            _ if w == 0 || peer_full => format!(
                "{head}: the receiver's buffer is full, so the receiving application reads \
                 too slowly (no buffer setting helps; look at the reader)"
            ),
            (Some(want), _, _) if want / 2 <= w => format!(
                "{head}, already more than{target_words}: the receiving application reads \
                 too slowly"
            ),
            (_, Some(rb), Some(l)) if u64::from(rb).saturating_mul(10) < l.tcp_rmem[2].0 * 9 => {
                let to = wanted.unwrap_or(u64::from(rb).saturating_mul(2));
                format!(
                    "{head}: the receiving socket's buffer is fixed at {} (probably its \
                     application set SO_RCVBUF; autotuning could grow it to {}): drop the \
                     setting, or set at least {}{target_words} (net.core.rmem_max caps it at \
                     twice {})",
                    human_bytes(u64::from(rb)),
                    human_bytes(l.tcp_rmem[2].0),
                    human_bytes(to),
                    human_bytes(l.rmem_max.0)
                )
            }
            // A receiver on this host whose window stays far below what autotuning could
            // reach: autotuning is off for that socket, so its application set SO_RCVBUF
            // (raising tcp_rmem would change nothing).
            (_, None, Some(l))
                if row.peer.ip().is_loopback() && w.saturating_mul(4) < l.tcp_rmem[2].0 =>
            {
                let to = wanted.unwrap_or(w.saturating_mul(4));
                format!(
                    "{head}: the receiving application locked its buffer (it set SO_RCVBUF, \
                     which turns autotuning off; autotuning could grow it to {}, net.ipv4.tcp_rmem \
                     max): drop the setting, or set at least {}{target_words} (net.core.rmem_max \
                     caps it at twice {})",
                    human_bytes(l.tcp_rmem[2].0),
                    human_bytes(to),
                    human_bytes(l.rmem_max.0)
                )
            }
            _ => {
                let to = wanted.unwrap_or(w.saturating_mul(4));
                let who = if row.peer.ip().is_loopback() {
                    "this host's"
                } else {
                    "the receiver's"
                };
                let now_cap = match (&ctx.limits, row.peer.ip().is_loopback()) {
                    (Some(l), true) => format!(" (now {})", human_bytes(l.tcp_rmem[2].0)),
                    _ => String::new(),
                };
                let double = if wanted.is_none() {
                    " to double it"
                } else {
                    ""
                };
                format!(
                    "{head}: raise {who} net.ipv4.tcp_rmem max{now_cap} (or the SO_RCVBUF \
                     its application sets) to at least {}{target_words}{double}",
                    human_bytes(to)
                )
            }
        };
        Some(Limit {
            kind: LimitKind::ReceiveWindow,
            share: rwnd.max(sndbuf),
            hint,
        })
    } else {
        let s = u64::from(row.sndbuf_bytes.unwrap_or(0));
        let ceiling = Rate::from_bytes_over(Bytes(tcptune_core::linux::sndbuf_inflight(s)), rtt)
            .bits_per_sec();
        let to = wanted.unwrap_or(s.saturating_mul(2));
        let double = if wanted.is_none() {
            " to double it"
        } else {
            ""
        };
        let hint = match &ctx.limits {
            Some(l) if s.saturating_mul(10) < l.tcp_wmem[2].0.saturating_mul(9) => {
                // SO_SNDBUF(v) stores 2 * min(v, wmem_max): was the request capped?
                let capped = s.saturating_mul(10) >= l.wmem_max.0.saturating_mul(2 * 9);
                let fix = if capped {
                    format!(
                        "raise net.core.wmem_max (now {}) to at least {}{target_words}{double}",
                        human_bytes(l.wmem_max.0),
                        human_bytes(to / 2)
                    )
                } else {
                    format!(
                        "have the application ask for at least {}{target_words}{double} (the \
                         kernel doubles the request) or not set SO_SNDBUF at all",
                        human_bytes(to / 2)
                    )
                };
                format!(
                    "send buffer fixed at {} below autotuning's {} (the application set \
                     SO_SNDBUF, which turns autotuning off): caps it near {} at {} RTT; {fix}",
                    human_bytes(s),
                    human_bytes(l.tcp_wmem[2].0),
                    human_rate(ceiling),
                    human_duration(rtt),
                )
            }
            _ => format!(
                "send buffer {} (autotuning's cap, net.ipv4.tcp_wmem max) caps it near {} at \
                 {} RTT: raise net.ipv4.tcp_wmem max to at least {}{target_words}{double}",
                human_bytes(s),
                human_rate(ceiling),
                human_duration(rtt),
                human_bytes(to)
            ),
        };
        Some(Limit {
            kind: LimitKind::SendBuffer,
            share: sndbuf,
            hint,
        })
    }
}

/// An address filter: one address or a network in CIDR form, matched against either end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddrMatch {
    net: IpAddr,
    prefix: u8,
}

impl FromStr for AddrMatch {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (ip, prefix) = match s.split_once('/') {
            Some((ip, p)) => (ip, Some(p)),
            None => (s, None),
        };
        let net: IpAddr = ip
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("'{s}' is not an IP address or ADDR/PREFIX"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(|| format!("'{s}': prefix must be 0..={max}"))?,
            None => max,
        };
        Ok(AddrMatch { net, prefix })
    }
}

impl AddrMatch {
    /// Whether `ip` lies in the network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// A process filter: a pid, or a substring of the command name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcessMatch {
    /// Exactly this pid.
    Pid(u32),
    /// Command names containing this.
    Name(String),
}

impl FromStr for ProcessMatch {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err("empty process filter".into());
        }
        Ok(match s.parse() {
            Ok(pid) => ProcessMatch::Pid(pid),
            Err(_) => ProcessMatch::Name(s.to_string()),
        })
    }
}

/// Which rows to keep.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Local or peer port.
    pub port: Option<u16>,
    /// Local or peer address.
    pub addr: Option<AddrMatch>,
    /// Owning process (rows need `owner` filled).
    pub process: Option<ProcessMatch>,
    /// Only limited connections.
    pub limited_only: bool,
}

impl Filter {
    /// Whether a row passes.
    pub fn matches(&self, r: &Row) -> bool {
        if let Some(p) = self.port {
            if r.local.port() != p && r.peer.port() != p {
                return false;
            }
        }
        if let Some(a) = &self.addr {
            if !a.contains(r.local.ip()) && !a.contains(r.peer.ip()) {
                return false;
            }
        }
        if let Some(pm) = &self.process {
            let ok = match (&r.owner, pm) {
                (Some(o), ProcessMatch::Pid(pid)) => o.pid == *pid,
                (Some(o), ProcessMatch::Name(n)) => o.comm.contains(n.as_str()),
                (None, _) => false,
            };
            if !ok {
                return false;
            }
        }
        !self.limited_only || r.limit.is_some()
    }
}

/// Keep the rows that pass.
pub fn filter_rows(rows: Vec<Row>, f: &Filter) -> Vec<Row> {
    rows.into_iter().filter(|r| f.matches(r)).collect()
}

/// Sort orders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// Delivery rate, highest first.
    Rate,
    /// RTT, highest first.
    Rtt,
    /// Congestion window, largest first.
    Cwnd,
    /// Most limited first.
    Limited,
    /// Send buffer, largest first.
    Sndbuf,
    /// Receive buffer, largest first.
    Rcvbuf,
    /// Retransmissions, most first.
    Retrans,
    /// Peer address, ascending.
    Peer,
}

impl SortKey {
    /// The accepted spellings.
    pub const NAMES: &'static [&'static str] = &[
        "rate", "rtt", "cwnd", "limited", "sndbuf", "rcvbuf", "retrans", "peer",
    ];
}

impl FromStr for SortKey {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "rate" => SortKey::Rate,
            "rtt" => SortKey::Rtt,
            "cwnd" => SortKey::Cwnd,
            "limited" => SortKey::Limited,
            "sndbuf" => SortKey::Sndbuf,
            "rcvbuf" => SortKey::Rcvbuf,
            "retrans" => SortKey::Retrans,
            "peer" => SortKey::Peer,
            _ => {
                return Err(format!(
                    "unknown sort key '{s}' (one of: {})",
                    SortKey::NAMES.join(", ")
                ))
            }
        })
    }
}

fn limited_share(r: &Row) -> f64 {
    r.rwnd_limited
        .unwrap_or(0.0)
        .max(r.sndbuf_limited.unwrap_or(0.0))
}

/// Sort rows in place (ties broken by peer then local address, so output is stable).
pub fn sort_rows(rows: &mut [Row], key: SortKey) {
    rows.sort_by(|a, b| {
        let primary = match key {
            SortKey::Rate => b.delivery_rate_bps.cmp(&a.delivery_rate_bps),
            SortKey::Rtt => b.rtt_us.cmp(&a.rtt_us),
            SortKey::Cwnd => b.cwnd_bytes.cmp(&a.cwnd_bytes),
            SortKey::Limited => limited_share(b).total_cmp(&limited_share(a)),
            SortKey::Sndbuf => b.sndbuf_bytes.cmp(&a.sndbuf_bytes),
            SortKey::Rcvbuf => b.rcvbuf_bytes.cmp(&a.rcvbuf_bytes),
            SortKey::Retrans => b.retrans_segs.cmp(&a.retrans_segs),
            SortKey::Peer => a.peer.cmp(&b.peer),
        };
        primary
            .then_with(|| a.peer.cmp(&b.peer))
            .then_with(|| a.local.cmp(&b.local))
    });
}

/// The `watch --json` document of one refresh.
#[derive(Clone, Debug, Serialize)]
pub struct WatchReport {
    /// [`WATCH_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Refresh number (0 for the first).
    pub refresh: u64,
    /// Connections in the dump before filtering.
    pub total: usize,
    /// Rows limited by the receive window.
    pub limited_by_rwnd: usize,
    /// Rows limited by the send buffer.
    pub limited_by_sndbuf: usize,
    /// Microseconds the netlink dump took.
    pub dump_us: u64,
    /// The rows shown, sorted.
    pub connections: Vec<Row>,
}

/// How to print the table.
#[derive(Clone, Copy, Debug, Default)]
pub struct TableStyle {
    /// ANSI highlight for limited rows.
    pub color: bool,
    /// Show the pid/command column.
    pub owner: bool,
    /// At most this many rows (0: all).
    pub max_rows: usize,
}

/// A buffer's size and how full it is: `128KiB 40%`; `full` when the kernel's count of
/// what it holds (which includes its bookkeeping) reached the size.
fn buffer_cell(used: Option<u32>, size: Option<u32>) -> String {
    match (used, size) {
        (Some(u), Some(s)) if s > 0 => {
            let fill = if u >= s {
                "full".to_string()
            } else {
                format!("{:.0}%", f64::from(u) * 100.0 / f64::from(s))
            };
            format!("{} {fill}", compact_bytes(u64::from(s)))
        }
        (_, Some(s)) => compact_bytes(u64::from(s)),
        _ => "-".into(),
    }
}

fn compact_bytes(b: u64) -> String {
    human_bytes(b).replace(' ', "")
}

fn compact_rate(bps: Option<u64>) -> String {
    match bps {
        Some(v) => human_rate(v).replace(' ', ""),
        None => "-".into(),
    }
}

fn pct(v: Option<f64>) -> String {
    v.map(|x| format!("{:.0}%", x * 100.0))
        .unwrap_or_else(|| "-".into())
}

/// Render the table (a header, one line per row, a hint line under each limited row).
pub fn render_table(report: &WatchReport, style: TableStyle) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "{} TCP connections, {} shown; limited by receive window: {}, by send buffer: {}; dump {:.1} ms\n",
        report.total,
        report.connections.len(),
        report.limited_by_rwnd,
        report.limited_by_sndbuf,
        report.dump_us as f64 / 1000.0
    ));
    let owner_h = if style.owner {
        format!(" {:<18}", "PID/COMM")
    } else {
        String::new()
    };
    s.push_str(&format!(
        "{:<22} {:<22} {:>8} {:>9} {:>11} {:>11} {:>12} {:>12} {:>5} {:>5} {:>9}{owner_h}\n",
        "LOCAL",
        "PEER",
        "RTT ms",
        "CWND segs",
        "DELIV",
        "RATE",
        "SNDBUF fill",
        "RCVBUF fill",
        "RWND%",
        "SBUF%",
        "RETR segs"
    ));
    let n = if style.max_rows == 0 {
        report.connections.len()
    } else {
        style.max_rows.min(report.connections.len())
    };
    for r in &report.connections[..n] {
        let rate = r.send_rate_bps.max(r.recv_rate_bps);
        let owner = if style.owner {
            format!(
                " {:<18}",
                r.owner
                    .as_ref()
                    .map(|o| format!("{}/{}", o.pid, o.comm))
                    .unwrap_or_else(|| "-".into())
            )
        } else {
            String::new()
        };
        let line = format!(
            "{:<22} {:<22} {:>8.2} {:>9} {:>11} {:>11} {:>12} {:>12} {:>5} {:>5} {:>9}{owner}",
            r.local.to_string(),
            r.peer.to_string(),
            f64::from(r.rtt_us) / 1000.0,
            r.cwnd_segs,
            compact_rate(r.delivery_rate_bps),
            compact_rate(rate),
            buffer_cell(r.sndbuf_used_bytes, r.sndbuf_bytes),
            buffer_cell(r.rcvbuf_used_bytes, r.rcvbuf_bytes),
            pct(r.rwnd_limited),
            pct(r.sndbuf_limited),
            r.retrans_segs,
        );
        match (&r.limit, style.color) {
            (Some(l), true) => {
                s.push_str(&format!("\x1b[1;33m{line}\x1b[0m\n"));
                s.push_str(&format!("  \x1b[33m^ {}\x1b[0m\n", l.hint));
            }
            (Some(l), false) => {
                s.push_str(&format!("{line}\n  ^ {}\n", l.hint));
            }
            (None, _) => {
                s.push_str(&line);
                s.push('\n');
            }
        }
    }
    if n < report.connections.len() {
        s.push_str(&format!(
            "... {} more (--max-rows, --sort, or filters)\n",
            report.connections.len() - n
        ));
    }
    s
}

#[cfg(test)]
mod tests;
