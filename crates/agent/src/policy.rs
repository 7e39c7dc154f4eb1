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
//!   divided by the destination's open connections: pacing at a lower bound would cap a
//!   connection at what an earlier one happened to reach.
//! * A larger initial window (`TCP_BPF_IW`, half the BDP in segments, as careful resume does)
//!   only with that pacing.
//! * Everything applies only while the handshake RTT is inside the entry's RTT bucket (a
//!   rerouted path is another path), and never to a buffer the application fixed itself.

use crate::maps::{PolicyValue, POLICY_FULL_PIPE};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;
use tcptune_core::pathdb::{rtt_bucket_range, Direction, PathEntry};

/// The send buffer's target, as a multiple of the BDP (`auto`'s sizing).
pub const SNDBUF_BDP_FACTOR: f64 = 1.75;
/// The receive buffer's target, as a multiple of the BDP (half of it is window at
/// `tcp_adv_win_scale` 1).
pub const RCVBUF_BDP_FACTOR: f64 = 2.0;
/// The segment size assumed for the initial window.
pub const MSS: u64 = 1448;
/// The largest initial window set, segments.
pub const MAX_INITIAL_WINDOW: u64 = 1000;
/// The smallest initial window worth setting (the kernel's default is 10).
pub const MIN_INITIAL_WINDOW: u64 = 10;

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
        let window = if sndbuf_request > 0 {
            u64::from(sndbuf_request).min(limits.wmem_max) * 2
        } else {
            limits.tcp_wmem_max
        };
        let segs = (bdp(e) / 2).min(window / 2) / MSS;
        if segs > MIN_INITIAL_WINDOW {
            segs.min(MAX_INITIAL_WINDOW) as u32
        } else {
            0
        }
    });
    let s = Settings {
        sndbuf_request,
        rcvbuf_request,
        pacing_bytes_per_s,
        initial_window,
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
        && s.congestion.is_none();
    (!nothing).then_some(s)
}

impl Settings {
    /// The actions, in a canonical text (what [`Settings::id`] hashes).
    pub fn actions(&self) -> String {
        format!(
            "sndbuf={};rcvbuf={};pacing={};iw={};cc={};rtt={}-{}",
            self.sndbuf_request,
            self.rcvbuf_request,
            self.pacing_bytes_per_s,
            self.initial_window,
            self.congestion.as_deref().unwrap_or(""),
            self.rtt_lo_us,
            self.rtt_hi_us
        )
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
    let pacing = (p.pacing_bytes_per_s > 0)
        .then(|| (p.pacing_bytes_per_s / u64::from(sock.open_connections.max(1))).max(1));
    Decision::Apply(Applied {
        sndbuf: (p.sndbuf_request > 0 && !sock.app_locked_sndbuf).then_some(p.sndbuf_request),
        rcvbuf: (sock.passive && p.rcvbuf_request > 0 && !sock.app_locked_rcvbuf)
            .then_some(p.rcvbuf_request),
        congestion: p.congestion.clone(),
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
        assert_eq!(
            settings_for(Some(&e), Some(&e), &small_caps, &PolicyOptions::default()),
            None
        );
    }

    #[test]
    fn full_pipe_entries_get_pacing_and_a_larger_initial_window() {
        let e = entry(Direction::Send, 1_000_000_000, 100, true);
        let s = settings_for(Some(&e), None, &host(), &PolicyOptions::default()).expect("some");
        assert_eq!(s.pacing_bytes_per_s, 125_000_000);
        // Half the BDP (6.25 MB), within half the 8 MiB buffer: 2896 segments, capped.
        assert_eq!(s.initial_window, MAX_INITIAL_WINDOW as u32);
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
        assert_eq!(a.initial_window, Some(MAX_INITIAL_WINDOW as u32));
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
    fn sizes_read_well() {
        assert_eq!(human_bytes(4 * MIB), "4 MiB");
        assert_eq!(human_bytes(512 << 10), "512 KiB");
        assert_eq!(human_bytes(21_875_000), "21.9 MB");
        assert_eq!(human_bytes(12), "12 B");
    }
}
