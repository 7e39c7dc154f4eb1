//! The PostgreSQL schema, created on first use of an empty database and versioned by a row
//! of `tcptune_meta`. Creating it runs in one transaction under an advisory lock, so that
//! many hosts starting together create it once.

use postgres::Client;

/// The schema version this build writes (the row `schema_version` of `tcptune_meta`).
pub const PG_SCHEMA_VERSION: u32 = 1;

/// The advisory lock key taken while creating or migrating the schema ("tcptune" in ASCII).
const SCHEMA_LOCK: i64 = 0x0074_6370_7475_6e65;

/// Version 1: every host's paths (keyed by the measuring host too), their recent
/// measurements, and facts about the database.
const V1: &str = "
CREATE TABLE IF NOT EXISTS tcptune_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tcptune_paths (
    host_name TEXT NOT NULL,
    host_addr TEXT NOT NULL,
    peer TEXT NOT NULL CHECK (peer <> ''),
    direction TEXT NOT NULL CHECK (direction IN ('send', 'receive')),
    rtt_bucket INTEGER NOT NULL,
    rate_bps BIGINT NOT NULL CHECK (rate_bps > 0),
    full_pipe BOOLEAN NOT NULL,
    min_rtt_us BIGINT NOT NULL CHECK (min_rtt_us >= 0),
    first_seen_unix_s DOUBLE PRECISION NOT NULL,
    updated_unix_s DOUBLE PRECISION NOT NULL,
    samples INTEGER NOT NULL CHECK (samples >= 1),
    source TEXT NOT NULL,
    last_source TEXT NOT NULL,
    last_measured_unix_s DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (peer, direction, rtt_bucket, host_name, host_addr)
);
CREATE INDEX IF NOT EXISTS tcptune_paths_by_host ON tcptune_paths (host_name, host_addr);
CREATE TABLE IF NOT EXISTS tcptune_measurements (
    id BIGSERIAL PRIMARY KEY,
    host_name TEXT NOT NULL,
    host_addr TEXT NOT NULL,
    peer TEXT NOT NULL,
    direction TEXT NOT NULL,
    rtt_bucket INTEGER NOT NULL,
    at_unix_s DOUBLE PRECISION NOT NULL,
    source TEXT NOT NULL,
    rate_bps BIGINT NOT NULL CHECK (rate_bps > 0),
    full_pipe BOOLEAN NOT NULL,
    min_rtt_us BIGINT NOT NULL CHECK (min_rtt_us >= 0),
    FOREIGN KEY (peer, direction, rtt_bucket, host_name, host_addr)
        REFERENCES tcptune_paths (peer, direction, rtt_bucket, host_name, host_addr)
        ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS tcptune_measurements_by_path
    ON tcptune_measurements (peer, direction, rtt_bucket, host_name, host_addr, id);
";

/// Every migration, oldest first: `MIGRATIONS[i]` takes version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[V1];

/// What [`migrate`] found.
#[derive(Debug)]
pub(crate) enum MigrateError {
    /// A newer tcptune's schema (or a version row that is not a number).
    Newer(u32),
    /// The server refused a step.
    Sql(&'static str, postgres::Error),
}

/// The schema version, read with one simple query outside any transaction; `None` when it
/// cannot be read that way (no table yet, no row, an error): [`migrate`]'s locked path
/// decides then.
fn current_version(client: &mut Client) -> Option<u32> {
    let msgs = client
        .simple_query("SELECT value FROM tcptune_meta WHERE key = 'schema_version'")
        .ok()?;
    let v = msgs.iter().find_map(|m| match m {
        postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
        _ => None,
    })?;
    Some(parse_version(&v))
}

/// A version that is not a small number is not ours: newer than anything.
fn parse_version(v: &str) -> u32 {
    v.get(..10).unwrap_or(v).parse::<u32>().unwrap_or(u32::MAX)
}

fn version(tx: &mut postgres::Transaction<'_>) -> Result<u32, MigrateError> {
    let exists: bool = tx
        .query_one("SELECT to_regclass('tcptune_meta') IS NOT NULL", &[])
        .and_then(|r| r.try_get(0))
        .map_err(|e| MigrateError::Sql("looking for its schema", e))?;
    if !exists {
        return Ok(0);
    }
    let row = tx
        .query_opt(
            "SELECT value FROM tcptune_meta WHERE key = 'schema_version'",
            &[],
        )
        .map_err(|e| MigrateError::Sql("reading its schema version", e))?;
    let Some(row) = row else { return Ok(0) };
    let v: String = row
        .try_get(0)
        .map_err(|e| MigrateError::Sql("reading its schema version", e))?;
    Ok(parse_version(&v))
}

/// Bring the database to [`PG_SCHEMA_VERSION`] in one transaction; returns the version it
/// had.
pub(crate) fn migrate(client: &mut Client) -> Result<u32, MigrateError> {
    // The common case first, in one round trip and without the lock: a database already at
    // this version. (The locked transaction below costs six to eight round trips more,
    // which a client with its database 10 ms away paid before every lookup: 2026-11-29,
    // the lookup's answer came 0.26 RTT of a 100 ms path after the handshake.) Anything
    // else (no table yet, an older or newer version, an error) takes the locked path.
    if let Some(found) = current_version(client) {
        if found == PG_SCHEMA_VERSION {
            return Ok(found);
        }
    }
    let mut tx = client
        .transaction()
        .map_err(|e| MigrateError::Sql("starting the schema check", e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .map_err(|e| MigrateError::Sql("waiting for the schema lock", e))?;
    let found = version(&mut tx)?;
    if found > PG_SCHEMA_VERSION {
        return Err(MigrateError::Newer(found));
    }
    if found == PG_SCHEMA_VERSION {
        return Ok(found);
    }
    for sql in MIGRATIONS.iter().skip(found as usize) {
        tx.batch_execute(sql)
            .map_err(|e| MigrateError::Sql("creating its schema", e))?;
    }
    tx.execute(
        "INSERT INTO tcptune_meta (key, value) VALUES ('schema_version', $1)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        &[&PG_SCHEMA_VERSION.to_string()],
    )
    .map_err(|e| MigrateError::Sql("setting its schema version", e))?;
    tx.commit()
        .map_err(|e| MigrateError::Sql("committing its schema", e))?;
    Ok(found)
}
