//! Several processes recording into one new database file at once: none of their
//! measurements may be lost (no lost update of a shared path's sample count, no lost entry).
//!
//! The writers are this test binary itself, run again with `--exact child_writer` and the
//! job in environment variables; they start together when a "go" file appears.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tcptune_core::pathdb::{Direction, Measurement, PathDbPolicy};
use tcptune_core::Rate;
use tcptune_pathdb::{PathStore, Source, HISTORY_PER_PATH};

const PROCESSES: u32 = 6;
const EACH: u32 = 25;
const SHARED_PEER: &str = "10.0.0.1";

fn measurement(mbit: u64, at: f64) -> Measurement {
    Measurement {
        rate: Rate::mbit(mbit),
        min_rtt: Duration::from_millis(20),
        full_pipe: true,
        at_unix_s: at,
    }
}

/// The child's job: wait for the go file, open the database, record `EACH` measurements of
/// the shared path and `EACH` of paths of its own, each change in its own transaction.
#[test]
fn child_writer() {
    let (Some(db), Some(index), Some(go)) = (
        std::env::var_os("TCPTUNE_TEST_DB"),
        std::env::var("TCPTUNE_TEST_WRITER").ok(),
        std::env::var_os("TCPTUNE_TEST_GO"),
    ) else {
        return; // run as a normal test: nothing to do
    };
    let index: u32 = index.parse().expect("writer index");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !Path::new(&go).exists() {
        assert!(Instant::now() < deadline, "never told to go");
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut store = PathStore::open(Path::new(&db)).expect("open in a child");
    let policy = PathDbPolicy::default();
    for k in 0..EACH {
        let at = 1000.0 + f64::from(index * EACH + k);
        store
            .record(
                SHARED_PEER,
                Direction::Send,
                &measurement(900, at),
                &Source::Probe,
                &policy,
            )
            .expect("record the shared path");
        store
            .record(
                &format!("10.1.{index}.{k}"),
                Direction::Receive,
                &measurement(100 + u64::from(k), at),
                &Source::Transfer,
                &policy,
            )
            .expect("record an own path");
    }
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn concurrent_writer_processes_lose_no_measurement() {
    if std::env::var_os("TCPTUNE_TEST_DB").is_some() {
        return; // inside a child
    }
    let dir = TempDir(
        std::env::temp_dir().join(format!("tcptune-pathdb-concurrent-{}", std::process::id())),
    );
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let db = dir.0.join("paths.sqlite");
    let go = dir.0.join("go");
    let exe = std::env::current_exe().expect("test binary");
    let mut children: Vec<_> = (0..PROCESSES)
        .map(|i| {
            Command::new(&exe)
                .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
                .env("TCPTUNE_TEST_DB", &db)
                .env("TCPTUNE_TEST_WRITER", i.to_string())
                .env("TCPTUNE_TEST_GO", &go)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn a writer")
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    std::fs::write(&go, b"go").expect("go");
    let mut failures = Vec::new();
    for c in children.drain(..) {
        let out = c.wait_with_output().expect("writer ends");
        if !out.status.success() {
            failures.push(String::from_utf8_lossy(&out.stderr).to_string());
        }
    }
    let took = t0.elapsed();
    assert!(failures.is_empty(), "writers failed: {failures:#?}");

    let mut store = PathStore::open(&db).expect("open");
    let entries = store.entries().expect("list");
    let shared: Vec<_> = entries
        .iter()
        .filter(|e| e.entry.peer == SHARED_PEER)
        .collect();
    assert_eq!(shared.len(), 1, "one shared path");
    assert_eq!(
        shared[0].entry.samples,
        PROCESSES * EACH,
        "every read-merge-write of the shared path counted"
    );
    let own = entries.len() - 1;
    assert_eq!(own, (PROCESSES * EACH) as usize, "every own path recorded");
    let history = store.history(&[SHARED_PEER.to_string()]).expect("history");
    assert_eq!(history.len(), HISTORY_PER_PATH);
    eprintln!(
        "{PROCESSES} processes x {} changes: {:.2} s ({:.1} ms per change, all processes)",
        2 * EACH,
        took.as_secs_f64(),
        took.as_secs_f64() * 1e3 / f64::from(2 * PROCESSES * EACH)
    );
}
