//! Turning both ends' results into the [`Report`], and judging the run: complete,
//! capped, short, corrupted or failed.

use super::{
    Connected, ConnectingTo, CpuSeconds, CpuUtilization, End, EndStream, EndTcptune, Interval,
    MeasurementReport, QueueReport, Report, ResumeReport, SideDetail, Start, StartTcptune,
    StreamDetail, StreamSum, Sum, TestStart, Timestamp, SCHEMA_VERSION,
};
use crate::client::ClientConfig;
use crate::engine::{SideResult, StreamSide};
use crate::proto::TestParams;
use std::net::SocketAddr;
use std::time::Duration;
use tcptune_core::{HostLimits, PathHint, TuneMode};
use tcptune_sys::os::CpuTimes;

/// Everything the report is made of.
pub(crate) struct Assembly<'a> {
    pub(crate) cfg: &'a ClientConfig,
    pub(crate) params: &'a TestParams,
    pub(crate) addr: SocketAddr,
    pub(crate) session_hex: &'a str,
    pub(crate) hint: &'a PathHint,
    pub(crate) probe_seconds: Option<f64>,
    pub(crate) measurement: Option<MeasurementReport>,
    pub(crate) setup_seconds: Option<f64>,
    pub(crate) session_seconds: Option<f64>,
    pub(crate) round_trips: (Option<f64>, Option<f64>),
    pub(crate) delivery_rate_max_bps: Option<u64>,
    pub(crate) sender_limits: HostLimits,
    pub(crate) receiver_limits: HostLimits,
    pub(crate) congestion: String,
    pub(crate) local: &'a SideResult,
    pub(crate) remote: &'a SideResult,
    pub(crate) intervals: Vec<Interval>,
    pub(crate) host_cpu: CpuTimes,
    pub(crate) host_wall: Duration,
    /// Whether the server asked for the shared secret (unknown without its answer).
    pub(crate) server_requires_secret: Option<bool>,
    pub(crate) resume: Option<ResumeReport>,
    pub(crate) queue: Option<QueueReport>,
    pub(crate) share: Option<crate::report::ShareReport>,
    pub(crate) capped: bool,
    pub(crate) interrupted: bool,
    pub(crate) streams_reason: Option<String>,
}

/// What is wrong with a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Bytes did not check out, or fewer arrived than were sent / asked for.
    Integrity(String),
    /// Something else failed.
    Failed(String),
}

/// First-to-last span over streams, from each stream's `first_s`/`last_s`.
fn span(streams: &[StreamSide]) -> (f64, f64) {
    let first = streams
        .iter()
        .filter_map(|s| s.first_s)
        .fold(f64::INFINITY, f64::min);
    let last = streams
        .iter()
        .filter_map(|s| s.last_s)
        .fold(f64::NEG_INFINITY, f64::max);
    if first.is_finite() && last.is_finite() && last >= first {
        (first, last)
    } else {
        (0.0, 0.0)
    }
}

fn bps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 * 8.0 / secs
    } else {
        0.0
    }
}

fn pct(cpu: f64, wall: f64) -> f64 {
    if wall > 0.0 {
        100.0 * cpu / wall
    } else {
        0.0
    }
}

fn stream_sum(s: Option<&StreamSide>, socket: u32, sender: bool) -> StreamSum {
    let (start, end) = s.map_or((0.0, 0.0), |s| {
        (s.first_s.unwrap_or(0.0), s.last_s.unwrap_or(0.0))
    });
    let seconds = (end - start).max(0.0);
    let bytes = s.map_or(0, |s| s.bytes);
    let d = s.map(|s| &s.detail);
    StreamSum {
        socket,
        start,
        end,
        seconds,
        bytes,
        bits_per_second: bps(bytes, seconds),
        retransmits: sender.then(|| d.map_or(0, |d| d.stats.retransmits)),
        max_snd_cwnd: if sender {
            d.map(|d| d.stats.cwnd_max_bytes)
        } else {
            None
        },
        max_snd_wnd: if sender {
            d.map(|d| d.stats.snd_wnd_max_bytes)
        } else {
            None
        },
        max_rtt: if sender {
            d.and_then(|d| d.stats.rtt_max_us).map(u64::from)
        } else {
            None
        },
        min_rtt: if sender {
            d.and_then(|d| d.stats.rtt_min_us).map(u64::from)
        } else {
            None
        },
        mean_rtt: if sender {
            d.and_then(|d| d.stats.rtt_avg_us).map(u64::from)
        } else {
            None
        },
        sender,
    }
}

/// Build the report at `now_unix` (time since the Unix epoch) and judge the run, step by
/// step: pair both ends' streams, sum them, judge the run, then fill `start` and `end`,
/// and let the report diagnose itself.
pub(crate) fn assemble_at(a: Assembly<'_>, now_unix: Duration) -> (Report, Result<(), Verdict>) {
    let (snd, rcv) = if a.params.reverse {
        (a.remote, a.local)
    } else {
        (a.local, a.remote)
    };
    let (end_streams, details) = pair_streams(snd, rcv, a.local, a.remote);
    let (sum_sent, sum_received) = sums(snd, rcv, &details);
    let cpu = cpu_utilization(&a);
    let (complete, verdict) = judge(&a, snd, rcv);
    let error = verdict.as_ref().err().map(|v| match v {
        Verdict::Integrity(e) => format!("integrity failure: {e}"),
        Verdict::Failed(e) => format!("transfer failed: {e}"),
    });
    let tcptune_end = end_tcptune(&a, snd, rcv, details, complete, verdict.as_ref().err());
    let sender_tcp_congestion = snd.congestion.clone();
    let receiver_tcp_congestion = rcv.congestion.clone();
    let (start, intervals) = start(a, now_unix);
    let mut report = Report {
        schema_version: SCHEMA_VERSION,
        start,
        intervals,
        end: End {
            streams: end_streams,
            sum_sent,
            sum_received,
            cpu_utilization_percent: cpu,
            sender_tcp_congestion,
            receiver_tcp_congestion,
            tcptune: tcptune_end,
        },
        error,
    };
    super::diagnose::annotate(&mut report);
    (report, verdict)
}

/// Each stream number of either end, with the sender's and the receiver's view of it: the
/// iperf3 sums of `end.streams` and the details of `end.tcptune.streams`.
fn pair_streams(
    snd: &SideResult,
    rcv: &SideResult,
    local: &SideResult,
    remote: &SideResult,
) -> (Vec<EndStream>, Vec<StreamDetail>) {
    let n = local.streams.len().max(remote.streams.len());
    let find = |side: &SideResult, i: u32| side.streams.iter().find(|s| s.stream == i).cloned();
    let mut end_streams = Vec::new();
    let mut details = Vec::new();
    for i in 1..=n as u32 {
        let s = find(snd, i);
        let r = find(rcv, i);
        end_streams.push(EndStream {
            sender: stream_sum(s.as_ref(), i, true),
            receiver: stream_sum(r.as_ref(), i, false),
        });
        let opened = find(local, i).map_or(0.0, |x| x.opened_at_s.max(0.0));
        details.push(StreamDetail {
            socket: i,
            opened_at_s: opened,
            messages: r.as_ref().map_or(0, |r| r.messages),
            sender: s.map(|s| s.detail).unwrap_or_else(SideDetail::default),
            receiver: r.map(|r| r.detail).unwrap_or_else(SideDetail::default),
        });
    }
    (end_streams, details)
}

/// `end.sum_sent` and `end.sum_received`: each end's bytes over its own first-to-last span.
fn sums(snd: &SideResult, rcv: &SideResult, details: &[StreamDetail]) -> (Sum, Sum) {
    let sent_bytes: u64 = snd.streams.iter().map(|s| s.bytes).sum();
    let recv_bytes: u64 = rcv.streams.iter().map(|s| s.bytes).sum();
    let (sf, sl) = span(&snd.streams);
    let (rf, rl) = span(&rcv.streams);
    let retrans: u64 = details.iter().map(|d| d.sender.stats.retransmits).sum();
    let sum_sent = Sum {
        start: 0.0,
        end: sl,
        seconds: sl - sf,
        bytes: sent_bytes,
        bits_per_second: bps(sent_bytes, sl - sf),
        retransmits: Some(retrans),
        sender: true,
    };
    let sum_received = Sum {
        start: 0.0,
        end: rl,
        seconds: rl - rf,
        bytes: recv_bytes,
        bits_per_second: bps(recv_bytes, rl - rf),
        retransmits: None,
        sender: false,
    };
    (sum_sent, sum_received)
}

/// `end.cpu_utilization_percent`: this host's and the server's CPU over their wall times.
fn cpu_utilization(a: &Assembly<'_>) -> CpuUtilization {
    let wall = a.host_wall.as_secs_f64();
    CpuUtilization {
        host_total: pct(a.host_cpu.total().as_secs_f64(), wall),
        host_user: pct(a.host_cpu.user.as_secs_f64(), wall),
        host_system: pct(a.host_cpu.system.as_secs_f64(), wall),
        remote_total: pct(a.remote.cpu_user_s + a.remote.cpu_system_s, a.remote.wall_s),
        remote_user: pct(a.remote.cpu_user_s, a.remote.wall_s),
        remote_system: pct(a.remote.cpu_system_s, a.remote.wall_s),
    }
}

/// The judgement: whether the run is complete, and what is wrong with it if anything. At
/// the cap or an interrupt both ends tore their streams down at once: the resets that
/// causes are not failures, and fewer bytes than asked are expected.
fn judge(a: &Assembly<'_>, snd: &SideResult, rcv: &SideResult) -> (bool, Result<(), Verdict>) {
    let stopped_early = a.capped || a.interrupted;
    let total_messages = a.params.messages;
    let duration_workload = a.params.duration_ms.is_some();
    let sent_bytes: u64 = snd.streams.iter().map(|s| s.bytes).sum();
    let recv_bytes: u64 = rcv.streams.iter().map(|s| s.bytes).sum();
    let recv_messages: u64 = rcv.streams.iter().map(|s| s.messages).sum();
    let integrity = a
        .local
        .integrity_error
        .clone()
        .or_else(|| a.remote.integrity_error.clone());
    let stream_errors = stream_errors(snd, rcv);
    let partial: u64 = rcv.streams.iter().map(|s| s.partial_bytes).sum();
    let because = || {
        if stream_errors.is_empty() {
            String::new()
        } else {
            format!(" ({})", stream_errors.join("; "))
        }
    };
    if let Some(e) = integrity {
        (false, Err(Verdict::Integrity(e)))
    } else if recv_bytes > sent_bytes || (!stopped_early && sent_bytes != recv_bytes) {
        let e = format!(
            "short transfer: {sent_bytes} bytes sent but {recv_bytes} verified at the receiver{}",
            because()
        );
        (false, Err(Verdict::Integrity(e)))
    } else if !duration_workload
        && !stopped_early
        && (recv_messages != total_messages || partial > 0)
    {
        let e = format!(
            "short transfer: {recv_messages} of {total_messages} messages arrived{}",
            because()
        );
        (false, Err(Verdict::Integrity(e)))
    } else if !stream_errors.is_empty() && !stopped_early {
        // (At the cap both ends tear their streams down at once; the resets that causes
        // are not failures: the throughput is from the bytes verified until then.)
        (false, Err(Verdict::Failed(stream_errors.join("; "))))
    } else {
        (!stopped_early, Ok(()))
    }
}

/// Every stream's error, sender's first, each said with its end and stream.
fn stream_errors(snd: &SideResult, rcv: &SideResult) -> Vec<String> {
    snd.streams
        .iter()
        .chain(rcv.streams.iter())
        .filter_map(|s| {
            s.error.as_ref().map(|e| {
                format!(
                    "{} stream {}: {e}",
                    if s.sender { "sender" } else { "receiver" },
                    s.stream
                )
            })
        })
        .collect()
}

/// `end.tcptune`, without the adjustments and diagnosis (the report adds those itself).
fn end_tcptune(
    a: &Assembly<'_>,
    snd: &SideResult,
    rcv: &SideResult,
    details: Vec<StreamDetail>,
    complete: bool,
    failure: Option<&Verdict>,
) -> EndTcptune {
    let n = details.len() as u32;
    let sum_over = |f: &dyn Fn(&StreamDetail) -> u64| details.iter().map(f).sum::<u64>();
    EndTcptune {
        tune: a.params.tune.to_string(),
        complete,
        capped: a.capped,
        interrupted: a.interrupted,
        streams_requested: a.params.streams,
        streams_used: n,
        streams_reason: if n > a.params.streams {
            a.streams_reason.clone()
        } else {
            None
        },
        peak_sndbuf_bytes: sum_over(&|d| d.sender.stats.peak_sndbuf_bytes),
        peak_rcvbuf_bytes: sum_over(&|d| d.receiver.stats.peak_rcvbuf_bytes),
        peak_wmem_queued_bytes: sum_over(&|d| d.sender.stats.peak_wmem_queued_bytes),
        peak_rmem_alloc_bytes: sum_over(&|d| d.receiver.stats.peak_rmem_alloc_bytes),
        peak_sndbuf_total_bytes: snd.peaks.sndbuf_bytes,
        peak_rcvbuf_total_bytes: rcv.peaks.rcvbuf_bytes,
        messages_received: rcv.streams.iter().map(|s| s.messages).sum(),
        streams: details,
        setup_seconds: a.setup_seconds,
        session_seconds: a.session_seconds,
        setup_round_trips: a.round_trips.0,
        finish_round_trips: a.round_trips.1,
        delivery_rate_max_bps: a.delivery_rate_max_bps,
        share: a.share.clone(),
        cpu_s: CpuSeconds {
            host_user: a.host_cpu.user.as_secs_f64(),
            host_system: a.host_cpu.system.as_secs_f64(),
            remote_user: a.remote.cpu_user_s,
            remote_system: a.remote.cpu_system_s,
        },
        error: failure.map(|v| match v {
            Verdict::Integrity(e) | Verdict::Failed(e) => e.clone(),
        }),
        adjustments: Vec::new(),
        diagnosis: None,
    }
}

/// `start`, and the intervals: the last step, which takes what is left of the assembly.
fn start(a: Assembly<'_>, now_unix: Duration) -> (Start, Vec<Interval>) {
    let start = Start {
        connected: connected(a.local),
        version: format!("tcptune {}", env!("CARGO_PKG_VERSION")),
        system_info: tcptune_sys::os::system_info(),
        timestamp: Timestamp::from_unix(started_at(now_unix, a.session_seconds)),
        connecting_to: ConnectingTo {
            host: host_part(&a.cfg.server),
            port: a.addr.port(),
        },
        cookie: a.session_hex.to_string(),
        tcp_mss_default: first_stream_mss(a.local),
        sock_bufsize: match &a.params.tune {
            TuneMode::Fixed(b) => b.0,
            TuneMode::None => TuneMode::UNTUNED_BUFFER.0,
            _ => 0,
        },
        test_start: test_start(a.params),
        tcptune: StartTcptune {
            tune: a.params.tune.to_string(),
            workload: if a.params.duration_ms.is_some() {
                "duration"
            } else {
                "messages"
            }
            .into(),
            messages: if a.params.duration_ms.is_some() {
                0
            } else {
                a.params.messages
            },
            message_size: a.params.message_size,
            duration_s: a.params.duration_ms.map(|d| d as f64 / 1000.0),
            max_time_s: a.params.max_time_ms.map(|m| m as f64 / 1000.0),
            path_hint: a.hint.clone(),
            sender_limits: a.sender_limits,
            receiver_limits: a.receiver_limits,
            congestion: a.congestion,
            probe_seconds: a.probe_seconds,
            measurement: a.measurement,
            server_requires_secret: a.server_requires_secret,
            resume: a.resume,
            queue: a.queue,
        },
    };
    (start, a.intervals)
}

/// `start.test_start`, iperf3's description of the test.
fn test_start(p: &TestParams) -> TestStart {
    let duration_workload = p.duration_ms.is_some();
    TestStart {
        protocol: "TCP".into(),
        num_streams: p.streams,
        blksize: p.message_size,
        omit: 0,
        duration: p.duration_ms.map_or(0, |d| d.div_ceil(1000)),
        bytes: if duration_workload {
            0
        } else {
            p.messages.saturating_mul(p.message_size)
        },
        blocks: if duration_workload { 0 } else { p.messages },
        reverse: u32::from(p.reverse),
        tos: 0,
        target_bitrate: 0,
    }
}

/// `start.connected`: this end's streams, with their addresses.
fn connected(local: &SideResult) -> Vec<Connected> {
    local
        .streams
        .iter()
        .map(|s| {
            let (lh, lp) = split_addr(&s.local);
            let (rh, rp) = split_addr(&s.remote);
            Connected {
                socket: s.stream,
                local_host: lh,
                local_port: lp,
                remote_host: rh,
                remote_port: rp,
            }
        })
        .collect()
}

/// When the session started, Unix seconds: `session_seconds` before `now_unix` (0 if that
/// is before 1970).
fn started_at(now_unix: Duration, session_seconds: Option<f64>) -> u64 {
    now_unix
        .checked_sub(Duration::from_secs_f64(
            session_seconds.unwrap_or(0.0).clamp(0.0, 1e9),
        ))
        .map_or(0, |d| d.as_secs())
}

/// The MSS of this end's first stream: its largest congestion window in bytes over the same
/// window in segments (`snd_cwnd * snd_mss` and `snd_cwnd` of the same sample, as long as
/// the MSS did not change).
fn first_stream_mss(side: &SideResult) -> Option<u64> {
    let s = side.streams.iter().min_by_key(|s| s.stream)?;
    let segs = u64::from(s.detail.stats.cwnd_max_segs);
    (segs > 0 && s.detail.stats.cwnd_max_bytes > 0).then(|| s.detail.stats.cwnd_max_bytes / segs)
}

/// The host of `HOST`, `HOST:PORT`, `[V6]:PORT` or `V6`.
fn host_part(s: &str) -> String {
    let s = s.trim();
    if let Ok(a) = s.parse::<SocketAddr>() {
        return a.ip().to_string();
    }
    if let Some(rest) = s.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest).to_string();
    }
    match s.split_once(':') {
        Some((h, p)) if !p.contains(':') => h.to_string(),
        _ => s.to_string(),
    }
}

fn split_addr(s: &str) -> (String, u16) {
    match s.parse::<SocketAddr>() {
        Ok(a) => (a.ip().to_string(), a.port()),
        Err(_) => (s.to_string(), 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::SideDetail;
    use tcptune_core::TuneMode;

    fn side(sender: bool, bytes: &[u64], messages: u64, partial: u64) -> SideResult {
        SideResult {
            streams: bytes
                .iter()
                .enumerate()
                .map(|(i, &b)| StreamSide {
                    stream: i as u32 + 1,
                    sender,
                    bytes: b,
                    messages,
                    partial_bytes: partial,
                    first_s: Some(0.1 * i as f64),
                    last_s: Some(1.0 + 0.5 * i as f64),
                    opened_at_s: 0.0,
                    tail_bits_per_second: None,
                    local: "127.0.0.1:1000".into(),
                    remote: "127.0.0.1:2000".into(),
                    detail: SideDetail::default(),
                    error: None,
                })
                .collect(),
            wall_s: 2.0,
            ..SideResult::default()
        }
    }

    fn params(messages: u64) -> TestParams {
        TestParams {
            tune: TuneMode::Kernel,
            streams: 2,
            message_size: 100,
            messages,
            duration_ms: None,
            max_time_ms: None,
            reverse: false,
            samples: false,
            congestion: None,
            seed: 1,
            corrupt_message: None,
            files: None,
            share: false,
        }
    }

    fn judge(
        local: &SideResult,
        remote: &SideResult,
        p: &TestParams,
        capped: bool,
    ) -> (Report, Result<(), Verdict>) {
        let cfg = ClientConfig::new("127.0.0.1:5310");
        let assembly = Assembly {
            cfg: &cfg,
            params: p,
            addr: "127.0.0.1:5310".parse().expect("addr"),
            session_hex: "00",
            hint: &PathHint::default(),
            probe_seconds: None,
            measurement: None,
            setup_seconds: None,
            session_seconds: None,
            round_trips: (None, None),
            delivery_rate_max_bps: None,
            sender_limits: HostLimits::linux_defaults(),
            receiver_limits: HostLimits::linux_defaults(),
            congestion: "cubic".into(),
            local,
            remote,
            intervals: Vec::new(),
            host_cpu: CpuTimes::default(),
            host_wall: Duration::from_secs(2),
            server_requires_secret: None,
            resume: None,
            queue: None,
            share: None,
            capped,
            interrupted: false,
            streams_reason: None,
        };
        assemble_at(assembly, Duration::from_secs(NOW_UNIX_S))
    }

    /// The wall clock's time in the tests: 2024-01-02 03:04:05 UTC.
    const NOW_UNIX_S: u64 = 1_704_164_645;

    #[test]
    fn receiver_span_is_first_arrival_to_last_arrival_over_all_streams() {
        let (r, v) = judge(
            &side(true, &[500, 500], 5, 0),
            &side(false, &[500, 500], 5, 0),
            &params(10),
            false,
        );
        assert_eq!(v, Ok(()));
        assert!(r.end.tcptune.complete);
        assert_eq!(r.end.sum_received.bytes, 1000);
        // Stream 1 from 0.0 to 1.0, stream 2 from 0.1 to 1.5: 1.5 s in all.
        assert!((r.end.sum_received.seconds - 1.5).abs() < 1e-9);
        assert!((r.end.sum_received.bits_per_second - 8000.0 / 1.5).abs() < 1e-6);
    }

    #[test]
    fn fewer_bytes_at_the_receiver_is_an_integrity_failure_unless_capped() {
        let snd = side(true, &[500, 500], 5, 0);
        let rcv = side(false, &[500, 450], 4, 50);
        let (r, v) = judge(&snd, &rcv, &params(10), false);
        assert!(
            matches!(v, Err(Verdict::Integrity(ref m)) if m.contains("short transfer")),
            "{v:?}"
        );
        assert!(!r.end.tcptune.complete);
        assert!(r.error.is_some());
        let (r, v) = judge(&snd, &rcv, &params(10), true);
        assert_eq!(v, Ok(()));
        assert!(r.end.tcptune.capped && !r.end.tcptune.complete);
        // More at the receiver than was sent can never be right.
        let (_, v) = judge(&side(true, &[10, 10], 0, 0), &rcv, &params(10), true);
        assert!(matches!(v, Err(Verdict::Integrity(_))));
    }

    #[test]
    fn missing_messages_and_stream_errors_fail_the_run() {
        let (_, v) = judge(
            &side(true, &[400, 400], 4, 0),
            &side(false, &[400, 400], 4, 0),
            &params(10),
            false,
        );
        assert!(
            matches!(v, Err(Verdict::Integrity(ref m)) if m.contains("8 of 10")),
            "{v:?}"
        );
        let mut snd = side(true, &[500, 500], 5, 0);
        snd.streams[1].error = Some("write: broken pipe".into());
        let (_, v) = judge(&snd, &side(false, &[500, 500], 5, 0), &params(10), false);
        assert!(
            matches!(v, Err(Verdict::Failed(ref m)) if m.contains("sender stream 2")),
            "{v:?}"
        );
        let mut rcv = side(false, &[500, 500], 5, 0);
        rcv.integrity_error = Some("stream 1: message 3 byte 7".into());
        let (_, v) = judge(&side(true, &[500, 500], 5, 0), &rcv, &params(10), false);
        assert!(matches!(v, Err(Verdict::Integrity(ref m)) if m.contains("message 3")));
    }

    #[test]
    fn the_start_timestamp_is_the_session_length_before_the_time_given() {
        let now = Duration::from_secs(NOW_UNIX_S);
        assert_eq!(started_at(now, Some(3.5)), NOW_UNIX_S - 4);
        assert_eq!(started_at(now, None), NOW_UNIX_S);
        // Before 1970 (a clock set wrong) is 0, and a negative length counts as none.
        assert_eq!(started_at(Duration::from_secs(2), Some(5.0)), 0);
        assert_eq!(started_at(now, Some(-1.0)), NOW_UNIX_S);
    }

    #[test]
    fn iperf3_start_fields_are_filled() {
        let mut local = side(true, &[500, 500], 5, 0);
        local.streams[0].detail.stats.cwnd_max_segs = 10;
        local.streams[0].detail.stats.cwnd_max_bytes = 14_480;
        let mut p = params(10);
        p.tune = TuneMode::Fixed(tcptune_core::Bytes::kib(256));
        let (r, _) = judge(&local, &side(false, &[500, 500], 5, 0), &p, false);
        assert_eq!(r.start.tcp_mss_default, Some(1448));
        assert_eq!(r.start.sock_bufsize, 256 * 1024);
        assert_eq!(r.start.timestamp.timesecs, NOW_UNIX_S);
        assert_eq!(r.start.timestamp.time, "Tue, 02 Jan 2024 03:04:05 GMT");
        let v = serde_json::to_value(&r).expect("json");
        assert_eq!(v["start"]["test_start"]["tos"], 0);
        assert!(v.get("error").is_none(), "no error key on success: {v}");
    }
}
