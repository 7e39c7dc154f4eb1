//! One memory budget shared by the streams of several sessions, as `serve --memory-budget`
//! builds it: each session's [`TunerFactory`] draws from its own view of one pool (its clock
//! offset and name). Sessions arriving and leaving reshare the budget within a second, and
//! what the pool hands out never exceeds it.

use proptest::prelude::*;
use std::time::Duration;
use tcptune_core::tuners::pool::{PoolConfig, SharedPool};
use tcptune_core::{
    Action, Bytes, ConnEvent, PathHint, Rate, Role, TcpSnapshot, TcpState, Time, TuneMode, Tuner,
    TunerContext, TunerFactory,
};

const MSS: u32 = 1448;

/// A stream of a session: its tuner and the `SO_SNDBUF` value its socket holds.
struct Stream {
    tuner: Box<dyn Tuner>,
    sndbuf: Bytes,
}

impl Stream {
    fn apply(&mut self) {
        while let Some(a) = self.tuner.poll_action() {
            if let Action::SetSndBuf(v) = a {
                self.sndbuf = v;
            }
        }
    }
}

/// A session of `streams` bulk senders with mode `mode`, starting at pool time `start`.
struct Session {
    start: Time,
    streams: Vec<Stream>,
}

impl Session {
    fn new(pool: &SharedPool, name: &str, mode: TuneMode, n: u32, start: Time) -> Session {
        let offset = Duration::from_nanos(start.as_nanos());
        let f = TunerFactory::new(mode).with_budget(pool.view(offset, name));
        let streams = (0..n)
            .map(|i| {
                let mut ctx = TunerContext::for_tests(Role::Sender);
                ctx.stream_index = i;
                ctx.streams = n;
                ctx.hint = PathHint {
                    rtt: Some(Duration::from_millis(50)),
                    rate: Some(Rate::gbit(1)),
                    ..PathHint::default()
                };
                let mut s = Stream {
                    tuner: f.build(ctx),
                    sndbuf: Bytes::ZERO,
                };
                s.tuner.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
                s.apply();
                s.tuner.handle_event(Time::ZERO, ConnEvent::Established);
                s.apply();
                s
            })
            .collect();
        Session { start, streams }
    }

    /// One sample of every stream at pool time `t`: a bulk sender whose congestion window
    /// wants `cwnd_bytes` and whose queue holds 80% of its buffer (the writer is woken when a
    /// third is free, so a full buffer is rarely completely full).
    fn sample(&mut self, t: Time, cwnd_bytes: u64) {
        let now = Time::from_nanos(t.as_nanos() - self.start.as_nanos());
        for s in &mut self.streams {
            let queued = s.sndbuf.0 * 8 / 10;
            let snap = TcpSnapshot {
                state: TcpState::Established,
                snd_cwnd_segs: u32::try_from(cwnd_bytes / u64::from(MSS)).unwrap_or(u32::MAX),
                snd_mss_bytes: MSS,
                unacked_segs: 10,
                rtt_us: 50_000,
                min_rtt_us: Some(50_000),
                wmem_queued_bytes: Some(u32::try_from(queued * 2).unwrap_or(u32::MAX)),
                ..TcpSnapshot::empty()
            };
            s.tuner.handle_snapshot(now, &snap);
            s.apply();
        }
    }

    fn close(&mut self, t: Time) {
        let now = Time::from_nanos(t.as_nanos() - self.start.as_nanos());
        for s in &mut self.streams {
            s.tuner.handle_event(now, ConnEvent::Closed);
            s.apply();
        }
        self.streams.clear();
    }

    fn held(&self) -> Vec<u64> {
        self.streams
            .iter()
            .map(|s| s.tuner.pool_share().map_or(0, |p| p.held.0))
            .collect()
    }
}

/// Every 10 ms of pool time from `from` to `to`, sample the sessions; check the budget.
fn run(pool: &SharedPool, sessions: &mut [&mut Session], from: u64, to: u64, budget: u64) {
    let mut t = from;
    while t < to {
        for s in sessions.iter_mut() {
            s.sample(Time::from_millis(t), 600 << 10);
        }
        let held = pool.with(|p| p.held_total()).0;
        assert!(held <= budget, "{held} held of a {budget} budget at {t} ms");
        t += 10;
    }
}

fn near(v: &[u64], want: u64) -> bool {
    v.iter().all(|&x| x.abs_diff(want) * 10 <= want)
}

#[test]
fn a_session_arriving_and_leaving_reshares_the_budget_within_a_second() {
    let budget = 1u64 << 20;
    let pool = PoolConfig::default().size(Bytes(budget)).shared();
    // Two psc streams alone: half the budget each (each wants 2 x 600 KiB).
    let mut a = Session::new(&pool, "a", TuneMode::Psc, 2, Time::ZERO);
    run(&pool, &mut [&mut a], 0, 3000, budget);
    assert!(near(&a.held(), budget / 2), "{:?}", a.held());
    // Two auto streams of a second session arrive at 3 s: within a second, a quarter each.
    let mut b = Session::new(&pool, "b", TuneMode::Auto, 2, Time::from_millis(3000));
    run(&pool, &mut [&mut a, &mut b], 3000, 4000, budget);
    assert!(near(&a.held(), budget / 4), "a {:?}", a.held());
    assert!(near(&b.held(), budget / 4), "b {:?}", b.held());
    let shares = pool.with(|p| p.shares());
    assert_eq!(shares.len(), 4);
    assert_eq!(
        shares.iter().filter(|s| s.owner == "b").count(),
        2,
        "{shares:?}"
    );
    // The sockets hold what the pool granted.
    for s in a.streams.iter().chain(&b.streams) {
        assert_eq!(Some(s.sndbuf), s.tuner.pool_share().map(|p| p.held));
    }
    // b leaves at 6 s: within a second a has half again.
    run(&pool, &mut [&mut a, &mut b], 4000, 6000, budget);
    b.close(Time::from_millis(6000));
    run(&pool, &mut [&mut a], 6000, 7000, budget);
    assert!(near(&a.held(), budget / 2), "{:?}", a.held());
    assert_eq!(pool.with(|p| p.len()), 2);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn what_the_pool_hands_out_never_exceeds_the_budget(
        budget_kib in 64u64..4096,
        sessions in proptest::collection::vec((0u64..3000, 1u64..3000, 1u32..6, any::<bool>(), 16u64..4096), 1..6),
    ) {
        let budget = budget_kib << 10;
        let pool = PoolConfig::default().size(Bytes(budget)).shared();
        let mut live: Vec<(u64, Session, u64)> = Vec::new();
        let mut pending = sessions.clone();
        pending.sort_by_key(|s| s.0);
        let mut t = 0;
        while t < 6000 {
            while pending.first().is_some_and(|s| s.0 <= t) {
                let (start, len, n, psc, cwnd_kib) = pending.remove(0);
                let mode = if psc { TuneMode::Psc } else { TuneMode::Auto };
                let name = format!("s{start}");
                live.push((start + len, Session::new(&pool, &name, mode, n, Time::from_millis(start)), cwnd_kib << 10));
            }
            for (end, s, cwnd) in live.iter_mut() {
                if *end <= t {
                    s.close(Time::from_millis(t));
                } else {
                    s.sample(Time::from_millis(t), *cwnd);
                }
            }
            live.retain(|(end, _, _)| *end > t);
            let held = pool.with(|p| p.held_total()).0;
            prop_assert!(held <= budget, "{} held of {}", held, budget);
            let shares: u64 = pool.with(|p| p.shares().iter().map(|s| s.held.0).sum());
            prop_assert_eq!(shares, held);
            t += 10;
        }
    }
}
