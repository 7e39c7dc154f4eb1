//! What the agent sets on a destination's connections, from its path-database entries and
//! this host's limits (pure), and the program's per-socket rule as a reference model.
//!
//! The rules:
//! * Only fresh entries count; a destination without one is observed only.
//! * The send buffer is sized at 1.75 x the path's BDP (as `auto` sizes it), requested with
//!   `SO_SNDBUF` (the kernel stores twice the request, capped at `net.core.wmem_max`). It is
//!   set only when what the kernel would store exceeds what autotuning reaches by itself
//!   (`tcp_wmem[2]`): locking a buffer turns autotuning off, so a smaller lock would make the
//!   socket worse. The same holds for the receive buffer (2 x BDP, `rmem_max`,
//!   `tcp_rmem[2]`), which is set only on passive sockets, after the SYN (before it, the lock
//!   would also fix the window scale).
//! * Pacing (`SO_MAX_PACING_RATE`) only from a full-pipe measurement of the path, at its rate
//!   divided by the destination's connections that share it (those that have sent 64 KiB, and
//!   those opened within two handshake RTTs of each other; an idle control connection opened
//!   earlier takes no share), re-shared while the cap holds: pacing at a lower bound would cap a
//!   connection at what an earlier one happened to reach.
//! * A larger initial window (`TCP_BPF_IW`, half the BDP in segments, as careful resume does)
//!   only with that pacing, within what the socket's send buffer holds and
//!   [`MAX_INITIAL_BURST_BYTES`].
//! * A receive window offered from the handshake on to the destination's connections to a
//!   listener of the agent's cgroup (half the BDP, as large as a careful-resume sender's
//!   first window), within what `SO_RCVBUF` could give any application's listener under
//!   `net.core.rmem_max`, half `tcp_rmem[2]` and [`MAX_LISTEN_OFFER_BYTES`]: a listener
//!   opened under the agent holds the largest known destination's offer
//!   ([`listen_offer`]), and a peer without a policy is answered the window Linux offered
//!   before 6.10 ([`STRANGER_WINDOW_BYTES`], [`initial_receive_window`]).
//! * Everything applies only while the handshake RTT is inside the entry's RTT bucket (a
//!   rerouted path is another path), and never to a buffer the application fixed itself.

use crate::maps::{PolicyValue, POLICY_FULL_PIPE};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;
use tcptune_core::linux::{rcvbuf_window, sndbuf_payload};
use tcptune_core::pathdb::{rtt_bucket_range, Direction, PathEntry};

/// The send buffer's target, as a multiple of the BDP (`auto`'s sizing).
pub const SNDBUF_BDP_FACTOR: f64 = 1.75;
/// The receive buffer's target, as a multiple of the BDP (half of it is window at
/// `tcp_adv_win_scale` 1).
pub const RCVBUF_BDP_FACTOR: f64 = 2.0;
/// The segment size assumed for the initial window.
pub const MSS: u64 = 1448;
/// The most one connection's initial window may send before its first ACK, bytes: the
/// budget `tcptune serve --careful-resume` gives one session (its `RESUME_MAX_BURST_BYTES`,
/// 64 MiB: a 100 ms path at 5 Gbit/s fits half its BDP). A bad entry (a huge rate) costs
/// at most this, paced at the entry's rate.
pub const MAX_INITIAL_BURST_BYTES: u64 = 64 << 20;
/// The smallest initial window worth setting (the kernel's default is 10).
pub const MIN_INITIAL_WINDOW: u64 = 10;
/// The initial receive window a listener the agent raised gives a peer without a policy,
/// bytes: what Linux offered every connection before 6.10 (its SYN-ACK's unscaled 16-bit
/// window, RFC 7323), answered at `RWND_INIT` in whole segments of [`MSS`]
/// ([`stranger_segments`]: 45 x 1448 = 65160 bytes; with a jumbo MTU 45 segments are
/// more). A stranger's window grows from there as any connection's does, with the data it
/// sends. Not held: a connection accepted through a SYN cookie (the listener's SYN queue
/// overflowed), which the kernel opens without asking the program (`cookie_v4_check` takes
/// the route's `initrwnd`), and gets the listener's offer.
pub const STRANGER_WINDOW_BYTES: u64 = 65_535;
/// The largest receive window a listener is offered for its known peers, bytes, whatever the
/// host's limits (`SO_RCVLOWAT` takes at most half `tcp_rmem[2]`, 16 MiB by default).
///
/// The offer is a budget question before it is a speed one. Every connection the listener
/// accepts inherits its buffer, a stranger's too: its first window is held to 64 KiB at
/// `RWND_INIT`, but the window then grows with the data it sends, and an application that
/// does not read lets it fill the buffer (20.5 MB queued against 100 KB for a plain
/// listener, measured with a 12.5 MB offer). And the buffer stays with the listener after
/// the agent detaches (nothing lowers a buffer without locking it). So the offer is also
/// kept within what `SO_RCVBUF` could give any application's listener under
/// `net.core.rmem_max` (the window of twice it: 4 MiB on this host's defaults), the limit
/// an operator sets on one socket's receive memory; `--raise-limits` raises it for the
/// known paths.
pub const MAX_LISTEN_OFFER_BYTES: u64 = 16 << 20;

/// The host's socket-buffer limits (bytes), as the kernel uses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostLimits {
    /// `net.core.wmem_max`: the largest `SO_SNDBUF` request.
    pub wmem_max: u64,
    /// `net.core.rmem_max`: the largest `SO_RCVBUF` request.
    pub rmem_max: u64,
    /// `net.ipv4.tcp_wmem[2]`: where send autotuning stops.
    pub tcp_wmem_max: u64,
    /// `net.ipv4.tcp_rmem[2]`: where receive autotuning stops.
    pub tcp_rmem_max: u64,
}

impl HostLimits {
    /// Read them from `/proc/sys` (the thin driver).
    pub fn read() -> std::io::Result<HostLimits> {
        let one = |key: &str| -> std::io::Result<u64> {
            let path = format!("/proc/sys/{key}");
            let text = std::fs::read_to_string(&path)?;
            text.split_whitespace()
                .last()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{path}: no number in {text:?}"),
                    )
                })
        };
        Ok(HostLimits {
            wmem_max: one("net/core/wmem_max")?,
            rmem_max: one("net/core/rmem_max")?,
            tcp_wmem_max: one("net/ipv4/tcp_wmem")?,
            tcp_rmem_max: one("net/ipv4/tcp_rmem")?,
        })
    }
}

/// Choices that are not in the path database.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyOptions {
    /// A congestion control to set on tuned connections (`None`: the host's default).
    pub congestion: Option<String>,
}

/// What the agent sets on one destination's connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `SO_SNDBUF` request, bytes (0: leave to autotuning).
    pub sndbuf_request: u32,
    /// `SO_RCVBUF` request at `PASSIVE_ESTABLISHED`, bytes (0: leave).
    pub rcvbuf_request: u32,
    /// The path's rate for pacing, bytes/s (0: no pacing).
    pub pacing_bytes_per_s: u64,
    /// `TCP_BPF_IW`, segments (0: none).
    pub initial_window: u32,
    /// The receive window this destination's connections to a listener of the agent's
    /// cgroup are offered from the handshake on, bytes (0: no more than a stranger's).
    pub receive_window: u32,
    /// `TCP_CONGESTION`.
    pub congestion: Option<String>,
    /// The RTT bucket the settings hold in, `[lo, hi)` microseconds.
    pub rtt_lo_us: u32,
    /// End of the bucket.
    pub rtt_hi_us: u32,
    /// The entry's rate was a full pipe's.
    pub full_pipe: bool,
    /// The path's rate, bit/s (for messages).
    pub rate_bps: u64,
    /// `--override-app-buffers`: an application's `SO_SNDBUF` request below this is raised to it
    /// (the socket keeps autotuning, and the send buffer above): what the path needs, within
    /// what autotuning or this policy reach, so that ignoring a request never leaves the
    /// socket a smaller buffer than the application asked for.
    pub need_snd: u32,
    /// The same for `SO_RCVBUF`.
    pub need_rcv: u32,
    /// What limits the settings, with the fix (for advice and logs).
    pub limits: Vec<String>,
}

/// `4 MiB`, `512 KiB`, `21.9 MB` for sizes that are not a power of two.
pub fn human_bytes(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) && b < 1 << 20 {
        format!("{} KiB", b >> 10)
    } else if b >= 1_000_000 {
        format!("{:.1} MB", b as f64 / 1e6)
    } else {
        format!("{b} B")
    }
}

fn to_u32(v: u64) -> u32 {
    u32::try_from(v)
        .unwrap_or(i32::MAX as u32)
        .min(i32::MAX as u32)
}

/// One buffer: the request to make, or 0 when autotuning reaches as far; and a note when the
/// sysctl cap is what limits it.
fn buffer(
    target: u64,
    cap: u64,
    autotune_reach: u64,
    cap_name: &str,
    autotune_name: &str,
    limits: &mut Vec<String>,
) -> u32 {
    let request = target.div_ceil(2).min(cap);
    let in_kernel = request.saturating_mul(2);
    if target > cap.saturating_mul(2) {
        limits.push(format!(
            "capped by {cap_name} {}: {} reaches the path's rate (sysctl -w {cap_name}={})",
            human_bytes(cap),
            human_bytes(target),
            target.div_ceil(2)
        ));
    }
    if in_kernel <= autotune_reach {
        if target > autotune_reach {
            limits.push(format!(
                "{autotune_name} {} is as far as {cap_name} allows: left to autotuning",
                human_bytes(autotune_reach)
            ));
        }
        return 0;
    }
    to_u32(request)
}

/// The settings for a destination from its send and receive entries (one RTT bucket);
/// `None` when neither gives anything to set.
pub fn settings_for(
    send: Option<&PathEntry>,
    receive: Option<&PathEntry>,
    limits: &HostLimits,
    opts: &PolicyOptions,
) -> Option<Settings> {
    let main = send.or(receive)?;
    let (lo, hi) = rtt_bucket_range(main.rtt_bucket);
    let micros = |d: Duration| to_u32(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    let bdp = |e: &PathEntry| -> u64 {
        (e.rate_bps as f64 / 8.0 * e.min_rtt_us as f64 / 1e6).min(u64::MAX as f64 / 4.0) as u64
    };
    let mut notes = Vec::new();
    let sndbuf_request = send.map_or(0, |e| {
        buffer(
            (bdp(e) as f64 * SNDBUF_BDP_FACTOR) as u64,
            limits.wmem_max,
            limits.tcp_wmem_max,
            "net.core.wmem_max",
            "tcp_wmem[2]",
            &mut notes,
        )
    });
    let rcvbuf_request = receive.or(send).map_or(0, |e| {
        buffer(
            (bdp(e) as f64 * RCVBUF_BDP_FACTOR) as u64,
            limits.rmem_max,
            limits.tcp_rmem_max,
            "net.core.rmem_max",
            "tcp_rmem[2]",
            &mut notes,
        )
    });
    // An application's request below the need is raised to it under --override-app-buffers: the
    // socket then reaches what autotuning (request units: half of tcp_*mem[2]) or this
    // policy's request reach, never less than the application asked for.
    let need = |e: Option<&PathEntry>, factor: f64, reach: u64, request: u32| -> u32 {
        e.map_or(0, |e| {
            let want = ((bdp(e) as f64 * factor) as u64).div_ceil(2);
            to_u32(want.min((reach / 2).max(u64::from(request))))
        })
    };
    let need_snd = need(send, SNDBUF_BDP_FACTOR, limits.tcp_wmem_max, sndbuf_request);
    let need_rcv = need(
        receive.or(send),
        RCVBUF_BDP_FACTOR,
        limits.tcp_rmem_max,
        rcvbuf_request,
    );
    let full = send.filter(|e| e.full_pipe);
    let pacing_bytes_per_s = full.map_or(0, |e| e.rate_bps / 8);
    let initial_window = full.map_or(0, |e| {
        // What the socket's send buffer holds: the policy's, or autotuning's largest.
        let sk_sndbuf = if sndbuf_request > 0 {
            u64::from(sndbuf_request).min(limits.wmem_max) * 2
        } else {
            limits.tcp_wmem_max
        };
        let burst = (bdp(e) / 2)
            .min(sndbuf_payload(sk_sndbuf))
            .min(MAX_INITIAL_BURST_BYTES);
        let segs = burst / MSS;
        if segs > MIN_INITIAL_WINDOW {
            to_u32(segs)
        } else {
            0
        }
    });
    let receive_window = receive.or(send).map_or(0, |e| {
        let offer = (bdp(e) / 2)
            .min(rcvbuf_window(limits.rmem_max.saturating_mul(2)))
            .min(limits.tcp_rmem_max / 2)
            .min(MAX_LISTEN_OFFER_BYTES);
        if offer > STRANGER_WINDOW_BYTES {
            to_u32(offer)
        } else {
            0
        }
    });
    let s = Settings {
        sndbuf_request,
        rcvbuf_request,
        pacing_bytes_per_s,
        initial_window,
        receive_window,
        congestion: opts.congestion.clone(),
        rtt_lo_us: micros(lo),
        rtt_hi_us: micros(hi).max(1),
        full_pipe: main.full_pipe,
        rate_bps: main.rate_bps,
        need_snd,
        need_rcv,
        limits: notes,
    };
    let nothing = s.sndbuf_request == 0
        && s.rcvbuf_request == 0
        && s.pacing_bytes_per_s == 0
        && s.receive_window == 0
        && s.congestion.is_none();
    (!nothing).then_some(s)
}

impl Settings {
    /// The actions, in a canonical text (what [`Settings::id`] hashes). The receive window
    /// is named only when there is one, so that the IDs of advice without it stay as they
    /// were before it existed.
    pub fn actions(&self) -> String {
        let mut text = format!(
            "sndbuf={};rcvbuf={};pacing={};iw={};cc={};rtt={}-{}",
            self.sndbuf_request,
            self.rcvbuf_request,
            self.pacing_bytes_per_s,
            self.initial_window,
            self.congestion.as_deref().unwrap_or(""),
            self.rtt_lo_us,
            self.rtt_hi_us
        );
        if self.receive_window > 0 {
            text.push_str(&format!(";rwnd={}", self.receive_window));
        }
        text
    }

    /// An ID derived from the actions (FNV-1a of [`Settings::actions`]; never 0): the same
    /// actions give the same ID in every run.
    pub fn id(&self) -> u32 {
        let mut h: u32 = 0x811c_9dc5;
        for b in self.actions().bytes() {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
        h.max(1)
    }

    /// The map value the program reads.
    pub fn to_value(&self) -> PolicyValue {
        let mut cc = [0u8; 16];
        if let Some(name) = &self.congestion {
            let n = name.len().min(15);
            cc[..n].copy_from_slice(&name.as_bytes()[..n]);
        }
        PolicyValue {
            sndbuf: self.sndbuf_request,
            rcvbuf: self.rcvbuf_request,
            pacing_bytes_per_s: self.pacing_bytes_per_s,
            rtt_lo_us: self.rtt_lo_us,
            rtt_hi_us: self.rtt_hi_us,
            iw: self.initial_window,
            id: self.id(),
            flags: if self.full_pipe { POLICY_FULL_PIPE } else { 0 },
            need_snd: self.need_snd,
            need_rcv: self.need_rcv,
            pad: 0,
            cc,
        }
    }
}

/// The policy of every destination with a fresh entry whose peer is an address: for each,
/// the RTT bucket of its most recently updated fresh entry, with the send and receive
/// entries of that bucket.
pub fn policies(
    entries: &[PathEntry],
    now_unix_s: f64,
    fresh_for: Duration,
    limits: &HostLimits,
    opts: &PolicyOptions,
) -> Vec<(IpAddr, Settings)> {
    let fresh = |e: &&PathEntry| {
        let age = now_unix_s - e.updated_unix_s;
        age.is_finite() && age <= fresh_for.as_secs_f64()
    };
    let mut by_peer: BTreeMap<IpAddr, Vec<&PathEntry>> = BTreeMap::new();
    for e in entries.iter().filter(fresh) {
        if let Ok(ip) = e.peer.parse::<IpAddr>() {
            by_peer.entry(ip).or_default().push(e);
        }
    }
    let mut out = Vec::new();
    for (ip, es) in by_peer {
        let Some(newest) = es
            .iter()
            .max_by(|a, b| a.updated_unix_s.total_cmp(&b.updated_unix_s))
        else {
            continue;
        };
        let bucket = newest.rtt_bucket;
        let of = |d: Direction| {
            es.iter()
                .find(|e| e.direction == d && e.rtt_bucket == bucket)
                .copied()
        };
        if let Some(s) = settings_for(of(Direction::Send), of(Direction::Receive), limits, opts) {
            out.push((ip, s));
        }
    }
    out
}

/// `--override-app-buffers` on sockets whose peer is not known yet (before `connect`, a
/// listener): the `SO_SNDBUF` and `SO_RCVBUF` requests below these are ignored. The largest
/// need of the known destinations, within what autotuning reaches by itself (the peer may
/// turn out unknown, and then autotuning alone must still reach what the application asked).
pub fn unconnected_needs(all: &[Settings], limits: &HostLimits) -> (u32, u32) {
    let snd = all.iter().map(|s| s.need_snd).max().unwrap_or(0);
    let rcv = all.iter().map(|s| s.need_rcv).max().unwrap_or(0);
    (
        snd.min(to_u32(limits.tcp_wmem_max / 2)),
        rcv.min(to_u32(limits.tcp_rmem_max / 2)),
    )
}

/// What listeners opened under the agent offer (`tt_cfg`'s `listen_offer` and
/// `stranger_rwnd`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenOffer {
    /// The receive window a listener offers from its SYN-ACK on, bytes (the `SO_RCVLOWAT`
    /// that raises its buffer); 0: listeners are left alone.
    pub window_bytes: u32,
    /// The initial window a peer without a policy is answered at `RWND_INIT`, segments.
    pub stranger_segments: u32,
}

/// [`STRANGER_WINDOW_BYTES`] in whole segments of [`MSS`].
pub fn stranger_segments() -> u32 {
    to_u32(STRANGER_WINDOW_BYTES / MSS)
}

/// What a listener opened under the agent offers: the largest receive window a known
/// destination needs (each already within [`MAX_LISTEN_OFFER_BYTES`] and half
/// `tcp_rmem[2]`), or nothing when none needs more than a stranger's window (the listener
/// is then left as the application made it).
pub fn listen_offer(all: &[Settings]) -> ListenOffer {
    let window = all.iter().map(|s| s.receive_window).max().unwrap_or(0);
    if u64::from(window) <= STRANGER_WINDOW_BYTES {
        return ListenOffer::default();
    }
    ListenOffer {
        window_bytes: window,
        stranger_segments: stranger_segments(),
    }
}

/// What the program answers at `RWND_INIT` (the reference model of `rwnd_init()` in
/// `bpf/sockops.c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitialReceiveWindow {
    /// The kernel's own choice: the listener's space (raised: its offer), or, for an active
    /// open or a listener the agent did not raise, whatever the socket holds.
    Kernel,
    /// At most this many segments.
    Segments(u32),
}

/// The rule at `RWND_INIT`: only a passive open to a listener the agent raised is answered,
/// and there a peer without a policy is held to a stranger's window.
pub fn initial_receive_window(
    policy: Option<&Settings>,
    passive: bool,
    listener_raised: bool,
    offer: &ListenOffer,
) -> InitialReceiveWindow {
    if !passive || !listener_raised || offer.stranger_segments == 0 || policy.is_some() {
        return InitialReceiveWindow::Kernel;
    }
    InitialReceiveWindow::Segments(offer.stranger_segments)
}

/// The source name of an operator's entry (`tcptune paths add`).
pub const OPERATOR_SOURCE: &str = "operator";

/// A prefix as stored in the path database's peer column (`10.1.0.0/16`, `2001:db8::/32`):
/// `None` for a plain address or anything else. Host bits are cleared.
pub fn parse_prefix(s: &str) -> Option<(IpAddr, u8)> {
    let (addr, len) = s.split_once('/')?;
    let ip: IpAddr = addr.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    match ip {
        IpAddr::V4(v4) if len <= 32 => {
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            Some((IpAddr::from((u32::from(v4) & mask).to_be_bytes()), len))
        }
        IpAddr::V6(v6) if len <= 128 => {
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            Some((IpAddr::from((u128::from(v6) & mask).to_be_bytes()), len))
        }
        _ => None,
    }
}

/// The policies of operator prefixes (entries whose peer is `IP/LEN`, added by `tcptune paths
/// add`): an operator's statement holds until the database forgets it, fresh or not; the
/// newest entry of a prefix wins.
pub fn prefix_policies(
    entries: &[PathEntry],
    limits: &HostLimits,
    opts: &PolicyOptions,
) -> Vec<((IpAddr, u8), Settings)> {
    let mut newest: BTreeMap<(IpAddr, u8), &PathEntry> = BTreeMap::new();
    for e in entries.iter().filter(|e| e.direction == Direction::Send) {
        if let Some(p) = parse_prefix(&e.peer) {
            let keep = newest
                .get(&p)
                .is_some_and(|old| old.updated_unix_s >= e.updated_unix_s);
            if !keep {
                newest.insert(p, e);
            }
        }
    }
    newest
        .into_iter()
        .filter_map(|(p, e)| settings_for(Some(e), None, limits, opts).map(|s| (p, s)))
        .collect()
}

/// What the program knows of a socket at `*_ESTABLISHED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketFacts {
    /// The handshake RTT (srtt at `*_ESTABLISHED`), microseconds.
    pub handshake_rtt_us: u32,
    /// The peer connected to this host.
    pub passive: bool,
    /// The application fixed its send buffer (`sk_userlocks` bit 0).
    pub app_locked_sndbuf: bool,
    /// The application fixed its receive buffer (bit 1).
    pub app_locked_rcvbuf: bool,
    /// The application set its own `SO_MAX_PACING_RATE` (`APP_PACED`).
    pub app_paced: bool,
    /// The application chose its congestion control (`APP_CC`: `icsk_ca_setsockopt`).
    pub app_congestion: bool,
    /// Connections open to the destination, this one included.
    pub open_connections: u32,
}

/// What the program does with one socket (the reference model of `established()` in
/// `bpf/sockops.c`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No policy for the destination: observed only.
    Unknown,
    /// The handshake RTT is outside the policy's bucket (another path): observed only.
    OutsideBucket,
    /// Set these.
    Apply(Applied),
}

/// The settings applied to one socket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// `SO_SNDBUF` request.
    pub sndbuf: Option<u32>,
    /// `SO_RCVBUF` request.
    pub rcvbuf: Option<u32>,
    /// `TCP_CONGESTION`.
    pub congestion: Option<String>,
    /// `SO_MAX_PACING_RATE`, bytes/s.
    pub pacing_bytes_per_s: Option<u64>,
    /// `TCP_BPF_IW`, segments.
    pub initial_window: Option<u32>,
}

/// The program's rule for one socket.
pub fn decide(policy: Option<&Settings>, sock: &SocketFacts) -> Decision {
    let Some(p) = policy else {
        return Decision::Unknown;
    };
    if sock.handshake_rtt_us < p.rtt_lo_us || sock.handshake_rtt_us >= p.rtt_hi_us {
        return Decision::OutsideBucket;
    }
    // The application's own pacing and congestion control win, as its buffers do.
    let pacing = (p.pacing_bytes_per_s > 0 && !sock.app_paced)
        .then(|| (p.pacing_bytes_per_s / u64::from(sock.open_connections.max(1))).max(1));
    Decision::Apply(Applied {
        sndbuf: (p.sndbuf_request > 0 && !sock.app_locked_sndbuf).then_some(p.sndbuf_request),
        rcvbuf: (sock.passive && p.rcvbuf_request > 0 && !sock.app_locked_rcvbuf)
            .then_some(p.rcvbuf_request),
        congestion: p.congestion.clone().filter(|_| !sock.app_congestion),
        pacing_bytes_per_s: pacing,
        initial_window: (pacing.is_some() && p.full_pipe && p.initial_window > 0)
            .then_some(p.initial_window),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcptune_core::pathdb::rtt_bucket;

    const MIB: u64 = 1 << 20;

    /// This host's limits: wmem_max and rmem_max 4 MiB, tcp_wmem[2] 4 MiB, tcp_rmem[2] 32 MiB.
    fn host() -> HostLimits {
        HostLimits {
            wmem_max: 4 * MIB,
            rmem_max: 4 * MIB,
            tcp_wmem_max: 4 * MIB,
            tcp_rmem_max: 32 * MIB,
        }
    }

    fn entry(direction: Direction, rate_bps: u64, rtt_ms: u64, full_pipe: bool) -> PathEntry {
        let rtt = Duration::from_millis(rtt_ms);
        PathEntry {
            peer: "198.19.0.1".into(),
            direction,
            rtt_bucket: rtt_bucket(rtt),
            rate_bps,
            full_pipe,
            min_rtt_us: rtt_ms * 1000,
            first_seen_unix_s: 1000.0,
            updated_unix_s: 1000.0,
            samples: 1,
        }
    }

    fn sock(rtt_ms: u32) -> SocketFacts {
        SocketFacts {
            handshake_rtt_us: rtt_ms * 1000,
            passive: false,
            app_locked_sndbuf: false,
            app_locked_rcvbuf: false,
            app_paced: false,
            app_congestion: false,
            open_connections: 1,
        }
    }

    #[test]
    fn a_100ms_gigabit_path_gets_wmem_max_and_says_what_caps_it() {
        let e = entry(Direction::Send, 1_000_000_000, 100, false);
        let s = settings_for(Some(&e), None, &host(), &PolicyOptions::default()).expect("some");
        // 1.75 x 12.5 MB wanted; SO_SNDBUF capped at wmem_max (8 MiB in the kernel > 4 MiB).
        assert_eq!(s.sndbuf_request, 4 * MIB as u32);
        assert!(
            s.limits[0].starts_with("capped by net.core.wmem_max 4 MiB"),
            "{:?}",
            s.limits
        );
        // Receive autotuning reaches 32 MiB, more than rmem_max allows: left alone.
        assert_eq!(s.rcvbuf_request, 0);
        // A lower bound: no pacing, no initial window.
        assert_eq!((s.pacing_bytes_per_s, s.initial_window), (0, 0));
        // An application's send request below wmem_max is ignored under override (the
        // policy's 4 MiB request reaches further); receive: within autotuning's 16 MiB.
        assert_eq!(s.need_snd, 4 * MIB as u32);
        assert_eq!(s.need_rcv, 12_500_000);
    }

    #[test]
    fn overriding_an_application_never_leaves_it_less_than_it_asked_for() {
        let e = entry(Direction::Send, 1_000_000_000, 100, false);
        let s = settings_for(Some(&e), None, &host(), &PolicyOptions::default()).expect("some");
        // Before connect the peer is unknown: autotuning alone must reach the threshold.
        assert_eq!(
            unconnected_needs(std::slice::from_ref(&s), &host()),
            (2 * MIB as u32, 12_500_000)
        );
        assert_eq!(unconnected_needs(&[], &host()), (0, 0));
        // A short path needs less than an application's 1 MiB: that request stands.
        let short = entry(Direction::Send, 100_000_000, 20, true);
        let s =
            settings_for(Some(&short), None, &host(), &PolicyOptions::default()).expect("pacing");
        assert!(s.need_snd < MIB as u32, "{}", s.need_snd);
    }

    #[test]
    fn never_sets_a_buffer_below_what_autotuning_reaches() {
        // 100 Mbit/s at 20 ms: 437 KB wanted, autotuning reaches 4 MiB.
        let e = entry(Direction::Send, 100_000_000, 20, true);
        let s = settings_for(Some(&e), None, &host(), &PolicyOptions::default()).expect("pacing");
        assert_eq!((s.sndbuf_request, s.rcvbuf_request), (0, 0));
        assert_eq!(s.pacing_bytes_per_s, 12_500_000);
        // A bad entry (a huge rate) on a host whose caps are below autotuning: nothing set.
        let small_caps = HostLimits {
            wmem_max: 212_992,
            rmem_max: 212_992,
            ..host()
        };
        let e = entry(Direction::Send, 100_000_000_000, 100, false);
        let s = settings_for(Some(&e), Some(&e), &small_caps, &PolicyOptions::default())
            .expect("a receive window");
        assert_eq!((s.sndbuf_request, s.rcvbuf_request), (0, 0));
        // What it may offer is bounded, whatever the entry says: no more than SO_RCVBUF
        // gives any listener under rmem_max.
        assert_eq!(s.receive_window, 212_992);
        // A short path sets nothing at all.
        let short = entry(Direction::Send, 10_000_000, 20, false);
        assert_eq!(
            settings_for(Some(&short), None, &host(), &PolicyOptions::default()),
            None
        );
    }

    #[test]
    fn full_pipe_entries_get_pacing_and_a_larger_initial_window() {
        let e = entry(Direction::Send, 1_000_000_000, 100, true);
        let s = settings_for(Some(&e), None, &host(), &PolicyOptions::default()).expect("some");
        assert_eq!(s.pacing_bytes_per_s, 125_000_000);
        // Half the BDP (6.25 MB), within what the 8 MiB buffer holds (7.5 MB).
        assert_eq!(s.initial_window, 6_250_000 / 1448);
        let v = s.to_value();
        assert_eq!(v.flags, POLICY_FULL_PIPE);
        assert_eq!(v.id, s.id());
    }

    #[test]
    fn the_receive_buffer_follows_the_receive_entry_when_the_caps_allow() {
        let raised = HostLimits {
            rmem_max: 64 * MIB,
            tcp_rmem_max: 6 * MIB,
            ..host()
        };
        let r = entry(Direction::Receive, 1_000_000_000, 100, false);
        let s = settings_for(None, Some(&r), &raised, &PolicyOptions::default()).expect("some");
        // 2 x 12.5 MB = 25 MB in the kernel: a request of 12.5 MB.
        assert_eq!(s.rcvbuf_request, 12_500_000);
        assert_eq!(s.sndbuf_request, 0);
    }

    #[test]
    fn ids_depend_on_the_actions_only() {
        let a = entry(Direction::Send, 1_000_000_000, 100, false);
        let mut b = a.clone();
        b.samples = 9;
        b.updated_unix_s = 5000.0;
        let o = PolicyOptions::default();
        let sa = settings_for(Some(&a), None, &host(), &o).expect("a");
        let sb = settings_for(Some(&b), None, &host(), &o).expect("b");
        assert_eq!(sa.id(), sb.id());
        let cubic = PolicyOptions {
            congestion: Some("cubic".into()),
        };
        let sc = settings_for(Some(&a), None, &host(), &cubic).expect("c");
        assert_ne!(sa.id(), sc.id());
        assert_eq!(&sc.to_value().cc[..6], b"cubic\0");
    }

    #[test]
    fn applies_only_inside_the_rtt_bucket() {
        let e = entry(Direction::Send, 1_000_000_000, 100, true);
        let s = settings_for(Some(&e), None, &host(), &PolicyOptions::default()).expect("some");
        assert!(matches!(decide(Some(&s), &sock(100)), Decision::Apply(_)));
        // A rerouted path: 160 ms is two half-octaves away.
        assert_eq!(decide(Some(&s), &sock(160)), Decision::OutsideBucket);
        assert_eq!(decide(Some(&s), &sock(50)), Decision::OutsideBucket);
        assert_eq!(decide(None, &sock(100)), Decision::Unknown);
    }

    #[test]
    fn pacing_is_shared_and_app_locked_buffers_are_left_alone() {
        let raised = HostLimits {
            rmem_max: 64 * MIB,
            tcp_rmem_max: 6 * MIB,
            ..host()
        };
        let e = entry(Direction::Send, 1_000_000_000, 100, true);
        let s = settings_for(Some(&e), None, &raised, &PolicyOptions::default()).expect("some");
        let facts = SocketFacts {
            open_connections: 4,
            app_locked_sndbuf: true,
            ..sock(100)
        };
        let Decision::Apply(a) = decide(Some(&s), &facts) else {
            panic!("not applied")
        };
        assert_eq!(a.pacing_bytes_per_s, Some(31_250_000));
        assert_eq!(a.sndbuf, None);
        // Active socket: no receive buffer (it would be set before the SYN's window scale).
        assert_eq!(a.rcvbuf, None);
        assert_eq!(a.initial_window, Some(6_250_000 / 1448));
        let passive = SocketFacts {
            passive: true,
            ..sock(100)
        };
        let Decision::Apply(a) = decide(Some(&s), &passive) else {
            panic!("not applied")
        };
        assert_eq!(a.rcvbuf, Some(s.rcvbuf_request));
        assert!(a.sndbuf.is_some());
    }

    #[test]
    fn an_applications_own_pacing_and_congestion_control_win() {
        let e = entry(Direction::Send, 1_000_000_000, 100, true);
        let opts = PolicyOptions {
            congestion: Some("cubic".into()),
        };
        let s = settings_for(Some(&e), None, &host(), &opts).expect("some");
        let Decision::Apply(a) = decide(Some(&s), &sock(100)) else {
            panic!("not applied")
        };
        assert!(a.pacing_bytes_per_s.is_some() && a.initial_window.is_some());
        assert_eq!(a.congestion.as_deref(), Some("cubic"));
        // A process that paces its own streams (tcptune's engine does on a known path) keeps
        // its pacing, and so gets no larger initial window from the agent either (careful
        // resume's window goes only with the agent's pacing); its buffers are still sized.
        let own = SocketFacts {
            app_paced: true,
            app_congestion: true,
            ..sock(100)
        };
        let Decision::Apply(a) = decide(Some(&s), &own) else {
            panic!("not applied")
        };
        assert_eq!(
            (a.pacing_bytes_per_s, a.initial_window, a.congestion),
            (None, None, None)
        );
        assert!(a.sndbuf.is_some());
    }

    #[test]
    fn policies_use_fresh_address_entries_of_the_newest_bucket() {
        let mut old = entry(Direction::Send, 1_000_000_000, 100, false);
        old.updated_unix_s = 0.0;
        let mut name = entry(Direction::Send, 1_000_000_000, 100, false);
        name.peer = "dtn.example.org".into();
        let mut other = entry(Direction::Send, 1_000_000_000, 200, true);
        other.peer = "2001:db8::2".into();
        let fresh_for = Duration::from_secs(500);
        let ps = policies(
            &[old, name, other],
            1200.0,
            fresh_for,
            &host(),
            &PolicyOptions::default(),
        );
        assert_eq!(ps.len(), 1);
        assert_eq!(ps[0].0, "2001:db8::2".parse::<IpAddr>().expect("ip"));
        assert!(ps[0].1.full_pipe);
    }

    #[test]
    fn operator_prefixes_are_parsed_with_host_bits_cleared() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        assert_eq!(parse_prefix("10.1.2.3/16"), Some((ip("10.1.0.0"), 16)));
        assert_eq!(parse_prefix("2001:db8::1/32"), Some((ip("2001:db8::"), 32)));
        assert_eq!(parse_prefix("0.0.0.0/0"), Some((ip("0.0.0.0"), 0)));
        assert_eq!(parse_prefix("10.0.0.1"), None);
        assert_eq!(parse_prefix("10.0.0.0/33"), None);
        assert_eq!(parse_prefix("dtn.example.org/24"), None);
    }

    #[test]
    fn prefix_policies_use_the_newest_entry_even_when_not_fresh() {
        let mut old = entry(Direction::Send, 1_000_000_000, 100, true);
        old.peer = "198.19.0.0/24".into();
        old.updated_unix_s = 0.0;
        let mut newer = old.clone();
        newer.rate_bps = 2_000_000_000;
        newer.updated_unix_s = 10.0;
        let mut host_entry = old.clone();
        host_entry.peer = "198.19.0.1".into();
        let ps = prefix_policies(
            &[old, newer, host_entry],
            &host(),
            &PolicyOptions::default(),
        );
        assert_eq!(ps.len(), 1);
        assert_eq!(ps[0].0, ("198.19.0.0".parse().expect("ip"), 24));
        assert_eq!(ps[0].1.pacing_bytes_per_s, 250_000_000);
    }

    #[test]
    fn the_initial_window_is_half_the_bdp_within_the_send_buffer_and_the_burst_budget() {
        let o = PolicyOptions::default();
        // 200 ms at 965 Mbit/s: half the BDP is 12.06 MB.
        let e = entry(Direction::Send, 965_000_000, 200, true);
        // Default limits: the 8 MiB send buffer (wmem_max doubled) holds 7.5 MB.
        let s = settings_for(Some(&e), None, &host(), &o).expect("some");
        assert_eq!(s.sndbuf_request, 4 * MIB as u32);
        assert_eq!(
            u64::from(s.initial_window),
            sndbuf_payload(8 * MIB) / MSS,
            "{s:?}"
        );
        // Limits raised for the path (--raise-limits): half the BDP.
        let raised = crate::limits::unbounded(&host());
        let s = settings_for(Some(&e), None, &raised, &o).expect("some");
        assert_eq!(s.initial_window, 12_062_500 / 1448);
        // The old cap of 1000 segments is gone, and the kernel's 10 is the floor.
        assert!(s.initial_window > 8000, "{}", s.initial_window);
        // A huge entry: at most the burst budget, whatever the buffer holds.
        let huge = entry(Direction::Send, 100_000_000_000, 200, true);
        let s = settings_for(Some(&huge), None, &raised, &o).expect("some");
        assert_eq!(u64::from(s.initial_window), MAX_INITIAL_BURST_BYTES / MSS);
        // A slow short path: not worth more than the kernel's ten.
        let slow = entry(Direction::Send, 5_000_000, 20, true);
        let s = settings_for(Some(&slow), None, &host(), &o).expect("pacing");
        assert_eq!(s.initial_window, 0);
    }

    #[test]
    fn a_listener_offers_the_largest_known_need_within_its_bounds() {
        let o = PolicyOptions::default();
        // A client that pushed to this host (a receive entry) on a 200 ms gigabit path: under
        // this host's limits the buffers are autotuning's to grow (nothing to set), but the
        // first window is offered, within what SO_RCVBUF gives any listener under rmem_max
        // (4 MiB of window under this host's 4 MiB) ...
        let r = entry(Direction::Receive, 1_000_000_000, 200, false);
        let d = settings_for(None, Some(&r), &host(), &o).expect("a receive window");
        assert_eq!(
            (d.sndbuf_request, d.rcvbuf_request, d.pacing_bytes_per_s),
            (0, 0, 0)
        );
        assert_eq!(u64::from(d.receive_window), 4 * MIB);
        // ... and with the limits raised for it, half the BDP.
        let raised = crate::limits::unbounded(&host());
        let s = settings_for(None, Some(&r), &raised, &o).expect("a receive window");
        assert_eq!(s.receive_window, 12_500_000);
        // A nearer peer needs less; the listener holds the largest.
        let mut near = entry(Direction::Receive, 1_000_000_000, 20, false);
        near.peer = "198.19.0.2".into();
        let n = settings_for(None, Some(&near), &raised, &o).expect("some");
        assert_eq!(n.receive_window, 1_250_000);
        let offer = listen_offer(&[n.clone(), s.clone()]);
        assert_eq!(offer.window_bytes, 12_500_000);
        assert_eq!(offer.stranger_segments, stranger_segments());
        // Bounded by the budget, and by half tcp_rmem[2] (the most SO_RCVLOWAT takes).
        let fast = entry(Direction::Receive, 10_000_000_000, 200, true);
        let f = settings_for(None, Some(&fast), &raised, &o).expect("some");
        assert_eq!(u64::from(f.receive_window), MAX_LISTEN_OFFER_BYTES);
        let small_rmem = HostLimits {
            tcp_rmem_max: 6 * MIB,
            ..raised
        };
        let f = settings_for(None, Some(&fast), &small_rmem, &o).expect("some");
        assert_eq!(u64::from(f.receive_window), 3 * MIB);
        // No known peer needs more than a stranger gets: listeners are left alone.
        let slow = entry(Direction::Send, 10_000_000, 40, true);
        let w = settings_for(Some(&slow), None, &host(), &o).expect("pacing");
        assert_eq!(w.receive_window, 0);
        // Its advice ID is what it was before receive windows existed.
        assert!(!w.actions().contains("rwnd"), "{}", w.actions());
        assert!(s.actions().ends_with(";rwnd=12500000"), "{}", s.actions());
        assert_eq!(listen_offer(&[w]), ListenOffer::default());
        assert_eq!(listen_offer(&[]), ListenOffer::default());
    }

    #[test]
    fn strangers_get_the_pre_6_10_window_on_a_raised_listener_only() {
        // 45 segments of 1448 bytes: 65160 bytes, what 6.9 offered a 64 KiB listener.
        assert_eq!(stranger_segments(), 45);
        assert!(u64::from(stranger_segments()) * MSS <= STRANGER_WINDOW_BYTES);
        let r = entry(Direction::Receive, 1_000_000_000, 200, false);
        let known = settings_for(None, Some(&r), &host(), &PolicyOptions::default());
        let offer = listen_offer(known.as_slice());
        assert!(offer.window_bytes > 0);
        use InitialReceiveWindow::{Kernel, Segments};
        // A stranger, on a listener the agent raised: held to a stranger's window.
        assert_eq!(
            initial_receive_window(None, true, true, &offer),
            Segments(45)
        );
        // A known peer: the listener's offer.
        assert_eq!(
            initial_receive_window(known.as_ref(), true, true, &offer),
            Kernel
        );
        // A listener the agent did not raise (the application fixed its buffer, or it was
        // opened before the agent attached), or an active open: the kernel's own.
        assert_eq!(initial_receive_window(None, true, false, &offer), Kernel);
        assert_eq!(initial_receive_window(None, false, true, &offer), Kernel);
        assert_eq!(
            initial_receive_window(None, true, true, &ListenOffer::default()),
            Kernel
        );
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_bytes(4 * MIB), "4 MiB");
        assert_eq!(human_bytes(512 << 10), "512 KiB");
        assert_eq!(human_bytes(21_875_000), "21.9 MB");
        assert_eq!(human_bytes(12), "12 B");
    }
}
