//! The schema and its migrations, versioned with `PRAGMA user_version`.
//!
//! `MIGRATIONS[i]` takes a database from version `i` to `i + 1`; version 0 is a new, empty
//! file. [`migrate`] applies the missing ones in one `BEGIN IMMEDIATE` transaction, so two
//! processes opening a new database at once migrate it once. Never edit a migration that
//! shipped: add one.

use rusqlite::{Connection, TransactionBehavior};

/// Version 1: the paths (the core's entry plus sources), their recent measurements, and a
/// key-value table for facts about the database itself.
const V1: &str = "
CREATE TABLE paths (
    peer TEXT NOT NULL CHECK (peer <> ''),
    direction TEXT NOT NULL CHECK (direction IN ('send', 'receive')),
    rtt_bucket INTEGER NOT NULL,
    rate_bps INTEGER NOT NULL CHECK (rate_bps > 0),
    full_pipe INTEGER NOT NULL CHECK (full_pipe IN (0, 1)),
    min_rtt_us INTEGER NOT NULL CHECK (min_rtt_us >= 0),
    first_seen_unix_s REAL NOT NULL,
    updated_unix_s REAL NOT NULL,
    samples INTEGER NOT NULL CHECK (samples >= 1),
    source TEXT NOT NULL,
    last_source TEXT NOT NULL,
    last_measured_unix_s REAL NOT NULL,
    PRIMARY KEY (peer, direction, rtt_bucket)
) STRICT;
CREATE INDEX paths_by_update ON paths (updated_unix_s);
CREATE TABLE measurements (
    id INTEGER PRIMARY KEY,
    peer TEXT NOT NULL,
    direction TEXT NOT NULL,
    rtt_bucket INTEGER NOT NULL,
    at_unix_s REAL NOT NULL,
    source TEXT NOT NULL,
    rate_bps INTEGER NOT NULL CHECK (rate_bps > 0),
    full_pipe INTEGER NOT NULL CHECK (full_pipe IN (0, 1)),
    min_rtt_us INTEGER NOT NULL CHECK (min_rtt_us >= 0),
    FOREIGN KEY (peer, direction, rtt_bucket)
        REFERENCES paths (peer, direction, rtt_bucket) ON DELETE CASCADE
) STRICT;
CREATE INDEX measurements_by_path ON measurements (peer, direction, rtt_bucket, id);
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
";

/// Version 2: each path names the host that measured it last (hostname and the
/// connection's local address; empty for entries written before).
const V2: &str = "
ALTER TABLE paths ADD COLUMN host_name TEXT NOT NULL DEFAULT '';
ALTER TABLE paths ADD COLUMN host_addr TEXT NOT NULL DEFAULT '';
";

/// Every migration, oldest first.
const MIGRATIONS: &[&str] = &[V1, V2];

/// The schema version this build writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// What [`migrate`] found.
#[derive(Debug)]
pub(crate) enum MigrateError {
    /// A newer tcptune's database.
    Newer(u32),
    /// SQLite failed; `what` says at which step.
    Sql(&'static str, rusqlite::Error),
}

fn user_version(conn: &Connection) -> Result<u32, MigrateError> {
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| MigrateError::Sql("reading its schema version", e))?;
    // A negative or huge user_version is not ours: treat it as newer than anything.
    Ok(u32::try_from(v).unwrap_or(u32::MAX))
}

/// Bring the database to [`SCHEMA_VERSION`]; returns the version it had.
pub(crate) fn migrate(conn: &mut Connection) -> Result<u32, MigrateError> {
    let found = user_version(conn)?;
    if found == SCHEMA_VERSION {
        return Ok(found);
    }
    if found > SCHEMA_VERSION {
        return Err(MigrateError::Newer(found));
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| MigrateError::Sql("starting the schema migration", e))?;
    // Another process may have migrated it while we waited for the lock.
    let found = user_version(&tx)?;
    if found > SCHEMA_VERSION {
        return Err(MigrateError::Newer(found));
    }
    for sql in MIGRATIONS.iter().skip(found as usize) {
        tx.execute_batch(sql)
            .map_err(|e| MigrateError::Sql("migrating its schema", e))?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(|e| MigrateError::Sql("setting its schema version", e))?;
    tx.commit()
        .map_err(|e| MigrateError::Sql("committing the schema migration", e))?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_database_is_migrated_once_and_a_newer_one_is_refused() {
        let mut c = Connection::open_in_memory().expect("sqlite");
        assert_eq!(migrate(&mut c).expect("migrated"), 0);
        assert_eq!(user_version(&c).expect("version"), SCHEMA_VERSION);
        assert_eq!(migrate(&mut c).expect("current"), SCHEMA_VERSION);
        let tables: i64 = c
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
                [],
                |r| r.get(0),
            )
            .expect("count");
        assert_eq!(tables, 3);
        c.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .expect("bump");
        assert!(matches!(migrate(&mut c), Err(MigrateError::Newer(v)) if v == SCHEMA_VERSION + 1));
    }

    #[test]
    fn the_schema_refuses_impossible_rows() {
        let mut c = Connection::open_in_memory().expect("sqlite");
        migrate(&mut c).expect("migrated");
        let bad = c.execute(
            "INSERT INTO paths (peer, direction, rtt_bucket, rate_bps, full_pipe, min_rtt_us, first_seen_unix_s, updated_unix_s, samples, source, last_source, last_measured_unix_s) VALUES ('10.0.0.2', 'sideways', 1, 100, 1, 1, 0.0, 0.0, 1, 'probe', 'probe', 0.0)",
            [],
        );
        assert!(bad.is_err());
        let bad = c.execute(
            "INSERT INTO paths (peer, direction, rtt_bucket, rate_bps, full_pipe, min_rtt_us, first_seen_unix_s, updated_unix_s, samples, source, last_source, last_measured_unix_s) VALUES ('10.0.0.2', 'send', 1, 0, 1, 1, 0.0, 0.0, 1, 'probe', 'probe', 0.0)",
            [],
        );
        assert!(bad.is_err());
        let bad = c.execute(
            "INSERT INTO paths (peer, direction, rtt_bucket, rate_bps, full_pipe, min_rtt_us, first_seen_unix_s, updated_unix_s, samples, source, last_source, last_measured_unix_s) VALUES ('10.0.0.2', 'send', 1, 'fast', 1, 1, 0.0, 0.0, 1, 'probe', 'probe', 0.0)",
            [],
        );
        assert!(
            bad.is_err(),
            "STRICT tables refuse text in an integer column"
        );
    }
}
