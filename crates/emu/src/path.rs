//! One direction of an emulated path: loss, then the bottleneck (queue + rate), then the
//! delay line, with the counters of that direction.

use crate::config::{ConfigError, PathConfig};
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
/// `now` must never go backwards. [`set`](Self::set) changes the path between any two
/// calls.
#[derive(Debug)]
pub struct Path {
    cfg: PathConfig,
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
            cfg: cfg.clone(),
            loss: RandomLoss::new(cfg.loss, mix(seed, 1)),
            link: Bottleneck::new(cfg.rate, cfg.queue_caps(), max_burst),
            delay: DelayLine::new(cfg.delay, cfg.jitter, cfg.reorder, mix(seed, 2)),
            stats: DirStats::default(),
            lateness: LatenessHistogram::default(),
        }
    }

    /// The configuration the path runs with now.
    pub fn config(&self) -> &PathConfig {
        &self.cfg
    }

    /// Change delay, jitter, rate, queue and loss of the running path: the new values apply
    /// to packets pushed from now on. Packets inside keep the times they were given, and
    /// the order is always kept: after a drop of the delay (or a rise of the rate), new
    /// packets leave right behind the ones ahead of them rather than overtaking them.
    ///
    /// The MTU (the devices' own), the seed and `reorder` cannot change: asking for other
    /// values is an error, and nothing changes.
    pub fn set(&mut self, cfg: &PathConfig) -> Result<(), ConfigError> {
        cfg.validate()?;
        check_changeable(&self.cfg, cfg)?;
        self.loss.set_probability(cfg.loss);
        self.link.set_rate(cfg.rate, cfg.queue_caps());
        self.delay.set_delay(cfg.delay, cfg.jitter);
        self.cfg = cfg.clone();
        Ok(())
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

/// Refuse changes of what a running path cannot change.
pub(crate) fn check_changeable(old: &PathConfig, new: &PathConfig) -> Result<(), ConfigError> {
    if new.mtu != old.mtu {
        return Err(ConfigError::Unchangeable("the MTU"));
    }
    if new.seed != old.seed {
        return Err(ConfigError::Unchangeable("the seed"));
    }
    if new.reorder != old.reorder {
        return Err(ConfigError::Unchangeable("reorder"));
    }
    Ok(())
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

    fn ms(n: u64) -> Time {
        Time::from_millis(n)
    }

    /// Push one 1250-byte packet with first byte `id` at `t`.
    fn push_at(path: &mut Path, t: Time, id: u8) {
        let mut ip = vec![0x45; 1250];
        ip[1] = id;
        path.push(t, Packet::from_ip(&ip));
    }

    /// Everything that leaves by `until`: (id, due).
    fn drain(path: &mut Path, until: Time) -> Vec<(u8, Time)> {
        std::iter::from_fn(|| path.poll_out(until))
            .map(|p| (p.ip()[1], p.due()))
            .collect()
    }

    fn delay(ms: u64) -> PathConfig {
        PathConfig {
            delay: Duration::from_millis(ms),
            ..PathConfig::default()
        }
    }

    #[test]
    fn rising_delay_applies_to_packets_pushed_after_the_change() {
        let mut path = Path::new(&delay(10), 0);
        push_at(&mut path, ms(0), 1);
        assert!(path.set(&delay(30)).is_ok());
        push_at(&mut path, ms(1), 2);
        assert_eq!(drain(&mut path, ms(100)), vec![(1, ms(10)), (2, ms(31))]);
    }

    #[test]
    fn falling_delay_never_lets_a_packet_overtake_the_one_ahead() {
        let mut path = Path::new(&delay(30), 0);
        push_at(&mut path, ms(0), 1);
        assert!(path.set(&delay(5)).is_ok());
        push_at(&mut path, ms(1), 2);
        push_at(&mut path, ms(40), 3);
        // Packet 2 would be due at 6 ms: it leaves with packet 1 instead, right behind it.
        assert_eq!(
            drain(&mut path, ms(100)),
            vec![(1, ms(30)), (2, ms(30)), (3, ms(45))]
        );
    }

    #[test]
    fn falling_delay_with_reorder_still_keeps_old_packets_first() {
        let cfg = PathConfig {
            reorder: true,
            ..delay(30)
        };
        let mut path = Path::new(&cfg, 0);
        push_at(&mut path, ms(0), 1);
        assert!(path
            .set(&PathConfig {
                reorder: true,
                ..delay(5)
            })
            .is_ok());
        push_at(&mut path, ms(1), 2);
        let ids: Vec<u8> = drain(&mut path, ms(100)).iter().map(|o| o.0).collect();
        assert_eq!(ids, vec![1, 2]);
    }

    fn rate(mbit: u64) -> PathConfig {
        PathConfig {
            rate: Some(Rate::mbit(mbit)),
            queue: QueueLimit::Bytes(Bytes(1 << 20)),
            ..PathConfig::default()
        }
    }

    #[test]
    fn falling_rate_serializes_later_packets_slower_after_the_backlog() {
        // 1250 bytes: 100 us at 100 Mbit/s, 1 ms at 10 Mbit/s.
        let mut path = Path::new(&rate(100), 0);
        push_at(&mut path, ms(0), 1);
        push_at(&mut path, ms(0), 2);
        assert!(path.set(&rate(10)).is_ok());
        push_at(&mut path, ms(0), 3);
        let us = Time::from_micros;
        assert_eq!(
            drain(&mut path, ms(100)),
            vec![(1, us(100)), (2, us(200)), (3, us(1200))]
        );
    }

    #[test]
    fn rising_rate_serializes_later_packets_faster_behind_the_backlog() {
        let mut path = Path::new(&rate(10), 0);
        push_at(&mut path, ms(0), 1);
        assert!(path.set(&rate(100)).is_ok());
        push_at(&mut path, ms(0), 2);
        push_at(&mut path, ms(0), 3);
        let us = Time::from_micros;
        assert_eq!(
            drain(&mut path, ms(100)),
            vec![(1, us(1000)), (2, us(1100)), (3, us(1200))]
        );
    }

    #[test]
    fn removing_the_rate_passes_later_packets_behind_the_backlog() {
        let mut path = Path::new(&rate(10), 0);
        push_at(&mut path, ms(0), 1);
        assert!(path.set(&PathConfig::default()).is_ok());
        push_at(&mut path, ms(0), 2);
        assert_eq!(drain(&mut path, ms(100)), vec![(1, ms(1)), (2, ms(1))]);
    }

    #[test]
    fn loss_change_applies_to_later_packets() {
        let mut path = Path::new(&PathConfig::default(), 0);
        push_at(&mut path, ms(0), 1);
        let lossy = PathConfig {
            loss: 1.0,
            ..PathConfig::default()
        };
        assert!(path.set(&lossy).is_ok());
        push_at(&mut path, ms(0), 2);
        assert_eq!(drain(&mut path, ms(1)), vec![(1, ms(0))]);
        assert_eq!(path.stats().drops.loss, 1);
        assert_eq!(path.config().loss, 1.0);
    }

    #[test]
    fn unchangeable_fields_are_refused_and_nothing_changes() {
        let mut path = Path::new(&delay(10), 0);
        let other_mtu = PathConfig {
            mtu: 9000,
            ..delay(1)
        };
        assert_eq!(
            path.set(&other_mtu),
            Err(ConfigError::Unchangeable("the MTU"))
        );
        let other_seed = PathConfig {
            seed: 2,
            ..delay(1)
        };
        assert!(path.set(&other_seed).is_err());
        assert!(path
            .set(&PathConfig {
                loss: 7.0,
                ..delay(1)
            })
            .is_err());
        assert_eq!(path.config(), &delay(10));
    }
}
