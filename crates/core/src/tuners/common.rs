//! Small pieces the tuners share.

use crate::snapshot::TcpSnapshot;
use crate::tuner::Action;
use crate::units::Bytes;
use std::collections::VecDeque;
use std::time::Duration;

/// Actions waiting for the driver's `poll_action`.
#[derive(Debug, Default)]
pub(crate) struct Outbox(VecDeque<Action>);

impl Outbox {
    pub(crate) fn push(&mut self, a: Action) {
        self.0.push_back(a);
    }

    pub(crate) fn pop(&mut self) -> Option<Action> {
        self.0.pop_front()
    }
}

/// `bytes * f`, rounded up, saturating.
pub(crate) fn scale(bytes: u64, f: f64) -> u64 {
    let v = (bytes as f64 * f).ceil();
    if v >= u64::MAX as f64 {
        u64::MAX
    } else {
        v as u64
    }
}

/// Sampling interval a tuner asks for: a fraction of the RTT, within the range drivers use.
pub(crate) fn interval_from_rtt(rtt: Option<Duration>, divisor: u32) -> Duration {
    let d = rtt.map_or(Duration::from_millis(100), |r| r / divisor.max(1));
    d.clamp(Duration::from_millis(10), Duration::from_millis(200))
}

/// Payload bytes this socket holds for sending (in flight plus not yet sent), from the
/// snapshot's counters.
pub(crate) fn queued_payload(s: &TcpSnapshot) -> u64 {
    s.inflight_bytes() + u64::from(s.notsent_bytes.unwrap_or(0))
}

/// Send-buffer occupancy in `SO_SNDBUF` value units (half the kernel memory, as the kernel
/// doubles the value): from `sk_wmem_queued` when known, else from the payload counters.
pub(crate) fn queued_value(s: &TcpSnapshot) -> Bytes {
    match s.wmem_queued_bytes {
        Some(q) => Bytes(u64::from(q).div_ceil(2)),
        None => crate::linux::sndbuf_value_for_payload(queued_payload(s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_is_a_fraction_of_rtt_within_driver_bounds() {
        assert_eq!(
            interval_from_rtt(Some(Duration::from_millis(100)), 2),
            Duration::from_millis(50)
        );
        assert_eq!(
            interval_from_rtt(Some(Duration::from_micros(500)), 1),
            Duration::from_millis(10)
        );
        assert_eq!(interval_from_rtt(None, 1), Duration::from_millis(100));
    }

    #[test]
    fn queued_value_prefers_kernel_memory() {
        let s = TcpSnapshot {
            wmem_queued_bytes: Some(1000),
            unacked_segs: 100,
            snd_mss_bytes: 1000,
            ..TcpSnapshot::empty()
        };
        assert_eq!(queued_value(&s), Bytes(500));
        let s = TcpSnapshot {
            wmem_queued_bytes: None,
            ..s
        };
        assert_eq!(queued_value(&s), Bytes(55_556));
        assert_eq!(scale(10, 1.25), 13);
    }
}
