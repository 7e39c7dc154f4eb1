//! `kernel`: change nothing and leave Linux autotuning in charge.

use crate::snapshot::TcpSnapshot;
use crate::time::Time;
use crate::tuner::{Action, ConnEvent, Tuner, TunerContext};
use std::time::Duration;

/// Configuration of the [`KernelTuner`] (it has no parameters).
#[derive(Clone, Debug, Default)]
pub struct KernelConfig {}

impl KernelConfig {
    /// Build the tuner.
    pub fn build(&self, _ctx: TunerContext) -> KernelTuner {
        KernelTuner {}
    }
}

/// Leaves every buffer to the kernel. Never returns an action.
#[derive(Debug)]
pub struct KernelTuner {}

impl Tuner for KernelTuner {
    fn name(&self) -> &'static str {
        "kernel"
    }
    fn handle_event(&mut self, _now: Time, _event: ConnEvent) {}
    fn handle_snapshot(&mut self, _now: Time, _snapshot: &TcpSnapshot) {}
    fn poll_action(&mut self) -> Option<Action> {
        None
    }
    fn poll_interval(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuner::Role;

    #[test]
    fn never_asks_for_anything() {
        let mut t = KernelConfig::default().build(TunerContext::for_tests(Role::Sender));
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        t.handle_event(Time::ZERO, ConnEvent::Established);
        t.handle_snapshot(Time::from_millis(10), &TcpSnapshot::empty());
        assert_eq!(t.poll_action(), None);
        assert_eq!(t.poll_interval(), None);
    }
}
