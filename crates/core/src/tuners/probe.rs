//! `probe`: NLANR's auto-tuned FTP (Autobuf, in ncFTP): measure the path once, just before
//! the data connection, then set static buffers.
//!
//! The engine does the measuring ([`TuneMode::needs_rate_probe`](crate::TuneMode) is true for
//! this mode): it puts the control connection's RTT in `hint.rtt` and a short pre-transfer
//! bandwidth probe's result in `hint.rate`. Before connecting, each end sets its own buffer
//! (`SO_SNDBUF` at the sender, `SO_RCVBUF` at the receiver) to `factor` x the measured BDP
//! and never touches it again (static, out of band, in the words of Weigle & Feng's Table I).
//!
//! # The factor: 1.25 x BDP, passed to `setsockopt` as is
//!
//! NLANR sized buffers to "no less than the capacity of the TCP pipe", the BDP, meaning the
//! payload a buffer holds. On Linux the kernel doubles the value to pay for metadata: a
//! receive buffer set to the BDP advertises a window of about one BDP (received 1500-byte
//! frames cost about twice their payload), and a send buffer holds about 1.8 BDP of payload.
//! One BDP of window is exactly enough to fill the pipe, so any measurement error shows up as
//! lost throughput. A pre-transfer probe underestimates the bottleneck (it is short, and may
//! not leave slow start), so we add a quarter: 1.25 x BDP. We do not use the rule of thumb's
//! 2 x: Linux's doubling already supplies the sender's second window, and 2 x would hold four
//! BDPs of kernel memory per socket.
//!
//! Without both an RTT and a rate (the probe failed or was skipped) nothing is set and Linux
//! autotuning stays in charge.

use super::common::{scale, Outbox};
use crate::snapshot::TcpSnapshot;
use crate::time::Time;
use crate::tuner::{Action, ConnEvent, Role, Tuner, TunerContext};
use crate::units::Bytes;
use std::time::Duration;

/// Configuration of the [`ProbeTuner`].
#[derive(Clone, Debug)]
pub struct ProbeConfig {
    factor: f64,
}

impl Default for ProbeConfig {
    /// Factor 1.25 (see the module documentation).
    fn default() -> Self {
        ProbeConfig { factor: 1.25 }
    }
}

impl ProbeConfig {
    /// Buffer = `factor` x measured BDP (values below 0.1 are raised to 0.1).
    pub fn factor(mut self, factor: f64) -> Self {
        self.factor = if factor.is_finite() {
            factor.max(0.1)
        } else {
            1.25
        };
        self
    }

    /// Build the tuner from the measured hint.
    pub fn build(&self, ctx: TunerContext) -> ProbeTuner {
        let buffer = match (ctx.hint.rtt, ctx.hint.rate) {
            (Some(rtt), Some(rate)) => Some(Bytes(scale(rate.bdp(rtt).0, self.factor).max(4096))),
            _ => None,
        };
        ProbeTuner {
            role: ctx.role,
            buffer,
            out: Outbox::default(),
        }
    }
}

/// Sets one static buffer from the pre-transfer measurement.
#[derive(Debug)]
pub struct ProbeTuner {
    role: Role,
    buffer: Option<Bytes>,
    out: Outbox,
}

impl ProbeTuner {
    /// The buffer this tuner sets (`None` without a measurement).
    pub fn buffer(&self) -> Option<Bytes> {
        self.buffer
    }
}

impl Tuner for ProbeTuner {
    fn name(&self) -> &'static str {
        "probe"
    }

    fn handle_event(&mut self, _now: Time, event: ConnEvent) {
        if let (ConnEvent::BeforeConnect, Some(b)) = (event, self.buffer) {
            self.out.push(match self.role {
                Role::Sender => Action::SetSndBuf(b),
                Role::Receiver => Action::SetRcvBuf(b),
            });
        }
    }

    fn handle_snapshot(&mut self, _now: Time, _snapshot: &TcpSnapshot) {}

    fn poll_action(&mut self) -> Option<Action> {
        self.out.pop()
    }

    fn poll_interval(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuner::PathHint;
    use crate::units::Rate;

    fn measured(role: Role, rtt_ms: u64, rate: Rate) -> TunerContext {
        TunerContext {
            hint: PathHint {
                rtt: Some(Duration::from_millis(rtt_ms)),
                rate: Some(rate),
                ..Default::default()
            },
            ..TunerContext::for_tests(role)
        }
    }

    #[test]
    fn both_ends_set_a_quarter_more_than_the_measured_bdp_once() {
        let cfg = ProbeConfig::default();
        let mut s = cfg.build(measured(Role::Sender, 100, Rate::gbit(1)));
        s.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(s.poll_action(), Some(Action::SetSndBuf(Bytes(15_625_000))));
        assert_eq!(s.poll_action(), None);
        s.handle_event(Time::from_millis(100), ConnEvent::Established);
        s.handle_snapshot(Time::from_millis(200), &TcpSnapshot::empty());
        assert_eq!(s.poll_action(), None);

        let mut r = cfg.build(measured(Role::Receiver, 100, Rate::gbit(1)));
        r.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(r.poll_action(), Some(Action::SetRcvBuf(Bytes(15_625_000))));
    }

    #[test]
    fn failed_probe_leaves_the_kernel_in_charge() {
        let mut t = ProbeConfig::default().build(TunerContext {
            hint: PathHint {
                rtt: Some(Duration::from_millis(10)),
                rate: None,
                ..Default::default()
            },
            ..TunerContext::for_tests(Role::Sender)
        });
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(t.poll_action(), None);
        assert_eq!(t.buffer(), None);
    }

    #[test]
    fn factor_setter_rejects_nonsense() {
        let t = ProbeConfig::default().factor(f64::NAN).build(measured(
            Role::Sender,
            10,
            Rate::gbit(1),
        ));
        assert_eq!(t.buffer(), Some(Bytes(1_562_500)));
        let t =
            ProbeConfig::default()
                .factor(-3.0)
                .build(measured(Role::Sender, 10, Rate::gbit(1)));
        assert_eq!(t.buffer(), Some(Bytes(125_000)));
    }
}
