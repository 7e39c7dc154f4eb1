//! What is known about a path, built from samples: minimum and smoothed RTT, bottleneck rate
//! and their product, the bandwidth-delay product (BDP).
//!
//! [`PathEstimator`] is fed snapshots (or raw samples) and answers a [`PathEstimate`]. The
//! bottleneck rate is the largest recent rate sample that was not application-limited: a
//! sender that had nothing to send measures its own pace, not the path's (BBR's reasoning).
//! Rate samples come from `tcpi_delivery_rate` and from the growth of `tcpi_bytes_acked`
//! (sender) or `tcpi_bytes_received` (receiver) between snapshots.

use crate::snapshot::TcpSnapshot;
use crate::time::Time;
use crate::tuner::PathHint;
use crate::units::{Bytes, Rate};
use std::collections::VecDeque;
use std::time::Duration;

/// A point estimate of a path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathEstimate {
    /// Smallest RTT seen in the window (10 s by default).
    pub min_rtt: Option<Duration>,
    /// Smoothed RTT: the kernel's (`tcpi_rtt`) from snapshots, or raw samples smoothed with
    /// gain 1/8.
    pub srtt: Option<Duration>,
    /// Bottleneck rate: the largest recent rate sample that was not application-limited.
    pub rate: Option<Rate>,
}

impl PathEstimate {
    /// The estimate a [`PathHint`] gives before any sample (RTT used as both minimum and
    /// smoothed RTT).
    pub fn from_hint(hint: &PathHint) -> PathEstimate {
        PathEstimate {
            min_rtt: hint.rtt,
            srtt: hint.rtt,
            rate: hint.rate,
        }
    }

    /// Build an estimate from a sequence of `(now, snapshot)` samples.
    pub fn from_samples<'a>(
        samples: impl IntoIterator<Item = (Time, &'a TcpSnapshot)>,
    ) -> PathEstimate {
        let mut e = PathEstimator::new();
        for (now, s) in samples {
            e.observe(now, s);
        }
        e.estimate()
    }

    /// Bandwidth-delay product: bottleneck rate times minimum RTT (`None` until both are
    /// known).
    pub fn bdp(&self) -> Option<Bytes> {
        Some(self.rate?.bdp(self.min_rtt?))
    }

    /// Whether the smoothed RTT is well above the minimum (a queue is building): more than
    /// an eighth of the minimum and more than 2 ms above it.
    pub fn rtt_inflated(&self) -> bool {
        match (self.srtt, self.min_rtt) {
            (Some(s), Some(m)) => s > m + (m / 8).max(Duration::from_millis(2)),
            _ => false,
        }
    }
}

/// Accumulates samples into a [`PathEstimate`].
#[derive(Clone, Debug)]
pub struct PathEstimator {
    /// RTT samples (time, RTT) kept as a monotonic deque: a windowed minimum.
    rtts: VecDeque<(Time, Duration)>,
    srtt: Option<Duration>,
    /// Rate samples (time, bit/s) kept as a monotonic deque: a windowed maximum.
    rates: VecDeque<(Time, u64)>,
    rate_window: Duration,
    last: Option<Counters>,
}

#[derive(Clone, Copy, Debug)]
struct Counters {
    at: Time,
    acked: Option<u64>,
    received: Option<u64>,
}

impl Default for PathEstimator {
    fn default() -> Self {
        PathEstimator::new()
    }
}

impl PathEstimator {
    /// Default length of the bottleneck-rate window.
    pub const DEFAULT_RATE_WINDOW: Duration = Duration::from_secs(10);

    /// An estimator with no samples and a 10 s rate window.
    pub fn new() -> PathEstimator {
        PathEstimator {
            rtts: VecDeque::new(),
            srtt: None,
            rates: VecDeque::new(),
            rate_window: Self::DEFAULT_RATE_WINDOW,
            last: None,
        }
    }

    /// Keep rate and RTT samples for `window` (older ones are forgotten, so the estimate
    /// follows a path whose rate drops or whose RTT grows).
    pub fn with_rate_window(mut self, window: Duration) -> PathEstimator {
        self.rate_window = window;
        self
    }

    fn push_min_rtt(&mut self, now: Time, rtt: Duration) {
        while let Some(&(_, r)) = self.rtts.back() {
            if r >= rtt {
                self.rtts.pop_back();
            } else {
                break;
            }
        }
        self.rtts.push_back((now, rtt));
    }

    /// Start from a hint: its RTT seeds the RTTs, its rate counts as one rate sample at `now`.
    pub fn seed(&mut self, now: Time, hint: &PathHint) {
        if let Some(rtt) = hint.rtt {
            self.observe_rtt_at(now, rtt);
        }
        if let Some(rate) = hint.rate {
            self.observe_rate(now, rate, false);
        }
    }

    /// One raw RTT sample taken at `now` (smoothed with gain 1/8).
    pub fn observe_rtt_at(&mut self, now: Time, rtt: Duration) {
        if rtt.is_zero() {
            return;
        }
        self.push_min_rtt(now, rtt);
        self.srtt = Some(match self.srtt {
            None => rtt,
            Some(s) => (s * 7 + rtt) / 8,
        });
        self.expire(now);
    }

    /// One rate sample; application-limited samples are ignored.
    pub fn observe_rate(&mut self, now: Time, rate: Rate, app_limited: bool) {
        if app_limited || rate.0 == 0 {
            return;
        }
        while let Some(&(_, r)) = self.rates.back() {
            if r <= rate.0 {
                self.rates.pop_back();
            } else {
                break;
            }
        }
        self.rates.push_back((now, rate.0));
        self.expire(now);
    }

    fn expire(&mut self, now: Time) {
        while let Some(&(t, _)) = self.rates.front() {
            if now.saturating_since(t) > self.rate_window && self.rates.len() > 1 {
                self.rates.pop_front();
            } else {
                break;
            }
        }
        while let Some(&(t, _)) = self.rtts.front() {
            if now.saturating_since(t) > self.rate_window && self.rtts.len() > 1 {
                self.rtts.pop_front();
            } else {
                break;
            }
        }
    }

    /// One snapshot: its RTTs, its delivery rate, and the byte counters' growth since the
    /// previous snapshot.
    pub fn observe(&mut self, now: Time, s: &TcpSnapshot) {
        if let Some(rtt) = s.rtt() {
            // The kernel's RTT is already smoothed (per ACK): take it as is rather than
            // smoothing it again, so that a queue shows within an RTT. The minimum is taken
            // over these too (the kernel's own minimum spans five minutes, too long to
            // notice a path whose RTT grew).
            self.push_min_rtt(now, rtt);
            self.srtt = Some(rtt);
        } else if let Some(m) = s.min_rtt() {
            self.push_min_rtt(now, m);
        }
        if let Some(r) = s.delivery_rate_bytes_per_sec {
            self.observe_rate(now, Rate(r.saturating_mul(8)), s.delivery_rate_app_limited);
        }
        let cur = Counters {
            at: now,
            acked: s.bytes_acked,
            received: s.bytes_received,
        };
        if let Some(prev) = self.last {
            let dt = now.saturating_since(prev.at);
            if dt >= Duration::from_millis(1) {
                if let (Some(a), Some(b)) = (prev.acked, cur.acked) {
                    let r = Rate::from_bytes_over(Bytes(b.saturating_sub(a)), dt);
                    self.observe_rate(now, r, s.delivery_rate_app_limited);
                }
                // The app-limited flag describes this end's sending, not the peer's: a
                // receiver's byte counter is always a sample of the path (or of the peer).
                if let (Some(a), Some(b)) = (prev.received, cur.received) {
                    let r = Rate::from_bytes_over(Bytes(b.saturating_sub(a)), dt);
                    self.observe_rate(now, r, false);
                }
            }
        }
        let stale = match self.last {
            None => true,
            Some(p) => now.saturating_since(p.at) >= Duration::from_millis(1),
        };
        if stale {
            self.last = Some(cur);
        }
        self.expire(now);
    }

    /// The estimate so far.
    pub fn estimate(&self) -> PathEstimate {
        PathEstimate {
            min_rtt: self.rtts.front().map(|&(_, r)| r),
            srtt: self.srtt,
            rate: self.rates.front().map(|&(_, r)| Rate(r)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(rtt_ms: u64, acked: u64, rate_bps: u64, app_limited: bool) -> TcpSnapshot {
        TcpSnapshot {
            rtt_us: (rtt_ms * 1000) as u32,
            min_rtt_us: Some((rtt_ms * 1000) as u32),
            bytes_acked: Some(acked),
            delivery_rate_bytes_per_sec: Some(rate_bps / 8),
            delivery_rate_app_limited: app_limited,
            ..TcpSnapshot::empty()
        }
    }

    #[test]
    fn bdp_is_rate_times_min_rtt() {
        let e = PathEstimate {
            min_rtt: Some(Duration::from_millis(100)),
            srtt: Some(Duration::from_millis(120)),
            rate: Some(Rate::gbit(1)),
        };
        assert_eq!(e.bdp(), Some(Bytes(12_500_000)));
        assert!(PathEstimate::default().bdp().is_none());
    }

    #[test]
    fn rate_ignores_app_limited_samples_in_slow_start() {
        // Slow start at 50 ms: 12.5 MB/s, 25 MB/s, then an app-limited burst claiming more.
        let s = [
            (Time::from_millis(50), snap(50, 625_000, 100_000_000, false)),
            (
                Time::from_millis(100),
                snap(50, 1_875_000, 200_000_000, false),
            ),
            (
                Time::from_millis(150),
                snap(50, 2_000_000, 900_000_000, true),
            ),
        ];
        let e = PathEstimate::from_samples(s.iter().map(|(t, s)| (*t, s)));
        assert_eq!(e.rate, Some(Rate::mbit(200)));
        assert_eq!(e.min_rtt, Some(Duration::from_millis(50)));
        assert_eq!(e.bdp(), Some(Bytes(1_250_000)));
    }

    #[test]
    fn rate_comes_from_acked_bytes_when_delivery_rate_is_missing() {
        let mut a = snap(10, 0, 0, false);
        a.delivery_rate_bytes_per_sec = None;
        let mut b = a.clone();
        b.bytes_acked = Some(1_250_000);
        let e = PathEstimate::from_samples([(Time::ZERO, &a), (Time::from_millis(100), &b)]);
        assert_eq!(e.rate, Some(Rate::mbit(100)));
    }

    #[test]
    fn receiver_rate_comes_from_received_bytes() {
        let a = TcpSnapshot {
            bytes_received: Some(0),
            delivery_rate_app_limited: true,
            ..TcpSnapshot::empty()
        };
        let b = TcpSnapshot {
            bytes_received: Some(2_500_000),
            ..a.clone()
        };
        let e = PathEstimate::from_samples([(Time::ZERO, &a), (Time::from_millis(20), &b)]);
        assert_eq!(e.rate, Some(Rate::gbit(1)));
    }

    #[test]
    fn old_rate_samples_expire_after_the_window() {
        let mut e = PathEstimator::new().with_rate_window(Duration::from_secs(1));
        e.observe_rate(Time::ZERO, Rate::gbit(1), false);
        e.observe_rate(Time::from_millis(500), Rate::mbit(100), false);
        assert_eq!(e.estimate().rate, Some(Rate::gbit(1)));
        e.observe_rate(Time::from_millis(1200), Rate::mbit(50), false);
        assert_eq!(e.estimate().rate, Some(Rate::mbit(100)));
        e.observe_rate(Time::from_millis(1600), Rate::mbit(50), false);
        assert_eq!(e.estimate().rate, Some(Rate::mbit(50)));
    }

    #[test]
    fn rtt_change_moves_srtt_at_once_and_min_rtt_after_the_window() {
        let mut e = PathEstimator::new();
        let mut now = Time::ZERO;
        for _ in 0..20 {
            e.observe_rtt_at(now, Duration::from_millis(25));
            now += Duration::from_millis(25);
        }
        for _ in 0..40 {
            e.observe_rtt_at(now, Duration::from_millis(100));
            now += Duration::from_millis(100);
        }
        let est = e.estimate();
        assert_eq!(est.min_rtt, Some(Duration::from_millis(25)));
        assert!(est.srtt.expect("srtt") > Duration::from_millis(95));
        assert!(est.rtt_inflated());
        for _ in 0..70 {
            e.observe_rtt_at(now, Duration::from_millis(100));
            now += Duration::from_millis(100);
        }
        let est = e.estimate();
        assert_eq!(est.min_rtt, Some(Duration::from_millis(100)));
        assert!(!est.rtt_inflated());
    }

    #[test]
    fn hint_seeds_the_estimate() {
        let hint = PathHint {
            rtt: Some(Duration::from_millis(50)),
            rate: Some(Rate::gbit(1)),
            ..Default::default()
        };
        assert_eq!(PathEstimate::from_hint(&hint).bdp(), Some(Bytes(6_250_000)));
        let mut e = PathEstimator::new();
        e.seed(Time::ZERO, &hint);
        assert_eq!(e.estimate().bdp(), Some(Bytes(6_250_000)));
    }
}
