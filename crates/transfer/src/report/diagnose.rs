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

/// The adjustments of one end.
fn end_adjustments(
    sender_end: bool,
    reverse: bool,
    limits: &HostLimits,
    mode: Option<&TuneMode>,
    streams: &[StreamDetail],
) -> Vec<Adjustment> {
    let (option, sysctl, max, end) = if sender_end {
        (
            "SO_SNDBUF",
            "net.core.wmem_max",
            limits.wmem_max.0,
            "sender",
        )
    } else {
        (
            "SO_RCVBUF",
            "net.core.rmem_max",
            limits.rmem_max.0,
            "receiver",
        )
    };
    let host = host_of(sender_end, reverse);
    // (asked, held, note) -> streams
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
    let fixed_mode = matches!(mode, Some(TuneMode::Fixed(_) | TuneMode::None));
    let mut out = Vec::new();
    for ((asked, held, note), n) in seen {
        let (a, h) = (Bytes(asked).human(), Bytes(held).human());
        let on = if host == "local" {
            "this host"
        } else {
            "the server"
        };
        let adj = if let Some(note) = note {
            Adjustment {
                kind: "raised".into(),
                limit: None,
                limit_bytes: None,
                fix: None,
                note: format!("{end} {option}: asked {a}, {note}"),
                ..base(end, host, option, asked, held, n)
            }
        } else if held < asked.saturating_mul(2) && !limits.can_force && asked > max {
            let force = if host == "local" {
                "run send with --force-buffers as root"
            } else {
                "start the server with --force-buffers as root"
            };
            Adjustment {
                kind: "capped".into(),
                limit: Some(sysctl.into()),
                limit_bytes: Some(max),
                fix: Some(format!(
                    "sysctl -w {sysctl}={asked} on {on}, or {force}"
                )),
                note: format!(
                    "{end} {option} on {on}: asked {a} per stream, the kernel holds {h}: capped by {sysctl} = {} (the kernel doubles what it accepts)",
                    Bytes(max).human()
                ),
                ..base(end, host, option, asked, held, n)
            }
        } else if held >= asked.saturating_mul(2) && fixed_mode {
            Adjustment {
                kind: "doubled".into(),
                limit: None,
                limit_bytes: None,
                fix: None,
                note: format!(
                    "{end} {option} on {on}: asked {a} per stream, the kernel holds {h}: it doubles the size for its bookkeeping, and about half carries data"
                ),
                ..base(end, host, option, asked, held, n)
            }
        } else if held < asked.saturating_mul(2) {
            Adjustment {
                kind: "capped".into(),
                limit: None,
                limit_bytes: None,
                fix: None,
                note: format!(
                    "{end} {option} on {on}: asked {a} per stream, the kernel holds {h} (less than asked, for no limit tcptune knows)"
                ),
                ..base(end, host, option, asked, held, n)
            }
        } else {
            continue;
        };
        out.push(adj);
    }
    out
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

/// What limited the transfer.
pub fn diagnose(r: &Report) -> Diagnosis {
    let t = &r.start.tcptune;
    let e = &r.end.tcptune;
    let mode: Option<TuneMode> = t.tune.parse().ok();
    let (mut busy, mut rwnd, mut sndbuf, mut retrans) = (0u64, 0u64, 0u64, 0u64);
    let (mut rcvbuf_peak, mut rmem_peak, mut sndbuf_peak) = (0u64, 0u64, 0u64);
    for d in &e.streams {
        busy += d.sender.stats.busy_time_us;
        rwnd += d.sender.stats.rwnd_limited_us;
        sndbuf += d.sender.stats.sndbuf_limited_us;
        retrans += d.sender.stats.retransmits;
        rcvbuf_peak = rcvbuf_peak.max(d.receiver.stats.peak_rcvbuf_bytes);
        rmem_peak = rmem_peak.max(d.receiver.stats.peak_rmem_alloc_bytes);
        sndbuf_peak = sndbuf_peak.max(d.sender.stats.peak_sndbuf_bytes);
    }
    let pct = |v: u64| (busy > 0).then(|| (v as f64 / busy as f64 * 100.0).min(100.0));
    let (rwnd_pct, sndbuf_pct) = (pct(rwnd), pct(sndbuf));
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
    let locks_snd = matches!(
        mode,
        Some(TuneMode::None | TuneMode::Fixed(_) | TuneMode::Manual(_) | TuneMode::Probe)
    );
    let capped = |end: &str| {
        e.adjustments
            .iter()
            .find(|a| a.end == end && a.kind == "capped" && a.limit.is_some())
    };
    let tune = mode.as_ref().map_or(t.tune.clone(), TuneMode::describe);
    let limited = |v: Option<f64>| v.unwrap_or(0.0) >= 10.0;
    let (limiter, cause, summary) = if limited(rwnd_pct) && rwnd_pct >= sndbuf_pct {
        if rcvbuf_peak > 0 && rmem_peak * 10 >= rcvbuf_peak * 8 && !locks_rcv {
            (
                "slow_reader",
                None,
                format!(
                    "limited by a slow reader: the receiving application left its {} buffer full (the window closed {:.0}% of the time); read faster or use more streams",
                    Bytes(rcvbuf_peak).human(),
                    rwnd_pct.unwrap_or(0.0)
                ),
            )
        } else if let Some(a) = capped("receiver") {
            (
                "receive_window",
                Some("system_maximum"),
                format!(
                    "buffer-limited: the receive window ({:.0}% of the time), the receiver's buffer capped by {}; fix: {}",
                    rwnd_pct.unwrap_or(0.0),
                    a.limit.as_deref().unwrap_or("a system maximum"),
                    a.fix.as_deref().unwrap_or("raise it")
                ),
            )
        } else if locks_rcv {
            (
                "receive_window",
                Some("application"),
                format!(
                    "buffer-limited: the receive window ({:.0}% of the time); --tune {tune} set the receive buffer to {} and locked it: use a larger size, --tune auto, or more streams (-P)",
                    rwnd_pct.unwrap_or(0.0),
                    Bytes(rcvbuf_peak).human()
                ),
            )
        } else {
            let max = t.receiver_limits.tcp_rmem[2];
            (
                "receive_window",
                Some("autotuning"),
                format!(
                    "buffer-limited: the receive window ({:.0}% of the time); receive autotuning grows to net.ipv4.tcp_rmem max = {} on the receiver: raise it, or use more streams (-P)",
                    rwnd_pct.unwrap_or(0.0),
                    max.human()
                ),
            )
        }
    } else if limited(sndbuf_pct) {
        if let Some(a) = capped("sender") {
            (
                "send_buffer",
                Some("system_maximum"),
                format!(
                    "buffer-limited: the send buffer ({:.0}% of the time), capped by {}; fix: {}",
                    sndbuf_pct.unwrap_or(0.0),
                    a.limit.as_deref().unwrap_or("a system maximum"),
                    a.fix.as_deref().unwrap_or("raise it")
                ),
            )
        } else if locks_snd {
            (
                "send_buffer",
                Some("application"),
                format!(
                    "buffer-limited: the send buffer ({:.0}% of the time); --tune {tune} set it to {} and locked it: use a larger size, --tune auto, or more streams (-P)",
                    sndbuf_pct.unwrap_or(0.0),
                    Bytes(sndbuf_peak).human()
                ),
            )
        } else {
            (
                "send_buffer",
                Some("autotuning"),
                format!(
                    "buffer-limited: the send buffer ({:.0}% of the time); send autotuning grows to net.ipv4.tcp_wmem max = {} on the sender: raise it, or use more streams (-P)",
                    sndbuf_pct.unwrap_or(0.0),
                    t.sender_limits.tcp_wmem[2].human()
                ),
            )
        }
    } else if retrans > 0 {
        (
            "congestion",
            None,
            format!(
                "limited by the network: {retrans} segment(s) retransmitted and the buffers were rarely full (congestion or loss on the path)"
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
