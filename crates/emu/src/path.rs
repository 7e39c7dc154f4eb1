//! One direction of an emulated path: loss, then the bottleneck (queue + rate), then the
//! delay line, with the counters of that direction.

use crate::config::PathConfig;
use crate::packet::Packet;
use crate::stage::{Bottleneck, DelayLine, RandomLoss, Stage};
use crate::stats::{DirStats, Drops, LatenessHistogram};
use std::time::Duration;
use tcptune_core::Time;

/// The longest a segment of a super-packet may wait for the rest of it on a rate-limited
/// path (see [`Bottleneck`]): 250 us.
pub const DEFAULT_MAX_BURST: Duration = Duration::from_micros(250);

/// splitmix64: derives independent seeds from one.
fn mix(seed: u64, salt: u64) -> u64 {
    let mut z = seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One direction of the path.
///
/// # Calling order
///
/// 1. [`push`](Self::push) each packet read from the input as soon as it is read, with the
///    time it was read.
/// 2. [`poll_out`](Self::poll_out) with the current time until it returns `None`, writing
///    each packet to the output right away (the lateness of each packet is measured against
///    that `now`); report a refused write with [`write_failed`](Self::write_failed).
/// 3. Wait until [`poll_timeout`](Self::poll_timeout) or the next packet, whichever is first.
///
/// `now` must never go backwards.
#[derive(Debug)]
pub struct Path {
    loss: RandomLoss,
    link: Bottleneck,
    delay: DelayLine,
    stats: DirStats,
    lateness: LatenessHistogram,
}

impl Path {
    /// Direction `direction` (0 = A→B, 1 = B→A; each gets its own random streams) of `cfg`.
    pub fn new(cfg: &PathConfig, direction: u64) -> Path {
        Path::with_max_burst(cfg, direction, DEFAULT_MAX_BURST)
    }

    /// Like [`new`](Self::new) with a different burst bound for super-packets.
    pub fn with_max_burst(cfg: &PathConfig, direction: u64, max_burst: Duration) -> Path {
        let seed = mix(cfg.seed, direction);
        Path {
            loss: RandomLoss::new(cfg.loss, mix(seed, 1)),
            link: Bottleneck::new(cfg.rate, cfg.queue_caps(), max_burst),
            delay: DelayLine::new(cfg.delay, cfg.jitter, cfg.reorder, mix(seed, 2)),
            stats: DirStats::default(),
            lateness: LatenessHistogram::default(),
        }
    }

    /// A packet arrived at `now`.
    pub fn push(&mut self, now: Time, mut packet: Packet) {
        self.stats.packets_in += u64::from(packet.segments());
        self.stats.bytes_in += packet.wire_bytes();
        self.stats.reads += 1;
        packet.due = now;
        packet.seg_spacing = Duration::ZERO;
        self.loss.push(now, packet);
        while let Some(p) = self.loss.poll_out(now) {
            self.link.push(now, p);
        }
        // The link has scheduled each packet already (its due time is when its last bit
        // leaves the link); hand them to the delay line at once.
        while let Some(p) = self.link.poll_out(Time::from_nanos(u64::MAX)) {
            self.delay.push(now, p);
        }
    }

    /// A packet that could not even be parsed (counted as dropped, malformed).
    pub fn malformed(&mut self, ip_bytes: usize) {
        self.stats.packets_in += 1;
        self.stats.bytes_in += ip_bytes as u64;
        self.stats.reads += 1;
        self.stats.drops.malformed += 1;
    }

    /// The next packet due by `now`; its lateness is recorded against `now`.
    pub fn poll_out(&mut self, now: Time) -> Option<Packet> {
        let p = self.delay.poll_out(now)?;
        let segs = p.segments();
        let last_late = now.saturating_since(p.due);
        if p.seg_spacing.is_zero() || segs == 1 {
            self.lateness.record_n(last_late, u64::from(segs));
        } else {
            for i in 0..segs {
                self.lateness
                    .record(last_late + p.seg_spacing * (segs - 1 - i));
            }
        }
        self.stats.packets_out += u64::from(segs);
        self.stats.bytes_out += p.wire_bytes();
        self.stats.writes += 1;
        Some(p)
    }

    /// The output refused a packet returned by [`poll_out`](Self::poll_out).
    pub fn write_failed(&mut self, p: &Packet) {
        let segs = u64::from(p.segments());
        self.stats.packets_out = self.stats.packets_out.saturating_sub(segs);
        self.stats.bytes_out = self.stats.bytes_out.saturating_sub(p.wire_bytes());
        self.stats.drops.write_failed += segs;
    }

    /// When the next packet is due (`None` when the path is empty).
    pub fn poll_timeout(&self) -> Option<Time> {
        self.delay.poll_timeout()
    }

    /// The lateness histogram.
    pub fn lateness(&self) -> &LatenessHistogram {
        &self.lateness
    }

    /// Forget counters and lateness so far (the packets inside stay).
    pub fn reset_counters(&mut self) {
        let in_flight = self.in_flight();
        self.stats = DirStats::default();
        self.lateness = LatenessHistogram::default();
        self.link.dropped = 0;
        self.link.peak_bytes = 0;
        self.link.peak_packets = 0;
        self.loss.dropped = 0;
        // Keep in-flight accounting consistent: count what is inside as already in.
        self.stats.packets_in = in_flight;
    }

    fn in_flight(&self) -> u64 {
        let s = &self.stats;
        (s.packets_in)
            .saturating_sub(s.packets_out)
            .saturating_sub(s.drops.write_failed)
            .saturating_sub(self.loss.dropped)
            .saturating_sub(self.link.dropped)
            .saturating_sub(s.drops.malformed)
    }

    /// The counters of this direction.
    pub fn stats(&self) -> DirStats {
        let mut s = self.stats.clone();
        s.drops = Drops {
            queue: self.link.dropped,
            loss: self.loss.dropped,
            ..s.drops
        };
        s.queue_peak_bytes = self.link.peak_bytes;
        s.queue_peak_packets = self.link.peak_packets;
        s.in_flight_packets = self.in_flight();
        s.lateness = self.lateness.summary();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::QueueLimit;
    use tcptune_core::{Bytes, Rate};

    #[test]
    fn rate_limited_path_adds_serialization_then_delay() {
        let cfg = PathConfig {
            delay: Duration::from_millis(10),
            rate: Some(Rate::mbit(100)),
            ..PathConfig::default()
        };
        let mut path = Path::new(&cfg, 0);
        path.push(Time::ZERO, Packet::from_ip(&[0x45; 1250]));
        assert_eq!(path.poll_timeout(), Some(Time::from_micros(10_100)));
        let p = path.poll_out(Time::from_micros(10_150));
        assert!(p.is_some());
        let s = path.stats();
        assert_eq!((s.packets_in, s.packets_out, s.bytes_out), (1, 1, 1250));
        assert_eq!(s.lateness.samples, 1);
        assert!((49.0..=50.0).contains(&s.lateness.max_us));
        assert_eq!(s.in_flight_packets, 0);
    }

    #[test]
    fn drops_are_counted_by_cause() {
        let cfg = PathConfig {
            rate: Some(Rate::mbit(8)),
            queue: QueueLimit::Bytes(Bytes(3000)),
            loss: 0.5,
            seed: 5,
            ..PathConfig::default()
        };
        let mut path = Path::new(&cfg, 0);
        for _ in 0..100 {
            path.push(Time::ZERO, Packet::from_ip(&[0x45; 1000]));
        }
        let s = path.stats();
        assert!(s.drops.loss > 20 && s.drops.loss < 80, "{:?}", s.drops);
        assert_eq!(s.drops.queue, 100 - s.drops.loss - 3);
        assert_eq!(s.in_flight_packets, 3);
        assert_eq!(s.queue_peak_bytes, 3000);
    }

    #[test]
    fn directions_draw_different_random_streams() {
        let cfg = PathConfig {
            loss: 0.5,
            ..PathConfig::default()
        };
        let run = |dir| {
            let mut path = Path::new(&cfg, dir);
            for _ in 0..64 {
                path.push(Time::ZERO, Packet::from_ip(&[0x45; 100]));
            }
            path.stats().drops.loss
        };
        assert_eq!(run(0), run(0));
        let mut differs = false;
        for dir in 1..5 {
            differs |= run(dir) != run(0);
        }
        assert!(differs);
    }
}
