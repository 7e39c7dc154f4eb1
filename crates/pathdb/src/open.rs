//! Opening the database: sniffing what is at the path, connecting (WAL, busy timeout,
//! foreign keys, `quick_check`), migrating the schema, moving a damaged file aside, and
//! importing the old JSON database once.

use crate::error::{is_busy, is_corruption, OpenError, Warning};
use crate::legacy::{self, FileKind};
use crate::location::Location;
use crate::lock::BUSY_TIMEOUT;
use crate::lock::{FileLock, LockError};
use crate::schema::{self, MigrateError, SCHEMA_VERSION};
use crate::sqlite::SqliteStore;
use crate::types::{direction_name, Source};
use rusqlite::{params, Connection, Transaction, TransactionBehavior};
use std::path::{Path, PathBuf};
use tcptune_core::pathdb::PathEntry;

/// Why [`connect`] failed: the file is damaged (it may be moved aside), or something else.
enum Connect {
    Damaged(String),
    Failed(OpenError),
}

fn classify(db: &Path, what: &'static str, e: rusqlite::Error) -> Connect {
    if is_corruption(&e) {
        Connect::Damaged(e.to_string())
    } else if is_busy(&e) {
        Connect::Failed(OpenError::Busy {
            path: db.to_path_buf(),
            what,
        })
    } else {
        Connect::Failed(OpenError::Sqlite {
            path: db.to_path_buf(),
            what,
            source: e,
        })
    }
}

fn io_error(path: &Path, what: &'static str) -> impl FnOnce(std::io::Error) -> OpenError {
    let path = path.to_path_buf();
    move |source| OpenError::Io { path, what, source }
}

fn lock_error(path: &Path, e: LockError) -> OpenError {
    match e {
        LockError::Io(what, source) => OpenError::Io {
            path: path.to_path_buf(),
            what,
            source,
        },
        LockError::TimedOut => OpenError::Busy {
            path: path.to_path_buf(),
            what: "waiting for its lock file",
        },
    }
}

impl SqliteStore {
    /// Open the database at `path` (see [`Location::resolve`] for `.json` names), creating
    /// it, migrating it, importing the old JSON database once, and moving a damaged file
    /// aside: see the crate documentation.
    pub fn open(path: &Path) -> Result<SqliteStore, OpenError> {
        match open_at(path, true)? {
            Some(s) => Ok(s),
            None => Err(OpenError::Io {
                path: path.to_path_buf(),
                what: "creating it",
                source: std::io::ErrorKind::NotFound.into(),
            }),
        }
    }

    /// Like [`SqliteStore::open`], but `None` when there is no database (nor an old JSON one)
    /// at `path`, instead of creating one: for commands that only read.
    pub fn open_existing(path: &Path) -> Result<Option<SqliteStore>, OpenError> {
        open_at(path, false)
    }
}

/// Open (and with `create`, create) the database at `given`; `None` when `create` is false
/// and there is neither a database nor an old JSON file.
fn open_at(given: &Path, create: bool) -> Result<Option<SqliteStore>, OpenError> {
    let loc = Location::resolve(given);
    let db = loc.database.clone();
    let mut warnings = Vec::new();
    let kind = legacy::sniff(&db).map_err(io_error(&db, "reading it"))?;
    match kind {
        FileKind::Json => warnings.extend(convert_in_place(&db)?),
        FileKind::Other => {
            return Err(OpenError::NotADatabase {
                path: db,
                reason: "its first bytes are neither SQLite's header nor JSON".into(),
            })
        }
        FileKind::Missing | FileKind::Empty | FileKind::Sqlite => {}
    }
    if !create && kind == FileKind::Missing && !loc.legacy_json.exists() {
        return Ok(None);
    }
    if let Some(dir) = db.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io_error(&db, "creating its folder"))?;
    }
    let conn = match connect(&db) {
        Ok(c) => c,
        Err(Connect::Failed(e)) => return Err(e),
        Err(Connect::Damaged(_)) => {
            let (c, w) = recover(&db)?;
            warnings.extend(w);
            c
        }
    };
    let mut store = SqliteStore::new(conn, loc, warnings);
    import_legacy(&mut store)?;
    Ok(Some(store))
}

/// Connect and bring the schema up to date, retrying for up to [`BUSY_TIMEOUT`] while other
/// processes hold locks: SQLite answers "busy" at once, without waiting, to a connection
/// that switches a new database to WAL while another one reads it (a deadlock otherwise), so
/// processes that open a new database together need this loop, not only the busy timeout.
fn connect(db: &Path) -> Result<Connection, Connect> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    let mut pause = std::time::Duration::from_millis(2);
    loop {
        match connect_once(db) {
            Err(Connect::Failed(OpenError::Busy { .. }))
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

fn connect_once(db: &Path) -> Result<Connection, Connect> {
    let mut conn = Connection::open(db).map_err(|e| classify(db, "opening it", e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| classify(db, "setting its busy timeout", e))?;
    // WAL: readers never wait for the writer. (On a file system without shared memory
    // SQLite keeps its rollback journal: slower, still correct.) The mode is stored in the
    // file: only the first connection to a new database switches it.
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .map_err(|e| classify(db, "reading its journal mode", e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
            .map_err(|e| classify(db, "switching it to WAL mode", e))?;
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(|e| classify(db, "setting synchronous=NORMAL", e))?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(|e| classify(db, "turning foreign keys on", e))?;
    let check: String = conn
        .query_row("PRAGMA quick_check(1)", [], |r| r.get(0))
        .map_err(|e| classify(db, "checking it", e))?;
    if check != "ok" {
        return Err(Connect::Damaged(format!("quick_check: {check}")));
    }
    match schema::migrate(&mut conn) {
        Ok(_) => Ok(conn),
        Err(MigrateError::Newer(found)) => Err(Connect::Failed(OpenError::NewerSchema {
            path: db.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        })),
        Err(MigrateError::Sql(what, e)) => Err(classify(db, what, e)),
    }
}

/// Move a damaged database aside (under the lock file, so that two processes finding it
/// damaged do not each move the other's new one) and start a new one.
fn recover(db: &Path) -> Result<(Connection, Vec<Warning>), OpenError> {
    let _lock =
        FileLock::acquire(&Location::sibling(db, ".lock")).map_err(|e| lock_error(db, e))?;
    // Another process may have done it while we waited.
    let reason = match connect(db) {
        Ok(c) => return Ok((c, Vec::new())),
        Err(Connect::Failed(e)) => return Err(e),
        Err(Connect::Damaged(reason)) => reason,
    };
    // Only ever move a file that is a SQLite database.
    if legacy::sniff(db).map_err(io_error(db, "reading it"))? != FileKind::Sqlite {
        return Err(OpenError::NotADatabase {
            path: db.to_path_buf(),
            reason: format!("SQLite says: {reason}"),
        });
    }
    let moved_to = Location::sibling(db, ".corrupt");
    std::fs::rename(db, &moved_to).map_err(io_error(db, "moving the damaged file aside"))?;
    // Its journal belongs to the damaged file.
    let wal = Location::sibling(db, "-wal");
    if wal.exists() {
        let _ = std::fs::rename(&wal, Location::sibling(&moved_to, "-wal"));
    }
    let _ = std::fs::remove_file(Location::sibling(db, "-shm"));
    let conn = match connect(db) {
        Ok(c) => c,
        Err(Connect::Failed(e)) => return Err(e),
        Err(Connect::Damaged(r)) => {
            return Err(OpenError::NotADatabase {
                path: db.to_path_buf(),
                reason: format!("a new database there is damaged at once: {r}"),
            })
        }
    };
    Ok((
        conn,
        vec![Warning::Quarantined {
            path: db.to_path_buf(),
            moved_to,
            reason,
        }],
    ))
}

/// The old JSON database sits at the database's own path (the path given was a JSON file):
/// build the SQLite database beside it, then swap it in (a hard link keeps the JSON as
/// `….imported`, a rename replaces it atomically).
fn convert_in_place(db: &Path) -> Result<Vec<Warning>, OpenError> {
    let _lock =
        FileLock::acquire(&Location::sibling(db, ".lock")).map_err(|e| lock_error(db, e))?;
    if legacy::sniff(db).map_err(io_error(db, "reading it"))? != FileKind::Json {
        return Ok(Vec::new()); // converted by another process meanwhile
    }
    let old = legacy::read(db).map_err(|reason| OpenError::NotADatabase {
        path: db.to_path_buf(),
        reason: format!("JSON, but not a tcptune path database: {reason}"),
    })?;
    let tmp = Location::sibling(db, &format!(".tmp.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let built = (|| -> Result<(), (&'static str, rusqlite::Error)> {
        let mut c = Connection::open(&tmp).map_err(|e| ("creating it", e))?;
        schema::migrate(&mut c).map_err(|e| match e {
            MigrateError::Sql(what, e) => (what, e),
            MigrateError::Newer(_) => ("migrating a new file", rusqlite::Error::InvalidQuery),
        })?;
        let tx = c.transaction().map_err(|e| ("starting the import", e))?;
        insert_imported(&tx, &old.entries).map_err(|e| ("importing the JSON entries", e))?;
        tx.commit().map_err(|e| ("committing the import", e))
    })();
    if let Err((what, source)) = built {
        let _ = std::fs::remove_file(&tmp);
        return Err(OpenError::Sqlite {
            path: tmp,
            what,
            source,
        });
    }
    let imported = Location::sibling(db, ".imported");
    let _ = std::fs::remove_file(&imported);
    if std::fs::hard_link(db, &imported).is_err() {
        std::fs::copy(db, &imported).map_err(io_error(db, "keeping a copy of the JSON file"))?;
    }
    std::fs::rename(&tmp, db).map_err(io_error(db, "replacing the JSON file"))?;
    Ok(vec![Warning::Imported {
        from: db.to_path_buf(),
        renamed_to: imported,
        entries: old.entries.len(),
    }])
}

/// Import the old JSON database beside the database, once: it is renamed before the import
/// commits, so a process waiting for the write lock no longer finds it.
fn import_legacy(store: &mut SqliteStore) -> Result<(), OpenError> {
    let from: PathBuf = store.location().legacy_json.clone();
    match legacy::sniff(&from).map_err(io_error(&from, "reading the old JSON database"))? {
        FileKind::Missing => return Ok(()),
        FileKind::Json => {}
        FileKind::Empty | FileKind::Sqlite | FileKind::Other => {
            store.warn(Warning::NotImported {
                from,
                reason: "it is not JSON".into(),
            });
            return Ok(());
        }
    }
    let db = store.location().database.clone();
    let sql = |what: &'static str| {
        let db = db.clone();
        move |e: rusqlite::Error| match classify(&db, what, e) {
            Connect::Failed(e) => e,
            Connect::Damaged(reason) => OpenError::NotADatabase { path: db, reason },
        }
    };
    let (tx, warning) = {
        let tx = store
            .connection()
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql("starting the import of the old JSON database"))?;
        if !from.exists() {
            return Ok(()); // imported by another process while we waited
        }
        let old = match legacy::read(&from) {
            Ok(old) => old,
            Err(reason) => {
                drop(tx);
                store.warn(Warning::NotImported { from, reason });
                return Ok(());
            }
        };
        insert_imported(&tx, &old.entries).map_err(sql("importing the old JSON database"))?;
        tx.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('legacy_json_imported', ?1)",
            params![from.display().to_string()],
        )
        .map_err(sql("noting the import"))?;
        let renamed_to = Location::sibling(&from, ".imported");
        let warning = match std::fs::rename(&from, &renamed_to) {
            Ok(()) => Warning::Imported {
                from: from.clone(),
                renamed_to: renamed_to.clone(),
                entries: old.entries.len(),
            },
            Err(e) => Warning::ImportedNotRenamed {
                from: from.clone(),
                entries: old.entries.len(),
                error: e.to_string(),
            },
        };
        (tx, warning)
    };
    if let Err(e) = tx.commit() {
        if let Warning::Imported {
            from, renamed_to, ..
        } = &warning
        {
            let _ = std::fs::rename(renamed_to, from);
        }
        return Err(sql("committing the import of the old JSON database")(e));
    }
    store.warn(warning);
    Ok(())
}

/// Insert the old database's entries; where a path is already stored, the newer wins.
fn insert_imported(tx: &Transaction<'_>, entries: &[PathEntry]) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare(
        "INSERT INTO paths (peer, direction, rtt_bucket, rate_bps, full_pipe, min_rtt_us,
             first_seen_unix_s, updated_unix_s, samples, source, last_source,
             last_measured_unix_s)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?8)
         ON CONFLICT (peer, direction, rtt_bucket) DO UPDATE SET
             rate_bps = excluded.rate_bps, full_pipe = excluded.full_pipe,
             min_rtt_us = excluded.min_rtt_us, first_seen_unix_s = excluded.first_seen_unix_s,
             updated_unix_s = excluded.updated_unix_s, samples = excluded.samples,
             source = excluded.source, last_source = excluded.last_source,
             last_measured_unix_s = excluded.last_measured_unix_s
         WHERE excluded.updated_unix_s > paths.updated_unix_s",
    )?;
    for e in entries {
        stmt.execute(params![
            e.peer,
            direction_name(e.direction),
            e.rtt_bucket,
            crate::sqlite::to_sql_int(e.rate_bps),
            e.full_pipe,
            crate::sqlite::to_sql_int(e.min_rtt_us),
            e.first_seen_unix_s,
            e.updated_unix_s,
            e.samples.max(1),
            Source::Imported.as_str(),
        ])?;
    }
    Ok(())
}
