//! The PostgreSQL store facing a database that something else wrote: a newer schema is left
//! alone, and rows with impossible or oversized values are ignored, reported and dropped at
//! the next change (every value read back is checked against its budget first).

use std::path::Path;
use std::time::Duration;
use tcptune_core::pathdb::{Direction, Measurement, PathDbPolicy};
use tcptune_core::Rate;
use tcptune_pathdb::{Host, OpenError, PathStore, Source, Warning, MAX_PEER_BYTES};
use tcptune_testkit::pg::{self, PgCluster};

fn m(at: f64) -> Measurement {
    Measurement {
        rate: Rate::mbit(500),
        min_rtt: Duration::from_millis(100),
        full_pipe: true,
        at_unix_s: at,
    }
}

#[test]
fn rows_beyond_their_budgets_are_ignored_reported_and_dropped() {
    if !pg::require(
        "rows_beyond_their_budgets_are_ignored_reported_and_dropped",
        false,
    ) {
        return;
    }
    let c = PgCluster::start();
    c.create_database("paths");
    let url = c.url("paths");
    let mut s = PathStore::open(Path::new(&url)).expect("open");
    s.set_host(Host {
        name: "dtn1".into(),
        addr: "10.0.0.1".into(),
    });
    let policy = PathDbPolicy::default();
    s.record(
        "10.0.0.2",
        Direction::Send,
        &m(0.0),
        &Source::Probe,
        &policy,
    )
    .expect("record");
    // Another program writes rows the schema allows but the rules cannot use: a peer
    // longer than any address, a host name beyond DNS's limit, an absurd RTT bucket.
    let long_peer = "p".repeat(MAX_PEER_BYTES + 1);
    let long_host = "h".repeat(300);
    for (host, peer, bucket) in [
        ("dtn1", long_peer.as_str(), 33),
        (long_host.as_str(), "10.0.0.2", 33),
        ("dtn1", "10.0.0.9", 2_000_000_000),
    ] {
        c.psql(
            "paths",
            &format!(
                "INSERT INTO tcptune_paths VALUES ('{host}', '10.0.0.1', '{peer}', 'send', \
                 {bucket}, 5, true, 1, 0, 0, 1, 'x', 'x', 0)"
            ),
        );
    }
    let e = s.entries().expect("list");
    assert_eq!(e.len(), 1, "{e:?}");
    let w = s.take_warnings();
    assert!(
        matches!(&w[..], [Warning::InvalidRows { count: 3, .. }]),
        "{w:?}"
    );
    // The next change of dtn1 drops dtn1's impossible rows (another host's are its own).
    s.record(
        "10.0.0.2",
        Direction::Send,
        &m(1.0),
        &Source::Probe,
        &policy,
    )
    .expect("record");
    let left = c.psql("paths", "SELECT count(*) FROM tcptune_paths");
    assert_eq!(
        left.trim(),
        "2",
        "dtn1's good row and the other host's bad one"
    );
}

#[test]
fn a_newer_schema_is_refused_and_left_alone() {
    if !pg::require("a_newer_schema_is_refused_and_left_alone", false) {
        return;
    }
    let c = PgCluster::start();
    c.create_database("paths");
    let url = c.url("paths");
    drop(PathStore::open(Path::new(&url)).expect("create the schema"));
    c.psql(
        "paths",
        "UPDATE tcptune_meta SET value = '99' WHERE key = 'schema_version'",
    );
    let e = PathStore::open(Path::new(&url)).expect_err("newer");
    assert!(
        matches!(
            e,
            OpenError::Postgres(tcptune_pathdb::pg::PgOpenError::NewerSchema { found: 99, .. })
        ),
        "{e}"
    );
    let v = c.psql(
        "paths",
        "SELECT value FROM tcptune_meta WHERE key = 'schema_version'",
    );
    assert_eq!(v.trim(), "99");
}
