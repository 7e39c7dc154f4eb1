//! Counters of one direction of the path and of a whole topology, and the lateness
//! histogram behind their percentiles.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Version of the [`EmuStats`] JSON layout.
pub const STATS_SCHEMA_VERSION: u32 = 1;

const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;

/// A log-linear histogram of durations (16 buckets per power of two: values are reported
/// rounded up to within 6.25%). Exact maximum and count.
#[derive(Clone, Debug)]
pub struct LatenessHistogram {
    counts: Box<[u64]>,
    total: u64,
    max_ns: u64,
    sum_ns: u128,
}

impl Default for LatenessHistogram {
    fn default() -> Self {
        LatenessHistogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            total: 0,
            max_ns: 0,
            sum_ns: 0,
        }
    }
}

fn bucket_of(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros();
    let shift = msb - SUB_BITS;
    let mantissa = (v >> shift) as usize & (SUB - 1);
    (shift as usize + 1) * SUB + mantissa
}

/// The largest value that falls in bucket `b`.
fn bucket_top(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let shift = (b / SUB - 1) as u32;
    let mantissa = (b % SUB) as u64;
    let low = (SUB as u64 + mantissa) << shift;
    low + ((1u64 << shift) - 1)
}

impl LatenessHistogram {
    /// Record `n` samples of `value`.
    pub fn record_n(&mut self, value: Duration, n: u64) {
        if n == 0 {
            return;
        }
        let ns = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX);
        self.counts[bucket_of(ns)] += n;
        self.total += n;
        self.max_ns = self.max_ns.max(ns);
        self.sum_ns += u128::from(ns) * u128::from(n);
    }

    /// Record one sample.
    pub fn record(&mut self, value: Duration) {
        self.record_n(value, 1);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The largest sample.
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.max_ns)
    }

    /// The `q` quantile (0..=1), rounded up to its bucket's top (never above the maximum).
    pub fn quantile(&self, q: f64) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Duration::from_nanos(bucket_top(b).min(self.max_ns));
            }
        }
        self.max()
    }

    /// Add another histogram's samples.
    pub fn merge(&mut self, other: &LatenessHistogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.total += other.total;
        self.max_ns = self.max_ns.max(other.max_ns);
        self.sum_ns += other.sum_ns;
    }

    /// Summary for reports.
    pub fn summary(&self) -> LatenessSummary {
        let us = |d: Duration| d.as_nanos() as f64 / 1e3;
        LatenessSummary {
            samples: self.total,
            mean_us: if self.total == 0 {
                0.0
            } else {
                self.sum_ns as f64 / self.total as f64 / 1e3
            },
            p50_us: us(self.quantile(0.50)),
            p99_us: us(self.quantile(0.99)),
            p999_us: us(self.quantile(0.999)),
            max_us: us(self.max()),
        }
    }
}

/// How late packets left the emulator compared to when they were due, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatenessSummary {
    /// Packets measured (segments of super-packets count one by one).
    pub samples: u64,
    /// Mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Maximum.
    pub max_us: f64,
}

/// Packets dropped, by cause (counted in wire packets: a super-packet counts its segments).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drops {
    /// The drop-tail queue was full.
    pub queue: u64,
    /// Random loss.
    pub loss: u64,
    /// Packets the emulator could not parse (a GSO header it does not understand).
    pub malformed: u64,
    /// The kernel refused the write to the output TUN device.
    pub write_failed: u64,
    /// Dropped by the kernel before the emulator read them: the input TUN device's queue
    /// (10,000 packets) was full because the emulator fell behind (its `tx_dropped`).
    #[serde(default)]
    pub device: u64,
}

impl Drops {
    /// All drops.
    pub fn total(&self) -> u64 {
        self.queue + self.loss + self.malformed + self.write_failed + self.device
    }
}

/// Counters of one direction.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DirStats {
    /// Packets that entered the path (wire packets).
    pub packets_in: u64,
    /// IP bytes that entered the path.
    pub bytes_in: u64,
    /// Packets delivered to the other side.
    pub packets_out: u64,
    /// IP bytes delivered to the other side.
    pub bytes_out: u64,
    /// Write calls made to deliver them (fewer than packets with GSO).
    pub writes: u64,
    /// Reads from the input device.
    pub reads: u64,
    /// Drops by cause.
    pub drops: Drops,
    /// Largest queue seen, in bytes.
    pub queue_peak_bytes: u64,
    /// Largest queue seen, in packets.
    pub queue_peak_packets: u64,
    /// Packets inside the emulator now (queued or in flight).
    pub in_flight_packets: u64,
    /// Lateness of each delivered packet against its due time.
    pub lateness: LatenessSummary,
    /// Seconds these counters cover (since the start or the last reset, until they were
    /// taken): `bytes_out * 8 / window_s` is the rate delivered.
    pub window_s: f64,
}

/// Counters of a topology, both directions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EmuStats {
    /// Layout version ([`STATS_SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// Topology name.
    pub name: String,
    /// The path, for humans.
    pub path: String,
    /// Seconds since the topology came up.
    pub uptime_s: f64,
    /// Whether the emulator threads are running.
    pub running: bool,
    /// Side A to side B (path 0; drops by the devices, which all paths share, count here).
    pub a_to_b: DirStats,
    /// Side B to side A (path 0, as `a_to_b`).
    pub b_to_a: DirStats,
    /// The extra paths' counters (path 1 first; empty for a topology of one path).
    #[serde(default)]
    pub extra: Vec<PathStats>,
}

impl EmuStats {
    /// The counters of path `index` (0: `a_to_b` and `b_to_a`; then `extra`).
    pub fn path(&self, index: usize) -> Option<PathStats> {
        match index {
            0 => Some(PathStats {
                a_to_b: self.a_to_b.clone(),
                b_to_a: self.b_to_a.clone(),
            }),
            i => self.extra.get(i - 1).cloned(),
        }
    }
}

/// Counters of one path, both directions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PathStats {
    /// Side A to side B.
    pub a_to_b: DirStats,
    /// Side B to side A.
    pub b_to_a: DirStats,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_bucket_precision() {
        let mut h = LatenessHistogram::default();
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let p50 = h.quantile(0.5).as_nanos() as f64;
        assert!((500_000.0..=500_000.0 * 1.0625).contains(&p50), "{p50}");
        let p99 = h.quantile(0.99).as_nanos() as f64;
        assert!((990_000.0..=990_000.0 * 1.0625).contains(&p99), "{p99}");
        assert_eq!(h.max(), Duration::from_micros(1000));
        assert_eq!(h.quantile(1.0), Duration::from_micros(1000));
    }

    #[test]
    fn bucket_top_bounds_every_value_of_its_bucket() {
        for v in [0u64, 1, 15, 16, 17, 31, 32, 1000, 123_456, u64::MAX / 3] {
            let b = bucket_of(v);
            assert!(bucket_top(b) >= v, "{v}");
            assert!(b == 0 || bucket_top(b - 1) < v, "{v}");
        }
    }

    #[test]
    fn empty_histogram_reports_zero() {
        let h = LatenessHistogram::default();
        assert_eq!(h.summary(), LatenessSummary::default());
    }
}
