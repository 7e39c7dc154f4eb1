//! `fixed`: one constant buffer on both ends, set before connecting. This is the papers'
//! "user tuning" (and, at 64 KiB, their untuned default).

use crate::snapshot::TcpSnapshot;
use crate::time::Time;
use crate::tuner::{Action, ConnEvent, Role, Tuner, TunerContext};
use crate::units::Bytes;
use std::time::Duration;

/// Configuration of the [`FixedTuner`].
#[derive(Clone, Debug)]
pub struct FixedConfig {
    buffer: Bytes,
}

impl Default for FixedConfig {
    /// 64 KiB, the untuned default of the papers.
    fn default() -> Self {
        FixedConfig {
            buffer: Bytes::kib(64),
        }
    }
}

impl FixedConfig {
    /// The buffer size passed to `SO_SNDBUF`/`SO_RCVBUF`.
    pub fn buffer(mut self, buffer: Bytes) -> Self {
        self.buffer = buffer;
        self
    }

    /// Build the tuner.
    pub fn build(&self, ctx: TunerContext) -> FixedTuner {
        FixedTuner {
            role: ctx.role,
            buffer: self.buffer,
            pending: None,
        }
    }
}

/// Sets the send buffer (sender) or receive buffer (receiver) once, before connecting.
#[derive(Debug)]
pub struct FixedTuner {
    role: Role,
    buffer: Bytes,
    pending: Option<Action>,
}

impl Tuner for FixedTuner {
    fn name(&self) -> &'static str {
        "fixed"
    }

    fn handle_event(&mut self, _now: Time, event: ConnEvent) {
        if event == ConnEvent::BeforeConnect {
            self.pending = Some(match self.role {
                Role::Sender => Action::SetSndBuf(self.buffer),
                Role::Receiver => Action::SetRcvBuf(self.buffer),
            });
        }
    }

    fn handle_snapshot(&mut self, _now: Time, _snapshot: &TcpSnapshot) {}

    fn poll_action(&mut self) -> Option<Action> {
        self.pending.take()
    }

    fn poll_interval(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_the_buffer_of_its_side_once_before_connect() {
        let cfg = FixedConfig::default().buffer(Bytes::mib(4));
        let mut s = cfg.build(TunerContext::for_tests(Role::Sender));
        s.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(s.poll_action(), Some(Action::SetSndBuf(Bytes::mib(4))));
        assert_eq!(s.poll_action(), None);
        s.handle_event(Time::ZERO, ConnEvent::Established);
        assert_eq!(s.poll_action(), None);

        let mut r = cfg.build(TunerContext::for_tests(Role::Receiver));
        r.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(r.poll_action(), Some(Action::SetRcvBuf(Bytes::mib(4))));
    }
}
