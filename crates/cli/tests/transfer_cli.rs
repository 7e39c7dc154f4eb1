//! `tcptune serve` and `tcptune send` as a user runs them: exit codes, JSON, the cap,
//! integrity failures and the shared secret.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

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
        // Keep draining the log so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server { child, port }
    }

    /// The path database the tests' transfers use (never the user's own).
    fn db(&self) -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "tcptune-cli-test-{}-{}.sqlite",
            std::process::id(),
            self.port
        ))
    }

    fn send(&self, extra: &[&str]) -> Output {
        Command::new(BIN)
            .args(["send", "127.0.0.1", "--port", &self.port.to_string()])
            .env("TCPTUNE_PATH_DB", self.db())
            .args(extra)
            .output()
            .expect("run tcptune send")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let db = self.db();
        for suffix in ["sqlite", "sqlite-wal", "sqlite-shm"] {
            let _ = std::fs::remove_file(db.with_extension(suffix));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

#[test]
fn send_json_report_has_the_receiver_measured_totals() {
    let s = Server::start(&[]);
    let o = s.send(&["--tune", "kernel", "-P", "2", "-n", "16", "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = json(&o);
    assert_eq!(v["schema_version"], 2);
    assert_eq!(v["end"]["sum_received"]["bytes"], 16u64 << 20);
    assert_eq!(v["end"]["sum_received"]["sender"], false);
    assert!(
        v["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0
    );
    assert_eq!(v["end"]["tcptune"]["complete"], true);
    assert_eq!(v["end"]["tcptune"]["streams_used"], 2);
    assert_eq!(v["start"]["tcptune"]["tune"], "kernel");
}

#[test]
fn send_human_summary_shows_streams_buffers_and_verdict() {
    let s = Server::start(&[]);
    let o = s.send(&["--tune", "fixed:256k", "-n", "8", "-R"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("receiver (") && text.contains("[SUM]"),
        "{text}"
    );
    assert!(
        text.contains("SndBuf peak") && text.contains("512 KiB"),
        "{text}"
    );
    assert!(
        text.contains("complete: 8 messages, every byte verified"),
        "{text}"
    );
}

#[test]
fn max_time_caps_the_workload_and_still_exits_zero() {
    let s = Server::start(&[]);
    let o = s.send(&[
        "--tune",
        "none",
        "-n",
        "100000",
        "--max-time",
        "0.5",
        "--json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = json(&o);
    assert_eq!(v["end"]["tcptune"]["capped"], true);
    assert_eq!(v["end"]["tcptune"]["complete"], false);
    assert!(v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0) > 0);
}

#[test]
fn corrupted_data_exits_with_the_integrity_status() {
    let s = Server::start(&[]);
    let o = s.send(&["--tune", "kernel", "-n", "8", "--inject-corruption", "3"]);
    assert_eq!(
        o.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("integrity failure"));
}

#[test]
fn unreachable_server_and_bad_options_have_their_own_statuses() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let o = Command::new(BIN)
        .args(["send", &format!("127.0.0.1:{port}"), "--tune", "kernel"])
        .output()
        .expect("run");
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = Command::new(BIN)
        .args(["send", "127.0.0.1", "--tune", "bogus"])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown tuning mode"));
    let o = Command::new(BIN)
        .args(["send", "127.0.0.1", "-P", "0", "--tune", "kernel"])
        .output()
        .expect("run");
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn secret_file_guards_the_server() {
    let dir = std::env::temp_dir().join(format!("tcptune-cli-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let good = dir.join("good");
    let bad = dir.join("bad");
    // 128 bits or more each (shorter ones are refused before any connection).
    for (path, text) in [
        (&good, "6b".repeat(32)),
        (&bad, "a guess of the secret, long enough".into()),
    ] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, format!("{text}\n")).expect("write");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let s = Server::start(&["--secret-file", good.to_str().expect("utf-8")]);
    let o = s.send(&["--tune", "kernel", "-n", "2"]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = s.send(&[
        "--tune",
        "kernel",
        "-n",
        "2",
        "--secret-file",
        bad.to_str().expect("utf-8"),
    ]);
    assert_eq!(o.status.code(), Some(3));
    // After a wrong secret this address waits a second before its next try.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let o = s.send(&[
        "--tune",
        "kernel",
        "-n",
        "2",
        "--secret-file",
        good.to_str().expect("utf-8"),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn path_database_spares_the_probe_on_a_known_path() {
    let s = Server::start(&[]);
    let db = s.db();
    let db_arg = db.to_string_lossy().to_string();
    // On loopback (a path under 5 ms) auto leaves the rate to kernel autotuning and
    // measures nothing; `--tune probe` (NLANR's way) measures out of band and records.
    let short = s.send(&["-n", "4", "-i", "0", "--path-db", &db_arg, "--json"]);
    let v = json(&short);
    assert_eq!(
        v["start"]["tcptune"]["measurement"]["source"], "none",
        "{v}"
    );
    let probe = || {
        s.send(&[
            "-n",
            "16",
            "-i",
            "0",
            "--tune",
            "probe",
            "--path-db",
            &db_arg,
        ])
    };
    let first = probe();
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let text = String::from_utf8_lossy(&first.stdout);
    assert!(text.contains("probed for"), "{text}");
    assert!(text.contains("measuring the path"), "{text}");
    // The entry is found by the RTT's bucket, and on loopback every RTT under 100 us shares
    // one; a busy host has made a control connection's RTT 4.1 ms (another bucket: probed
    // again, and recorded there). A known path, asked again up to three times, is found.
    let mut text = String::new();
    for _ in 0..3 {
        text = String::from_utf8_lossy(&probe().stdout).into_owned();
        if text.contains("from the path database") {
            break;
        }
    }
    assert!(text.contains("from the path database"), "{text}");
    // --no-path-db measures again and leaves the file alone.
    let before = std::fs::read(&db).expect("database written");
    let third = s.send(&["-n", "16", "--tune", "probe", "--no-path-db", "--json"]);
    let v = json(&third);
    assert_eq!(
        v["start"]["tcptune"]["measurement"]["source"], "probe",
        "{v}"
    );
    assert!(
        v["start"]["tcptune"]["measurement"]["path_db"].is_null(),
        "{v}"
    );
    assert_eq!(std::fs::read(&db).expect("still there"), before);
    // --no-probe without an entry goes without a rate.
    let fourth = s.send(&["-n", "8", "--no-path-db", "--no-probe", "--json"]);
    let v = json(&fourth);
    assert_eq!(
        v["start"]["tcptune"]["measurement"]["source"], "none",
        "{v}"
    );
    // Contradictory options are a usage error.
    let o = s.send(&["--no-path-db", "--path-db", &db_arg]);
    assert_eq!(o.status.code(), Some(2));
}
