//! What the streams of one transfer end measure together while the path's rate is not
//! known: each stream reports how much it delivers per minimum RTT, and each sizes its buffer
//! from the *average* stream rather than from its own. Streams that share a bottleneck get
//! uneven, shifting shares of it; sizing each for its own momentary share would let every
//! stream's buffer reach the largest share it ever had, and the sum of those is more than the
//! pipe. Sized from the average, the buffers together follow what the end delivers in all.
//!
//! They also share what one of them sees first: that the pipe is full (a queue). It is one
//! bottleneck; a stream that has not noticed yet would otherwise keep the room to double
//! that slow start needs, and the sum of the buffers with it.
//!
//! Once the rate is known they share what they deliver together, and whether one of them
//! found the path crowded (a queue, with the end delivering well below the rate it
//! measured: see `AutoTuner::crowded_check`): that too is the bottleneck's, not one
//! stream's.

use crate::time::Time;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The streams of one transfer end (one per [`crate::TunerFactory`]), shared by their
/// `auto` tuners.
#[derive(Clone, Debug, Default)]
pub struct MeasureShare(Arc<Mutex<Inner>>);

#[derive(Debug, Default)]
struct Inner {
    per_rtt: HashMap<u32, u64>,
    full: bool,
    /// Once settled: each stream's delivery rate (bits per second) and when it was taken.
    rates: HashMap<u32, (Time, u64)>,
    crowded: bool,
}

impl MeasureShare {
    /// A share no stream has reported to.
    pub fn new() -> MeasureShare {
        MeasureShare::default()
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut g = match self.0.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut g)
    }

    /// Stream `stream` delivers `per_rtt` bytes per minimum RTT now. Returns the average
    /// over the streams that have reported (this one included).
    pub fn report(&self, stream: u32, per_rtt: u64) -> u64 {
        self.with(|m| {
            m.per_rtt.insert(stream, per_rtt);
            let n = m.per_rtt.len().max(1) as u64;
            m.per_rtt.values().sum::<u64>() / n
        })
    }

    /// Stream `stream` measures no more.
    pub fn leave(&self, stream: u32) {
        self.with(|m| {
            m.per_rtt.remove(&stream);
        });
    }

    /// Stream `stream` closed: it neither measures nor delivers.
    pub fn close(&self, stream: u32) {
        self.with(|m| {
            m.per_rtt.remove(&stream);
            m.rates.remove(&stream);
        });
    }

    /// Stream `stream` delivered `rate` (bits per second) over a window that ended at `now`.
    /// Returns what the streams of this end deliver together, and how many streams that
    /// counts: the reports at most `fresh` old (a stream that stopped reporting no longer
    /// counts).
    pub fn report_rate(&self, stream: u32, now: Time, rate: u64, fresh: Duration) -> (u64, u32) {
        self.with(|m| {
            m.rates.insert(stream, (now, rate));
            m.rates
                .values()
                .filter(|&&(t, _)| now.saturating_since(t) <= fresh)
                .fold((0, 0), |(sum, n), &(_, r)| (sum + r, n + 1))
        })
    }

    /// A stream of this end found the path crowded by flows the transfer does not control
    /// (`true`), or its own again (`false`).
    pub fn set_crowded(&self, crowded: bool) {
        self.with(|m| m.crowded = crowded);
    }

    /// Whether a stream of this end found the path crowded.
    pub fn is_crowded(&self) -> bool {
        self.with(|m| m.crowded)
    }

    /// What the streams deliver together per minimum RTT.
    pub fn total(&self) -> u64 {
        self.with(|m| m.per_rtt.values().sum())
    }

    /// A stream of this end saw the pipe full.
    pub fn mark_full(&self) {
        self.with(|m| m.full = true);
    }

    /// Whether a stream of this end has seen the pipe full.
    pub fn is_full(&self) -> bool {
        self.with(|m| m.full)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_sized_from_the_average_of_what_they_report() {
        let s = MeasureShare::new();
        assert_eq!(s.report(0, 300), 300);
        assert_eq!(s.report(1, 100), 200);
        assert_eq!(
            s.report(0, 500),
            300,
            "a stream's new report replaces its old one"
        );
        assert_eq!(s.total(), 600);
        s.leave(0);
        assert_eq!(s.total(), 100);
        let t = s.clone();
        assert_eq!(t.report(2, 300), 200, "clones share the same streams");
    }

    #[test]
    fn the_end_delivers_the_sum_of_its_streams_fresh_reports() {
        let s = MeasureShare::new();
        let fresh = Duration::from_millis(100);
        let ms = Time::from_millis;
        assert_eq!(s.report_rate(0, ms(0), 300, fresh), (300, 1));
        assert_eq!(s.report_rate(1, ms(50), 200, fresh), (500, 2));
        assert_eq!(
            s.report_rate(1, ms(150), 100, fresh),
            (100, 1),
            "stream 0's report is 150 ms old: it no longer counts"
        );
        s.close(1);
        assert_eq!(
            s.report_rate(0, ms(160), 50, fresh),
            (50, 1),
            "a closed stream is gone"
        );
        assert!(!s.is_crowded());
        s.clone().set_crowded(true);
        assert!(s.is_crowded(), "one stream tells the others");
        s.clone().set_crowded(false);
        assert!(!s.is_crowded(), "and that it is clear again");
    }

    #[test]
    fn one_stream_seeing_the_pipe_full_tells_every_stream_of_its_end() {
        let s = MeasureShare::new();
        let t = s.clone();
        assert!(!t.is_full());
        s.mark_full();
        assert!(t.is_full());
        assert!(
            !MeasureShare::new().is_full(),
            "another end's share is apart"
        );
    }
}
