//! What the streams of one transfer end measure together while the path's rate is not
//! known: each stream reports how much it delivers per minimum RTT, and each sizes its buffer
//! from the *average* stream rather than from its own. Streams that share a bottleneck get
//! uneven, shifting shares of it; sizing each for its own momentary share would let every
//! stream's buffer reach the largest share it ever had, and the sum of those is more than the
//! pipe. Sized from the average, the buffers together follow what the end delivers in all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The streams of one transfer end (one per [`crate::TunerFactory`]), shared by their
/// `auto` tuners.
#[derive(Clone, Debug, Default)]
pub struct MeasureShare(Arc<Mutex<HashMap<u32, u64>>>);

impl MeasureShare {
    /// A share no stream has reported to.
    pub fn new() -> MeasureShare {
        MeasureShare::default()
    }

    fn with<R>(&self, f: impl FnOnce(&mut HashMap<u32, u64>) -> R) -> R {
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
            m.insert(stream, per_rtt);
            let n = m.len().max(1) as u64;
            m.values().sum::<u64>() / n
        })
    }

    /// Stream `stream` closed (or measures no more).
    pub fn leave(&self, stream: u32) {
        self.with(|m| {
            m.remove(&stream);
        });
    }

    /// What the streams deliver together per minimum RTT.
    pub fn total(&self) -> u64 {
        self.with(|m| m.values().sum())
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
}
