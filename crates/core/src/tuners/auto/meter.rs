//! What a measuring stream sizes its buffers from once the pipe is full, and how it tells
//! that the pipe is full, from its own samples only.
//!
//! While slow start grows the window, each buffer follows the freshest delivery sample
//! (bytes over the last half RTT) with room to double: a stale sample would hold slow start
//! back. Once the pipe is full that freshness is what overshoots: a sample that ends just
//! after a retransmission filled a hole counts a round of data at once, and slow start's
//! flights arrive in bursts. Buffers only grow, so one such sample would set the peak. After
//! the pipe is full the buffers therefore follow samples taken over at least a round (a
//! stall and the burst that ends it mostly fall in the same one), and the median of the last
//! three of them ([`Recent`]), which one burst does not move.
//!
//! The pipe is full when a queue shows: the smoothed RTT well above the path's minimum
//! ([`queue_shows`], the rule of [`crate::estimate::PathEstimate::rtt_inflated`]). A sender
//! reads it from its own RTT; a receiver from its receive-side RTT estimate (`tcpi_rcv_rtt`,
//! which Linux takes from the timestamps the sender echoes, so it includes the queue).
//! Slow start ends within about a round of the queue appearing, three rounds before the
//! aggregate full-pipe estimator can say so, and every round with room to double in between
//! would add to the peak.

use crate::time::Time;
use std::collections::VecDeque;
use std::time::Duration;

/// Whether a smoothed RTT of `srtt` shows a queue on a path whose minimum is `min`: more
/// than an eighth of the minimum and more than 2 ms above it.
pub(super) fn queue_shows(srtt: Duration, min: Duration) -> bool {
    !srtt.is_zero() && !min.is_zero() && srtt > min + (min / 8).max(Duration::from_millis(2))
}

/// Whether the RTT a transfer's handshake took (before the stream sent anything) and the
/// stream's own lowest RTT (taken in its first rounds, its windows far too small to build a
/// queue) differ by more than [`queue_shows`] allows, either way: a queue that another flow
/// kept before this stream's first packet, or one the handshake saw that later drained (a
/// BBR flow's ProbeRTT, a loss-based flow's backoff). Neither is this stream's own.
pub(super) fn predating_queue(handshake: Option<Duration>, own: Option<Duration>) -> bool {
    match (handshake, own) {
        (Some(h), Some(own)) => queue_shows(own, h) || queue_shows(h, own),
        _ => false,
    }
}

/// The last three delivery samples (bytes per minimum RTT) of a stream, and the cumulative
/// bytes it delivered at its last few snapshots.
#[derive(Clone, Debug, Default)]
pub(super) struct Recent {
    v: [u64; 3],
    n: usize,
    delivered: VecDeque<(Time, u64)>,
}

impl Recent {
    /// Record that `bytes` had been delivered in all at `now`, and return the rate (bytes
    /// per second) since the latest earlier record at least `span` old (else since the
    /// oldest one; `None` without one). Records older than needed are dropped.
    pub(super) fn rate_over(&mut self, now: Time, bytes: u64, span: Duration) -> Option<u64> {
        while self.delivered.len() >= 2
            && self
                .delivered
                .get(1)
                .is_some_and(|&(t, _)| now.saturating_since(t) >= span)
        {
            self.delivered.pop_front();
        }
        let rate = self.delivered.front().and_then(|&(t, b)| {
            let dt = now.saturating_since(t).as_secs_f64();
            (dt > 0.0).then(|| (bytes.saturating_sub(b) as f64 / dt) as u64)
        });
        self.delivered.push_back((now, bytes));
        rate
    }

    /// Add a sample (the oldest of three is dropped).
    pub(super) fn push(&mut self, d: u64) {
        self.v.rotate_left(1);
        self.v[2] = d;
        self.n = (self.n + 1).min(3);
    }

    /// The median of the samples held (of two: the smaller; none: 0).
    pub(super) fn median(&self) -> u64 {
        let mut v: Vec<u64> = self.v[3 - self.n..].to_vec();
        v.sort_unstable();
        match v.len() {
            0 => 0,
            1 => v[0],
            2 => v[0],
            _ => v[1],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_burst_does_not_move_the_median_of_three_samples() {
        let mut r = Recent::default();
        assert_eq!(r.median(), 0);
        r.push(100);
        assert_eq!(r.median(), 100);
        r.push(300);
        assert_eq!(r.median(), 100, "of two, the smaller");
        r.push(110);
        assert_eq!(r.median(), 110);
        r.push(0);
        r.push(250);
        assert_eq!(
            r.median(),
            110,
            "a stall then the burst that fills the hole"
        );
    }

    #[test]
    fn the_rate_over_a_round_spans_a_stall_and_the_burst_that_ends_it() {
        let mut r = Recent::default();
        let ms = |m: u64| Time::from_millis(m);
        let span = Duration::from_millis(100);
        assert_eq!(r.rate_over(ms(0), 0, span), None);
        assert_eq!(r.rate_over(ms(50), 50_000, span), Some(1_000_000));
        assert_eq!(r.rate_over(ms(100), 100_000, span), Some(1_000_000));
        // A stall of half a round, then the hole filled at once: over the round, the rate.
        assert_eq!(r.rate_over(ms(150), 100_000, span), Some(500_000));
        assert_eq!(r.rate_over(ms(200), 200_000, span), Some(1_000_000));
    }

    #[test]
    fn a_queue_shows_an_eighth_and_two_milliseconds_above_the_minimum() {
        let ms = Duration::from_millis;
        assert!(!queue_shows(ms(27), ms(25)));
        assert!(queue_shows(ms(29), ms(25)));
        assert!(!queue_shows(ms(6), ms(5)), "2 ms at least on short paths");
        assert!(queue_shows(ms(120), ms(100)));
        assert!(!queue_shows(Duration::ZERO, ms(25)), "no sample yet");
    }
}
