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
//! [`GROWTH`] (25%) over the best rate at the last growth; the estimate is the largest round
//! rate seen. A hard bound ([`ProbePlan::max_duration`]) ends a probe that never plateaus;
//! its rate is then a lower bound.
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
    /// The path's rate: at a plateau the median of its rounds, else the largest round rate
    /// seen (`None` before the first complete round or when nothing was delivered).
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
    last: Time,
    /// The rate at the last growth, bit/s.
    full_bw: f64,
    /// Rounds since the last growth.
    stale: u32,
    max_bw: f64,
    /// The last `PLATEAU_ROUNDS + 1` round rates (the plateau and the round before it).
    recent: std::collections::VecDeque<f64>,
    rounds: u32,
    full: bool,
    /// Fed with what a receiver read (see [`FullPipe::at_receiver`]).
    receiver: bool,
}

impl FullPipe {
    /// An estimator with rounds of `round` (at least 1 ms) that stops after `max_duration`.
    pub fn new(round: Duration, max_duration: Duration) -> FullPipe {
        FullPipe {
            round: round.max(Duration::from_millis(1)),
            max_duration,
            start: None,
            round_start: (Time::ZERO, 0),
            last: Time::ZERO,
            full_bw: 0.0,
            stale: 0,
            max_bw: 0.0,
            recent: std::collections::VecDeque::new(),
            rounds: 0,
            full: false,
            receiver: false,
        }
    }

    /// The estimator fed with the bytes an application *read* (a receiver), rather than
    /// acknowledged: after a loss the reader gets nothing until the hole is filled (a round
    /// or two of nearly nothing, then a burst), though the path kept delivering, and the
    /// round in which the holes appeared is cut short. The plateau's rate is then its best
    /// round, rather than the median of its rounds (see [`FullPipe::outcome`]). A burst of
    /// less than a quarter above the path's rate inside the plateau would count whole: the
    /// price of not having the acknowledgements a sender has.
    pub fn at_receiver(mut self) -> FullPipe {
        self.receiver = true;
        self
    }

    /// The estimator a [`ProbePlan`] asks for.
    pub fn for_plan(plan: &ProbePlan) -> FullPipe {
        FullPipe::new(plan.round, plan.max_duration)
    }

    /// Feed the cumulative delivered bytes at `now`. Returns the outcome when the probe
    /// should stop: the pipe is full, or the hard bound is reached.
    pub fn on_sample(&mut self, now: Time, delivered: u64) -> Option<ProbeOutcome> {
        let Some(start) = self.start else {
            self.start = Some(now);
            self.round_start = (now, delivered);
            self.last = now;
            return None;
        };
        self.last = now.max(self.last);
        let (t0, b0) = self.round_start;
        let dt = now.saturating_since(t0);
        if dt >= self.round {
            let bw = delivered.saturating_sub(b0) as f64 * 8.0 / dt.as_secs_f64();
            self.rounds += 1;
            self.max_bw = self.max_bw.max(bw);
            if !self.full {
                if self.recent.len() > PLATEAU_ROUNDS as usize {
                    self.recent.pop_front();
                }
                self.recent.push_back(bw);
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
            self.round_start = (now, delivered);
        }
        let out_of_time = now.saturating_since(start) >= self.max_duration;
        (self.full || out_of_time).then(|| self.outcome())
    }

    /// The result so far.
    pub fn outcome(&self) -> ProbeOutcome {
        // At a plateau the median of its rounds: a single round inflated by a burst of
        // acknowledgements (a retransmission filling a hole) or of reads does not count.
        // Without a plateau the largest round (a lower bound anyway).
        let rate = if self.full && self.receiver {
            // At a receiver: the best round of the plateau (those after the last growth).
            // The rounds just before a stall are cut short by the holes, and the stall reads
            // nothing, so their median would sit well below the path's rate; the burst that
            // fills the holes grows the rate by more than a quarter and is a growth round,
            // not a plateau round. (A plateau of nothing but stalls: the growth round.)
            let stale = (self.stale as usize).min(self.recent.len());
            self.recent
                .iter()
                .skip(self.recent.len() - stale)
                .copied()
                .reduce(f64::max)
                .filter(|r| *r > 0.0)
                .unwrap_or(self.full_bw)
        } else if self.full && !self.recent.is_empty() {
            let mut v: Vec<f64> = self.recent.iter().copied().collect();
            v.sort_by(f64::total_cmp);
            let n = v.len();
            if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            }
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
    fn a_readers_stall_after_a_loss_does_not_halve_the_plateau_at_a_receiver() {
        let f = || FullPipe::new(Duration::from_millis(50), Duration::from_secs(4));
        let mbit = |o: ProbeOutcome| o.rate.map_or(0.0, |r| r.0 as f64 / 1e6);
        // What a receiver read on a 193 Mbit/s path (measured across the emulator): slow
        // start, a full round, the round in which the overshoot's losses left holes, then
        // the reader waiting for them.
        for seen in [
            &[10.0, 21.9, 43.1, 94.5, 174.3, 197.0, 181.1, 0.0][..],
            &[48.1, 29.9, 92.9, 157.7, 193.7, 173.9, 0.0],
            &[16.5, 18.2, 40.5, 84.8, 165.3, 183.4, 182.5, 0.0],
        ] {
            let plain = rounds(f(), seen);
            let receiver = rounds(f().at_receiver(), seen);
            assert!(plain.full_pipe && receiver.full_pipe);
            assert!(mbit(plain) < 180.0, "{plain:?}");
            assert!((182.0..=200.0).contains(&mbit(receiver)), "{receiver:?}");
        }
        // The burst that fills the holes is a growth round: the plateau after it is what
        // counts, not the burst.
        let burst = [20.0, 40.0, 80.0, 150.0, 0.0, 420.0, 190.0, 193.0, 185.0];
        let r = rounds(f().at_receiver(), &burst);
        assert!((185.0..=195.0).contains(&mbit(r)), "{r:?}");
        // A steady plateau reads about the same either way.
        let steady = [10.0, 20.0, 40.0, 80.0, 150.0, 193.0, 192.0, 190.0, 191.0];
        let (a, b) = (rounds(f(), &steady), rounds(f().at_receiver(), &steady));
        assert!((mbit(a) - mbit(b)).abs() < 3.0, "{a:?} {b:?}");
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
