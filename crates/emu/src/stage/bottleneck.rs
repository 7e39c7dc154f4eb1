//! The bottleneck: a drop-tail queue in front of a link that serializes packets at a rate.

use super::Stage;
use crate::config::QueueCaps;
use crate::packet::Packet;
use std::collections::VecDeque;
use std::time::Duration;
use tcptune_core::{Bytes, Rate, Time};

/// A packet accepted by the link: when its first bit starts and its last bit leaves.
#[derive(Clone, Copy, Debug)]
struct OnLink {
    start: Time,
    finish: Time,
    segs: u64,
    spacing: Duration,
}

/// A link of rate `rate` with a drop-tail queue of `caps`.
///
/// Each arriving packet is scheduled at once: it starts when the link is free (or when it
/// arrives, if later) and finishes after its wire bytes have been serialized. The queue at
/// time `t` is what has arrived but not yet left the link: `(free_at - t) × rate` bytes.
/// A packet that does not fit is dropped; a super-packet keeps the segments that fit and
/// drops the rest (dropping all ~44 segments of a 64 KiB super-packet at once would hit TCP
/// far harder than a real queue does).
///
/// Super-packets longer than `max_burst` of serialization are cut so that no segment
/// waits for the rest of a long super-packet: a segment leaves at most `max_burst` after it
/// would on a packet-by-packet link.
///
/// Without a rate the stage passes packets straight through (no queue, no drops).
#[derive(Debug)]
pub struct Bottleneck {
    rate: Option<Rate>,
    caps: QueueCaps,
    max_burst: Duration,
    free_at: Time,
    on_link: VecDeque<OnLink>,
    segs_on_link: u64,
    out: VecDeque<Packet>,
    /// Wire packets dropped because the queue was full.
    pub dropped: u64,
    /// IP bytes dropped because the queue was full.
    pub dropped_bytes: u64,
    /// Largest queue seen, in bytes.
    pub peak_bytes: u64,
    /// Largest queue seen, in packets.
    pub peak_packets: u64,
}

impl Bottleneck {
    /// A link of `rate` (`None`: unlimited) with queue `caps`, cutting super-packets longer
    /// than `max_burst`.
    pub fn new(rate: Option<Rate>, caps: QueueCaps, max_burst: Duration) -> Bottleneck {
        Bottleneck {
            rate,
            caps,
            max_burst,
            free_at: Time::ZERO,
            on_link: VecDeque::new(),
            segs_on_link: 0,
            out: VecDeque::new(),
            dropped: 0,
            dropped_bytes: 0,
            peak_bytes: 0,
            peak_packets: 0,
        }
    }

    /// From now on, serialize arriving packets at `rate` with queue `caps`.
    ///
    /// Packets already accepted keep the times they were given at the old rate (they are
    /// ahead of every later packet, so the order is kept); later packets start when the last
    /// of them has left the link. Until then, the queue's bytes are estimated at the new
    /// rate (the backlog counts as `time left × new rate`), so admission is approximate for
    /// one drain time of the old backlog.
    pub fn set_rate(&mut self, rate: Option<Rate>, caps: QueueCaps) {
        if rate.is_none() {
            // What passes straight through must not overtake the backlog: the delay line
            // after this stage keeps the order, so nothing more is needed here.
            self.on_link.clear();
            self.segs_on_link = 0;
        }
        self.rate = rate;
        self.caps = caps;
    }

    /// The queue at `t` in (bytes, packets), counting the unsent part of the packet on the
    /// link. `t` must not go backwards between calls.
    pub fn queue_at(&mut self, t: Time) -> (u64, u64) {
        let Some(rate) = self.rate else {
            return (0, 0);
        };
        while let Some(head) = self.on_link.front() {
            if head.finish > t {
                break;
            }
            self.segs_on_link -= head.segs;
            self.on_link.pop_front();
        }
        let left = self.free_at.saturating_since(t);
        let bytes = (left.as_nanos() * u128::from(rate.bits_per_sec()) / 8_000_000_000) as u64;
        let mut packets = self.segs_on_link;
        if let Some(head) = self.on_link.front() {
            if head.start <= t && !head.spacing.is_zero() {
                let sent = (t - head.start).as_nanos() / head.spacing.as_nanos();
                packets -= (sent as u64).min(head.segs.saturating_sub(1));
            }
        }
        (bytes, packets)
    }

    /// How many of `p`'s segments fit in a queue holding `q_bytes`/`q_packets`.
    fn fitting(&self, p: &Packet, q_bytes: u64, q_packets: u64) -> u32 {
        let mut bytes = q_bytes;
        for i in 0..p.segments() {
            bytes += p.segment_bytes(i);
            let packets = q_packets + u64::from(i) + 1;
            let over_bytes = self.caps.bytes.is_some_and(|cap| bytes > cap);
            let over_packets = self.caps.packets.is_some_and(|cap| packets > cap);
            if over_bytes || over_packets {
                return i;
            }
        }
        p.segments()
    }

    fn drop_packet(&mut self, p: &Packet) {
        self.dropped += u64::from(p.segments());
        self.dropped_bytes += p.wire_bytes();
    }

    fn admit(&mut self, rate: Rate, mut p: Packet) {
        let arrival = p.due;
        let (q_bytes, q_packets) = self.queue_at(arrival);
        let fit = self.fitting(&p, q_bytes, q_packets);
        if fit == 0 {
            self.drop_packet(&p);
            return;
        }
        if fit < p.segments() {
            let rest = p.segments() - fit;
            match p.split(&[fit, rest]) {
                Ok(mut parts) if parts.len() == 2 => {
                    if let Some(tail) = parts.pop() {
                        self.drop_packet(&tail);
                    }
                    match parts.pop() {
                        Some(head) => p = head,
                        None => return,
                    }
                }
                Ok(parts) => {
                    for part in &parts {
                        self.drop_packet(part);
                    }
                    return;
                }
                Err(_) => {
                    self.drop_packet(&p);
                    return;
                }
            }
        }
        let tx = rate.time_to_send(Bytes(p.wire_bytes()));
        let start = arrival.max(self.free_at);
        let finish = start + tx;
        let segs = u64::from(p.segments());
        let spacing = tx / p.segments().max(1);
        self.free_at = finish;
        self.on_link.push_back(OnLink {
            start,
            finish,
            segs,
            spacing,
        });
        self.segs_on_link += segs;
        self.peak_bytes = self.peak_bytes.max(q_bytes + p.wire_bytes());
        self.peak_packets = self.peak_packets.max(q_packets + segs);
        p.due = finish;
        p.seg_spacing = spacing;
        self.out.push_back(p);
    }

    /// Segments per piece so that a piece takes at most `max_burst` to serialize.
    fn burst_segments(&self, rate: Rate, p: &Packet) -> u32 {
        let seg = p.segment_bytes(0).max(1);
        let per_burst = rate.bdp(self.max_burst).get() / seg;
        u32::try_from(per_burst).unwrap_or(u32::MAX).max(1)
    }
}

impl Stage for Bottleneck {
    fn push(&mut self, _now: Time, p: Packet) {
        let Some(rate) = self.rate else {
            self.out.push_back(p);
            return;
        };
        let max_segs = self.burst_segments(rate, &p);
        if p.segments() <= max_segs {
            self.admit(rate, p);
            return;
        }
        let due = p.due;
        match p.split_every(max_segs) {
            Ok(parts) => {
                for mut part in parts {
                    part.due = due;
                    self.admit(rate, part);
                }
            }
            Err(_) => self.admit(rate, p),
        }
    }

    fn poll_out(&mut self, now: Time) -> Option<Packet> {
        if self.out.front().is_some_and(|p| p.due <= now) {
            self.out.pop_front()
        } else {
            None
        }
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.out.front().map(|p| p.due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::testing::tso4;

    fn packet_at(t: Time, len: usize) -> Packet {
        let mut p = Packet::from_ip(&vec![0x45; len]);
        p.due = t;
        p
    }

    fn caps_bytes(b: u64) -> QueueCaps {
        QueueCaps {
            bytes: Some(b),
            packets: None,
        }
    }

    #[test]
    fn back_to_back_packets_leave_one_serialization_time_apart() {
        let mut link = Bottleneck::new(
            Some(Rate::mbit(100)),
            caps_bytes(1 << 20),
            Duration::from_micros(250),
        );
        for _ in 0..5 {
            link.push(Time::ZERO, packet_at(Time::ZERO, 1250));
        }
        let dues: Vec<u64> = std::iter::from_fn(|| link.poll_out(Time::from_millis(1)))
            .map(|p| p.due.as_nanos())
            .collect();
        // 1250 bytes at 100 Mbit/s = 100 us each.
        assert_eq!(dues, vec![100_000, 200_000, 300_000, 400_000, 500_000]);
    }

    #[test]
    fn packets_are_held_until_serialized() {
        let mut link = Bottleneck::new(Some(Rate::mbit(100)), caps_bytes(1 << 20), Duration::ZERO);
        link.push(Time::ZERO, packet_at(Time::ZERO, 1250));
        assert!(link.poll_out(Time::from_micros(99)).is_none());
        assert_eq!(link.poll_timeout(), Some(Time::from_micros(100)));
        assert!(link.poll_out(Time::from_micros(100)).is_some());
    }

    #[test]
    fn idle_link_starts_a_late_packet_at_its_arrival() {
        let mut link = Bottleneck::new(Some(Rate::mbit(100)), caps_bytes(1 << 20), Duration::ZERO);
        link.push(Time::ZERO, packet_at(Time::ZERO, 1250));
        link.push(Time::from_millis(5), packet_at(Time::from_millis(5), 1250));
        let _ = link.poll_out(Time::from_millis(1000));
        let p = link.poll_out(Time::from_millis(1000));
        assert_eq!(p.map(|p| p.due), Some(Time::from_micros(5_100)));
    }

    #[test]
    fn full_queue_drops_the_overflow_exactly() {
        // Queue of 10 packets of 1000 bytes; 15 arrive at once.
        let mut link = Bottleneck::new(Some(Rate::mbit(8)), caps_bytes(10_000), Duration::ZERO);
        for _ in 0..15 {
            link.push(Time::ZERO, packet_at(Time::ZERO, 1000));
        }
        assert_eq!(link.dropped, 5);
        assert_eq!(link.peak_bytes, 10_000);
        // 1000 bytes at 8 Mbit/s = 1 ms; after 3 ms three have left, three more fit.
        let t = Time::from_millis(3);
        for _ in 0..4 {
            link.push(t, packet_at(t, 1000));
        }
        assert_eq!(link.dropped, 6);
    }

    #[test]
    fn packet_limit_counts_segments() {
        let caps = QueueCaps {
            bytes: None,
            packets: Some(20),
        };
        let mut link = Bottleneck::new(Some(Rate::mbit(10)), caps, Duration::from_secs(1));
        let mut p = tso4(0, 44 * 1448, 1448, 0x10);
        p.due = Time::ZERO;
        link.push(Time::ZERO, p);
        assert_eq!(link.dropped, 24);
        assert_eq!(link.peak_packets, 20);
        let kept = link.poll_out(Time::from_millis(10_000));
        assert_eq!(kept.map(|p| p.segments()), Some(20));
    }

    #[test]
    fn long_super_packets_are_cut_into_bursts() {
        // 100 Mbit/s, 250 us burst: 3125 bytes = 2 segments of 1500.
        let mut link = Bottleneck::new(
            Some(Rate::mbit(100)),
            caps_bytes(1 << 20),
            Duration::from_micros(250),
        );
        let mut p = tso4(0, 10 * 1448, 1448, 0x10);
        p.due = Time::ZERO;
        link.push(Time::ZERO, p);
        let parts: Vec<Packet> =
            std::iter::from_fn(|| link.poll_out(Time::from_millis(1000))).collect();
        assert_eq!(parts.len(), 5);
        assert!(parts.iter().all(|p| p.segments() == 2));
        // 1500 bytes at 100 Mbit/s = 120 us per segment.
        assert_eq!(parts[0].due, Time::from_micros(240));
        assert_eq!(parts[0].segment_due(0), Time::from_micros(120));
        assert_eq!(parts[4].due, Time::from_micros(1200));
    }

    #[test]
    fn unlimited_link_passes_packets_through_at_once() {
        let caps = caps_bytes(1);
        let mut link = Bottleneck::new(None, caps, Duration::ZERO);
        link.push(Time::ZERO, packet_at(Time::from_micros(3), 9000));
        assert_eq!(
            link.poll_out(Time::from_micros(3)).map(|p| p.due),
            Some(Time::from_micros(3))
        );
        assert_eq!(link.dropped, 0);
    }
}
