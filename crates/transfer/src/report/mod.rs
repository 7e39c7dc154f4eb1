//! The machine-readable report of a transfer (`tcptune send --json`).
//!
//! The shape follows iperf3's `--json` output (`start` / `intervals` / `end`) so existing
//! parsers keep working; in particular `end.sum_received.bytes`, `.seconds` and
//! `.bits_per_second` mean what they mean in iperf3: measured at the receiver. tcptune's own
//! additions live under `start.tcptune` and `end.tcptune`. Bump [`SCHEMA_VERSION`] on any
//! incompatible change. Types derive `Deserialize` too, so the lab reads reports back.
//!
//! # What iperf3's consumers read
//!
//! Every field iperf3 3.x writes for a TCP client test is here under its name, so scripts
//! written for iperf3 work unchanged; the `iperf3` package on PyPI (`iperf3.TestResult`, used
//! by many monitoring scripts) reads `start.timestamp.{time,timesecs}`, `start.system_info`,
//! `start.version`, `start.connected[0]`, `start.tcp_mss_default` (optional),
//! `start.test_start.{protocol,num_streams,blksize,omit,duration,reverse}`,
//! `end.cpu_utilization_percent.*`, `end.sum_sent.{bytes,bits_per_second,retransmits}` and
//! `end.sum_received.{bytes,bits_per_second}`, and treats a report with a top-level `error`
//! key as a failed test (reading nothing else): `error` is therefore absent unless the run
//! failed. A run that failed before any report existed (no connection) prints a
//! [`FailureReport`], iperf3's shape for that case.
//!
//! # How the report is made
//!
//! * `assemble` builds the report step by step from both ends' results
//!   and judges the run (complete, capped, short, corrupted or failed).
//! * [`diagnose`] is a pure function of a finished report: the buffer requests the kernel
//!   did not take as asked ([`Adjustment`]) and what limited the transfer ([`Diagnosis`]).
//! * [`human`] formats a report for people; `serde` is how the report spells the core
//!   types it carries.
//!
//! The types sit here, below `assemble`, `diagnose` and `human`, which use them; the types
//! use only `serde`'s spellings, never the modules above them.

pub(crate) mod assemble;
pub mod diagnose;
pub mod human;
pub(crate) mod serde;

use ::serde::{Deserialize, Serialize};
pub use tcptune_core::SampleRecord;
use tcptune_core::{HostLimits, PathHint};

/// Version of this schema. 2: units in the names of tcptune's own fields (`rtt_us`,
/// `rate_bps`, `*_bytes`, `*_s`), `null` for unknown values instead of absent keys or 0,
/// `end.tcptune.adjustments` and `.diagnosis`, `start.tcptune.duration_s`. Version 1 records
/// still read back.
pub const SCHEMA_VERSION: u32 = 2;

/// A whole report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// What was set up.
    pub start: Start,
    /// Per-interval throughput (one per second by default), as in iperf3.
    pub intervals: Vec<Interval>,
    /// Totals.
    pub end: End,
    /// Set when the run failed; the rest of the report holds what was measured until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// iperf3's `start` object, plus `tcptune`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Start {
    /// Data connections as opened (iperf3: `connected`).
    pub connected: Vec<Connected>,
    /// `tcptune X.Y.Z`.
    pub version: String,
    /// `uname -a`-like description of this host.
    pub system_info: String,
    /// When the session started (iperf3: `timestamp`).
    #[serde(default)]
    pub timestamp: Timestamp,
    /// Server the client connected to.
    pub connecting_to: ConnectingTo,
    /// Session id (iperf3: `cookie`).
    pub cookie: String,
    /// MSS of the first data stream at this end, bytes (iperf3: the control connection's
    /// default MSS); absent when no stream reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_mss_default: Option<u64>,
    /// The fixed socket buffer asked for (iperf3's `-w`): the size of `--tune fixed:SIZE`,
    /// 64 KiB for `--tune none`, else 0 (buffers are tuned, not fixed).
    #[serde(default)]
    pub sock_bufsize: u64,
    /// Parameters of the test (iperf3: `test_start`).
    pub test_start: TestStart,
    /// tcptune-specific setup.
    pub tcptune: StartTcptune,
}

/// When a test started (iperf3: `start.timestamp`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timestamp {
    /// As iperf3 writes it: `Tue, 16 Aug 2016 03:39:47 GMT`.
    pub time: String,
    /// Seconds since the Unix epoch.
    pub timesecs: u64,
}

impl Timestamp {
    /// The timestamp of `secs` seconds since the Unix epoch (UTC).
    pub fn from_unix(secs: u64) -> Timestamp {
        const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        let days = secs / 86_400;
        let rem = secs % 86_400;
        // Howard Hinnant's civil_from_days, for days since 1970-01-01 (never negative here).
        let z = days as i64 + 719_468;
        let era = z / 146_097;
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        Timestamp {
            time: format!(
                "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
                DAYS[(days % 7) as usize],
                MONTHS[(month - 1).clamp(0, 11) as usize],
                rem / 3600,
                rem % 3600 / 60,
                rem % 60
            ),
            timesecs: secs,
        }
    }
}

/// One data connection (iperf3: `start.connected[]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Connected {
    /// Stream index (iperf3 uses the fd; tcptune uses a stable 1-based stream number).
    pub socket: u32,
    /// Local address.
    pub local_host: String,
    /// Local port.
    pub local_port: u16,
    /// Remote address.
    pub remote_host: String,
    /// Remote port.
    pub remote_port: u16,
}

/// iperf3's `start.connecting_to`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConnectingTo {
    /// Host as given.
    pub host: String,
    /// Port.
    pub port: u16,
}

/// iperf3's `start.test_start`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TestStart {
    /// Always `"TCP"`.
    pub protocol: String,
    /// Parallel streams requested (`-P`).
    pub num_streams: u32,
    /// Message size (`-l`).
    pub blksize: u64,
    /// Always 0 (tcptune does not omit intervals).
    pub omit: u32,
    /// Duration in whole seconds (rounded up) for the duration workload (`-t`), else 0, as
    /// iperf3 writes it; the exact value is `start.tcptune.duration_s`.
    pub duration: u64,
    /// Total bytes for the message workload, else 0.
    pub bytes: u64,
    /// Total messages for the message workload, else 0.
    pub blocks: u64,
    /// 1 when the server sends (`--reverse`).
    pub reverse: u32,
    /// Always 0 (tcptune does not set a type of service).
    #[serde(default)]
    pub tos: u32,
    /// Always 0 (tcptune does not pace to a target rate).
    #[serde(default)]
    pub target_bitrate: u64,
}

/// What `send --json` prints when the run failed before any report existed (the server
/// could not be reached, or refused the session): iperf3's shape for that case, with the
/// error at the top level where iperf3's consumers look for it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailureReport {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// What is known without a session.
    pub start: FailureStart,
    /// Always empty.
    pub intervals: Vec<Interval>,
    /// Always empty.
    pub end: Empty,
    /// What went wrong.
    pub error: String,
    /// tcptune's additions.
    pub tcptune: FailureTcptune,
}

/// `tcptune` of a [`FailureReport`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailureTcptune {
    /// The exit status of `tcptune send` (see `tcptune --help`).
    pub exit_code: u8,
    /// Ctrl-C (or SIGTERM) ended the run before the transfer began.
    pub interrupted: bool,
}

/// `start` of a [`FailureReport`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailureStart {
    /// Always empty.
    pub connected: Vec<Connected>,
    /// `tcptune X.Y.Z`.
    pub version: String,
    /// `uname -a`-like description of this host.
    pub system_info: String,
}

/// An empty JSON object.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Empty {}

impl FailureReport {
    /// The report of a run that failed with `error` before it had a report.
    pub fn new(error: String) -> FailureReport {
        FailureReport {
            schema_version: SCHEMA_VERSION,
            start: FailureStart {
                connected: Vec::new(),
                version: format!("tcptune {}", env!("CARGO_PKG_VERSION")),
                system_info: tcptune_sys::os::system_info(),
            },
            intervals: Vec::new(),
            end: Empty {},
            error,
            tcptune: FailureTcptune {
                exit_code: 1,
                interrupted: false,
            },
        }
    }

    /// The same with the exit status the command ends with, and whether it was interrupted.
    pub fn with_exit(mut self, exit_code: u8, interrupted: bool) -> FailureReport {
        self.tcptune = FailureTcptune {
            exit_code,
            interrupted,
        };
        self
    }
}

/// tcptune's setup details.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StartTcptune {
    /// `--tune` mode in its canonical spelling.
    pub tune: String,
    /// `"messages"` or `"duration"`.
    pub workload: String,
    /// Messages to move (message workload).
    pub messages: u64,
    /// Bytes per message.
    #[serde(rename = "message_size_bytes", alias = "message_size")]
    pub message_size: u64,
    /// The duration workload's length (`-t`), seconds; `null` for the message workload.
    #[serde(default)]
    pub duration_s: Option<f64>,
    /// Time cap in seconds, if any (`--max-time`).
    pub max_time_s: Option<f64>,
    /// What was measured about the path before the transfer (control-connection RTT, probe):
    /// `{"rtt_us", "rate_bps", "rate_is_lower_bound"}`.
    #[serde(with = "crate::report::serde::path_hint")]
    pub path_hint: PathHint,
    /// Buffer limits of the sending host (`rmem_max_bytes`, `wmem_max_bytes`,
    /// `tcp_rmem_bytes`, `tcp_wmem_bytes`, `moderate_rcvbuf`, `can_force`).
    #[serde(with = "crate::report::serde::limits")]
    pub sender_limits: HostLimits,
    /// Buffer limits of the receiving host.
    #[serde(with = "crate::report::serde::limits")]
    pub receiver_limits: HostLimits,
    /// Congestion control in use.
    pub congestion: String,
    /// Wall time of the pre-transfer bandwidth probe when one ran (its whole phase: opening
    /// the probe streams, sending, stopping), seconds; `None` when none ran (no rate
    /// needed, or a fresh path-database entry was used). Its result is `path_hint.rate`. Not
    /// part of `end.sum_received.seconds`.
    #[serde(default, rename = "probe_s", alias = "probe_seconds")]
    pub probe_seconds: Option<f64>,
    /// Where `path_hint.rate` came from and what measuring it cost.
    #[serde(default)]
    pub measurement: Option<MeasurementReport>,
    /// Whether the server requires the shared secret (`serve --secret-file`); `null` when
    /// unknown.
    #[serde(default)]
    pub server_requires_secret: Option<bool>,
    /// Careful resume on a known path (`null`: the rate was not a fresh full-pipe entry of
    /// the path database, so there was nothing to resume).
    #[serde(default)]
    pub resume: Option<ResumeReport>,
    /// The client's wait in the server's queue for a session slot; `null` when it never
    /// waited.
    #[serde(default)]
    pub queue: Option<QueueReport>,
}

/// The server's fair shares of the path for one transfer (issue 22's good neighbour): what
/// it was told, when. The sending end paced the transfer's streams together at the share.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShareReport {
    /// Each share told, in order (the first [`ShareReport::MAX_CHANGES`]).
    pub changes: Vec<ShareChange>,
    /// Shares told beyond those.
    pub changes_dropped: u32,
}

impl ShareReport {
    /// Shares a report keeps.
    pub const MAX_CHANGES: usize = 64;

    /// Record one share.
    pub fn push(&mut self, c: ShareChange) {
        if self.changes.len() < Self::MAX_CHANGES {
            self.changes.push(c);
        } else {
            self.changes_dropped = self.changes_dropped.saturating_add(1);
        }
    }
}

/// One fair share the server told.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShareChange {
    /// When it came, seconds from the transfer's start (the intervals' clock).
    pub t_s: f64,
    /// The cap on the transfer's streams together, payload bit/s (`null`: no cap, the
    /// transfer was alone on the server).
    pub rate_bps: Option<u64>,
    /// Bulk transfers sharing the server, this one included.
    pub sessions: u32,
    /// What the path delivers in all, as far as the server knows, bit/s.
    pub path_bps: Option<u64>,
}

/// A client's wait in the server's queue for a session slot (`send --wait`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueReport {
    /// From the server's first answer that the client waits to its admission, seconds.
    pub waited_s: f64,
    /// The first place the server told (from 1).
    pub first_place: u32,
    /// How many places the server told, the first included (at most one a second).
    pub places_told: u32,
}

/// Careful resume: a known path started at its known rate (see
/// `tcptune_core::tuners::auto::ResumePacer`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResumeReport {
    /// Whether the transfer started at the saved rate.
    pub used: bool,
    /// The initial window new connections to the peer got, segments.
    pub initcwnd_segs: Option<u64>,
    /// When the server sends (a pull): the initial receive window this host's connections to
    /// it offered, segments (the server's own initial window is the server's: `serve
    /// --careful-resume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initrwnd_segs: Option<u64>,
    /// Each stream's pacing cap for its first round trips, bit/s.
    pub pacing_bps: Option<u64>,
    /// The route installed for the transfer (and removed at its end).
    pub route: Option<String>,
    /// Why it was not used.
    pub why_not: Option<String>,
}

/// How the path's rate was obtained before the transfer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasurementReport {
    /// `"in_band"` (measured by the transfer itself), `"probe"` (measured before, out of
    /// band: `--tune probe`), `"path_db"` (a fresh entry of the path database), `"given"`
    /// (`--tune manual:RATE`), or `"none"` (no rate: the mode needs none, the path is short,
    /// or measuring is off and the database has no entry).
    pub source: String,
    /// Wall time spent measuring before the transfer (database lookup and probe phase),
    /// seconds: the cost a user pays on top of `end.sum_received.seconds`.
    #[serde(rename = "duration_s", alias = "seconds")]
    pub seconds: f64,
    /// The rate is only a lower bound (`path_hint.rate_is_lower_bound`).
    pub lower_bound: bool,
    /// The probe, when one ran.
    #[serde(default)]
    pub probe: Option<ProbeReport>,
    /// The path database, when one is in use.
    #[serde(default)]
    pub path_db: Option<PathDbReport>,
    /// What the transfer measured of the path while it ran (`source` `"in_band"`, or a
    /// correction of the database's rate), when it did.
    #[serde(default)]
    pub in_band: Option<InBandReport>,
}

/// The path's rate as the transfer itself found it: the plateau of its delivery.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InBandReport {
    /// The rate, bit/s.
    pub rate_bps: u64,
    /// When the pipe was found full, seconds after the transfer's start; both ends then
    /// settled their buffers to it.
    #[serde(rename = "after_s", alias = "after_seconds")]
    pub after_seconds: f64,
    /// Rounds of one RTT the estimator counted.
    pub rounds: u32,
    /// The path database's rate that this corrects (the transfer delivered much less), bit/s.
    #[serde(default)]
    pub corrects_bps: Option<u64>,
    /// The rate is only what the streams got beside another flow (the handshake's RTT and
    /// the streams' own lowest show that flow's queue): a lower bound on the path's, so
    /// both ends settled as kernel-tuned streams would and the path database records it
    /// as a lower bound.
    #[serde(default)]
    pub lower_bound: bool,
}

/// What the pre-transfer probe did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// Parallel probe streams.
    pub streams: u32,
    /// Length of a measurement round, seconds.
    #[serde(rename = "round_s", alias = "round_seconds")]
    pub round_seconds: f64,
    /// Complete rounds.
    pub rounds: u32,
    /// Seconds from the first sample to the stop (sending time).
    #[serde(rename = "sending_s", alias = "sending_seconds")]
    pub sending_seconds: f64,
    /// The delivery rate stopped growing (else the hard bound stopped it).
    pub full_pipe: bool,
    /// The largest round rate, bit/s.
    #[serde(default)]
    pub rate_bps: Option<u64>,
}

/// What the path database contributed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathDbReport {
    /// The file.
    pub file: String,
    /// A fresh entry was used instead of probing.
    pub used: bool,
    /// Age of the entry found (used or not), seconds.
    #[serde(default)]
    pub entry_age_s: Option<f64>,
    /// Measurements merged into the entry found.
    #[serde(default)]
    pub entry_samples: Option<u32>,
    /// The entry found was a full-pipe measurement (else a lower bound).
    #[serde(default)]
    pub entry_full_pipe: Option<bool>,
    /// No entry matched the handshake's RTT, which was this much above the lowest RTT the
    /// path was measured at (another flow's queue): the entry found is that RTT's.
    #[serde(default)]
    pub queue_over_base_us: Option<u64>,
    /// What was written back (`"probe"`, `"transfer"`), in order.
    #[serde(default)]
    pub recorded: Vec<String>,
    /// Problems with the file (corrupt, unwritable), reported and otherwise ignored.
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// One reporting interval (iperf3: `intervals[]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Per-stream numbers.
    pub streams: Vec<IntervalStream>,
    /// Sum over streams.
    pub sum: IntervalSum,
}

/// iperf3's `intervals[].streams[]`. `retransmits` and `snd_cwnd` are only known at the
/// sender: they are 0 here and `null` in JSON when `sender` is false (reverse mode).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "IntervalStreamJson")]
pub struct IntervalStream {
    /// Stream number (1-based).
    pub socket: u32,
    /// Seconds since the transfer started.
    pub start: f64,
    /// Seconds since the transfer started.
    pub end: f64,
    /// `end - start`.
    pub seconds: f64,
    /// Bytes moved in the interval.
    pub bytes: u64,
    /// Throughput in the interval.
    pub bits_per_second: f64,
    /// Retransmitted segments in the interval (sender side).
    #[serde(deserialize_with = "crate::report::serde::null_as_zero")]
    pub retransmits: u64,
    /// Congestion window at the end of the interval, bytes (sender side).
    #[serde(deserialize_with = "crate::report::serde::null_as_zero")]
    pub snd_cwnd: u64,
    /// Smoothed RTT at the end of the interval, microseconds.
    pub rtt: u64,
    /// RTT variation, microseconds.
    pub rttvar: u64,
    /// Path MTU.
    pub pmtu: u64,
    /// Always false.
    pub omitted: bool,
    /// Whether these numbers were measured at the sender.
    pub sender: bool,
}

/// The JSON of an [`IntervalStream`]: what the receiver cannot know is `null`.
#[derive(Serialize)]
struct IntervalStreamJson {
    socket: u32,
    start: f64,
    end: f64,
    seconds: f64,
    bytes: u64,
    bits_per_second: f64,
    retransmits: Option<u64>,
    snd_cwnd: Option<u64>,
    rtt: u64,
    rttvar: u64,
    pmtu: u64,
    omitted: bool,
    sender: bool,
}

impl From<IntervalStream> for IntervalStreamJson {
    fn from(s: IntervalStream) -> Self {
        IntervalStreamJson {
            socket: s.socket,
            start: s.start,
            end: s.end,
            seconds: s.seconds,
            bytes: s.bytes,
            bits_per_second: s.bits_per_second,
            retransmits: s.sender.then_some(s.retransmits),
            snd_cwnd: s.sender.then_some(s.snd_cwnd),
            rtt: s.rtt,
            rttvar: s.rttvar,
            pmtu: s.pmtu,
            omitted: s.omitted,
            sender: s.sender,
        }
    }
}

/// iperf3's `intervals[].sum` (`retransmits` is `null` when measured at the receiver).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "IntervalSumJson")]
pub struct IntervalSum {
    /// Seconds since the transfer started.
    pub start: f64,
    /// Seconds since the transfer started.
    pub end: f64,
    /// `end - start`.
    pub seconds: f64,
    /// Bytes moved in the interval over all streams.
    pub bytes: u64,
    /// Throughput in the interval over all streams.
    pub bits_per_second: f64,
    /// Retransmitted segments in the interval.
    #[serde(deserialize_with = "crate::report::serde::null_as_zero")]
    pub retransmits: u64,
    /// Always false.
    pub omitted: bool,
    /// Whether these numbers were measured at the sender.
    pub sender: bool,
}

/// The JSON of an [`IntervalSum`].
#[derive(Serialize)]
struct IntervalSumJson {
    start: f64,
    end: f64,
    seconds: f64,
    bytes: u64,
    bits_per_second: f64,
    retransmits: Option<u64>,
    omitted: bool,
    sender: bool,
}

impl From<IntervalSum> for IntervalSumJson {
    fn from(s: IntervalSum) -> Self {
        IntervalSumJson {
            start: s.start,
            end: s.end,
            seconds: s.seconds,
            bytes: s.bytes,
            bits_per_second: s.bits_per_second,
            retransmits: s.sender.then_some(s.retransmits),
            omitted: s.omitted,
            sender: s.sender,
        }
    }
}

/// iperf3's `end` object, plus `tcptune`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct End {
    /// Per stream, as seen by each end.
    pub streams: Vec<EndStream>,
    /// Totals measured at the sender.
    pub sum_sent: Sum,
    /// Totals measured at the receiver: the throughput that counts.
    pub sum_received: Sum,
    /// CPU use of both ends.
    pub cpu_utilization_percent: CpuUtilization,
    /// Congestion control of the sender.
    pub sender_tcp_congestion: String,
    /// Congestion control of the receiver.
    pub receiver_tcp_congestion: String,
    /// tcptune's own results.
    pub tcptune: EndTcptune,
}

/// iperf3's `end.streams[]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EndStream {
    /// As measured by the sender.
    pub sender: StreamSum,
    /// As measured by the receiver.
    pub receiver: StreamSum,
}

/// iperf3's `end.streams[].sender` / `.receiver`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamSum {
    /// Stream number (1-based).
    pub socket: u32,
    /// Seconds since the transfer started.
    pub start: f64,
    /// Seconds since the transfer started.
    pub end: f64,
    /// `end - start`.
    pub seconds: f64,
    /// Bytes moved.
    pub bytes: u64,
    /// `bytes * 8 / seconds`.
    pub bits_per_second: f64,
    /// Retransmitted segments (sender only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    /// Largest congestion window, bytes (sender only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_snd_cwnd: Option<u64>,
    /// Largest peer receive window, bytes (sender only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_snd_wnd: Option<u64>,
    /// Largest smoothed RTT, microseconds (sender only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rtt: Option<u64>,
    /// Smallest smoothed RTT, microseconds (sender only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rtt: Option<u64>,
    /// Mean smoothed RTT, microseconds (sender only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_rtt: Option<u64>,
    /// Whether measured at the sender.
    pub sender: bool,
}

/// iperf3's `end.sum_sent` / `end.sum_received`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sum {
    /// Seconds since the transfer started (0).
    pub start: f64,
    /// Seconds since the transfer started.
    pub end: f64,
    /// For `sum_received`: from the first byte's arrival on any stream to the last byte's
    /// arrival on any stream, at the receiver (the paper's timing).
    pub seconds: f64,
    /// Bytes moved over all streams.
    pub bytes: u64,
    /// `bytes * 8 / seconds`.
    pub bits_per_second: f64,
    /// Retransmitted segments (sum_sent only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    /// Whether measured at the sender.
    pub sender: bool,
}

/// `end.tcptune.cpu_s`: CPU seconds, user and system, of this end and the peer's session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuSeconds {
    /// This process, user mode.
    pub host_user: f64,
    /// This process, kernel mode.
    pub host_system: f64,
    /// The peer's session, user mode.
    pub remote_user: f64,
    /// The peer's session, kernel mode.
    pub remote_system: f64,
}

impl CpuSeconds {
    /// This end's user + system seconds.
    pub fn host(&self) -> f64 {
        self.host_user + self.host_system
    }

    /// The peer's user + system seconds.
    pub fn remote(&self) -> f64 {
        self.remote_user + self.remote_system
    }
}

/// iperf3's `end.cpu_utilization_percent`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuUtilization {
    /// This process, user + system, percent of one CPU... as iperf3 reports it.
    pub host_total: f64,
    /// This process, user.
    pub host_user: f64,
    /// This process, system.
    pub host_system: f64,
    /// The server process for this session.
    pub remote_total: f64,
    /// The server, user.
    pub remote_user: f64,
    /// The server, system.
    pub remote_system: f64,
}

/// tcptune's results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EndTcptune {
    /// `--tune` mode.
    pub tune: String,
    /// Every message arrived and every byte checked out.
    pub complete: bool,
    /// The time cap stopped the transfer before all messages moved; throughput is computed
    /// from the bytes that did move.
    pub capped: bool,
    /// The user interrupted the transfer (Ctrl-C): both ends stopped at once and the
    /// figures are from the bytes that moved until then.
    #[serde(default)]
    pub interrupted: bool,
    /// Streams asked for with `-P`.
    pub streams_requested: u32,
    /// Streams actually used (more when a tuner asked for more).
    pub streams_used: u32,
    /// Why streams were added, if they were (the tuner's sentence).
    #[serde(default)]
    pub streams_reason: Option<String>,
    /// Sum over streams of each stream's peak `sk_sndbuf` at the sender (kernel-held bytes).
    pub peak_sndbuf_bytes: u64,
    /// Sum over streams of each stream's peak `sk_rcvbuf` at the receiver (kernel-held bytes).
    pub peak_rcvbuf_bytes: u64,
    /// Sum over streams of each stream's peak `sk_wmem_queued` at the sender (memory used).
    pub peak_wmem_queued_bytes: u64,
    /// Sum over streams of each stream's peak `sk_rmem_alloc` at the receiver (memory used).
    pub peak_rmem_alloc_bytes: u64,
    /// The most the sender's streams held at once in `sk_sndbuf` (each as last sampled):
    /// the memory the sending host had to provide. The `peak_sndbuf_bytes` above sums each
    /// stream's own peak, which may come at different times, and so can only be larger.
    #[serde(default)]
    pub peak_sndbuf_total_bytes: u64,
    /// The same for the receiver's `sk_rcvbuf`.
    #[serde(default)]
    pub peak_rcvbuf_total_bytes: u64,
    /// Per-stream details from both ends.
    pub streams: Vec<StreamDetail>,
    /// Complete, verified messages at the receiver.
    #[serde(default)]
    pub messages_received: u64,
    /// Seconds the main phase spent opening its streams before the first byte could be
    /// sent (not part of `sum_received.seconds`).
    #[serde(default, rename = "setup_s", alias = "setup_seconds")]
    pub setup_seconds: Option<f64>,
    /// Wall time of the whole session at the client, from connecting to the server to the
    /// end of the transfer (measurement and setup included): what the user waited, seconds.
    #[serde(default, rename = "session_s", alias = "session_seconds")]
    pub session_seconds: Option<f64>,
    /// Round trips of the path (the control connection's RTT) from the command's start to
    /// the first data byte leaving the sender: the TCP handshakes and requests the user
    /// waits through before any data moves (2 on a path without a shared secret's
    /// challenge: the control connection's handshake, then the data connections'). The
    /// client times the first write when it sends; when it receives, the first byte's
    /// arrival less half a round trip.
    #[serde(default)]
    pub setup_round_trips: Option<f64>,
    /// Round trips from the last data byte's arrival at the receiver to the end of the
    /// command (the final exchange of results). When the client sends, the arrival is
    /// placed from the server's own first-to-last span after the client's first write plus
    /// half a round trip (the two clocks are never compared).
    #[serde(default)]
    pub finish_round_trips: Option<f64>,
    /// The transfer's own aggregate delivery rate over one-RTT rounds, bit/s: the median of
    /// the rounds where it stopped growing, else the largest round (what it tells the path
    /// database: a lower bound on the path's rate).
    #[serde(default)]
    pub delivery_rate_max_bps: Option<u64>,
    /// The server's fair shares of the path for this transfer, when it shared the server
    /// with other bulk transfers (`serve` tells `auto` clients; see `docs/json.md`);
    /// `null` when the server told none (an older server, another mode than `auto`).
    #[serde(default)]
    pub share: Option<ShareReport>,
    /// CPU seconds of both ends during the main phase: this process (all its threads) and
    /// the peer's session (the threads that served this session's streams; a server's
    /// control loop, shared by its sessions, is not counted).
    #[serde(default)]
    pub cpu_s: CpuSeconds,
    /// Why the run failed (integrity or otherwise), if it did.
    #[serde(default)]
    pub error: Option<String>,
    /// Every buffer request the kernel did not take as asked (capped by a system maximum,
    /// doubled, raised), once per end and value, with the limit and the fix.
    #[serde(default)]
    pub adjustments: Vec<Adjustment>,
    /// What limited the transfer, in a word and a sentence.
    #[serde(default)]
    pub diagnosis: Option<Diagnosis>,
}

/// A buffer request the kernel did not take as asked, said once per end and value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Adjustment {
    /// `"sender"` or `"receiver"`.
    pub end: String,
    /// `"local"` (the host running `send`) or `"server"`.
    pub host: String,
    /// `SO_SNDBUF` or `SO_RCVBUF`.
    pub option: String,
    /// What was asked, per stream, bytes.
    pub asked_bytes: u64,
    /// What the kernel holds, per stream, bytes.
    pub kernel_bytes: u64,
    /// Streams this applies to.
    pub streams: u32,
    /// `"capped"` (a system maximum), `"doubled"` (the kernel's bookkeeping share) or
    /// `"raised"` (the driver applied more than asked: see `note`).
    pub kind: String,
    /// The sysctl that capped it (`net.core.wmem_max`), if one did.
    pub limit: Option<String>,
    /// Its value, bytes.
    pub limit_bytes: Option<u64>,
    /// The exact fix, if there is one.
    pub fix: Option<String>,
    /// The whole story in one sentence.
    pub note: String,
}

/// What limited a transfer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// `"receive_window"`, `"send_buffer"`, `"slow_reader"`, `"congestion"` or `"none"`.
    pub limiter: String,
    /// For buffers: `"application"` (the tuning mode set the buffer and locked it),
    /// `"system_maximum"` (a sysctl capped it) or `"autotuning"` (the kernel's own limit,
    /// `tcp_rmem`/`tcp_wmem` max); otherwise `null`.
    pub cause: Option<String>,
    /// Share of the sender's busy time limited by the receive window, percent.
    pub rwnd_limited_pct: Option<f64>,
    /// Share of the sender's busy time limited by its send buffer, percent.
    pub sndbuf_limited_pct: Option<f64>,
    /// One sentence: what limited it and what to do.
    pub summary: String,
}

/// What one stream did, seen from both ends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamDetail {
    /// Stream number (1-based).
    pub socket: u32,
    /// Seconds after the transfer start at which this stream opened (0 for the first ones,
    /// later for streams a tuner asked for).
    pub opened_at_s: f64,
    /// Messages this stream carried.
    pub messages: u64,
    /// The sending end.
    pub sender: SideDetail,
    /// The receiving end.
    pub receiver: SideDetail,
}

impl StreamDetail {
    /// The same without the time series (samples and changes): what the lab records.
    pub fn without_series(&self) -> StreamDetail {
        let strip = |d: &SideDetail| SideDetail {
            samples: Vec::new(),
            changes: Vec::new(),
            ..d.clone()
        };
        StreamDetail {
            sender: strip(&self.sender),
            receiver: strip(&self.receiver),
            ..self.clone()
        }
    }
}

pub use tcptune_proto::result::{ChangeRecord, SideDetail};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_read_as_iperf3_writes_them() {
        assert_eq!(
            Timestamp::from_unix(0).time,
            "Thu, 01 Jan 1970 00:00:00 GMT"
        );
        assert_eq!(
            Timestamp::from_unix(1_471_318_787).time,
            "Tue, 16 Aug 2016 03:39:47 GMT"
        );
        assert_eq!(
            Timestamp::from_unix(1_795_449_952).time,
            "Mon, 23 Nov 2026 16:05:52 GMT"
        );
        // A leap day.
        assert_eq!(
            Timestamp::from_unix(951_782_400).time,
            "Tue, 29 Feb 2000 00:00:00 GMT"
        );
    }

    #[test]
    fn a_failure_report_has_the_error_at_the_top_and_empty_results() {
        let v = serde_json::to_value(FailureReport::new("refused".into())).expect("json");
        assert_eq!(v["error"], "refused");
        assert_eq!(v["intervals"], serde_json::json!([]));
        assert_eq!(v["end"], serde_json::json!({}));
        assert_eq!(v["start"]["connected"], serde_json::json!([]));
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
    }
}
