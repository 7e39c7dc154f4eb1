//! Who may hold a session slot, and who waits for one: pure rules, no clock (every call
//! takes `now`).
//!
//! * **Progress is payload at a minimum rate.** A session's [`Progress`] counts the payload
//!   its data streams moved, in either direction, from the endpoint's samples of its engine.
//!   After a grace period, a session that moved less than [`SlotRules::min_rate`] over the
//!   last [`SlotRules::window`] is *below the minimum rate*. It keeps running while nobody
//!   needs its slot; when a client needs one and every slot is taken, the slowest session
//!   below the minimum rate is shed ([`pick_victim`]). A few KB/s of protocol chatter or a
//!   byte every few seconds is not progress.
//! * **A wait queue** ([`WaitQueue`]) instead of a refusal when no slot can be had: bounded in
//!   all and per group of addresses, each entry with a deadline; admitted in order when a
//!   slot frees.
//! * **Retry hints** are the expected time until a slot frees from the running sessions'
//!   progress (remaining bytes at their rate), not the worst-case lifetime
//!   ([`Progress::expected_end`]).

use super::SessionId;
use crate::session::ConnId;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// What a session must move to keep its slot when others need it, and the wait queue's
/// bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct SlotRules {
    /// Payload bytes per second a session must move (after the grace period, over the rate
    /// window) to keep its slot when another client needs it.
    pub min_rate: u64,
    /// Time after admission before the rate is judged.
    pub grace: Duration,
    /// The window the rate is measured over.
    pub window: Duration,
    /// Most clients waiting for a slot, in all.
    pub max_queue: u32,
    /// Most clients waiting for a slot from one group of addresses (an IPv4 address, an
    /// IPv6 /64).
    pub max_queue_per_addr: u32,
    /// Longest time a client waits in the queue.
    pub queue_timeout: Duration,
}

impl SlotRules {
    /// The default minimum rate: 64 KiB/s.
    pub const DEFAULT_MIN_RATE: u64 = 64 * 1024;
    /// The default grace period.
    pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);
    /// The default rate window (grace plus window: 20 s).
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(10);
    /// The default bound of the wait queue.
    pub const DEFAULT_MAX_QUEUE: u32 = 64;

    /// How often a session's payload is sampled.
    pub(crate) fn sample_every(&self) -> Duration {
        (self.window / 8).clamp(Duration::from_millis(50), Duration::from_secs(1))
    }

    /// Bytes a session must move over the window.
    fn window_bytes(&self) -> u64 {
        (self.min_rate as f64 * self.window.as_secs_f64()) as u64
    }
}

impl Default for SlotRules {
    fn default() -> SlotRules {
        SlotRules {
            min_rate: SlotRules::DEFAULT_MIN_RATE,
            grace: SlotRules::DEFAULT_GRACE,
            window: SlotRules::DEFAULT_WINDOW,
            max_queue: SlotRules::DEFAULT_MAX_QUEUE,
            max_queue_per_addr: SlotRules::DEFAULT_MAX_QUEUE / 4,
            queue_timeout: Duration::from_secs(120),
        }
    }
}

/// The payload a session moved over time. Call order: [`Progress::new`] at admission,
/// [`Progress::phase_started`] when an engine starts, [`Progress::observe`] at
/// [`Progress::next_sample`] with the running engine's delivered bytes (`None` between
/// phases), [`Progress::phase_ended`] with the phase's bytes.
#[derive(Debug)]
pub(crate) struct Progress {
    admitted: Instant,
    total: u64,
    /// What the running engine had delivered at the last sample.
    engine: u64,
    /// `(time, total)`, the oldest at or before the window's start.
    samples: VecDeque<(Instant, u64)>,
    next_sample: Instant,
    /// Payload the session will move in all, when the workload says.
    budget: Option<u64>,
}

impl Progress {
    pub(crate) fn new(now: Instant, budget: Option<u64>, rules: &SlotRules) -> Progress {
        Progress {
            admitted: now,
            total: 0,
            engine: 0,
            samples: VecDeque::from([(now, 0)]),
            next_sample: now + rules.sample_every(),
            budget,
        }
    }

    /// When [`Progress::observe`] is due.
    pub(crate) fn next_sample(&self) -> Instant {
        self.next_sample
    }

    /// A new engine starts: its counter starts at zero.
    pub(crate) fn phase_started(&mut self) {
        self.engine = 0;
    }

    /// The phase's engine ended having moved `bytes` in all (what the samples missed).
    pub(crate) fn phase_ended(&mut self, bytes: u64) {
        self.total += bytes.saturating_sub(self.engine);
        self.engine = bytes.max(self.engine);
    }

    /// A sample at `now`: the running engine's delivered bytes, if one runs.
    pub(crate) fn observe(&mut self, now: Instant, delivered: Option<u64>, rules: &SlotRules) {
        if let Some(d) = delivered {
            self.total += d.saturating_sub(self.engine);
            self.engine = d.max(self.engine);
        }
        self.samples.push_back((now, self.total));
        let start = now.checked_sub(rules.window);
        // Keep one sample at or before the window's start.
        while self.samples.len() > 1
            && start.is_some_and(|s| self.samples.get(1).is_some_and(|(t, _)| *t <= s))
        {
            self.samples.pop_front();
        }
        self.next_sample = now + rules.sample_every();
    }

    /// Payload moved in all.
    #[cfg(test)]
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Payload moved over the last window (over what was sampled of it).
    pub(crate) fn moved_in_window(&self) -> u64 {
        let base = self.samples.front().map_or(0, |(_, b)| *b);
        self.total.saturating_sub(base)
    }

    /// Whether the session is below the minimum rate at `now` (past its grace period and
    /// a whole window, it moved less than the window's bytes): its slot may be given to a
    /// client that needs one.
    pub(crate) fn below_min_rate(&self, now: Instant, rules: &SlotRules) -> bool {
        now >= self.admitted + rules.grace + rules.window
            && self.moved_in_window() < rules.window_bytes()
    }

    /// The rate over the last window, bytes per second.
    pub(crate) fn rate(&self, now: Instant) -> f64 {
        let since = self.samples.front().map_or(self.admitted, |(t, _)| *t);
        let secs = now.saturating_duration_since(since).as_secs_f64();
        if secs <= 0.0 {
            return 0.0;
        }
        self.moved_in_window() as f64 / secs
    }

    /// When the session is expected to end from its progress: its remaining budget at its
    /// rate. `None` when the workload's size or its rate is not known.
    pub(crate) fn expected_end(&self, now: Instant) -> Option<Duration> {
        let rate = self.rate(now);
        let left = self.budget?.saturating_sub(self.total);
        (rate >= 1.0).then(|| Duration::from_secs_f64((left as f64 / rate).min(1e7)))
    }
}

/// A session that may be shed: its group's session count and what it moved in the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub(crate) session: SessionId,
    pub(crate) group_sessions: u32,
    pub(crate) moved: u64,
}

/// The session to shed: the slowest (least payload in the window); of equally slow ones,
/// the one whose group of addresses holds the most sessions (the fair share favours groups
/// with fewer), then the oldest.
pub(crate) fn pick_victim(candidates: impl IntoIterator<Item = Candidate>) -> Option<SessionId> {
    candidates
        .into_iter()
        .min_by_key(|c| (c.moved, std::cmp::Reverse(c.group_sessions), c.session))
        .map(|c| c.session)
}

/// One client waiting for a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Waiting {
    pub(crate) conn: ConnId,
    pub(crate) group: IpAddr,
    pub(crate) since: Instant,
    /// Its place and when it was last told, if it was.
    pub(crate) told: Option<(u32, Instant)>,
    /// Its arrival was logged (so is its leaving).
    pub(crate) logged: bool,
}

/// Why a client could not wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueueFull {
    /// The queue holds its most clients.
    All(u32),
    /// The queue holds its most clients from this group.
    Group(u32),
}

/// The clients waiting for a slot, in order of arrival. Bounded in all and per group.
#[derive(Debug, Default)]
pub(crate) struct WaitQueue {
    entries: VecDeque<Waiting>,
}

/// Places are told at most this often to each client.
pub(crate) const TELL_EVERY: Duration = Duration::from_secs(1);

impl WaitQueue {
    /// Queue `conn`; its place (from 1), or why it cannot wait.
    pub(crate) fn push(
        &mut self,
        now: Instant,
        conn: ConnId,
        group: IpAddr,
        rules: &SlotRules,
    ) -> Result<u32, QueueFull> {
        if self.entries.len() as u32 >= rules.max_queue {
            return Err(QueueFull::All(rules.max_queue));
        }
        let same = self.entries.iter().filter(|w| w.group == group).count() as u32;
        if same >= rules.max_queue_per_addr {
            return Err(QueueFull::Group(rules.max_queue_per_addr));
        }
        self.entries.push_back(Waiting {
            conn,
            group,
            since: now,
            told: None,
            logged: false,
        });
        Ok(self.entries.len() as u32)
    }

    /// Whether `conn`'s arrival was logged.
    pub(crate) fn set_logged(&mut self, conn: ConnId, logged: bool) {
        if let Some(w) = self.entries.iter_mut().find(|w| w.conn == conn) {
            w.logged = logged;
        }
    }

    pub(crate) fn remove(&mut self, conn: ConnId) -> Option<Waiting> {
        let i = self.entries.iter().position(|w| w.conn == conn)?;
        self.entries.remove(i)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The waiting clients in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Waiting> {
        self.entries.iter()
    }

    /// Clients whose place changed since they were told, and who may be told now: `(conn,
    /// place)`; marks them told.
    pub(crate) fn due_places(&mut self, now: Instant) -> Vec<(ConnId, u32)> {
        let mut out = Vec::new();
        for (i, w) in self.entries.iter_mut().enumerate() {
            let place = i as u32 + 1;
            let due = match w.told {
                None => true,
                Some((p, at)) => p != place && now >= at + TELL_EVERY,
            };
            if due {
                w.told = Some((place, now));
                out.push((w.conn, place));
            }
        }
        out
    }

    /// When a changed place may next be told.
    pub(crate) fn next_tell(&self) -> Option<Instant> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(i, w)| match w.told {
                Some((p, at)) if p != i as u32 + 1 => Some(at + TELL_EVERY),
                _ => None,
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> SlotRules {
        SlotRules {
            min_rate: 1000,
            grace: Duration::from_secs(2),
            window: Duration::from_secs(4),
            max_queue: 3,
            max_queue_per_addr: 2,
            queue_timeout: Duration::from_secs(30),
        }
    }

    #[test]
    fn a_session_is_below_the_rate_only_after_grace_and_a_whole_window() {
        let t0 = Instant::now();
        let r = rules();
        let mut p = Progress::new(t0, None, &r);
        let s = Duration::from_secs;
        for i in 1..=5 {
            p.observe(t0 + s(i), Some(0), &r);
            assert!(!p.below_min_rate(t0 + s(i), &r), "within grace + window");
        }
        p.observe(t0 + s(6), Some(10), &r);
        assert!(p.below_min_rate(t0 + s(6), &r), "10 bytes in 4 s");
    }

    #[test]
    fn payload_at_the_minimum_rate_keeps_the_slot_and_counts_across_phases() {
        let t0 = Instant::now();
        let r = rules();
        let mut p = Progress::new(t0, Some(100_000), &r);
        let s = Duration::from_secs;
        for i in 1..=10u64 {
            p.observe(t0 + s(i), Some(i * 2000), &r);
        }
        assert!(!p.below_min_rate(t0 + s(10), &r));
        assert_eq!(p.moved_in_window(), 8000);
        // A new engine counts from zero; the total goes on.
        p.phase_ended(20_500);
        p.phase_started();
        p.observe(t0 + s(11), Some(1500), &r);
        assert_eq!(p.total(), 22_000);
        let end = p.expected_end(t0 + s(11)).expect("a rate");
        assert!(end > s(30) && end < s(60), "{end:?}");
    }

    #[test]
    fn a_trickle_is_not_progress() {
        let t0 = Instant::now();
        let r = rules();
        let mut p = Progress::new(t0, None, &r);
        for i in 1..=40u64 {
            // Five bytes every 250 ms: 20 B/s, far below 1000 B/s.
            p.observe(t0 + Duration::from_millis(250 * i), Some(5 * i), &r);
        }
        assert!(p.below_min_rate(t0 + Duration::from_secs(10), &r));
    }

    #[test]
    fn the_slowest_is_shed_and_ties_go_to_the_group_with_most_sessions() {
        let c = |session, group_sessions, moved| Candidate {
            session,
            group_sessions,
            moved,
        };
        assert_eq!(
            pick_victim([c(1, 1, 50), c(2, 4, 10), c(3, 1, 30)]),
            Some(2)
        );
        assert_eq!(pick_victim([c(1, 1, 0), c(2, 4, 0), c(3, 4, 0)]), Some(2));
        assert_eq!(pick_victim(Vec::new()), None);
    }

    #[test]
    fn the_queue_is_bounded_in_all_and_per_group_and_tells_changed_places() {
        let t0 = Instant::now();
        let r = rules();
        let a: IpAddr = "10.0.0.1".parse().expect("ip");
        let b: IpAddr = "10.0.0.2".parse().expect("ip");
        let mut q = WaitQueue::default();
        assert_eq!(q.push(t0, 1, a, &r), Ok(1));
        assert_eq!(q.push(t0, 2, a, &r), Ok(2));
        assert_eq!(q.push(t0, 3, a, &r), Err(QueueFull::Group(2)));
        assert_eq!(q.push(t0, 4, b, &r), Ok(3));
        assert_eq!(q.push(t0, 5, b, &r), Err(QueueFull::All(3)));
        assert_eq!(q.due_places(t0), vec![(1, 1), (2, 2), (4, 3)]);
        assert!(q.due_places(t0).is_empty());
        assert!(q.remove(1).is_some());
        assert_eq!(q.next_tell(), Some(t0 + TELL_EVERY));
        assert!(q.due_places(t0).is_empty(), "rate-limited");
        assert_eq!(q.due_places(t0 + TELL_EVERY), vec![(2, 1), (4, 2)]);
    }
}
