//! `tcptune paths` as a user runs it: a database imported from the old JSON file, listed,
//! shown, exported and forgotten; and databases that real transfers (several `tcptune send`
//! processes at once) recorded into.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;
use tcptune_core::pathdb::{Direction, Measurement, PathDb, PathDbPolicy};
use tcptune_core::Rate;

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("tcptune-paths-{tag}-{}", std::process::id()));
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

fn paths(db: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("paths")
        .args(args)
        .arg("--path-db")
        .arg(db)
        .output()
        .expect("run tcptune paths")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", text(o), err(o)))
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The old JSON database with two paths, updated an hour ago.
fn write_json_db(path: &Path) {
    let mut db = PathDb::new();
    let p = PathDbPolicy::default();
    let at = now() - 3600.0;
    let m = |mbit: u64, ms: u64, full: bool| Measurement {
        rate: Rate::mbit(mbit),
        min_rtt: Duration::from_millis(ms),
        full_pipe: full,
        at_unix_s: at,
    };
    db.record("10.0.0.2", Direction::Send, &m(950, 100, true), &p);
    db.record("10.0.0.3", Direction::Receive, &m(40, 25, false), &p);
    std::fs::write(path, serde_json::to_string(&db).expect("json")).expect("write");
}

#[test]
fn a_database_imported_from_json_is_listed_shown_exported_and_forgotten() {
    let d = TempDir::new("import");
    write_json_db(&d.0.join("paths.json"));
    let db = d.0.join("paths.sqlite");

    let o = paths(&db, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(err(&o).contains("imported 2 path(s)"), "{}", err(&o));
    assert!(d.0.join("paths.json.imported").exists());
    let t = text(&o);
    for want in [
        "10.0.0.2",
        "950 Mbit/s",
        "full pipe",
        "78-110 ms",
        "10.0.0.3",
        "receive",
        "40 Mbit/s",
        "lower bound",
        "60 min",
        "imported",
    ] {
        assert!(t.contains(want), "no '{want}' in:\n{t}");
    }

    let v = json(&paths(&db, &["--json"]));
    assert_eq!(v["schema_version"], 1);
    let list = v["paths"].as_array().expect("paths");
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["peer"], "10.0.0.2");
    assert_eq!(list[0]["rate_bps"], 950_000_000u64);
    assert_eq!(list[0]["full_pipe"], true);
    assert_eq!(list[0]["fresh"], true);
    assert_eq!(list[1]["direction"], "receive");

    let v = json(&paths(&db, &["show", "10.0.0.3", "--json"]));
    assert_eq!(v["addresses"], serde_json::json!(["10.0.0.3"]));
    assert_eq!(v["paths"].as_array().map(Vec::len), Some(1));

    let o = paths(&db, &["export"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let lines: Vec<Value> = text(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|l| l["schema_version"] == 1));
    assert_eq!(lines[1]["peer"], "10.0.0.3");

    // Unknown hosts: status 1 and one line saying so.
    for args in [&["show", "10.9.9.9"][..], &["forget", "10.9.9.9"][..]] {
        let o = paths(&db, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert_eq!(err(&o).lines().count(), 1, "{}", err(&o));
        assert!(
            err(&o).contains("nothing is recorded for 10.9.9.9"),
            "{}",
            err(&o)
        );
    }

    let o = paths(&db, &["forget", "10.0.0.2"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        text(&o).contains("Forgot 1 path(s) to 10.0.0.2"),
        "{}",
        text(&o)
    );
    assert_eq!(paths(&db, &["forget", "10.0.0.2"]).status.code(), Some(1));
    let v = json(&paths(&db, &["forget", "--all", "--json"]));
    assert_eq!(v["forgotten"], 1);
    assert!(text(&paths(&db, &[])).contains("No paths recorded"));
    // Usage: a host or --all, not both.
    assert_eq!(paths(&db, &["forget"]).status.code(), Some(2));
    assert_eq!(paths(&db, &["forget", "x", "--all"]).status.code(), Some(2));
}

#[test]
fn no_database_lists_nothing_and_creates_nothing() {
    let d = TempDir::new("none");
    let db = d.0.join("sub").join("paths.sqlite");
    let o = paths(&db, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(text(&o).contains("No paths recorded"));
    assert_eq!(
        json(&paths(&db, &["--json"]))["paths"],
        serde_json::json!([])
    );
    assert_eq!(paths(&db, &["show", "127.0.0.1"]).status.code(), Some(1));
    assert!(!d.0.join("sub").exists());
    // A file that is not a database is an error, and left alone.
    let other = d.0.join("notes.txt");
    std::fs::write(&other, "hello").expect("write");
    let o = paths(&other, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("not touching it"), "{}", err(&o));
    assert_eq!(std::fs::read_to_string(&other).expect("read"), "hello");
}

/// A `tcptune serve` on 127.0.0.1 with an ephemeral port, killed on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start() -> Server {
        let mut child = Command::new(BIN)
            .args(["serve", "--bind", "127.0.0.1", "--port", "0"])
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
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn concurrent_send_processes_all_record_with_their_sources() {
    let d = TempDir::new("sends");
    let db = d.0.join("paths.sqlite");
    let server = Server::start();
    let sends: Vec<Child> = (0..4)
        .map(|_| {
            Command::new(BIN)
                .args(["send", "127.0.0.1", "--port", &server.port.to_string()])
                // `probe` measures the path whatever its RTT (`auto` measures nothing below
                // 5 ms, so on loopback it may record nothing at all).
                .args(["-n", "16", "--tune", "probe", "--json", "--no-progress"])
                .arg("--path-db")
                .arg(&db)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start tcptune send")
        })
        .collect();
    let mut recorded = Vec::new();
    for s in sends {
        let o = s.wait_with_output().expect("send ends");
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        let v = json(&o);
        let r = &v["start"]["tcptune"]["measurement"]["path_db"];
        assert_eq!(
            r["warnings"],
            serde_json::json!([]),
            "no warnings expected: {r}"
        );
        for what in r["recorded"].as_array().expect("recorded") {
            recorded.push(what.as_str().expect("a source").to_string());
        }
    }
    assert!(!recorded.is_empty());
    let v = json(&paths(&db, &["show", "127.0.0.1", "--json"]));
    // Four sends to one peer make one entry per RTT bucket: on a busy host loopback's RTT
    // spans two buckets (16-152 us was seen in one CI run), so count samples over entries.
    let entries = v["paths"].as_array().expect("paths");
    assert!(!entries.is_empty() && entries.len() <= 4, "{v}");
    assert!(
        entries.iter().all(|e| e["peer"] == "127.0.0.1"),
        "one peer: {v}"
    );
    let samples: u64 = entries.iter().filter_map(|e| e["samples"].as_u64()).sum();
    assert_eq!(
        samples,
        recorded.len() as u64,
        "every recorded measurement was merged: {v}"
    );
    let mut sources: Vec<String> = v["measurements"]
        .as_array()
        .expect("measurements")
        .iter()
        .map(|m| m["source"].as_str().expect("source").to_string())
        .collect();
    sources.sort();
    recorded.sort();
    assert_eq!(sources, recorded);
    assert!(entries
        .iter()
        .all(|e| ["probe", "transfer"].contains(&e["source"].as_str().unwrap_or(""))));
    let t = text(&paths(&db, &["show", "localhost"]));
    assert!(
        t.contains("127.0.0.1") && t.contains("Recent measurements"),
        "{t}"
    );
}
