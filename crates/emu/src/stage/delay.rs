//! Propagation delay with optional jitter.

use super::Stage;
use crate::packet::Packet;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;
use tcptune_core::Time;

/// A packet in a reordering delay line, ordered by due time, then arrival.
#[derive(Debug)]
struct Timed {
    due: Time,
    seq: u64,
    packet: Packet,
}

impl PartialEq for Timed {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

/// Holds each packet for `delay` (± `jitter`, uniform, never below zero) after it was due
/// to arrive.
///
/// Without `reorder`, a packet whose jittered time would overtake an earlier packet leaves
/// together with it instead: the order is always kept, and jitter then only adds delay.
/// With `reorder`, packets leave purely by their own time.
#[derive(Debug)]
pub struct DelayLine {
    delay: Duration,
    jitter: Duration,
    reorder: bool,
    rng: ChaCha8Rng,
    fifo: VecDeque<Packet>,
    heap: BinaryHeap<Reverse<Timed>>,
    last_due: Time,
    /// With `reorder`: packets pushed after a change of the delay leave no earlier than this
    /// (the latest due time before the change), so a shorter delay never lets them overtake.
    floor: Time,
    seq: u64,
}

impl DelayLine {
    /// A delay line of `delay ± jitter`; `seed` drives the jitter.
    pub fn new(delay: Duration, jitter: Duration, reorder: bool, seed: u64) -> DelayLine {
        DelayLine {
            delay,
            jitter,
            reorder,
            rng: ChaCha8Rng::seed_from_u64(seed),
            fifo: VecDeque::new(),
            heap: BinaryHeap::new(),
            last_due: Time::ZERO,
            floor: Time::ZERO,
            seq: 0,
        }
    }

    /// Packets inside the delay line.
    pub fn len(&self) -> usize {
        self.fifo.len() + self.heap.len()
    }

    /// Whether it holds no packet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// From now on, hold arriving packets for `delay ± jitter`. Packets inside keep their
    /// times, and no later packet leaves before them: with a shorter delay, packets that
    /// would overtake leave right after the ones ahead instead (the order is kept even with
    /// `reorder`, which only lets jitter reorder packets of the same delay).
    pub fn set_delay(&mut self, delay: Duration, jitter: Duration) {
        if self.reorder {
            self.floor = self.last_due;
        }
        self.delay = delay;
        self.jitter = jitter;
    }

    fn delay_sample(&mut self) -> Duration {
        if self.jitter.is_zero() {
            return self.delay;
        }
        let j = i128::try_from(self.jitter.as_nanos()).unwrap_or(i128::MAX);
        let offset = self.rng.gen_range(-j..=j);
        let d = i128::try_from(self.delay.as_nanos()).unwrap_or(i128::MAX) + offset;
        Duration::from_nanos(u64::try_from(d.max(0)).unwrap_or(u64::MAX))
    }
}

impl Stage for DelayLine {
    fn push(&mut self, _now: Time, mut packet: Packet) {
        let mut due = packet.due + self.delay_sample();
        if self.reorder {
            due = due.max(self.floor);
            self.last_due = self.last_due.max(due);
            packet.due = due;
            self.seq += 1;
            self.heap.push(Reverse(Timed {
                due,
                seq: self.seq,
                packet,
            }));
        } else {
            due = due.max(self.last_due);
            self.last_due = due;
            packet.due = due;
            self.fifo.push_back(packet);
        }
    }

    fn poll_out(&mut self, now: Time) -> Option<Packet> {
        if self.reorder {
            if self.heap.peek().is_some_and(|t| t.0.due <= now) {
                return self.heap.pop().map(|t| t.0.packet);
            }
            None
        } else if self.fifo.front().is_some_and(|p| p.due <= now) {
            self.fifo.pop_front()
        } else {
            None
        }
    }

    fn poll_timeout(&self) -> Option<Time> {
        if self.reorder {
            self.heap.peek().map(|t| t.0.due)
        } else {
            self.fifo.front().map(|p| p.due)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: Time, id: u8) -> Packet {
        let mut p = Packet::from_ip(&[id; 40]);
        p.due = t;
        p
    }

    #[test]
    fn packet_leaves_exactly_delay_after_it_was_due() {
        let mut d = DelayLine::new(Duration::from_millis(25), Duration::ZERO, false, 1);
        d.push(Time::from_millis(1), at(Time::from_millis(1), 1));
        assert_eq!(d.poll_timeout(), Some(Time::from_millis(26)));
        assert!(d
            .poll_out(Time::from_millis(26) - Duration::from_nanos(1))
            .is_none());
        assert!(d.poll_out(Time::from_millis(26)).is_some());
        assert!(d.is_empty());
    }

    #[test]
    fn jitter_without_reorder_keeps_order_and_never_goes_below_zero_delay() {
        let mut d = DelayLine::new(Duration::from_millis(1), Duration::from_millis(5), false, 9);
        for i in 0..200u8 {
            let t = Time::from_micros(u64::from(i) * 10);
            d.push(t, at(t, i));
        }
        let out: Vec<(u8, Time)> = std::iter::from_fn(|| d.poll_out(Time::from_millis(1000)))
            .map(|p| (p.ip()[0], p.due))
            .collect();
        let ids: Vec<u8> = out.iter().map(|o| o.0).collect();
        assert_eq!(ids, (0..200u8).collect::<Vec<_>>());
        for (id, due) in out {
            assert!(due >= Time::from_micros(u64::from(id) * 10));
        }
    }

    #[test]
    fn jitter_with_reorder_allowed_does_reorder() {
        let mut d = DelayLine::new(Duration::from_millis(1), Duration::from_millis(5), true, 9);
        for i in 0..200u8 {
            let t = Time::from_micros(u64::from(i) * 10);
            d.push(t, at(t, i));
        }
        let ids: Vec<u8> = std::iter::from_fn(|| d.poll_out(Time::from_millis(1000)))
            .map(|p| p.ip()[0])
            .collect();
        assert_eq!(ids.len(), 200);
        assert!(ids.windows(2).any(|w| w[0] > w[1]));
    }
}
