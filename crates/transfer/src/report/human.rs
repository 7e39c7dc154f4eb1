//! A report for people, laid out like iperf3's output plus what tcptune knows about the
//! buffers.

use super::{End, EndTcptune, Interval, Report, StartTcptune};
use std::fmt::Write;
use tcptune_core::{format_duration, human_bps, human_duration, Bytes, TuneMode};

fn rate(bps: f64) -> String {
    human_bps(bps)
}

fn bytes(b: u64) -> String {
    Bytes(b).human()
}

fn us(v: Option<u32>) -> String {
    v.map_or("-".into(), |v| {
        human_duration(std::time::Duration::from_micros(u64::from(v)))
    })
}

fn pct_of(part_us: u64, whole_s: f64) -> String {
    if whole_s <= 0.0 {
        return "-".into();
    }
    format!(
        "{:.0}%",
        (part_us as f64 / 1e6 / whole_s * 100.0).min(100.0)
    )
}

/// The header of the interval table.
pub fn interval_header() -> String {
    "[ ID] Interval           Transfer     Bitrate         Retr".to_string()
}

/// The lines of one interval: one per stream, plus `[SUM]` with several streams.
pub fn interval_lines(iv: &Interval) -> Vec<String> {
    let mut out = Vec::new();
    for s in &iv.streams {
        out.push(format!(
            "[{:>3}] {:6.2}-{:<6.2} s    {:>10}  {:>14}  {:>4}",
            s.socket,
            s.start,
            s.end,
            bytes(s.bytes),
            rate(s.bits_per_second),
            if s.sender {
                s.retransmits.to_string()
            } else {
                String::new()
            }
        ));
    }
    if iv.streams.len() > 1 {
        let s = &iv.sum;
        out.push(format!(
            "[SUM] {:6.2}-{:<6.2} s    {:>10}  {:>14}  {:>4}",
            s.start,
            s.end,
            bytes(s.bytes),
            rate(s.bits_per_second),
            if s.sender {
                s.retransmits.to_string()
            } else {
                String::new()
            }
        ));
    }
    out
}

/// The whole summary: intervals, per-stream results with buffers, totals, and the verdict.
pub fn summary(r: &Report) -> String {
    summary_with(r, true)
}

fn write_preamble(o: &mut String, r: &Report, connecting: bool) {
    let t = &r.start.tcptune;
    if connecting {
        let _ = writeln!(
            o,
            "Connecting to {} port {} (session {}), {} stream(s), tune {}, {}",
            r.start.connecting_to.host,
            r.start.connecting_to.port,
            r.start.cookie,
            r.start.test_start.num_streams,
            t.tune
                .parse::<TuneMode>()
                .map_or(t.tune.clone(), |m| m.describe()),
            if t.workload == "duration" {
                t.duration_s.map_or_else(
                    || format!("{}s", r.start.test_start.duration),
                    |s| format_duration(std::time::Duration::from_secs_f64(s.max(0.0))),
                )
            } else {
                format!("{} x {}", t.messages, Bytes(t.message_size))
            }
        );
    }
    let _ = writeln!(
        o,
        "Path: RTT {} (control connection){}{}; congestion control {}",
        t.path_hint.rtt.map_or("unknown".into(), human_duration),
        t.path_hint.rate.map_or(String::new(), |x| format!(
            ", rate {}{}",
            if t.path_hint.rate_is_lower_bound {
                "at least "
            } else {
                ""
            },
            x.human()
        )),
        rate_source(t),
        t.congestion
    );
    if let Some(ib) = t.measurement.as_ref().and_then(|m| m.in_band.as_ref()) {
        let rate = tcptune_core::Rate(ib.rate_bps);
        let _ = match ib.corrects_bps {
            Some(old) if ib.lower_bound => writeln!(
                o,
                "Path database kept: it said {}, this transfer got at least {rate} (found after {:.2} s) beside another flow whose queue its RTT showed; both ends then left their buffers to grow as kernel autotuning's would",
                tcptune_core::Rate(old),
                ib.after_seconds
            ),
            Some(old) => writeln!(
                o,
                "Path database corrected: it said {}, this transfer delivers {rate} (found after {:.2} s): buffers resized, the entry replaced",
                tcptune_core::Rate(old),
                ib.after_seconds
            ),
            None if ib.lower_bound => writeln!(
                o,
                "Measured in band: at least {rate} (after {:.2} s, {} rounds), what the streams got beside another flow whose queue their RTT showed; both ends then left their buffers to grow as kernel autotuning's would, and the path database keeps it as a lower bound",
                ib.after_seconds, ib.rounds
            ),
            None => writeln!(
                o,
                "Measured in band: {rate} (the pipe was full after {:.2} s, {} rounds); both ends then sized their buffers for it",
                ib.after_seconds, ib.rounds
            ),
        };
    }
    if let Some(r) = &t.resume {
        let _ = match (r.used, r.initcwnd_segs, r.pacing_bps) {
            (true, Some(w), Some(p)) => writeln!(
                o,
                "Careful resume: the streams started with a {w}-segment window, paced at {} each for their first round trips (route {}, removed once they connected)",
                tcptune_core::Rate(p).human(),
                r.route.as_deref().unwrap_or("?")
            ),
            _ => writeln!(
                o,
                "Careful resume not used: {}",
                r.why_not.as_deref().unwrap_or("unknown")
            ),
        };
    }
}

/// Where the path's rate came from, in words (empty when nothing was measured).
fn rate_source(t: &StartTcptune) -> String {
    let Some(m) = &t.measurement else {
        return t
            .probe_seconds
            .map_or(String::new(), |s| format!(" (probed for {s:.2} s)"));
    };
    match m.source.as_str() {
        "probe" => {
            let p = m.probe.as_ref();
            format!(
                " (probed for {:.2} s{}{})",
                m.seconds,
                p.map_or(String::new(), |p| format!(", {} streams", p.streams)),
                match p.map(|p| p.full_pipe) {
                    Some(true) => ", pipe full",
                    Some(false) => ", no plateau before the time bound",
                    None => "",
                }
            )
        }
        "path_db" => path_db_source(m.path_db.as_ref()),
        "given" => " (given)".to_string(),
        "in_band" => " (to be measured by the transfer itself)".to_string(),
        _ => String::new(),
    }
}

/// "(from the path database, ...)": the entry's measurements and age, and the queue its
/// handshake waited behind when the entry was found at the path's base RTT.
fn path_db_source(db: Option<&super::PathDbReport>) -> String {
    format!(
        " (from the path database{}{}{}, no probe)",
        db.and_then(|d| d.entry_samples)
            .map_or(String::new(), |n| format!(", {n} measurement(s)")),
        db.and_then(|d| d.entry_age_s)
            .map_or(String::new(), |a| format!(", {} old", age(a))),
        db.and_then(|d| d.queue_over_base_us)
            .map_or(String::new(), |q| format!(
                ", measured {:.1} ms shorter: the handshake waited behind another flow's queue",
                q as f64 / 1000.0
            ))
    )
}

fn age(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else if s < 172_800.0 {
        format!("{:.0} h", s / 3600.0)
    } else {
        format!("{:.0} days", s / 86400.0)
    }
}

/// The summary, with or without the "Connecting to" line and the interval table (leave
/// them out when they were already shown live).
pub fn summary_with(r: &Report, intervals: bool) -> String {
    let mut o = String::new();
    write_preamble(&mut o, r, intervals);
    if intervals && !r.intervals.is_empty() {
        let _ = writeln!(o, "{}", interval_header());
        for iv in &r.intervals {
            for l in interval_lines(iv) {
                let _ = writeln!(o, "{l}");
            }
        }
    }
    write_streams(&mut o, &r.end);
    write_resources(&mut o, r);
    write_findings(&mut o, &r.end.tcptune);
    let _ = writeln!(o, "{}", verdict(r));
    o
}

/// The table of streams and the two `[SUM]` lines.
fn write_streams(o: &mut String, e: &End) {
    let _ = writeln!(o, "- - - - - - - - - - - - - - - - - - - - - - - - -");
    let _ = writeln!(
        o,
        "[ ID] Received     Bitrate         Retr  RTT min/avg/max       SndBuf peak  RcvBuf peak  rwnd-lim sndbuf-lim"
    );
    for (es, d) in e.streams.iter().zip(&e.tcptune.streams) {
        let busy = es.sender.seconds;
        let _ = writeln!(
            o,
            "[{:>3}] {:>10}  {:>14}  {:>4}  {:>6}/{:>6}/{:>6}  {:>11}  {:>11}  {:>8} {:>10}{}",
            es.receiver.socket,
            bytes(es.receiver.bytes),
            rate(es.receiver.bits_per_second),
            d.sender.stats.retransmits,
            us(d.sender.stats.rtt_min_us),
            us(d.sender.stats.rtt_avg_us),
            us(d.sender.stats.rtt_max_us),
            bytes(d.sender.stats.peak_sndbuf_bytes),
            bytes(d.receiver.stats.peak_rcvbuf_bytes),
            pct_of(d.sender.stats.rwnd_limited_us, busy),
            pct_of(d.sender.stats.sndbuf_limited_us, busy),
            if d.opened_at_s > 0.0 {
                format!("  (opened at {:.2} s)", d.opened_at_s)
            } else {
                String::new()
            }
        );
    }
    let _ = writeln!(
        o,
        "[SUM] {:>10}  {:>14}  {:>4}  sender   ({:.2} s)",
        bytes(e.sum_sent.bytes),
        rate(e.sum_sent.bits_per_second),
        e.sum_sent.retransmits.unwrap_or(0),
        e.sum_sent.seconds
    );
    let _ = writeln!(
        o,
        "[SUM] {:>10}  {:>14}        receiver ({:.2} s, first byte to last byte)",
        bytes(e.sum_received.bytes),
        rate(e.sum_received.bits_per_second),
        e.sum_received.seconds
    );
}

/// What the transfer cost: buffers, CPU and where the time went (the path database's
/// warnings go to stderr: `send` and `cp` print them).
fn write_resources(o: &mut String, r: &Report) {
    let (t, e) = (&r.start.tcptune, &r.end);
    let tt = &e.tcptune;
    let _ = writeln!(
        o,
        "Buffers: peak send {} (queued {}), peak receive {} (held {}); CPU local {:.0}%, remote {:.0}%",
        bytes(tt.peak_sndbuf_bytes),
        bytes(tt.peak_wmem_queued_bytes),
        bytes(tt.peak_rcvbuf_bytes),
        bytes(tt.peak_rmem_alloc_bytes),
        e.cpu_utilization_percent.host_total,
        e.cpu_utilization_percent.remote_total
    );
    if let Some(total) = tt.session_seconds {
        let measuring = t.measurement.as_ref().map_or(0.0, |m| m.seconds);
        let _ = writeln!(
            o,
            "Time: {:.2} s in all = {:.2} s measuring the path + {:.2} s opening streams + {:.2} s moving data (+ control)",
            total,
            measuring,
            tt.setup_seconds.unwrap_or(0.0),
            e.sum_received.seconds
        );
    }
}

/// What the report says about itself: adjustments, the limiter, and added streams.
fn write_findings(o: &mut String, tt: &EndTcptune) {
    for a in &tt.adjustments {
        let _ = writeln!(
            o,
            "Adjusted: {}{}{}",
            a.note,
            if a.streams > 1 {
                format!(" ({} streams)", a.streams)
            } else {
                String::new()
            },
            a.fix
                .as_ref()
                .map_or(String::new(), |f| format!(". Fix: {f}"))
        );
    }
    if let Some(d) = &tt.diagnosis {
        let _ = writeln!(o, "Limited by: {}", d.summary);
    }
    if tt.streams_used != tt.streams_requested {
        let _ = writeln!(
            o,
            "Streams: {} requested, {} used{}",
            tt.streams_requested,
            tt.streams_used,
            tt.streams_reason
                .as_ref()
                .map_or(String::new(), |r| format!(" ({r})"))
        );
    }
}

/// The last line: failed, interrupted, capped or complete.
fn verdict(r: &Report) -> String {
    let (t, e) = (&r.start.tcptune, &r.end);
    let tt = &e.tcptune;
    if let Some(err) = &r.error {
        format!("FAILED: {err}")
    } else if tt.interrupted {
        format!(
            "INTERRUPTED: {} moved in {:.2} s ({} of {} messages verified); the figures are from the bytes that moved",
            bytes(e.sum_received.bytes),
            e.sum_received.seconds,
            tt.messages_received,
            if t.workload == "duration" {
                "the".to_string()
            } else {
                t.messages.to_string()
            }
        )
    } else if tt.capped {
        format!(
            "capped by --max-time: {} of {} messages moved; throughput is from the bytes that moved",
            tt.messages_received, t.messages
        )
    } else if t.workload == "duration" {
        "complete: every byte verified".to_string()
    } else {
        format!(
            "complete: {} messages, every byte verified",
            tt.messages_received
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_found_at_the_base_rtt_names_the_queue_the_handshake_waited_behind() {
        let mut db = super::super::PathDbReport {
            file: "paths.sqlite".into(),
            used: true,
            entry_age_s: Some(30.0),
            entry_samples: Some(2),
            entry_full_pipe: Some(true),
            queue_over_base_us: None,
            recorded: Vec::new(),
            warnings: Vec::new(),
        };
        assert_eq!(
            path_db_source(Some(&db)),
            " (from the path database, 2 measurement(s), 30 s old, no probe)"
        );
        db.queue_over_base_us = Some(23_460);
        assert_eq!(
            path_db_source(Some(&db)),
            " (from the path database, 2 measurement(s), 30 s old, measured 23.5 ms shorter: the handshake waited behind another flow's queue, no probe)"
        );
    }
}
