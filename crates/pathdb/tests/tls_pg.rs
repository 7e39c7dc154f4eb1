//! The PostgreSQL store over TCP with TLS, as libpq's `sslmode`s say: `require` encrypts
//! without checking the certificate, `verify-full` checks it against `sslrootcert` and the
//! host's name, and refuses a server its authority did not sign.

use std::path::Path;
use std::time::Duration;
use tcptune_core::pathdb::{Direction, Measurement, PathDbPolicy};
use tcptune_core::Rate;
use tcptune_pathdb::{PathStore, Source};
use tcptune_testkit::pg::{self, PgCluster};

fn round_trip(url: &str, peer: &str) {
    let mut s = PathStore::open(Path::new(url)).unwrap_or_else(|e| panic!("{url}: {e}"));
    let m = Measurement {
        rate: Rate::mbit(400),
        min_rtt: Duration::from_millis(30),
        full_pipe: true,
        at_unix_s: 1.7e9,
    };
    let policy = PathDbPolicy::default();
    s.record(peer, Direction::Send, &m, &Source::Probe, &policy)
        .expect("record");
    let k = s
        .lookup(peer, Direction::Send, m.min_rtt, 1.7e9 + 1.0, &policy)
        .expect("lookup");
    assert_eq!(k.map(|k| k.rate), Some(Rate::mbit(400)));
}

#[test]
fn tls_connections_check_the_certificate_as_sslmode_says() {
    if !pg::require(
        "tls_connections_check_the_certificate_as_sslmode_says",
        true,
    ) {
        return;
    }
    let c = PgCluster::start_with_tls();
    c.create_database("paths");
    round_trip(&c.tcp_url("127.0.0.1", "paths", "require"), "10.0.0.1");
    round_trip(&c.tcp_url("localhost", "paths", "verify-full"), "10.0.0.2");
    round_trip(&c.tcp_url("127.0.0.1", "paths", "verify-ca"), "10.0.0.3");
    let rows = c.psql(
        "paths",
        "SELECT count(*) FROM tcptune_paths WHERE peer LIKE '10.0.0.%'",
    );
    assert_eq!(rows.trim(), "3");
    // The cluster takes TCP clients over TLS only: the connections above were encrypted,
    // and a plain one is refused.
    let plain = PathStore::open(Path::new(&c.tcp_url("127.0.0.1", "paths", "disable")));
    assert!(plain.is_err(), "a plain TCP connection was accepted");
    // An authority that did not sign the server's certificate: refused.
    let wrong = format!(
        "postgres://{}@localhost:{}/paths?sslmode=verify-full&sslrootcert={}",
        pg::USER,
        c.port(),
        c.server_cert().display()
    );
    let e = PathStore::open(Path::new(&wrong)).expect_err("an unknown authority");
    let shown = e.to_string();
    assert!(shown.contains("connecting"), "{shown}");
    // verify-full without an authority file at all: a clear error, before connecting.
    let missing = format!(
        "postgres://{}@localhost:{}/paths?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt",
        pg::USER,
        c.port()
    );
    let e = PathStore::open(Path::new(&missing)).expect_err("no authority file");
    assert!(e.to_string().contains("sslrootcert"), "{e}");
}
