//! What a finished report says about itself, as pure functions of the report: every buffer
//! request the kernel did not take as asked ([`Adjustment`]: the request, what the kernel
//! holds, the limit and the exact fix), and what limited the transfer ([`Diagnosis`]).
//!
//! The kernel's rules (see [`HostLimits`]): `setsockopt(SO_SNDBUF, v)` stores
//! `2 * min(v, net.core.wmem_max)` (`SO_RCVBUF`: `rmem_max`) unless the process forces it
//! with `SO_*BUFFORCE` (`--force-buffers` as root); about half of what it stores carries data.

pub use super::{Adjustment, Diagnosis};
use super::{Report, StreamDetail};
use std::collections::BTreeMap;
use tcptune_core::{Action, Bytes, HostLimits, TuneMode};

/// Fill `end.tcptune.adjustments` and `end.tcptune.diagnosis`.
pub(crate) fn annotate(r: &mut Report) {
    r.end.tcptune.adjustments = adjustments(r);
    r.end.tcptune.diagnosis = Some(diagnose(r));
}

fn host_of(sender_end: bool, reverse: bool) -> &'static str {
    // The local host sends unless --reverse.
    if sender_end != reverse {
        "local"
    } else {
        "server"
    }
}

/// One end's buffer option, as the adjustments name it.
struct EndBuffer {
    /// `"sender"` or `"receiver"`.
    end: &'static str,
    /// `"local"` or `"server"`.
    host: &'static str,
    /// `SO_SNDBUF` or `SO_RCVBUF`.
    option: &'static str,
    /// The sysctl that caps it, and its value.
    sysctl: &'static str,
    max: u64,
}

impl EndBuffer {
    fn new(sender_end: bool, reverse: bool, limits: &HostLimits) -> Self {
        let host = host_of(sender_end, reverse);
        if sender_end {
            EndBuffer {
                end: "sender",
                host,
                option: "SO_SNDBUF",
                sysctl: "net.core.wmem_max",
                max: limits.wmem_max.0,
            }
        } else {
            EndBuffer {
                end: "receiver",
                host,
                option: "SO_RCVBUF",
                sysctl: "net.core.rmem_max",
                max: limits.rmem_max.0,
            }
        }
    }

    /// How the sentences name the host.
    fn on(&self) -> &'static str {
        if self.host == "local" {
            "this host"
        } else {
            "the server"
        }
    }
}

/// The adjustments of one end.
fn end_adjustments(
    sender_end: bool,
    reverse: bool,
    limits: &HostLimits,
    mode: Option<&TuneMode>,
    streams: &[StreamDetail],
) -> Vec<Adjustment> {
    let b = EndBuffer::new(sender_end, reverse, limits);
    let fixed_mode = matches!(mode, Some(TuneMode::Fixed(_) | TuneMode::None));
    requests(sender_end, mode, streams)
        .into_iter()
        .filter_map(|((asked, held, note), n)| {
            adjustment(&b, limits, fixed_mode, asked, held, note, n)
        })
        .collect()
}

/// Every (asked, held, note) buffer request of one end, with the number of streams it was
/// made on.
fn requests(
    sender_end: bool,
    mode: Option<&TuneMode>,
    streams: &[StreamDetail],
) -> BTreeMap<(u64, u64, Option<String>), u32> {
    let mut seen: BTreeMap<(u64, u64, Option<String>), u32> = BTreeMap::new();
    for d in streams {
        let side = if sender_end { &d.sender } else { &d.receiver };
        let mut found = false;
        for c in &side.changes {
            let asked = match (&c.action, sender_end) {
                (Action::SetSndBuf(b), true) | (Action::SetRcvBuf(b), false) => b.0,
                _ => continue,
            };
            let Some(held) = c.effective else { continue };
            found = true;
            *seen.entry((asked, held, c.note.clone())).or_default() += 1;
        }
        // Fixed buffers are known without the series: the size asked, and the peak the
        // kernel held (the buffer is locked, so it never grew past that).
        if !found {
            let fixed = match mode {
                Some(TuneMode::Fixed(b)) => Some(b.0),
                Some(TuneMode::None) => Some(TuneMode::UNTUNED_BUFFER.0),
                _ => None,
            };
            let held = if sender_end {
                side.stats.peak_sndbuf_bytes
            } else {
                side.stats.peak_rcvbuf_bytes
            };
            if let (Some(asked), true) = (fixed, held > 0) {
                *seen.entry((asked, held, None)).or_default() += 1;
            }
        }
    }
    seen
}

/// What one request says, if the kernel did not take it as asked: raised by the driver,
/// capped by a sysctl, doubled, or less than asked for no known reason.
fn adjustment(
    b: &EndBuffer,
    limits: &HostLimits,
    fixed_mode: bool,
    asked: u64,
    held: u64,
    note: Option<String>,
    n: u32,
) -> Option<Adjustment> {
    let (a, h) = (Bytes(asked).human(), Bytes(held).human());
    let (end, option, sysctl, on) = (b.end, b.option, b.sysctl, b.on());
    let base = base(end, b.host, option, asked, held, n);
    let adj = if let Some(note) = note {
        Adjustment {
            kind: "raised".into(),
            note: format!("{end} {option}: asked {a}, {note}"),
            ..base
        }
    } else if held < asked.saturating_mul(2) && !limits.can_force && asked > b.max {
        let force = if b.host == "local" {
            "run send with --force-buffers as root"
        } else {
            "start the server with --force-buffers as root"
        };
        Adjustment {
            kind: "capped".into(),
            limit: Some(sysctl.into()),
            limit_bytes: Some(b.max),
            fix: Some(format!("sysctl -w {sysctl}={asked} on {on}, or {force}")),
            note: format!(
                "{end} {option} on {on}: asked {a} per stream, the kernel holds {h}: capped by {sysctl} = {} (the kernel doubles what it accepts)",
                Bytes(b.max).human()
            ),
            ..base
        }
    } else if held >= asked.saturating_mul(2) && fixed_mode {
        Adjustment {
            kind: "doubled".into(),
            note: format!(
                "{end} {option} on {on}: asked {a} per stream, the kernel holds {h}: it doubles the size for its bookkeeping, and about half carries data"
            ),
            ..base
        }
    } else if held < asked.saturating_mul(2) {
        Adjustment {
            kind: "capped".into(),
            note: format!(
                "{end} {option} on {on}: asked {a} per stream, the kernel holds {h} (less than asked, for no limit tcptune knows)"
            ),
            ..base
        }
    } else {
        return None;
    };
    Some(adj)
}

fn base(end: &str, host: &str, option: &str, asked: u64, held: u64, n: u32) -> Adjustment {
    Adjustment {
        end: end.into(),
        host: host.into(),
        option: option.into(),
        asked_bytes: asked,
        kernel_bytes: held,
        streams: n,
        kind: String::new(),
        limit: None,
        limit_bytes: None,
        fix: None,
        note: String::new(),
    }
}

/// Every buffer request of the report that the kernel did not take as asked.
pub fn adjustments(r: &Report) -> Vec<Adjustment> {
    let t = &r.start.tcptune;
    let mode: Option<TuneMode> = t.tune.parse().ok();
    let reverse = r.start.test_start.reverse != 0;
    let streams = &r.end.tcptune.streams;
    let mut out = end_adjustments(true, reverse, &t.sender_limits, mode.as_ref(), streams);
    out.extend(end_adjustments(
        false,
        reverse,
        &t.receiver_limits,
        mode.as_ref(),
        streams,
    ));
    out
}

/// What the diagnosis reads from the streams: the sender's limited times summed, the
/// largest buffers either end held.
#[derive(Default)]
struct Totals {
    busy_us: u64,
    rwnd_limited_us: u64,
    sndbuf_limited_us: u64,
    retransmits: u64,
    rcvbuf_peak: u64,
    rmem_peak: u64,
    sndbuf_peak: u64,
}

impl Totals {
    fn of(streams: &[StreamDetail]) -> Self {
        let mut s = Totals::default();
        for d in streams {
            s.busy_us += d.sender.stats.busy_time_us;
            s.rwnd_limited_us += d.sender.stats.rwnd_limited_us;
            s.sndbuf_limited_us += d.sender.stats.sndbuf_limited_us;
            s.retransmits += d.sender.stats.retransmits;
            s.rcvbuf_peak = s.rcvbuf_peak.max(d.receiver.stats.peak_rcvbuf_bytes);
            s.rmem_peak = s.rmem_peak.max(d.receiver.stats.peak_rmem_alloc_bytes);
            s.sndbuf_peak = s.sndbuf_peak.max(d.sender.stats.peak_sndbuf_bytes);
        }
        s
    }

    /// `v` as a share of the busy time, percent (none without busy time).
    fn pct(&self, v: u64) -> Option<f64> {
        (self.busy_us > 0).then(|| (v as f64 / self.busy_us as f64 * 100.0).min(100.0))
    }
}

/// A limiter, its cause and the sentence that says it.
type Finding = (&'static str, Option<&'static str>, String);

/// What limited the transfer.
pub fn diagnose(r: &Report) -> Diagnosis {
    let mode: Option<TuneMode> = r.start.tcptune.tune.parse().ok();
    let s = Totals::of(&r.end.tcptune.streams);
    let (rwnd_pct, sndbuf_pct) = (s.pct(s.rwnd_limited_us), s.pct(s.sndbuf_limited_us));
    let limited = |v: Option<f64>| v.unwrap_or(0.0) >= 10.0;
    let (limiter, cause, summary) = if limited(rwnd_pct) && rwnd_pct >= sndbuf_pct {
        receive_window(r, mode.as_ref(), &s, rwnd_pct.unwrap_or(0.0))
    } else if limited(sndbuf_pct) {
        send_buffer(r, mode.as_ref(), &s, sndbuf_pct.unwrap_or(0.0))
    } else if s.retransmits > 0 {
        (
            "congestion",
            None,
            format!(
                "limited by the network: {} segment(s) retransmitted and the buffers were rarely full (congestion or loss on the path)",
                s.retransmits
            ),
        )
    } else {
        (
            "none",
            None,
            "no buffer, loss or reader held the transfer back (the CPU or the path's capacity set the rate)".to_string(),
        )
    };
    Diagnosis {
        limiter: limiter.into(),
        cause: cause.map(str::to_string),
        rwnd_limited_pct: rwnd_pct,
        sndbuf_limited_pct: sndbuf_pct,
        summary,
    }
}

/// The capping adjustment of one end (`"sender"` or `"receiver"`) that names its sysctl.
fn capped<'r>(r: &'r Report, end: &str) -> Option<&'r Adjustment> {
    r.end
        .tcptune
        .adjustments
        .iter()
        .find(|a| a.end == end && a.kind == "capped" && a.limit.is_some())
}

/// The `--tune` mode as the sentences name it.
fn tune_name(r: &Report, mode: Option<&TuneMode>) -> String {
    mode.map_or(r.start.tcptune.tune.clone(), TuneMode::describe)
}

/// The receive window limited the transfer `pct` percent of the time: a slow reader, a
/// system maximum, the tuning mode's locked buffer, or receive autotuning's limit.
fn receive_window(r: &Report, mode: Option<&TuneMode>, s: &Totals, pct: f64) -> Finding {
    let locks_rcv = matches!(
        mode,
        Some(
            TuneMode::None
                | TuneMode::Fixed(_)
                | TuneMode::Manual(_)
                | TuneMode::Probe
                | TuneMode::Psc
                | TuneMode::Drs
        )
    );
    if s.rcvbuf_peak > 0 && s.rmem_peak * 10 >= s.rcvbuf_peak * 8 && !locks_rcv {
        (
            "slow_reader",
            None,
            format!(
                "limited by a slow reader: the receiving application left its {} buffer full (the window closed {pct:.0}% of the time); read faster or use more streams",
                Bytes(s.rcvbuf_peak).human(),
            ),
        )
    } else if let Some(a) = capped(r, "receiver") {
        (
            "receive_window",
            Some("system_maximum"),
            format!(
                "buffer-limited: the receive window ({pct:.0}% of the time), the receiver's buffer capped by {}; fix: {}",
                a.limit.as_deref().unwrap_or("a system maximum"),
                a.fix.as_deref().unwrap_or("raise it")
            ),
        )
    } else if locks_rcv {
        (
            "receive_window",
            Some("application"),
            format!(
                "buffer-limited: the receive window ({pct:.0}% of the time); --tune {} set the receive buffer to {} and locked it: use a larger size, --tune auto, or more streams (-P)",
                tune_name(r, mode),
                Bytes(s.rcvbuf_peak).human()
            ),
        )
    } else {
        (
            "receive_window",
            Some("autotuning"),
            format!(
                "buffer-limited: the receive window ({pct:.0}% of the time); receive autotuning grows to net.ipv4.tcp_rmem max = {} on the receiver: raise it, or use more streams (-P)",
                r.start.tcptune.receiver_limits.tcp_rmem[2].human()
            ),
        )
    }
}

/// The send buffer limited the transfer `pct` percent of the time: a system maximum, the
/// tuning mode's locked buffer, or send autotuning's limit.
fn send_buffer(r: &Report, mode: Option<&TuneMode>, s: &Totals, pct: f64) -> Finding {
    let locks_snd = matches!(
        mode,
        Some(TuneMode::None | TuneMode::Fixed(_) | TuneMode::Manual(_) | TuneMode::Probe)
    );
    if let Some(a) = capped(r, "sender") {
        (
            "send_buffer",
            Some("system_maximum"),
            format!(
                "buffer-limited: the send buffer ({pct:.0}% of the time), capped by {}; fix: {}",
                a.limit.as_deref().unwrap_or("a system maximum"),
                a.fix.as_deref().unwrap_or("raise it")
            ),
        )
    } else if locks_snd {
        (
            "send_buffer",
            Some("application"),
            format!(
                "buffer-limited: the send buffer ({pct:.0}% of the time); --tune {} set it to {} and locked it: use a larger size, --tune auto, or more streams (-P)",
                tune_name(r, mode),
                Bytes(s.sndbuf_peak).human()
            ),
        )
    } else {
        (
            "send_buffer",
            Some("autotuning"),
            format!(
                "buffer-limited: the send buffer ({pct:.0}% of the time); send autotuning grows to net.ipv4.tcp_wmem max = {} on the sender: raise it, or use more streams (-P)",
                r.start.tcptune.sender_limits.tcp_wmem[2].human()
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{ChangeRecord, SideDetail};

    fn stream(sndbuf_peak: u64, rcvbuf_peak: u64, changes: Vec<ChangeRecord>) -> StreamDetail {
        let mut sender = SideDetail::default();
        sender.stats.peak_sndbuf_bytes = sndbuf_peak;
        sender.changes = changes;
        let mut receiver = SideDetail::default();
        receiver.stats.peak_rcvbuf_bytes = rcvbuf_peak;
        StreamDetail {
            socket: 1,
            opened_at_s: 0.0,
            messages: 1,
            sender,
            receiver,
        }
    }

    #[test]
    fn a_fixed_buffer_above_the_system_maximum_is_said_capped_with_the_sysctl_that_fixes_it() {
        let limits = HostLimits::linux_defaults();
        let mode = TuneMode::Fixed(Bytes::mib(16));
        let streams = [stream(8 << 20, 8 << 20, Vec::new())];
        let a = end_adjustments(true, false, &limits, Some(&mode), &streams);
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].kind.as_str(), a[0].host.as_str()),
            ("capped", "local")
        );
        assert_eq!(a[0].limit.as_deref(), Some("net.core.wmem_max"));
        assert_eq!((a[0].asked_bytes, a[0].kernel_bytes), (16 << 20, 8 << 20));
        assert!(a[0]
            .fix
            .as_deref()
            .is_some_and(|f| f.contains("sysctl -w net.core.wmem_max=16777216")));
        // The receiver is the server when the local host sends.
        let r = end_adjustments(false, false, &limits, Some(&mode), &streams);
        assert_eq!(r[0].host, "server");
        assert!(r[0].fix.as_deref().is_some_and(|f| f.contains("serve")));
    }

    #[test]
    fn the_untuned_64_kib_is_said_doubled_and_a_forced_end_is_not_capped() {
        let limits = HostLimits::linux_defaults();
        let streams = [stream(128 << 10, 128 << 10, Vec::new())];
        let a = end_adjustments(true, false, &limits, Some(&TuneMode::None), &streams);
        assert_eq!(a[0].kind, "doubled");
        let forced = HostLimits {
            can_force: true,
            ..limits
        };
        let big = [stream(32 << 20, 0, Vec::new())];
        let f = end_adjustments(
            true,
            false,
            &forced,
            Some(&TuneMode::Fixed(Bytes::mib(16))),
            &big,
        );
        assert_eq!(f[0].kind, "doubled");
    }

    #[test]
    fn a_capped_change_of_a_tuner_is_reported_from_the_changes() {
        let change = ChangeRecord {
            t_s: 0.5,
            action: Action::SetSndBuf(Bytes::mib(6)),
            effective: Some(8 << 20),
            effective_bps: None,
            error: None,
            note: None,
        };
        let streams = [stream(8 << 20, 0, vec![change])];
        let a = end_adjustments(
            true,
            true,
            &HostLimits::linux_defaults(),
            Some(&TuneMode::Auto),
            &streams,
        );
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].kind.as_str(), a[0].host.as_str()),
            ("capped", "server")
        );
    }
}
