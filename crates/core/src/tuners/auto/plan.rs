//! What `auto` decides from what it knows before connecting: the [`AutoPlan`].

use super::{AutoConfig, RECV_HEADROOM};
use crate::linux;
use crate::tuner::{Role, TunerContext};
use crate::tuners::common::scale;
use crate::units::{format_duration, Bytes};
use std::time::Duration;

/// Paths at least this long are measured in band when their rate is not known (below it,
/// kernel autotuning is in charge: slow start is short and buffers are small).
pub const MEASURE_MIN_RTT: Duration = Duration::from_millis(5);
/// The window a measuring receiver starts with (Linux's initial window).
pub const MEASURE_WINDOW: u64 = 64 * 1024;
/// The send buffer a measuring stream starts with (`SO_SNDBUF` value): room for the first
/// rounds of slow start from Linux's initial window.
pub const MEASURE_START: Bytes = Bytes::kib(256);
/// The fixed part of the time the streams that stay need to take the path back from
/// streams that close ([`AutoPlan::retiring_pays`]).
pub(super) const TAKEOVER_BASE: Duration = Duration::from_millis(300);
/// Round trips the streams that stay need, on top of [`TAKEOVER_BASE`], to take the path
/// back from streams that close.
pub(super) const TAKEOVER_RTTS: f64 = 5.0;
/// Most of the rest of a transfer that closing the streams its plan does not need may cost
/// ([`AutoPlan::retiring_pays`]).
pub(super) const RETIRE_COST_SHARE: f64 = 0.05;
/// Round trips of a window over which delivery must hold steady before the streams the plan
/// does not need close ([`AutoPlan::steady_window`]).
pub(super) const STEADY_RTTS: u32 = 8;
/// Shortest such window.
pub(super) const STEADY_MIN: Duration = Duration::from_millis(500);
/// How far a window's delivery may differ from the one before and still be steady.
pub(super) const STEADY_BAND: f64 = 0.1;

/// How the send buffer is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendPlan {
    /// Leave Linux's send autotuning in charge.
    Kernel,
    /// `SO_SNDBUF` with this value (plus `TCP_NOTSENT_LOWAT`).
    Explicit(Bytes),
    /// The path's rate is being measured by the transfer itself: `SO_SNDBUF` starts at this
    /// value and follows what the stream delivers (twice its bytes per minimum RTT while
    /// slow start grows it, so that slow start is never held back; once the pipe is full,
    /// what the plan would hold for that delivery), until the measured rate arrives
    /// ([`crate::Tuner::handle_hint`]) and the plan is made.
    Measuring(Bytes),
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
    /// The rate is being measured: Dynamic Right-Sizing with its factor 2 (the window never
    /// holds slow start back), from 64 KiB up to the host's maximum, until the measured rate
    /// arrives and the window is sized for it.
    Measuring,
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
    /// Whether streams opened now, with `remaining` bytes of the transfer still to deliver
    /// at `rate` over a path of `rtt`, would carry any of it, for a plan whose streams each
    /// hold `share` (segments of `mss`). A new stream carries its share only after a
    /// handshake and a slow start from Linux's initial window of 10 segments (one round,
    /// then one per doubling); a transfer that ends sooner is only slowed down by handing it
    /// messages, and each of its buffers adds to the memory the transfer holds. Unknown
    /// `remaining` (a transfer of a duration): they help.
    pub fn late_streams_help(
        remaining: Option<u64>,
        rate: crate::units::Rate,
        rtt: Duration,
        share: u64,
        mss: u64,
    ) -> bool {
        let Some(remaining) = remaining else {
            return true;
        };
        let initial = 10 * mss.max(1);
        let doublings = (share.max(initial) as f64 / initial as f64).log2().ceil();
        let ramp = rtt.as_secs_f64() * (1.0 + doublings);
        let left = remaining as f64 / (rate.bytes_per_sec().max(1) as f64);
        left > ramp
    }

    /// Whether closing the streams beyond `keep` of the `open` ones (those the in-band
    /// measurement opened and the plan does not need) costs at most
    /// [`RETIRE_COST_SHARE`] of the rest of a transfer that lasts `left` more (`None`: no
    /// end is known, it pays). The streams that stay take the path back in about
    /// [`TAKEOVER_BASE`] plus [`TAKEOVER_RTTS`] round trips (measured across the emulator
    /// with iperf3, BBR and CUBIC, 25 and 100 ms: 0.3-0.8 s to 90% of the link,
    /// `docs/bench/takeover-2026-12-03`), over which, ramping up, they miss about half of
    /// what the leaving streams carried. A short transfer keeps its streams (a lab run of
    /// 128 MiB would lose a fifth of its time at 25 ms); a long one, or one of a duration
    /// past a few seconds, runs the rest with the streams its plan needs: fewer buffers,
    /// and no more flows than the plan against other traffic.
    ///
    /// Not when the rate was measured behind a queue that predates the transfer (`beside`:
    /// [`AutoPlan::measured_beside_another_flow`], which the client session decides once
    /// when the measurement ends, `Measured::lower_bound`). The rate is then what the
    /// streams got beside another flow, and their share of it leaves with them:
    /// a latecomer beside `iperf3 -P 4` at 25 ms (handshake 48 ms, its 8 measuring
    /// streams from 31 ms, up to 6,000 retransmissions per stream) that kept the 4 asked got
    /// 135-357 Mbit/s against iperf3's 620-840 (six runs), where it had got 390-510 keeping
    /// them all (three runs).
    pub fn retiring_pays(
        left: Option<Duration>,
        rtt: Duration,
        beside: bool,
        open: u32,
        keep: u32,
    ) -> bool {
        if keep == 0 || keep >= open || beside {
            return false;
        }
        left.is_none_or(|left| left >= Self::retiring_needs(rtt, open, keep))
    }

    /// Whether a rate measured in band is only what the transfer got beside another flow,
    /// so a lower bound on the path's: the handshake's RTT (`handshake`, taken before any
    /// stream sent) and the measuring streams' own lowest (`own_min`, the kernel's
    /// `tcpi_min_rtt`, taken in their first rounds, when their windows were far too small to
    /// build a queue) differ as [`super::meter::predating_queue`] tells: a queue that another
    /// flow kept before the transfer's first packet, or one the handshake saw that later
    /// drained. The client marks such a rate as a lower bound in the hint it sends both
    /// ends (so the server's receivers, whose receive-side RTT is too coarse to see a queue
    /// of a few milliseconds, settle as its senders do) and in the path database (the next
    /// transfer must not take it for the path's rate).
    ///
    /// Beside one `iperf3` flow at 25 ms (BBR, 1 Gbit/s), the client's senders saw it (a
    /// handshake of 28.2-28.3 ms against their 25.0 ms) but the server's receivers did not:
    /// each right-sized to 1.5 x its share of the 262 Mbit/s measured (257 KB), which
    /// behind the other flow's 13 ms queue carried only what it had measured, and the six
    /// streams stayed at 260-290 Mbit/s against iperf3's 680-710 for the whole overlap.
    pub fn measured_beside_another_flow(
        handshake: Option<Duration>,
        own_min: Option<Duration>,
    ) -> bool {
        super::meter::predating_queue(handshake, own_min)
    }

    /// The least rest of a transfer for which closing the streams beyond `keep` of `open`
    /// pays ([`AutoPlan::retiring_pays`]): the take-over's cost over [`RETIRE_COST_SHARE`].
    pub fn retiring_needs(rtt: Duration, open: u32, keep: u32) -> Duration {
        let open = open.max(1);
        let keep = keep.min(open);
        let takeover = TAKEOVER_BASE.as_secs_f64() + TAKEOVER_RTTS * rtt.as_secs_f64();
        let leaving = f64::from(open - keep) / f64::from(open);
        Duration::from_secs_f64(takeover * leaving / 2.0 / RETIRE_COST_SHARE)
    }

    /// How long the transfer's delivery is watched at a time before the streams the plan
    /// does not need close ([`STEADY_RTTS`] round trips, at least [`STEADY_MIN`]): they close
    /// once a window delivers within [`STEADY_BAND`] of the window before it (the first
    /// window: of the rate measured). A plateau the measurement took while another flow's
    /// standing queue hid from both RTTs (a latecomer beside `iperf3 -P 4` at 25 ms: 94
    /// Mbit/s measured, then 168, 191, 226, 275 and 300 in the seconds that followed) goes on
    /// growing, and its streams stay; a path alone delivers the measured rate at once.
    pub fn steady_window(rtt: Duration) -> Duration {
        (rtt * STEADY_RTTS).max(STEADY_MIN)
    }

    /// Whether a window's `rate` is within [`STEADY_BAND`] of the one before (`before`).
    pub fn steady(before: crate::units::Rate, rate: crate::units::Rate) -> bool {
        let (b, r) = (before.0 as f64, rate.0 as f64);
        b > 0.0 && (r - b).abs() <= STEADY_BAND * b
    }

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
            // No rate: on a long path the transfer measures it in band (the buffers follow
            // what it delivers); on a short one kernel autotuning is in charge.
            let measure = cfg.measure
                && ctx.hint.rate_in_band
                && ctx.hint.rtt.is_some_and(|r| r >= MEASURE_MIN_RTT);
            let (send, recv) = if measure {
                (
                    SendPlan::Measuring(if send_limits.can_force {
                        MEASURE_START
                    } else {
                        MEASURE_START.min(send_limits.wmem_max)
                    }),
                    RecvPlan::Measuring,
                )
            } else {
                (SendPlan::Kernel, unsized_recv)
            };
            return AutoPlan {
                bdp: None,
                bdp_lower_bound: false,
                streams_total: n0,
                extra_streams: 0,
                share: None,
                lowat: cfg.min_lowat,
                send,
                recv,
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
