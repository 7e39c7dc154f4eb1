//! Bounds on what a server's clients can make it record: a path database that `serve`
//! fills from every client must not grow without limit, and no client (nor a crowd of
//! addresses under one owner) may push everyone else's paths out.
//!
//! The rules, applied by [`PathDb::make_room`] before a measurement of a path the database
//! does not hold yet (a measurement of a path it holds only merges and never adds a row):
//!
//! * Addresses are grouped by owner ([`peer_group`]): an IPv4 address is its own group, an
//!   IPv6 address is grouped with its `/64` (one subscriber's allocation: an attacker holds
//!   all of it). A group holds at most [`RecordBounds::per_group`] entries; a new one beyond
//!   that replaces the group's own least recently updated entry, never another group's.
//! * The whole database holds at most [`RecordBounds::max_entries`]. When it is full, a new
//!   path may only replace an entry that is no longer fresh (not updated for
//!   [`PathDbPolicy::fresh_for`]): a flood of new addresses can fill the free room but never
//!   evict what is in use. Otherwise the measurement is refused.

use super::{age, rtt_bucket, Direction, PathDb, PathDbPolicy};
use std::net::IpAddr;
use std::time::Duration;

/// How much a server records of its clients' paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordBounds {
    /// Entries one group of addresses ([`peer_group`]) may hold.
    pub per_group: usize,
    /// Entries in all (at most [`PathDbPolicy::max_entries`] is ever kept anyway).
    pub max_entries: usize,
}

impl Default for RecordBounds {
    /// 8 entries per group (two directions, a few RTT buckets), 4096 in all.
    fn default() -> Self {
        RecordBounds {
            per_group: 8,
            max_entries: 4096,
        }
    }
}

/// What [`PathDb::make_room`] decided for a measurement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Room {
    /// The path has an entry: the measurement merges into it.
    Exists,
    /// There is room for a new entry.
    Free,
    /// The group was full: its own least recently updated entry was dropped (this peer).
    EvictedOwn {
        /// The peer whose entry was dropped.
        peer: String,
    },
    /// The database was full: an entry that was no longer fresh was dropped.
    EvictedStale {
        /// The peer whose entry was dropped.
        peer: String,
    },
    /// The database is full of fresh entries: nothing may be added.
    Full,
}

impl Room {
    /// Whether the measurement may be recorded.
    pub fn admits(&self) -> bool {
        !matches!(self, Room::Full)
    }
}

/// The group an address belongs to: the address itself for IPv4 (an IPv4-mapped IPv6
/// address counts as IPv4), its `/64` for IPv6 (written `2001:db8:1:2::/64`), the string
/// itself for anything that is not an address.
pub fn peer_group(peer: &str) -> String {
    match peer.parse::<IpAddr>().map(|a| a.to_canonical()) {
        Ok(IpAddr::V4(a)) => a.to_string(),
        Ok(IpAddr::V6(a)) => {
            let s = a.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
        Err(_) => peer.to_string(),
    }
}

impl PathDb {
    /// Make room for a measurement of `peer` in `direction` at a minimum RTT of `min_rtt`
    /// under `bounds` (see the module documentation): drops at most one entry, and says
    /// whether the measurement may then be recorded with [`PathDb::record`].
    pub fn make_room(
        &mut self,
        peer: &str,
        direction: Direction,
        min_rtt: Duration,
        now_unix_s: f64,
        policy: &PathDbPolicy,
        bounds: &RecordBounds,
    ) -> Room {
        if self
            .position(peer, direction, rtt_bucket(min_rtt))
            .is_some()
        {
            return Room::Exists;
        }
        let group = peer_group(peer);
        let oldest = |db: &PathDb, pick: &dyn Fn(&super::PathEntry) -> bool| -> Option<usize> {
            db.entries
                .iter()
                .enumerate()
                .filter(|(_, e)| pick(e))
                .min_by(|(_, a), (_, b)| a.updated_unix_s.total_cmp(&b.updated_unix_s))
                .map(|(i, _)| i)
        };
        let in_group = self
            .entries
            .iter()
            .filter(|e| peer_group(&e.peer) == group)
            .count();
        if in_group >= bounds.per_group.max(1) {
            if let Some(i) = oldest(self, &|e| peer_group(&e.peer) == group) {
                let gone = self.entries.remove(i);
                return Room::EvictedOwn { peer: gone.peer };
            }
        }
        let max = bounds.max_entries.min(policy.max_entries).max(1);
        // Entries the aging rules drop anyway do not count.
        let live = |e: &super::PathEntry| age(now_unix_s, e.updated_unix_s) <= policy.forget_after;
        if self.entries.iter().filter(|e| live(e)).count() < max {
            return Room::Free;
        }
        let stale = |e: &super::PathEntry| age(now_unix_s, e.updated_unix_s) > policy.fresh_for;
        match oldest(self, &stale) {
            Some(i) => {
                let gone = self.entries.remove(i);
                Room::EvictedStale { peer: gone.peer }
            }
            None => Room::Full,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Measurement;
    use super::*;
    use crate::units::Rate;

    fn m(rtt_ms: u64, at: f64) -> Measurement {
        Measurement {
            rate: Rate::mbit(100),
            min_rtt: Duration::from_millis(rtt_ms),
            full_pipe: true,
            at_unix_s: at,
        }
    }

    fn add(db: &mut PathDb, peer: &str, rtt_ms: u64, at: f64, b: &RecordBounds) -> Room {
        let policy = PathDbPolicy::default();
        let room = db.make_room(
            peer,
            Direction::Receive,
            Duration::from_millis(rtt_ms),
            at,
            &policy,
            b,
        );
        if room.admits() {
            db.record(peer, Direction::Receive, &m(rtt_ms, at), &policy);
        }
        room
    }

    #[test]
    fn groups_are_addresses_for_ipv4_and_slash_64s_for_ipv6() {
        assert_eq!(peer_group("10.0.0.7"), "10.0.0.7");
        assert_eq!(peer_group("::ffff:10.0.0.7"), "10.0.0.7");
        assert_eq!(peer_group("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(
            peer_group("2001:db8:1:2:ffff:ffff:ffff:ffff"),
            peer_group("2001:db8:1:2::")
        );
        assert_ne!(peer_group("2001:db8:1:3::1"), peer_group("2001:db8:1:2::1"));
        assert_eq!(peer_group("not an address"), "not an address");
    }

    #[test]
    fn a_group_past_its_bound_replaces_its_own_oldest_entry_only() {
        let b = RecordBounds {
            per_group: 3,
            max_entries: 100,
        };
        let mut db = PathDb::new();
        add(&mut db, "10.0.0.1", 50, 1.0, &b);
        // RTTs a factor 2 apart: separate buckets, as a client that delays its ACKs gets.
        for (i, rtt) in [1u64, 2, 4, 8, 16, 32].iter().enumerate() {
            let room = add(&mut db, "2001:db8::1", *rtt, 10.0 + i as f64, &b);
            assert!(room.admits());
        }
        let theirs: Vec<u64> = db
            .entries
            .iter()
            .filter(|e| e.peer != "10.0.0.1")
            .map(|e| e.min_rtt_us / 1000)
            .collect();
        assert_eq!(theirs, [8, 16, 32], "the newest three of the group");
        assert!(db.entries.iter().any(|e| e.peer == "10.0.0.1"));
        // Another address of the same /64 shares the bound.
        assert_eq!(
            add(&mut db, "2001:db8::2", 50, 20.0, &b),
            Room::EvictedOwn {
                peer: "2001:db8::1".into()
            }
        );
        // A merge into an existing path needs no room.
        assert_eq!(add(&mut db, "2001:db8::2", 50, 21.0, &b), Room::Exists);
    }

    #[test]
    fn a_full_database_of_fresh_entries_refuses_new_paths_and_evicts_nothing() {
        let b = RecordBounds {
            per_group: 2,
            max_entries: 4,
        };
        let day = 24.0 * 3600.0;
        let mut db = PathDb::new();
        add(&mut db, "10.0.0.1", 50, 0.0, &b);
        // A flood from many addresses fills the free room...
        for i in 0..10u8 {
            add(&mut db, &format!("192.0.2.{i}"), 50, 100.0, &b);
        }
        assert_eq!(db.entries.len(), 4);
        assert!(db.entries.iter().any(|e| e.peer == "10.0.0.1"));
        assert_eq!(add(&mut db, "192.0.2.99", 50, 200.0, &b), Room::Full);
        // ...until an entry is no longer fresh: then it may be replaced.
        assert_eq!(
            add(&mut db, "192.0.2.99", 50, day + 50.0, &b),
            Room::EvictedStale {
                peer: "10.0.0.1".into()
            }
        );
        assert_eq!(db.entries.len(), 4);
    }

    #[test]
    fn entries_past_their_life_do_not_count_against_the_bound() {
        let b = RecordBounds {
            per_group: 2,
            max_entries: 1,
        };
        let mut db = PathDb::new();
        add(&mut db, "10.0.0.1", 50, 0.0, &b);
        let later = 31.0 * 24.0 * 3600.0;
        assert_eq!(add(&mut db, "10.0.0.2", 50, later, &b), Room::Free);
        assert_eq!(db.entries.len(), 1, "the old one aged out when recording");
        assert_eq!(db.entries[0].peer, "10.0.0.2");
    }
}
