//! What `SqliteStore::open` finds on disk: the old JSON database (beside the database, named
//! with `.json`, or at the database's own path), damaged files, files that are not ours, and
//! a database from a newer tcptune.

use std::path::{Path, PathBuf};
use std::time::Duration;
use tcptune_core::pathdb::{Direction, Measurement, PathDb, PathDbPolicy};
use tcptune_core::Rate;
use tcptune_pathdb::{OpenError, Source, SqliteStore, Warning, SCHEMA_VERSION};

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d =
            std::env::temp_dir().join(format!("tcptune-pathdb-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        TempDir(d)
    }
    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An old JSON database with two paths, as tcptune wrote it before SQLite.
fn write_json_db(path: &Path) {
    let mut db = PathDb::new();
    let p = PathDbPolicy::default();
    let m = |mbit: u64, ms: u64, full: bool| Measurement {
        rate: Rate::mbit(mbit),
        min_rtt: Duration::from_millis(ms),
        full_pipe: full,
        at_unix_s: 1000.0,
    };
    db.record("10.0.0.2", Direction::Send, &m(950, 100, true), &p);
    db.record("10.0.0.3", Direction::Receive, &m(40, 25, false), &p);
    std::fs::write(path, serde_json::to_string_pretty(&db).expect("json")).expect("write");
}

fn record_one(s: &mut SqliteStore) {
    s.record(
        "10.0.0.9",
        Direction::Send,
        &Measurement {
            rate: Rate::mbit(100),
            min_rtt: Duration::from_millis(10),
            full_pipe: true,
            at_unix_s: 2000.0,
        },
        &Source::Probe,
        &PathDbPolicy::default(),
        None,
    )
    .expect("record");
}

fn peers(s: &mut SqliteStore) -> Vec<String> {
    s.entries()
        .expect("list")
        .into_iter()
        .map(|e| e.entry.peer)
        .collect()
}

#[test]
fn the_json_database_beside_it_is_imported_once_and_renamed() {
    let d = TempDir::new("beside");
    write_json_db(&d.join("paths.json"));
    let mut s = SqliteStore::open(&d.join("paths.sqlite")).expect("open");
    let w = s.take_warnings();
    assert!(
        matches!(&w[..], [Warning::Imported { entries: 2, renamed_to, .. }]
            if renamed_to == &d.join("paths.json.imported")),
        "{w:?}"
    );
    assert!(w[0].to_string().contains("renamed it to"), "{}", w[0]);
    assert!(!d.join("paths.json").exists());
    assert!(d.join("paths.json.imported").exists());
    let e = s.entries().expect("list");
    assert_eq!(e.len(), 2);
    assert!(e.iter().all(|e| e.source == Source::Imported));
    let slow = e
        .iter()
        .find(|e| e.entry.peer == "10.0.0.3")
        .expect("entry");
    assert_eq!(
        (
            slow.entry.direction,
            slow.entry.full_pipe,
            slow.entry.rate_bps
        ),
        (Direction::Receive, false, Rate::mbit(40).0)
    );
    // Opening again imports nothing more.
    drop(s);
    let mut s = SqliteStore::open(&d.join("paths.sqlite")).expect("reopen");
    assert!(s.take_warnings().is_empty());
    assert_eq!(s.entries().expect("list").len(), 2);
}

#[test]
fn a_json_name_means_the_sqlite_file_beside_it() {
    let d = TempDir::new("jsonname");
    write_json_db(&d.join("mine.json"));
    let mut s = SqliteStore::open(&d.join("mine.json")).expect("open");
    assert_eq!(s.path(), d.join("mine.sqlite"));
    assert_eq!(s.take_warnings().len(), 1);
    assert_eq!(peers(&mut s), ["10.0.0.2", "10.0.0.3"]);
    record_one(&mut s);
    drop(s);
    // The same name finds the same database later.
    let mut s = SqliteStore::open(&d.join("mine.json")).expect("reopen");
    assert_eq!(s.entries().expect("list").len(), 3);
}

#[test]
fn json_at_the_database_path_is_converted_in_place() {
    let d = TempDir::new("inplace");
    let path = d.join("db");
    write_json_db(&path);
    let mut s = SqliteStore::open(&path).expect("open");
    let w = s.take_warnings();
    assert!(
        matches!(&w[..], [Warning::Imported { entries: 2, .. }]),
        "{w:?}"
    );
    assert_eq!(s.path(), path);
    assert_eq!(peers(&mut s), ["10.0.0.2", "10.0.0.3"]);
    assert!(d.join("db.imported").exists());
    let head = std::fs::read(&path).expect("read");
    assert!(head.starts_with(b"SQLite format 3\0"));
}

#[test]
fn a_broken_json_database_is_not_imported_and_left_alone() {
    let d = TempDir::new("badjson");
    std::fs::write(d.join("paths.json"), "{ not json").expect("write");
    let mut s = SqliteStore::open(&d.join("paths.sqlite")).expect("open");
    let w = s.take_warnings();
    assert!(matches!(&w[..], [Warning::NotImported { .. }]), "{w:?}");
    assert!(d.join("paths.json").exists());
    assert!(s.entries().expect("list").is_empty());
}

#[test]
fn a_damaged_database_is_moved_aside_and_a_new_one_started() {
    let d = TempDir::new("damaged");
    let path = d.join("paths.sqlite");
    {
        let mut s = SqliteStore::open(&path).expect("open");
        record_one(&mut s);
    }
    // Keep SQLite's header, wreck the rest (as a torn disk write might).
    let mut bytes = std::fs::read(&path).expect("read");
    for b in bytes.iter_mut().skip(16) {
        *b = 0xA5;
    }
    std::fs::write(&path, &bytes).expect("write");
    let _ = std::fs::remove_file(d.join("paths.sqlite-wal"));
    let _ = std::fs::remove_file(d.join("paths.sqlite-shm"));
    let mut s = SqliteStore::open(&path).expect("a damaged file is never fatal");
    let w = s.take_warnings();
    assert!(
        matches!(&w[..], [Warning::Quarantined { moved_to, .. }] if moved_to == &d.join("paths.sqlite.corrupt")),
        "{w:?}"
    );
    assert!(w[0].to_string().contains("started a new one"), "{}", w[0]);
    assert!(s.entries().expect("list").is_empty());
    record_one(&mut s);
    assert_eq!(s.entries().expect("list").len(), 1);
    assert_eq!(
        std::fs::read(d.join("paths.sqlite.corrupt")).expect("kept"),
        bytes
    );
}

#[test]
fn a_file_that_is_not_a_database_is_never_touched() {
    let d = TempDir::new("other");
    let path = d.join("notes.txt");
    std::fs::write(&path, "root:x:0:0:root:/root:/bin/bash\n").expect("write");
    let e = SqliteStore::open(&path).expect_err("not ours");
    assert!(matches!(e, OpenError::NotADatabase { .. }), "{e:?}");
    assert!(e.to_string().contains("not touching it"), "{e}");
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "root:x:0:0:root:/root:/bin/bash\n"
    );
    // JSON that is not a path database is not ours either.
    let json = d.join("config");
    std::fs::write(&json, "{\"hello\": 1}").expect("write");
    assert!(matches!(
        SqliteStore::open(&json),
        Err(OpenError::NotADatabase { .. })
    ));
    assert_eq!(
        std::fs::read_to_string(&json).expect("read"),
        "{\"hello\": 1}"
    );
}

#[test]
fn a_newer_schema_is_refused_and_left_alone() {
    let d = TempDir::new("newer");
    let path = d.join("paths.sqlite");
    {
        let mut s = SqliteStore::open(&path).expect("open");
        record_one(&mut s);
    }
    let c = rusqlite::Connection::open(&path).expect("sqlite");
    c.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .expect("bump");
    drop(c);
    let e = SqliteStore::open(&path).expect_err("newer");
    assert!(
        matches!(e, OpenError::NewerSchema { found, .. } if found == SCHEMA_VERSION + 1),
        "{e:?}"
    );
    assert!(e.to_string().contains("newer than this tcptune"), "{e}");
    assert!(!d.join("paths.sqlite.corrupt").exists());
}

#[test]
fn open_existing_creates_nothing() {
    let d = TempDir::new("existing");
    let path = d.join("sub").join("paths.sqlite");
    assert!(SqliteStore::open_existing(&path).expect("fine").is_none());
    assert!(!d.join("sub").exists());
    // But an old JSON database is there to import.
    std::fs::create_dir_all(d.join("sub")).expect("dir");
    write_json_db(&d.join("sub").join("paths.json"));
    let mut s = SqliteStore::open_existing(&path)
        .expect("fine")
        .expect("imported");
    assert_eq!(s.entries().expect("list").len(), 2);
}
