//! A memory budget around a sender's tuner: every `SO_SNDBUF` the tuner wants is granted out
//! of a shared pool, max-min fairly as PSC's Appendix A does ([`super::pool`]), so that the
//! streams of every session of a server stay within one budget together (`serve
//! --memory-budget`). `auto` runs inside it under a budget; `psc` draws from the pool itself.
//!
//! # What a stream wants, and gets
//!
//! * It wants the last `SO_SNDBUF` its tuner asked for. A tuner that leaves the kernel in
//!   charge (`auto` on a short path) cannot be bounded that way, since the kernel grows an
//!   unlocked buffer up to `tcp_wmem[2]` on its own: such a stream wants PSC's network target
//!   instead (twice the congestion window, halved once the window falls below a quarter,
//!   [`NetTarget`]), set explicitly from before the connection starts at `tcp_wmem[1]`.
//! * It gets `min(want, hiwat_fair_share)`: increases at once out of memory no other stream
//!   holds, decreases lazily as its queue drains, and above `AUTO_SND_THRESH` (memory in use
//!   over the budget) it shrinks as acknowledged data leaves ([`MemoryPool::resize`]).
//! * Every other action of the tuner (`TCP_NOTSENT_LOWAT`, streams) passes through. The
//!   receiving end is not budgeted: PSC's pool is the sender's, and a receive window, once
//!   advertised, cannot be taken back.
//!
//! [`MemoryPool::resize`]: super::pool::MemoryPool::resize

use super::common::{interval_from_rtt, queued_value, Outbox};
use super::pool::{ConnId, PoolShare, SharedPool};
use super::psc::NetTarget;
use crate::snapshot::{TcpSnapshot, TcpState};
use crate::time::Time;
use crate::tuner::{Action, ConnEvent, PathHint, Role, Tuner, TunerContext};
use crate::units::Bytes;
use std::time::Duration;

/// A tuner whose send buffer comes out of a shared pool. See the module documentation.
pub struct Budgeted {
    inner: Box<dyn Tuner>,
    pool: SharedPool,
    role: Role,
    stream_index: u32,
    id: Option<ConnId>,
    /// The last `SO_SNDBUF` the inner tuner asked for.
    asked: Option<Bytes>,
    /// PSC's target from the congestion window, for a tuner that asks for nothing.
    net: NetTarget,
    /// The `SO_SNDBUF` value set.
    current: Bytes,
    srtt: Option<Duration>,
    stopped: bool,
    out: Outbox,
}

impl std::fmt::Debug for Budgeted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budgeted")
            .field("inner", &self.inner.name())
            .field("stream", &self.stream_index)
            .field("asked", &self.asked)
            .field("current", &self.current)
            .finish()
    }
}

impl Budgeted {
    /// `inner` (built for `ctx`) drawing its send buffer from `pool`.
    pub fn new(inner: Box<dyn Tuner>, pool: SharedPool, ctx: &TunerContext) -> Budgeted {
        let start = ctx.limits.tcp_wmem[1].max(Bytes::kib(4));
        let max = if ctx.limits.can_force {
            pool.with(|p| p.config().pool_size())
        } else {
            ctx.limits.wmem_max
        };
        Budgeted {
            inner,
            pool,
            role: ctx.role,
            stream_index: ctx.stream_index,
            id: None,
            asked: None,
            net: NetTarget::new(start.0, max.0.max(start.0)),
            current: Bytes::ZERO,
            srtt: ctx.hint.rtt,
            stopped: false,
            out: Outbox::default(),
        }
    }

    /// What the stream wants now.
    fn wanted(&self) -> Bytes {
        self.asked.unwrap_or(Bytes(self.net.get()))
    }

    /// Take the inner tuner's actions: its `SO_SNDBUF` requests become what the stream
    /// wants, the rest passes through.
    fn drain_inner(&mut self) {
        while let Some(a) = self.inner.poll_action() {
            match a {
                Action::SetSndBuf(v) if self.role == Role::Sender && !self.stopped => {
                    self.asked = Some(v)
                }
                other => self.out.push(other),
            }
        }
    }

    fn join(&mut self) -> ConnId {
        if let Some(id) = self.id {
            return id;
        }
        let id = self.pool.register(self.stream_index);
        self.id = Some(id);
        id
    }

    fn leave(&mut self) {
        if let Some(id) = self.id.take() {
            self.pool.with(|p| p.unregister(id));
        }
    }

    fn before_connect(&mut self) {
        let id = self.join();
        let want = self.wanted();
        let got = self.pool.with(|p| {
            p.report(id, want, Bytes::ZERO);
            p.grant(id, want)
        });
        // Always set: a buffer set explicitly is one the kernel does not grow past the
        // budget.
        self.current = got.max(Bytes(4096));
        self.out.push(Action::SetSndBuf(self.current));
    }

    fn on_snapshot(&mut self, now: Time, s: &TcpSnapshot) {
        if let Some(rtt) = s.rtt() {
            self.srtt = Some(rtt);
        }
        let id = self.join();
        self.net.update(s.cwnd_bytes());
        let want = self.wanted();
        let in_use = queued_value(s);
        let established = matches!(s.state, TcpState::Established | TcpState::CloseWait);
        let (current, pool_now) = (self.current, self.pool.pool_time(now));
        let decision = self.pool.with(|p| {
            p.set_established(id, established);
            p.report(id, want, in_use);
            p.tick(pool_now);
            p.resize(id, current, in_use)
        });
        if let Some(v) = decision {
            self.current = v;
            self.out.push(Action::SetSndBuf(v));
        }
    }
}

impl Tuner for Budgeted {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn handle_event(&mut self, now: Time, event: ConnEvent) {
        self.inner.handle_event(now, event);
        if self.role != Role::Sender || self.stopped {
            self.drain_inner();
            return;
        }
        match event {
            ConnEvent::UserSetBuffer | ConnEvent::Closed => {
                self.stopped = true;
                self.leave();
                self.drain_inner();
            }
            ConnEvent::BeforeConnect => {
                self.drain_inner();
                self.before_connect();
            }
            ConnEvent::Established => {
                self.drain_inner();
                let id = self.join();
                self.pool.with(|p| p.set_established(id, true));
            }
        }
    }

    fn handle_snapshot(&mut self, now: Time, snapshot: &TcpSnapshot) {
        self.inner.handle_snapshot(now, snapshot);
        self.drain_inner();
        if self.role == Role::Sender && !self.stopped {
            self.on_snapshot(now, snapshot);
        }
    }

    fn poll_action(&mut self) -> Option<Action> {
        self.drain_inner();
        self.out.pop()
    }

    fn poll_interval(&self) -> Option<Duration> {
        let own =
            (self.role == Role::Sender && !self.stopped).then(|| interval_from_rtt(self.srtt, 4));
        match (self.inner.poll_interval(), own) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_hint(&mut self, now: Time, hint: &PathHint, streams: u32) {
        self.inner.handle_hint(now, hint, streams);
        self.drain_inner();
    }

    fn pool_share(&self) -> Option<PoolShare> {
        let id = self.id?;
        Some(self.pool.with(|p| p.share(id)))
    }
}

impl Drop for Budgeted {
    /// A tuner dropped without a `Closed` event still gives its share back.
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuners::pool::PoolConfig;

    /// A tuner that asks for a fixed send buffer before connecting, or for nothing.
    #[derive(Debug)]
    struct Asks(Option<Bytes>, Outbox);

    impl Tuner for Asks {
        fn name(&self) -> &'static str {
            "asks"
        }
        fn handle_event(&mut self, _now: Time, e: ConnEvent) {
            if let (ConnEvent::BeforeConnect, Some(v)) = (e, self.0) {
                self.1.push(Action::SetSndBuf(v));
                self.1.push(Action::SetNotsentLowat(Bytes::kib(128)));
            }
        }
        fn handle_snapshot(&mut self, _now: Time, _s: &TcpSnapshot) {}
        fn poll_action(&mut self) -> Option<Action> {
            self.1.pop()
        }
        fn poll_interval(&self) -> Option<Duration> {
            None
        }
    }

    fn sender(pool: &SharedPool, asks: Option<Bytes>, index: u32) -> Budgeted {
        let mut ctx = TunerContext::for_tests(Role::Sender);
        ctx.stream_index = index;
        Budgeted::new(Box::new(Asks(asks, Outbox::default())), pool.clone(), &ctx)
    }

    fn drain(t: &mut dyn Tuner) -> Vec<Action> {
        std::iter::from_fn(|| t.poll_action()).collect()
    }

    fn bulk(cwnd_segs: u32, queued_value: u64) -> TcpSnapshot {
        TcpSnapshot {
            state: TcpState::Established,
            snd_cwnd_segs: cwnd_segs,
            snd_mss_bytes: 1448,
            unacked_segs: cwnd_segs,
            rtt_us: 50_000,
            wmem_queued_bytes: Some(u32::try_from(queued_value * 2).unwrap_or(u32::MAX)),
            ..TcpSnapshot::empty()
        }
    }

    #[test]
    fn a_request_above_the_budget_is_granted_what_is_free_and_other_actions_pass() {
        let pool = PoolConfig::default().size(Bytes::mib(1)).shared();
        let mut t = sender(&pool, Some(Bytes::mib(4)), 0);
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        let a = drain(&mut t);
        assert!(a.contains(&Action::SetSndBuf(Bytes::mib(1))), "{a:?}");
        assert!(
            a.contains(&Action::SetNotsentLowat(Bytes::kib(128))),
            "{a:?}"
        );
        assert!(!a.contains(&Action::SetSndBuf(Bytes::mib(4))));
        assert_eq!(pool.with(|p| p.held_total()), Bytes::mib(1));
        assert_eq!(t.name(), "asks");
    }

    #[test]
    fn a_tuner_that_leaves_the_kernel_in_charge_is_sized_from_cwnd_anyway() {
        let pool = PoolConfig::default().size(Bytes::mib(64)).shared();
        let mut t = sender(&pool, None, 0);
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(drain(&mut t), vec![Action::SetSndBuf(Bytes::kib(16))]);
        t.handle_event(Time::ZERO, ConnEvent::Established);
        // cwnd 100 x 1448 = 144,800 > target/2: the target grows to 2 x cwnd.
        t.handle_snapshot(Time::from_millis(10), &bulk(100, 16 << 10));
        assert_eq!(drain(&mut t), vec![Action::SetSndBuf(Bytes(289_600))]);
        let share = t.pool_share().expect("in the pool");
        assert_eq!(share.held, Bytes(289_600));
        assert_eq!(share.net_target, Bytes(289_600));
    }

    #[test]
    fn a_receiver_passes_through_untouched() {
        let pool = PoolConfig::default().size(Bytes::kib(64)).shared();
        let mut ctx = TunerContext::for_tests(Role::Receiver);
        ctx.stream_index = 0;
        let mut t = Budgeted::new(
            Box::new(Asks(Some(Bytes::mib(8)), Outbox::default())),
            pool.clone(),
            &ctx,
        );
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert!(drain(&mut t).contains(&Action::SetSndBuf(Bytes::mib(8))));
        assert!(pool.with(|p| p.is_empty()));
    }

    #[test]
    fn closing_gives_the_share_back() {
        let pool = PoolConfig::default().size(Bytes::mib(1)).shared();
        let mut a = sender(&pool, Some(Bytes::mib(1)), 0);
        a.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        let mut b = sender(&pool, Some(Bytes::mib(1)), 1);
        b.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        // b asked before anything was free: the floor of a locked buffer.
        assert!(drain(&mut b).contains(&Action::SetSndBuf(Bytes(4096))));
        a.handle_event(Time::from_millis(5), ConnEvent::Closed);
        assert_eq!(pool.with(|p| p.len()), 1);
        drop(b);
        assert!(pool.with(|p| p.is_empty()));
    }
}
