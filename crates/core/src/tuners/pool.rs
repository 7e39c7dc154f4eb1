//! PSC's shared memory pool: `hiwat_fair_share` exactly as Appendix A of Semke, Mahdavi &
//! Mathis (SIGCOMM'98), plus the `AUTO_SND_THRESH` hard limit.
//!
//! One pool serves every PSC tuner of one transfer end (the [`TunerFactory`](crate::TunerFactory)
//! holds it and hands a [`SharedPool`] to each PSC tuner it builds), or, under a memory
//! budget, every `psc` and `auto` stream of every session of a server (`serve
//! --memory-budget`): then each session sees the pool through a view
//! ([`SharedPool::view`]) that names it and converts its clock (each session's `now` starts
//! at its own epoch) to the pool's. Amounts are in `SO_SNDBUF` value units, the same units
//! as [`Action::SetSndBuf`](crate::Action) (the kernel holds about twice as much).
//!
//! # The fair share (Appendix A)
//!
//! Every `interval` (500 ms: "twice per second") of `now`, over the connections in
//! ESTABLISHED or CLOSE_WAIT: let `s` be the small ones (`sb_net_target < hiwat_fair_share`,
//! using the share computed last time), `M` the sum of their targets. If `M >= size`, too many
//! small connections exist and `hiwat_fair_share = size / |all|`; otherwise the part of the
//! pool the small connections leave is split equally among the large ones:
//! `hiwat_fair_share = (size - M) / |large|`. One pass over the connections: O(n).
//!
//! Appendix A leaves `|large| = 0` undefined; then nobody is limited by the fair share and we
//! set it to the whole pool (the grant check below still bounds the total). The share never
//! drops below `floor`, the minimum every established connection is entitled to.
//!
//! Repeated recomputation converges to the max-min fair allocation (`min(target, level)`,
//! the water level that fills the pool); the property tests check it does, and stays there.
//!
//! # Grants: never more than the pool
//!
//! A connection's `sb_mem_target` is `min(sb_net_target, hiwat_fair_share)`. Between
//! recomputations targets move, so the pool also tracks what each connection *holds* (the
//! buffer it last set) and grants an increase only out of memory nobody holds: the sum of
//! holdings never exceeds `size`. Decreases are released by the tuner as its queue drains
//! (PSC's lazy decrease).
//!
//! # `AUTO_SND_THRESH`
//!
//! Tuners report the memory their send queues actually use. When the sum exceeds the pool
//! size, [`MemoryPool::over_threshold`] is true and PSC tuners shrink their buffers as data is
//! acknowledged, whatever their targets say (section 2.2.3).

use crate::time::Time;
use crate::units::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Configuration of a [`MemoryPool`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    size: Bytes,
    floor: Bytes,
    interval: Duration,
}

impl Default for PoolConfig {
    /// 64 MiB pool (`AUTO_SND_THRESH`), 16 KiB floor, recomputed every 500 ms.
    ///
    /// The paper used half the host's mbuf clusters (2 MB of 4 MB). Here the pool is one
    /// transfer end's budget; 64 MiB lets eight streams reach the default 4 MiB `wmem_max`
    /// each and still makes the fair share bite when a transfer opens many more.
    fn default() -> Self {
        PoolConfig {
            size: Bytes::mib(64),
            floor: Bytes::kib(16),
            interval: Duration::from_millis(500),
        }
    }
}

impl PoolConfig {
    /// Pool size, also the `AUTO_SND_THRESH` threshold on memory in use.
    pub fn size(mut self, size: Bytes) -> Self {
        self.size = size;
        self
    }

    /// The least every established connection is entitled to.
    pub fn floor(mut self, floor: Bytes) -> Self {
        self.floor = floor;
        self
    }

    /// How often the fair share is recomputed.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// The pool size.
    pub fn pool_size(&self) -> Bytes {
        self.size
    }

    /// The least every established connection is entitled to.
    pub fn floor_size(&self) -> Bytes {
        self.floor
    }

    /// A pool with this configuration.
    pub fn build(&self) -> MemoryPool {
        MemoryPool::new(self.clone())
    }

    /// A pool with this configuration, ready to share between tuners.
    pub fn shared(&self) -> SharedPool {
        SharedPool::new(self.build())
    }
}

/// A [`MemoryPool`] shared by the tuners of one transfer end, or of every session of a
/// server; seen through a view that says whose streams these are and how their clock maps
/// to the pool's.
#[derive(Clone, Debug)]
pub struct SharedPool {
    pool: Arc<Mutex<MemoryPool>>,
    /// The pool's time when this view's clock read zero.
    offset: Duration,
    /// Whose connections register through this view (a session's label).
    owner: Arc<str>,
}

impl SharedPool {
    fn new(pool: MemoryPool) -> SharedPool {
        SharedPool {
            pool: Arc::new(Mutex::new(pool)),
            offset: Duration::ZERO,
            owner: Arc::from(""),
        }
    }

    /// Run `f` with the pool locked. A poisoned lock (a tuner panicked while holding it) is
    /// recovered: the pool's state is updated field by field and stays consistent enough to
    /// go on.
    pub fn with<R>(&self, f: impl FnOnce(&mut MemoryPool) -> R) -> R {
        let mut guard = match self.pool.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    /// The same pool for a user whose clock reads zero `offset` into the pool's time (a
    /// session that started that long after the server), registering its connections as
    /// `owner`. Every user must map its `now` with [`SharedPool::pool_time`] before
    /// [`MemoryPool::tick`], so that the fair share is recomputed every 500 ms of one clock.
    pub fn view(&self, offset: Duration, owner: &str) -> SharedPool {
        SharedPool {
            pool: self.pool.clone(),
            offset,
            owner: Arc::from(owner),
        }
    }

    /// A time of this view's clock on the pool's clock.
    pub fn pool_time(&self, now: Time) -> Time {
        now + self.offset
    }

    /// Register a connection of this view's owner (`stream` is its 0-based index).
    pub fn register(&self, stream: u32) -> ConnId {
        let owner = self.owner.clone();
        self.with(|p| p.register_as(owner, stream))
    }

    /// Whether two handles share one pool.
    pub fn same_pool(&self, other: &SharedPool) -> bool {
        Arc::ptr_eq(&self.pool, &other.pool)
    }
}

/// One connection's standing in its pool, for the record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolShare {
    /// The pool's `hiwat_fair_share` now.
    pub fair_share: Bytes,
    /// What this connection wants (`sb_net_target`).
    pub net_target: Bytes,
    /// What it holds (the `SO_SNDBUF` value granted).
    pub held: Bytes,
}

/// One connection of a pool, as [`MemoryPool::shares`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareRecord {
    /// Whose (the view's owner, e.g. a session's label).
    pub owner: String,
    /// Stream index within its owner (0-based).
    pub stream: u32,
    /// ESTABLISHED or CLOSE_WAIT: counted in the fair share.
    pub established: bool,
    /// Its `sb_net_target`.
    pub net_target: Bytes,
    /// What it holds.
    pub held: Bytes,
    /// Memory its send queue uses, as last reported.
    pub in_use: Bytes,
}

/// A connection's handle in a [`MemoryPool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnId(u64);

#[derive(Clone, Debug)]
struct Entry {
    id: ConnId,
    owner: Arc<str>,
    stream: u32,
    established: bool,
    net_target: u64,
    held: u64,
    in_use: u64,
}

/// The memory pool: fair share, holdings and memory in use of a set of connections.
#[derive(Debug)]
pub struct MemoryPool {
    cfg: PoolConfig,
    entries: Vec<Entry>,
    index: HashMap<ConnId, usize>,
    next_id: u64,
    fair_share: u64,
    last_recompute: Option<Time>,
    held_total: u64,
    in_use_total: u64,
}

impl MemoryPool {
    /// An empty pool. The fair share starts at the whole pool.
    pub fn new(cfg: PoolConfig) -> MemoryPool {
        let fair_share = cfg.size.0.max(cfg.floor.0);
        MemoryPool {
            cfg,
            entries: Vec::new(),
            index: HashMap::new(),
            next_id: 0,
            fair_share,
            last_recompute: None,
            held_total: 0,
            in_use_total: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.cfg
    }

    /// Add a connection (not yet established, holding nothing).
    pub fn register(&mut self) -> ConnId {
        self.register_as(Arc::from(""), 0)
    }

    /// Add a connection of `owner`'s (stream `stream`), for [`MemoryPool::shares`].
    pub fn register_as(&mut self, owner: Arc<str>, stream: u32) -> ConnId {
        let id = ConnId(self.next_id);
        self.next_id += 1;
        self.index.insert(id, self.entries.len());
        self.entries.push(Entry {
            id,
            owner,
            stream,
            established: false,
            net_target: 0,
            held: 0,
            in_use: 0,
        });
        id
    }

    /// Remove a connection and release everything it holds. Returns whether it was known.
    pub fn unregister(&mut self, id: ConnId) -> bool {
        let Some(i) = self.index.remove(&id) else {
            return false;
        };
        let e = self.entries.swap_remove(i);
        self.held_total -= e.held;
        self.in_use_total -= e.in_use;
        if let Some(moved) = self.entries.get(i) {
            self.index.insert(moved.id, i);
        }
        true
    }

    fn entry(&self, id: ConnId) -> Option<&Entry> {
        self.index.get(&id).map(|&i| &self.entries[i])
    }

    fn entry_mut(&mut self, id: ConnId) -> Option<&mut Entry> {
        match self.index.get(&id) {
            Some(&i) => self.entries.get_mut(i),
            None => None,
        }
    }

    /// Whether the connection is in ESTABLISHED or CLOSE_WAIT (only those count in the fair
    /// share).
    pub fn set_established(&mut self, id: ConnId, established: bool) {
        if let Some(e) = self.entry_mut(id) {
            e.established = established;
        }
    }

    /// Report a connection's network target (`sb_net_target`) and the memory its send queue
    /// uses now.
    pub fn report(&mut self, id: ConnId, net_target: Bytes, in_use: Bytes) {
        let Some(&i) = self.index.get(&id) else {
            return;
        };
        let e = &mut self.entries[i];
        self.in_use_total = self.in_use_total - e.in_use + in_use.0;
        e.in_use = in_use.0;
        e.net_target = net_target.0;
    }

    /// Recompute the fair share if `interval` has passed since the last time (or it never
    /// was). Returns whether it recomputed. A `now` earlier than the last recomputation
    /// (another stream's clock lagging slightly) does nothing.
    pub fn tick(&mut self, now: Time) -> bool {
        let due = match self.last_recompute {
            None => true,
            Some(last) => now >= last + self.cfg.interval,
        };
        if due {
            self.recompute();
            self.last_recompute = Some(now);
        }
        due
    }

    /// Appendix A, one pass. Returns the number of connections visited (all of them, once).
    pub fn recompute(&mut self) -> usize {
        let size = self.cfg.size.0;
        let (mut small_sum, mut n_small, mut n_all) = (0u64, 0u64, 0u64);
        for e in &self.entries {
            if !e.established {
                continue;
            }
            n_all += 1;
            if e.net_target < self.fair_share {
                small_sum = small_sum.saturating_add(e.net_target);
                n_small += 1;
            }
        }
        let n_large = n_all - n_small;
        let share = if n_all == 0 || (small_sum < size && n_large == 0) {
            size
        } else if small_sum >= size {
            size / n_all
        } else {
            (size - small_sum) / n_large
        };
        self.fair_share = share.max(self.cfg.floor.0);
        self.entries.len()
    }

    /// The current `hiwat_fair_share`.
    pub fn fair_share(&self) -> Bytes {
        Bytes(self.fair_share)
    }

    /// `sb_mem_target = min(sb_net_target, hiwat_fair_share)`, at least the floor for an
    /// established connection. Zero for an unknown connection.
    pub fn mem_target(&self, id: ConnId) -> Bytes {
        match self.entry(id) {
            Some(e) => {
                let t = e.net_target.min(self.fair_share);
                Bytes(if e.established {
                    t.max(self.cfg.floor.0)
                } else {
                    t
                })
            }
            None => Bytes::ZERO,
        }
    }

    /// Ask to hold `want` (capped at the connection's `sb_mem_target`). A decrease is taken
    /// at once; an increase is granted out of memory nobody holds. Returns what the
    /// connection now holds.
    pub fn grant(&mut self, id: ConnId, want: Bytes) -> Bytes {
        let cap = self.mem_target(id).0;
        let free = self.cfg.size.0.saturating_sub(self.held_total);
        let Some(e) = self.entry_mut(id) else {
            return Bytes::ZERO;
        };
        let want = want.0.min(cap);
        let new = if want <= e.held {
            want
        } else {
            want.min(e.held.saturating_add(free))
        };
        let old = e.held;
        e.held = new;
        self.held_total = self.held_total - old + new;
        Bytes(new)
    }

    /// PSC's decision for a connection holding `current` with `in_use` queued, after its
    /// report and the pool's tick: grow at once to `sb_mem_target` out of free memory, or
    /// shrink lazily (never below what is queued); above `AUTO_SND_THRESH` (memory in use
    /// over the pool) shrink as acknowledged data leaves, whatever the target. Returns the
    /// new value to set, if it changes; the pool's holdings follow.
    pub fn resize(&mut self, id: ConnId, current: Bytes, in_use: Bytes) -> Option<Bytes> {
        let floor = self.cfg.floor;
        let desired = if self.over_threshold() {
            current.min(in_use).max(floor)
        } else {
            self.mem_target(id)
        };
        if desired > current {
            let got = self.grant(id, desired);
            (got > current).then_some(got)
        } else if desired < current {
            let lazy = desired.max(in_use);
            if lazy < current {
                self.release(id, lazy);
                Some(lazy)
            } else {
                None
            }
        } else {
            None
        }
    }

    /// Lower what a connection holds (a lazy decrease as its queue drains). Values above
    /// what it holds are ignored.
    pub fn release(&mut self, id: ConnId, held: Bytes) {
        let Some(e) = self.entry_mut(id) else {
            return;
        };
        if held.0 < e.held {
            let old = e.held;
            e.held = held.0;
            self.held_total = self.held_total - old + held.0;
        }
    }

    /// What a connection holds.
    pub fn held(&self, id: ConnId) -> Bytes {
        Bytes(self.entry(id).map_or(0, |e| e.held))
    }

    /// Sum of holdings (never more than the pool size).
    pub fn held_total(&self) -> Bytes {
        Bytes(self.held_total)
    }

    /// Sum of the memory in use the connections last reported.
    pub fn in_use_total(&self) -> Bytes {
        Bytes(self.in_use_total)
    }

    /// `AUTO_SND_THRESH` exceeded: memory in use is above the pool size.
    pub fn over_threshold(&self) -> bool {
        self.in_use_total > self.cfg.size.0
    }

    /// A connection's standing (zero for an unknown one).
    pub fn share(&self, id: ConnId) -> PoolShare {
        PoolShare {
            fair_share: self.fair_share(),
            net_target: Bytes(self.entry(id).map_or(0, |e| e.net_target)),
            held: self.held(id),
        }
    }

    /// Every connection, in registration order of the survivors (for logs and reports).
    pub fn shares(&self) -> Vec<ShareRecord> {
        let mut v: Vec<(ConnId, ShareRecord)> = self
            .entries
            .iter()
            .map(|e| {
                (
                    e.id,
                    ShareRecord {
                        owner: e.owner.to_string(),
                        stream: e.stream,
                        established: e.established,
                        net_target: Bytes(e.net_target),
                        held: Bytes(e.held),
                        in_use: Bytes(e.in_use),
                    },
                )
            })
            .collect();
        v.sort_by_key(|(id, _)| id.0);
        v.into_iter().map(|(_, r)| r).collect()
    }

    /// Number of connections.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no connection is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pool(size: u64) -> MemoryPool {
        PoolConfig::default()
            .size(Bytes(size))
            .floor(Bytes(1))
            .build()
    }

    /// Register `targets.len()` established connections with these net targets.
    fn with_targets(p: &mut MemoryPool, targets: &[u64]) -> Vec<ConnId> {
        targets
            .iter()
            .map(|&t| {
                let id = p.register();
                p.set_established(id, true);
                p.report(id, Bytes(t), Bytes(0));
                id
            })
            .collect()
    }

    /// One round as tuners would do it after a recomputation: release down to the target
    /// (queues drained), then grow into it.
    fn settle(p: &mut MemoryPool, ids: &[ConnId]) {
        for &id in ids {
            let t = p.mem_target(id);
            p.release(id, t);
        }
        for &id in ids {
            let t = p.mem_target(id);
            p.grant(id, t);
        }
    }

    /// Integer water-filling: the max-min fair allocation of `size` to `demands`.
    fn max_min(demands: &[u64], size: u64) -> Vec<u64> {
        let mut order: Vec<usize> = (0..demands.len()).collect();
        order.sort_by_key(|&i| demands[i]);
        let mut out = vec![0; demands.len()];
        let mut left = size;
        for (k, &i) in order.iter().enumerate() {
            let share = left / (demands.len() - k) as u64;
            if demands[i] <= share {
                out[i] = demands[i];
                left -= demands[i];
            } else {
                for &j in &order[k..] {
                    out[j] = share;
                }
                break;
            }
        }
        out
    }

    #[test]
    fn fair_share_splits_leftover_among_large_connections() {
        let mut p = pool(100);
        let ids = with_targets(&mut p, &[10, 60, 60]);
        p.tick(Time::ZERO); // all small against the initial share of 100: M = 130 >= 100
        assert_eq!(p.fair_share(), Bytes(33));
        p.tick(Time::from_millis(500)); // s = {10}: (100 - 10) / 2
        assert_eq!(p.fair_share(), Bytes(45));
        settle(&mut p, &ids);
        let held: Vec<u64> = ids.iter().map(|&i| p.held(i).0).collect();
        assert_eq!(held, vec![10, 45, 45]);
    }

    #[test]
    fn small_connections_keep_what_they_need_when_everything_fits() {
        let mut p = pool(100);
        let ids = with_targets(&mut p, &[10, 20, 30]);
        p.tick(Time::ZERO);
        assert_eq!(p.fair_share(), Bytes(100));
        settle(&mut p, &ids);
        assert_eq!(p.held_total(), Bytes(60));
    }

    #[test]
    fn recomputes_only_every_500_ms_of_now() {
        let mut p = pool(100);
        with_targets(&mut p, &[80, 80]);
        assert!(p.tick(Time::from_millis(1000)));
        assert!(!p.tick(Time::from_millis(1499)));
        assert!(
            !p.tick(Time::from_millis(900)),
            "a lagging clock does nothing"
        );
        assert!(p.tick(Time::from_millis(1500)));
    }

    #[test]
    fn unestablished_connections_do_not_count_in_the_share() {
        let mut p = pool(100);
        let a = p.register();
        p.report(a, Bytes(90), Bytes(0));
        let ids = with_targets(&mut p, &[90]);
        p.tick(Time::ZERO);
        p.tick(Time::from_millis(500));
        assert_eq!(p.fair_share(), Bytes(100));
        assert_eq!(p.mem_target(ids[0]), Bytes(90));
        assert_eq!(
            p.mem_target(a),
            Bytes(90),
            "not established: no floor, no cap"
        );
    }

    #[test]
    fn grant_never_takes_memory_another_connection_holds() {
        let mut p = pool(100);
        let ids = with_targets(&mut p, &[90, 90]);
        // Before the first recomputation the share is the whole pool.
        assert_eq!(p.grant(ids[0], Bytes(90)), Bytes(90));
        assert_eq!(p.grant(ids[1], Bytes(90)), Bytes(10));
        p.tick(Time::ZERO);
        p.tick(Time::from_millis(500));
        assert_eq!(p.fair_share(), Bytes(50));
        // The first releases lazily; the second grows as memory frees.
        p.release(ids[0], Bytes(70));
        assert_eq!(p.grant(ids[1], Bytes(50)), Bytes(30));
        p.release(ids[0], Bytes(50));
        assert_eq!(p.grant(ids[1], Bytes(50)), Bytes(50));
        assert_eq!(p.held_total(), Bytes(100));
    }

    #[test]
    fn closed_connection_releases_its_share() {
        let mut p = pool(100);
        let ids = with_targets(&mut p, &[80, 80]);
        p.grant(ids[0], Bytes(80));
        p.report(ids[0], Bytes(80), Bytes(70));
        assert!(p.unregister(ids[0]));
        assert!(!p.unregister(ids[0]));
        assert_eq!(p.held_total(), Bytes(0));
        assert_eq!(p.in_use_total(), Bytes(0));
        assert_eq!(p.grant(ids[1], Bytes(80)), Bytes(80));
        assert_eq!(p.len(), 1);
    }

    #[test]
    fn memory_in_use_above_the_pool_trips_the_threshold() {
        let mut p = pool(100);
        let ids = with_targets(&mut p, &[50, 50]);
        p.report(ids[0], Bytes(50), Bytes(60));
        assert!(!p.over_threshold());
        p.report(ids[1], Bytes(50), Bytes(41));
        assert!(p.over_threshold());
        p.report(ids[1], Bytes(50), Bytes(40));
        assert!(!p.over_threshold());
    }

    #[test]
    fn too_many_small_connections_split_the_pool_equally() {
        let mut p = pool(100);
        let _ = with_targets(&mut p, &[30, 30, 30, 30]);
        p.tick(Time::ZERO);
        assert_eq!(p.fair_share(), Bytes(25));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Register,
        Establish(usize, bool),
        Report(usize, u64, u64),
        Grant(usize, u64),
        Release(usize, u64),
        Advance(u64),
        Unregister(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            Just(Op::Register),
            (0..16usize, any::<bool>()).prop_map(|(i, b)| Op::Establish(i, b)),
            (0..16usize, 0..4_000u64, 0..4_000u64).prop_map(|(i, t, u)| Op::Report(i, t, u)),
            (0..16usize, 0..4_000u64).prop_map(|(i, w)| Op::Grant(i, w)),
            (0..16usize, 0..4_000u64).prop_map(|(i, w)| Op::Release(i, w)),
            (0..1_000u64).prop_map(Op::Advance),
            (0..16usize).prop_map(Op::Unregister),
        ]
    }

    proptest! {
        #[test]
        fn never_hands_out_more_than_the_pool(size in 1_000u64..10_000, ops in proptest::collection::vec(op(), 1..200)) {
            let mut p = PoolConfig::default().size(Bytes(size)).floor(Bytes(10)).build();
            let mut ids: Vec<ConnId> = Vec::new();
            let mut now = Time::ZERO;
            for o in ops {
                let pick = |i: usize| ids.get(i % ids.len().max(1)).copied();
                match o {
                    Op::Register => ids.push(p.register()),
                    Op::Establish(i, b) => if let Some(id) = pick(i) { p.set_established(id, b) },
                    Op::Report(i, t, u) => if let Some(id) = pick(i) { p.report(id, Bytes(t), Bytes(u)) },
                    Op::Grant(i, w) => if let Some(id) = pick(i) {
                        let before = p.held(id);
                        let got = p.grant(id, Bytes(w));
                        prop_assert!(got <= p.mem_target(id).max(before));
                    },
                    Op::Release(i, w) => if let Some(id) = pick(i) { p.release(id, Bytes(w)) },
                    Op::Advance(ms) => { now += Duration::from_millis(ms); p.tick(now); },
                    Op::Unregister(i) => if let Some(id) = pick(i) { p.unregister(id); },
                }
                prop_assert!(p.held_total().0 <= size);
                let sum: u64 = p.entries.iter().map(|e| e.held).sum();
                prop_assert_eq!(sum, p.held_total().0);
                let in_use: u64 = p.entries.iter().map(|e| e.in_use).sum();
                prop_assert_eq!(in_use, p.in_use_total().0);
            }
        }

        #[test]
        fn converges_to_the_max_min_fair_allocation_and_stays(
            size in 100u64..1_000_000,
            demands in proptest::collection::vec(1u64..2_000_000, 1..24),
        ) {
            let mut p = pool(size);
            let ids = with_targets(&mut p, &demands);
            let mut now = Time::ZERO;
            let rounds = demands.len() + 3;
            for _ in 0..rounds {
                p.tick(now);
                settle(&mut p, &ids);
                now += Duration::from_millis(500);
            }
            let want = max_min(&demands, size);
            let got: Vec<u64> = ids.iter().map(|&i| p.held(i).0).collect();
            prop_assert_eq!(&got, &want);
            prop_assert!(p.held_total().0 <= size);
            // Every connection gets at least min(its demand, an equal split).
            let equal = size / demands.len() as u64;
            for (g, d) in got.iter().zip(&demands) {
                prop_assert!(*g >= (*d).min(equal));
            }
            // Stable: more recomputations change nothing (no flapping).
            let share = p.fair_share();
            for _ in 0..5 {
                p.tick(now);
                settle(&mut p, &ids);
                now += Duration::from_millis(500);
                prop_assert_eq!(p.fair_share(), share);
            }
            let again: Vec<u64> = ids.iter().map(|&i| p.held(i).0).collect();
            prop_assert_eq!(again, got);
        }

        #[test]
        fn recomputation_visits_each_connection_once(n in 0usize..500, targets in proptest::collection::vec(1u64..1_000, 500)) {
            let mut p = pool(10_000);
            with_targets(&mut p, &targets[..n]);
            prop_assert_eq!(p.recompute(), n);
        }
    }
}
