//! Every `--json` output, produced for real, against its JSON Schema in `docs/schema/` (the
//! schemas `docs/json.md` documents): a key that is not documented, a documented key that
//! is missing (tcptune writes `null`, never leaves a key out), or a value of the wrong type
//! fails the test. The validator below implements the part of JSON Schema the files use
//! (`type`, `properties`, `required`, `additionalProperties`, `items`, `enum`, `const`,
//! `oneOf`, `minimum`, `$ref` to `#/$defs/...`).

use serde_json::Value;
use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/schema")
}

fn schema(name: &str) -> Value {
    let path = schema_dir().join(format!("{name}.schema.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn type_ok(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_u64() || v.is_i64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => false,
    }
}

/// The errors of `v` against schema `s` (`root` resolves `$ref`), with JSON paths.
fn check(root: &Value, s: &Value, v: &Value, at: &str, errs: &mut Vec<String>) {
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r.trim_start_matches("#/$defs/");
        let target = &root["$defs"][name];
        assert!(!target.is_null(), "unknown $ref {r}");
        return check(root, target, v, at, errs);
    }
    if let Some(alts) = s.get("oneOf").and_then(Value::as_array) {
        let ok = alts.iter().filter(|a| {
            let mut e = Vec::new();
            check(root, a, v, at, &mut e);
            e.is_empty()
        });
        if ok.count() != 1 {
            errs.push(format!("{at}: matches not exactly one of oneOf ({v})"));
        }
        return;
    }
    if let Some(c) = s.get("const") {
        if c != v {
            errs.push(format!("{at}: {v} is not {c}"));
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            errs.push(format!("{at}: {v} not in {e:?}"));
        }
    }
    match s.get("type") {
        Some(Value::String(t)) if !type_ok(t, v) => {
            errs.push(format!("{at}: {v} is not of type {t}"));
            return;
        }
        Some(Value::Array(ts)) if !ts.iter().any(|t| t.as_str().is_some_and(|t| type_ok(t, v))) => {
            errs.push(format!("{at}: {v} is not of types {ts:?}"));
            return;
        }
        _ => {}
    }
    if let (Some(min), Some(x)) = (s.get("minimum").and_then(Value::as_f64), v.as_f64()) {
        if x < min {
            errs.push(format!("{at}: {x} < {min}"));
        }
    }
    if let Some(o) = v.as_object() {
        let props = s.get("properties").and_then(Value::as_object);
        for r in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let k = r.as_str().unwrap_or_default();
            if !o.contains_key(k) {
                errs.push(format!("{at}: missing key '{k}'"));
            }
        }
        for (k, x) in o {
            match props.and_then(|p| p.get(k)) {
                Some(ps) => check(root, ps, x, &format!("{at}.{k}"), errs),
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        errs.push(format!("{at}: key '{k}' is not documented"))
                    }
                    Some(extra @ Value::Object(_)) => {
                        check(root, extra, x, &format!("{at}.{k}"), errs)
                    }
                    _ => {}
                },
            }
        }
    }
    if let (Some(items), Some(a)) = (s.get("items"), v.as_array()) {
        for (i, x) in a.iter().enumerate() {
            check(root, items, x, &format!("{at}[{i}]"), errs);
        }
    }
}

fn assert_valid(name: &str, v: &Value) {
    let s = schema(name);
    let mut errs = Vec::new();
    check(&s, &s, v, "$", &mut errs);
    assert!(
        errs.is_empty(),
        "{name}: {} problem(s):\n{}\n\nin: {}",
        errs.len(),
        errs.join("\n"),
        serde_json::to_string_pretty(v).unwrap_or_default()
    );
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("TCPTUNE_PATH_DB", tmp("unused.sqlite"))
        .stdin(Stdio::null())
        .output()
        .expect("run tcptune")
}

fn doc(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tcptune-schema-{}-{name}", std::process::id()))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `tcptune serve --json` on a free port, killed on drop; its log lines are read at the end.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start() -> Server {
        Server::start_with(&[])
    }

    fn start_with(extra: &[&str]) -> Server {
        let port = free_port();
        let child = Command::new(BIN)
            .args([
                "serve",
                "-B",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "--json",
            ])
            .args(extra)
            // The server's own path database stays out of the user's home.
            .args(if extra.contains(&"--path-db") {
                &[][..]
            } else {
                &["--no-path-db"][..]
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tcptune serve");
        let mut server = Server { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !server.listens() {
            assert!(Instant::now() < deadline, "serve did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// Whether the server accepts connections: a connection that reached another socket
    /// (on loopback, a connect to a free port in the ephemeral range can connect to itself),
    /// or a server that exited (its port taken meanwhile), is not it.
    fn listens(&mut self) -> bool {
        assert!(
            self.child.try_wait().ok().flatten().is_none(),
            "serve exited before it listened on port {}",
            self.port
        );
        TcpStream::connect(("127.0.0.1", self.port))
            .is_ok_and(|c| c.local_addr().ok() != c.peer_addr().ok())
    }

    /// Whether the server is still running, not exited and unreaped (said beside a
    /// client's failure).
    fn alive(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).is_ok_and(|st| {
            st.rsplit(')')
                .next()
                .is_some_and(|r| !r.trim_start().starts_with('Z'))
        })
    }

    fn log(mut self) -> String {
        let _ = self.child.kill();
        let mut s = String::new();
        if let Some(mut out) = self.child.stdout.take() {
            let _ = out.read_to_string(&mut s);
        }
        let _ = self.child.wait();
        s
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn send_reports_and_serve_log_lines_match_their_schemas() {
    let s = Server::start();
    let port = s.port.to_string();
    let db = tmp("paths.sqlite");
    let db_arg = db.display().to_string();
    for extra in [
        &["-n", "8", "-P", "2", "--samples"][..],
        &["-t", "300ms", "-R", "-i", "100ms"],
        &["-n", "4", "--tune", "fixed:16m"],
        &["-n", "4", "--tune", "none"],
    ] {
        let mut args = vec![
            "send",
            "127.0.0.1",
            "-p",
            &port,
            "--json",
            "--path-db",
            &db_arg,
        ];
        args.extend_from_slice(extra);
        let o = run(&args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{extra:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v = doc(&o);
        assert_valid("send", &v);
        assert!(
            v.get("error").is_none(),
            "no error key on success: iperf3's consumers"
        );
        assert!(
            v["start"]["tcptune"]["queue"].is_null(),
            "one client at a time never waits: {}",
            v["start"]["tcptune"]
        );
    }
    // Receiver intervals: what only the sender knows is null, not 0.
    let o = run(&[
        "send",
        "127.0.0.1",
        "-p",
        &port,
        "--json",
        "--no-path-db",
        "-t",
        "200ms",
        "-R",
    ]);
    let v = doc(&o);
    let iv = &v["intervals"][0]["streams"][0];
    assert_eq!(iv["sender"], false);
    assert!(
        iv["retransmits"].is_null() && iv["snd_cwnd"].is_null(),
        "{iv}"
    );
    assert!((v["start"]["tcptune"]["duration_s"].as_f64().unwrap_or(0.0) - 0.2).abs() < 1e-9);

    // The path database the sends filled, through every paths output.
    let d = db_arg.as_str();
    assert_valid("paths", &doc(&run(&["paths", "--json", "--path-db", d])));
    assert_valid(
        "paths-show",
        &doc(&run(&[
            "paths",
            "show",
            "127.0.0.1",
            "--json",
            "--path-db",
            d,
        ])),
    );
    let export = run(&["paths", "export", "--path-db", d]);
    let text = String::from_utf8_lossy(&export.stdout);
    assert!(text.lines().count() > 0, "export wrote nothing");
    for line in text.lines() {
        assert_valid(
            "paths-export",
            &serde_json::from_str(line).expect("a JSON line"),
        );
    }
    // What export wrote, imported back (nothing is newer: all were there).
    let exported = format!("{d}.export.jsonl");
    std::fs::write(&exported, export.stdout.as_slice()).expect("write the export");
    assert_valid(
        "paths-import",
        &doc(&run(&[
            "paths",
            "import",
            &exported,
            "--json",
            "--path-db",
            d,
        ])),
    );
    let _ = std::fs::remove_file(&exported);
    assert_valid(
        "paths-forget",
        &doc(&run(&[
            "paths",
            "forget",
            "--all",
            "--json",
            "--path-db",
            d,
        ])),
    );
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{d}{suffix}"));
    }

    let log = s.log();
    assert!(log.lines().count() >= 10, "{log}");
    for line in log.lines() {
        assert_valid(
            "serve-log",
            &serde_json::from_str(line).expect("a JSON line"),
        );
    }
    // The first line is the start record: the posture and the limits.
    let start: Value = serde_json::from_str(log.lines().next().unwrap_or_default()).expect("JSON");
    assert_eq!(start["event"], "start", "{start}");
    assert_eq!(start["listen"][0], format!("127.0.0.1:{port}"), "{start}");
    assert_eq!(start["loopback_only"], true, "{start}");
    assert_eq!(start["auth"], "none", "{start}");
    assert_eq!(start["share"], "none", "{start}");
    assert_eq!(start["open"], false, "{start}");
    assert_eq!(start["limits"]["max_sessions"], 16, "{start}");
}

#[test]
fn a_client_that_waited_for_a_slot_says_so_and_the_server_logs_the_queue() {
    // One slot: of two sends at once, one waits in the queue until the other ends.
    let s = Server::start_with(&["--max-sessions", "1"]);
    let port = s.port.to_string();
    let sends: Vec<Child> = (0..2)
        .map(|_| {
            Command::new(BIN)
                .args(["send", "127.0.0.1", "-p", &port, "--json", "--no-path-db"])
                .args(["-t", "1500ms", "--tune", "kernel", "--wait", "60"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start tcptune send")
        })
        .collect();
    let mut queues = Vec::new();
    for c in sends {
        let o = c.wait_with_output().expect("send");
        let stderr = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(0), "{stderr}");
        let v = doc(&o);
        assert_valid("send", &v);
        let q = v["start"]["tcptune"]["queue"].clone();
        // The stderr line stays beside the report's field.
        assert_eq!(
            !q.is_null(),
            stderr.contains("waiting in its queue, place 1"),
            "{q} / {stderr}"
        );
        queues.push(q);
    }
    let waited: Vec<&Value> = queues.iter().filter(|q| !q.is_null()).collect();
    assert_eq!(waited.len(), 1, "{queues:?}");
    assert_eq!(waited[0]["first_place"], 1, "{queues:?}");
    assert!(waited[0]["places_told"].as_u64() >= Some(1), "{queues:?}");
    assert!(waited[0]["waited_s"].as_f64() > Some(0.0), "{queues:?}");
    let log = s.log();
    let mut lines = Vec::new();
    for line in log.lines() {
        let v: Value = serde_json::from_str(line).expect("a JSON line");
        assert_valid("serve-log", &v);
        lines.push(v);
    }
    let queued: Vec<&Value> = lines.iter().filter(|v| v["event"] == "queued").collect();
    let left: Vec<&Value> = lines
        .iter()
        .filter(|v| v["event"] == "queue_left")
        .collect();
    assert_eq!(queued.len(), 1, "{log}");
    assert_eq!(queued[0]["place"], 1, "{log}");
    assert_eq!(left.len(), 1, "{log}");
    assert_eq!(left[0]["outcome"], "admitted", "{log}");
    assert_eq!(left[0]["session"], queued[0]["session"], "{log}");
    assert!(left[0]["waited_ms"].as_u64() > Some(0), "{log}");
}

#[test]
fn advice_and_memory_budget_lines_match_their_schemas() {
    let db = tmp("serve-paths.sqlite");
    let db_arg = db.display().to_string();
    let s = Server::start_with(&["--path-db", &db_arg, "--memory-budget", "1m"]);
    let port = s.port.to_string();
    // Measured now, then from the server's database; both directions.
    let advise = |extra: &[&str]| -> String {
        let mut args = vec!["advise", "127.0.0.1", "-p", &port, "--json"];
        args.extend_from_slice(extra);
        let o = run(&args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{extra:?}: {} (the server {})",
            String::from_utf8_lossy(&o.stderr),
            if s.alive() { "still runs" } else { "exited" }
        );
        let v = doc(&o);
        assert_valid("advise", &v);
        v["source"].as_str().unwrap_or_default().to_string()
    };
    let mut sources = vec![advise(&[])];
    // The database answers inside the RTT bucket of what it saved: on a busy host a loopback
    // RTT has moved to the next bucket between two calls (108 vs 152 us in one CI run), so
    // the known path is asked for up to three times.
    let mut known = advise(&[]);
    for _ in 0..2 {
        if known == "path_db" {
            break;
        }
        known = advise(&[]);
    }
    sources.push(known);
    sources.push(advise(&["-R"]));
    assert_eq!(sources, ["measured", "path_db", "measured"]);
    // The server sends with psc under the budget: its shares are logged.
    let o = run(&[
        "send",
        "127.0.0.1",
        "-p",
        &port,
        "--json",
        "--no-path-db",
        "-R",
        "-P",
        "2",
        "--tune",
        "psc",
        "-t",
        "1200ms",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let log = s.log();
    let mut events = Vec::new();
    for line in log.lines() {
        let v: Value = serde_json::from_str(line).expect("a JSON line");
        assert_valid("serve-log", &v);
        events.push(v["event"].as_str().unwrap_or_default().to_string());
    }
    assert_eq!(events.iter().filter(|e| *e == "advice").count(), 3, "{log}");
    assert!(events.iter().any(|e| e == "memory_budget"), "{log}");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{db_arg}{suffix}"));
    }
}

#[test]
fn failures_print_a_json_document_that_matches_its_schema() {
    let closed = free_port().to_string();
    let o = run(&["send", "127.0.0.1", "-p", &closed, "--json", "-n", "1"]);
    assert_eq!(o.status.code(), Some(3));
    let v = doc(&o);
    assert_valid("send-error", &v);
    assert_eq!(v["tcptune"]["exit_code"], 3);
    // A usage error of send keeps iperf3's shape too.
    let o = run(&["send", "127.0.0.1", "-l", "0", "--json"]);
    assert_eq!(o.status.code(), Some(2));
    assert_valid("send-error", &doc(&o));
    for (args, code) in [
        (&["doctor", "--target", "1", "--json"][..], 2),
        (&["doctor", "--rtt", "0ms", "--json"], 2),
        (&["watch", "--once", "--count", "3", "--json"], 2),
        (&["paths", "show", "192.0.2.1", "--json"], 1),
        (&["emu", "status", "no-such-topology", "--json"], 1),
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(code), "{args:?}");
        let v = doc(&o);
        assert_valid("error", &v);
        assert_eq!(v["error"]["exit_code"], code, "{args:?}");
    }
}

#[test]
fn cp_reports_and_failures_match_their_schemas() {
    let dir = tmp("cp");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("share")).expect("mkdir");
    std::fs::create_dir_all(dir.join("src/sub")).expect("mkdir");
    std::fs::write(dir.join("src/sub/f"), vec![7u8; 5 << 20]).expect("write");
    std::fs::write(dir.join("src/empty"), b"").expect("write");
    std::os::unix::fs::symlink("sub/f", dir.join("src/link")).expect("symlink");
    let share = dir.join("share");
    let s = Server::start_with(&["--root", share.to_str().expect("utf8")]);
    let port = s.port.to_string();
    let src = dir.join("src");
    let src = src.to_str().expect("utf8");
    let back = dir.join("back");
    let back = back.to_str().expect("utf8");
    for args in [
        vec![
            "cp",
            "-p",
            &port,
            "--json",
            "-r",
            src,
            "tcptune://127.0.0.1/",
        ],
        vec![
            "cp",
            "-p",
            &port,
            "--json",
            "-r",
            src,
            "tcptune://127.0.0.1/",
        ],
        vec![
            "cp",
            "-p",
            &port,
            "--json",
            "-r",
            "-P",
            "2",
            "tcptune://127.0.0.1/src",
            back,
        ],
    ] {
        let o = run(&args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v = doc(&o);
        assert_valid("cp", &v);
        assert!(v["queue"].is_null(), "never waited: {}", v["queue"]);
        if v["direction"] == "push" {
            assert_eq!(
                v["warnings"].as_array().map(Vec::len),
                Some(1),
                "the symlink: {v}"
            );
        }
    }
    for (args, code) in [
        (
            vec![
                "cp",
                "-p",
                &port,
                "--json",
                "tcptune://127.0.0.1/nope",
                back,
            ],
            6,
        ),
        (
            vec!["cp", "-p", &port, "--json", src, "tcptune://127.0.0.1/../x"],
            2,
        ),
        (
            vec![
                "cp",
                "-p",
                &port,
                "--json",
                "-r",
                src,
                "tcptune://127.0.0.1/../x",
            ],
            7,
        ),
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(code), "{args:?}");
        let v = doc(&o);
        assert_valid("error", &v);
        assert_eq!(v["command"], "cp");
    }
    let log = s.log();
    for line in log.lines() {
        let v: Value = serde_json::from_str(line).expect("a log line");
        assert_valid("serve-log", &v);
    }
    // Writable and anonymous on loopback: open to this host, and the record says so.
    let start: Value = serde_json::from_str(log.lines().next().unwrap_or_default()).expect("JSON");
    assert_eq!(start["event"], "start", "{start}");
    assert_eq!(start["share"], "writable", "{start}");
    assert_eq!(start["root"], share.to_str().expect("utf8"), "{start}");
    assert_eq!(start["open"], true, "{start}");
    assert_eq!(start["limits"]["max_files"], 250_000, "{start}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn doctor_watch_and_emu_status_match_their_schemas() {
    let o = run(&["doctor", "--json", "--target", "10gbit", "--rtt", "80ms"]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{o:?}");
    assert_valid("doctor", &doc(&o));
    // A connection of our own, so that watch has a row to show.
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = l.local_addr().expect("addr").port();
    let _c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let _s = l.accept().expect("accept");
    let o = run(&[
        "watch",
        "--once",
        "--json",
        "--interval",
        "100ms",
        "--port",
        &port.to_string(),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let v = doc(&o);
    assert_valid("watch", &v);
    assert_eq!(v["connections"].as_array().map(Vec::len), Some(2), "{v}");
    let o = run(&["emu", "status", "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_valid("emu-status", &doc(&o));
}

#[test]
fn every_schema_is_documented_and_parses() {
    let doc_text = std::fs::read_to_string(schema_dir().join("../json.md")).expect("docs/json.md");
    for entry in std::fs::read_dir(schema_dir()).expect("docs/schema") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(v["title"].is_string(), "{name}: a title");
        assert!(
            doc_text.contains(&name),
            "docs/json.md does not mention {name}"
        );
    }
}

/// Takes a topology down if a test ends before it did.
struct Down(String);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = Command::new(BIN)
            .args(["emu", "down", &self.0])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[test]
fn emu_run_up_and_down_match_their_schemas() {
    use tcptune_testkit::Need;
    if !tcptune_testkit::require("emu_run_up_and_down_match_their_schemas", &[Need::Emulator]) {
        return;
    }
    let o = run(&[
        "emu",
        "run",
        "--rtt",
        "2ms",
        "--rate",
        "100mbit",
        "--extra-path",
        "rtt=4ms",
        "--json",
        "--",
        "true",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = doc(&o);
    assert_valid("emu-run", &v);
    assert_eq!(v["path"]["rtt_us"], 2000.0);
    assert_eq!(v["extra_paths"][0]["rtt_us"], 4000.0);
    let name = tcptune_emu::unique_name("js");
    let _guard = Down(name.clone());
    let o = run(&["emu", "up", &name, "--delay", "1ms", "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_valid("emu-up", &doc(&o));
    let o = run(&["emu", "status", &name, "--json"]);
    assert_valid("emu-status", &doc(&o));
    let o = run(&["emu", "down", &name, "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_valid("emu-down", &doc(&o));
}

#[test]
fn agent_exec_lines_match_their_schema() {
    use tcptune_testkit::Need;
    let test = "agent_exec_lines_match_their_schema";
    if !tcptune_testkit::require(test, &[Need::Root, Need::Program("clang")]) {
        return;
    }
    if !tcptune_agent::loader::program_built() {
        assert!(
            !tcptune_testkit::ci(),
            "{test}: CI=true but the BPF program was not built"
        );
        eprintln!(
            "skipping {test}: the BPF program was not built (apt-get install clang libbpf-dev)"
        );
        return;
    }
    let script = "import socket, threading\n\
        l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen()\n\
        def serve():\n    c, _ = l.accept()\n    c.recv(10)\n    c.close()\n\
        t = threading.Thread(target=serve); t.start()\n\
        s = socket.create_connection(l.getsockname()); s.sendall(b'x'); s.close(); t.join()\n";
    let o = run(&["agent", "exec", "--json", "--", "python3", "-c", script]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines.len() >= 3, "two closes and a summary: {text}");
    for l in &lines {
        assert_valid("agent", l);
    }
}
