//! A fleet writing into one PostgreSQL database at once: 16 writer processes under four
//! host identities, through the server's Unix socket, 10,000 measurements in all. None may
//! be lost, and every merge rule must hold (the checks of the SQLite concurrency test, per
//! host).
//!
//! The writers are this test binary itself, run again with `--exact child_writer` and the
//! job in environment variables; they start together when a "go" file appears.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tcptune_core::pathdb::{Direction, Measurement, PathDbPolicy};
use tcptune_core::Rate;
use tcptune_pathdb::{Host, PathStore, Source, HISTORY_PER_PATH};
use tcptune_testkit::pg::{self, PgCluster};

const PROCESSES: u32 = 16;
const HOSTS: u32 = 4;
/// Measurements of the path every host shares, per process.
const SHARED_EACH: u32 = 600;
/// Paths of its own, one measurement each, per process.
const OWN_EACH: u32 = 25;
const SHARED_PEER: &str = "10.0.0.1";
const T0: f64 = 1.7e9;

fn host(i: u32) -> Host {
    Host {
        name: format!("dtn{}", i % HOSTS),
        addr: format!("192.0.2.{}", i % HOSTS),
    }
}

fn measurement(mbit: u64, full_pipe: bool, at: f64) -> Measurement {
    Measurement {
        rate: Rate::mbit(mbit),
        min_rtt: Duration::from_millis(20),
        full_pipe,
        at_unix_s: at,
    }
}

/// The child's job: wait for the go file, connect, record the shared path (full-pipe
/// measurements of 900 Mbit/s and, every third, a lower bound of 300 that changes only the
/// sample count) and paths of its own, each change in its own transaction.
#[test]
fn child_writer() {
    let (Some(url), Some(index), Some(go)) = (
        std::env::var_os("TCPTUNE_TEST_PG"),
        std::env::var("TCPTUNE_TEST_WRITER").ok(),
        std::env::var_os("TCPTUNE_TEST_GO"),
    ) else {
        return; // run as a normal test: nothing to do
    };
    let index: u32 = index.parse().expect("writer index");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !Path::new(&go).exists() {
        assert!(Instant::now() < deadline, "never told to go");
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut store = PathStore::open(Path::new(&url)).expect("connect in a child");
    store.set_host(host(index));
    let policy = PathDbPolicy::default();
    for k in 0..SHARED_EACH {
        let at = T0 + f64::from(index * SHARED_EACH + k) / 100.0;
        let m = if k % 3 == 2 {
            measurement(300, false, at)
        } else {
            measurement(900, true, at)
        };
        store
            .record(SHARED_PEER, Direction::Send, &m, &Source::Probe, &policy)
            .expect("record the shared path");
    }
    for k in 0..OWN_EACH {
        store
            .record(
                &format!("10.1.{index}.{k}"),
                Direction::Receive,
                &measurement(100 + u64::from(k), true, T0),
                &Source::Transfer,
                &policy,
            )
            .expect("record an own path");
    }
}

struct Children(Vec<std::process::Child>);
impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn sixteen_writers_on_four_hosts_lose_no_measurement() {
    if std::env::var_os("TCPTUNE_TEST_PG").is_some() {
        return; // inside a child
    }
    if !pg::require("sixteen_writers_on_four_hosts_lose_no_measurement", false) {
        return;
    }
    assert_eq!(PROCESSES * (SHARED_EACH + OWN_EACH), 10_000);
    let cluster = PgCluster::start();
    cluster.create_database("fleet");
    let url = cluster.url("fleet");
    let go: PathBuf =
        std::env::temp_dir().join(format!("tcptune-concurrent-pg-go-{}", std::process::id()));
    let _ = std::fs::remove_file(&go);
    // The schema is created by whichever writer comes first: no one creates it beforehand.
    let exe = std::env::current_exe().expect("test binary");
    let mut children = Children(
        (0..PROCESSES)
            .map(|i| {
                Command::new(&exe)
                    .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
                    .env("TCPTUNE_TEST_PG", &url)
                    .env("TCPTUNE_TEST_WRITER", i.to_string())
                    .env("TCPTUNE_TEST_GO", &go)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn a writer")
            })
            .collect(),
    );
    std::fs::write(&go, b"go").expect("go");
    let mut failures = Vec::new();
    for c in children.0.drain(..) {
        let out = c.wait_with_output().expect("writer ends");
        if !out.status.success() {
            failures.push(String::from_utf8_lossy(&out.stderr).to_string());
        }
    }
    let _ = std::fs::remove_file(&go);
    assert!(
        failures.is_empty(),
        "writers failed: {failures:#?}\nserver log:\n{}",
        cluster.log()
    );

    let mut store = PathStore::open(Path::new(&url)).expect("connect");
    let entries = store.entries().expect("list");
    let per_host = PROCESSES / HOSTS;
    for h in 0..HOSTS {
        let mine: Vec<_> = entries
            .iter()
            .filter(|e| e.measured_by == host(h))
            .collect();
        let shared: Vec<_> = mine
            .iter()
            .filter(|e| e.entry.peer == SHARED_PEER)
            .collect();
        assert_eq!(shared.len(), 1, "one shared path per host");
        let e = &shared[0].entry;
        assert_eq!(
            e.samples,
            per_host * SHARED_EACH,
            "every read-merge-write of {}'s shared path counted",
            host(h)
        );
        // Full pipes of 900 average to 900; the lower bounds of 300 change nothing else.
        assert_eq!(e.rate_bps, Rate::mbit(900).0);
        assert!(e.full_pipe);
        assert_eq!(e.min_rtt_us, 20_000);
        assert_eq!(
            mine.len() - 1,
            (per_host * OWN_EACH) as usize,
            "every own path of {} recorded",
            host(h)
        );
        assert!(mine
            .iter()
            .filter(|e| e.entry.peer != SHARED_PEER)
            .all(|e| e.entry.samples == 1 && e.source == Source::Transfer));
    }
    assert_eq!(
        entries.len(),
        (HOSTS + PROCESSES * OWN_EACH) as usize,
        "no path of another key"
    );
    let history = store.history(&[SHARED_PEER.to_string()]).expect("history");
    assert_eq!(history.len(), HISTORY_PER_PATH * HOSTS as usize);
    let known = store
        .lookup(
            SHARED_PEER,
            Direction::Send,
            Duration::from_millis(20),
            T0 + 100.0,
            &PathDbPolicy::default(),
        )
        .expect("lookup");
    assert_eq!(known.map(|k| k.rate), Some(Rate::mbit(900)));
}
