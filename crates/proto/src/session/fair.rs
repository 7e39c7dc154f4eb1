//! Fair shares of the path between the bulk transfers at one server (issue 22, item 3: "a
//! good neighbour"), as a pure state machine: sessions joining and leaving, their delivered
//! bytes and `now` in; each session's share out. No clock, no sockets: the
//! [`super::endpoint::Endpoint`] feeds it and tells the sessions (`ServerMsg::Share`), and
//! the sending end paces its streams with `SO_MAX_PACING_RATE` at the share.
//!
//! # The rule
//!
//! * **Who shares.** Every session whose main phase runs at this server is a member: the
//!   simplest honest guess of a shared bottleneck is "the same server" (its access link is
//!   usually the narrowest part of every path to it). Sessions to one server over disjoint
//!   bottlenecks would be held to a share they did not need to keep: that is the price of
//!   the guess, and why nothing is capped while one session is alone.
//! * **What the path delivers** (`path`): the largest sum of the members' delivery rates
//!   over one [`FairConfig::interval`] seen in the last [`FairConfig::memory`], or the
//!   largest path rate a member's transfer measured with a full pipe (its in-band
//!   measurement, a fresh path-database entry), whichever is larger.
//! * **Once the pipe is full.** Nothing is capped until the path is known full: a member's
//!   transfer measured it (a rate within [`PLATEAU`] of the largest known: a client cannot
//!   declare the pipe full with a small one, and a large one only makes the caps looser),
//!   or the members' summed delivery stopped growing (the last [`PLATEAU_TICKS`] sums
//!   within [`PLATEAU`] of the largest).
//! * **Max-min fair** (PSC's `hiwat_fair_share`, applied to rates): a member that used less
//!   than [`BELOW`] of its share for [`FairConfig::limited_after`] without its rate growing
//!   (limited elsewhere: its own path, its application, its receiver) is *limited*: it
//!   keeps what it uses plus [`DEMAND_HEADROOM`]; what the limited ones leave is split
//!   equally among the others (the water level). A limited member whose rate grows past
//!   what it used when judged by more than 10% is unlimited again. Recomputed every [`FairConfig::interval`] and at once
//!   when a member joins or leaves.
//! * **The cap** a member is told is its share plus [`CAP_HEADROOM`], so that the members'
//!   caps together exceed `path` a little and a path faster than measured shows itself.
//!   A member alone, or before the pipe is full, is told no cap.
//! * A member is told again only when its cap changes by more than [`RETELL`], appears or
//!   goes, or the number of members changes.
//!
//! # Calling order
//!
//! [`FairShare::join`] when a session's main phase starts and [`FairShare::leave`] when it
//! stops sending or ends (either re-shares at once); [`FairShare::path_rate`] when a
//! member's transfer measured the path; [`FairShare::tick`] at [`FairShare::poll_timeout`]
//! with each member's delivered bytes; after every call drain [`FairShare::poll_share`].

use super::SessionId;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};
use tcptune_core::Rate;

/// A member below this fraction of its share may be limited elsewhere.
pub const BELOW: f64 = 0.8;
/// A limited member's allowance: what it used, plus this fraction.
pub const DEMAND_HEADROOM: f64 = 0.25;
/// The cap told is the share plus this fraction.
pub const CAP_HEADROOM: f64 = 0.05;
/// A member is told again when its cap moves by more than this fraction.
pub const RETELL: f64 = 0.03;
/// The summed delivery is a plateau when the last this many sums are within [`PLATEAU`] of
/// the largest.
pub const PLATEAU_TICKS: usize = 3;
/// See [`PLATEAU_TICKS`].
pub const PLATEAU: f64 = 0.1;
/// A rate a limited member must not grow by (over `limited_after`) to stay limited.
const GROWTH: f64 = 0.1;
/// The sums kept (a bound whatever the configuration says).
const MAX_SUMS: usize = 256;
/// The shortest span a delivery rate is computed over.
const MIN_SPAN: Duration = Duration::from_millis(100);

/// How the shares are computed.
#[derive(Clone, Debug, PartialEq)]
pub struct FairConfig {
    /// How often shares are recomputed (as `--memory-budget` re-shares memory).
    pub interval: Duration,
    /// How long a summed delivery counts for the path's rate.
    pub memory: Duration,
    /// How long a member must stay below its share, not growing, to be limited.
    pub limited_after: Duration,
}

impl Default for FairConfig {
    /// Every 500 ms, the path's rate remembered 10 s, limited after 2 s.
    fn default() -> FairConfig {
        FairConfig {
            interval: Duration::from_millis(500),
            memory: Duration::from_secs(10),
            limited_after: Duration::from_secs(2),
        }
    }
}

/// What a member is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    /// Pace the session's streams together at most at this (payload), or no cap.
    pub rate: Option<Rate>,
    /// Bulk sessions sharing the server, this one included.
    pub sessions: u32,
    /// What the path delivers in all, as far as the server knows.
    pub path: Option<Rate>,
}

#[derive(Debug)]
struct Member {
    /// The last delivered count and when it was read.
    last: Option<(Instant, u64)>,
    /// Delivery over the last tick, bytes/s.
    rate: Option<f64>,
    /// The path's rate its transfer measured, bytes/s.
    known: Option<f64>,
    /// Its share at the last computation, bytes/s (`None`: uncapped).
    share: Option<f64>,
    /// Limited elsewhere: what it may use, bytes/s.
    demand: Option<f64>,
    /// Since when it is below its share, its rate then, and the largest since.
    below: Option<(Instant, f64, f64)>,
    /// What it was told last.
    told: Option<Share>,
}

/// The fair shares of one server. See the module documentation.
#[derive(Debug)]
pub struct FairShare {
    cfg: FairConfig,
    members: BTreeMap<SessionId, Member>,
    /// `(when, summed delivery bytes/s)` of the recent ticks.
    sums: VecDeque<(Instant, f64)>,
    next_tick: Option<Instant>,
    out: VecDeque<(SessionId, Share)>,
    /// The pipe was seen full (it stays so while anyone is a member: the summed delivery
    /// dips while a latecomer ramps up into what the others yield).
    full: bool,
}

impl FairShare {
    /// No members yet.
    pub fn new(cfg: FairConfig) -> FairShare {
        FairShare {
            cfg,
            members: BTreeMap::new(),
            sums: VecDeque::new(),
            next_tick: None,
            out: VecDeque::new(),
            full: false,
        }
    }

    /// Members now.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// No members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Whether `session` is a member.
    pub fn contains(&self, session: SessionId) -> bool {
        self.members.contains_key(&session)
    }

    /// What the path delivers, as far as known (bytes/s).
    fn path(&self) -> Option<f64> {
        let seen = self.sums.iter().map(|(_, s)| *s).fold(0.0, f64::max);
        let known = self
            .members
            .values()
            .filter_map(|m| m.known)
            .fold(0.0, f64::max);
        let p = seen.max(known);
        (p > 0.0).then_some(p)
    }

    /// Whether the pipe is full: a member measured the path, or the summed delivery
    /// plateaued (now or before, while anyone was a member).
    fn full(&self) -> bool {
        if self.full {
            return true;
        }
        let Some(max) = self.path() else { return false };
        // A measured rate near the largest known (a client cannot declare the pipe full
        // with a small one).
        if self
            .members
            .values()
            .any(|m| m.known.is_some_and(|k| k >= max * (1.0 - PLATEAU)))
        {
            return true;
        }
        self.sums.len() >= PLATEAU_TICKS
            && self
                .sums
                .iter()
                .rev()
                .take(PLATEAU_TICKS)
                .all(|(_, s)| *s >= max * (1.0 - PLATEAU))
    }

    /// When [`FairShare::tick`] is due (`None` without members).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_tick.filter(|_| !self.members.is_empty())
    }

    /// A session's main phase started at `now`; `known` is the path's rate it starts with
    /// when that was measured with a full pipe. Everyone is re-shared.
    pub fn join(&mut self, now: Instant, session: SessionId, known: Option<Rate>) {
        self.members.insert(
            session,
            Member {
                last: None,
                rate: None,
                known: known.map(bytes_per_s),
                share: None,
                demand: None,
                below: None,
                told: None,
            },
        );
        self.next_tick.get_or_insert(now + self.cfg.interval);
        self.recompute();
    }

    /// A session stopped sending, or ended: the others are re-shared.
    pub fn leave(&mut self, _now: Instant, session: SessionId) {
        if self.members.remove(&session).is_some() {
            self.recompute();
        }
        if self.members.is_empty() {
            self.next_tick = None;
            self.sums.clear();
            self.full = false;
        }
    }

    /// A member's transfer measured the path's rate with a full pipe.
    pub fn path_rate(&mut self, session: SessionId, rate: Rate) {
        if let Some(m) = self.members.get_mut(&session) {
            if rate.0 > 0 {
                m.known = Some(bytes_per_s(rate));
                self.recompute();
            }
        }
    }

    /// Time passed: read every member's delivered bytes (`None`: nothing to read now),
    /// update the path's rate and who is limited, re-share.
    pub fn tick(&mut self, now: Instant, delivered: &dyn Fn(SessionId) -> Option<u64>) {
        let mut sum = 0.0;
        let mut any = false;
        for (sid, m) in self.members.iter_mut() {
            let Some(d) = delivered(*sid) else { continue };
            match m.last {
                // A counter that went back is a new engine: start over.
                Some((t, before)) if d >= before => {
                    let span = now.saturating_duration_since(t);
                    if span < MIN_SPAN {
                        continue;
                    }
                    let r = (d - before) as f64 / span.as_secs_f64();
                    m.rate = Some(r);
                    sum += r;
                    any = true;
                }
                _ => m.rate = None,
            }
            m.last = Some((now, d));
        }
        if any {
            self.sums.push_back((now, sum));
        }
        while self
            .sums
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) > self.cfg.memory)
            || self.sums.len() > MAX_SUMS
        {
            self.sums.pop_front();
        }
        let limited_after = self.cfg.limited_after;
        for m in self.members.values_mut() {
            m.judge(now, limited_after);
        }
        self.next_tick = Some(now + self.cfg.interval);
        self.recompute();
    }

    /// What `session` was told last, if anything.
    pub fn told(&self, session: SessionId) -> Option<Share> {
        self.members.get(&session).and_then(|m| m.told)
    }

    /// The next member to tell its share.
    pub fn poll_share(&mut self) -> Option<(SessionId, Share)> {
        self.out.pop_front()
    }

    /// Compute every member's share (max-min fair over the path's rate) and queue what
    /// changed.
    fn recompute(&mut self) {
        let n = self.members.len();
        let path = self.path();
        self.full = self.full();
        let capped = n >= 2 && self.full;
        let level = match path {
            Some(p) if capped => Some(water_level(
                p,
                self.members.values().map(|m| m.demand).collect(),
            )),
            _ => None,
        };
        let sessions = u32::try_from(n).unwrap_or(u32::MAX);
        for (sid, m) in self.members.iter_mut() {
            m.share = level.map(|l| m.demand.map_or(l, |d| d.min(l)));
            let share = Share {
                rate: m
                    .share
                    .map(|s| Rate((s * (1.0 + CAP_HEADROOM) * 8.0).round() as u64)),
                sessions,
                path: path.map(|p| Rate((p * 8.0).round() as u64)),
            };
            if m.told.is_none_or(|t| differs(&t, &share)) {
                m.told = Some(share);
                self.out.push_back((*sid, share));
            }
        }
    }
}

impl Member {
    /// Is it limited elsewhere (below its share, not growing), or no longer?
    fn judge(&mut self, now: Instant, after: Duration) {
        let (Some(rate), Some(share)) = (self.rate, self.share) else {
            self.below = None;
            return;
        };
        if let Some(d) = self.demand {
            // It grew past what it used when judged limited: it may want more.
            if rate >= d / (1.0 + DEMAND_HEADROOM) * (1.0 + GROWTH) {
                self.demand = None;
                self.below = None;
            }
            return;
        }
        if rate >= share * BELOW {
            self.below = None;
            return;
        }
        match &mut self.below {
            None => self.below = Some((now, rate, rate)),
            Some((since, first, max)) => {
                *max = max.max(rate);
                if rate > *first * (1.0 + GROWTH) {
                    // Growing (a latecomer ramping up): not limited; watch from here.
                    *since = now;
                    *first = rate;
                    *max = rate;
                } else if now.saturating_duration_since(*since) >= after {
                    self.demand = Some(*max * (1.0 + DEMAND_HEADROOM));
                    self.below = None;
                }
            }
        }
    }
}

/// The water level that fills `path` when each member takes `min(demand, level)` (`None`:
/// no limit): the max-min fair share of the unlimited members.
pub fn water_level(path: f64, mut demands: Vec<Option<f64>>) -> f64 {
    let n = demands.len();
    if n == 0 {
        return path;
    }
    demands.sort_by(|a, b| match (a, b) {
        (Some(x), Some(y)) => x.total_cmp(y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    let largest = demands.iter().flatten().copied().fold(0.0, f64::max);
    let mut left = path.max(0.0);
    let mut count = n;
    for d in demands {
        let level = left / count as f64;
        match d {
            Some(d) if d < level => {
                left -= d.max(0.0);
                count -= 1;
            }
            _ => return level,
        }
    }
    // Every member is limited below the level: the largest allowance bounds nobody.
    largest
}

fn bytes_per_s(r: Rate) -> f64 {
    r.0 as f64 / 8.0
}

/// Whether `b` is worth telling after `a`.
fn differs(a: &Share, b: &Share) -> bool {
    if a.sessions != b.sessions {
        return true;
    }
    match (a.rate, b.rate) {
        (None, None) => false,
        (Some(x), Some(y)) => (x.0 as f64 - y.0 as f64).abs() > RETELL * x.0.max(1) as f64,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    /// Members' delivered counters, advanced by hand.
    struct Counters(BTreeMap<SessionId, u64>);

    impl Counters {
        fn add(&mut self, sid: SessionId, bytes: u64) {
            *self.0.entry(sid).or_insert(0) += bytes;
        }
        fn read(&self) -> impl Fn(SessionId) -> Option<u64> + '_ {
            |sid| self.0.get(&sid).copied()
        }
    }

    fn drain(f: &mut FairShare) -> BTreeMap<SessionId, Share> {
        let mut out = BTreeMap::new();
        while let Some((sid, s)) = f.poll_share() {
            out.insert(sid, s);
        }
        out
    }

    fn mbit(s: &Share) -> Option<f64> {
        s.rate.map(|r| r.0 as f64 / 1e6)
    }

    /// Session 1 alone at 100 MB/s (800 Mbit/s) for `ticks` half-seconds.
    fn incumbent(ticks: u32) -> (FairShare, Counters, Instant) {
        let t0 = Instant::now();
        let mut f = FairShare::new(FairConfig::default());
        let mut c = Counters(BTreeMap::new());
        f.join(t0, 1, None);
        let mut now = t0;
        f.tick(now, &c.read());
        for _ in 0..ticks {
            now += Duration::from_millis(500);
            c.add(1, 50 * MB);
            f.tick(now, &c.read());
        }
        (f, c, now)
    }

    #[test]
    fn a_member_alone_is_never_capped() {
        let (mut f, _, _) = incumbent(10);
        let told = drain(&mut f);
        assert_eq!(told.len(), 1, "told once, at its join: {told:?}");
        assert_eq!(told[&1].rate, None);
        assert_eq!(told[&1].sessions, 1);
        assert!(f.poll_timeout().is_some());
    }

    #[test]
    fn a_latecomer_makes_the_incumbent_yield_half_at_once() {
        let (mut f, _, now) = incumbent(6);
        drain(&mut f);
        f.join(now, 2, None);
        let told = drain(&mut f);
        // 800 Mbit/s path: each is capped at 400 plus the 5 % headroom.
        for sid in [1, 2] {
            assert_eq!(told[&sid].sessions, 2);
            let r = mbit(&told[&sid]).expect("capped");
            assert!((r - 420.0).abs() < 0.5, "{sid}: {r}");
            assert_eq!(told[&sid].path, Some(Rate(800 * MB)));
        }
    }

    #[test]
    fn nothing_is_capped_before_the_pipe_is_full() {
        let t0 = Instant::now();
        let mut f = FairShare::new(FairConfig::default());
        let mut c = Counters(BTreeMap::new());
        f.join(t0, 1, None);
        f.tick(t0, &c.read());
        // Slow start: each half-second delivers twice the last.
        let mut now = t0;
        for i in 0..3 {
            now += Duration::from_millis(500);
            c.add(1, MB << i);
            f.tick(now, &c.read());
        }
        f.join(now, 2, None);
        let told = drain(&mut f);
        assert_eq!(told[&1].rate, None, "{told:?}");
        assert_eq!(told[&2].rate, None);
        // A member's transfer measured the path: full.
        f.path_rate(1, Rate(800 * MB));
        let told = drain(&mut f);
        assert_eq!(mbit(&told[&1]).map(f64::round), Some(420.0), "{told:?}");
    }

    #[test]
    fn a_departure_lifts_the_last_members_cap() {
        let (mut f, _, now) = incumbent(6);
        f.join(now, 2, None);
        drain(&mut f);
        f.leave(now, 1);
        let told = drain(&mut f);
        assert_eq!(told.len(), 1);
        assert_eq!(told[&2].rate, None);
        assert_eq!(told[&2].sessions, 1);
        f.leave(now, 2);
        assert!(f.is_empty());
        assert_eq!(f.poll_timeout(), None);
        // Leaving twice, or a stranger leaving, changes nothing.
        f.leave(now, 2);
        f.leave(now, 7);
        assert!(drain(&mut f).is_empty());
    }

    #[test]
    fn three_members_split_in_three_and_are_told_again_only_on_change() {
        let (mut f, mut c, mut now) = incumbent(6);
        f.join(now, 2, None);
        f.join(now, 3, None);
        let told = drain(&mut f);
        assert_eq!(told[&3].sessions, 3);
        assert!(
            (mbit(&told[&1]).unwrap_or(0.0) - 280.0).abs() < 0.5,
            "{told:?}"
        );
        // Each delivers its third: nothing changes, nobody is told.
        for _ in 0..4 {
            now += Duration::from_millis(500);
            for sid in [1, 2, 3] {
                c.add(sid, 50 * MB / 3);
            }
            f.tick(now, &c.read());
        }
        assert!(drain(&mut f).is_empty());
    }

    #[test]
    fn a_member_that_uses_less_keeps_it_and_the_rest_goes_to_the_other() {
        let (mut f, mut c, mut now) = incumbent(6);
        f.join(now, 2, None);
        drain(&mut f);
        f.tick(now, &c.read());
        // Session 2 is limited elsewhere at 10 MB/s (80 Mbit/s); session 1 takes its cap.
        let mut last = BTreeMap::new();
        for _ in 0..8 {
            now += Duration::from_millis(500);
            c.add(1, 21 * MB);
            c.add(2, 5 * MB);
            f.tick(now, &c.read());
            last.extend(drain(&mut f));
        }
        let two = mbit(&last[&2]).expect("capped");
        let one = mbit(&last[&1]).expect("capped");
        // 2 keeps 80 Mbit/s plus 25 %, plus the cap's 5 %; 1 gets the rest of 800.
        assert!((two - 105.0).abs() < 1.0, "{two}");
        assert!((one - (800.0 - 100.0) * 1.05).abs() < 1.0, "{one}");
    }

    #[test]
    fn a_ramping_latecomer_is_not_taken_for_a_limited_one() {
        let (mut f, mut c, mut now) = incumbent(6);
        f.join(now, 2, None);
        drain(&mut f);
        f.tick(now, &c.read());
        // The latecomer grows by half each tick from 2 MB/s: below its share for 3 s, but
        // growing.
        let mut r = 1.0;
        let mut last = BTreeMap::new();
        for _ in 0..6 {
            now += Duration::from_millis(500);
            c.add(1, 25 * MB);
            c.add(2, (r * MB as f64) as u64);
            r *= 1.5;
            f.tick(now, &c.read());
            last.extend(drain(&mut f));
        }
        assert!(last.is_empty(), "nobody re-shared: {last:?}");
    }

    #[test]
    fn a_limited_member_that_grows_into_its_allowance_is_unlimited() {
        let (mut f, mut c, mut now) = incumbent(6);
        f.join(now, 2, None);
        f.tick(now, &c.read());
        for _ in 0..8 {
            now += Duration::from_millis(500);
            c.add(1, 21 * MB);
            c.add(2, 5 * MB);
            f.tick(now, &c.read());
        }
        drain(&mut f);
        // Now 2 delivers its whole allowance and more.
        for _ in 0..2 {
            now += Duration::from_millis(500);
            c.add(1, 20 * MB);
            c.add(2, 7 * MB);
            f.tick(now, &c.read());
        }
        let told = drain(&mut f);
        assert!(
            (mbit(&told[&2]).unwrap_or(0.0) - 420.0).abs() < 1.0,
            "{told:?}"
        );
    }

    #[test]
    fn odd_counters_and_rates_do_no_harm() {
        let (mut f, mut c, mut now) = incumbent(6);
        f.join(now, 2, None);
        drain(&mut f);
        // A counter that goes back (a new engine), one read twice at once, a zero rate, an
        // unknown session's rate, no reading at all.
        c.0.insert(1, 0);
        f.tick(now, &c.read());
        f.tick(now, &c.read());
        f.path_rate(2, Rate(0));
        f.path_rate(9, Rate(u64::MAX));
        now += Duration::from_millis(500);
        f.tick(now, &|_| None);
        for (_, s) in std::iter::from_fn(|| f.poll_share()) {
            assert!(s.rate.is_none_or(|r| r.0 > 0), "{s:?}");
        }
        // A path rate at the top of the range stays finite.
        f.path_rate(2, Rate(u64::MAX));
        let told = drain(&mut f);
        assert!(
            told.values().all(|s| s.rate.is_some_and(|r| r.0 > 0)),
            "{told:?}"
        );
    }

    #[test]
    fn the_water_level_is_max_min_fair() {
        assert_eq!(water_level(900.0, vec![None, None, None]), 300.0);
        assert_eq!(water_level(900.0, vec![Some(100.0), None, None]), 400.0);
        // A demand above the level is not limiting.
        assert_eq!(water_level(900.0, vec![Some(500.0), None]), 450.0);
        assert_eq!(
            water_level(900.0, vec![None, Some(100.0), Some(200.0)]),
            600.0
        );
        assert_eq!(water_level(900.0, vec![]), 900.0);
        // Everyone limited: the level bounds nobody.
        assert_eq!(water_level(900.0, vec![Some(100.0), Some(200.0)]), 200.0);
    }
}
