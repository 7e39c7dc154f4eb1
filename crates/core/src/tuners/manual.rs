//! `manual`: what a careful human does (Tierney; the papers' "user tuning" done by hand).
//!
//! Measure the RTT (the engine puts the control connection's handshake time in
//! [`PathHint::rtt`](crate::PathHint)), take the bottleneck rate the user gave
//! (`--tune manual:1gbit`, or a rate in the hint), or assume 100 Mbit/s as Tierney advises
//! when it is unknown, and set the buffer of this end to twice the bandwidth-delay product,
//! once, before connecting (`SO_SNDBUF` at the sender, `SO_RCVBUF` at the receiver).
//!
//! On Linux the value is passed as is: the kernel stores twice it (so the kernel holds about
//! 4 x BDP) and caps it at `wmem_max`/`rmem_max`, exactly what happens to a human who
//! follows the rule of thumb there. Setting the buffer locks it: kernel autotuning is off for
//! the socket.
//!
//! Without an RTT the rule cannot be applied, and a human would not guess: the tuner then
//! does nothing and Linux autotuning stays in charge (the `kernel` behaviour).

use super::common::Outbox;
use crate::snapshot::TcpSnapshot;
use crate::time::Time;
use crate::tuner::{Action, ConnEvent, Role, Tuner, TunerContext};
use crate::units::{Bytes, Rate};
use std::time::Duration;

/// Configuration of the [`ManualTuner`].
#[derive(Clone, Debug)]
pub struct ManualConfig {
    rate: Option<Rate>,
    assumed_rate: Rate,
    factor: u64,
}

impl Default for ManualConfig {
    /// No given rate (use the hint's, else 100 Mbit/s), factor 2.
    fn default() -> Self {
        ManualConfig {
            rate: None,
            assumed_rate: ManualConfig::TIERNEY_ASSUMED_RATE,
            factor: 2,
        }
    }
}

impl ManualConfig {
    /// Tierney's advice when the bottleneck rate is unknown: "just assume the bandwidth is
    /// 100Mbps".
    pub const TIERNEY_ASSUMED_RATE: Rate = Rate::mbit(100);

    /// The bottleneck rate the user gave (`manual:RATE`); it wins over the hint's.
    pub fn rate(mut self, rate: Option<Rate>) -> Self {
        self.rate = rate;
        self
    }

    /// The rate assumed when neither the user nor the hint gives one.
    pub fn assumed_rate(mut self, rate: Rate) -> Self {
        self.assumed_rate = rate;
        self
    }

    /// Buffer = `factor` x BDP (2 by the rule of thumb).
    pub fn factor(mut self, factor: u64) -> Self {
        self.factor = factor.max(1);
        self
    }

    /// Build the tuner. The buffer is computed now, from the context's hint.
    pub fn build(&self, ctx: TunerContext) -> ManualTuner {
        let rate = self.rate.or(ctx.hint.rate).unwrap_or(self.assumed_rate);
        let buffer = ctx
            .hint
            .rtt
            .map(|rtt| Bytes(rate.bdp(rtt).0.saturating_mul(self.factor).max(4096)));
        ManualTuner {
            role: ctx.role,
            buffer,
            out: Outbox::default(),
        }
    }
}

/// Sets one buffer to `factor` x BDP before connecting, or nothing without an RTT.
#[derive(Debug)]
pub struct ManualTuner {
    role: Role,
    buffer: Option<Bytes>,
    out: Outbox,
}

impl ManualTuner {
    /// The buffer this tuner sets (`None`: no RTT was measured, nothing is set).
    pub fn buffer(&self) -> Option<Bytes> {
        self.buffer
    }
}

impl Tuner for ManualTuner {
    fn name(&self) -> &'static str {
        "manual"
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

    fn ctx(role: Role, rtt_ms: Option<u64>, rate: Option<Rate>) -> TunerContext {
        TunerContext {
            hint: PathHint {
                rtt: rtt_ms.map(Duration::from_millis),
                rate,
                ..Default::default()
            },
            ..TunerContext::for_tests(role)
        }
    }

    #[test]
    fn sender_sets_twice_the_bdp_of_the_given_rate_before_connect() {
        let mut t = ManualConfig::default().rate(Some(Rate::gbit(1))).build(ctx(
            Role::Sender,
            Some(50),
            Some(Rate::mbit(10)),
        ));
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(t.poll_action(), Some(Action::SetSndBuf(Bytes(12_500_000))));
        assert_eq!(t.poll_action(), None);
        t.handle_event(Time::from_millis(50), ConnEvent::Established);
        t.handle_snapshot(Time::from_millis(60), &TcpSnapshot::empty());
        assert_eq!(t.poll_action(), None);
        assert_eq!(t.poll_interval(), None);
    }

    #[test]
    fn receiver_uses_the_hint_rate_when_none_is_given() {
        let mut t =
            ManualConfig::default().build(ctx(Role::Receiver, Some(25), Some(Rate::gbit(1))));
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(t.poll_action(), Some(Action::SetRcvBuf(Bytes(6_250_000))));
    }

    #[test]
    fn unknown_rate_assumes_100_mbit_as_tierney_advises() {
        let t = ManualConfig::default().build(ctx(Role::Sender, Some(100), None));
        // 100 Mbit/s x 100 ms = 1.25 MB; twice that.
        assert_eq!(t.buffer(), Some(Bytes(2_500_000)));
    }

    #[test]
    fn without_rtt_hint_leaves_kernel_autotuning_in_charge() {
        let mut t =
            ManualConfig::default()
                .rate(Some(Rate::gbit(1)))
                .build(ctx(Role::Sender, None, None));
        assert_eq!(t.buffer(), None);
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(t.poll_action(), None);
    }

    #[test]
    fn tiny_bdp_still_sets_a_usable_buffer() {
        let t = ManualConfig::default().build(ctx(Role::Sender, Some(0), Some(Rate::mbit(1))));
        assert_eq!(t.buffer(), Some(Bytes(4096)));
    }
}
