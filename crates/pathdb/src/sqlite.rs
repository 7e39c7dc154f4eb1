//! [`SqliteStore`]: one host's database in a SQLite file. Lookups, recording, listing and
//! forgetting, each in one transaction; the rules are [`crate::merge`]'s.

use crate::error::{is_busy, is_corruption, StoreError, Warning};
use crate::host::Host;
use crate::location::Location;
use crate::merge::{self, BadRow, Change, RawRow, Recorded, HISTORY_PER_PATH, MAX_ROWS_READ};
use crate::types::{direction_from, direction_name, Source, StoredEntry, StoredMeasurement};
use rusqlite::{params, params_from_iter, Connection, Row, ToSql, TransactionBehavior};
use std::path::Path;
use std::time::Duration;
use tcptune_core::pathdb::{rtt_bucket, Direction, Known, Measurement, PathDbPolicy, RecordBounds};

/// The database in a SQLite file, open. Not shared between threads: open one per thread or
/// process (SQLite serialises their writes).
///
/// Call order: [`SqliteStore::open`] (or [`SqliteStore::open_existing`]), then
/// [`SqliteStore::take_warnings`] to show what opening found (an import, a damaged file
/// moved aside), then any queries and changes; changes may add warnings (rows with
/// impossible values ignored) for the next [`SqliteStore::take_warnings`].
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    location: Location,
    warnings: Vec<Warning>,
    host: Host,
}

/// Clamp an unsigned count into SQLite's signed integers.
pub(crate) fn to_sql_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

const ENTRY_COLUMNS: &str = "peer, direction, rtt_bucket, rate_bps, full_pipe, min_rtt_us, \
     first_seen_unix_s, updated_unix_s, samples, source, last_source, last_measured_unix_s, \
     host_name, host_addr";

fn raw_of(r: &Row<'_>) -> rusqlite::Result<RawRow> {
    Ok(RawRow {
        peer: r.get(0)?,
        direction: r.get(1)?,
        rtt_bucket: r.get(2)?,
        rate_bps: r.get(3)?,
        full_pipe: r.get(4)?,
        min_rtt_us: r.get(5)?,
        first_seen_unix_s: r.get(6)?,
        updated_unix_s: r.get(7)?,
        samples: r.get(8)?,
        source: r.get(9)?,
        last_source: r.get(10)?,
        last_measured_unix_s: r.get(11)?,
        host_name: r.get(12)?,
        host_addr: r.get(13)?,
    })
}

fn measurement_of(r: &Row<'_>) -> rusqlite::Result<Option<StoredMeasurement>> {
    let direction: String = r.get(1)?;
    let peer: String = r.get(0)?;
    let source: String = r.get(4)?;
    let (Some(direction), Ok(rtt_bucket), Ok(rate_bps), Ok(min_rtt_us)) = (
        direction_from(&direction),
        i32::try_from(r.get::<_, i64>(2)?),
        u64::try_from(r.get::<_, i64>(5)?),
        u64::try_from(r.get::<_, i64>(7)?),
    ) else {
        return Ok(None);
    };
    if peer.len() > merge::MAX_PEER_BYTES || source.len() > merge::MAX_SOURCE_BYTES {
        return Ok(None);
    }
    Ok(Some(StoredMeasurement {
        peer,
        direction,
        rtt_bucket,
        at_unix_s: r.get(3)?,
        source: Source::from_name(&source),
        rate_bps,
        full_pipe: r.get(6)?,
        min_rtt_us,
    }))
}

impl SqliteStore {
    pub(crate) fn new(conn: Connection, location: Location, warnings: Vec<Warning>) -> Self {
        SqliteStore {
            conn,
            location,
            warnings,
            host: Host::this(),
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

    /// The host its changes are recorded as measured by.
    pub fn set_host(&mut self, host: Host) {
        self.host = host;
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
    /// keys and reasons of impossible ones; at most [`MAX_ROWS_READ`].
    fn select(
        conn: &Connection,
        filter: &str,
        params: &[&dyn ToSql],
    ) -> rusqlite::Result<(Vec<StoredEntry>, Vec<BadRow>)> {
        let sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM paths WHERE {filter} \
             ORDER BY updated_unix_s, peer, direction, rtt_bucket LIMIT {MAX_ROWS_READ}"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params, raw_of)?;
        let mut raw = Vec::new();
        for r in rows {
            raw.push(r?);
        }
        Ok(merge::check_rows(raw))
    }

    fn note_invalid(&mut self, bad: &[BadRow]) {
        if let Some((_, _, first)) = bad.first().map(|b| &**b) {
            self.warnings.push(Warning::InvalidRows {
                path: self.location.database.display().to_string(),
                count: bad.len(),
                first: first.clone(),
            });
        }
    }

    /// Every entry of this peer and direction, in any RTT bucket (what a client fetches
    /// before it knows the RTT).
    pub fn candidates(
        &mut self,
        peer: &str,
        direction: Direction,
    ) -> Result<Vec<StoredEntry>, StoreError> {
        let (rows, bad) = Self::select(
            &self.conn,
            "peer = ?1 AND direction = ?2",
            &[&peer, &direction_name(direction)],
        )
        .map_err(self.err("looking up a path"))?;
        self.note_invalid(&bad);
        Ok(rows)
    }

    /// The fresh estimate for this peer and direction at a path RTT of `rtt` (the core's
    /// lookup over the rows of this and the neighbouring RTT buckets).
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
        Ok(merge::lookup_in(
            &rows, peer, direction, rtt, now_unix_s, policy,
        ))
    }

    /// Merge a measurement in one `BEGIN IMMEDIATE` transaction: load every row, plan the
    /// change with [`crate::merge`]'s rules, write the plan, with the measurement added to
    /// the path's history. With `bounds`, a path the database does not hold yet is added
    /// only if the core finds room ([`Recorded::Refused`] otherwise).
    pub fn record(
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
        let plan = merge::plan(
            &before,
            &Change {
                peer,
                direction,
                m,
                source,
                host: &self.host,
                policy,
                bounds,
            },
        );
        if plan.outcome == Recorded::Refused {
            drop(tx);
            self.note_invalid(&bad);
            return Ok(Recorded::Refused);
        }
        {
            let mut delete = tx
                .prepare_cached(
                    "DELETE FROM paths WHERE peer = ?1 AND direction = ?2 AND rtt_bucket = ?3",
                )
                .map_err(&err)?;
            for (p, d, b) in &plan.delete {
                delete
                    .execute(params![p, direction_name(*d), b])
                    .map_err(&err)?;
            }
            for ((p, d, b), _, _) in bad.iter().map(|b| &**b) {
                delete.execute(params![p, d, b]).map_err(&err)?;
            }
        }
        if let Some(s) = &plan.upsert {
            let e = &s.entry;
            tx.execute(
                "INSERT INTO paths (peer, direction, rtt_bucket, rate_bps, full_pipe,
                     min_rtt_us, first_seen_unix_s, updated_unix_s, samples, source, last_source,
                     last_measured_unix_s, host_name, host_addr)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
                 ON CONFLICT (peer, direction, rtt_bucket) DO UPDATE SET
                     rate_bps = excluded.rate_bps, full_pipe = excluded.full_pipe,
                     min_rtt_us = excluded.min_rtt_us,
                     first_seen_unix_s = excluded.first_seen_unix_s,
                     updated_unix_s = excluded.updated_unix_s, samples = excluded.samples,
                     source = excluded.source, last_source = excluded.last_source,
                     last_measured_unix_s = excluded.last_measured_unix_s,
                     host_name = excluded.host_name, host_addr = excluded.host_addr",
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
                    s.source.as_str(),
                    s.last_source.as_str(),
                    s.last_measured_unix_s,
                    s.measured_by.name,
                    s.measured_by.addr,
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
                    e.rtt_bucket,
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
                    e.rtt_bucket,
                    HISTORY_PER_PATH as i64
                ],
            )
            .map_err(&err)?;
        }
        tx.commit().map_err(&err)?;
        self.note_invalid(&bad);
        Ok(plan.outcome)
    }

    /// Every path, ordered by peer, direction and RTT bucket.
    pub fn entries(&mut self) -> Result<Vec<StoredEntry>, StoreError> {
        let (mut rows, bad) =
            Self::select(&self.conn, "1", &[]).map_err(self.err("listing the paths"))?;
        self.note_invalid(&bad);
        crate::types::sort_entries(&mut rows);
        Ok(rows)
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
             FROM measurements WHERE peer IN ({marks}) ORDER BY id LIMIT {MAX_ROWS_READ}"
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

    /// Insert entries as they are (an import): where a path is already stored, the newer
    /// wins. Returns how many were new or newer.
    pub fn import(&mut self, entries: &[StoredEntry]) -> Result<usize, StoreError> {
        let err = self.err("importing paths");
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&err)?;
        let mut n = 0;
        for s in entries {
            let e = &s.entry;
            n += tx
                .execute(
                    "INSERT INTO paths (peer, direction, rtt_bucket, rate_bps, full_pipe,
                         min_rtt_us, first_seen_unix_s, updated_unix_s, samples, source,
                         last_source, last_measured_unix_s, host_name, host_addr)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
                     ON CONFLICT (peer, direction, rtt_bucket) DO UPDATE SET
                         rate_bps = excluded.rate_bps, full_pipe = excluded.full_pipe,
                         min_rtt_us = excluded.min_rtt_us,
                         first_seen_unix_s = excluded.first_seen_unix_s,
                         updated_unix_s = excluded.updated_unix_s, samples = excluded.samples,
                         source = excluded.source, last_source = excluded.last_source,
                         last_measured_unix_s = excluded.last_measured_unix_s,
                         host_name = excluded.host_name, host_addr = excluded.host_addr
                     WHERE excluded.updated_unix_s > paths.updated_unix_s",
                    params![
                        e.peer,
                        direction_name(e.direction),
                        e.rtt_bucket,
                        to_sql_int(e.rate_bps),
                        e.full_pipe,
                        to_sql_int(e.min_rtt_us),
                        e.first_seen_unix_s,
                        e.updated_unix_s,
                        e.samples.max(1),
                        s.source.as_str(),
                        s.last_source.as_str(),
                        s.last_measured_unix_s,
                        s.measured_by.name,
                        s.measured_by.addr,
                    ],
                )
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

    #[test]
    fn rows_with_impossible_values_are_ignored_reported_and_dropped() {
        let d = std::env::temp_dir().join(format!("tcptune-sqlite-invalid-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("temp dir");
        let mut s = SqliteStore::open(&d.join("paths.sqlite")).expect("open");
        let m = |at: f64| Measurement {
            rate: Rate::mbit(500),
            min_rtt: Duration::from_millis(100),
            full_pipe: true,
            at_unix_s: at,
        };
        let policy = PathDbPolicy::default();
        s.record(
            "10.0.0.2",
            Direction::Send,
            &m(0.0),
            &Source::Probe,
            &policy,
            None,
        )
        .expect("record");
        // Something else writes a row our CHECKs allow but the core's rules cannot use.
        s.conn
            .execute(
                "INSERT INTO paths (peer, direction, rtt_bucket, rate_bps, full_pipe, min_rtt_us,
                     first_seen_unix_s, updated_unix_s, samples, source, last_source,
                     last_measured_unix_s)
                 VALUES ('10.9.9.9', 'send', 99999999999, 5, 1, 1, 0.0, 0.0, 1, 'x', 'x', 0.0)",
                [],
            )
            .expect("insert");
        assert_eq!(s.entries().expect("list").len(), 1);
        let w = s.take_warnings();
        assert!(
            matches!(&w[..], [Warning::InvalidRows { count: 1, .. }]),
            "{w:?}"
        );
        s.record(
            "10.0.0.2",
            Direction::Send,
            &m(1.0),
            &Source::Probe,
            &policy,
            None,
        )
        .expect("record");
        let n: i64 = s
            .conn
            .query_row("SELECT count(*) FROM paths", [], |r| r.get(0))
            .expect("count");
        assert_eq!(n, 1, "the impossible row is dropped at the next change");
        let _ = std::fs::remove_dir_all(&d);
    }
}
