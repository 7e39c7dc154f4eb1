//! Small pure pieces of the server's defences: a bounded cache of authentication nonces (no
//! replay within the clock-skew window), a per-address backoff after failed
//! authentications, a limiter that logs each kind of refusal once and then in summaries,
//! and escaping of anything a client supplied before it reaches a text log.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Nonces of accepted authentication proofs, remembered for as long as a proof with that
/// nonce could still be accepted (the clock-skew window), at most `capacity` of them.
#[derive(Debug)]
pub(crate) struct ReplayCache {
    seen: HashMap<[u8; 32], u64>,
    order: VecDeque<([u8; 32], u64)>,
    capacity: usize,
}

/// What the replay cache says of a nonce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Freshness {
    /// Never seen: now remembered.
    Fresh,
    /// Seen before: a replay.
    Replayed,
    /// The cache is full of nonces that are still valid: cannot tell (ask for a challenge).
    Full,
}

impl ReplayCache {
    pub(crate) fn new(capacity: usize) -> ReplayCache {
        ReplayCache {
            seen: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Check `nonce` and remember it until `expires_unix_s`.
    pub(crate) fn check(
        &mut self,
        now_unix_s: u64,
        nonce: [u8; 32],
        expires_unix_s: u64,
    ) -> Freshness {
        while let Some(&(n, exp)) = self.order.front() {
            if exp > now_unix_s {
                break;
            }
            self.order.pop_front();
            if self.seen.get(&n) == Some(&exp) {
                self.seen.remove(&n);
            }
        }
        if self.seen.contains_key(&nonce) {
            return Freshness::Replayed;
        }
        if self.seen.len() >= self.capacity {
            return Freshness::Full;
        }
        self.seen.insert(nonce, expires_unix_s);
        self.order.push_back((nonce, expires_unix_s));
        Freshness::Fresh
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.seen.len()
    }
}

/// The group of addresses a client counts as for sessions, pending connections and the
/// authentication backoff: an IPv4 address alone (an IPv4-mapped IPv6 address counts as its
/// IPv4 address), an IPv6 address by its /64 (one host or LAN commonly holds a whole /64,
/// so counting its addresses one by one would give it as many slots as it likes).
pub(crate) fn addr_group(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(std::net::Ipv6Addr::from(bits))
        }
    }
}

/// Backoff after failed authentications, per address: after the n-th failure in a row the
/// address may try again only after `2^(n-1)` seconds (at most [`Backoff::MAX`]), so guessing
/// the secret runs at about one try a minute instead of a thousand a second.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    failures: u32,
    until: Option<Instant>,
    last_failure: Option<Instant>,
}

impl Backoff {
    /// The longest wait.
    pub(crate) const MAX: Duration = Duration::from_secs(60);
    /// Failures older than this are forgotten.
    pub(crate) const FORGET: Duration = Duration::from_secs(600);

    /// Record a failure at `now`.
    pub(crate) fn fail(&mut self, now: Instant) {
        if self
            .last_failure
            .is_some_and(|t| now.saturating_duration_since(t) > Self::FORGET)
        {
            self.failures = 0;
        }
        self.failures = self.failures.saturating_add(1);
        self.last_failure = Some(now);
        let wait = Duration::from_secs(1u64 << (self.failures - 1).min(6)).min(Self::MAX);
        self.until = Some(now + wait);
    }

    /// A success resets the count.
    pub(crate) fn succeed(&mut self) {
        *self = Backoff::default();
    }

    /// How long the address must still wait, if it must.
    pub(crate) fn blocked_for(&self, now: Instant) -> Option<Duration> {
        self.until
            .map(|u| u.saturating_duration_since(now))
            .filter(|d| !d.is_zero())
    }

    /// Whether there is nothing worth remembering any more.
    pub(crate) fn forgettable(&self, now: Instant) -> bool {
        self.last_failure
            .is_none_or(|t| now.saturating_duration_since(t) > Self::FORGET)
    }
}

/// Decides which refusals reach the log: the first of each kind from each address, then at
/// most one summary line per kind every `period` (with how many were not logged). Every
/// refusal is counted either way. Bounded: at most `capacity` (kind, address) pairs are
/// remembered; past that, only the per-kind summary applies.
#[derive(Debug)]
pub(crate) struct LogLimiter {
    period: Duration,
    capacity: usize,
    seen: HashMap<(&'static str, IpAddr), Instant>,
    pending: HashMap<&'static str, (u64, Instant)>,
}

/// What to log about one refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogDecision {
    /// Log this one.
    Log,
    /// Count it silently (a summary follows).
    Quiet,
}

impl LogLimiter {
    pub(crate) fn new(period: Duration, capacity: usize) -> LogLimiter {
        LogLimiter {
            period,
            capacity,
            seen: HashMap::new(),
            pending: HashMap::new(),
        }
    }

    pub(crate) fn decide(&mut self, now: Instant, kind: &'static str, addr: IpAddr) -> LogDecision {
        if let Some(&t) = self.seen.get(&(kind, addr)) {
            if now.saturating_duration_since(t) < self.period {
                let p = self.pending.entry(kind).or_insert((0, now));
                p.0 += 1;
                return LogDecision::Quiet;
            }
        }
        if self.seen.len() >= self.capacity {
            let period = self.period;
            self.seen
                .retain(|_, t| now.saturating_duration_since(*t) < period);
            if self.seen.len() >= self.capacity {
                let p = self.pending.entry(kind).or_insert((0, now));
                p.0 += 1;
                return LogDecision::Quiet;
            }
        }
        self.seen.insert((kind, addr), now);
        LogDecision::Log
    }

    /// Summaries due: (kind, refusals not logged since the last summary).
    pub(crate) fn due_summaries(&mut self, now: Instant) -> Vec<(&'static str, u64)> {
        let period = self.period;
        let mut out = Vec::new();
        self.pending.retain(|kind, (n, since)| {
            if now.saturating_duration_since(*since) >= period {
                out.push((*kind, *n));
                false
            } else {
                true
            }
        });
        out.sort_unstable();
        out
    }

    /// When the next summary is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.pending.values().map(|(_, t)| *t + self.period).min()
    }
}

/// Token buckets per key (a group of addresses) and in all: each key may do something
/// `burst` times at once and then once every `every`; everyone together `all_burst` times
/// and then once every `all_every`. At most `capacity` keys are remembered (a key whose
/// bucket is full again is the same as a key never seen, and is forgotten first); past
/// that, new keys wait.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    keys: HashMap<String, Bucket>,
    all: Bucket,
    burst: f64,
    every: Duration,
    all_burst: f64,
    all_every: Duration,
    capacity: usize,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refill(&mut self, now: Instant, burst: f64, every: Duration) {
        let gained = now.saturating_duration_since(self.at).as_secs_f64() / every.as_secs_f64();
        self.tokens = (self.tokens + gained).min(burst);
        self.at = now;
    }

    /// Time until one token is there.
    fn wait(&self, every: Duration) -> Duration {
        every.mul_f64((1.0 - self.tokens).clamp(0.0, 1.0))
    }
}

impl RateLimiter {
    pub(crate) fn new(
        now: Instant,
        burst: u32,
        every: Duration,
        all_burst: u32,
        all_every: Duration,
        capacity: usize,
    ) -> RateLimiter {
        let every = every.max(Duration::from_millis(1));
        let all_every = all_every.max(Duration::from_millis(1));
        RateLimiter {
            keys: HashMap::new(),
            all: Bucket {
                tokens: f64::from(all_burst.max(1)),
                at: now,
            },
            burst: f64::from(burst.max(1)),
            every,
            all_burst: f64::from(all_burst.max(1)),
            all_every,
            capacity: capacity.max(1),
        }
    }

    /// Take a token for `key`, or say how long until one is there.
    pub(crate) fn check(&mut self, now: Instant, key: &str) -> Result<(), Duration> {
        self.all.refill(now, self.all_burst, self.all_every);
        let (burst, every) = (self.burst, self.every);
        if !self.keys.contains_key(key) && self.keys.len() >= self.capacity {
            self.keys.retain(|_, b| {
                b.refill(now, burst, every);
                b.tokens < burst
            });
            if self.keys.len() >= self.capacity {
                return Err(every);
            }
        }
        let b = self.keys.entry(key.to_string()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        b.refill(now, burst, every);
        if b.tokens < 1.0 {
            return Err(b.wait(every));
        }
        if self.all.tokens < 1.0 {
            return Err(self.all.wait(self.all_every));
        }
        b.tokens -= 1.0;
        self.all.tokens -= 1.0;
        Ok(())
    }

    #[cfg(test)]
    pub(crate) fn keys(&self) -> usize {
        self.keys.len()
    }
}

/// Escape control characters (newlines, escape sequences, ...) and cut at `max` characters:
/// a client's string can then not forge a log line or a terminal effect.
pub fn escape(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max) + 8);
    for (n, c) in s.chars().enumerate() {
        if n >= max {
            out.push_str("...");
            break;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_addresses_group_by_their_64_and_mapped_ipv4_by_the_ipv4_address() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        assert_eq!(addr_group(ip("2001:db8:1:2::1")), ip("2001:db8:1:2::"));
        assert_eq!(
            addr_group(ip("2001:db8:1:2:ffff:eeee:dddd:cccc")),
            addr_group(ip("2001:db8:1:2::99"))
        );
        assert_ne!(
            addr_group(ip("2001:db8:1:2::1")),
            addr_group(ip("2001:db8:1:3::1"))
        );
        assert_eq!(addr_group(ip("::ffff:10.0.0.7")), ip("10.0.0.7"));
        assert_eq!(addr_group(ip("10.0.0.7")), ip("10.0.0.7"));
        assert_ne!(addr_group(ip("10.0.0.7")), addr_group(ip("10.0.0.8")));
    }

    #[test]
    fn a_nonce_is_accepted_once_until_it_expires() {
        let mut c = ReplayCache::new(4);
        assert_eq!(c.check(100, [1; 32], 400), Freshness::Fresh);
        assert_eq!(c.check(101, [1; 32], 401), Freshness::Replayed);
        assert_eq!(
            c.check(500, [1; 32], 800),
            Freshness::Fresh,
            "expired entries go"
        );
    }

    #[test]
    fn a_full_cache_says_so_instead_of_forgetting_live_nonces() {
        let mut c = ReplayCache::new(2);
        assert_eq!(c.check(0, [1; 32], 300), Freshness::Fresh);
        assert_eq!(c.check(0, [2; 32], 300), Freshness::Fresh);
        assert_eq!(c.check(0, [3; 32], 300), Freshness::Full);
        assert_eq!(c.check(0, [1; 32], 300), Freshness::Replayed);
        assert_eq!(c.check(301, [3; 32], 600), Freshness::Fresh);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn backoff_doubles_up_to_a_minute_and_resets_on_success() {
        let t0 = Instant::now();
        let mut b = Backoff::default();
        assert_eq!(b.blocked_for(t0), None);
        b.fail(t0);
        assert_eq!(b.blocked_for(t0), Some(Duration::from_secs(1)));
        b.fail(t0);
        assert_eq!(b.blocked_for(t0), Some(Duration::from_secs(2)));
        for _ in 0..10 {
            b.fail(t0);
        }
        assert_eq!(b.blocked_for(t0), Some(Backoff::MAX));
        assert_eq!(b.blocked_for(t0 + Backoff::MAX), None);
        b.succeed();
        assert_eq!(b.blocked_for(t0), None);
        // Long after the last failure the count starts over.
        b.fail(t0);
        b.fail(t0);
        b.fail(t0 + Backoff::FORGET + Duration::from_secs(1));
        assert_eq!(
            b.blocked_for(t0 + Backoff::FORGET + Duration::from_secs(1)),
            Some(Duration::from_secs(1))
        );
    }

    #[test]
    fn refusals_are_logged_once_per_kind_and_address_then_summarized() {
        let t0 = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().expect("ip");
        let b: IpAddr = "10.0.0.2".parse().expect("ip");
        let mut l = LogLimiter::new(Duration::from_secs(10), 100);
        assert_eq!(l.decide(t0, "busy", a), LogDecision::Log);
        assert_eq!(l.decide(t0, "busy", a), LogDecision::Quiet);
        assert_eq!(l.decide(t0, "busy", a), LogDecision::Quiet);
        assert_eq!(l.decide(t0, "busy", b), LogDecision::Log);
        assert_eq!(l.decide(t0, "garbage", a), LogDecision::Log);
        assert!(l.due_summaries(t0 + Duration::from_secs(1)).is_empty());
        assert_eq!(l.next_due(), Some(t0 + Duration::from_secs(10)));
        assert_eq!(
            l.due_summaries(t0 + Duration::from_secs(10)),
            vec![("busy", 2)]
        );
        assert_eq!(
            l.decide(t0 + Duration::from_secs(11), "busy", a),
            LogDecision::Log
        );
    }

    #[test]
    fn the_limiter_stays_bounded_under_many_addresses() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(Duration::from_secs(10), 16);
        let mut logged = 0;
        for i in 0..1000u32 {
            let ip = IpAddr::from(i.to_be_bytes());
            if l.decide(t0, "flood", ip) == LogDecision::Log {
                logged += 1;
            }
        }
        assert_eq!(logged, 16);
        assert!(l.seen.len() <= 16);
        assert_eq!(
            l.due_summaries(t0 + Duration::from_secs(10)),
            vec![("flood", 984)]
        );
    }

    #[test]
    fn a_key_gets_its_burst_then_one_per_period_and_everyone_shares_the_total() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut l = RateLimiter::new(t0, 2, s(60), 3, s(10), 100);
        assert_eq!(l.check(t0, "a"), Ok(()));
        assert_eq!(l.check(t0, "a"), Ok(()));
        assert_eq!(l.check(t0, "a"), Err(s(60)));
        assert_eq!(l.check(t0, "b"), Ok(()));
        // Three in all: "c" waits for the shared bucket though it has tokens of its own.
        assert_eq!(l.check(t0, "c"), Err(s(10)));
        assert_eq!(l.check(t0 + s(10), "c"), Ok(()));
        assert_eq!(l.check(t0 + s(30), "a"), Err(s(30)), "half a token back");
        assert_eq!(l.check(t0 + s(60), "a"), Ok(()));
    }

    #[test]
    fn the_limiter_remembers_a_bounded_number_of_keys_and_forgets_idle_ones_first() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut l = RateLimiter::new(t0, 1, s(60), 1_000_000, s(1), 4);
        for k in 0..4 {
            assert_eq!(l.check(t0, &format!("k{k}")), Ok(()));
        }
        assert_eq!(l.check(t0, "new"), Err(s(60)), "full of busy keys");
        assert_eq!(l.keys(), 4);
        // Once their buckets are full again they are forgotten and make room.
        assert_eq!(l.check(t0 + s(61), "new"), Ok(()));
        assert!(l.keys() <= 4);
    }

    #[test]
    fn control_characters_cannot_forge_a_log_line() {
        assert_eq!(escape("x\nFAKE LINE", 100), "x\\nFAKE LINE");
        assert_eq!(escape("\u{1b}[31mred", 100), "\\u{1b}[31mred");
        assert_eq!(escape("a\\b", 100), "a\\\\b");
        assert_eq!(escape("abcdef", 3), "abc...");
        assert_eq!(escape("héllo", 100), "héllo");
    }
}
