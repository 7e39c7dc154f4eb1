//! `auto`: tcptune's own tuner. It takes from each technique what works on today's Linux and
//! decides early, because at long RTTs the paper's transfer (128 MiB, about a second at
//! line rate) is mostly slow start.
//!
//! # Design
//!
//! **What it knows before connecting.** The engine measures the RTT on the control
//! connection. The rate comes from the path database when a fresh entry for this peer and
//! RTT exists (Enable's idea: measure once, reuse), or from the user (`manual:RATE`).
//! `hint.rtt x hint.rate` is the BDP, and every stream, at both ends, computes the same
//! [`AutoPlan`] from it before the first byte.
//!
//! **A path never seen: measured in band.** Without a rate on a path of 5 ms or more
//! ([`MEASURE_MIN_RTT`]) the transfer itself measures it, as the probe of NLANR's FTP did
//! but without a probe's time of its own ([`PathHint::rate_in_band`] says so): it opens
//! the streams a full pipe needs to show ([`crate::fullpipe::ProbePlan`]) and starts sending at once.
//! Meanwhile each sender's buffer follows what its stream delivers (twice the bytes
//! acknowledged per RTT, shared evenly by [`MeasureShare`], plus the unsent reserve: room
//! for slow start to double, and 1.75 x once growth stops) and each
//! receiver's window follows what arrives the same way (up to 4 x while slow start lasts:
//! the window reaches the sender half an RTT late), so neither end limits slow start. The
//! room to double is what slow start needs, and only while it lasts: as soon as either end
//! sees the pipe full (a queue in its RTT, or at the sender slow start over: [`meter`]),
//! about a round after it fills and three rounds before the aggregate estimator can say so,
//! the streams of that end size from what is delivered as the plan would (1.75 x in flight
//! at the sender, a 1.5 x window at the receiver), from samples over at least a round whose
//! median a burst (a hole filled by a retransmission) does not move. When the aggregate delivery
//! stops growing ([`crate::fullpipe`]) the client sends the rate to both ends
//! ([`Tuner::handle_hint`]): every tuner settles to the plan (senders to their explicit
//! size, receivers hand over to Dynamic Right-Sizing at the planned window), extra streams
//! open if the plan needs more and the rest of the transfer outlasts their slow start
//! ([`AutoPlan::late_streams_help`]), the measuring streams the plan does not need close
//! after their message when the client writes and the rest of the transfer pays for the
//! take-over ([`AutoPlan::retiring_pays`]: about 3.4 s left at 25 ms, 5 s at 100 ms), and the rate is recorded in the path database for the
//! next transfer. In the simulation (1 Gbit/s, 25-200 ms, 1-8 streams) this costs 0-14% of
//! completion time against a plan known in advance, and memory peaks at 1.3-1.75 x BDP in
//! `setsockopt` units (the receiver's window, set while slow start still doubles, is the
//! larger end; it was 2.2-2.9 x while the buffers kept room to double until the estimator
//! reported); on the emulator (2026-11-26, 25 and 100 ms, medians of 5) 1.5-1.9 x. With
//! `--no-probe` (no in-band measurement) the tuner starts from Linux's
//! defaults and works in band only (below).
//!
//! **A known path: careful resume.** When the database has a fresh rate for the peer (measured
//! with a full pipe, or a lower bound: a rate an earlier transfer delivered before its pipe
//! was full, which is as safe to resume at, and is then measured in band on top) and the
//! control connection's RTT matches the saved one within a quarter,
//! the client gives the data connections an initial window of each stream's share of the
//! saved BDP (a route with `initcwnd` to the server, installed just before they connect and
//! removed once they have: `tcptune_sys::route`, needs `CAP_NET_ADMIN`) and says so in
//! [`PathHint::resume`]; each sender then caps its pacing at its share of the saved rate
//! ([`ResumePacer`]) so that window leaves at the path's rate, and lifts the cap after two
//! round trips, or at once on a retransmission or an RTT a quarter longer than the saved one
//! (the congestion control is then on its own). Slow start's dozen round trips are skipped.
//! The receiver's window still opens from 64 KiB as data arrives (Linux grows it by two
//! segments per segment received, faster than the sender's slow start), which bounds the
//! gain on the longest paths.
//!
//! **How much one socket can hold.** Sending: the larger of send autotuning's cap
//! (`tcp_wmem[2]`) and what `SO_SNDBUF` can set (`2 x wmem_max` of kernel memory), about 90%
//! of it payload. A writer blocked on a full send buffer is woken only when a third of it is
//! free (`sk_stream_write_space`), so a socket whose buffer is the limit keeps two thirds of
//! its payload in flight without stalling, less half the unsent reserve. Receiving: the
//! window a locked `SO_RCVBUF` gives (`rmem_max` of window), because receive autotuning,
//! though it could reach `tcp_rmem[2]`, overshoots to it in slow start and would spend the
//! memory budget. On a default namespace: about 5 MB in flight and 4 MiB of window per
//! socket, short of a 50 ms BDP at 1 Gbit/s.
//!
//! **Parallel streams when one socket cannot hold the BDP.** If `1.25 x BDP` does not fit in
//! the streams the user asked for, stream 0 asks for `ceil(1.25 x BDP / per-socket)` streams
//! in all, once, from its *before-connect* drain ([`Action::OpenStreams`] with a sentence
//! naming the limit), so the extra streams start one handshake after the first and share its
//! slow start (N streams open their windows N times faster). The quarter of headroom keeps a
//! stream from running at exactly one BDP (BBR probes at 1.25 x, CUBIC oscillates above it).
//! Each stream sizes itself for its share `BDP / N` of the final count; streams opened on
//! request are built with the new count and never ask.
//!
//! **Explicit sizing where the kernel would be limited, or wasteful (shares above the unsent
//! reserve).** The sender sets `SO_SNDBUF` before connecting so the buffer holds `1.75 x
//! share` plus the unsent reserve, capped at `wmem_max`: enough to keep the pipe full
//! (throughput needs one BDP in flight; the rest absorbs probe error and the writer's
//! wake-up rule, which keeps only two thirds of a full buffer busy) and it stops a
//! loss-based sender from filling the bottleneck queue with a second BDP. It sets `TCP_NOTSENT_LOWAT` to the reserve (about 6 ms at the stream's rate,
//! 128 KiB to 4 MiB): the application keeps only that much unsent data in the kernel, so
//! memory in use is what is in flight plus a few milliseconds. The receiver sets `SO_RCVBUF`
//! to its maximum (`1.75 x share`, at most `rmem_max`) before listening, so the window scale
//! can reach it, then, once connected, buffer and window clamp to `1.5 x share`, grown in
//! band by Dynamic Right-Sizing (1.2 x the largest bytes-per-RTT estimate) up to that
//! maximum. The receive window, which never stalls like a blocked writer, is then what
//! bounds data in flight. In `setsockopt` units the larger end holds 1.3-1.75 x BDP for the
//! whole transfer (the kernel holds twice that), and the sender's memory in use stays near
//! 1.5 x BDP: under the 2 x BDP goal.
//!
//! **Kernel autotuning where it is not limited.** For small shares (no more than the unsent
//! reserve, e.g. any stream at 0.5 ms) explicit sizing cannot save memory without risking
//! throughput on the application's wake-up latency: both ends leave Linux's autotuning in
//! charge (a receiver with autotuning switched off gets `rmem_max`).
//!
//! **In band, from the stream's own `TCP_INFO`** (sampled about twice per RTT; a condition
//! must hold for two RTTs before anything changes, so slow start's overshoot is ignored):
//! * a send buffer that limits a stream whose pipe is not full (smoothed RTT close to the
//!   minimum, or, for a single stream, delivery rate below the best seen or probed) grows
//!   by a quarter, up to `wmem_max` and, when the rate was probed, up to the stream's share
//!   of rate x minimum RTT (last 10 s) in `setsockopt` units (the 2 x BDP budget; the
//!   budget follows a path whose RTT grew once the old minimum ages out). A sender on
//!   kernel autotuning switches to explicit sizing the same way once autotuning sits at
//!   `tcp_wmem[2]` and still limits it (the no-hint case at long RTTs);
//! * if the socket ran dry while its buffer was less than half full, the application did not
//!   refill it in time: the unsent reserve doubles;
//! * without a trustworthy BDP (no rate, or a rate about what one socket carries: a one-stream
//!   probe cannot measure more, see [`AutoPlan::bdp_lower_bound`]), stream 0 still
//!   send-buffer-limited at `wmem_max` with an unfull pipe asks once for as many streams
//!   again, if it has not asked before.
//!
//! * **a queue shared with flows tcptune does not control** (a rate is known, the RTT shows
//!   a queue, the send buffer binds over two RTTs): the buffer grows on trial to keep a
//!   quarter more in flight than the stream delivers per smoothed RTT now, and never past
//!   what kernel autotuning would give the streams the user asked for (`tcp_wmem[2]` each,
//!   shared by the streams the transfer runs). The growth is kept only if the stream's rate
//!   rose by a tenth over the next two RTTs (beside another flow the rate follows the
//!   buffer), and the next step is tried from there; otherwise the queue is the transfer's
//!   own (a path alone: the bytes only lengthened it), the buffer goes back to its plan and
//!   the rule rests for 50 RTTs. A latecomer beside an iperf3 flow set otherwise kept the
//!   buffers it sized from the rate it measured while the other flow held the path (a
//!   quarter of the link at 25 ms), and the congestion controls never evened out.
//!
//! * **a path crowded after the rate was measured** (the end's streams together deliver
//!   less than 0.8 of the rate they settled on while their RTT shows a queue, over two
//!   windows of two RTTs, once they had delivered it): a flow the transfer does not control
//!   arrived and holds the bottleneck's queue. Each stream of that end leaves its plan for
//!   what kernel autotuning would hold, the sender's buffer to `tcp_wmem[2]` shared by the
//!   streams asked for, the receiver's window to `rmem_max` by twice what arrives, as
//!   behind a queue that predates the stream ([`AutoTuner::crowded_check`]). Pulling first
//!   with five streams at 25 ms, a plan sized for the path alone kept 315 Mbit/s beside a
//!   later `iperf3 -R -P 4`'s 650 (0.909 to 0.997 by Jain's index, three runs each). Once
//!   the streams together deliver 0.95 of the rate again over as many windows, the other
//!   flow has left: the senders go back to their plan (a receiver's memory follows what
//!   its sender sends).
//!
//! Nothing else shrinks: the unsent reserve already bounds memory in use, and a shrinking
//! buffer would only throttle a stream the next time its window opens.
//!
//! # What it cannot fix
//!
//! A rate that underestimates the path (a database entry from a slower day, or what one
//! socket carried: the rate is then marked as a lower bound and the in-band rules take
//! over), a receiver whose every limit is below the window, or a transfer shorter than slow
//! start. On a path never seen the in-band measurement needs 13-16 rounds (slow start, then
//! three rounds without growth): on a 200 ms path a 128 MiB transfer is nearly over by
//! then, and it is the measuring buffers that carried it. A receiver sees the queue only
//! through `tcpi_rcv_rtt`, which includes it when TCP timestamps are on (Linux's default);
//! without them it learns that the pipe is full from the client's hint, as before, and its
//! window can reach twice the BDP. Below about 10 ms of RTT the
//! kernel's autotuning holds more than 2 x BDP (a few MiB): cheap in absolute terms, and
//! safer than buffers smaller than the scheduling latency.

mod meter;
mod plan;
mod resume;
mod share;
#[cfg(test)]
mod tests;

pub use resume::{same_path_rtt, LiftReason, ResumePacer, ResumeState};
pub use share::MeasureShare;

pub use plan::{AutoPlan, RecvPlan, SendPlan, MEASURE_MIN_RTT, MEASURE_START, MEASURE_WINDOW};

use super::common::{interval_from_rtt, scale, Outbox};
use crate::estimate::PathEstimator;
use crate::linux;
use crate::snapshot::TcpSnapshot;
use crate::time::Time;
use crate::tuner::{Action, ConnEvent, HostLimits, PathHint, Role, Tuner, TunerContext};
use crate::units::{format_duration, Bytes, Rate};
use std::time::Duration;

/// The receive window a right-sized receiver starts with, in multiples of its share.
const RECV_HEADROOM: f64 = 1.5;

/// In a queue shared with other flows, the most a stream's `SO_SNDBUF` may hold, in
/// multiples of what the stream delivers per smoothed RTT now (see
/// [`AutoTuner::shared_queue_cap`]).
const SHARED_HEADROOM: f64 = 1.25;

/// In a queue shared with other flows, a growth is kept only if the stream's rate grew by
/// this factor over the two RTTs after it: a stream alone on its path, whose own streams
/// keep the queue, delivers the link's rate with the larger buffer as with the smaller (the
/// bytes only lengthen the queue), while beside another flow the rate follows the buffer.
const SHARED_PAYS: f64 = 1.1;

/// After a growth that did not pay, how many smoothed RTTs the shared-queue rule waits
/// before it tries again (another flow may arrive later).
const SHARED_RETRY_RTTS: u32 = 50;

/// Once settled with a known rate, an end whose streams together deliver less than this
/// fraction of it while the RTT shows a queue is crowded by flows it does not control (see
/// [`AutoTuner::crowded_check`]).
const CROWDED_BELOW: f64 = 0.8;

/// ... over this many windows of two RTTs in a row.
const CROWDED_WINDOWS: u32 = 2;

/// A crowded end whose streams together deliver at least this fraction of the rate they
/// settled on, over [`CROWDED_WINDOWS`] windows in a row, has the path to itself again:
/// its senders go back to their plan (see [`AutoTuner::crowded_check`]).
const UNCROWDED_AT: f64 = 0.95;

/// What [`AutoTuner::crowded_check`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Crowd {
    /// Nothing new.
    Same,
    /// The end has just been found crowded: leave the plan for the kernel's reach.
    Crowded,
    /// The end, crowded, has the path to itself again: back to the plan.
    Cleared,
}

/// The kernel's own minimum RTT of a connection (`tcpi_min_rtt`), where it reports one.
fn own_min_rtt(s: &TcpSnapshot) -> Option<Duration> {
    s.min_rtt_us
        .filter(|&v| v > 0 && v != u32::MAX)
        .map(|v| Duration::from_micros(u64::from(v)))
}

/// A settled receiver's right-sizing: its window grows to this many times what arrives per
/// RTT (DRS; see [`AutoTuner::settled_receiver`]).
const SETTLED_RCV_FACTOR: f64 = 1.2;

/// The same behind a queue that predates the stream: the kernel's own receive autotuning
/// grows its window to about twice what the application read in an RTT
/// (`tcp_rcv_space_adjust`), room for what arrives beyond a hole in loss recovery.
const SHARED_RCV_FACTOR: f64 = 2.0;

/// While slow start grows the delivery (by a quarter or more per half-RTT sample) and the pipe is
/// not yet full, the most the measuring receiver's window holds, in multiples of the bytes per
/// round it received over the last half RTT (see [`growing_window_factor`]). A window set now
/// reaches the sender half an RTT later and binds it until the next sample's window arrives,
/// another half RTT on; the sample itself shows the sender's window of about three quarters of an
/// RTT before. Slow start doubles per RTT, so the window must cover 2^1.75 = 3.4 x the sample: 2 x
/// held 8 streams back a round at 200 ms (simulation: 3.27 s against kernel autotuning's 2.90 s;
/// lab 2026-11-26: 6-7% later at 100-200 ms x 8).
const RECV_GROWING: f64 = 4.0;

/// The cap on the growing window at and below [`RECV_GROWING_SHORT_RTT`]. Once the streams'
/// sum reaches the BDP, a window of F x the delivery lets them put F x the BDP in flight
/// before the next sample: beyond the BDP plus a queue of one BDP (the lab's, and a common
/// router's) the bottleneck drops. At 25 ms (lab 2026-11-29, 128 MiB, 1 and 8 streams) 4 x
/// dropped 800-2,500 packets per transfer and held 3.3 x BDP of receive buffer, 2 x dropped
/// 0-245 and held 1.8-1.96 x, in the same time (817-837 Mbit/s both); a round that 2 x holds
/// back costs one RTT, 2% of such a transfer at 25 ms, where at 100-200 ms it costs 4-9% (2 x
/// finished 0.96 / 0.91 of kernel autotuning's rate, 4 x 1.01 / 1.10, without a drop).
const RECV_GROWING_SHORT: f64 = 2.0;
/// At and below this RTT the growing window's cap is [`RECV_GROWING_SHORT`]; at and above
/// [`RECV_GROWING_LONG_RTT`] it is [`RECV_GROWING`]; linear in between.
const RECV_GROWING_SHORT_RTT: Duration = Duration::from_millis(25);
/// See [`RECV_GROWING_SHORT_RTT`].
const RECV_GROWING_LONG_RTT: Duration = Duration::from_millis(100);

/// The measuring receiver's window while delivery grows by `growth` per half-RTT sample (at
/// least 1.25) on a path of `rtt`: that growth carried over the 1.75 RTT (3.5 samples) until
/// its next window binds the sender, between 2 and [`growing_window_cap`]. Slow start (sqrt 2
/// per sample) gets 3.4 x on long paths; a sample that grows less, as when the bottleneck
/// starts to fill, gets less, so the window the pipe is full with stays near 2 x the delivery
/// instead of 4 x.
fn growing_window_factor(growth: f64, rtt: Duration) -> f64 {
    growth.powf(3.5).clamp(2.0, growing_window_cap(rtt))
}

/// The most [`growing_window_factor`] gives on a path of `rtt` (see [`RECV_GROWING_SHORT`]).
fn growing_window_cap(rtt: Duration) -> f64 {
    let (lo, hi) = (RECV_GROWING_SHORT_RTT, RECV_GROWING_LONG_RTT);
    let x = (rtt.saturating_sub(lo).as_secs_f64() / (hi - lo).as_secs_f64()).min(1.0);
    RECV_GROWING_SHORT + (RECV_GROWING - RECV_GROWING_SHORT) * x
}

/// Configuration of the [`AutoTuner`].
#[derive(Clone, Debug)]
pub struct AutoConfig {
    peer_limits: Option<HostLimits>,
    headroom: f64,
    stream_headroom: f64,
    lowat_time: Duration,
    reader_time: Duration,
    min_lowat: Bytes,
    max_lowat: Bytes,
    max_streams: u32,
    measure: bool,
    share: MeasureShare,
}

impl Default for AutoConfig {
    /// Headroom 1.75 x share in the send buffer, 1.25 x BDP per stream count, 6 ms of unsent data
    /// (128 KiB to 4 MiB, at most half the largest window), 0.4 ms of reader latency in the
    /// receive window, at most 16
    /// streams, the peer assumed to have this host's limits.
    fn default() -> Self {
        AutoConfig {
            peer_limits: None,
            headroom: 1.75,
            stream_headroom: 1.25,
            lowat_time: Duration::from_millis(6),
            reader_time: Duration::from_micros(400),
            min_lowat: Bytes::kib(128),
            max_lowat: Bytes::mib(4),
            max_streams: 16,
            measure: true,
            share: MeasureShare::new(),
        }
    }
}

impl AutoConfig {
    /// The other end's buffer limits (default: the same as this host's).
    pub fn peer_limits(mut self, limits: Option<HostLimits>) -> Self {
        self.peer_limits = limits;
        self
    }

    /// In-flight capacity of an explicitly sized send buffer, in multiples of the stream's
    /// share of the BDP (at least 1).
    pub fn headroom(mut self, h: f64) -> Self {
        self.headroom = if h.is_finite() { h.max(1.0) } else { 1.5 };
        self
    }

    /// Streams are added until each holds this multiple of its share (at least 1).
    pub fn stream_headroom(mut self, h: f64) -> Self {
        self.stream_headroom = if h.is_finite() { h.max(1.0) } else { 1.25 };
        self
    }

    /// Unsent data kept per stream, as time at the stream's rate.
    pub fn lowat_time(mut self, t: Duration) -> Self {
        self.lowat_time = t;
        self
    }

    /// Receive window kept beyond a stream's share of the BDP for the time the reader may
    /// not be scheduled (what arrives meanwhile must fit): it sizes short paths' windows.
    pub fn reader_time(mut self, t: Duration) -> Self {
        self.reader_time = t;
        self
    }

    /// Never ask for more streams in all than this (or than the transfer already has).
    pub fn max_streams(mut self, n: u32) -> Self {
        self.max_streams = n.max(1);
        self
    }

    /// Without a rate on a long path, measure it in band (default): buffers follow what the
    /// stream delivers until the rate arrives. With `false`, Linux's autotuning starts and
    /// the in-band rules take over when it is capped (the behaviour before in-band
    /// measurement).
    pub fn measure(mut self, on: bool) -> Self {
        self.measure = on;
        self
    }

    /// The streams of this transfer end measure together (see [`MeasureShare`]): give every
    /// tuner of one end the same one (the [`crate::TunerFactory`] does).
    pub fn share(mut self, share: MeasureShare) -> Self {
        self.share = share;
        self
    }

    /// Build the tuner.
    pub fn build(&self, ctx: TunerContext) -> AutoTuner {
        let plan = AutoPlan::compute(self, &ctx);
        // The hint's RTT seeds the estimator; its rate (the whole path's) is kept apart and
        // divided among the streams.
        let mut est = PathEstimator::new();
        est.seed(
            Time::ZERO,
            &crate::tuner::PathHint {
                rtt: ctx.hint.rtt,
                rate: None,
                ..Default::default()
            },
        );
        let max_value = if ctx.limits.can_force {
            Bytes(1 << 30)
        } else {
            ctx.limits.wmem_max
        };
        let drs = match (ctx.role, plan.recv) {
            (Role::Receiver, RecvPlan::Sized { window, max_buffer }) => Some(
                super::drs::DrsConfig::default()
                    .initial_window(window)
                    .factor(1.2)
                    .max_buffer(max_buffer)
                    .build(ctx.clone()),
            ),
            // Measuring: the tuner sizes the window itself (see `measure_window`), and
            // hands over to DRS once the rate is known.
            _ => None,
        };
        AutoTuner {
            cfg: self.clone(),
            ctx: ctx.clone(),
            measured: None,
            acked: None,
            recent: meter::Recent::default(),
            full: false,
            min_rcv_rtt: None,
            min_snd_rtt: None,
            window: 0,
            drs,
            role: ctx.role,
            stream_index: ctx.stream_index,
            tcp_wmem_max: ctx.limits.tcp_wmem[2],
            max_value,
            max_lowat: self.max_lowat,
            min_lowat: self.min_lowat,
            lowat_time: self.lowat_time,
            send: plan.send,
            lowat: match plan.send {
                SendPlan::Explicit(_) | SendPlan::Measuring(_) => Some(plan.lowat),
                SendPlan::Kernel => None,
            },
            asks_left: match (ctx.stream_index, plan.extra_streams > 0, plan.trusted()) {
                // Measuring: the transfer decides its streams once the rate is known.
                _ if matches!(plan.send, SendPlan::Measuring(_)) => 0,
                (1.., _, _) => 0,
                (0, _, true) => 0,
                (0, true, false) => 1,
                (0, false, false) => 2,
            },
            base_streams: ctx.streams.max(1),
            max_streams: self.max_streams,
            last_ask: None,
            slow_start_since: None,
            total_streams: plan.streams_total,
            slow_start_cap: linux::max_send_payload(&ctx.limits).map(|p| p * 2 / 3),
            resume: match (ctx.role, ctx.hint.rate, ctx.hint.rtt) {
                (Role::Sender, Some(rate), Some(rtt)) if ctx.hint.resume => {
                    let n = u64::from(plan.streams_total.max(ctx.streams).max(1));
                    Some(ResumePacer::new(Rate(rate.0 / n), rtt))
                }
                _ => None,
            },
            plan,
            est,
            hint_rate: ctx.hint.rate,
            last: None,
            evidence: None,
            shared_since: None,
            shared_probe: None,
            shared_quiet_until: None,
            crowd_since: None,
            crowd_windows: 0,
            crowd_armed: false,
            crowded: false,
            crowd_plan: None,
            srtt: ctx.hint.rtt,
            stopped: false,
            out: Outbox::default(),
        }
    }
}

/// tcptune's own tuner (see the module documentation for the design).
#[derive(Debug)]
pub struct AutoTuner {
    /// Its configuration and context, to plan again when the path's rate arrives.
    cfg: AutoConfig,
    ctx: TunerContext,
    /// While measuring: this stream's bytes delivered per minimum RTT one RTT ago, and when.
    measured: Option<(Time, u64)>,
    /// While measuring: bytes delivered at an earlier sample, and when.
    acked: Option<(Time, u64)>,
    /// While measuring: the last delivery samples (see [`meter`]).
    recent: meter::Recent,
    /// While measuring: this end has seen the pipe full (a queue, or the end of slow start).
    full: bool,
    /// While measuring, at the receiver: the smallest receive-side RTT seen.
    min_rcv_rtt: Option<Duration>,
    /// At the sender: the kernel's own minimum RTT of the connection (`tcpi_min_rtt`).
    min_snd_rtt: Option<Duration>,
    /// While measuring, at the receiver: the window advertised.
    window: u64,
    /// The receiver's right-sizing, when the plan sizes the receive buffer.
    drs: Option<super::drs::DrsTuner>,
    role: Role,
    stream_index: u32,
    tcp_wmem_max: Bytes,
    max_value: Bytes,
    max_lowat: Bytes,
    min_lowat: Bytes,
    lowat_time: Duration,
    plan: AutoPlan,
    send: SendPlan,
    lowat: Option<Bytes>,
    /// In-band requests for streams stream 0 may still make (other streams never ask): none
    /// with a trustworthy BDP (the plan counted the streams), else up to two.
    asks_left: u32,
    /// Streams the transfer had when this tuner was built (`OpenStreams` counts from it).
    base_streams: u32,
    /// Never ask for more than this in all.
    max_streams: u32,
    /// When the last in-band request for streams was made.
    last_ask: Option<Time>,
    /// Since when stream 0 has been in slow start near its socket's capacity with no queue.
    slow_start_since: Option<Time>,
    /// Streams the transfer has, as far as this tuner knows (what it asked for included).
    total_streams: u32,
    /// What one socket keeps in flight at most (two thirds of the largest send buffer's
    /// payload), for the slow-start trigger; `None` when buffers are not capped.
    slow_start_cap: Option<u64>,
    est: PathEstimator,
    hint_rate: Option<Rate>,
    /// Previous sample: time and cumulative send-buffer-limited time.
    last: Option<(Time, Option<u64>)>,
    /// What the samples have been showing, and since when.
    evidence: Option<(Evidence, Time)>,
    /// At the sender: the start of the two RTTs over which a shared queue is judged, and
    /// the send-buffer-limited time and the bytes acknowledged then.
    shared_since: Option<(Time, u64, u64)>,
    /// At the sender: a growth by the shared-queue rule on trial, with the value before it
    /// and the stream's rate over the two RTTs before it ([`SHARED_PAYS`]).
    shared_probe: Option<(Bytes, Rate)>,
    /// At the sender: no shared-queue growth before this time (one did not pay).
    shared_quiet_until: Option<Time>,
    /// Once settled with a rate: the start of the window over which this stream's delivery
    /// is judged (time, bytes delivered then), and how many windows in a row found the path
    /// crowded ([`AutoTuner::crowded_check`]).
    crowd_since: Option<(Time, u64)>,
    crowd_windows: u32,
    /// The end delivered [`CROWDED_BELOW`] of the rate or more in a window: from then on a
    /// shortfall is a crowd, not slow start.
    crowd_armed: bool,
    /// This stream left its plan for what kernel autotuning would hold: its end found the
    /// path crowded.
    crowded: bool,
    /// At the sender, while crowded: the plan's send buffer to go back to.
    crowd_plan: Option<Bytes>,
    srtt: Option<Duration>,
    /// Careful resume: the stream starts paced at its share of the saved rate.
    resume: Option<ResumePacer>,
    stopped: bool,
    out: Outbox,
}

impl AutoTuner {
    /// Careful resume's state, when the stream resumes a known path.
    pub fn resume(&self) -> Option<ResumeState> {
        self.resume.as_ref().map(ResumePacer::state)
    }

    /// The plan made before connecting.
    pub fn plan(&self) -> &AutoPlan {
        &self.plan
    }

    /// How the send buffer is handled now.
    pub fn send(&self) -> SendPlan {
        self.send
    }

    /// The `TCP_NOTSENT_LOWAT` in force, if any.
    pub fn lowat(&self) -> Option<Bytes> {
        self.lowat
    }

    fn before_connect(&mut self) {
        match self.role {
            Role::Sender => {
                if self.stream_index == 0 && self.plan.extra_streams > 0 {
                    self.out.push(Action::OpenStreams {
                        count: self.plan.extra_streams,
                        reason: self.plan.reason.clone().unwrap_or_default(),
                    });
                }
                if let SendPlan::Explicit(v) | SendPlan::Measuring(v) = self.send {
                    self.out.push(Action::SetSndBuf(v));
                    if let Some(l) = self.lowat {
                        self.out.push(Action::SetNotsentLowat(l));
                    }
                }
                if let Some(p) = &self.resume {
                    self.out.push(p.before_connect());
                }
            }
            Role::Receiver => match self.plan.recv {
                RecvPlan::Fixed(v) => self.out.push(Action::SetRcvBuf(v)),
                // The largest buffer first, so that the window scale allows any window the
                // measurement may grow to (it is lowered once established).
                RecvPlan::Measuring => {
                    self.out
                        .push(Action::SetRcvBuf(if self.ctx.limits.can_force {
                            self.ctx.limits.rmem_max.max(self.ctx.limits.tcp_rmem[2])
                        } else {
                            self.ctx.limits.rmem_max
                        }))
                }
                _ => {}
            },
        }
    }

    fn lowat_from_estimate(&self) -> Bytes {
        // The estimator holds this stream's own rate.
        let rate = self.est.estimate().rate.unwrap_or(Rate(0));
        let t = (rate.bytes_per_sec() as f64 * self.lowat_time.as_secs_f64()) as u64;
        Bytes(t.clamp(self.min_lowat.0, self.max_lowat.0))
    }

    /// While the rate is measured: the send buffer follows what the stream delivers per
    /// minimum RTT (`d`). Slow start sends about twice `d` per round, and a locked buffer of
    /// `v` keeps about 1.4 v in flight (0.70 of `sk_sndbuf`, the measured model), so
    /// `v = 2 d + reserve` never holds slow start back (`1.75 d` while a sample grows less
    /// than a quarter). Once the pipe is full (slow start over, or a queue in the RTT: see
    /// [`meter`]; the first stream of this end to see a queue tells the others), the buffer holds
    /// what the plan would for a share of `d`: `1.75 d` in flight plus the reserve, in
    /// payload, with `d` the median of the last three samples taken over at least a round.
    /// It only grows: it peaks near the end of slow start at about 1.1-1.4 x the stream's
    /// share of the BDP in the simulation, until the plan made from the measured rate
    /// settles it.
    ///
    /// The rate is this stream's own delivery whether or not the kernel marks it
    /// application-limited: a stream held back by its send buffer is marked so (it has less
    /// than a segment unsent), and that is exactly the case where the buffer must grow.
    fn measure_grow(&mut self, now: Time, s: &TcpSnapshot) {
        let SendPlan::Measuring(v) = self.send else {
            return;
        };
        let Some(rtt) = self.est.estimate().min_rtt.or(self.ctx.hint.rtt) else {
            return;
        };
        // Bytes acknowledged over at least one RTT: smoother than the kernel's per-ACK
        // delivery-rate samples, whose bursts would make the buffer overshoot.
        let acked = s.bytes_acked.unwrap_or(0);
        let rate = match self.acked {
            Some((t, a)) if now.saturating_since(t) >= rtt / 2 => {
                let dt = now.saturating_since(t).as_secs_f64();
                self.acked = Some((now, acked));
                (acked.saturating_sub(a) as f64 / dt) as u64
            }
            Some(_) => return,
            None => {
                self.acked = Some((now, acked));
                return;
            }
        };
        let round = self.recent.rate_over(now, acked, rtt);
        // Once the pipe is full, over at least a round (see `meter`).
        let rate = if self.full {
            round.unwrap_or(rate)
        } else {
            rate
        };
        // What one RTT at this rate holds, over the lowest RTT this connection has seen
        // (see `covered_rtt`): the kernel's own minimum only. Without one (an old kernel)
        // the rules before stand: the handshake's RTT, the estimator's queue test
        // (`TcpSnapshot::min_rtt` would give the current RTT, this stream's own queue and all).
        let own_min = own_min_rtt(s);
        let seen = covered_rtt(rtt, own_min);
        let own = (rate as f64 * seen.as_secs_f64()) as u64;
        // Sized from the average stream of this end (see `MeasureShare`).
        let d = self.cfg.share.report(self.stream_index, own);
        let growing = match self.measured {
            Some((_, d0)) => d * 4 >= d0 * 5,
            None => true,
        };
        self.measured = Some((now, d));
        self.recent.push(d);
        // The pipe is full once slow start is over (the kernel's test: the congestion
        // window has reached ssthresh, which a loss or HyStart sets) or the smoothed RTT
        // shows a queue. (Waiting for a second sample with a queue costs 2.5% of completion
        // and 0.6 x BDP of send buffers at 100 ms in the simulation.)
        // Only the queue is told to the other streams: it is the bottleneck's, while one
        // stream's slow start may end early on its own (HyStart's ACK-train test).
        // The queue is judged against the lowest RTT this connection has seen itself
        // (the kernel's minimum), not the estimator's, which the handshake seeds: as at the
        // receiver (see `measure_window`), a queue that another flow kept before this
        // stream's first windows is not this transfer's pipe filling.
        let slow_start_over = s.snd_cwnd_segs >= s.snd_ssthresh_segs;
        let own_queue = match (self.est.estimate().srtt, own_min) {
            (Some(srtt), Some(min)) => meter::queue_shows(srtt, min),
            _ => self.est.estimate().rtt_inflated(),
        };
        if own_queue {
            self.cfg.share.mark_full();
        }
        self.full = self.full || slow_start_over || self.cfg.share.is_full();
        // The unsent reserve follows the stream's rate as well (6 ms of it): a small one at
        // a high rate makes the writer refill the socket too often to keep up.
        let lowat = Bytes(
            ((rate as f64 * self.lowat_time.as_secs_f64()) as u64)
                .clamp(self.min_lowat.0, self.max_lowat.0),
        );
        if self.lowat.is_some_and(|l| lowat.0 > l.0 + l.0 / 8) {
            self.lowat = Some(lowat);
            self.out.push(Action::SetNotsentLowat(lowat));
        }
        let reserve = self.lowat.map_or(0, |l| l.0);
        let want = if self.full {
            // The pipe is full: what the plan would hold for a share of the median sample
            // (1.75 x it in flight plus the reserve, in payload).
            linux::sndbuf_value_for_payload(scale(self.recent.median(), 1.75) + reserve)
        } else {
            let factor = if growing { 2.0 } else { 1.75 };
            Bytes(scale(d, factor) + reserve)
        }
        .min(self.max_value);
        if want.0 > v.0 + v.0 / 8 {
            self.send = SendPlan::Measuring(want);
            self.out.push(Action::SetSndBuf(want));
        }
    }

    /// While the rate is measured, at the receiver: the window (and the buffer behind it)
    /// follows what the streams of this end receive per minimum RTT, measured over half an
    /// RTT (fresher than DRS's whole RTT: in slow start the rate at the end of an RTT is about
    /// twice its average), [`growing_window_factor`] x the average stream's while it grows
    /// by a quarter per half RTT (the window reaches the sender half an RTT late: 3.4 x in
    /// slow start), 1.5 x otherwise. Once the pipe is full (the receive-side RTT shows a
    /// queue, or another stream of this end saw one), 1.5 x the median of the
    /// last three samples taken over at least a round (see [`meter`]). It only grows (an
    /// advertised window never shrinks).
    fn measure_window(&mut self, now: Time, s: &TcpSnapshot) {
        let Some(rtt) = self.ctx.hint.rtt.or_else(|| s.min_rtt()) else {
            return;
        };
        let received = s.bytes_received.unwrap_or(0);
        let rate = match self.acked {
            Some((t, b)) if now.saturating_since(t) >= rtt / 2 => {
                let dt = now.saturating_since(t).as_secs_f64();
                self.acked = Some((now, received));
                (received.saturating_sub(b) as f64 / dt) as u64
            }
            Some(_) => return,
            None => {
                self.acked = Some((now, received));
                return;
            }
        };
        let round = self.recent.rate_over(now, received, rtt);
        // Once the pipe is full, over at least a round (see `meter`).
        let rate = if self.full {
            round.unwrap_or(rate)
        } else {
            rate
        };
        // What one RTT at this rate holds, over the lowest RTT this stream has seen (see
        // `covered_rtt`).
        let rcv_rtt = Duration::from_micros(u64::from(s.rcv_rtt_us));
        if !rcv_rtt.is_zero() {
            self.min_rcv_rtt = Some(self.min_rcv_rtt.map_or(rcv_rtt, |m| m.min(rcv_rtt)));
        }
        let seen = covered_rtt(rtt, self.min_rcv_rtt);
        let own = (rate as f64 * seen.as_secs_f64()) as u64;
        let d = self.cfg.share.report(self.stream_index, own);
        let growth = self.measured.map_or(std::f64::consts::SQRT_2, |(_, d0)| {
            d as f64 / d0.max(1) as f64
        });
        let growing = growth >= 1.25;
        self.measured = Some((now, d));
        self.recent.push(d);
        // A queue in the receive-side RTT: the pipe is full. (Waiting for a second sample
        // with a queue left the emulator's 25 ms paths at 2.2-2.35 x BDP: a round at twice
        // the delivery more.) The queue is judged against the lowest RTT this stream has
        // seen itself, not the control connection's handshake: a queue that another flow
        // kept before this stream's first windows (far too small to fill the pipe) is not
        // this transfer's pipe filling. Judged against the handshake (taken when that queue
        // was briefly empty), every sample showed it, and a latecomer beside `iperf3 -P 4`
        // at 25 ms froze its windows at 1.5 x its first deliveries: about 100 KB per stream,
        // a plateau of its own making, which the rate then measured and settled on.
        if let Some(min) = self.min_rcv_rtt.filter(|_| !rcv_rtt.is_zero()) {
            if meter::queue_shows(rcv_rtt, min) {
                self.cfg.share.mark_full();
            }
        }
        self.full = self.full || self.cfg.share.is_full();
        let (d, factor) = if self.full {
            (self.recent.median(), 1.5)
        } else if growing {
            (d, growing_window_factor(growth, rtt))
        } else {
            (d, 1.5)
        };
        let max_window = linux::rcvbuf_window(linux::rcvbuf_after_setsockopt(
            if self.ctx.limits.can_force {
                self.ctx.limits.rmem_max.max(self.ctx.limits.tcp_rmem[2])
            } else {
                self.ctx.limits.rmem_max
            },
            &self.ctx.limits,
        ));
        // Not "at least what the kernel advertises now": on this kernel the first data
        // resets the clamp to about the whole buffer, so the advertised window runs ahead of
        // the clamp and would ratchet the buffer up to its maximum.
        let want = scale(d, factor).clamp(MEASURE_WINDOW, max_window.max(MEASURE_WINDOW));
        if want > self.window + self.window / 8 {
            self.window = want;
            self.out
                .push(Action::SetRcvBuf(linux::rcvbuf_value_for_window(want)));
            self.out.push(Action::SetWindowClamp(Bytes(want)));
        }
    }

    /// The path's rate is known now (measured in band, or corrected): plan as if it had been
    /// known before connecting, for the transfer's `streams`, and settle the buffers to it.
    fn settle(&mut self, hint: &PathHint, streams: u32) {
        // A stream beyond the transfer's count is closing (the client closed the measuring
        // streams its plan does not need): it finishes its message with the buffers it has.
        // Sized for the fewer streams' share, the four that closed at 25 ms had taken their
        // send buffers to 4 MiB each on the way out (peak total 33 MB against 12 MB).
        if self.stream_index >= streams.max(1) {
            return;
        }
        let mut ctx = self.ctx.clone();
        ctx.hint = PathHint {
            rtt: hint.rtt.or(self.ctx.hint.rtt),
            streams_asked: hint.streams_asked.or(self.ctx.hint.streams_asked),
            ..hint.clone()
        };
        ctx.streams = streams.max(1);
        // Fewer streams than measured the rate: the client closed those the plan does not
        // need (`AutoPlan::retiring_pays`), and what the measuring streams got together is
        // no promise of what the fewer will get beside other flows.
        let fewer = ctx.streams < self.total_streams;
        let mut plan = AutoPlan::compute(&self.cfg, &ctx);
        // The streams are the transfer's to decide now; this plan sizes each of them.
        plan.extra_streams = 0;
        plan.streams_total = ctx.streams;
        match self.role {
            Role::Sender => {
                if let SendPlan::Explicit(v) = plan.send {
                    let v = self.settled_sender(&ctx, v, fewer);
                    plan.send = SendPlan::Explicit(v);
                    if SendPlan::Explicit(v) != self.send {
                        self.send = SendPlan::Explicit(v);
                        self.out.push(Action::SetSndBuf(v));
                    }
                    if self.lowat != Some(plan.lowat) {
                        self.lowat = Some(plan.lowat);
                        self.out.push(Action::SetNotsentLowat(plan.lowat));
                    }
                }
                // A short path's plan leaves the kernel in charge, which a locked buffer
                // cannot go back to: the measuring buffer stays (it follows delivery).
            }
            Role::Receiver => {
                if let RecvPlan::Sized { window, max_buffer } = plan.recv {
                    let (max_buffer, factor) = self.settled_receiver(&ctx, max_buffer, fewer);
                    plan.recv = RecvPlan::Sized { window, max_buffer };
                    if self.drs.is_none() {
                        // From measuring to right-sizing: DRS takes over the window.
                        let mut d = super::drs::DrsConfig::default()
                            .initial_window(window)
                            .factor(factor)
                            .max_buffer(max_buffer)
                            .build(ctx.clone());
                        d.adopt(Bytes(self.window));
                        self.drs = Some(d);
                    }
                    if let Some(d) = self.drs.as_mut() {
                        d.retarget(window, max_buffer, factor);
                    }
                }
                self.cfg.share.leave(self.stream_index);
            }
        }
        self.hint_rate = ctx.hint.rate;
        self.total_streams = ctx.streams;
        self.base_streams = ctx.streams;
        if plan.trusted() {
            self.asks_left = 0;
        }
        self.ctx = ctx;
        self.plan = plan;
    }

    /// A settled sender's `SO_SNDBUF`: the plan's `value` for the rate it measured; unless
    /// this stream measured it behind a queue that predates it ([`meter::predating_queue`]
    /// between the handshake and the kernel's own minimum RTT), or the client, whose streams
    /// saw it, marked the rate a lower bound in the hint
    /// ([`AutoPlan::measured_beside_another_flow`]). Then the rate is what the
    /// stream got beside another flow, a lower bound, and the buffer is what kernel
    /// autotuning would let the streams asked for hold ([`AutoTuner::kernel_send_reach`]):
    /// the congestion control decides, as it would for kernel-tuned streams, how much of
    /// the path the stream takes. (Held to the measured rate, the stream could only grow
    /// by [`AutoTuner::shared_queue_check`]'s trial steps, each taken back unless the rate
    /// rose a tenth within two RTTs: beside `iperf3 -P 4` at 25 ms its streams stayed
    /// send-buffer-limited at about 270 KB each.) The same when the transfer settles on
    /// `fewer` streams than measured the rate (the client closed the others): the rate is
    /// what more streams got, and the streams that stay hold at least what kernel-tuned
    /// streams would. (Held to the plan for a rate five streams measured beside one
    /// `iperf3` flow at 25 ms, the one stream that stayed got 260-330 against its 580-700
    /// Mbit/s, three runs.)
    fn settled_sender(&self, ctx: &TunerContext, value: Bytes, fewer: bool) -> Bytes {
        if fewer
            || ctx.hint.rate_is_lower_bound
            || meter::predating_queue(ctx.hint.rtt, self.min_snd_rtt)
        {
            value.max(self.kernel_send_reach(&ctx.hint, ctx.streams))
        } else {
            value
        }
    }

    /// What kernel autotuning would let the streams the user asked for hold, in
    /// `setsockopt` units per stream: `tcp_wmem[2]` of kernel memory each (half of it
    /// asked), shared by the streams the transfer runs (it may run more, to measure the
    /// path or to hold its BDP); at most `wmem_max` (or what `SO_SNDBUFFORCE` allows).
    fn kernel_send_reach(&self, hint: &PathHint, running: u32) -> Bytes {
        let per_socket = self.tcp_wmem_max.0 / 2;
        let running = u64::from(running.max(1));
        let asked = hint
            .streams_asked
            .map_or(running, |n| u64::from(n.max(1)).min(running));
        Bytes(per_socket.saturating_mul(asked) / running).min(self.max_value)
    }

    /// How a settled receiver's right-sizing grows: at most to the plan's `budget` (twice
    /// the BDP of the measured rate), by 1.2 x what arrives per RTT; unless this stream
    /// measured the rate behind a queue that predates it. Then that rate is only a lower
    /// bound, what the stream got while another flow held the path (or the client's streams
    /// saw that queue and the hint says the rate is a lower bound: a receiver's
    /// receive-side RTT is too coarse to see a queue of a few milliseconds), and it grows as
    /// kernel autotuning would: to what one receiver reaches (`rmem_max` through `SO_RCVBUF`; with
    /// `SO_RCVBUFFORCE`, `tcp_rmem[2]`), by [`SHARED_RCV_FACTOR`] x what arrives per RTT.
    /// Its lowest receive-side RTT (taken in its first rounds, when its own windows were far
    /// too small to build a queue) shows that queue against the handshake's, or the
    /// handshake showed one that later drained ([`meter::predating_queue`]). Right-sizing
    /// still follows what the sender sends, so the sender's congestion control decides, as
    /// kernel-tuned streams' would, how much of the shared queue the stream holds.
    ///
    /// Held to the budget of the rate it measured, a latecomer beside `iperf3 -P 4` at
    /// 25 ms stayed at the 100-190 Mbit/s it first got (Jain 0.62-0.72, three pairs), every
    /// step its sender tried taken back because the receive window held the rate. With
    /// the kernel's reach but 1.2 x, it got 210-280 (0.76-0.85): its streams were still
    /// receive-window-limited a quarter of the time, in loss recovery, where the window
    /// must also cover what arrives beyond a hole. The same when the transfer settles on
    /// `fewer` streams than measured the rate (see [`AutoTuner::settled_sender`]).
    fn settled_receiver(&self, ctx: &TunerContext, budget: Bytes, fewer: bool) -> (Bytes, f64) {
        if !fewer
            && !ctx.hint.rate_is_lower_bound
            && !meter::predating_queue(ctx.hint.rtt, self.min_rcv_rtt)
        {
            return (budget, SETTLED_RCV_FACTOR);
        }
        (
            budget.max(kernel_recv_reach(&ctx.limits)),
            SHARED_RCV_FACTOR,
        )
    }

    /// A path crowded after the rate was measured: while the transfer runs, a flow it does
    /// not control arrives and takes the bottleneck's queue. The end's streams together
    /// deliver less than [`CROWDED_BELOW`] of the rate they settled on, and this stream's
    /// RTT shows a queue (`queue`), over [`CROWDED_WINDOWS`] windows of two RTTs (`rtt`) in a
    /// row, each judged once every stream of the end has reported and after the end first
    /// delivered that much; `delivered` is the stream's bytes acknowledged (sender) or
    /// received (receiver) so far. Returns [`Crowd::Crowded`] once, when this stream should
    /// leave its plan for what kernel autotuning would hold: its end is crowded (this stream
    /// found it, or another of the end did). A crowded end goes on judging: once its
    /// streams together deliver [`UNCROWDED_AT`] of the rate again over as many windows,
    /// the other flow has left, and [`Crowd::Cleared`] (to every stream of the end) sends
    /// it back to its plan, so that the kernel's reach is held only while it is needed.
    ///
    /// A plan sized for the path alone holds its streams to about twice the BDP at the
    /// path's minimum RTT. Beside another flow the queue that flow keeps is in every RTT:
    /// the same bytes in flight then carry less, the congestion control's rate estimate
    /// follows what they carry, and the other flow, whose buffers kernel autotuning lets
    /// grow to `tcp_wmem[2]` and `tcp_rmem[2]`, takes the rest. Pulling first with
    /// `send -R -P 4` at 25 ms / 1 Gbit/s, the five streams kept 315 Mbit/s against a
    /// later `iperf3 -R -P 4`'s 650, each held to a 1 MB window and a 1.3 MB send buffer
    /// that were ample alone; kernel autotuning's pulls split the link. Alone, the end
    /// delivers what it measured whether or not its own streams keep a queue, so this never
    /// fires; a path slower than measured (a queue of its own and less delivered) costs
    /// only the memory kernel autotuning would have used.
    fn crowded_check(&mut self, now: Time, delivered: u64, rtt: Duration, queue: bool) -> Crowd {
        let marked = self.cfg.share.is_crowded();
        if marked != self.crowded {
            // Another stream of the end found it crowded, or found it clear again.
            self.crowded = marked;
            self.crowd_windows = 0;
            return if marked {
                Crowd::Crowded
            } else {
                Crowd::Cleared
            };
        }
        let Some(rate) = self.hint_rate.filter(|r| r.0 > 0) else {
            self.crowd_since = None;
            return Crowd::Same;
        };
        let Some((t0, d0)) = self.crowd_since else {
            self.crowd_since = Some((now, delivered));
            return Crowd::Same;
        };
        let dt = now.saturating_since(t0);
        if dt.is_zero() || dt < rtt * 2 {
            return Crowd::Same;
        }
        self.crowd_since = Some((now, delivered));
        let own = (u128::from(delivered.saturating_sub(d0)) * 8 * 1_000_000 / dt.as_micros().max(1))
            as u64;
        let (end, reporting) = self
            .cfg
            .share
            .report_rate(self.stream_index, now, own, dt * 2);
        // Judged only once every stream of the end has reported: one stream's share says
        // nothing about the end's.
        if reporting < self.total_streams.max(1) {
            return Crowd::Same;
        }
        // Crowded: is the rate back? Otherwise: a crowd, a queue and the end below the rate.
        let hit = if self.crowded {
            end as f64 >= rate.0 as f64 * UNCROWDED_AT
        } else {
            let below = (end as f64) < rate.0 as f64 * CROWDED_BELOW;
            // Judged only once the end has delivered the rate: before that (slow start, with
            // the queue its overshoot builds) the end is on its way up, not crowded.
            self.crowd_armed |= !below;
            if !self.crowd_armed {
                return Crowd::Same;
            }
            queue && below
        };
        self.crowd_windows = if hit { self.crowd_windows + 1 } else { 0 };
        if self.crowd_windows < CROWDED_WINDOWS {
            return Crowd::Same;
        }
        self.crowd_windows = 0;
        self.crowded = !self.crowded;
        self.cfg.share.set_crowded(self.crowded);
        if self.crowded {
            Crowd::Crowded
        } else {
            Crowd::Cleared
        }
    }

    /// A settled receiver: judge the crowd from the receive-side RTT against the lowest this
    /// stream has seen; once crowded, right-size as behind a queue that predates the stream
    /// (see [`AutoTuner::settled_receiver`]): up to what one receiver reaches, by
    /// [`SHARED_RCV_FACTOR`] x what arrives per RTT.
    fn settled_receiver_snapshot(&mut self, now: Time, s: &TcpSnapshot) {
        if self.drs.is_none() || self.crowded {
            return;
        }
        let rcv_rtt = Duration::from_micros(u64::from(s.rcv_rtt_us));
        if !rcv_rtt.is_zero() {
            self.min_rcv_rtt = Some(self.min_rcv_rtt.map_or(rcv_rtt, |m| m.min(rcv_rtt)));
        }
        let queue = !rcv_rtt.is_zero()
            && self
                .min_rcv_rtt
                .is_some_and(|min| meter::queue_shows(rcv_rtt, min));
        let rtt = if rcv_rtt.is_zero() {
            self.ctx.hint.rtt.unwrap_or(Duration::from_millis(100))
        } else {
            rcv_rtt
        };
        // A receiver's memory follows what its sender sends: once crowded it keeps the
        // kernel's reach and judges no more (its sender goes back to its plan).
        if self.crowded_check(now, s.bytes_received.unwrap_or(0), rtt, queue) != Crowd::Crowded {
            return;
        }
        let reach = kernel_recv_reach(&self.ctx.limits);
        if let RecvPlan::Sized { window, max_buffer } = self.plan.recv {
            let max_buffer = max_buffer.max(reach);
            self.plan.recv = RecvPlan::Sized { window, max_buffer };
            if let Some(d) = self.drs.as_mut() {
                let now_window = d.window();
                d.retarget(now_window, max_buffer, SHARED_RCV_FACTOR);
            }
        }
    }

    fn on_sender_snapshot(&mut self, now: Time, s: &TcpSnapshot) {
        if let Some(a) = self.resume.as_mut().and_then(|p| p.on_snapshot(now, s)) {
            self.out.push(a);
        }
        self.est.observe(now, s);
        let estimate = self.est.estimate();
        self.srtt = estimate.srtt.or(self.srtt);
        if let Some(min) = own_min_rtt(s) {
            self.min_snd_rtt = Some(min);
        }
        self.slow_start_trigger(now, s);
        if matches!(self.send, SendPlan::Measuring(_)) {
            return self.measure_grow(now, s);
        }
        if let SendPlan::Explicit(v) = self.send {
            let queue = match (estimate.srtt, own_min_rtt(s)) {
                (Some(srtt), Some(min)) => meter::queue_shows(srtt, min),
                _ => estimate.rtt_inflated(),
            };
            let rtt = self.srtt.unwrap_or(Duration::from_millis(100));
            match self.crowded_check(now, s.bytes_acked.unwrap_or(0), rtt, queue) {
                Crowd::Same => {}
                Crowd::Crowded => {
                    // The congestion control decides, up to what kernel autotuning would
                    // let the streams asked for hold (see `AutoTuner::crowded_check`).
                    let reach = self.kernel_send_reach(&self.ctx.hint, self.total_streams);
                    if reach > v {
                        self.crowd_plan = Some(v);
                        self.send = SendPlan::Explicit(reach);
                        self.shared_probe = None;
                        self.out.push(Action::SetSndBuf(reach));
                    }
                }
                Crowd::Cleared => {
                    if let Some(plan) = self.crowd_plan.take().filter(|&p| p < v) {
                        self.send = SendPlan::Explicit(plan);
                        self.shared_probe = None;
                        self.out.push(Action::SetSndBuf(plan));
                    }
                }
            }
        }
        let prev = self.last.replace((now, s.sndbuf_limited_us));
        let Some((t0, lim0)) = prev else {
            return;
        };
        let dt = now.saturating_since(t0);
        if dt.is_zero() {
            return;
        }
        // Was the socket starved of data while the application waited for buffer space?
        let limited = match (lim0, s.sndbuf_limited_us) {
            (Some(a), Some(b)) => b.saturating_sub(a) * 10 >= dt.as_micros() as u64,
            // Old kernel: nothing unsent, fewer bytes in flight than cwnd allows.
            _ => {
                s.notsent_bytes.unwrap_or(0) == 0
                    && s.unacked_segs < s.snd_cwnd_segs
                    && !s.delivery_rate_app_limited
            }
        };
        // A blocked writer is only woken below two thirds of the buffer: above 60% the
        // buffer is what holds it back; below half, the writer was merely late.
        let (full, roomy) = match (s.wmem_queued_bytes, s.sndbuf_bytes) {
            (Some(q), Some(b)) => (
                u64::from(q) * 10 >= u64::from(b) * 6,
                u64::from(q) * 2 < u64::from(b),
            ),
            _ => (true, false),
        };
        let delivery = s
            .delivery_rate_bytes_per_sec
            .map(|r| r.saturating_mul(8))
            .unwrap_or(0);
        // The best this stream has delivered, or its share of the probed rate.
        let streams = u64::from(self.plan.streams_total.max(1));
        let share_of_hint = self.hint_rate.map_or(0, |r| r.0 / streams);
        let best = estimate.rate.map_or(0, |r| r.0).max(share_of_hint);
        let below_best = (delivery as f64) < best as f64 * 0.85;
        // A buffer-limited stream whose pipe is not full: no queue yet, or less delivered
        // than the path carries.
        // With several streams, one stream delivering less than its share says little
        // (streams share a bottleneck unevenly); the queue (RTT) speaks for all of them.
        let single = streams == 1;
        let buffer_short = limited && full && (!estimate.rtt_inflated() || (single && below_best));
        // A queue this transfer shares with flows it does not control: the rate is known
        // (measured or resumed), the buffer binds and the RTT shows a queue that lasts.
        // Another loss- or model-based flow holds that queue; a stream whose buffer stays
        // sized for the rate it had (or measured while the other flow ran) keeps less in
        // flight than the other flow's congestion control would, and cedes it the path.
        // Kernel autotuning would let the congestion window decide up to `tcp_wmem[2]`:
        // so may this stream ([`AutoTuner::shared_queue_cap`]), and no further.
        // The kernel counts send-buffer-limited time in jiffies (4 ms here): a sample
        // half an RTT long shows 0 or 20%, so this is judged over two RTTs at a time.
        self.shared_queue_check(now, s, &estimate, buffer_short);
        let starved = limited && roomy && self.lowat.is_some();
        // Act only on evidence that lasts two RTTs: slow start overshoots for a round or
        // two before RTT and delivery rate catch up.
        let srtt = self.srtt.unwrap_or(Duration::from_millis(100));
        let evidence = if buffer_short {
            Evidence::BufferShort
        } else if starved {
            Evidence::Starved
        } else {
            Evidence::None
        };
        let lasting = match self.evidence {
            Some((kind, since)) if kind == evidence => now.saturating_since(since) >= srtt * 2,
            _ => {
                self.evidence = (evidence != Evidence::None).then_some((evidence, now));
                false
            }
        };
        if !lasting {
            return;
        }
        self.evidence = Some((evidence, now));
        match evidence {
            Evidence::None => {}
            Evidence::Starved => {
                // The buffer had room: the application did not refill it in time.
                if let Some(l) = self.lowat {
                    let bigger = Bytes((l.0 * 2).min(self.max_lowat.0));
                    if bigger > l {
                        self.lowat = Some(bigger);
                        self.out.push(Action::SetNotsentLowat(bigger));
                    }
                }
            }
            Evidence::BufferShort => self.grow(now, s, &estimate),
        }
    }

    /// A queue this transfer shares with flows it does not control: the rate is known
    /// (measured or resumed), the RTT shows a queue, and over the last two RTTs the send
    /// buffer bound the stream. Another flow holds that queue; a stream whose buffer stays
    /// sized for the rate it had (or measured while the other flow ran) keeps less in
    /// flight than the other flow's congestion control does, and cedes it the path. Kernel
    /// autotuning would let the congestion window decide up to `tcp_wmem[2]`: so may this
    /// stream, at once, up to [`AutoTuner::shared_queue_cap`] and no further. (Grown by a
    /// quarter, or by half, whenever a tenth of two RTTs was buffer-limited, a latecomer
    /// beside iperf3 at 25 ms took 3-5 s to reach its share: a congestion control that is
    /// held back even now and then underestimates the rate it could get.)
    fn shared_queue_check(
        &mut self,
        now: Time,
        s: &TcpSnapshot,
        estimate: &crate::estimate::PathEstimate,
        buffer_short: bool,
    ) {
        let SendPlan::Explicit(v) = self.send else {
            self.shared_since = None;
            return;
        };
        let (Some(limited), true, true, false) = (
            s.sndbuf_limited_us,
            estimate.rtt_inflated(),
            self.hint_rate.is_some(),
            buffer_short,
        ) else {
            self.shared_since = None;
            return;
        };
        let acked = s.bytes_acked.unwrap_or(0);
        let Some((t0, lim0, acked0)) = self.shared_since else {
            self.shared_since = Some((now, limited, acked));
            return;
        };
        let dt = now.saturating_since(t0);
        if dt < self.srtt.unwrap_or(Duration::from_millis(100)) * 2 {
            return;
        }
        self.shared_since = Some((now, limited, acked));
        if limited <= lim0 {
            return;
        }
        // What the stream delivered over these two RTTs (not the largest sample: a burst
        // that fills a hole is not a rate).
        let rate = Rate(
            (u128::from(acked.saturating_sub(acked0)) * 8 * 1_000_000 / dt.as_micros().max(1))
                as u64,
        );
        // A growth on trial must pay: a rate that stayed where it was says the added bytes
        // only lengthened a queue this transfer keeps itself. It is taken back, and the
        // rule rests for a while.
        if let Some((before, r0)) = self.shared_probe.take() {
            if (rate.0 as f64) < r0.0 as f64 * SHARED_PAYS {
                if before < v {
                    self.send = SendPlan::Explicit(before);
                    self.out.push(Action::SetSndBuf(before));
                }
                let srtt = self.srtt.unwrap_or(Duration::from_millis(100));
                self.shared_quiet_until = Some(now + srtt * SHARED_RETRY_RTTS);
                return;
            }
        }
        if self.shared_quiet_until.is_some_and(|t| now < t) {
            return;
        }
        let cap = self.shared_queue_cap(rate, estimate);
        if v < cap {
            self.send = SendPlan::Explicit(cap);
            self.shared_probe = Some((v, rate));
            self.out.push(Action::SetSndBuf(cap));
        }
    }

    /// How far `SO_SNDBUF` may grow while the stream shares a queue with other flows: what
    /// kernel autotuning would let the streams the user asked for hold (`tcp_wmem[2]` of
    /// kernel memory each, half of it in `setsockopt` units), shared by the streams the
    /// transfer runs (it may run more, to measure the path or to hold its BDP); at most
    /// `wmem_max`. With it the transfer keeps no more in flight than kernel-tuned streams
    /// of the number asked for. A stream whose plan already holds more (sized for the
    /// path alone, before the other flow came) does not grow: it keeps its plan, as it
    /// would have without the other flow.
    ///
    /// And no more than keeps [`SHARED_HEADROOM`] x what this stream delivers now per
    /// smoothed RTT (the queue included) in flight: a buffer the congestion control can
    /// grow into, a quarter or so per step as its rate does, not the kernel's whole reach
    /// at once (that held a path alone at 25 ms at 4-5 x its BDP, lab 2026-11-29, through
    /// the queue its own streams keep). A step that does not raise the rate is taken back
    /// ([`SHARED_PAYS`]).
    fn shared_queue_cap(&self, rate: Rate, estimate: &crate::estimate::PathEstimate) -> Bytes {
        let kernel = self.kernel_send_reach(&self.ctx.hint, self.total_streams);
        // In flight now (the queue included), and the value whose buffer keeps a quarter
        // more in flight (a value of v keeps 2 v x 0.70 in flight when it binds).
        let in_flight = rate.bdp(estimate.srtt.unwrap_or(Duration::ZERO)).0;
        let value = scale(
            in_flight,
            SHARED_HEADROOM / (2.0 * linux::SNDBUF_INFLIGHT_FRACTION),
        );
        Bytes(value).min(kernel)
    }

    /// Ask for streams so that the transfer has `total` in all (once per call; counts
    /// against [`AutoTuner::asks_left`]'s budget; bounded by the configured maximum).
    fn ask_for_streams(&mut self, now: Time, total: u32, reason: String) {
        let total = total.min(self.max_streams.max(self.total_streams));
        if self.asks_left == 0 || total <= self.total_streams {
            return;
        }
        // Streams asked for need a few RTTs to connect and ramp up before the evidence
        // can say whether they were enough.
        let settle = self.srtt.unwrap_or(Duration::from_millis(100)) * 4;
        if self
            .last_ask
            .is_some_and(|t| now.saturating_since(t) < settle)
        {
            return;
        }
        self.last_ask = Some(now);
        self.asks_left -= 1;
        self.total_streams = total;
        self.out.push(Action::OpenStreams {
            count: total - self.base_streams.min(total),
            reason,
        });
    }

    /// Without any rate: stream 0 still in slow start (no loss yet) whose congestion window
    /// has reached three quarters of what one socket keeps in flight, with no queue yet (the
    /// RTT is not inflated), will be limited by its buffer within a round. Streams opened now
    /// start while it still grows, rather than after the buffer has already capped it. If
    /// that still holds half an RTT later (streams that overshoot together show a queue by
    /// then): ask
    /// for twice as many (at least 4 in all). (Earlier, at half, the trigger mistakes paths
    /// whose BDP one socket still holds: at 25 ms and 1 Gbit/s the window passes half a
    /// socket's capacity before the pipe is full.)
    fn slow_start_trigger(&mut self, now: Time, s: &TcpSnapshot) {
        if self.stream_index != 0
            || self.asks_left == 0
            || self.last_ask.is_some()
            || self.plan.bdp.is_some()
        {
            return;
        }
        let Some(cap) = self.slow_start_cap else {
            return;
        };
        // TCP_INFINITE_SSTHRESH: no loss yet; ca_state 0: Open.
        let in_slow_start = s.snd_ssthresh_segs >= 0x7fff_0000 && s.ca_state == 0;
        let queue = self.est.estimate().rtt_inflated();
        if !in_slow_start || queue || s.cwnd_bytes().saturating_mul(4) < cap.saturating_mul(3) {
            self.slow_start_since = None;
            return;
        }
        // Half an RTT later, still so: several streams that overshoot together in slow
        // start show their queue within that time.
        let since = *self.slow_start_since.get_or_insert(now);
        if now.saturating_since(since) < self.srtt.unwrap_or(Duration::from_millis(100)) / 2 {
            return;
        }
        let total = self.total_streams.max(1).saturating_mul(2).max(4);
        self.ask_for_streams(
            now,
            total,
            format!(
                "stream 1 is still in slow start with a congestion window of {} and no queue (RTT \
                 {}), three quarters of what one socket keeps in flight ({} of SO_SNDBUF at \
                 most): opening streams now, before its buffer caps it, {total} in all",
                Bytes(s.cwnd_bytes()),
                self.srtt
                    .map_or_else(|| "unknown".to_string(), format_duration),
                self.max_value
            ),
        );
    }

    /// How far in-band growth may take `SO_SNDBUF`: `wmem_max`, and with a probed rate no
    /// more than this stream's share of rate x minimum RTT (a kernel buffer of twice that:
    /// the 2 x BDP memory budget). The minimum RTT is taken over the last 10 s, so the
    /// budget follows a path whose RTT grew once the old minimum has aged out.
    fn growth_cap(&self, estimate: &crate::estimate::PathEstimate) -> Bytes {
        let Some(hint) = self.hint_rate.filter(|_| !self.plan.bdp_lower_bound) else {
            return self.max_value;
        };
        let n = u64::from(self.plan.streams_total.max(1));
        let own = estimate.rate.map_or(0, |r| r.0.saturating_mul(n));
        let rtt = estimate.min_rtt.or(self.srtt).unwrap_or(Duration::ZERO);
        let share = Rate(hint.0.max(own)).bdp(rtt).0 / n;
        Bytes(share).min(self.max_value)
    }

    fn grow(&mut self, now: Time, s: &TcpSnapshot, estimate: &crate::estimate::PathEstimate) {
        match self.send {
            SendPlan::Kernel => {
                let sndbuf = u64::from(s.sndbuf_bytes.unwrap_or(0));
                if sndbuf * 10 >= self.tcp_wmem_max.0 * 9 {
                    // Autotuning sits at its cap and still limits: take over.
                    let v = Bytes(scale(sndbuf, 0.75)).min(self.max_value);
                    self.send = SendPlan::Explicit(v);
                    self.out.push(Action::SetSndBuf(v));
                    let l = self.lowat_from_estimate();
                    self.lowat = Some(l);
                    self.out.push(Action::SetNotsentLowat(l));
                }
            }
            SendPlan::Explicit(v) if v < self.growth_cap(estimate) => {
                let bigger = Bytes(scale(v.0, 1.25)).min(self.growth_cap(estimate));
                self.send = SendPlan::Explicit(bigger);
                self.out.push(Action::SetSndBuf(bigger));
            }
            SendPlan::Measuring(_) => {}
            SendPlan::Explicit(_) => {
                // Only without a trustworthy BDP: with one, the plan already counted
                // streams, and streams opened late mostly slow the end of a transfer down.
                let total = self.total_streams.max(1);
                self.ask_for_streams(
                    now,
                    total.saturating_mul(2),
                    format!(
                        "the send buffer is at its per-socket maximum ({} of SO_SNDBUF) and still \
                         limits a stream whose pipe is not full (RTT {}): doubling to {} streams",
                        self.max_value,
                        estimate
                            .srtt
                            .map_or_else(|| "unknown".to_string(), format_duration),
                        total.saturating_mul(2)
                    ),
                );
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Evidence {
    None,
    /// The send buffer limits a stream whose pipe is not full.
    BufferShort,
    /// The socket ran dry while its buffer had room (unsent reserve too small).
    Starved,
}

impl Tuner for AutoTuner {
    fn name(&self) -> &'static str {
        "auto"
    }

    fn handle_event(&mut self, now: Time, event: ConnEvent) {
        if self.stopped {
            return;
        }
        if let Some(d) = self.drs.as_mut() {
            d.handle_event(now, event);
        }
        match event {
            ConnEvent::BeforeConnect => self.before_connect(),
            ConnEvent::Established => {
                if let Some(p) = self.resume.as_mut() {
                    p.established(now);
                }
                if self.role == Role::Receiver && self.plan.recv == RecvPlan::Measuring {
                    self.window = MEASURE_WINDOW;
                    self.out
                        .push(Action::SetRcvBuf(linux::rcvbuf_value_for_window(
                            MEASURE_WINDOW,
                        )));
                    self.out.push(Action::SetWindowClamp(Bytes(MEASURE_WINDOW)));
                }
            }
            ConnEvent::UserSetBuffer | ConnEvent::Closed => {
                self.cfg.share.close(self.stream_index);
                self.stopped = true;
            }
        }
    }

    fn handle_snapshot(&mut self, now: Time, snapshot: &TcpSnapshot) {
        if self.stopped {
            return;
        }
        match self.role {
            Role::Sender => self.on_sender_snapshot(now, snapshot),
            Role::Receiver if self.plan.recv == RecvPlan::Measuring && self.drs.is_none() => {
                self.measure_window(now, snapshot)
            }
            Role::Receiver => {
                self.settled_receiver_snapshot(now, snapshot);
                if let Some(d) = self.drs.as_mut() {
                    d.handle_snapshot(now, snapshot);
                }
            }
        }
    }

    fn poll_action(&mut self) -> Option<Action> {
        self.out
            .pop()
            .or_else(|| self.drs.as_mut().and_then(|d| d.poll_action()))
    }

    fn handle_hint(&mut self, _now: Time, hint: &PathHint, streams: u32) {
        if self.stopped {
            return;
        }
        if let Some(a) = self
            .resume
            .as_mut()
            .and_then(|p| p.lift(LiftReason::NewHint))
        {
            self.out.push(a);
        }
        self.settle(hint, streams);
    }

    fn poll_interval(&self) -> Option<Duration> {
        if self.stopped {
            return None;
        }
        match self.role {
            Role::Sender => Some(interval_from_rtt(self.srtt, 2)),
            Role::Receiver if self.plan.recv == RecvPlan::Measuring && self.drs.is_none() => {
                Some(interval_from_rtt(self.srtt, 2))
            }
            Role::Receiver => self.drs.as_ref().and_then(|d| d.poll_interval()),
        }
    }
}

/// What one receiver reaches as kernel autotuning would let it: `rmem_max` through
/// `SO_RCVBUF`; with `SO_RCVBUFFORCE`, `tcp_rmem[2]` (half of it in `setsockopt` units).
fn kernel_recv_reach(limits: &HostLimits) -> Bytes {
    if limits.can_force {
        Bytes(limits.tcp_rmem[2].0 / 2).max(limits.rmem_max)
    } else {
        limits.rmem_max
    }
}

/// The RTT a measuring stream's windows must cover: the path's minimum as the transfer
/// knows it (`min`: the handshake's, or the estimator's), or the lowest this stream has
/// seen itself (`own`) where that is longer, up to twice `min`. A queue that another flow
/// keeps standing is in every RTT the stream sees, from its first packets on, and a window
/// sized from the shorter RTT holds a rate only as long as nothing else queues: beside
/// iperf3's BBR flows at 25 ms (RTTs of 42-50 ms from a stream's start), a window of 1.5 x
/// rate x 25 ms sustains 0.8 x the rate, and a measuring end that sizes from what arrives
/// shrinks its own share round after round. The stream's own queue (slow start's overshoot)
/// comes after its first samples and does not raise its minimum: alone on a path, nothing
/// changes.
fn covered_rtt(min: Duration, own: Option<Duration>) -> Duration {
    own.map_or(min, |o| o.clamp(min, min * 2))
}
