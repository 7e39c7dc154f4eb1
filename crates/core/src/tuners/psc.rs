//! `psc`: sender-side automatic buffer tuning of Semke, Mahdavi & Mathis (PSC, SIGCOMM'98).
//!
//! # The algorithm (section 2.2)
//!
//! * `sb_net_target` follows the congestion window: it grows (to 2 x `cwnd`) when
//!   `cwnd > target / 2` and shrinks (halving) only when `cwnd < target / 4`, so it stays
//!   between 2 x and 4 x `cwnd` and does not flap with the congestion-avoidance sawtooth,
//!   whose troughs are half its peaks (Figure 1).
//! * `sb_mem_target = min(sb_net_target, hiwat_fair_share)`, the fair share coming from the
//!   memory pool all PSC connections of this transfer end share ([`super::pool`]).
//! * Increases are applied at once; decreases lazily, as acknowledged data leaves the buffer:
//!   the buffer never drops below what is queued in it.
//! * Above `AUTO_SND_THRESH` (memory in use over the pool size) buffers shrink as data is
//!   acknowledged, whatever the targets say.
//! * The receiver simply uses the largest buffer the system allows.
//! * An application that sets a buffer itself turns tuning off for its connection.
//!
//! # The Linux mapping
//!
//! * The target is passed to `SO_SNDBUF` as is. Linux stores twice the value (its metadata
//!   allowance; with GSO-sized skbs about 90% of that holds payload), so the buffer holds
//!   roughly 2 x the target of payload. BSD's buffer size was a payload limit; we keep PSC's
//!   numbers in `setsockopt` units rather than halving them, because the rule's factor 2 was
//!   chosen for SACK recovery and Linux's own autotuning budgets the same doubling.
//! * `SO_SNDBUF` locks the buffer: from the first `SetSndBuf` (before connecting, at PSC's
//!   16 KiB starting size, NetBSD's default) kernel autotuning is off and this tuner is in
//!   charge, as PSC's kernel code was.
//! * Targets are capped at `net.core.wmem_max` (the kernel caps `SO_SNDBUF` there anyway),
//!   as PSC capped auto-tuned buffers at the kernel's maximum socket buffer size.
//! * Lazy decreases use the snapshot's `sk_wmem_queued` (halved, to `SO_SNDBUF` units) or,
//!   without it, in-flight plus not-yet-sent bytes. Linux itself never drops queued data
//!   when `SO_SNDBUF` shrinks (the writer just blocks), so the lazy decrease mostly keeps the
//!   pool's accounting honest.
//! * The receiver sets `SO_RCVBUF` to `net.core.rmem_max` before connecting, so the window
//!   scale is chosen from it. On a default namespace that is 4 MiB: less than Linux's own
//!   receive autotuning may use (`tcp_rmem[2]`), which is what "the OS maximum" meant in
//!   1998 and is reproduced here as such.
//! * The kernel does this per ACK; we sample about four times per RTT.

use super::common::{interval_from_rtt, queued_value, Outbox};
use super::pool::{ConnId, PoolConfig, SharedPool};
use crate::snapshot::{TcpSnapshot, TcpState};
use crate::time::Time;
use crate::tuner::{Action, ConnEvent, HostLimits, Role, Tuner, TunerContext};
use crate::units::Bytes;
use std::time::Duration;

/// Configuration of the [`PscTuner`].
#[derive(Clone, Debug)]
pub struct PscConfig {
    initial: Bytes,
    max_buffer: Option<Bytes>,
    pool: Option<SharedPool>,
    pool_config: PoolConfig,
}

impl Default for PscConfig {
    /// Start at 16 KiB, cap at `wmem_max`, a private pool with [`PoolConfig::default`].
    fn default() -> Self {
        PscConfig {
            initial: Bytes::kib(16),
            max_buffer: None,
            pool: None,
            pool_config: PoolConfig::default(),
        }
    }
}

impl PscConfig {
    /// The starting send buffer (and the smallest target).
    pub fn initial_buffer(mut self, b: Bytes) -> Self {
        self.initial = Bytes(b.0.max(4096));
        self
    }

    /// Cap targets here instead of at `wmem_max` (useful when `SO_SNDBUFFORCE` is allowed).
    pub fn max_buffer(mut self, b: Bytes) -> Self {
        self.max_buffer = Some(b);
        self
    }

    /// The pool shared with the other PSC tuners of this transfer end.
    pub fn pool(mut self, pool: SharedPool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Configuration of the private pool used when no shared pool is given.
    pub fn pool_config(mut self, cfg: PoolConfig) -> Self {
        self.pool_config = cfg;
        self
    }

    /// Build the tuner.
    pub fn build(&self, ctx: TunerContext) -> PscTuner {
        let pool = self
            .pool
            .clone()
            .unwrap_or_else(|| self.pool_config.shared());
        let pool_size = pool.with(|p| p.config().pool_size());
        let max = self
            .max_buffer
            .unwrap_or(if ctx.limits.can_force {
                pool_size
            } else {
                ctx.limits.wmem_max
            })
            .max(self.initial);
        PscTuner {
            stream_index: ctx.stream_index,
            role: ctx.role,
            limits: ctx.limits,
            pool,
            id: None,
            net: NetTarget::new(self.initial.0, max.0),
            current: self.initial,
            stopped: false,
            srtt: ctx.hint.rtt,
            out: Outbox::default(),
        }
    }
}

/// `sb_net_target`: follows `cwnd` inside the 2 x - 4 x band.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetTarget {
    target: u64,
    min: u64,
    max: u64,
}

impl NetTarget {
    /// A target starting at `initial`, never below it, never above `max`.
    pub fn new(initial: u64, max: u64) -> NetTarget {
        NetTarget {
            target: initial,
            min: initial,
            max: max.max(initial),
        }
    }

    /// The target.
    pub fn get(&self) -> u64 {
        self.target
    }

    /// Follow a new congestion window (bytes). Returns whether the target changed.
    ///
    /// Growing sets the target to 2 x `cwnd` (the bottom of the band, so the halving of a
    /// loss lands on its top, `cwnd = target / 4`, without shrinking it); shrinking halves
    /// the target until `cwnd` is back inside the band.
    pub fn update(&mut self, cwnd: u64) -> bool {
        let before = self.target;
        if cwnd > self.target / 2 {
            self.target = cwnd.saturating_mul(2).clamp(self.min, self.max);
        }
        while cwnd < self.target / 4 && self.target > self.min {
            self.target = (self.target / 2).max(self.min);
        }
        self.target != before
    }
}

/// PSC's tuner: send buffer from `cwnd` and the pool (sender), maximum buffer (receiver).
#[derive(Debug)]
pub struct PscTuner {
    stream_index: u32,
    role: Role,
    limits: HostLimits,
    pool: SharedPool,
    id: Option<ConnId>,
    net: NetTarget,
    /// The `SO_SNDBUF` value last set.
    current: Bytes,
    stopped: bool,
    srtt: Option<Duration>,
    out: Outbox,
}

impl PscTuner {
    /// The current `sb_net_target`.
    pub fn net_target(&self) -> Bytes {
        Bytes(self.net.get())
    }

    /// The `SO_SNDBUF` value last asked for.
    pub fn current(&self) -> Bytes {
        self.current
    }

    fn leave_pool(&mut self) {
        if let Some(id) = self.id.take() {
            self.pool.with(|p| p.unregister(id));
        }
    }

    fn join_pool(&mut self) -> ConnId {
        if let Some(id) = self.id {
            return id;
        }
        let (net, current) = (Bytes(self.net.get()), self.current);
        let id = self.pool.register(self.stream_index);
        self.pool.with(|p| {
            p.report(id, net, Bytes::ZERO);
            p.grant(id, current);
        });
        self.id = Some(id);
        id
    }

    fn on_sender_snapshot(&mut self, now: Time, s: &TcpSnapshot) {
        if let Some(rtt) = s.rtt() {
            self.srtt = Some(rtt);
        }
        let id = self.join_pool();
        self.net.update(s.cwnd_bytes());
        let net = Bytes(self.net.get());
        let in_use = queued_value(s);
        let established = matches!(s.state, TcpState::Established | TcpState::CloseWait);
        let current = self.current;
        let pool_now = self.pool.pool_time(now);
        let decision = self.pool.with(|p| {
            p.set_established(id, established);
            p.report(id, net, in_use);
            p.tick(pool_now);
            p.resize(id, current, in_use)
        });
        if let Some(v) = decision {
            self.current = v;
            self.out.push(Action::SetSndBuf(v));
        }
    }
}

impl Tuner for PscTuner {
    fn name(&self) -> &'static str {
        "psc"
    }

    fn handle_event(&mut self, _now: Time, event: ConnEvent) {
        if self.stopped {
            return;
        }
        match (event, self.role) {
            (ConnEvent::BeforeConnect, Role::Sender) => {
                self.join_pool();
                self.out.push(Action::SetSndBuf(self.current));
            }
            (ConnEvent::BeforeConnect, Role::Receiver) => {
                self.out.push(Action::SetRcvBuf(self.limits.rmem_max));
            }
            (ConnEvent::Established, Role::Sender) => {
                let id = self.join_pool();
                self.pool.with(|p| p.set_established(id, true));
            }
            (ConnEvent::UserSetBuffer, _) | (ConnEvent::Closed, _) => {
                self.stopped = true;
                self.leave_pool();
            }
            _ => {}
        }
    }

    fn handle_snapshot(&mut self, now: Time, snapshot: &TcpSnapshot) {
        if self.stopped || self.role == Role::Receiver {
            return;
        }
        self.on_sender_snapshot(now, snapshot);
    }

    fn poll_action(&mut self) -> Option<Action> {
        self.out.pop()
    }

    fn poll_interval(&self) -> Option<Duration> {
        (!self.stopped && self.role == Role::Sender).then(|| interval_from_rtt(self.srtt, 4))
    }

    fn pool_share(&self) -> Option<super::pool::PoolShare> {
        let id = self.id?;
        Some(self.pool.with(|p| p.share(id)))
    }
}

impl Drop for PscTuner {
    /// A tuner dropped without a `Closed` event still gives its share back.
    fn drop(&mut self) {
        self.leave_pool();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MSS: u32 = 1448;

    /// A bulk sender's snapshot: `cwnd` segments, all in flight, buffer full
    /// (`wmem_queued` = the kernel buffer of `sndbuf_value`).
    fn bulk(cwnd: u32, sndbuf_value: Bytes) -> TcpSnapshot {
        TcpSnapshot {
            snd_cwnd_segs: cwnd,
            snd_mss_bytes: MSS,
            unacked_segs: cwnd,
            rtt_us: 50_000,
            wmem_queued_bytes: Some(sndbuf_value.saturating_u32().saturating_mul(2)),
            ..TcpSnapshot::empty()
        }
    }

    fn drained(cwnd: u32) -> TcpSnapshot {
        TcpSnapshot {
            wmem_queued_bytes: Some(0),
            unacked_segs: 0,
            ..bulk(cwnd, Bytes::ZERO)
        }
    }

    fn sender(pool: &SharedPool) -> PscTuner {
        let mut t = PscConfig::default()
            .pool(pool.clone())
            .build(TunerContext::for_tests(Role::Sender));
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(t.poll_action(), Some(Action::SetSndBuf(Bytes::kib(16))));
        t.handle_event(Time::ZERO, ConnEvent::Established);
        t
    }

    fn last_sndbuf(t: &mut PscTuner) -> Option<Bytes> {
        let mut last = None;
        while let Some(a) = t.poll_action() {
            match a {
                Action::SetSndBuf(b) => last = Some(b),
                other => panic!("unexpected {other:?}"),
            }
        }
        last
    }

    #[test]
    fn grows_target_when_cwnd_exceeds_half_target_in_slow_start() {
        let pool = PoolConfig::default().shared();
        let mut t = sender(&pool);
        let mut now = Time::ZERO;
        for cwnd in [10u32, 20, 40, 80, 160, 320] {
            now += Duration::from_millis(50);
            let cur = t.current();
            t.handle_snapshot(now, &bulk(cwnd, cur));
            let cwnd_bytes = u64::from(cwnd * MSS);
            assert!(t.net_target().0 >= 2 * cwnd_bytes, "cwnd {cwnd}");
            assert!(t.net_target().0 <= 4 * cwnd_bytes, "cwnd {cwnd}");
            assert_eq!(
                last_sndbuf(&mut t),
                Some(t.net_target()),
                "increase at once"
            );
        }
    }

    #[test]
    fn holds_target_steady_through_the_congestion_avoidance_sawtooth() {
        let pool = PoolConfig::default().shared();
        let mut t = sender(&pool);
        let mut now = Time::ZERO;
        now += Duration::from_millis(50);
        t.handle_snapshot(now, &bulk(300, t.current()));
        let target = t.net_target();
        last_sndbuf(&mut t);
        // Sawtooth between 150 and 300 segments: halve on loss, grow linearly.
        for round in 0..40u32 {
            let cwnd = 150 + (round * 15) % 151;
            now += Duration::from_millis(50);
            t.handle_snapshot(now, &bulk(cwnd, t.current()));
            assert_eq!(t.net_target(), target, "round {round} cwnd {cwnd}");
            assert_eq!(last_sndbuf(&mut t), None);
        }
    }

    #[test]
    fn shrinks_lazily_after_a_loss_collapses_cwnd() {
        let pool = PoolConfig::default().shared();
        let mut t = sender(&pool);
        let mut now = Time::from_millis(50);
        t.handle_snapshot(now, &bulk(400, t.current()));
        let big = last_sndbuf(&mut t).expect("grew");
        // A timeout: cwnd back to 10 segments; the buffer is still full of unacked data.
        now += Duration::from_millis(50);
        let mut s = bulk(10, big);
        s.unacked_segs = 400;
        t.handle_snapshot(now, &s);
        assert!(t.net_target() < big);
        assert_eq!(
            last_sndbuf(&mut t),
            None,
            "nothing acked yet: keep the buffer"
        );
        // Half of the queue acknowledged: shrink to what is still queued.
        now += Duration::from_millis(50);
        let half = Bytes(big.0 / 2);
        t.handle_snapshot(now, &bulk(10, half));
        assert_eq!(last_sndbuf(&mut t), Some(half));
        // Drained: down to the target.
        now += Duration::from_millis(50);
        t.handle_snapshot(now, &drained(10));
        assert_eq!(last_sndbuf(&mut t), Some(t.net_target()));
        assert_eq!(pool.with(|p| p.held_total()), t.net_target());
    }

    #[test]
    fn follows_cwnd_when_the_rtt_doubles() {
        let pool = PoolConfig::default().shared();
        let mut t = sender(&pool);
        t.handle_snapshot(Time::from_millis(50), &bulk(200, t.current()));
        let before = t.net_target();
        last_sndbuf(&mut t);
        // Same rate, twice the RTT: CUBIC's window doubles over a few rounds.
        let mut now = Time::from_millis(50);
        for cwnd in [250u32, 300, 350, 400] {
            now += Duration::from_millis(100);
            let mut s = bulk(cwnd, t.current());
            s.rtt_us = 100_000;
            t.handle_snapshot(now, &s);
        }
        assert_eq!(t.net_target(), Bytes(2 * 400 * u64::from(MSS)));
        assert!(t.net_target() > before);
        assert_eq!(last_sndbuf(&mut t), Some(t.net_target()));
        assert_eq!(t.poll_interval(), Some(Duration::from_millis(25)));
    }

    #[test]
    fn app_limited_connection_keeps_a_small_buffer() {
        let pool = PoolConfig::default().shared();
        let mut t = sender(&pool);
        let mut now = Time::ZERO;
        for _ in 0..20 {
            now += Duration::from_millis(50);
            let s = TcpSnapshot {
                delivery_rate_app_limited: true,
                unacked_segs: 2,
                wmem_queued_bytes: Some(6000),
                ..bulk(10, Bytes::ZERO)
            };
            t.handle_snapshot(now, &s);
        }
        assert_eq!(t.current(), Bytes(28_960));
    }

    #[test]
    fn fair_share_caps_growth_when_connections_share_the_pool() {
        let pool = PoolConfig::default().size(Bytes::mib(1)).shared();
        let mut a = sender(&pool);
        let mut b = sender(&pool);
        let mut now = Time::ZERO;
        for _ in 0..10 {
            now += Duration::from_millis(300);
            let ca = a.current();
            a.handle_snapshot(now, &bulk(2000, ca));
            b.handle_snapshot(now, &drained(2000));
            last_sndbuf(&mut a);
            last_sndbuf(&mut b);
            assert!(pool.with(|p| p.held_total()) <= Bytes::mib(1));
        }
        // Both want far more than the pool; a drains lazily, b grows into what a releases.
        now += Duration::from_millis(300);
        a.handle_snapshot(now, &drained(2000));
        b.handle_snapshot(now, &drained(2000));
        last_sndbuf(&mut a);
        last_sndbuf(&mut b);
        assert_eq!(a.current(), Bytes(512 * 1024));
        assert_eq!(b.current(), Bytes(512 * 1024));
    }

    #[test]
    fn memory_in_use_over_the_threshold_shrinks_buffers_as_data_is_acked() {
        let pool = PoolConfig::default().size(Bytes::mib(1)).shared();
        let mut a = sender(&pool);
        a.handle_snapshot(Time::from_millis(10), &bulk(100, Bytes::kib(16)));
        let grown = last_sndbuf(&mut a).expect("grew");
        // Some other user of the pool reports heavy use: over AUTO_SND_THRESH.
        let hog = pool.with(|p| {
            let id = p.register();
            p.report(id, Bytes::ZERO, Bytes::mib(1));
            id
        });
        let mut s = bulk(100, grown);
        s.wmem_queued_bytes = Some(200_000); // 100 KB in SO_SNDBUF units still queued
        a.handle_snapshot(Time::from_millis(20), &s);
        assert_eq!(last_sndbuf(&mut a), Some(Bytes(100_000)));
        s.wmem_queued_bytes = Some(100_000);
        a.handle_snapshot(Time::from_millis(30), &s);
        assert_eq!(last_sndbuf(&mut a), Some(Bytes(50_000)));
        pool.with(|p| p.unregister(hog));
        a.handle_snapshot(Time::from_millis(40), &bulk(100, Bytes(50_000)));
        assert_eq!(last_sndbuf(&mut a), Some(grown), "back to the target");
    }

    #[test]
    fn user_set_buffer_stops_tuning_and_releases_the_share() {
        let pool = PoolConfig::default().shared();
        let mut t = sender(&pool);
        t.handle_snapshot(Time::from_millis(50), &bulk(100, Bytes::kib(16)));
        assert!(last_sndbuf(&mut t).is_some());
        t.handle_event(Time::from_millis(60), ConnEvent::UserSetBuffer);
        t.handle_snapshot(Time::from_millis(100), &bulk(1000, Bytes::kib(16)));
        assert_eq!(t.poll_action(), None);
        assert_eq!(t.poll_interval(), None);
        assert!(pool.with(|p| p.is_empty()));
    }

    #[test]
    fn closed_connection_gives_its_share_back() {
        let pool = PoolConfig::default().shared();
        let mut t = sender(&pool);
        t.handle_snapshot(Time::from_millis(50), &bulk(100, Bytes::kib(16)));
        assert!(pool.with(|p| p.held_total()) > Bytes::ZERO);
        t.handle_event(Time::from_millis(60), ConnEvent::Closed);
        assert_eq!(pool.with(|p| p.held_total()), Bytes::ZERO);
        let other = sender(&pool);
        drop(other);
        assert!(pool.with(|p| p.is_empty()), "dropping also releases");
    }

    #[test]
    fn target_is_capped_at_wmem_max() {
        let pool = PoolConfig::default().shared();
        let mut t = sender(&pool);
        t.handle_snapshot(Time::from_millis(50), &bulk(100_000, Bytes::kib(16)));
        assert_eq!(last_sndbuf(&mut t), Some(Bytes::mib(4)));
    }

    #[test]
    fn receiver_asks_for_rmem_max_before_connect_and_nothing_else() {
        let mut r = PscConfig::default().build(TunerContext::for_tests(Role::Receiver));
        r.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(r.poll_action(), Some(Action::SetRcvBuf(Bytes::mib(4))));
        r.handle_event(Time::ZERO, ConnEvent::Established);
        r.handle_snapshot(Time::from_millis(10), &bulk(100, Bytes::ZERO));
        assert_eq!(r.poll_action(), None);
        assert_eq!(r.poll_interval(), None);
    }

    #[test]
    fn net_target_band_edges_use_integer_division() {
        // Found by the property below: after a halving, a cwnd exactly at `target / 4`
        // (rounded down) is inside the band and leaves the target alone.
        let mut n = NetTarget::new(16_384, 1 << 40);
        n.update(1_505_929);
        assert_eq!(n.get(), 3_011_858);
        assert!(n.update(376_482));
        assert_eq!(n.get(), 1_505_929);
        assert!(!n.update(376_482));
    }

    proptest! {
        #[test]
        fn net_target_stays_in_the_band_and_never_flaps_inside_it(
            cwnds in proptest::collection::vec(1u64..50_000_000, 1..100),
        ) {
            let mut n = NetTarget::new(16_384, 1 << 40);
            for c in cwnds {
                n.update(c);
                prop_assert!(n.get() >= 2 * c);
                // The band's bottom is `target / 4` in integer division (3,011,858 / 2 =
                // 1,505,929 holds a cwnd of 376,482: one byte short of 4 x cwnd).
                prop_assert!(n.get() / 4 <= c || n.get() == 16_384);
                // Any cwnd inside the band leaves the target alone.
                let t = n.get();
                for inside in [t / 4, t / 2, (t / 4 + t / 2) / 2] {
                    let mut m = n;
                    prop_assert!(!m.update(inside));
                }
            }
        }
    }
}
