//! A database of per-path measurements (the idea of Enable: a daemon and a database of
//! per-path measurements, so that a transfer on a known path needs no measurement of its
//! own). This is the pure cache logic: lookup, merging and aging; reading and writing the
//! file (locking, temp file + rename) is the transfer crate's job.
//!
//! # What is stored
//!
//! One [`PathEntry`] per path, keyed by the peer's address, the direction of the data (as
//! seen from this host) and an RTT bucket ([`rtt_bucket`]: half-octaves of the minimum
//! RTT, so that a rerouted path with a very different RTT is a different path). An entry
//! holds the bottleneck rate estimate, whether it comes from a full pipe (a probe whose rate
//! stopped growing: the path's capacity) or is only a lower bound (what a transfer
//! delivered: it may have been limited by its own buffers or slow start), the minimum RTT,
//! when it was first and last updated, and how many measurements went into it.
//!
//! # Merging and aging
//!
//! * A full-pipe measurement of a fresh full-pipe entry moves the estimate half way to it
//!   (an average that forgets old values); of a fresh lower-bound entry, it takes the larger
//!   of the two and the entry becomes full-pipe.
//! * A lower bound raises a fresh estimate it exceeds (the path carried more than
//!   estimated), and otherwise changes nothing but the sample count: it does not refresh the
//!   entry, since delivering less than the estimate confirms nothing.
//! * Any measurement replaces a stale entry (older than [`PathDbPolicy::fresh_for`]).
//! * Entries older than [`PathDbPolicy::forget_after`] are dropped, and the database keeps
//!   at most [`PathDbPolicy::max_entries`] (the most recently updated).
//!
//! A server that records its clients' paths bounds what they can make it keep (entries per
//! owner of addresses, in all, no eviction of fresh entries): see [`PathDb::make_room`].
//!
//! [`PathDb::lookup`] returns only fresh entries, from the same RTT bucket or a neighbour
//! (the nearest wins). A caller that may probe should trust only full-pipe entries
//! ([`Known::full_pipe`]); without a probe a lower bound is still better than nothing.
//!
//! Time is given by the caller as seconds since the Unix epoch (`now_unix_s`), so every rule
//! is testable without a clock.

use crate::units::Rate;
use serde::{Deserialize, Serialize};
use std::time::Duration;

mod bounds;

pub use bounds::{peer_group, RecordBounds, Room};

/// Version of the database file's schema.
pub const PATH_DB_SCHEMA_VERSION: u32 = 1;

/// Direction of the data, from this host's point of view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// This host sends to the peer.
    Send,
    /// The peer sends to this host.
    Receive,
}

/// One path's estimate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathEntry {
    /// The peer's address (IP, no port).
    pub peer: String,
    /// Direction of the data.
    pub direction: Direction,
    /// [`rtt_bucket`] of the minimum RTT.
    pub rtt_bucket: i32,
    /// Bottleneck rate estimate, bit/s.
    pub rate_bps: u64,
    /// The rate was measured with a full pipe (else it is a lower bound).
    pub full_pipe: bool,
    /// Smallest RTT measured, microseconds.
    pub min_rtt_us: u64,
    /// When the entry was created, seconds since the Unix epoch.
    pub first_seen_unix_s: f64,
    /// When the estimate last changed, seconds since the Unix epoch.
    pub updated_unix_s: f64,
    /// Measurements merged into it.
    pub samples: u32,
}

/// The whole database (the file's content).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathDb {
    /// [`PATH_DB_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Every path, most recently updated last.
    pub entries: Vec<PathEntry>,
}

impl Default for PathDb {
    fn default() -> Self {
        PathDb {
            schema_version: PATH_DB_SCHEMA_VERSION,
            entries: Vec::new(),
        }
    }
}

/// One measurement to record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measurement {
    /// Rate measured (largest non-app-limited aggregate delivery rate), bit/s.
    pub rate: Rate,
    /// Smallest RTT seen.
    pub min_rtt: Duration,
    /// Measured with a full pipe (a probe that plateaued), else a lower bound.
    pub full_pipe: bool,
    /// When, seconds since the Unix epoch.
    pub at_unix_s: f64,
}

/// How long entries are trusted and kept.
#[derive(Clone, Debug, PartialEq)]
pub struct PathDbPolicy {
    /// An entry updated within this long is fresh: used instead of measuring.
    pub fresh_for: Duration,
    /// An entry not updated for this long is dropped.
    pub forget_after: Duration,
    /// Most entries kept.
    pub max_entries: usize,
}

impl Default for PathDbPolicy {
    /// Fresh for a day, forgotten after 30 days, at most 4096 entries.
    fn default() -> Self {
        PathDbPolicy {
            fresh_for: Duration::from_secs(24 * 3600),
            forget_after: Duration::from_secs(30 * 24 * 3600),
            max_entries: 4096,
        }
    }
}

/// A fresh estimate found by [`PathDb::lookup`].
#[derive(Clone, Debug, PartialEq)]
pub struct Known {
    /// Bottleneck rate estimate.
    pub rate: Rate,
    /// Measured with a full pipe (else a lower bound).
    pub full_pipe: bool,
    /// Smallest RTT recorded.
    pub min_rtt: Duration,
    /// Since the estimate last changed.
    pub age: Duration,
    /// Measurements merged into it.
    pub samples: u32,
}

/// Why a database read from a file is not usable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PathDbError {
    /// Written by a newer tcptune.
    #[error("path database schema {found} is newer than this tcptune's {PATH_DB_SCHEMA_VERSION}")]
    NewerSchema {
        /// The file's schema version.
        found: u32,
    },
    /// An entry with impossible values.
    #[error("path database entry {index} is invalid: {reason}")]
    BadEntry {
        /// Position in the file.
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

/// RTTs below this share one bucket: on a LAN or loopback the RTT measured before a
/// transfer varies by several times from one connection to the next (3 µs, then 10 µs).
pub const RTT_BUCKET_FLOOR: Duration = Duration::from_micros(100);

/// The RTT bucket of a minimum RTT: half-octaves (`round(2 log2(rtt in µs))`), so paths
/// whose RTTs differ by less than a factor of about 1.4 share a bucket or are neighbours;
/// every RTT below [`RTT_BUCKET_FLOOR`] is in the floor's bucket.
pub fn rtt_bucket(rtt: Duration) -> i32 {
    let us = rtt.max(RTT_BUCKET_FLOOR).as_secs_f64() * 1e6;
    (2.0 * us.log2()).round() as i32
}

/// The RTTs that fall in an RTT bucket, `[low, high)` (the inverse of [`rtt_bucket`]); the
/// floor's bucket starts at zero, since every RTT below [`RTT_BUCKET_FLOOR`] falls in it.
pub fn rtt_bucket_range(bucket: i32) -> (Duration, Duration) {
    let edge = |half_octaves: f64| {
        let us = (half_octaves / 2.0).exp2();
        Duration::from_secs_f64((us / 1e6).clamp(0.0, 1e9))
    };
    let low = if bucket <= rtt_bucket(Duration::ZERO) {
        Duration::ZERO
    } else {
        edge(f64::from(bucket) - 0.5)
    };
    (low, edge(f64::from(bucket) + 0.5))
}

fn age(now_unix_s: f64, then: f64) -> Duration {
    let secs = now_unix_s - then;
    if secs.is_finite() && secs > 0.0 {
        Duration::from_secs_f64(secs.min(1e12))
    } else {
        Duration::ZERO
    }
}

impl PathDb {
    /// An empty database.
    pub fn new() -> PathDb {
        PathDb::default()
    }

    /// Check a database read from a file: a schema this build knows, sane entries.
    pub fn validate(&self) -> Result<(), PathDbError> {
        if self.schema_version > PATH_DB_SCHEMA_VERSION {
            return Err(PathDbError::NewerSchema {
                found: self.schema_version,
            });
        }
        for (index, e) in self.entries.iter().enumerate() {
            let bad = |reason: &str| PathDbError::BadEntry {
                index,
                reason: reason.to_string(),
            };
            if e.peer.is_empty() {
                return Err(bad("no peer address"));
            }
            if e.rate_bps == 0 {
                return Err(bad("zero rate"));
            }
            if !(e.updated_unix_s.is_finite() && e.first_seen_unix_s.is_finite()) {
                return Err(bad("timestamp is not a number"));
            }
        }
        Ok(())
    }

    fn position(&self, peer: &str, direction: Direction, bucket: i32) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.peer == peer && e.direction == direction && e.rtt_bucket == bucket)
    }

    /// The fresh estimate for this peer and direction at a path RTT of `rtt`: from the same
    /// RTT bucket, else a neighbouring one (the nearer in RTT wins).
    pub fn lookup(
        &self,
        peer: &str,
        direction: Direction,
        rtt: Duration,
        now_unix_s: f64,
        policy: &PathDbPolicy,
    ) -> Option<Known> {
        let bucket = rtt_bucket(rtt);
        let want = rtt.as_secs_f64().max(1e-6);
        self.entries
            .iter()
            .filter(|e| {
                e.peer == peer
                    && e.direction == direction
                    && (e.rtt_bucket - bucket).abs() <= 1
                    && age(now_unix_s, e.updated_unix_s) <= policy.fresh_for
            })
            .min_by(|a, b| {
                let d = |e: &PathEntry| ((e.min_rtt_us.max(1) as f64 / 1e6) / want).ln().abs();
                d(a).total_cmp(&d(b))
            })
            .map(|e| Known {
                rate: Rate(e.rate_bps),
                full_pipe: e.full_pipe,
                min_rtt: Duration::from_micros(e.min_rtt_us),
                age: age(now_unix_s, e.updated_unix_s),
                samples: e.samples,
            })
    }

    /// The smallest RTT any fresh entry of this peer and direction was measured at, whatever
    /// its bucket: the path's RTT with nothing queued on it, as far as this database knows.
    /// A handshake well above it, while the streams never see less, waited behind another
    /// flow's queue (a path that got longer looks the same, and is then taken for a shared
    /// one: its rate a lower bound, its buffers kernel autotuning's).
    pub fn base_rtt(
        &self,
        peer: &str,
        direction: Direction,
        now_unix_s: f64,
        policy: &PathDbPolicy,
    ) -> Option<Duration> {
        self.entries
            .iter()
            .filter(|e| {
                e.peer == peer
                    && e.direction == direction
                    && e.min_rtt_us > 0
                    && age(now_unix_s, e.updated_unix_s) <= policy.fresh_for
            })
            .map(|e| Duration::from_micros(e.min_rtt_us))
            .min()
    }

    /// Merge a measurement of this peer and direction (see the module documentation), then
    /// drop old entries.
    pub fn record(
        &mut self,
        peer: &str,
        direction: Direction,
        m: &Measurement,
        policy: &PathDbPolicy,
    ) {
        if m.rate.0 == 0 || !m.at_unix_s.is_finite() {
            return;
        }
        let bucket = rtt_bucket(m.min_rtt);
        let rtt_us = u64::try_from(m.min_rtt.as_micros()).unwrap_or(u64::MAX);
        let fresh_entry = PathEntry {
            peer: peer.to_string(),
            direction,
            rtt_bucket: bucket,
            rate_bps: m.rate.0,
            full_pipe: m.full_pipe,
            min_rtt_us: rtt_us,
            first_seen_unix_s: m.at_unix_s,
            updated_unix_s: m.at_unix_s,
            samples: 1,
        };
        match self.position(peer, direction, bucket) {
            None => self.entries.push(fresh_entry),
            Some(i) => {
                let e = &mut self.entries[i];
                if age(m.at_unix_s, e.updated_unix_s) > policy.fresh_for {
                    let first = e.first_seen_unix_s;
                    *e = PathEntry {
                        first_seen_unix_s: first,
                        samples: e.samples.saturating_add(1),
                        ..fresh_entry
                    };
                } else {
                    e.samples = e.samples.saturating_add(1);
                    e.min_rtt_us = e.min_rtt_us.min(rtt_us);
                    if m.full_pipe {
                        // Two full-pipe measurements a factor of 1.5 apart are two different
                        // paths (the route or the bottleneck changed): a mean describes
                        // neither, the new one replaces the old.
                        let below = |a: u64, b: u64| a.saturating_mul(3) < b.saturating_mul(2);
                        let changed = e.full_pipe
                            && (below(m.rate.0, e.rate_bps) || below(e.rate_bps, m.rate.0));
                        e.rate_bps = if changed {
                            m.rate.0
                        } else if e.full_pipe {
                            e.rate_bps / 2 + m.rate.0 / 2
                        } else {
                            e.rate_bps.max(m.rate.0)
                        };
                        e.full_pipe = true;
                        e.updated_unix_s = m.at_unix_s;
                    } else if m.rate.0 > e.rate_bps {
                        e.rate_bps = m.rate.0;
                        e.updated_unix_s = m.at_unix_s;
                    }
                }
            }
        }
        // Most recently updated last.
        self.entries
            .sort_by(|a, b| a.updated_unix_s.total_cmp(&b.updated_unix_s));
        self.prune(m.at_unix_s, policy);
    }

    /// Drop entries older than [`PathDbPolicy::forget_after`] and the oldest beyond
    /// [`PathDbPolicy::max_entries`].
    pub fn prune(&mut self, now_unix_s: f64, policy: &PathDbPolicy) {
        self.entries
            .retain(|e| age(now_unix_s, e.updated_unix_s) <= policy.forget_after);
        if self.entries.len() > policy.max_entries {
            let drop = self.entries.len() - policy.max_entries;
            self.entries
                .sort_by(|a, b| a.updated_unix_s.total_cmp(&b.updated_unix_s));
            self.entries.drain(..drop);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_pipe_measurement_far_from_the_entry_replaces_it() {
        let policy = PathDbPolicy::default();
        let mut db = PathDb::new();
        let m = |mbit: u64, at: f64| Measurement {
            rate: Rate::mbit(mbit),
            min_rtt: Duration::from_millis(100),
            full_pipe: true,
            at_unix_s: at,
        };
        db.record("p", Direction::Send, &m(500, 10.0), &policy);
        db.record("p", Direction::Send, &m(450, 20.0), &policy);
        let k = db
            .lookup(
                "p",
                Direction::Send,
                Duration::from_millis(100),
                30.0,
                &policy,
            )
            .expect("entry");
        assert_eq!(k.rate, Rate::mbit(475), "close measurements are averaged");
        db.record("p", Direction::Send, &m(50, 40.0), &policy);
        let k = db
            .lookup(
                "p",
                Direction::Send,
                Duration::from_millis(100),
                50.0,
                &policy,
            )
            .expect("entry");
        assert_eq!(
            k.rate,
            Rate::mbit(50),
            "a different path replaces the old one"
        );
        assert_eq!(k.samples, 3);
    }

    const HOUR: f64 = 3600.0;

    fn m(mbit: u64, rtt_ms: u64, full: bool, at: f64) -> Measurement {
        Measurement {
            rate: Rate::mbit(mbit),
            min_rtt: Duration::from_millis(rtt_ms),
            full_pipe: full,
            at_unix_s: at,
        }
    }

    fn look(db: &PathDb, rtt_ms: u64, now: f64) -> Option<Known> {
        db.lookup(
            "10.0.0.2",
            Direction::Send,
            Duration::from_millis(rtt_ms),
            now,
            &PathDbPolicy::default(),
        )
    }

    #[test]
    fn a_recorded_probe_is_found_while_fresh_and_not_after() {
        let mut db = PathDb::new();
        let p = PathDbPolicy::default();
        db.record("10.0.0.2", Direction::Send, &m(950, 100, true, 1000.0), &p);
        let k = look(&db, 100, 1000.0 + HOUR).expect("fresh");
        assert_eq!(k.rate, Rate::mbit(950));
        assert!(k.full_pipe);
        assert_eq!(k.age, Duration::from_secs(3600));
        assert!(look(&db, 100, 1000.0 + 25.0 * HOUR).is_none(), "stale");
        // Other peer, other direction: nothing.
        assert!(db
            .lookup(
                "10.0.0.3",
                Direction::Send,
                Duration::from_millis(100),
                1000.0,
                &p
            )
            .is_none());
        assert!(db
            .lookup(
                "10.0.0.2",
                Direction::Receive,
                Duration::from_millis(100),
                1000.0,
                &p
            )
            .is_none());
    }

    #[test]
    fn a_neighbouring_rtt_bucket_matches_and_a_rerouted_path_does_not() {
        let mut db = PathDb::new();
        db.record(
            "10.0.0.2",
            Direction::Send,
            &m(950, 100, true, 0.0),
            &PathDbPolicy::default(),
        );
        assert!(look(&db, 120, 1.0).is_some());
        assert!(look(&db, 85, 1.0).is_some());
        assert!(look(&db, 200, 1.0).is_none());
        assert!(look(&db, 50, 1.0).is_none());
        assert_eq!(rtt_bucket(Duration::from_micros(500)), 18);
        assert_eq!(rtt_bucket(Duration::ZERO), 13);
        assert_eq!(
            rtt_bucket(Duration::from_micros(3)),
            rtt_bucket(Duration::from_micros(90))
        );
    }

    #[test]
    fn a_bucket_range_holds_exactly_the_rtts_of_its_bucket() {
        for rtt_us in [100u64, 150, 500, 999, 25_000, 100_000, 200_000] {
            let rtt = Duration::from_micros(rtt_us);
            let (low, high) = rtt_bucket_range(rtt_bucket(rtt));
            assert!(low <= rtt && rtt < high, "{rtt:?} not in {low:?}..{high:?}");
        }
        // 100 ms: bucket 33, about 78 to 110 ms.
        let (low, high) = rtt_bucket_range(rtt_bucket(Duration::from_millis(100)));
        assert_eq!((low.as_millis(), high.as_millis()), (77, 110));
        // The floor's bucket starts at zero.
        assert_eq!(
            rtt_bucket_range(rtt_bucket(Duration::ZERO)).0,
            Duration::ZERO
        );
    }

    #[test]
    fn full_pipe_measurements_average_and_lower_bounds_only_raise() {
        let mut db = PathDb::new();
        let p = PathDbPolicy::default();
        let peer = "10.0.0.2";
        db.record(peer, Direction::Send, &m(900, 100, true, 0.0), &p);
        db.record(peer, Direction::Send, &m(1000, 100, true, 10.0), &p);
        assert_eq!(look(&db, 100, 11.0).map(|k| k.rate), Some(Rate::mbit(950)));
        // A transfer that delivered less confirms nothing: the estimate and its age stay.
        db.record(peer, Direction::Send, &m(300, 100, false, 20.0), &p);
        let k = look(&db, 100, 20.0).expect("entry");
        assert_eq!((k.rate, k.full_pipe, k.samples), (Rate::mbit(950), true, 3));
        assert_eq!(k.age, Duration::from_secs(10));
        // One that delivered more raises it.
        db.record(peer, Direction::Send, &m(990, 100, false, 30.0), &p);
        assert_eq!(look(&db, 100, 30.0).map(|k| k.rate), Some(Rate::mbit(990)));
        assert_eq!(db.entries.len(), 1);
    }

    #[test]
    fn the_base_rtt_is_the_smallest_fresh_rtt_of_the_peer_in_any_bucket() {
        let mut db = PathDb::new();
        let p = PathDbPolicy::default();
        let peer = "10.0.0.2";
        let base = |db: &PathDb, at: f64| db.base_rtt(peer, Direction::Send, at, &p);
        assert_eq!(base(&db, 0.0), None);
        db.record(peer, Direction::Send, &m(900, 25, true, 0.0), &p);
        db.record(peer, Direction::Send, &m(300, 50, false, 10.0), &p);
        db.record(peer, Direction::Receive, &m(900, 20, true, 10.0), &p);
        db.record("10.0.0.3", Direction::Send, &m(900, 5, true, 10.0), &p);
        // 50 ms is another bucket: a lookup at 50 ms does not see the 25 ms entry; this does.
        assert!(look(&db, 25, 11.0).is_some());
        assert_eq!(base(&db, 11.0), Some(Duration::from_millis(25)));
        // Only fresh entries count.
        let later = 10.0 + p.fresh_for.as_secs_f64() + 1.0;
        assert_eq!(base(&db, later), None);
    }

    #[test]
    fn a_probe_upgrades_a_lower_bound_and_a_stale_entry_is_replaced() {
        let mut db = PathDb::new();
        let p = PathDbPolicy::default();
        let peer = "10.0.0.2";
        db.record(peer, Direction::Send, &m(400, 200, false, 0.0), &p);
        let k = look(&db, 200, 1.0).expect("entry");
        assert!(!k.full_pipe);
        db.record(peer, Direction::Send, &m(350, 200, true, 5.0), &p);
        let k = look(&db, 200, 5.0).expect("entry");
        assert_eq!((k.rate, k.full_pipe), (Rate::mbit(400), true));
        // Two days later a new probe replaces the estimate outright.
        db.record(
            peer,
            Direction::Send,
            &m(100, 200, true, 2.0 * 24.0 * HOUR),
            &p,
        );
        let k = look(&db, 200, 2.0 * 24.0 * HOUR).expect("entry");
        assert_eq!((k.rate, k.samples), (Rate::mbit(100), 3));
        assert_eq!(db.entries[0].first_seen_unix_s, 0.0);
    }

    #[test]
    fn old_entries_are_forgotten_and_the_size_is_bounded() {
        let mut db = PathDb::new();
        let p = PathDbPolicy {
            max_entries: 3,
            ..PathDbPolicy::default()
        };
        for i in 0..5u64 {
            db.record(
                &format!("10.0.0.{i}"),
                Direction::Send,
                &m(100, 10, true, i as f64),
                &p,
            );
        }
        let peers: Vec<&str> = db.entries.iter().map(|e| e.peer.as_str()).collect();
        assert_eq!(peers, ["10.0.0.2", "10.0.0.3", "10.0.0.4"]);
        db.prune(40.0 * 24.0 * HOUR, &p);
        assert!(db.entries.is_empty());
    }

    #[test]
    fn validation_refuses_newer_schemas_and_impossible_entries() {
        let mut db = PathDb::new();
        assert_eq!(db.validate(), Ok(()));
        db.record(
            "10.0.0.2",
            Direction::Send,
            &m(100, 10, true, 1.0),
            &PathDbPolicy::default(),
        );
        db.entries[0].rate_bps = 0;
        assert!(matches!(
            db.validate(),
            Err(PathDbError::BadEntry { index: 0, .. })
        ));
        db.schema_version = 99;
        assert_eq!(db.validate(), Err(PathDbError::NewerSchema { found: 99 }));
    }

    #[test]
    fn zero_rates_and_bad_times_are_not_recorded() {
        let mut db = PathDb::new();
        let p = PathDbPolicy::default();
        db.record("a", Direction::Send, &m(0, 10, true, 1.0), &p);
        db.record("a", Direction::Send, &m(10, 10, true, f64::NAN), &p);
        assert!(db.entries.is_empty());
    }
}
