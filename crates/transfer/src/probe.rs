//! The pre-transfer bandwidth probe (for modes where `TuneMode::needs_rate_probe()`, when the
//! path database has no fresh estimate).
//!
//! How it works (the decisions are [`tcptune_core::fullpipe`]'s): the client opens
//! [`ProbePlan::streams`] streams in the transfer's direction (2 to 8, enough to hold a
//! 10 Gbit/s bandwidth-delay product at the control connection's RTT), each sender with the
//! largest send buffer its host allows and `TCP_NOTSENT_LOWAT` (so the probe is not limited
//! by its sockets and its memory is what is in flight); the receivers leave receive
//! autotuning on. The client feeds the aggregate delivered bytes (acknowledged bytes when it
//! sends, bytes read when it receives) to a [`FullPipe`] every few milliseconds and stops
//! both ends at once as soon as the delivery rate has not grown by 25% for 3 rounds of one
//! RTT (at least 10 ms), or at the hard bound ([`ProbePlan::max_duration`], at most 4 s).
//! The measured rate is the largest round rate; it is marked as a lower bound when the pipe
//! never plateaued or the rate is near what the probe's own sockets can carry.
//!
//! The server needs nothing new: a probe phase is a duration workload of any number of
//! streams, and the requested duration is the hard bound.

use std::time::Duration;
use tcptune_core::fullpipe::{ProbeOutcome, ProbePlan};
use tcptune_core::{Action, ConnEvent, Rate, Role, TcpSnapshot, Time, Tuner, TunerContext};

/// What the probe found, for the report and the path database.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeResult {
    /// The plan it ran with.
    pub plan: ProbePlan,
    /// What the full-pipe estimator saw.
    pub outcome: ProbeOutcome,
    /// Wall time of the whole probe phase (setup, sending, teardown).
    pub wall: Duration,
}

impl ProbeResult {
    /// The rate to plan with, if any.
    pub fn rate(&self) -> Option<Rate> {
        self.outcome.rate
    }

    /// Whether the rate may underestimate the path: no plateau, or about what the probe's
    /// own sockets carry.
    pub fn lower_bound(&self) -> bool {
        !self.outcome.full_pipe || self.rate().is_some_and(|r| self.plan.limited_by_sockets(r))
    }
}

/// The probe streams' tuner: the largest send buffer and a low-water mark at the sender,
/// kernel autotuning at the receiver.
#[derive(Debug)]
pub(crate) struct ProbeTuner {
    actions: Vec<Action>,
}

impl ProbeTuner {
    pub(crate) fn new(ctx: &TunerContext) -> ProbeTuner {
        let actions = match ctx.role {
            Role::Sender => {
                let plan = ProbePlan::new(ctx.hint.rtt, &ctx.limits, u32::MAX);
                let mut a: Vec<Action> = ctx
                    .limits
                    .max_sndbuf_payload()
                    .map(Action::SetSndBuf)
                    .into_iter()
                    .collect();
                a.push(Action::SetNotsentLowat(plan.lowat));
                a.reverse();
                a
            }
            Role::Receiver => Vec::new(),
        };
        ProbeTuner { actions }
    }
}

impl Tuner for ProbeTuner {
    fn name(&self) -> &'static str {
        "probe-stream"
    }
    fn handle_event(&mut self, _now: Time, _event: ConnEvent) {}
    fn handle_snapshot(&mut self, _now: Time, _snapshot: &TcpSnapshot) {}
    fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop()
    }
    fn poll_interval(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcptune_core::Bytes;

    #[test]
    fn sender_asks_for_the_largest_send_buffer_and_a_low_water_mark_once() {
        let mut t = ProbeTuner::new(&TunerContext::for_tests(Role::Sender));
        assert_eq!(t.poll_action(), Some(Action::SetSndBuf(Bytes::mib(4))));
        assert!(matches!(t.poll_action(), Some(Action::SetNotsentLowat(_))));
        assert_eq!(t.poll_action(), None);
        let mut r = ProbeTuner::new(&TunerContext::for_tests(Role::Receiver));
        assert_eq!(r.poll_action(), None);
    }

    #[test]
    fn a_rate_without_plateau_or_near_the_sockets_capacity_is_a_lower_bound() {
        let plan = ProbePlan::new(
            Some(Duration::from_millis(200)),
            &tcptune_core::HostLimits::linux_defaults(),
            64,
        );
        let r = |mbit: u64, full: bool| ProbeResult {
            plan: plan.clone(),
            outcome: ProbeOutcome {
                rate: Some(Rate::mbit(mbit)),
                full_pipe: full,
                rounds: 12,
                elapsed: Duration::from_secs(2),
            },
            wall: Duration::from_secs(3),
        };
        assert!(!r(950, true).lower_bound());
        assert!(r(950, false).lower_bound());
        assert!(r(2000, true).lower_bound());
    }
}
