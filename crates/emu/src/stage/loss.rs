//! Random loss, per wire packet, from a seeded generator.

use super::Stage;
use crate::packet::Packet;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;
use tcptune_core::Time;

/// Drops each wire packet independently with probability `p`.
///
/// A GSO super-packet is judged segment by segment (one random draw each, in order); when
/// only some of its segments are lost it is split and only those are dropped, as on a real
/// link. The same seed and the same packets give the same losses.
#[derive(Debug)]
pub struct RandomLoss {
    p: f64,
    rng: ChaCha8Rng,
    out: VecDeque<Packet>,
    /// Wire packets dropped so far.
    pub dropped: u64,
    /// IP bytes dropped so far.
    pub dropped_bytes: u64,
}

impl RandomLoss {
    /// Loss probability `p` (0..=1), random stream `seed`.
    pub fn new(p: f64, seed: u64) -> RandomLoss {
        RandomLoss {
            p: p.clamp(0.0, 1.0),
            rng: ChaCha8Rng::seed_from_u64(seed),
            out: VecDeque::new(),
            dropped: 0,
            dropped_bytes: 0,
        }
    }

    /// From now on, drop with probability `p` (the random stream goes on).
    pub fn set_probability(&mut self, p: f64) {
        self.p = p.clamp(0.0, 1.0);
    }

    fn drop_whole(&mut self, p: &Packet) {
        self.dropped += u64::from(p.segments());
        self.dropped_bytes += p.wire_bytes();
    }
}

impl Stage for RandomLoss {
    fn push(&mut self, _now: Time, packet: Packet) {
        if self.p <= 0.0 {
            self.out.push_back(packet);
            return;
        }
        let segs = packet.segments();
        let lost: Vec<bool> = (0..segs).map(|_| self.rng.gen::<f64>() < self.p).collect();
        let n_lost = lost.iter().filter(|&&l| l).count();
        if n_lost == 0 {
            self.out.push_back(packet);
        } else if n_lost == lost.len() {
            self.drop_whole(&packet);
        } else {
            match packet.split_every(1) {
                Ok(parts) => {
                    for (part, lost) in parts.into_iter().zip(lost) {
                        if lost {
                            self.drop_whole(&part);
                        } else {
                            self.out.push_back(part);
                        }
                    }
                }
                // Cannot happen for a packet that parsed; never pass a half-judged packet.
                Err(_) => self.drop_whole(&packet),
            }
        }
    }

    fn poll_out(&mut self, _now: Time) -> Option<Packet> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.out.front().map(|p| p.due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::testing::tso4;

    fn survivors(seed: u64, n: usize, p: f64) -> Vec<usize> {
        let mut loss = RandomLoss::new(p, seed);
        let mut kept = Vec::new();
        for i in 0..n {
            loss.push(Time::ZERO, Packet::from_ip(&[i as u8; 40]));
            while let Some(out) = loss.poll_out(Time::ZERO) {
                kept.push(out.ip()[0] as usize);
            }
        }
        kept
    }

    #[test]
    fn same_seed_drops_the_same_packets() {
        assert_eq!(survivors(7, 200, 0.2), survivors(7, 200, 0.2));
        assert_ne!(survivors(7, 200, 0.2), survivors(8, 200, 0.2));
    }

    #[test]
    fn loss_rate_matches_probability_over_many_packets() {
        let kept = survivors(1, 20_000, 0.1).len() as f64;
        let lost = 1.0 - kept / 20_000.0;
        assert!((0.09..0.11).contains(&lost), "{lost}");
    }

    #[test]
    fn super_packet_loses_only_the_unlucky_segments() {
        let mut loss = RandomLoss::new(0.3, 3);
        let mut kept = 0u64;
        let mut pushed = 0u64;
        for k in 0..50 {
            let p = tso4(k * 100_000, 44 * 1448, 1448, 0x10);
            pushed += u64::from(p.segments());
            loss.push(Time::ZERO, p);
            while let Some(out) = loss.poll_out(Time::ZERO) {
                kept += u64::from(out.segments());
            }
        }
        assert_eq!(kept + loss.dropped, pushed);
        let rate = loss.dropped as f64 / pushed as f64;
        assert!((0.25..0.35).contains(&rate), "{rate}");
    }

    #[test]
    fn zero_loss_passes_everything_untouched() {
        assert_eq!(survivors(1, 100, 0.0).len(), 100);
        assert!(survivors(1, 100, 1.0).is_empty());
    }
}
