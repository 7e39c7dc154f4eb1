//! The pre-transfer bandwidth probe (for modes where `TuneMode::needs_rate_probe()`).
//!
//! How it works: one stream in the transfer's direction, for
//! [`probe_duration`] (25 RTTs of the control connection, at least 0.5 s and at most 3 s,
//! long enough for slow start to finish on a long fat pipe). The sender sets `SO_SNDBUF` to
//! the largest payload its host allows (so the probe is not limited by the default send
//! buffer); the receiver leaves receive autotuning on. The measured rate is the
//! receiver's throughput over the second half of the probe (bytes verified after the
//! midpoint of its receive time, divided by that time), which skips slow start.

use std::time::Duration;
use tcptune_core::{Action, ConnEvent, Role, TcpSnapshot, Time, Tuner, TunerContext};

/// How long the probe's sender sends, from the control connection's RTT.
pub fn probe_duration(rtt: Option<Duration>) -> Duration {
    let rtt = rtt.unwrap_or(Duration::from_millis(100));
    (rtt * 25).clamp(Duration::from_millis(500), Duration::from_secs(3))
}

/// The probe stream's tuner: a large send buffer at the sender, kernel autotuning at the
/// receiver.
#[derive(Debug)]
pub(crate) struct ProbeTuner {
    action: Option<Action>,
}

impl ProbeTuner {
    pub(crate) fn new(ctx: &TunerContext) -> ProbeTuner {
        let action = match ctx.role {
            Role::Sender => ctx.limits.max_sndbuf_payload().map(Action::SetSndBuf),
            Role::Receiver => None,
        };
        ProbeTuner { action }
    }
}

impl Tuner for ProbeTuner {
    fn name(&self) -> &'static str {
        "probe-stream"
    }
    fn handle_event(&mut self, _now: Time, _event: ConnEvent) {}
    fn handle_snapshot(&mut self, _now: Time, _snapshot: &TcpSnapshot) {}
    fn poll_action(&mut self) -> Option<Action> {
        self.action.take()
    }
    fn poll_interval(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_is_25_rtts_within_bounds() {
        assert_eq!(
            probe_duration(Some(Duration::from_millis(50))),
            Duration::from_millis(1250)
        );
        assert_eq!(
            probe_duration(Some(Duration::from_micros(30))),
            Duration::from_millis(500)
        );
        assert_eq!(
            probe_duration(Some(Duration::from_secs(1))),
            Duration::from_secs(3)
        );
    }

    #[test]
    fn sender_asks_for_the_largest_send_buffer_once() {
        let mut t = ProbeTuner::new(&TunerContext::for_tests(Role::Sender));
        assert!(matches!(t.poll_action(), Some(Action::SetSndBuf(_))));
        assert_eq!(t.poll_action(), None);
        let mut r = ProbeTuner::new(&TunerContext::for_tests(Role::Receiver));
        assert_eq!(r.poll_action(), None);
    }
}
