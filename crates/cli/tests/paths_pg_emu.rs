//! The fleet's path database across an emulated long path (root): an entry another host of
//! the fleet measured lets `send` start a known path with careful resume, `serve` records
//! what it measured of its client into the same database, under its own address, and what
//! `serve` recorded of a client starts another host's `send` to it as a known path.
//!
//! The database is a throw-away PostgreSQL cluster on a Unix socket (reachable from both
//! network namespaces: a socket in the file system is not a network address).

use std::process::Command;
use std::time::Duration;
use tcptune_core::pathdb::rtt_bucket;
use tcptune_testkit::pg::{self, PgCluster};
use tcptune_testkit::Need;

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A throw-away cluster with an empty `fleet` database and its URL, or `None` when `test`
/// cannot run here (root, TUN and PostgreSQL's server; outside CI it skips and says why).
fn fleet_database(test: &str) -> Option<(PgCluster, String)> {
    if !tcptune_testkit::require(test, &[Need::Root, Need::Tun]) || !pg::require(test, false) {
        return None;
    }
    let c = PgCluster::start();
    c.create_database("fleet");
    let url = c.url("fleet");
    Some((c, url))
}

#[test]
fn another_hosts_entry_starts_a_known_path_with_careful_resume() {
    let Some((_c, url)) =
        fleet_database("another_hosts_entry_starts_a_known_path_with_careful_resume")
    else {
        return;
    };
    // A long path: the client's fetch of the database (started beside the handshake) has
    // the handshake's round trip and a quarter of the RTT to arrive.
    let rtt = Duration::from_millis(200);
    let dir = std::env::temp_dir().join(format!("tcptune-pgemu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let line = dir.join("other-host.jsonl");
    // What dtn-other measured of the path to side B an hour ago: a full pipe of 100 Mbit/s.
    let at = now() - 3600.0;
    let entry = format!(
        r#"{{"schema_version":1,"peer":"%s","direction":"send","rtt_bucket":{},"min_rtt_us":{},"rate_bps":100000000,"full_pipe":true,"samples":3,"first_seen_unix_s":{at},"updated_unix_s":{at},"source":"probe","last_source":"probe","last_measured_unix_s":{at},"measured_by":{{"name":"dtn-other","addr":"192.0.2.7"}}}}"#,
        rtt_bucket(rtt),
        rtt.as_micros(),
    );
    let script = format!(
        "printf '{entry}\\n' \"$TCPTUNE_PEER\" > '{line}' && \
         '{BIN}' paths --path-db '{url}' import '{line}' >/dev/null && \
         '{BIN}' send \"$TCPTUNE_PEER\" --tune auto -n 32 --path-db '{url}' --json --no-progress",
        line = line.display()
    );
    let out = Command::new(BIN)
        .args(["emu", "run", "--name", &tcptune_emu::unique_name("pg")])
        .args(["--rtt", "200ms", "--rate", "100mbit"])
        .args([
            "--server",
            &format!("'{BIN}' serve --path-db '{url}'"),
            "--server-log",
            "/dev/null",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .output()
        .expect("run tcptune emu run");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "emu run failed ({}): {}\n{}",
        out.status,
        text(&out.stderr),
        text(&out.stdout)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)));
    let t = &v["start"]["tcptune"];
    assert_eq!(t["measurement"]["source"], "path_db", "{t}");
    assert_eq!(t["resume"]["used"], true, "{t}");
    assert_eq!(v["end"]["tcptune"]["complete"], true);

    // The server recorded its client's path, measured from its own address; the client
    // recorded what it learned under its own.
    let o = Command::new(BIN)
        .args(["paths", "--json", "--path-db", &url])
        .output()
        .expect("tcptune paths");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let paths: serde_json::Value = serde_json::from_slice(&o.stdout).expect("paths JSON");
    let by: Vec<String> = paths["paths"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|p| format!("{} {}", p["direction"], p["measured_by"]["name"]))
        .collect();
    assert!(
        by.iter().any(|b| b.contains("dtn-other")),
        "the other host's entry stays: {by:?}"
    );
    assert!(
        paths["paths"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["direction"] == "receive")),
        "the server's record of its client: {paths}"
    );
}

/// Issue 24's chain as the fleet sees it: `serve` on one host measures a client's download
/// and records it in the shared database (within a second of the session's end: the test
/// waits at most 10 s, the time is printed), and a `send` from another host of the same site
/// to that client starts a known path from it with careful resume. Side A holds both hosts
/// of the site (a `serve` and, later, a `send`), side B the client (which pulls) and its own
/// server.
#[test]
fn a_path_serve_recorded_starts_another_hosts_send_as_a_known_path() {
    use tcptune_emu::{unique_name, PathConfig, Side, Topology, TopologyConfig};
    use tcptune_testkit::ChildGuard;
    let test = "a_path_serve_recorded_starts_another_hosts_send_as_a_known_path";
    let Some((_c, url)) = fleet_database(test) else {
        return;
    };
    let topo = Topology::up(&TopologyConfig::new(
        unique_name("pgf"),
        PathConfig {
            delay: Duration::from_millis(50),
            rate: Some(tcptune_core::Rate::mbit(100)),
            ..PathConfig::default()
        },
    ))
    .unwrap_or_else(|e| panic!("up: {e}"));
    let (a, b) = (
        topo.addr(Side::A).to_string(),
        topo.addr(Side::B).to_string(),
    );
    let serve = |side: Side, db: &[&str]| {
        ChildGuard::spawn(
            topo.command(side, BIN)
                .arg("serve")
                .args(db)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null()),
        )
    };
    let _site = serve(Side::A, &["--path-db", &url]);
    let _client_server = serve(Side::B, &["--no-path-db"]);
    // A server is up once its port accepts a connection from the other side.
    let ready = |side: Side, peer: &str| {
        let addr: std::net::SocketAddr = format!("{peer}:5310").parse().expect("address");
        tcptune_testkit::wait_for(Duration::from_secs(10), || {
            topo.run_in(side, || {
                std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
            })
        })
    };
    assert!(ready(Side::B, &a) && ready(Side::A, &b), "servers up");
    let entries = || -> Vec<serde_json::Value> {
        let o = Command::new(BIN)
            .args(["paths", "--json", "--path-db", &url])
            .output()
            .expect("tcptune paths");
        serde_json::from_slice::<serde_json::Value>(&o.stdout)
            .ok()
            .and_then(|v| v["paths"].as_array().cloned())
            .unwrap_or_default()
    };
    let recorded = |es: &[serde_json::Value]| {
        es.iter()
            .any(|p| p["peer"] == b.as_str() && p["direction"] == "send" && p["full_pipe"] == true)
    };
    assert!(!recorded(&entries()));

    // The client in side B downloads from the site's server, which sends and records.
    let pull = topo
        .command(Side::B, BIN)
        .args([
            "send",
            &a,
            "--reverse",
            "-n",
            "64",
            "--no-path-db",
            "--no-progress",
        ])
        .output()
        .expect("pull");
    assert!(pull.status.success(), "{}", text(&pull.stderr));
    let ended = std::time::Instant::now();
    let seen = tcptune_testkit::wait_for(Duration::from_secs(10), || recorded(&entries()));
    eprintln!(
        "{test}: the server's record was in the database {:.2} s after the client's command ended",
        ended.elapsed().as_secs_f64()
    );
    assert!(
        seen,
        "the server recorded its client's path: {:?}",
        entries()
    );

    // Another host of the site sends to that client: a known path, with careful resume.
    let out = topo
        .command(Side::A, BIN)
        .args([
            "send",
            &b,
            "-n",
            "32",
            "--path-db",
            &url,
            "--json",
            "--no-progress",
        ])
        .output()
        .expect("send");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)));
    let t = &v["start"]["tcptune"];
    assert_eq!(t["measurement"]["source"], "path_db", "{t}");
    assert_eq!(t["resume"]["used"], true, "{t}");
}
