//! [`PathStore`]: lookups, recording, listing and forgetting, each in one transaction.

use crate::error::{is_busy, is_corruption, StoreError, Warning};
use crate::location::Location;
use crate::types::{direction_from, direction_name, Source, StoredEntry, StoredMeasurement};
use rusqlite::{params, params_from_iter, Connection, Row, ToSql, TransactionBehavior};
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;
use tcptune_core::pathdb::{
    rtt_bucket, Direction, Known, Measurement, PathDb, PathDbPolicy, PathEntry, RecordBounds, Room,
    PATH_DB_SCHEMA_VERSION,
};

/// Measurements kept per path (the newest), for `tcptune paths show`.
pub const HISTORY_PER_PATH: usize = 32;

/// What [`PathStore::record`] did.
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
    /// Not recorded: the bounds of [`PathStore::record_bounded`] left no room.
    Refused,
}

/// The database, open. Not shared between threads: open one per thread or process (SQLite
/// serialises their writes).
///
/// Call order: [`PathStore::open`] (or [`PathStore::open_existing`]), then
/// [`PathStore::take_warnings`] to show what opening found (an import, a damaged file moved
/// aside), then any queries and changes; changes may add warnings (rows with impossible
/// values ignored) for the next [`PathStore::take_warnings`].
#[derive(Debug)]
pub struct PathStore {
    conn: Connection,
    location: Location,
    warnings: Vec<Warning>,
}

/// Clamp an unsigned count into SQLite's signed integers.
pub(crate) fn to_sql_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

const ENTRY_COLUMNS: &str = "peer, direction, rtt_bucket, rate_bps, full_pipe, min_rtt_us, \
     first_seen_unix_s, updated_unix_s, samples, source, last_source, last_measured_unix_s";

/// The key of a row of `paths` as stored (peer, direction, RTT bucket), and what is
/// impossible about it.
type BadRow = ((String, String, i64), String);

/// A row of `paths`, or what is impossible about it (with its key, to drop it).
type RowResult = Result<StoredEntry, BadRow>;

fn entry_of(r: &Row<'_>) -> rusqlite::Result<RowResult> {
    let peer: String = r.get(0)?;
    let direction: String = r.get(1)?;
    let bucket: i64 = r.get(2)?;
    let rate: i64 = r.get(3)?;
    let full_pipe: bool = r.get(4)?;
    let min_rtt: i64 = r.get(5)?;
    let first: f64 = r.get(6)?;
    let updated: f64 = r.get(7)?;
    let samples: i64 = r.get(8)?;
    let source: String = r.get(9)?;
    let last_source: String = r.get(10)?;
    let last_measured: f64 = r.get(11)?;
    let checked = (|| {
        let d = direction_from(&direction).ok_or_else(|| format!("direction '{direction}'"))?;
        let rate_bps = u64::try_from(rate)
            .ok()
            .filter(|&r| r > 0)
            .ok_or_else(|| format!("rate {rate}"))?;
        let rtt_bucket = i32::try_from(bucket).map_err(|_| format!("RTT bucket {bucket}"))?;
        let min_rtt_us = u64::try_from(min_rtt).map_err(|_| format!("min RTT {min_rtt}"))?;
        let samples = u32::try_from(samples).map_err(|_| format!("samples {samples}"))?;
        if !(first.is_finite() && updated.is_finite() && last_measured.is_finite()) {
            return Err("a timestamp is not a number".to_string());
        }
        Ok(StoredEntry {
            entry: PathEntry {
                peer: peer.clone(),
                direction: d,
                rtt_bucket,
                rate_bps,
                full_pipe,
                min_rtt_us,
                first_seen_unix_s: first,
                updated_unix_s: updated,
                samples,
            },
            source: Source::from_name(&source),
            last_source: Source::from_name(&last_source),
            last_measured_unix_s: last_measured,
        })
    })();
    Ok(checked.map_err(|reason| ((peer, direction, bucket), reason)))
}

fn measurement_of(r: &Row<'_>) -> rusqlite::Result<Option<StoredMeasurement>> {
    let direction: String = r.get(1)?;
    let (Some(direction), Ok(rtt_bucket), Ok(rate_bps), Ok(min_rtt_us)) = (
        direction_from(&direction),
        i32::try_from(r.get::<_, i64>(2)?),
        u64::try_from(r.get::<_, i64>(5)?),
        u64::try_from(r.get::<_, i64>(7)?),
    ) else {
        return Ok(None);
    };
    Ok(Some(StoredMeasurement {
        peer: r.get(0)?,
        direction,
        rtt_bucket,
        at_unix_s: r.get(3)?,
        source: Source::from_name(&r.get::<_, String>(4)?),
        rate_bps,
        full_pipe: r.get(6)?,
        min_rtt_us,
    }))
}

fn key(e: &PathEntry) -> (&str, Direction, i32) {
    (e.peer.as_str(), e.direction, e.rtt_bucket)
}

impl PathStore {
    pub(crate) fn new(conn: Connection, location: Location, warnings: Vec<Warning>) -> Self {
        PathStore {
            conn,
            location,
            warnings,
        }
    }

    pub(crate) fn connection(&mut self) -> &mut Connection {
        &mut self.conn
    }

    pub(crate) fn warn(&mut self, w: Warning) {
        self.warnings.push(w);
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.location.database
    }

    /// The files behind it.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// What happened since the last call that the user should hear about.
    pub fn take_warnings(&mut self) -> Vec<Warning> {
        std::mem::take(&mut self.warnings)
    }

    fn err(&self, what: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
        let db = self.location.database.clone();
        move |e| {
            let path = db.clone();
            if is_busy(&e) {
                StoreError::Busy { path, what }
            } else if is_corruption(&e) {
                StoreError::Corrupt {
                    path,
                    what,
                    source: e,
                }
            } else {
                StoreError::Sqlite {
                    path,
                    what,
                    source: e,
                }
            }
        }
    }

    /// Rows of `paths` matching `filter` (an SQL condition on `params`), valid ones and the
    /// keys and reasons of impossible ones.
    fn select(
        conn: &Connection,
        filter: &str,
        params: &[&dyn ToSql],
    ) -> rusqlite::Result<(Vec<StoredEntry>, Vec<BadRow>)> {
        let sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM paths WHERE {filter} \
             ORDER BY updated_unix_s, peer, direction, rtt_bucket"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params, entry_of)?;
        let (mut good, mut bad) = (Vec::new(), Vec::new());
        for r in rows {
            match r? {
                Ok(e) => good.push(e),
                Err(b) => bad.push(b),
            }
        }
        Ok((good, bad))
    }

    fn note_invalid(&mut self, bad: &[BadRow]) {
        if let Some((_, first)) = bad.first() {
            self.warnings.push(Warning::InvalidRows {
                path: self.location.database.clone(),
                count: bad.len(),
                first: first.clone(),
            });
        }
    }

    /// The fresh estimate for this peer and direction at a path RTT of `rtt` (the core's
    /// [`PathDb::lookup`] over the rows of this and the neighbouring RTT buckets).
    pub fn lookup(
        &mut self,
        peer: &str,
        direction: Direction,
        rtt: Duration,
        now_unix_s: f64,
        policy: &PathDbPolicy,
    ) -> Result<Option<Known>, StoreError> {
        let bucket = rtt_bucket(rtt);
        let (rows, bad) = Self::select(
            &self.conn,
            "peer = ?1 AND direction = ?2 AND rtt_bucket BETWEEN ?3 - 1 AND ?3 + 1",
            &[&peer, &direction_name(direction), &bucket],
        )
        .map_err(self.err("looking up a path"))?;
        self.note_invalid(&bad);
        let db = PathDb {
            schema_version: PATH_DB_SCHEMA_VERSION,
            entries: rows.into_iter().map(|s| s.entry).collect(),
        };
        Ok(db.lookup(peer, direction, rtt, now_unix_s, policy))
    }

    /// Merge a measurement of this peer and direction, from `source`: in one `BEGIN
    /// IMMEDIATE` transaction, load every row into the core's [`PathDb`], apply
    /// [`PathDb::record`] (merge, then age and bound the database), and write back what
    /// changed, with the measurement added to the path's history.
    pub fn record(
        &mut self,
        peer: &str,
        direction: Direction,
        m: &Measurement,
        source: &Source,
        policy: &PathDbPolicy,
    ) -> Result<Recorded, StoreError> {
        self.record_within(peer, direction, m, source, policy, None)
    }

    /// [`PathStore::record`] for a server recording its clients: a path the database does
    /// not hold yet is added only if the core's [`PathDb::make_room`] finds room under
    /// `bounds` (it may drop the group's own oldest entry, or one that is no longer fresh,
    /// in the same transaction); otherwise nothing is written and the answer is
    /// [`Recorded::Refused`].
    pub fn record_bounded(
        &mut self,
        peer: &str,
        direction: Direction,
        m: &Measurement,
        source: &Source,
        policy: &PathDbPolicy,
        bounds: &RecordBounds,
    ) -> Result<Recorded, StoreError> {
        self.record_within(peer, direction, m, source, policy, Some(bounds))
    }

    fn record_within(
        &mut self,
        peer: &str,
        direction: Direction,
        m: &Measurement,
        source: &Source,
        policy: &PathDbPolicy,
        bounds: Option<&RecordBounds>,
    ) -> Result<Recorded, StoreError> {
        if m.rate.0 == 0 || !m.at_unix_s.is_finite() {
            return Ok(Recorded::Ignored);
        }
        let err = self.err("recording a measurement");
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&err)?;
        let (before, bad) = Self::select(&tx, "1", &[]).map_err(&err)?;
        let mut db = PathDb {
            schema_version: PATH_DB_SCHEMA_VERSION,
            entries: before.iter().map(|s| s.entry.clone()).collect(),
        };
        if let Some(b) = bounds {
            let room = db.make_room(peer, direction, m.min_rtt, m.at_unix_s, policy, b);
            if room == Room::Full {
                // Nothing written: the transaction ends without a change.
                drop(tx);
                self.note_invalid(&bad);
                return Ok(Recorded::Refused);
            }
        }
        db.record(peer, direction, m, policy);
        let this = (peer, direction, rtt_bucket(m.min_rtt));
        let kept: HashSet<(&str, Direction, i32)> = db.entries.iter().map(key).collect();
        let mut pruned = 0;
        {
            let mut delete = tx
                .prepare_cached(
                    "DELETE FROM paths WHERE peer = ?1 AND direction = ?2 AND rtt_bucket = ?3",
                )
                .map_err(&err)?;
            for s in before.iter().filter(|s| !kept.contains(&key(&s.entry))) {
                let e = &s.entry;
                delete
                    .execute(params![e.peer, direction_name(e.direction), e.rtt_bucket])
                    .map_err(&err)?;
                pruned += 1;
            }
            for ((p, d, b), _) in &bad {
                delete.execute(params![p, d, b]).map_err(&err)?;
            }
        }
        let mut estimate_changed = false;
        if let Some(e) = db.entries.iter().find(|e| key(e) == this) {
            let prev = before.iter().find(|s| key(&s.entry) == this);
            estimate_changed = match prev {
                None => true,
                Some(p) => {
                    p.entry.updated_unix_s != e.updated_unix_s
                        || p.entry.rate_bps != e.rate_bps
                        || p.entry.full_pipe != e.full_pipe
                }
            };
            let estimate_source = match prev {
                Some(p) if !estimate_changed => p.source.clone(),
                _ => source.clone(),
            };
            tx.execute(
                "INSERT INTO paths (peer, direction, rtt_bucket, rate_bps, full_pipe,
                     min_rtt_us, first_seen_unix_s, updated_unix_s, samples, source, last_source,
                     last_measured_unix_s)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
                 ON CONFLICT (peer, direction, rtt_bucket) DO UPDATE SET
                     rate_bps = excluded.rate_bps, full_pipe = excluded.full_pipe,
                     min_rtt_us = excluded.min_rtt_us,
                     first_seen_unix_s = excluded.first_seen_unix_s,
                     updated_unix_s = excluded.updated_unix_s, samples = excluded.samples,
                     source = excluded.source, last_source = excluded.last_source,
                     last_measured_unix_s = excluded.last_measured_unix_s",
                params![
                    e.peer,
                    direction_name(e.direction),
                    e.rtt_bucket,
                    to_sql_int(e.rate_bps),
                    e.full_pipe,
                    to_sql_int(e.min_rtt_us),
                    e.first_seen_unix_s,
                    e.updated_unix_s,
                    e.samples,
                    estimate_source.as_str(),
                    source.as_str(),
                    m.at_unix_s,
                ],
            )
            .map_err(&err)?;
            tx.execute(
                "INSERT INTO measurements (peer, direction, rtt_bucket, at_unix_s, source,
                     rate_bps, full_pipe, min_rtt_us)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    peer,
                    direction_name(direction),
                    this.2,
                    m.at_unix_s,
                    source.as_str(),
                    to_sql_int(m.rate.0),
                    m.full_pipe,
                    to_sql_int(u64::try_from(m.min_rtt.as_micros()).unwrap_or(u64::MAX)),
                ],
            )
            .map_err(&err)?;
            tx.execute(
                "DELETE FROM measurements WHERE peer = ?1 AND direction = ?2 AND rtt_bucket = ?3
                 AND id NOT IN (SELECT id FROM measurements
                     WHERE peer = ?1 AND direction = ?2 AND rtt_bucket = ?3
                     ORDER BY id DESC LIMIT ?4)",
                params![
                    peer,
                    direction_name(direction),
                    this.2,
                    HISTORY_PER_PATH as i64
                ],
            )
            .map_err(&err)?;
        }
        tx.commit().map_err(&err)?;
        self.note_invalid(&bad);
        Ok(Recorded::Merged {
            estimate_changed,
            pruned,
        })
    }

    /// Every path, ordered by peer, direction and RTT bucket.
    pub fn entries(&mut self) -> Result<Vec<StoredEntry>, StoreError> {
        let (mut rows, bad) =
            Self::select(&self.conn, "1", &[]).map_err(self.err("listing the paths"))?;
        self.note_invalid(&bad);
        rows.sort_by(|a, b| {
            (
                a.entry.peer.as_str(),
                a.entry.direction as u8,
                a.entry.rtt_bucket,
            )
                .cmp(&(
                    b.entry.peer.as_str(),
                    b.entry.direction as u8,
                    b.entry.rtt_bucket,
                ))
        });
        Ok(rows)
    }

    /// The paths to any of these peers.
    pub fn entries_of(&mut self, peers: &[String]) -> Result<Vec<StoredEntry>, StoreError> {
        let mut all = self.entries()?;
        all.retain(|s| peers.contains(&s.entry.peer));
        Ok(all)
    }

    /// The recorded measurements of any of these peers, oldest first.
    pub fn history(&self, peers: &[String]) -> Result<Vec<StoredMeasurement>, StoreError> {
        if peers.is_empty() {
            return Ok(Vec::new());
        }
        let marks = vec!["?"; peers.len()].join(", ");
        let sql = format!(
            "SELECT peer, direction, rtt_bucket, at_unix_s, source, rate_bps, full_pipe,
                 min_rtt_us
             FROM measurements WHERE peer IN ({marks}) ORDER BY id"
        );
        let err = self.err("reading the history of measurements");
        let mut stmt = self.conn.prepare(&sql).map_err(&err)?;
        let rows = stmt
            .query_map(params_from_iter(peers.iter()), measurement_of)
            .map_err(&err)?;
        let mut out = Vec::new();
        for r in rows {
            out.extend(r.map_err(&err)?);
        }
        Ok(out)
    }

    /// Forget every path to these peers (and their history); returns how many paths.
    pub fn forget(&mut self, peers: &[String]) -> Result<usize, StoreError> {
        let err = self.err("forgetting paths");
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&err)?;
        let mut n = 0;
        for p in peers {
            n += tx
                .execute("DELETE FROM paths WHERE peer = ?1", params![p])
                .map_err(&err)?;
        }
        tx.commit().map_err(&err)?;
        Ok(n)
    }

    /// Forget every path; returns how many.
    pub fn forget_all(&mut self) -> Result<usize, StoreError> {
        let err = self.err("forgetting every path");
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&err)?;
        let n = tx.execute("DELETE FROM paths", []).map_err(&err)?;
        tx.execute("DELETE FROM measurements", []).map_err(&err)?;
        tx.commit().map_err(&err)?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcptune_core::Rate;

    /// A folder removed on drop.
    struct TempDir(std::path::PathBuf);
    impl TempDir {
        fn new(tag: &str) -> TempDir {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let d = std::env::temp_dir().join(format!(
                "tcptune-store-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&d).expect("temp dir");
            TempDir(d)
        }
        fn store(&self) -> PathStore {
            PathStore::open(&self.0.join("paths.sqlite")).expect("open")
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const PEER: &str = "10.0.0.2";
    const HOUR: f64 = 3600.0;

    fn m(mbit: u64, full: bool, at: f64) -> Measurement {
        Measurement {
            rate: Rate::mbit(mbit),
            min_rtt: Duration::from_millis(100),
            full_pipe: full,
            at_unix_s: at,
        }
    }

    fn record(s: &mut PathStore, mbit: u64, full: bool, at: f64, src: Source) -> Recorded {
        s.record(
            PEER,
            Direction::Send,
            &m(mbit, full, at),
            &src,
            &PathDbPolicy::default(),
        )
        .expect("record")
    }

    fn look(s: &mut PathStore, now: f64) -> Option<Known> {
        s.lookup(
            PEER,
            Direction::Send,
            Duration::from_millis(100),
            now,
            &PathDbPolicy::default(),
        )
        .expect("lookup")
    }

    #[test]
    fn measurements_merge_by_the_cores_rules_and_remember_their_source() {
        let d = TempDir::new("merge");
        let mut s = d.store();
        assert!(s.take_warnings().is_empty());
        assert!(look(&mut s, 0.0).is_none());
        let r = record(&mut s, 900, true, 0.0, Source::Probe);
        assert_eq!(
            r,
            Recorded::Merged {
                estimate_changed: true,
                pruned: 0
            }
        );
        record(&mut s, 1000, true, 10.0, Source::Probe);
        let k = look(&mut s, 11.0).expect("fresh");
        assert_eq!((k.rate, k.full_pipe, k.samples), (Rate::mbit(950), true, 2));
        // A transfer that delivered less changes only the sample count: the estimate
        // keeps the probe as its source, the latest measurement is the transfer's.
        let r = record(&mut s, 300, false, 20.0, Source::Transfer);
        assert_eq!(
            r,
            Recorded::Merged {
                estimate_changed: false,
                pruned: 0
            }
        );
        let e = s.entries().expect("list");
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].entry.samples, 3);
        assert_eq!(e[0].source, Source::Probe);
        assert_eq!(e[0].last_source, Source::Transfer);
        assert_eq!(e[0].last_measured_unix_s, 20.0);
        // One that delivered more raises it and becomes the source.
        record(&mut s, 990, false, 30.0, Source::Transfer);
        let e = s.entries().expect("list");
        assert_eq!(e[0].entry.rate_bps, Rate::mbit(990).0);
        assert_eq!(e[0].source, Source::Transfer);
        // A zero rate is ignored, as the core ignores it.
        assert_eq!(
            record(&mut s, 0, true, 40.0, Source::Probe),
            Recorded::Ignored
        );
        // Reopening finds the same.
        drop(s);
        let mut s = d.store();
        assert_eq!(look(&mut s, 31.0).map(|k| k.rate), Some(Rate::mbit(990)));
    }

    #[test]
    fn history_keeps_the_newest_measurements_of_each_path() {
        let d = TempDir::new("history");
        let mut s = d.store();
        let n = HISTORY_PER_PATH + 8;
        for i in 0..n {
            record(&mut s, 100 + i as u64, true, i as f64, Source::Probe);
        }
        let h = s.history(&[PEER.to_string()]).expect("history");
        assert_eq!(h.len(), HISTORY_PER_PATH);
        assert_eq!(h[0].at_unix_s, 8.0);
        assert_eq!(
            h.last().map(|x| x.rate_bps),
            Some(Rate::mbit(100 + n as u64 - 1).0)
        );
        assert!(h.iter().all(|x| x.source == Source::Probe && x.full_pipe));
    }

    #[test]
    fn bounded_recording_keeps_a_group_to_its_share_and_refuses_when_full_of_fresh_paths() {
        let dir = TempDir::new("bounded");
        let mut s = dir.store();
        let policy = PathDbPolicy::default();
        let bounds = RecordBounds {
            per_group: 2,
            max_entries: 3,
        };
        let at = |rtt_ms: u64, t: f64| Measurement {
            min_rtt: Duration::from_millis(rtt_ms),
            ..m(100, true, t)
        };
        let rec = |s: &mut PathStore, peer: &str, rtt_ms: u64, t: f64| {
            s.record_bounded(
                peer,
                Direction::Receive,
                &at(rtt_ms, t),
                &Source::Server,
                &policy,
                &bounds,
            )
            .expect("record")
        };
        rec(&mut s, PEER, 100, 1000.0);
        rec(&mut s, "10.9.9.9", 10, 1001.0);
        rec(&mut s, "10.9.9.9", 40, 1002.0);
        // The group's third path replaces its own oldest.
        assert_eq!(
            rec(&mut s, "10.9.9.9", 160, 1003.0),
            Recorded::Merged {
                estimate_changed: true,
                pruned: 1
            }
        );
        assert_eq!(rec(&mut s, "10.8.8.8", 50, 1004.0), Recorded::Refused);
        let peers: Vec<String> = s
            .entries()
            .expect("list")
            .into_iter()
            .map(|e| format!("{} {}", e.entry.peer, e.entry.min_rtt_us / 1000))
            .collect();
        assert_eq!(peers, ["10.0.0.2 100", "10.9.9.9 40", "10.9.9.9 160"]);
        assert!(s.history(&["10.8.8.8".into()]).expect("history").is_empty());
    }

    #[test]
    fn old_paths_age_out_with_their_history_and_forget_removes_them() {
        let d = TempDir::new("forget");
        let mut s = d.store();
        record(&mut s, 500, true, 0.0, Source::Probe);
        s.record(
            "10.0.0.3",
            Direction::Receive,
            &m(200, false, 40.0 * 24.0 * HOUR),
            &Source::Transfer,
            &PathDbPolicy::default(),
        )
        .expect("record");
        // The first path is 40 days old by then: the core's aging dropped it.
        let e = s.entries().expect("list");
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].entry.peer, "10.0.0.3");
        assert!(s.history(&[PEER.to_string()]).expect("history").is_empty());
        record(&mut s, 500, true, 40.0 * 24.0 * HOUR, Source::Probe);
        assert_eq!(s.forget(&[PEER.to_string()]).expect("forget"), 1);
        assert_eq!(s.forget(&[PEER.to_string()]).expect("forget"), 0);
        assert!(s.history(&[PEER.to_string()]).expect("history").is_empty());
        assert_eq!(s.entries_of(&["10.0.0.3".into()]).expect("of").len(), 1);
        assert_eq!(s.forget_all().expect("all"), 1);
        assert!(s.entries().expect("list").is_empty());
    }

    #[test]
    fn rows_with_impossible_values_are_ignored_reported_and_dropped() {
        let d = TempDir::new("invalid");
        let mut s = d.store();
        record(&mut s, 500, true, 0.0, Source::Probe);
        // Something else writes a row our CHECKs allow but the core's rules cannot use.
        s.conn
            .execute(
                "INSERT INTO paths VALUES ('10.9.9.9', 'send', 99999999999, 5, 1, 1, 0.0, 0.0, 1, 'x', 'x', 0.0)",
                [],
            )
            .expect("insert");
        assert_eq!(s.entries().expect("list").len(), 1);
        let w = s.take_warnings();
        assert!(
            matches!(&w[..], [Warning::InvalidRows { count: 1, .. }]),
            "{w:?}"
        );
        record(&mut s, 500, true, 1.0, Source::Probe);
        let n: i64 = s
            .conn
            .query_row("SELECT count(*) FROM paths", [], |r| r.get(0))
            .expect("count");
        assert_eq!(n, 1, "the impossible row is dropped at the next change");
    }
}
