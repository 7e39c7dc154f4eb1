//! What the server measures of a client's path while a phase runs, from its own side only:
//! the aggregate bytes its data streams delivered (acknowledged when it sends, read when it
//! receives) fed to the full-pipe estimator ([`FullPipe`], as the client's probe does), and
//! the smallest RTT its streams' `TCP_INFO` reported. Nothing a client says about the path
//! is recorded as a measurement; a client can only make its own path look slower.
//!
//! Call order: [`PathWatch::new`] when the phase starts; [`PathWatch::observe`] at
//! [`PathWatch::next_sample`] with what the driver read; [`PathWatch::measurement`] once the
//! phase's result is in.

use crate::result::SideResult;
use std::time::{Duration, Instant};
use tcptune_core::fullpipe::{FullPipe, ProbeOutcome, MIN_ROUND};
use tcptune_core::pathdb::Direction;
use tcptune_core::{Rate, Time};

/// What the driver reads of a running phase when the session asks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    /// A counter that grows while data moves (idle detection).
    pub progress: u64,
    /// Bytes delivered to the other end so far, over every stream.
    pub delivered: u64,
    /// The smallest `tcpi_min_rtt` of the phase's streams.
    pub min_rtt: Option<Duration>,
    /// When the server receives: packets that arrived out of order so far over the phase's
    /// streams (`tcpi_rcv_ooopack`), `None` when sending or unknown. A round in which it
    /// grew had a hole open, and what was read in order in it is not what arrived.
    pub out_of_order: Option<u64>,
}

/// One measurement of a client's path, from the server's side.
#[derive(Clone, Debug, PartialEq)]
pub struct PathMeasurement {
    /// Direction of the data, seen from the server.
    pub(crate) direction: Direction,
    /// The rate: the plateau the delivery reached, else the largest round (a lower bound).
    pub(crate) rate: Rate,
    /// The rate is the path's (a plateau reached while nothing but the path limited it).
    pub(crate) full_pipe: bool,
    /// The smallest RTT seen.
    pub(crate) min_rtt: Duration,
    /// Rounds of one RTT observed.
    pub(crate) rounds: u32,
    /// From the first observation to the last.
    pub(crate) elapsed: Duration,
}

/// The server's watch over one phase. See the module documentation for the calling order.
#[derive(Debug)]
pub(crate) struct PathWatch {
    epoch: Instant,
    estimator: FullPipe,
    sample_every: Duration,
    next_sample: Instant,
    min_rtt: Option<Duration>,
    direction: Direction,
    /// Nothing but the path limits the phase (a probe, a measurement, a transfer whose
    /// buffers follow delivery): a plateau is the path's rate.
    measuring: bool,
    observed: bool,
}

impl PathWatch {
    /// A watch from `now` over a path of about `rtt` (100 ms when unknown), with rounds of
    /// one RTT (at least [`MIN_ROUND`]); `max_duration` ends the estimator (only a leading
    /// watch stops on it); samples every `round / per_round`, at least every `floor`.
    pub(crate) fn new(
        now: Instant,
        rtt: Option<Duration>,
        direction: Direction,
        measuring: bool,
        max_duration: Duration,
        per_round: u32,
        floor: Duration,
    ) -> PathWatch {
        let round = rtt
            .filter(|r| !r.is_zero())
            .unwrap_or(Duration::from_millis(100))
            .clamp(MIN_ROUND, Duration::from_secs(1));
        let sample_every = (round / per_round.max(1)).max(floor);
        let estimator = FullPipe::new(round, max_duration);
        PathWatch {
            epoch: now,
            // Receiving, the server sees what its streams read: stalls after losses.
            estimator: match direction {
                Direction::Receive => estimator.at_receiver(),
                Direction::Send => estimator,
            },
            sample_every,
            next_sample: now + sample_every,
            min_rtt: None,
            direction,
            measuring,
            observed: false,
        }
    }

    /// The watch's rate settles after the plateau even at a sender ([`FullPipe::settling`]):
    /// for a measurement the server leads and answers from (`advise`), which may take a
    /// few rounds more to be right.
    pub(crate) fn settling(mut self) -> PathWatch {
        self.estimator = self.estimator.settling();
        self
    }

    /// When [`PathWatch::observe`] is due.
    pub(crate) fn next_sample(&self) -> Instant {
        self.next_sample
    }

    /// Feed what the driver read at `now`; returns the outcome once the pipe is full or the
    /// estimator's bound is reached.
    pub(crate) fn observe(&mut self, now: Instant, obs: &Observation) -> Option<ProbeOutcome> {
        if now < self.next_sample {
            return None;
        }
        self.next_sample = now + self.sample_every;
        self.observed = true;
        if let Some(r) = obs.min_rtt.filter(|r| !r.is_zero()) {
            self.min_rtt = Some(self.min_rtt.map_or(r, |m| m.min(r)));
        }
        let t = Time::from_nanos(
            u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX),
        );
        self.estimator
            .on_sample_ordered(t, obs.delivered, obs.out_of_order)
    }

    /// An RTT the server itself measured on the path (its control connection's), as the
    /// smallest seen so far.
    pub(crate) fn seed_min_rtt(&mut self, rtt: Option<Duration>) {
        if let Some(r) = rtt.filter(|r| !r.is_zero()) {
            self.min_rtt = Some(self.min_rtt.map_or(r, |m| m.min(r)));
        }
    }

    /// The client measured the rate in band and told both ends (its hint): a plateau from
    /// now on is the path's; unless the client found its rate only a lower bound
    /// (`lower_bound`: measured beside another flow's queue, see
    /// `AutoPlan::measured_beside_another_flow`). The server's plateau was then taken beside
    /// that flow too, and is no more the path's rate than the client's: the server's path
    /// database records it as a lower bound. The latest hint decides.
    pub(crate) fn hinted(&mut self, lower_bound: bool) {
        self.measuring = !lower_bound;
    }

    /// The phase's measurement, once its `result` is in: the estimator's rate (a plateau
    /// counts as full only when nothing but the path limited the phase), else what the
    /// streams moved over their time (a lower bound); the smallest RTT observed, else the
    /// smallest smoothed RTT the streams' statistics kept. `None` without a rate or an RTT.
    pub(crate) fn measurement(&self, result: &SideResult) -> Option<PathMeasurement> {
        let o = self.estimator.outcome();
        let fallback = || {
            let bytes: u64 = result.streams.iter().map(|s| s.bytes).sum();
            let first = result
                .streams
                .iter()
                .filter_map(|s| s.first_s)
                .reduce(f64::min)?;
            let last = result
                .streams
                .iter()
                .filter_map(|s| s.last_s)
                .reduce(f64::max)?;
            let secs = last - first;
            (secs > 0.0 && bytes > 0)
                .then(|| Rate((bytes as f64 * 8.0 / secs) as u64))
                .filter(|r| r.0 > 0)
        };
        let rate = o.rate.or_else(fallback)?;
        let min_rtt = self.min_rtt.or_else(|| {
            result
                .streams
                .iter()
                .filter_map(|s| s.detail.stats.rtt_min_us)
                .min()
                .map(|us| Duration::from_micros(u64::from(us)))
        })?;
        Some(PathMeasurement {
            direction: self.direction,
            rate,
            full_pipe: o.full_pipe && o.rate.is_some() && self.measuring,
            min_rtt,
            rounds: o.rounds,
            elapsed: o.elapsed,
        })
    }

    /// Whether anything was observed.
    #[cfg(test)]
    pub(crate) fn observed(&self) -> bool {
        self.observed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::StreamSide;

    fn stream(bytes: u64, first: f64, last: f64, rtt_us: Option<u32>) -> StreamSide {
        let mut detail = crate::result::SideDetail::default();
        detail.stats.rtt_min_us = rtt_us;
        StreamSide {
            stream: 1,
            sender: false,
            bytes,
            messages: 0,
            partial_bytes: 0,
            first_s: Some(first),
            last_s: Some(last),
            opened_at_s: 0.0,
            tail_bits_per_second: None,
            local: String::new(),
            remote: String::new(),
            detail,
            error: None,
        }
    }

    /// A watch as a session starts one: no bound on its length, samples four times a round
    /// and at least every 10 ms.
    fn watch(
        t0: Instant,
        rtt: Option<Duration>,
        direction: Direction,
        measuring: bool,
    ) -> PathWatch {
        PathWatch::new(
            t0,
            rtt,
            direction,
            measuring,
            Duration::MAX,
            4,
            Duration::from_millis(10),
        )
    }

    /// Delivery that doubles each 50 ms round up to `cap_mbit`, observed every 10 ms.
    fn run(w: &mut PathWatch, t0: Instant, cap_mbit: f64, ms: u64) -> Option<ProbeOutcome> {
        let mut delivered = 0f64;
        for k in 0..=ms / 10 {
            let now = t0 + Duration::from_millis(10 * k);
            let rate = (1e6 * 2f64.powi((k / 5) as i32)).min(cap_mbit * 1e6);
            let obs = Observation {
                progress: delivered as u64,
                delivered: delivered as u64,
                min_rtt: Some(Duration::from_millis(50 + k % 3)),
                out_of_order: None,
            };
            if let Some(o) = w.observe(now, &obs) {
                return Some(o);
            }
            delivered += rate / 8.0 * 0.010;
        }
        None
    }

    #[test]
    fn a_plateau_of_a_measuring_phase_is_the_paths_rate_and_its_smallest_rtt() {
        let t0 = Instant::now();
        let rtt = Some(Duration::from_millis(50));
        let mut w = PathWatch::new(
            t0,
            rtt,
            Direction::Receive,
            true,
            Duration::from_secs(4),
            8,
            Duration::from_millis(2),
        );
        let o = run(&mut w, t0, 200.0, 4000).expect("the pipe fills");
        assert!(o.full_pipe, "{o:?}");
        let m = w
            .measurement(&SideResult::default())
            .expect("a measurement");
        assert!(m.full_pipe);
        assert_eq!(m.min_rtt, Duration::from_millis(50));
        let mbit = m.rate.0 as f64 / 1e6;
        assert!((190.0..=210.0).contains(&mbit), "{mbit}");
        assert_eq!(m.direction, Direction::Receive);
    }

    /// A measuring watch of a phase the server receives, across a 50 ms path.
    fn receiving(t0: Instant) -> PathWatch {
        watch(
            t0,
            Some(Duration::from_millis(50)),
            Direction::Receive,
            true,
        )
    }

    #[test]
    fn a_receiving_watch_does_not_settle_on_rounds_with_holes() {
        // In order, 40 Mbit/s for three steady rounds after a 200 Mbit/s slow start, while
        // packets keep arriving out of order; then the holes fill and clean rounds follow.
        let t0 = Instant::now();
        let mut w = receiving(t0);
        let rounds = [
            (25.0, 0),
            (50.0, 0),
            (100.0, 0),
            (200.0, 0),
            (200.0, 0),
            (40.0, 300),
            (40.0, 300),
            (40.0, 300),
            (40.0, 300),
            (520.0, 100),
            (200.0, 0),
            (200.0, 0),
            (200.0, 0),
            (200.0, 0),
            (200.0, 0),
        ];
        let (mut delivered, mut ooo) = (0f64, 0u64);
        let mut settled = None;
        for (i, (mbit, holes)) in rounds.iter().enumerate() {
            // Five observations a round, the round's holes seen from its second on.
            for k in 0..5u32 {
                let now = t0 + Duration::from_millis(50 * i as u64 + 10 * u64::from(k) + 10);
                delivered += mbit * 1e6 / 8.0 * 0.010;
                if k == 1 {
                    ooo += holes;
                }
                let obs = Observation {
                    progress: delivered as u64,
                    delivered: delivered as u64,
                    min_rtt: Some(Duration::from_millis(50)),
                    out_of_order: Some(ooo),
                };
                settled = settled.or(w.observe(now, &obs));
            }
        }
        let o = settled.expect("settled on the clean rounds");
        let rate = o.rate.expect("a rate").0 as f64 / 1e6;
        assert!((190.0..=210.0).contains(&rate), "{o:?}");
    }

    #[test]
    fn a_plateau_of_a_phase_its_buffers_may_limit_is_only_a_lower_bound() {
        let t0 = Instant::now();
        let mut w = watch(t0, Some(Duration::from_millis(50)), Direction::Send, false);
        assert_eq!(run(&mut w, t0, 50.0, 3000).map(|o| o.full_pipe), Some(true));
        let m = w.measurement(&SideResult::default()).expect("measured");
        assert!(!m.full_pipe);
        // Until the client says the transfer measures in band.
        w.hinted(false);
        assert!(w.measurement(&SideResult::default()).expect("m").full_pipe);
    }

    #[test]
    fn a_plateau_the_client_found_beside_another_flow_is_only_a_lower_bound() {
        let t0 = Instant::now();
        // A phase that measures in band from its start (a path never seen).
        let mut w = receiving(t0);
        assert_eq!(run(&mut w, t0, 50.0, 3000).map(|o| o.full_pipe), Some(true));
        // The client's hint: what its streams got beside another flow's queue.
        w.hinted(true);
        let m = w.measurement(&SideResult::default()).expect("measured");
        assert!(!m.full_pipe, "{m:?}");
        assert!((45..=55).contains(&(m.rate.0 / 1_000_000)), "{m:?}");
        // A later hint of the path's own rate (the other flow left, a correction) decides.
        w.hinted(false);
        assert!(w.measurement(&SideResult::default()).expect("m").full_pipe);
    }

    #[test]
    fn without_observations_the_result_gives_a_lower_bound_and_no_rtt_gives_nothing() {
        let t0 = Instant::now();
        let w = watch(t0, None, Direction::Receive, true);
        assert!(!w.observed());
        let r = SideResult {
            streams: vec![stream(1_000_000, 1.0, 2.0, Some(30_000))],
            ..SideResult::default()
        };
        let m = w.measurement(&r).expect("from the result");
        assert_eq!(m.rate, Rate::mbit(8));
        assert!(!m.full_pipe);
        assert_eq!(m.min_rtt, Duration::from_millis(30));
        let no_rtt = SideResult {
            streams: vec![stream(1_000_000, 1.0, 2.0, None)],
            ..SideResult::default()
        };
        assert_eq!(w.measurement(&no_rtt), None);
        assert_eq!(w.measurement(&SideResult::default()), None);
    }

    #[test]
    fn observations_before_they_are_due_are_ignored_and_rounds_are_bounded() {
        let t0 = Instant::now();
        let mut w = watch(
            t0,
            Some(Duration::from_secs(3600)),
            Direction::Receive,
            true,
        );
        // A client's absurd RTT cannot make rounds longer than a second.
        assert_eq!(w.next_sample(), t0 + Duration::from_millis(250));
        assert_eq!(w.observe(t0, &Observation::default()), None);
        assert!(!w.observed());
    }
}
