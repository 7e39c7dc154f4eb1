//! The pre-transfer bandwidth probe's decisions, without I/O: how many streams to probe
//! with, how long a round is and how long the probe may last ([`ProbePlan`]), and when the
//! pipe is full ([`FullPipe`]: BBR's full-pipe estimator, fed with the aggregate bytes the
//! probe streams delivered).
//!
//! # Why several streams
//!
//! One socket cannot keep more in flight than its send buffer holds (about 7 MB on a
//! default Linux host, `2 x wmem_max` of kernel memory): a one-stream probe on a 1 Gbit/s
//! path at 100 ms reports at most ~450 Mbit/s, and a tuner planning from that plans too few
//! streams. The probe therefore opens enough streams, each with the largest send buffer the
//! host allows, to hold the bandwidth-delay product of a fast path ([`PROBE_CEILING`] at the
//! control connection's RTT), at least 2 and at most [`MAX_PROBE_STREAMS`]. N streams also
//! leave slow start `log2(N)` rounds sooner than one.
//!
//! # When to stop
//!
//! Time is cut into rounds of one RTT (at least [`MIN_ROUND`], so that a 0.5 ms path is
//! measured over windows long enough to average out scheduling noise). Each round's delivery
//! rate is the growth of the aggregate delivered bytes over the round. As in BBR's STARTUP,
//! the pipe is full when [`PLATEAU_ROUNDS`] rounds in a row fail to grow the rate by
//! [`GROWTH`] (25%) over the best rate at the last growth; the estimate is the median of
//! the plateau's rounds (a receiver's settles over more, [`FullPipe::at_receiver`]). A hard
//! bound ([`ProbePlan::max_duration`]) ends a probe that never plateaus; its rate is then a
//! lower bound.
//!
//! # Calling order
//!
//! Build a [`FullPipe`] from a [`ProbePlan`] (or [`FullPipe::new`]), then call
//! [`FullPipe::on_sample`] with a non-decreasing `now` and the cumulative delivered bytes
//! (bytes acknowledged at a sender, bytes received at a receiver) as often as convenient
//! (every few milliseconds); it returns the [`ProbeOutcome`] once the pipe is full or the
//! bound is hit. [`FullPipe::outcome`] gives the result so far at any time (the transfer
//! engine uses it to observe a transfer's own delivery without stopping anything).

use crate::linux;
use crate::time::Time;
use crate::tuner::HostLimits;
use crate::units::{Bytes, Rate};
use std::time::Duration;

/// The fastest path the probe is sized for: it opens enough streams to hold this rate's
/// bandwidth-delay product (a faster path is reported as a lower bound).
pub const PROBE_CEILING: Rate = Rate::gbit(10);
/// Fewest probe streams (one stream can be CPU-bound on a busy host).
pub const MIN_PROBE_STREAMS: u32 = 2;
/// Most probe streams.
pub const MAX_PROBE_STREAMS: u32 = 8;
/// Shortest round.
pub const MIN_ROUND: Duration = Duration::from_millis(10);
/// Growth per round below which a round counts toward the plateau.
pub const GROWTH: f64 = 1.25;
/// Rounds without [`GROWTH`] that mean the pipe is full.
pub const PLATEAU_ROUNDS: u32 = 3;
/// Rounds after which the probe stops even without a plateau.
pub const MAX_ROUNDS: u32 = 20;
/// Consecutive rounds within [`GROWTH`] of each other that settle a receiver's rate (see
/// [`FullPipe::at_receiver`]).
pub const SETTLED_ROUNDS: usize = 3;
/// Rounds from a receiver's plateau on over which their mean is its rate when it never
/// settled (see [`FullPipe::at_receiver`]).
pub const LONG_MEAN_ROUNDS: u32 = 6;
/// Unsent data each probe stream keeps in the kernel (`TCP_NOTSENT_LOWAT`): the probe's
/// memory is what is in flight plus this, not its whole send buffers.
pub const PROBE_LOWAT: Bytes = Bytes::kib(512);

/// How to run a probe, from what is known before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbePlan {
    /// Parallel probe streams.
    pub streams: u32,
    /// Length of a measurement round.
    pub round: Duration,
    /// Hard bound on the probe's sending time.
    pub max_duration: Duration,
    /// `TCP_NOTSENT_LOWAT` of each probe stream.
    pub lowat: Bytes,
    /// Most the probe streams can carry together (their in-flight capacity over the RTT);
    /// `None` when the sender's buffers are not capped (`SO_SNDBUFFORCE`).
    pub capacity: Option<Rate>,
}

impl ProbePlan {
    /// The plan for a path of `rtt` (the control connection's; 100 ms when unknown) from a
    /// sender with `sender_limits`, opening at most `max_streams` streams.
    pub fn new(rtt: Option<Duration>, sender_limits: &HostLimits, max_streams: u32) -> ProbePlan {
        let rtt = rtt
            .filter(|r| !r.is_zero())
            .unwrap_or(Duration::from_millis(100));
        let round = rtt.max(MIN_ROUND);
        let per_socket =
            linux::max_send_payload(sender_limits).map(|p| p.saturating_sub(PROBE_LOWAT.0).max(1));
        let wanted = per_socket.map_or(MIN_PROBE_STREAMS, |p| {
            let n = PROBE_CEILING.bdp(rtt).0.div_ceil(p);
            u32::try_from(n).unwrap_or(u32::MAX)
        });
        let streams = wanted
            .clamp(MIN_PROBE_STREAMS, MAX_PROBE_STREAMS)
            .min(max_streams.max(1));
        let max_duration =
            (round * MAX_ROUNDS).clamp(Duration::from_millis(250), Duration::from_secs(4));
        let capacity = per_socket.map(|p| {
            let bytes = p.saturating_mul(u64::from(streams));
            Rate::from_bytes_over(Bytes(bytes), rtt)
        });
        ProbePlan {
            streams,
            round,
            max_duration,
            lowat: PROBE_LOWAT,
            capacity,
        }
    }

    /// Whether a measured rate may be limited by the probe's own sockets (at least 60% of
    /// their capacity): the path may then be faster.
    pub fn limited_by_sockets(&self, rate: Rate) -> bool {
        self.capacity
            .is_some_and(|c| rate.0.saturating_mul(10) >= c.0.saturating_mul(6))
    }
}

/// What a probe (or an observed transfer) measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeOutcome {
    /// The path's rate: at a plateau the median of its rounds (at a receiver, see
    /// [`FullPipe::at_receiver`]), else the largest round rate seen (`None` before the first complete round or when nothing was delivered).
    pub rate: Option<Rate>,
    /// The rate stopped growing ([`PLATEAU_ROUNDS`] rounds without [`GROWTH`]): it is the
    /// path's, not a point on the way up.
    pub full_pipe: bool,
    /// Complete rounds.
    pub rounds: u32,
    /// From the first sample to the last.
    pub elapsed: Duration,
}

/// BBR's full-pipe estimator over aggregate delivered bytes (see the module documentation).
#[derive(Clone, Debug)]
pub struct FullPipe {
    round: Duration,
    max_duration: Duration,
    start: Option<Time>,
    round_start: (Time, u64),
    /// Packets that had arrived out of order at the current round's start (a receiver's,
    /// see [`FullPipe::on_sample_ordered`]).
    ooo_at_round_start: Option<u64>,
    /// Consecutive rounds, up to the last, in which nothing arrived out of order (every
    /// round counts when that is unknown).
    in_order_run: u32,
    last: Time,
    /// The rate at the last growth, bit/s.
    full_bw: f64,
    /// Rounds since the last growth.
    stale: u32,
    max_bw: f64,
    /// The last `PLATEAU_ROUNDS + 1` round rates (the plateau and the round before it),
    /// each with whether nothing arrived out of order in it.
    recent: std::collections::VecDeque<(f64, bool)>,
    rounds: u32,
    full: bool,
    /// Fed with what a receiver read (see [`FullPipe::at_receiver`]).
    receiver: bool,
    /// The rate settles after the plateau (see [`FullPipe::settling`]).
    settling: bool,
    /// The last [`SETTLED_ROUNDS`] rounds' bytes and lengths (a receiver's).
    tail: std::collections::VecDeque<(u64, Duration)>,
    /// A receiver's settled rate: the mean of the first steady rounds at the plateau.
    settled: Option<f64>,
    /// Bytes and time of every round from the plateau's first on (a receiver's, for a rate
    /// that never settled).
    since_plateau: (u64, Duration, u32),
}

impl FullPipe {
    /// An estimator with rounds of `round` (at least 1 ms) that stops after `max_duration`.
    pub fn new(round: Duration, max_duration: Duration) -> FullPipe {
        FullPipe {
            round: round.max(Duration::from_millis(1)),
            max_duration,
            start: None,
            round_start: (Time::ZERO, 0),
            ooo_at_round_start: None,
            in_order_run: 0,
            last: Time::ZERO,
            full_bw: 0.0,
            stale: 0,
            max_bw: 0.0,
            recent: std::collections::VecDeque::new(),
            rounds: 0,
            full: false,
            receiver: false,
            settling: false,
            tail: std::collections::VecDeque::new(),
            settled: None,
            since_plateau: (0, Duration::ZERO, 0),
        }
    }

    /// The estimator fed with the bytes a receiver got *in order* (read by the application,
    /// or `tcpi_bytes_received`), rather than acknowledged: after a loss nothing arrives in
    /// order until the hole is filled (a round or two of nearly nothing, then a burst that
    /// releases what was held), though the path kept delivering. Slow start's overshoot
    /// leaves such holes in every stream just as the plateau is found, and a receiving host
    /// that is descheduled (or a path that stalls and catches up) makes the same pattern. A
    /// round at a receiver may therefore read anything from nothing to well above the path's
    /// rate, and no single round, nor the median of the plateau's few rounds, can be trusted:
    /// a plateau's best round read 1.5 x a 200 Mbit/s path on a busy host.
    ///
    /// A receiver's rate therefore *settles*: after the plateau, the estimator waits for
    /// [`SETTLED_ROUNDS`] consecutive rounds within [`GROWTH`] of each other (no hole opened
    /// or filled in them) and takes their mean, bytes over time; [`FullPipe::on_sample`]
    /// returns only then (or at the bound). Steady rounds are not proof enough: while the
    /// overshoot's losses are recovered, holes open and fill in every round and the
    /// in-order count can hold steady well away from the path's rate (a loaded host settled
    /// at 348 Mbit/s on a 200 Mbit/s path, 2.6 MB held out of order behind 1,800 drops; CI
    /// once at 33.7). A receiver that knows its out-of-order arrivals
    /// ([`FullPipe::on_sample_ordered`]) therefore settles only on rounds in which nothing
    /// arrived out of order. Rounds before the plateau count if they are
    /// steady with it. A rate that never settles by the bound is the mean over everything
    /// from the plateau's first round on: holes and bursts cancel over it, so it is off by
    /// at most what was held in holes at its ends over its length. Over fewer than
    /// [`LONG_MEAN_ROUNDS`] rounds (a phase that ended soon after the plateau, such as a
    /// client's probe that the server only watches) that mean is mostly the holes the
    /// plateau ends with, and the plateau's best round stands instead, as before: a burst in
    /// it would count whole.
    pub fn at_receiver(mut self) -> FullPipe {
        self.receiver = true;
        self.settling = true;
        self
    }

    /// A sender's estimator whose rate settles as a receiver's does (see
    /// [`FullPipe::at_receiver`]), for a measurement that may take a few rounds more to be
    /// right (the server's `advise`): acknowledgements that a stalled path releases at once
    /// inflate a round too, and the median of a plateau's four rounds (the growth round
    /// among them) read 1.12 x a 200 Mbit/s path whose emulator was stopped for 25 ms every
    /// 175 ms. Without it (a client's probe, on the way to its transfer's first byte) the
    /// estimator stops at the plateau.
    pub fn settling(mut self) -> FullPipe {
        self.settling = true;
        self
    }

    /// A receiver's estimator ([`FullPipe::at_receiver`]) that answers at the plateau,
    /// without waiting for the rate to settle: with the plateau's best round in which
    /// nothing arrived out of order ([`FullPipe::on_sample_ordered`]), which holes can
    /// neither cut short nor inflate. For a transfer measuring its path in band, whose
    /// tuning waits on the answer: settling takes as long as the overshoot's holes last,
    /// twelve rounds and more at 100 ms / 1 Gbit/s.
    pub fn stop_at_plateau(mut self) -> FullPipe {
        self.settling = false;
        self
    }

    /// The estimator a [`ProbePlan`] asks for.
    pub fn for_plan(plan: &ProbePlan) -> FullPipe {
        FullPipe::new(plan.round, plan.max_duration)
    }

    /// Feed the cumulative delivered bytes at `now`. Returns the outcome when the probe
    /// should stop: the pipe is full, or the hard bound is reached.
    pub fn on_sample(&mut self, now: Time, delivered: u64) -> Option<ProbeOutcome> {
        self.on_sample_ordered(now, delivered, None)
    }

    /// [`FullPipe::on_sample`] at a receiver that also knows how many packets have arrived
    /// out of order so far (`out_of_order`, the sum of its streams' `tcpi_rcv_ooopack`).
    /// A round in which that count grew had a hole open: what was read in order in it is
    /// not what arrived (less while the hole is open, more when it fills). A settling
    /// estimator settles only on rounds without ([`FullPipe::at_receiver`]).
    pub fn on_sample_ordered(
        &mut self,
        now: Time,
        delivered: u64,
        out_of_order: Option<u64>,
    ) -> Option<ProbeOutcome> {
        let Some(start) = self.start else {
            self.start = Some(now);
            self.round_start = (now, delivered);
            self.ooo_at_round_start = out_of_order;
            self.last = now;
            return None;
        };
        self.last = now.max(self.last);
        let (t0, b0) = self.round_start;
        let dt = now.saturating_since(t0);
        if dt >= self.round {
            let bytes = delivered.saturating_sub(b0);
            let bw = bytes as f64 * 8.0 / dt.as_secs_f64();
            self.rounds += 1;
            let in_order = match (self.ooo_at_round_start, out_of_order) {
                (Some(a), Some(b)) => b == a,
                _ => true,
            };
            self.in_order_run = if in_order { self.in_order_run + 1 } else { 0 };
            self.ooo_at_round_start = out_of_order;
            self.max_bw = self.max_bw.max(bw);
            let was_full = self.full;
            if !self.full {
                if self.recent.len() > PLATEAU_ROUNDS as usize {
                    self.recent.pop_front();
                }
                self.recent.push_back((bw, in_order));
                if bw >= self.full_bw * GROWTH && bw > 0.0 {
                    self.full_bw = bw;
                    self.stale = 0;
                } else if self.full_bw > 0.0 {
                    self.stale += 1;
                    if self.stale >= PLATEAU_ROUNDS {
                        self.full = true;
                    }
                }
            }
            if self.settling {
                self.settle(was_full, bytes, dt);
            }
            self.round_start = (now, delivered);
        }
        let out_of_time = now.saturating_since(start) >= self.max_duration;
        let done = self.full && (!self.settling || self.settled.is_some());
        (done || out_of_time).then(|| self.outcome())
    }

    /// A settling estimator's round of `bytes` over `dt`, the plateau having been reached before it
    /// (`was_full`) or not.
    fn settle(&mut self, was_full: bool, bytes: u64, dt: Duration) {
        if self.tail.len() == SETTLED_ROUNDS {
            self.tail.pop_front();
        }
        self.tail.push_back((bytes, dt));
        if !self.full {
            return;
        }
        if !was_full {
            // The plateau was found with this round: it began `stale` rounds ago.
            let n = (self.stale as usize).min(self.tail.len());
            self.since_plateau = total(self.tail.iter().skip(self.tail.len() - n));
        } else {
            self.since_plateau.0 += bytes;
            self.since_plateau.1 += dt;
            self.since_plateau.2 += 1;
        }
        if self.settled.is_some()
            || self.tail.len() < SETTLED_ROUNDS
            || self.in_order_run < SETTLED_ROUNDS as u32
        {
            return;
        }
        let rate = |(b, t): &(u64, Duration)| *b as f64 / t.as_secs_f64().max(1e-9);
        let lo = self.tail.iter().map(rate).fold(f64::INFINITY, f64::min);
        let hi = self.tail.iter().map(rate).fold(0.0, f64::max);
        if lo > 0.0 && hi <= lo * GROWTH {
            let (b, t, _) = total(self.tail.iter());
            self.settled = Some(b as f64 * 8.0 / t.as_secs_f64().max(1e-9));
        }
    }

    /// The result so far.
    pub fn outcome(&self) -> ProbeOutcome {
        // At a plateau the median of its rounds: a single round inflated by a burst of
        // acknowledgements (a retransmission filling a hole) or of reads does not count.
        // Without a plateau the largest round (a lower bound anyway).
        let stale = (self.stale as usize).min(self.recent.len());
        // The rule without settling: at a receiver the plateau's best round (those after the
        // last growth): the rounds just before a stall are cut short by the holes and the
        // stall reads nothing, so their median would sit well below the path's rate; the
        // burst that fills the holes grows the rate by more than a quarter and is a growth
        // round, not a plateau round. A receiver that knows its out-of-order arrivals counts
        // only the plateau's rounds without them: a hole filled in a round releases in it
        // what arrived in earlier ones. At a sender the median of the plateau and the round
        // before it. A plateau of nothing but stalls (or holes): the growth round.
        let plateau = || {
            if self.receiver {
                self.recent
                    .iter()
                    .skip(self.recent.len() - stale)
                    .filter(|(_, in_order)| *in_order)
                    .map(|(r, _)| *r)
                    .reduce(f64::max)
                    .filter(|r| *r > 0.0)
                    .or(Some(self.full_bw))
            } else {
                let mut v: Vec<f64> = self.recent.iter().map(|(r, _)| *r).collect();
                v.sort_by(f64::total_cmp);
                let n = v.len();
                match n {
                    0 => None,
                    _ if n % 2 == 1 => Some(v[n / 2]),
                    _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
                }
            }
        };
        let rate = if self.full {
            // Settling: the settled rate, else the mean since the plateau began, else (too
            // few rounds for it) the rule without settling (see `at_receiver`).
            let (b, t, k) = self.since_plateau;
            let long = || {
                (self.settling && k >= LONG_MEAN_ROUNDS && !t.is_zero())
                    .then(|| b as f64 * 8.0 / t.as_secs_f64())
                    .filter(|r| *r >= 1.0)
            };
            self.settled
                .or_else(long)
                .or_else(plateau)
                .unwrap_or(self.max_bw)
        } else {
            self.max_bw
        };
        ProbeOutcome {
            rate: (rate >= 1.0).then_some(Rate(rate as u64)),
            full_pipe: self.full,
            rounds: self.rounds,
            elapsed: self
                .start
                .map_or(Duration::ZERO, |s| self.last.saturating_since(s)),
        }
    }

    /// Whether the plateau was reached.
    pub fn is_full(&self) -> bool {
        self.full
    }
}

/// The bytes, time and number of `rounds` together.
fn total<'a>(rounds: impl Iterator<Item = &'a (u64, Duration)>) -> (u64, Duration, u32) {
    rounds.fold((0, Duration::ZERO, 0), |(b, t, k), (rb, rt)| {
        (b + rb, t + *rt, k + 1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed round rates (Mbit/s) of 50 ms rounds, sampled at each round's end.
    fn rounds(mut f: FullPipe, mbit: &[f64]) -> ProbeOutcome {
        let mut delivered = 0f64;
        let mut now = Time::ZERO;
        f.on_sample(now, 0);
        for r in mbit {
            delivered += r * 1e6 / 8.0 * 0.05;
            now += Duration::from_millis(50);
            if let Some(o) = f.on_sample(now, delivered as u64) {
                return o;
            }
        }
        f.outcome()
    }

    #[test]
    fn a_receivers_holes_and_bursts_average_out_and_a_steady_plateau_settles_at_once() {
        let f = || FullPipe::new(Duration::from_millis(50), Duration::from_secs(4));
        let mbit = |o: ProbeOutcome| o.rate.map_or(0.0, |r| r.0 as f64 / 1e6);
        // What a server read in order from eight streams across the emulator's 50 ms x
        // 200 Mbit/s path (193 Mbit/s of goodput), idle host: slow start, the plateau, then
        // the overshoot's holes and the bursts that fill them for ten rounds.
        let clean = [
            0.0, 14.8, 25.1, 40.8, 94.1, 173.3, 192.5, 123.8, 0.0, 169.5, 441.0, 139.3, 0.0, 200.6,
            399.3, 242.8, 193.3, 193.5,
        ];
        // The same path with the emulator stopped for 25 ms every 175 ms, as far as the old
        // rule read it (it took the plateau's best round, 313.8, as a busy CI host's once
        // read 1.5 x the path), then four rounds more of the same pattern.
        let busy = [
            8.6, 17.6, 49.4, 151.8, 192.9, 125.3, 86.3, 365.7, 19.8, 313.8, 138.6, 170.0, 260.0,
            120.0, 190.0,
        ];
        for seen in [&clean[..], &busy[..]] {
            let plain = rounds(f(), seen);
            let receiver = rounds(f().at_receiver(), seen);
            assert!(plain.full_pipe && receiver.full_pipe);
            assert!(
                (170.0..=200.0).contains(&mbit(receiver)),
                "{receiver:?} (plain: {plain:?})"
            );
        }
        // A plateau's first rounds cut short by holes do not halve it: the mean runs on.
        let cut = [
            10.0, 21.9, 43.1, 94.5, 174.3, 197.0, 181.1, 0.0, 380.0, 190.0, 193.0,
        ];
        let r = rounds(f().at_receiver(), &cut);
        assert!((182.0..=200.0).contains(&mbit(r)), "{r:?}");
        // A phase that ends with the plateau (a client's probe the server watches) keeps
        // the plateau's best round: the mean of three rounds would be mostly their holes.
        let r = rounds(f().at_receiver(), &clean[..9]);
        assert!((190.0..=195.0).contains(&mbit(r)), "{r:?}");
        // Steady rounds settle the rate, and the estimator stops with them.
        let steady = [
            10.0, 20.0, 40.0, 80.0, 150.0, 193.0, 192.0, 190.0, 191.0, 0.0, 900.0,
        ];
        let mut e = f().at_receiver();
        let (mut delivered, mut now, mut stopped) = (0f64, Time::ZERO, None);
        e.on_sample(now, 0);
        for (i, r) in steady.iter().enumerate() {
            delivered += r * 1e6 / 8.0 * 0.05;
            now += Duration::from_millis(50);
            if let Some(o) = e.on_sample(now, delivered as u64) {
                stopped = Some((i, o));
                break;
            }
        }
        let (i, o) = stopped.expect("settled");
        assert_eq!(i, 8, "{o:?}");
        assert!((190.0..=193.0).contains(&mbit(o)), "{o:?}");
        // A sender's plateau is unchanged: it stops three rounds after the last growth.
        let (a, b) = (
            rounds(f(), &steady[..9]),
            rounds(f().at_receiver(), &steady[..9]),
        );
        assert!((mbit(a) - mbit(b)).abs() < 3.0, "{a:?} {b:?}");
    }

    /// The round rates of `seen`, without its out-of-order counts (an estimator not told).
    fn in_order_only(seen: &[(f64, u64)]) -> Vec<f64> {
        seen.iter().map(|(r, _)| *r).collect()
    }

    /// Feed round rates (Mbit/s) of 50 ms rounds with the packets that arrived out of order
    /// in each; returns the outcome and the round it came in (1-based, 0: none).
    fn ordered_rounds(mut f: FullPipe, seen: &[(f64, u64)]) -> (ProbeOutcome, usize) {
        let (mut delivered, mut ooo, mut now) = (0f64, 0u64, Time::ZERO);
        f.on_sample_ordered(now, 0, Some(0));
        for (i, (r, o)) in seen.iter().enumerate() {
            delivered += r * 1e6 / 8.0 * 0.05;
            ooo += o;
            now += Duration::from_millis(50);
            if let Some(out) = f.on_sample_ordered(now, delivered as u64, Some(ooo)) {
                return (out, i + 1);
            }
        }
        (f.outcome(), 0)
    }

    #[test]
    fn a_receiver_settles_only_on_rounds_without_out_of_order_arrivals() {
        let f = || FullPipe::new(Duration::from_millis(50), Duration::from_secs(4)).at_receiver();
        let mbit = |o: ProbeOutcome| o.rate.map_or(0.0, |r| r.0 as f64 / 1e6);
        // A 200 Mbit/s path (193 of goodput): slow start, then the overshoot's recovery, in
        // which the in-order count holds steady at 348 for three rounds while holes fill
        // (as a loaded host read once), then clean rounds.
        let seen = [
            (14.8, 0),
            (26.9, 0),
            (40.9, 0),
            (96.0, 0),
            (175.3, 0),
            (192.1, 0),
            (121.7, 139),
            (0.0, 323),
            (340.0, 131),
            (348.0, 75),
            (352.0, 60),
            (49.3, 378),
            (193.1, 0),
            (193.4, 0),
            (192.8, 0),
        ];
        let (o, at) = ordered_rounds(f(), &seen);
        assert_eq!(at, 15, "settles on the three clean rounds: {o:?}");
        assert!(o.full_pipe && (192.0..=194.0).contains(&mbit(o)), "{o:?}");
        // Steady at 34 while holes stay open (a loaded CI host's once), then the bursts
        // that fill them and clean rounds: settled on those, not on the steady ones.
        let stuck: Vec<(f64, u64)> = seen[..7]
            .iter()
            .copied()
            .chain([
                (34.0, 200),
                (33.0, 210),
                (35.0, 190),
                (520.0, 100),
                (420.0, 80),
            ])
            .chain([(193.0, 0), (193.2, 0), (192.9, 0)])
            .collect();
        let (o, at) = ordered_rounds(f(), &stuck);
        assert_eq!(at, 15, "{o:?}");
        assert!(o.full_pipe && (192.0..=194.0).contains(&mbit(o)), "{o:?}");
        // Cut off by the bound before a clean round: the mean since the plateau, in which
        // the holes and the bursts that filled them cancel.
        let bounded = FullPipe::new(Duration::from_millis(50), Duration::from_millis(600));
        let (o, _) = ordered_rounds(bounded.at_receiver(), &stuck[..12]);
        assert!(o.full_pipe && (180.0..=200.0).contains(&mbit(o)), "{o:?}");
        // Without the count the same steady rounds settle, as before.
        let o = rounds(f(), &in_order_only(&stuck));
        assert!(o.full_pipe && mbit(o) < 40.0, "{o:?}");
    }

    #[test]
    fn a_receiver_that_stops_at_its_plateau_takes_its_best_round_without_holes() {
        let f = || {
            FullPipe::new(Duration::from_millis(50), Duration::MAX)
                .at_receiver()
                .stop_at_plateau()
        };
        let mbit = |o: ProbeOutcome| o.rate.map_or(0.0, |r| r.0 as f64 / 1e6);
        // A pull's reads across 50 ms x 200 Mbit/s: the growth round, a clean round, then
        // holes, one round of which a filled hole inflates (not by enough to be growth).
        let seen = [
            (25.0, 0),
            (50.0, 0),
            (100.0, 0),
            (190.0, 0),
            (193.0, 0),
            (235.0, 60),
            (0.0, 300),
            (400.0, 100),
        ];
        let (o, at) = ordered_rounds(f(), &seen);
        assert_eq!(at, 7, "it answers at the plateau: {o:?}");
        assert!((192.0..=194.0).contains(&mbit(o)), "{o:?}");
        // Every plateau round with holes: the growth round.
        let mut holes = seen;
        holes[4].1 = 20;
        assert!((189.0..=191.0).contains(&mbit(ordered_rounds(f(), &holes).0)));
        // Without the count, the inflated round stands, as it did.
        let o = rounds(f(), &in_order_only(&seen));
        assert!(o.full_pipe && mbit(o) > 230.0, "{o:?}");
    }

    #[test]
    fn a_settling_sender_waits_out_a_burst_of_acknowledgements_that_the_median_counts() {
        let f = || FullPipe::new(Duration::from_millis(50), Duration::from_secs(4));
        let mbit = |o: ProbeOutcome| o.rate.map_or(0.0, |r| r.0 as f64 / 1e6);
        // A 200 Mbit/s path whose acknowledgements come in bursts after stalls: the growth
        // round is one, and the plateau has another.
        let seen = [
            20.0, 40.0, 80.0, 150.0, 250.0, 200.0, 240.0, 110.0, 260.0, 130.0, 200.0, 195.0, 198.0,
            0.0, 600.0,
        ];
        let plain = rounds(f(), &seen);
        assert!(plain.full_pipe && mbit(plain) > 215.0, "{plain:?}");
        let settled = rounds(f().settling(), &seen);
        assert!(settled.full_pipe, "{settled:?}");
        assert!((195.0..=200.0).contains(&mbit(settled)), "{settled:?}");
        assert_eq!(settled.rounds, 13, "it stops once settled: {settled:?}");
    }

    /// Feed a slow start that doubles every round from `first` bit/s up to `cap` bit/s,
    /// sampled every 5 ms, rounds of `round`; returns the outcome and when it came.
    fn slow_start(round_ms: u64, first: f64, cap: f64, bound: Duration) -> (ProbeOutcome, Time) {
        let mut f = FullPipe::new(Duration::from_millis(round_ms), bound);
        let mut delivered = 0f64;
        let mut now = Time::ZERO;
        for k in 0..10_000u64 {
            let round = (k * 5) / round_ms;
            let rate = (first * 2f64.powi(round as i32)).min(cap);
            if let Some(o) = f.on_sample(now, delivered as u64) {
                return (o, now);
            }
            delivered += rate / 8.0 * 0.005;
            now += Duration::from_millis(5);
        }
        panic!("never stopped");
    }

    #[test]
    fn stops_three_rounds_after_the_rate_stops_doubling() {
        let (o, at) = slow_start(100, 5e6, 1e9, Duration::from_secs(10));
        assert!(o.full_pipe);
        // 5 Mbit/s doubles to 1 Gbit/s in about 8 rounds, then 3 flat rounds.
        assert!(
            (10..=12).contains(&o.rounds),
            "{} rounds, stopped at {at}",
            o.rounds
        );
        let r = o.rate.expect("rate").0 as f64;
        assert!((r / 1e9 - 1.0).abs() < 0.02, "{r}");
    }

    #[test]
    fn hard_bound_ends_a_probe_that_never_plateaus_with_a_lower_bound() {
        let (o, at) = slow_start(100, 1e3, 1e12, Duration::from_millis(800));
        assert!(!o.full_pipe);
        assert_eq!(at, Time::from_millis(800));
        assert!(o.rate.is_some());
    }

    #[test]
    fn noise_at_the_plateau_does_not_restart_the_count() {
        let mut f = FullPipe::new(Duration::from_millis(10), Duration::from_secs(5));
        let mut d = 0u64;
        let rates = [1e8, 4e8, 9e8, 8e8, 9.5e8, 8.5e8, 9e8];
        let mut now = Time::ZERO;
        let mut out = None;
        assert_eq!(f.on_sample(now, 0), None);
        for r in rates {
            d += (r / 8.0 * 0.01) as u64;
            now += Duration::from_millis(10);
            out = f.on_sample(now, d);
            if out.is_some() {
                break;
            }
        }
        let o = out.expect("full pipe after three flat rounds");
        assert!(o.full_pipe);
        assert_eq!(o.rounds, 6);
        // The median of the plateau's rounds (9, 8, 9.5, 8.5 x 100 Mbit/s).
        let r = o.rate.expect("rate").0;
        assert!(r.abs_diff(875_000_000) < 1_000, "{r}");
    }

    #[test]
    fn one_burst_round_does_not_inflate_the_rate() {
        // A path of 1 Gbit/s where one round's acknowledgements arrive in a burst (a whole
        // window acknowledged by one retransmission): 2 Gbit/s for that round, then less.
        let mut f = FullPipe::new(Duration::from_millis(100), Duration::from_secs(5));
        let rates = [2e8, 5e8, 1e9, 2e9, 0.4e9, 1e9, 1e9, 1e9];
        let mut d = 0u64;
        let mut now = Time::ZERO;
        assert_eq!(f.on_sample(now, 0), None);
        let mut out = None;
        for r in rates {
            d += (r / 8.0 * 0.1) as u64;
            now += Duration::from_millis(100);
            out = f.on_sample(now, d);
            if out.is_some() {
                break;
            }
        }
        let o = out.expect("plateau");
        let r = o.rate.expect("rate").0 as f64;
        assert!((r / 1e9 - 1.0).abs() < 0.05, "{r}");
    }

    #[test]
    fn nothing_delivered_gives_no_rate() {
        let mut f = FullPipe::new(Duration::from_millis(20), Duration::from_millis(100));
        let mut now = Time::ZERO;
        let mut out = None;
        while out.is_none() {
            out = f.on_sample(now, 0);
            now += Duration::from_millis(5);
        }
        let o = out.expect("bound");
        assert_eq!(o.rate, None);
        assert!(!o.full_pipe);
    }

    #[test]
    fn plan_opens_more_streams_on_longer_paths() {
        let l = HostLimits::linux_defaults();
        let at = |ms: f64| ProbePlan::new(Some(Duration::from_secs_f64(ms / 1000.0)), &l, 64);
        assert_eq!(at(0.5).streams, MIN_PROBE_STREAMS);
        assert_eq!(at(0.5).round, MIN_ROUND);
        assert_eq!(at(0.5).max_duration, Duration::from_millis(250));
        assert_eq!(at(200.0).streams, MAX_PROBE_STREAMS);
        assert_eq!(at(200.0).max_duration, Duration::from_secs(4));
        let mid = at(25.0).streams;
        assert!(
            (MIN_PROBE_STREAMS..=MAX_PROBE_STREAMS).contains(&mid),
            "{mid}"
        );
        // The server's (or user's) stream limit wins.
        assert_eq!(
            ProbePlan::new(Some(Duration::from_millis(200)), &l, 3).streams,
            3
        );
        // Eight default sockets hold about 55 MB: 2.2 Gbit/s at 200 ms.
        let cap = at(200.0).capacity.expect("capped sockets").0;
        assert!((2_000_000_000..2_400_000_000).contains(&cap), "{cap}");
        assert!(!at(200.0).limited_by_sockets(Rate::gbit(1)));
        assert!(at(200.0).limited_by_sockets(Rate::gbit(2)));
        let forced = HostLimits {
            can_force: true,
            ..HostLimits::linux_defaults()
        };
        let p = ProbePlan::new(Some(Duration::from_millis(200)), &forced, 64);
        assert_eq!((p.streams, p.capacity), (MIN_PROBE_STREAMS, None));
    }
}
