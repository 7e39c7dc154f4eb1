//! The rules both backends share, in one place: checking what is read back from a database
//! against named budgets, and planning a change (the core's merge, aging and bounds applied
//! to the rows the backend fetched). A backend fetches rows, calls [`plan`], and writes the
//! plan in the same transaction; it decides nothing itself.

use crate::host::Host;
use crate::types::{direction_from, Source, StoredEntry};
use std::collections::HashSet;
use tcptune_core::pathdb::{
    rtt_bucket, Direction, Measurement, PathDb, PathDbPolicy, PathEntry, RecordBounds, Room,
    PATH_DB_SCHEMA_VERSION,
};

/// Longest peer address or name accepted from a database (a DNS name's limit).
pub const MAX_PEER_BYTES: usize = 255;
/// Longest source name accepted from a database.
pub const MAX_SOURCE_BYTES: usize = 32;
/// Most rows one query reads back; a database holding more for one question is refused
/// (the core keeps at most [`PathDbPolicy::max_entries`] per host).
pub const MAX_ROWS_READ: usize = 1 << 20;
/// Measurements kept per path (the newest), for `tcptune paths show`.
pub const HISTORY_PER_PATH: usize = 32;

/// What [`crate::PathStore::record`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Nothing: a zero rate or an impossible time (the core ignores those).
    Ignored,
    /// Merged into the path's entry.
    Merged {
        /// The estimate changed (a new entry, a new rate, a refresh); else only the sample
        /// count did.
        estimate_changed: bool,
        /// Entries the core's aging rules dropped meanwhile (and, with bounds, the entry
        /// dropped to make room).
        pruned: usize,
    },
    /// Not recorded: the bounds of [`crate::PathStore::record_bounded`] left no room.
    Refused,
}

/// The key of a row: peer, direction and RTT bucket as stored (the measuring host is the
/// backend's business).
pub(crate) type RowKey = (String, String, i64);

/// A row of paths exactly as a backend read it, before any check.
#[derive(Clone, Debug)]
pub(crate) struct RawRow {
    pub(crate) peer: String,
    pub(crate) direction: String,
    pub(crate) rtt_bucket: i64,
    pub(crate) rate_bps: i64,
    pub(crate) full_pipe: bool,
    pub(crate) min_rtt_us: i64,
    pub(crate) first_seen_unix_s: f64,
    pub(crate) updated_unix_s: f64,
    pub(crate) samples: i64,
    pub(crate) source: String,
    pub(crate) last_source: String,
    pub(crate) last_measured_unix_s: f64,
    pub(crate) host_name: String,
    pub(crate) host_addr: String,
}

/// A row that failed its checks: its key (to drop it) and what is wrong.
pub(crate) type BadRow = Box<(RowKey, Host, String)>;

fn within(what: &str, s: &str, max: usize) -> Result<(), String> {
    if s.len() > max {
        return Err(format!("{what} of {} bytes (at most {max})", s.len()));
    }
    Ok(())
}

impl RawRow {
    /// Check every value against its budget and the core's sense (a positive rate, finite
    /// times, counts that fit).
    pub(crate) fn check(self) -> Result<StoredEntry, BadRow> {
        let key = (self.peer.clone(), self.direction.clone(), self.rtt_bucket);
        let host = Host {
            name: self.host_name.clone(),
            addr: self.host_addr.clone(),
        };
        let checked = (|| {
            within("a peer", &self.peer, MAX_PEER_BYTES)?;
            if self.peer.is_empty() {
                return Err("an empty peer".to_string());
            }
            within("a source", &self.source, MAX_SOURCE_BYTES)?;
            within("a source", &self.last_source, MAX_SOURCE_BYTES)?;
            let host = Host::checked(self.host_name, self.host_addr)?;
            let d = direction_from(&self.direction)
                .ok_or_else(|| format!("direction '{}'", self.direction))?;
            let rate_bps = u64::try_from(self.rate_bps)
                .ok()
                .filter(|&r| r > 0)
                .ok_or_else(|| format!("rate {}", self.rate_bps))?;
            let rtt_bucket = i32::try_from(self.rtt_bucket)
                .ok()
                .filter(|b| b.abs() < 1000)
                .ok_or_else(|| format!("RTT bucket {}", self.rtt_bucket))?;
            let min_rtt_us = u64::try_from(self.min_rtt_us)
                .map_err(|_| format!("min RTT {}", self.min_rtt_us))?;
            let samples = u32::try_from(self.samples)
                .ok()
                .filter(|&s| s > 0)
                .ok_or_else(|| format!("samples {}", self.samples))?;
            if ![
                self.first_seen_unix_s,
                self.updated_unix_s,
                self.last_measured_unix_s,
            ]
            .iter()
            .all(|t| t.is_finite())
            {
                return Err("a timestamp is not a number".to_string());
            }
            Ok(StoredEntry {
                entry: PathEntry {
                    peer: self.peer,
                    direction: d,
                    rtt_bucket,
                    rate_bps,
                    full_pipe: self.full_pipe,
                    min_rtt_us,
                    first_seen_unix_s: self.first_seen_unix_s,
                    updated_unix_s: self.updated_unix_s,
                    samples,
                },
                source: Source::from_name(&self.source),
                last_source: Source::from_name(&self.last_source),
                last_measured_unix_s: self.last_measured_unix_s,
                measured_by: host,
            })
        })();
        checked.map_err(|reason| Box::new((key, host, reason)))
    }
}

/// Check an entry from elsewhere (an import) against the same budgets and sense as a row
/// read back from a database.
pub fn check_entry(s: &StoredEntry) -> Result<(), String> {
    let e = &s.entry;
    RawRow {
        peer: e.peer.clone(),
        direction: crate::types::direction_name(e.direction).to_string(),
        rtt_bucket: i64::from(e.rtt_bucket),
        rate_bps: i64::try_from(e.rate_bps).unwrap_or(-1),
        full_pipe: e.full_pipe,
        min_rtt_us: i64::try_from(e.min_rtt_us).unwrap_or(-1),
        first_seen_unix_s: e.first_seen_unix_s,
        updated_unix_s: e.updated_unix_s,
        samples: i64::from(e.samples),
        source: s.source.as_str().to_string(),
        last_source: s.last_source.as_str().to_string(),
        last_measured_unix_s: s.last_measured_unix_s,
        host_name: s.measured_by.name.clone(),
        host_addr: s.measured_by.addr.clone(),
    }
    .check()
    .map(|_| ())
    .map_err(|b| b.2)
}

/// Split checked rows from bad ones.
pub(crate) fn check_rows(rows: Vec<RawRow>) -> (Vec<StoredEntry>, Vec<BadRow>) {
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    for r in rows {
        match r.check() {
            Ok(e) => good.push(e),
            Err(b) => bad.push(b),
        }
    }
    (good, bad)
}

fn key(e: &PathEntry) -> (&str, Direction, i32) {
    (e.peer.as_str(), e.direction, e.rtt_bucket)
}

/// What one measurement changes: the rows to delete (aged out, evicted to make room), the
/// row to insert or replace, and what to tell the caller. The measurement itself goes into
/// the history when `upsert` is set.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Keys to delete, within the measuring host's rows.
    pub(crate) delete: Vec<(String, Direction, i32)>,
    /// The path's new row.
    pub(crate) upsert: Option<StoredEntry>,
    /// The answer.
    pub(crate) outcome: Recorded,
}

/// One measurement to plan.
pub(crate) struct Change<'a> {
    pub(crate) peer: &'a str,
    pub(crate) direction: Direction,
    pub(crate) m: &'a Measurement,
    pub(crate) source: &'a Source,
    pub(crate) host: &'a Host,
    pub(crate) policy: &'a PathDbPolicy,
    pub(crate) bounds: Option<&'a RecordBounds>,
}

/// Plan a measurement against `before`, every row of the measuring host: the core's
/// [`PathDb::make_room`] (with bounds), [`PathDb::record`] (merge, age, bound), and the
/// sources (the estimate keeps its source unless the measurement changed it).
pub(crate) fn plan(before: &[StoredEntry], c: &Change<'_>) -> Plan {
    if c.m.rate.0 == 0 || !c.m.at_unix_s.is_finite() {
        return Plan {
            delete: Vec::new(),
            upsert: None,
            outcome: Recorded::Ignored,
        };
    }
    let mut db = PathDb {
        schema_version: PATH_DB_SCHEMA_VERSION,
        entries: before.iter().map(|s| s.entry.clone()).collect(),
    };
    if let Some(b) = c.bounds {
        let room = db.make_room(c.peer, c.direction, c.m.min_rtt, c.m.at_unix_s, c.policy, b);
        if room == Room::Full {
            return Plan {
                delete: Vec::new(),
                upsert: None,
                outcome: Recorded::Refused,
            };
        }
    }
    db.record(c.peer, c.direction, c.m, c.policy);
    let this = (c.peer, c.direction, rtt_bucket(c.m.min_rtt));
    let kept: HashSet<(&str, Direction, i32)> = db.entries.iter().map(key).collect();
    let delete: Vec<(String, Direction, i32)> = before
        .iter()
        .filter(|s| !kept.contains(&key(&s.entry)))
        .map(|s| (s.entry.peer.clone(), s.entry.direction, s.entry.rtt_bucket))
        .collect();
    let pruned = delete.len();
    let mut estimate_changed = false;
    let upsert = db.entries.iter().find(|e| key(e) == this).map(|e| {
        let prev = before.iter().find(|s| key(&s.entry) == this);
        estimate_changed = match prev {
            None => true,
            Some(p) => {
                p.entry.updated_unix_s != e.updated_unix_s
                    || p.entry.rate_bps != e.rate_bps
                    || p.entry.full_pipe != e.full_pipe
            }
        };
        let source = match prev {
            Some(p) if !estimate_changed => p.source.clone(),
            _ => c.source.clone(),
        };
        StoredEntry {
            entry: e.clone(),
            source,
            last_source: c.source.clone(),
            last_measured_unix_s: c.m.at_unix_s,
            measured_by: c.host.clone(),
        }
    });
    Plan {
        delete,
        upsert,
        outcome: Recorded::Merged {
            estimate_changed,
            pruned,
        },
    }
}

/// The core's lookup over fetched rows (any host's): the fresh entry of this peer and
/// direction nearest in RTT, from the same RTT bucket or a neighbour.
pub(crate) fn lookup_in(
    rows: &[StoredEntry],
    peer: &str,
    direction: Direction,
    rtt: std::time::Duration,
    now_unix_s: f64,
    policy: &PathDbPolicy,
) -> Option<tcptune_core::pathdb::Known> {
    db_of(rows).lookup(peer, direction, rtt, now_unix_s, policy)
}

/// The core's database of fetched rows, for its lookups.
fn db_of(rows: &[StoredEntry]) -> PathDb {
    PathDb {
        schema_version: PATH_DB_SCHEMA_VERSION,
        entries: rows.iter().map(|s| s.entry.clone()).collect(),
    }
}

/// [`PathDb::base_rtt`] over stored rows.
pub(crate) fn base_rtt_in(
    rows: &[StoredEntry],
    peer: &str,
    direction: Direction,
    now_unix_s: f64,
    policy: &PathDbPolicy,
) -> Option<std::time::Duration> {
    db_of(rows).base_rtt(peer, direction, now_unix_s, policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> RawRow {
        RawRow {
            peer: "10.0.0.2".into(),
            direction: "send".into(),
            rtt_bucket: 33,
            rate_bps: 1_000_000,
            full_pipe: true,
            min_rtt_us: 100_000,
            first_seen_unix_s: 0.0,
            updated_unix_s: 0.0,
            samples: 1,
            source: "probe".into(),
            last_source: "probe".into(),
            last_measured_unix_s: 0.0,
            host_name: "dtn1".into(),
            host_addr: "10.0.0.1".into(),
        }
    }

    #[test]
    fn every_value_read_back_is_checked_against_its_budget() {
        assert!(raw().check().is_ok());
        let bad: Vec<RawRow> = vec![
            RawRow {
                peer: "p".repeat(MAX_PEER_BYTES + 1),
                ..raw()
            },
            RawRow {
                peer: String::new(),
                ..raw()
            },
            RawRow {
                source: "s".repeat(MAX_SOURCE_BYTES + 1),
                ..raw()
            },
            RawRow {
                host_name: "h".repeat(crate::host::MAX_HOST_NAME_BYTES + 1),
                ..raw()
            },
            RawRow {
                rate_bps: -1,
                ..raw()
            },
            RawRow {
                samples: 0,
                ..raw()
            },
            RawRow {
                samples: i64::MAX,
                ..raw()
            },
            RawRow {
                rtt_bucket: i64::from(i32::MAX),
                ..raw()
            },
            RawRow {
                min_rtt_us: -5,
                ..raw()
            },
            RawRow {
                updated_unix_s: f64::NAN,
                ..raw()
            },
            RawRow {
                direction: "up".into(),
                ..raw()
            },
        ];
        let n = bad.len();
        let (good, bad) = check_rows(bad);
        assert!(good.is_empty());
        assert_eq!(bad.len(), n);
    }
}
