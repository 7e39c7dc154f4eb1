//! `tcptune agent`: the one-line refusal without the capabilities, `exec`'s exit status, and
//! the `--json` records of a connection made by CMD (on loopback, inside CMD's cgroup).
//!
//! The tests that load the program need root and a build with clang and libbpf-dev: outside
//! CI they skip and say why; under `CI=true` they must run.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use tcptune_testkit::{ci, is_root, require, Need};

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

fn tmp_db(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tt-agent-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join("paths.sqlite")
}

/// Whether the agent can load its program here (root, and the program in the build).
fn can_load(test: &str) -> bool {
    if !require(test, &[Need::Root, Need::Program("clang")]) {
        return false;
    }
    if !tcptune_agent::loader::program_built() {
        assert!(!ci(), "{test}: CI=true but the BPF program was not built");
        eprintln!("skipping {test}: the BPF program was not built (apt-get install clang libbpf-dev, then rebuild)");
        return false;
    }
    true
}

fn agent_exec(db: &std::path::Path, extra: &[&str], cmd: &[&str]) -> Output {
    Command::new(BIN)
        .args(["agent", "exec", "--path-db"])
        .arg(db)
        .args(extra)
        .arg("--")
        .args(cmd)
        .stdin(Stdio::null())
        .output()
        .expect("running tcptune agent exec")
}

#[test]
fn without_the_capabilities_the_agent_says_which_are_missing_in_one_line() {
    let test = "without_the_capabilities_the_agent_says_which_are_missing_in_one_line";
    let db = tmp_db("caps");
    let args = ["agent", "run", "--host-wide", "--path-db"];
    let out = if is_root() {
        if !require(test, &[Need::Program("setpriv")]) {
            return;
        }
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
            .args(args)
            .arg(&db)
            .stdin(Stdio::null())
            .output()
            .expect("setpriv")
    } else {
        Command::new(BIN)
            .args(args)
            .arg(&db)
            .stdin(Stdio::null())
            .output()
            .expect("tcptune")
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("CAP_BPF") && err.contains("CAP_NET_ADMIN"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn exec_exits_with_the_commands_status() {
    let test = "exec_exits_with_the_commands_status";
    if !can_load(test) {
        return;
    }
    let db = tmp_db("status");
    let out = agent_exec(&db, &["--mode", "observe"], &["sh", "-c", "exit 7"]);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("agent detached from"), "{err}");
}

#[test]
fn exec_json_streams_a_close_record_for_each_end_and_a_summary() {
    let test = "exec_json_streams_a_close_record_for_each_end_and_a_summary";
    if !can_load(test) || !require(test, &[Need::Program("python3")]) {
        return;
    }
    let db = tmp_db("json");
    let script = "import socket, threading\n\
        l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen()\n\
        def serve():\n    c, _ = l.accept()\n    while c.recv(65536):\n        pass\n    c.close()\n\
        t = threading.Thread(target=serve); t.start()\n\
        s = socket.create_connection(l.getsockname())\n\
        s.sendall(b'x' * 2000000); s.close(); t.join()\n";
    let out = agent_exec(&db, &["--json"], &["python3", "-c", script]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines.iter().all(|l| l["schema_version"] == 1));
    let closes: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "close").collect();
    let active = closes
        .iter()
        .find(|l| l["opened"] == "active")
        .unwrap_or_else(|| panic!("no close record of the client: {lines:?}"));
    assert_eq!(active["peer"], "127.0.0.1");
    assert!(active["bytes_acked"].as_u64().expect("bytes_acked") >= 2_000_000);
    assert_eq!(
        active["applied"],
        serde_json::json!([]),
        "unknown: observed only"
    );
    assert_eq!(active["recorded"], false, "loopback is not recorded");
    let passive = closes
        .iter()
        .find(|l| l["opened"] == "passive")
        .unwrap_or_else(|| panic!("no close record of the server: {lines:?}"));
    assert!(passive["bytes_received"].as_u64().expect("bytes_received") >= 2_000_000);
    let summary = lines.last().expect("a summary line");
    assert_eq!(summary["kind"], "summary");
    assert_eq!(summary["mode"], "enforce");
    assert!(summary["sockets_observed"].as_u64().expect("observed") >= 2);
}
