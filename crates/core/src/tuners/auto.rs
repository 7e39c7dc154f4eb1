//! `auto`: tcptune's own tuner. It takes from each technique what works on today's Linux and
//! decides early, because at long RTTs the paper's transfer (128 MiB, about a second at
//! line rate) is mostly slow start.
//!
//! # Design
//!
//! **What it knows before connecting.** The engine measures the RTT on the control
//! connection and, because [`TuneMode::needs_rate_probe`](crate::TuneMode::needs_rate_probe)
//! is true for `auto`, finds the path's rate: from the path database when a fresh entry for
//! this peer and RTT exists (Enable's idea: measure once, reuse), else by a short
//! multi-stream probe that stops as soon as the aggregate delivery rate stops growing
//! ([`crate::fullpipe`]; NLANR's out-of-band measurement, made cheap). `hint.rtt x
//! hint.rate` is the BDP. Every stream, at both ends, computes the same [`AutoPlan`] from
//! it. Without a rate (`--no-probe` and no database entry) the tuner starts from Linux's
//! defaults and works in band only (below).
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
//! Nothing shrinks: the unsent reserve already bounds memory in use, and a shrinking buffer
//! would only throttle a stream the next time its window opens.
//!
//! # What it cannot fix
//!
//! A probe that underestimates the path (a path faster than the probe's sockets can carry:
//! the rate is then marked as a lower bound and the in-band rules take over), a receiver
//! whose every limit is below the window, or a transfer shorter than slow start. The probe
//! itself costs time on a path seen for the first time (about 17 RTTs at 100 ms: 1.7 s,
//! as long as the paper's whole transfer there); the report counts it separately. Below about 10 ms of RTT the
//! kernel's autotuning holds more than 2 x BDP (a few MiB): cheap in absolute terms, and
//! safer than buffers smaller than the scheduling latency.

use super::common::{interval_from_rtt, scale, Outbox};
use crate::estimate::PathEstimator;
use crate::linux;
use crate::snapshot::TcpSnapshot;
use crate::time::Time;
use crate::tuner::{Action, ConnEvent, HostLimits, Role, Tuner, TunerContext};
use crate::units::{format_duration, Bytes, Rate};
use std::time::Duration;

/// The receive window a right-sized receiver starts with, in multiples of its share.
const RECV_HEADROOM: f64 = 1.5;

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
            _ => None,
        };
        AutoTuner {
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
                SendPlan::Explicit(_) => Some(plan.lowat),
                SendPlan::Kernel => None,
            },
            asks_left: match (ctx.stream_index, plan.extra_streams > 0, plan.trusted()) {
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
            plan,
            est,
            hint_rate: ctx.hint.rate,
            last: None,
            evidence: None,
            srtt: ctx.hint.rtt,
            stopped: false,
            out: Outbox::default(),
        }
    }
}

/// How the send buffer is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendPlan {
    /// Leave Linux's send autotuning in charge.
    Kernel,
    /// `SO_SNDBUF` with this value (plus `TCP_NOTSENT_LOWAT`).
    Explicit(Bytes),
}

/// How the receive buffer is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvPlan {
    /// Leave Linux's receive autotuning in charge.
    Kernel,
    /// `SO_RCVBUF` with this value before connecting, never changed.
    Fixed(Bytes),
    /// Right-sized: `SO_RCVBUF` = `max_buffer` before connecting (so the window scale can
    /// reach it), then buffer and window clamp at `window` once connected, grown in band
    /// as Dynamic Right-Sizing does (1.2 x the largest per-RTT estimate).
    Sized {
        /// The window advertised from the start.
        window: Bytes,
        /// The largest buffer it may grow to (and the `SO_RCVBUF` before connecting).
        max_buffer: Bytes,
    },
}

/// What `auto` decides from the hint before connecting. Every stream of a transfer computes
/// the same plan.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoPlan {
    /// Bandwidth-delay product from the hint.
    pub bdp: Option<Bytes>,
    /// The BDP from the hint is about what one socket holds (60-100% of its payload): a
    /// one-stream probe may have been limited by its own socket, so the BDP may be a lower
    /// bound. Buffers may then grow past the 2 x BDP budget (on evidence only) and stream 0
    /// may ask for streams in band if the plan did not.
    pub bdp_lower_bound: bool,
    /// Streams the transfer should have in all.
    pub streams_total: u32,
    /// Streams stream 0 asks for (beyond those the transfer has).
    pub extra_streams: u32,
    /// This stream's share of the BDP.
    pub share: Option<Bytes>,
    /// Unsent-data reserve per stream (`TCP_NOTSENT_LOWAT` when sizing explicitly).
    pub lowat: Bytes,
    /// Send-buffer handling (meaningful at the sender).
    pub send: SendPlan,
    /// Receive-buffer handling (meaningful at the receiver).
    pub recv: RecvPlan,
    /// Why more streams are needed, when they are.
    pub reason: Option<String>,
}

impl AutoPlan {
    /// Whether the plan rests on a BDP that is not a lower bound.
    pub fn trusted(&self) -> bool {
        self.bdp.is_some() && !self.bdp_lower_bound
    }

    /// The plan for a stream with this context.
    pub fn compute(cfg: &AutoConfig, ctx: &TunerContext) -> AutoPlan {
        let own = &ctx.limits;
        let peer = cfg.peer_limits.as_ref().unwrap_or(own);
        let (send_limits, recv_limits) = match ctx.role {
            Role::Sender => (own, peer),
            Role::Receiver => (peer, own),
        };
        let n0 = ctx.streams.max(1);
        let unsized_recv = if recv_limits.moderate_rcvbuf {
            RecvPlan::Kernel
        } else {
            RecvPlan::Fixed(recv_limits.rmem_max)
        };
        let (Some(rtt), Some(rate)) = (ctx.hint.rtt, ctx.hint.rate) else {
            return AutoPlan {
                bdp: None,
                bdp_lower_bound: false,
                streams_total: n0,
                extra_streams: 0,
                share: None,
                lowat: cfg.min_lowat,
                send: SendPlan::Kernel,
                recv: unsized_recv,
                reason: None,
            };
        };
        let bdp = rate.bdp(rtt).0.max(1);
        let per_stream_rate = |n: u32| rate.bytes_per_sec() as f64 / f64::from(n.max(1));
        // The window one stream advertises: 1.5 x its share of the BDP, and at least its
        // share plus what arrives while the reader is not scheduled (short paths).
        let window_for = |n: u32| -> u64 {
            let share = bdp / u64::from(n.max(1));
            let reader = (per_stream_rate(n) * cfg.reader_time.as_secs_f64()) as u64;
            scale(share, RECV_HEADROOM).max(share + reader)
        };
        // The largest window the receiver may grow to: the sender's headroom over the
        // share, or the starting window where that is larger (short paths).
        let max_window_for =
            |n: u32| -> u64 { scale(bdp / u64::from(n.max(1)), cfg.headroom).max(window_for(n)) };
        // Unsent data kept per stream: ~6 ms at the stream's rate (128 KiB..4 MiB), but no
        // more than half of what may be in flight (on short paths the reserve would otherwise
        // be most of the memory; a writer with a low-water mark is woken when half of it has
        // drained, so half the window still keeps the socket fed).
        let lowat_for = |n: u32| -> u64 {
            let t = (per_stream_rate(n) * cfg.lowat_time.as_secs_f64()) as u64;
            t.clamp(cfg.min_lowat.0, cfg.max_lowat.0)
                .min(max_window_for(n) / 2)
        };
        let needed_bdp = scale(bdp, cfg.stream_headroom);
        let send_cap = linux::max_send_payload(send_limits);
        // A writer blocked on a full buffer wakes only when a third of it is free (and,
        // with a low-water mark, when less than half of that is unsent): what a socket keeps
        // in flight without stalling is two thirds of its payload less half the reserve.
        let usable = |cap: u64, n: u32| -> u64 { (cap * 2 / 3).saturating_sub(lowat_for(n) / 2) };
        // The receiver locks its buffer to stay within the memory budget (autotuning would
        // grow it to tcp_rmem[2]), so what counts is the window SO_RCVBUF can give.
        let recv_cap = (!recv_limits.can_force).then(|| {
            linux::rcvbuf_window(linux::rcvbuf_after_setsockopt(
                recv_limits.rmem_max,
                recv_limits,
            ))
        });
        let bdp_lower_bound = ctx.hint.rate_is_lower_bound;
        let n_send = |n: u32| -> u64 {
            match send_cap {
                None => 1,
                Some(cap) => needed_bdp.div_ceil(usable(cap, n).max(1)),
            }
        };
        let n_recv = recv_cap.map_or(1, |cap| needed_bdp.div_ceil(cap.max(1)));
        let cap_streams = u64::from(cfg.max_streams.max(n0));
        let mut n = u64::from(n0).max(n_recv).max(n_send(n0));
        n = n.max(n_send(n as u32)).min(cap_streams);
        let n = n as u32;
        let extra = n - n0.min(n);
        let share = bdp / u64::from(n);
        let lowat = lowat_for(n);

        // The sender holds what the receiver may let into flight plus the unsent reserve.
        let need_payload = max_window_for(n) + lowat;
        let v = linux::sndbuf_value_for_payload(need_payload);
        let send = SendPlan::Explicit(if send_limits.can_force {
            v
        } else {
            v.min(send_limits.wmem_max)
        });

        // The window starts at `window_for` and may grow, by DRS, to `max_window_for`:
        // within the 2 x BDP budget on long paths. With a rate that is only a lower bound,
        // to rmem_max.
        let budget = linux::rcvbuf_value_for_window(max_window_for(n));
        let max_buffer = match (recv_limits.can_force, bdp_lower_bound) {
            (true, _) => budget,
            (false, true) => recv_limits.rmem_max,
            (false, false) => budget.min(recv_limits.rmem_max),
        };
        let max_window =
            linux::rcvbuf_window(linux::rcvbuf_after_setsockopt(max_buffer, recv_limits));
        let window = window_for(n).min(max_window);
        let recv = RecvPlan::Sized {
            window: Bytes(window),
            max_buffer,
        };

        let reason = (extra > 0).then(|| {
            let limit = match (send_cap, recv_cap) {
                (Some(s), Some(r)) if r < usable(s, n) => format!(
                    "one socket can advertise about {} of receive window within the memory budget \
                     (rmem_max {})",
                    Bytes(r),
                    recv_limits.rmem_max
                ),
                (Some(s), _) => format!(
                    "one socket keeps at most about {} in flight (wmem_max {}, tcp_wmem max {})",
                    Bytes(usable(s, n)),
                    send_limits.wmem_max,
                    send_limits.tcp_wmem[2]
                ),
                (None, Some(r)) => format!(
                    "one socket can advertise about {} of receive window (rmem_max {})",
                    Bytes(r),
                    recv_limits.rmem_max
                ),
                (None, None) => "the per-socket maximum is too small".to_string(),
            };
            let bound = if bdp_lower_bound {
                " (at least: the rate is a lower bound, the path may be faster)"
            } else {
                ""
            };
            format!(
                "{limit}, but 1.25 x the bandwidth-delay product is {}{bound} ({} x {}): {} streams in all, {} more",
                Bytes(needed_bdp),
                rate,
                format_duration(rtt),
                n,
                extra
            )
        });

        AutoPlan {
            bdp: Some(Bytes(bdp)),
            bdp_lower_bound,
            streams_total: n,
            extra_streams: extra,
            share: Some(Bytes(share)),
            lowat: Bytes(lowat),
            send,
            recv,
            reason,
        }
    }
}

/// tcptune's own tuner (see the module documentation for the design).
#[derive(Debug)]
pub struct AutoTuner {
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
    srtt: Option<Duration>,
    stopped: bool,
    out: Outbox,
}

impl AutoTuner {
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
                if let SendPlan::Explicit(v) = self.send {
                    self.out.push(Action::SetSndBuf(v));
                    if let Some(l) = self.lowat {
                        self.out.push(Action::SetNotsentLowat(l));
                    }
                }
            }
            Role::Receiver => {
                if let RecvPlan::Fixed(v) = self.plan.recv {
                    self.out.push(Action::SetRcvBuf(v));
                }
            }
        }
    }

    fn lowat_from_estimate(&self) -> Bytes {
        // The estimator holds this stream's own rate.
        let rate = self.est.estimate().rate.unwrap_or(Rate(0));
        let t = (rate.bytes_per_sec() as f64 * self.lowat_time.as_secs_f64()) as u64;
        Bytes(t.clamp(self.min_lowat.0, self.max_lowat.0))
    }

    fn on_sender_snapshot(&mut self, now: Time, s: &TcpSnapshot) {
        self.est.observe(now, s);
        let estimate = self.est.estimate();
        self.srtt = estimate.srtt.or(self.srtt);
        self.slow_start_trigger(now, s);
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
            ConnEvent::Established => {}
            ConnEvent::UserSetBuffer | ConnEvent::Closed => self.stopped = true,
        }
    }

    fn handle_snapshot(&mut self, now: Time, snapshot: &TcpSnapshot) {
        if self.stopped {
            return;
        }
        match self.role {
            Role::Sender => self.on_sender_snapshot(now, snapshot),
            Role::Receiver => {
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

    fn poll_interval(&self) -> Option<Duration> {
        if self.stopped {
            return None;
        }
        match self.role {
            Role::Sender => Some(interval_from_rtt(self.srtt, 2)),
            Role::Receiver => self.drs.as_ref().and_then(|d| d.poll_interval()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuner::PathHint;

    fn ctx(role: Role, rtt_ms: f64, rate: Option<Rate>, index: u32, streams: u32) -> TunerContext {
        TunerContext {
            role,
            hint: PathHint {
                rtt: Some(Duration::from_secs_f64(rtt_ms / 1000.0)),
                rate,
                ..Default::default()
            },
            stream_index: index,
            streams,
            ..TunerContext::for_tests(role)
        }
    }

    fn sender(rtt_ms: f64, rate: Option<Rate>) -> AutoTuner {
        AutoConfig::default().build(ctx(Role::Sender, rtt_ms, rate, 0, 1))
    }

    fn actions(t: &mut AutoTuner) -> Vec<Action> {
        std::iter::from_fn(|| t.poll_action()).collect()
    }

    /// A sender sample: RTT, kernel send buffer, memory queued, cumulative
    /// send-buffer-limited time, delivery rate.
    fn snap(rtt_ms: u32, sndbuf: u32, queued: u32, limited_us: u64, rate: Rate) -> TcpSnapshot {
        TcpSnapshot {
            rtt_us: rtt_ms * 1000,
            snd_mss_bytes: 1448,
            snd_cwnd_segs: 10_000,
            unacked_segs: queued / 1448,
            sndbuf_bytes: Some(sndbuf),
            wmem_queued_bytes: Some(queued),
            sndbuf_limited_us: Some(limited_us),
            delivery_rate_bytes_per_sec: Some(rate.bytes_per_sec()),
            delivery_rate_app_limited: true,
            ..TcpSnapshot::empty()
        }
    }

    /// Feed `n` samples `step_ms` apart, starting at `t0`; `f(k)` makes sample `k`.
    fn feed(
        t: &mut AutoTuner,
        t0: Time,
        step_ms: u64,
        n: u64,
        f: impl Fn(u64) -> TcpSnapshot,
    ) -> Time {
        let mut now = t0;
        for k in 0..n {
            t.handle_snapshot(now, &f(k));
            now += Duration::from_millis(step_ms);
        }
        now
    }

    #[test]
    fn streams_needed_per_path_on_a_default_host() {
        let cfg = AutoConfig::default();
        for (rtt, want) in [(0.5, 1), (25.0, 1), (50.0, 2), (100.0, 4), (200.0, 8)] {
            let plan = AutoPlan::compute(&cfg, &ctx(Role::Sender, rtt, Some(Rate::gbit(1)), 0, 1));
            assert_eq!(plan.streams_total, want, "rtt {rtt} ms");
        }
    }

    #[test]
    fn large_share_gets_an_explicit_buffer_under_twice_the_bdp() {
        let mut t = sender(25.0, Some(Rate::gbit(1)));
        let bdp = 3_125_000u64;
        let SendPlan::Explicit(v) = t.plan().send else {
            panic!("expected explicit sizing: {:?}", t.plan());
        };
        let kernel = linux::sndbuf_after_setsockopt(v, &HostLimits::linux_defaults());
        // Within the 2 x BDP budget in setsockopt units (the kernel holds twice the value).
        assert!(v.0 <= 2 * bdp, "SO_SNDBUF {v} over 2 x BDP");
        let lowat = t.plan().lowat;
        assert_eq!(lowat, Bytes(750_000), "6 ms at 1 Gbit/s");
        assert!(linux::sndbuf_payload(kernel) - lowat.0 >= bdp * 7 / 4 - 1);
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(
            actions(&mut t),
            vec![Action::SetSndBuf(v), Action::SetNotsentLowat(lowat)]
        );
    }

    #[test]
    fn stream_zero_asks_for_streams_before_connect_when_one_socket_cannot_hold_the_bdp() {
        let mut s0 =
            AutoConfig::default().build(ctx(Role::Sender, 200.0, Some(Rate::gbit(1)), 0, 1));
        s0.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        let a = actions(&mut s0);
        let Some(Action::OpenStreams { count, reason }) = a.first() else {
            panic!("expected OpenStreams first: {a:?}");
        };
        assert_eq!(*count, 7);
        assert!(reason.contains("rmem_max 4MiB"), "{reason}");
        assert!(reason.contains("8 streams in all"), "{reason}");
        // Each stream sizes itself for an eighth of the BDP: within wmem_max, and the
        // kernel buffers of all eight hold under 2 x BDP.
        let share = 25_000_000 / 8;
        assert!(
            matches!(a[1], Action::SetSndBuf(v) if v.0 > share / 2 && v < Bytes::mib(4) && 8 * 2 * v.0 <= 50_000_000),
            "{a:?}"
        );

        // The streams opened on request never ask again.
        let mut s3 =
            AutoConfig::default().build(ctx(Role::Sender, 200.0, Some(Rate::gbit(1)), 3, 7));
        s3.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert!(!actions(&mut s3)
            .iter()
            .any(|a| matches!(a, Action::OpenStreams { .. })));
    }

    #[test]
    fn streams_the_user_asked_for_count_toward_the_total() {
        let plan = AutoPlan::compute(
            &AutoConfig::default(),
            &ctx(Role::Sender, 200.0, Some(Rate::gbit(1)), 0, 4),
        );
        assert_eq!((plan.streams_total, plan.extra_streams), (8, 4));
        let plan = AutoPlan::compute(
            &AutoConfig::default(),
            &ctx(Role::Sender, 200.0, Some(Rate::gbit(1)), 0, 8),
        );
        assert_eq!((plan.streams_total, plan.extra_streams), (8, 0));
        assert_eq!(plan.reason, None);
    }

    #[test]
    fn raised_limits_hold_a_200ms_bdp_in_one_stream() {
        let raised = crate::sim::raised_limits();
        let c = TunerContext {
            limits: raised.clone(),
            ..ctx(Role::Sender, 200.0, Some(Rate::gbit(1)), 0, 1)
        };
        let plan = AutoPlan::compute(&AutoConfig::default(), &c);
        assert_eq!(plan.streams_total, 1);
        assert!(matches!(plan.send, SendPlan::Explicit(v) if v > Bytes::mib(20)));
    }

    #[test]
    fn a_small_peer_receive_limit_adds_streams() {
        let small = HostLimits {
            rmem_max: Bytes::mib(1),
            ..HostLimits::linux_defaults()
        };
        let plan = AutoPlan::compute(
            &AutoConfig::default().peer_limits(Some(small)),
            &ctx(Role::Sender, 50.0, Some(Rate::gbit(1)), 0, 1),
        );
        // 1.25 x 6.25 MB over about 1 MiB of window per receiving socket.
        assert_eq!(plan.streams_total, 8);
        assert!(plan.reason.expect("reason").contains("receive window"));
    }

    #[test]
    fn receiver_right_sizes_a_locked_buffer_for_its_share() {
        let mut r =
            AutoConfig::default().build(ctx(Role::Receiver, 100.0, Some(Rate::gbit(1)), 0, 8));
        let share = 12_500_000 / 8;
        let window = Bytes(share * 3 / 2);
        let max = Bytes(share * 7 / 4);
        assert_eq!(
            r.plan().recv,
            RecvPlan::Sized {
                window,
                max_buffer: max
            }
        );
        // The maximum before listening, so the window scale can reach it...
        r.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(actions(&mut r), vec![Action::SetRcvBuf(max)]);
        // ... then 1.5 x the share, buffer and clamp (in setsockopt units 1.5 x BDP in all).
        r.handle_event(Time::ZERO, ConnEvent::Established);
        assert_eq!(
            actions(&mut r),
            vec![Action::SetRcvBuf(window), Action::SetWindowClamp(window)]
        );
        assert!(r.poll_interval().is_some());
        // A sender delivering more than the window per RTT gets a larger one (DRS, 1.2 x),
        // up to the sender's headroom.
        let rx = |b: u64| TcpSnapshot {
            bytes_received: Some(b),
            rcv_rtt_us: 100_000,
            ..TcpSnapshot::empty()
        };
        r.handle_snapshot(Time::from_millis(100), &rx(0));
        r.handle_snapshot(Time::from_millis(200), &rx(4_000_000));
        assert_eq!(actions(&mut r).last(), Some(&Action::SetWindowClamp(max)));
    }

    #[test]
    fn short_path_sizes_both_ends_for_the_share_plus_reader_latency() {
        // 0.5 ms at 1 Gbit/s: BDP 62.5 kB; the window holds it plus 0.4 ms of arrivals.
        let mut r =
            AutoConfig::default().build(ctx(Role::Receiver, 0.5, Some(Rate::gbit(1)), 0, 1));
        let window = Bytes(62_500 + 50_000);
        assert_eq!(
            r.plan().recv,
            RecvPlan::Sized {
                window,
                max_buffer: window
            }
        );
        r.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(actions(&mut r), vec![Action::SetRcvBuf(window)]);
        // The sender holds that window plus an unsent reserve of half of it: within 2 x BDP
        // in setsockopt units at each end.
        let mut t = sender(0.5, Some(Rate::gbit(1)));
        let SendPlan::Explicit(v) = t.plan().send else {
            panic!("explicit sizing expected: {:?}", t.plan());
        };
        let lowat = Bytes(window.0 / 2);
        assert_eq!(t.plan().lowat, lowat);
        assert_eq!(v, linux::sndbuf_value_for_payload(window.0 + lowat.0));
        assert!(v.0 <= 2 * 62_500, "{v}");
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(
            actions(&mut t),
            vec![Action::SetSndBuf(v), Action::SetNotsentLowat(lowat)]
        );
        // Four streams share the same total.
        let p4 = AutoPlan::compute(
            &AutoConfig::default(),
            &ctx(Role::Receiver, 0.5, Some(Rate::gbit(1)), 0, 4),
        );
        assert!(matches!(p4.recv, RecvPlan::Sized { window, .. } if window.0 == 112_500 / 4));
    }

    #[test]
    fn a_rate_marked_as_a_lower_bound_lets_the_receiver_grow_to_its_maximum() {
        let lb = TunerContext {
            hint: PathHint {
                rtt: Some(Duration::from_millis(200)),
                rate: Some(Rate::mbit(250)),
                rate_is_lower_bound: true,
            },
            ..ctx(Role::Receiver, 200.0, None, 0, 1)
        };
        let plan = AutoPlan::compute(&AutoConfig::default(), &lb);
        assert!(plan.bdp_lower_bound);
        assert!(!plan.trusted());
        assert!(plan.reason.expect("reason").contains("may be faster"));
        assert!(
            matches!(plan.recv, RecvPlan::Sized { max_buffer, .. } if max_buffer == Bytes::mib(4))
        );
        let plan = AutoPlan::compute(
            &AutoConfig::default(),
            &ctx(Role::Sender, 25.0, Some(Rate::gbit(1)), 0, 1),
        );
        assert!(!plan.bdp_lower_bound);
        assert!(plan.trusted());
    }

    #[test]
    fn without_a_rate_stream_zero_asks_for_streams_while_still_in_slow_start() {
        let mut t = sender(200.0, None);
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert!(actions(&mut t).is_empty());
        let ss = |cwnd_segs: u32| TcpSnapshot {
            rtt_us: 200_000,
            snd_mss_bytes: 1448,
            snd_cwnd_segs: cwnd_segs,
            snd_ssthresh_segs: 0x7fff_ffff,
            ..TcpSnapshot::empty()
        };
        // 1 MB of window: far from what one socket holds (about 5 MB in flight).
        t.handle_snapshot(Time::from_millis(200), &ss(700));
        assert!(actions(&mut t).is_empty());
        // 2.9 MB: more than half, but the path may still fit one socket.
        t.handle_snapshot(Time::from_millis(400), &ss(2000));
        assert!(actions(&mut t).is_empty());
        // 3.9 MB, still in slow start, no queue: it will hit its buffer within a round,
        // if half an RTT later there is still no queue.
        t.handle_snapshot(Time::from_millis(600), &ss(2700));
        assert!(actions(&mut t).is_empty());
        t.handle_snapshot(Time::from_millis(700), &ss(3000));
        let a = actions(&mut t);
        assert!(
            matches!(&a[..], [Action::OpenStreams { count: 3, reason }] if reason.contains("slow start")),
            "{a:?}"
        );
        // Once is enough.
        t.handle_snapshot(Time::from_millis(800), &ss(4000));
        assert!(actions(&mut t).is_empty());
        // After a loss (ssthresh set), the trigger never fires.
        let mut u = sender(200.0, None);
        u.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        let mut s = ss(4000);
        s.snd_ssthresh_segs = 3000;
        u.handle_snapshot(Time::from_millis(200), &s);
        assert!(actions(&mut u).is_empty());
        // With a trustworthy rate the plan counted the streams: no trigger either.
        let mut w = sender(200.0, Some(Rate::gbit(1)));
        w.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        actions(&mut w);
        w.handle_snapshot(Time::from_millis(200), &ss(4000));
        assert!(actions(&mut w).is_empty());
    }

    #[test]
    fn without_a_rate_starts_on_autotuning_and_takes_over_when_it_caps_in_slow_start() {
        let mut t = sender(100.0, None);
        assert_eq!(t.plan().send, SendPlan::Kernel);
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert!(actions(&mut t).is_empty());
        // Autotuning at its 4 MiB cap, buffer full, starved half the time, no queue.
        let cap = 4 << 20;
        let now = feed(&mut t, Time::ZERO, 50, 4, |k| {
            snap(100, cap, cap, k * 25_000, Rate::mbit(300))
        });
        assert!(
            actions(&mut t).is_empty(),
            "one RTT of evidence is not enough"
        );
        feed(&mut t, now, 50, 2, |k| {
            snap(100, cap, cap, (4 + k) * 25_000, Rate::mbit(300))
        });
        let a = actions(&mut t);
        assert_eq!(a[0], Action::SetSndBuf(Bytes(3 << 20)));
        assert!(matches!(a[1], Action::SetNotsentLowat(_)));
        assert!(matches!(t.send(), SendPlan::Explicit(_)));
    }

    #[test]
    fn grows_the_buffer_when_the_rtt_grows_under_it() {
        let mut t = sender(25.0, Some(Rate::gbit(1)));
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        let SendPlan::Explicit(v) = t.send() else {
            panic!("explicit expected");
        };
        actions(&mut t);
        let kernel = (2 * v.0) as u32;
        // Path RTT jumps from 25 to 60 ms: the same buffer now delivers less than half.
        let now = feed(&mut t, Time::ZERO, 12, 2, |_| {
            snap(25, kernel, kernel / 2, 0, Rate::gbit(1))
        });
        let now = feed(&mut t, now, 30, 8, |k| {
            snap(60, kernel, kernel, (k + 1) * 20_000, Rate::mbit(400))
        });
        // Not at once: the buffer already exceeds the budget of the BDP measured so far
        // (1 Gbit/s x 25 ms, in setsockopt units).
        assert!(v > Bytes(3_125_000));
        assert_eq!(actions(&mut t), vec![]);
        // Once the 25 ms minimum has aged out (10 s), the budget follows the new RTT.
        feed(&mut t, now, 30, 400, |k| {
            snap(60, kernel, kernel, (k + 9) * 20_000, Rate::mbit(400))
        });
        let want = Bytes(scale(v.0, 1.25)).min(Bytes::mib(4));
        assert_eq!(actions(&mut t), vec![Action::SetSndBuf(want)]);
    }

    #[test]
    fn a_building_queue_means_the_buffer_is_large_enough() {
        let mut t = sender(25.0, Some(Rate::gbit(1)));
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        actions(&mut t);
        let now = feed(&mut t, Time::ZERO, 12, 2, |_| {
            snap(25, 6_000_000, 3_000_000, 0, Rate::gbit(1))
        });
        // Limited by the buffer, but RTT 40% up and full delivery: the pipe is full.
        feed(&mut t, now, 17, 10, |k| {
            snap(35, 6_000_000, 6_000_000, (k + 1) * 10_000, Rate::gbit(1))
        });
        assert!(actions(&mut t).is_empty());
    }

    #[test]
    fn slow_start_overshoot_for_one_round_changes_nothing() {
        let mut t = sender(50.0, Some(Rate::gbit(1)));
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        actions(&mut t);
        // Limited and no queue yet for one RTT, then the queue shows.
        let now = feed(&mut t, Time::ZERO, 25, 3, |k| {
            snap(50, 8_000_000, 8_000_000, k * 20_000, Rate::mbit(500))
        });
        feed(&mut t, now, 25, 8, |k| {
            snap(70, 8_000_000, 8_000_000, (3 + k) * 20_000, Rate::gbit(1))
        });
        assert!(actions(&mut t).is_empty());
    }

    #[test]
    fn doubles_the_unsent_reserve_when_the_application_refills_too_late() {
        let mut t = sender(50.0, Some(Rate::gbit(1)));
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        actions(&mut t);
        let l = t.lowat().expect("lowat");
        // Starved half the time while the buffer is less than half full.
        feed(&mut t, Time::ZERO, 25, 8, |k| {
            snap(55, 8_000_000, 3_000_000, k * 12_500, Rate::mbit(700))
        });
        assert_eq!(
            actions(&mut t),
            vec![Action::SetNotsentLowat(Bytes(2 * l.0))]
        );
    }

    #[test]
    fn app_limited_or_cwnd_limited_sender_is_left_alone() {
        let mut t = sender(50.0, Some(Rate::gbit(1)));
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        actions(&mut t);
        // Never send-buffer-limited: application-limited, then a loss collapses cwnd.
        feed(&mut t, Time::ZERO, 25, 10, |_| {
            snap(50, 8_000_000, 100_000, 0, Rate::mbit(10))
        });
        feed(&mut t, Time::from_millis(250), 25, 10, |_| {
            let mut s = snap(60, 8_000_000, 7_000_000, 0, Rate::mbit(300));
            s.ca_state = 4;
            s.snd_cwnd_segs = 10;
            s
        });
        assert!(actions(&mut t).is_empty());
    }

    #[test]
    fn without_a_bdp_stream_zero_doubles_its_streams_at_the_maximum_at_most_twice() {
        let mut t = sender(200.0, None);
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        let full = 8 << 20;
        // Explicit at wmem_max after taking over from autotuning; still starved, no queue.
        t.send = SendPlan::Explicit(Bytes::mib(4));
        let mut asks = Vec::new();
        let mut now = Time::ZERO;
        for k in 0..60u64 {
            t.handle_snapshot(now, &snap(200, full, full, k * 50_000, Rate::mbit(250)));
            for a in actions(&mut t) {
                if matches!(a, Action::OpenStreams { .. }) {
                    asks.push((now, a));
                }
            }
            now += Duration::from_millis(100);
        }
        assert_eq!(asks.len(), 2, "{asks:?}");
        assert!(
            matches!(&asks[0].1, Action::OpenStreams { count: 1, reason } if reason.contains("doubling to 2"))
        );
        // Counted from the streams the tuner was built with: 1 + 3 = 4.
        assert!(
            matches!(&asks[1].1, Action::OpenStreams { count: 3, reason } if reason.contains("doubling to 4"))
        );
        // The second only after the first streams had 4 RTTs to connect and ramp up.
        assert!(asks[1].0.saturating_since(asks[0].0) >= Duration::from_millis(800));
    }

    #[test]
    fn with_a_measured_bdp_late_evidence_does_not_add_streams() {
        let mut t = sender(25.0, Some(Rate::gbit(1)));
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        actions(&mut t);
        t.send = SendPlan::Explicit(Bytes::mib(4));
        let full = 8 << 20;
        feed(&mut t, Time::ZERO, 12, 40, |k| {
            snap(25, full, full, k * 6_000, Rate::mbit(250))
        });
        assert!(!actions(&mut t)
            .iter()
            .any(|a| matches!(a, Action::OpenStreams { .. })));
    }

    #[test]
    fn user_set_buffer_stops_tuning() {
        let mut t = sender(25.0, Some(Rate::gbit(1)));
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        actions(&mut t);
        t.handle_event(Time::ZERO, ConnEvent::UserSetBuffer);
        feed(&mut t, Time::ZERO, 12, 20, |k| {
            snap(25, 1 << 20, 1 << 20, k * 6_000, Rate::mbit(100))
        });
        assert!(actions(&mut t).is_empty());
        assert_eq!(t.poll_interval(), None);
    }
}
