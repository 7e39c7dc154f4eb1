//! The path database on PostgreSQL as a user runs it: `paths --path-db postgres://...`
//! naming every host's measurements, `paths import`/`export` between a host's SQLite file
//! and the fleet's database, `send` and `serve` recording into it, and an unreachable
//! database costing a transfer one line on stderr and nothing else. Each test starts a
//! throw-away cluster (`tcptune_testkit::pg`; skipped outside CI without PostgreSQL).

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;
use tcptune_core::pathdb::{Direction, Measurement, PathDbPolicy};
use tcptune_core::Rate;
use tcptune_pathdb::{Host, PathStore, Source, SqliteStore};
use tcptune_testkit::pg::{self, PgCluster};

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("tcptune-pathspg-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        TempDir(d)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `tcptune serve` on 127.0.0.1 with an ephemeral port, killed on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        let mut child = Command::new(BIN)
            .args(["serve", "--bind", "127.0.0.1", "--port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tcptune serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().expect("a first line").expect("readable");
        let port = first
            .rsplit(':')
            .next()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no port in '{first}'"));
        std::thread::spawn(move || for _ in lines {});
        Server { child, port }
    }

    fn send(&self, extra: &[&str]) -> Output {
        Command::new(BIN)
            .args(["send", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["-n", "16", "-i", "0"])
            .args(extra)
            .output()
            .expect("run tcptune send")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tcptune(args: &[&str], env_db: Option<&str>) -> Output {
    let mut c = Command::new(BIN);
    c.args(args).env_remove("TCPTUNE_PATH_DB");
    if let Some(db) = env_db {
        c.env("TCPTUNE_PATH_DB", db);
    }
    c.output().expect("run tcptune")
}

fn ok(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn json(o: &Output) -> Value {
    serde_json::from_str(&ok(o)).expect("JSON")
}

fn m(mbit: u64, at: f64) -> Measurement {
    Measurement {
        rate: Rate::mbit(mbit),
        min_rtt: Duration::from_millis(40),
        full_pipe: true,
        at_unix_s: at,
    }
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn host(name: &str, addr: &str) -> Host {
    Host {
        name: name.into(),
        addr: addr.into(),
    }
}

fn cluster(test: &str) -> Option<(PgCluster, String)> {
    if !pg::require(test, false) {
        return None;
    }
    let c = PgCluster::start();
    c.create_database("fleet");
    let url = c.url("fleet");
    Some((c, url))
}

#[test]
fn paths_lists_every_hosts_entries_and_imports_and_exports_them() {
    let Some((_c, url)) = cluster("paths_lists_every_hosts_entries_and_imports_and_exports_them")
    else {
        return;
    };
    let d = TempDir::new("fleet");
    // A new, empty database: the schema is made on first use, and there is nothing yet.
    let v = json(&tcptune(&["paths", "--json", "--path-db", &url], None));
    assert_eq!(v["paths"].as_array().map(Vec::len), Some(0), "{v}");
    assert!(!v["file"].as_str().unwrap_or("").is_empty());

    // dtnA's own SQLite file, imported into the fleet's database.
    let file = d.0.join("dtnA.sqlite");
    {
        let mut s = SqliteStore::open(&file).expect("sqlite");
        s.set_host(host("dtnA", "10.0.0.1"));
        let p = PathDbPolicy::default();
        s.record(
            "10.0.0.2",
            Direction::Send,
            &m(900, now()),
            &Source::Probe,
            &p,
            None,
        )
        .expect("record");
        s.record(
            "10.0.0.3",
            Direction::Send,
            &m(100, now()),
            &Source::Probe,
            &p,
            None,
        )
        .expect("record");
    }
    let file_arg = file.to_string_lossy().to_string();
    let text = ok(&tcptune(
        &["paths", "--path-db", &url, "import", &file_arg],
        None,
    ));
    assert!(text.contains("Imported 2 of 2"), "{text}");
    // dtnB measured the same peer itself.
    {
        let mut s = PathStore::open(Path::new(&url)).expect("postgres");
        s.set_host(host("dtnB", "10.0.1.1"));
        s.record(
            "10.0.0.2",
            Direction::Send,
            &m(800, now()),
            &Source::Server,
            &PathDbPolicy::default(),
        )
        .expect("record");
    }
    // The list names each entry's measuring host; $TCPTUNE_PATH_DB works as --path-db.
    let text = ok(&tcptune(&["paths"], Some(&url)));
    assert!(text.contains("MEASURED BY"), "{text}");
    assert!(text.contains("dtnA (10.0.0.1)"), "{text}");
    assert!(text.contains("dtnB (10.0.1.1)"), "{text}");
    let v = json(&tcptune(&["paths", "--json"], Some(&url)));
    let hosts: Vec<(String, String)> = v["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .map(|p| {
            (
                p["peer"].as_str().unwrap_or("").to_string(),
                p["measured_by"]["name"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        hosts,
        [
            ("10.0.0.2".to_string(), "dtnA".to_string()),
            ("10.0.0.2".to_string(), "dtnB".to_string()),
            ("10.0.0.3".to_string(), "dtnA".to_string()),
        ]
    );

    // Exported to a file and imported into a new SQLite file: the same three, hosts kept.
    let exported = d.0.join("fleet.jsonl");
    let exported_arg = exported.to_string_lossy().to_string();
    ok(&tcptune(
        &["paths", "--path-db", &url, "export", &exported_arg],
        None,
    ));
    assert_eq!(
        std::fs::read_to_string(&exported)
            .expect("export")
            .lines()
            .count(),
        3
    );
    let copy = d.0.join("copy.sqlite").to_string_lossy().to_string();
    let v = json(&tcptune(
        &[
            "paths",
            "--path-db",
            &copy,
            "import",
            &exported_arg,
            "--json",
        ],
        None,
    ));
    // One host's file holds one entry per path: dtnB's newer entry replaced dtnA's.
    assert_eq!(
        (v["read"].as_u64(), v["imported"].as_u64()),
        (Some(3), Some(3)),
        "{v}"
    );
    let v = json(&tcptune(&["paths", "--json", "--path-db", &copy], None));
    let kept: Vec<&str> = v["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .map(|p| p["measured_by"]["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kept, ["dtnB", "dtnA"], "{v}");

    // Forgetting a peer removes every host's entries of it, and says how many.
    let text = ok(&tcptune(
        &["paths", "--path-db", &url, "forget", "10.0.0.2"],
        None,
    ));
    assert!(text.contains("Forgot 2 path(s) to 10.0.0.2"), "{text}");
    let v = json(&tcptune(&["paths", "--json", "--path-db", &url], None));
    assert_eq!(v["paths"].as_array().map(Vec::len), Some(1), "{v}");
}

#[test]
fn send_and_serve_record_into_the_fleets_database() {
    let Some((_c, url)) = cluster("send_and_serve_record_into_the_fleets_database") else {
        return;
    };
    let server = Server::start(&["--path-db", &url]);
    let o = server.send(&["--tune", "probe", "--path-db", &url]);
    ok(&o);
    // The client recorded its probe, measured by this host from 127.0.0.1; the server
    // records its measurement of the client's path too (handed to its database thread as
    // the session ends).
    let recorded = tcptune_testkit::wait_for(Duration::from_secs(20), || {
        let v = json(&tcptune(&["paths", "--json", "--path-db", &url], None));
        let paths = v["paths"].as_array().cloned().unwrap_or_default();
        let by = |dir: &str| {
            paths.iter().any(|p| {
                p["peer"] == "127.0.0.1"
                    && p["direction"] == dir
                    && p["measured_by"]["addr"] == "127.0.0.1"
            })
        };
        by("send") && by("receive")
    });
    assert!(
        recorded,
        "{}",
        ok(&tcptune(&["paths", "--path-db", &url], None))
    );
}

#[test]
fn an_unreachable_database_costs_a_transfer_one_line_and_nothing_else() {
    let server = Server::start(&["--no-path-db"]);
    // Nothing listens on this port (bound, then closed): refused at once. A password in
    // the URL is never shown.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port")
        .port();
    let url =
        format!("postgres://tt:hunter2@127.0.0.1:{port}/fleet?sslmode=disable&connect_timeout=1");
    let o = server.send(&["--tune", "probe", "--path-db", &url]);
    let stdout = ok(&o);
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("path database"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(!stderr.contains("hunter2") && !stdout.contains("hunter2"));
    assert!(
        stdout.contains("probed for"),
        "measured as a new path: {stdout}"
    );
    // A malformed URL likewise.
    let o = server.send(&["--path-db", "postgres://x@y/z?sslmode=maybe"]);
    ok(&o);
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(
        stderr.lines().filter(|l| l.contains("sslmode")).count(),
        1,
        "{stderr}"
    );
    // `paths` itself cannot go on without it: it fails, and says why.
    let o = tcptune(&["paths", "--path-db", &url], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("hunter2"));
}
