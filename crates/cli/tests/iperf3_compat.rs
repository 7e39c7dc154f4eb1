//! `tcptune send --json` read by a real consumer of iperf3's JSON: the `iperf3` package on
//! PyPI (`iperf3.TestResult(text)`), as monitoring scripts use it. Its `TestResult` needs only
//! the JSON, not iperf3's C library: the script below makes loading any C library fail to
//! show it.
//!
//! Needs `python3` with the `iperf3` package (`.ci/run` installs it): skipped with a reason
//! outside CI when missing, a failure under `CI=true`.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

/// Read a report with `iperf3.TestResult` and print what it found as JSON.
const READER: &str = r#"
import ctypes, json, sys
def no_c_library(*args, **kwargs):
    raise OSError("TestResult must not need libiperf")
ctypes.cdll.LoadLibrary = no_c_library
import iperf3
r = iperf3.TestResult(sys.stdin.read())
if r.error is not None:
    print(json.dumps({"error": r.error}))
else:
    print(json.dumps({
        "error": None,
        "time": r.time, "timesecs": r.timesecs, "version": r.version,
        "system_info": r.system_info, "local_host": r.local_host,
        "remote_port": r.remote_port, "protocol": r.protocol,
        "num_streams": r.num_streams, "blksize": r.blksize, "omit": r.omit,
        "duration": r.duration, "reverse": r.reverse, "type": r.type,
        "tcp_mss_default": r.tcp_mss_default,
        "local_cpu_total": r.local_cpu_total, "remote_cpu_total": r.remote_cpu_total,
        "sent_bytes": r.sent_bytes, "sent_bps": r.sent_bps, "retransmits": r.retransmits,
        "received_bytes": r.received_bytes, "received_bps": r.received_bps,
        "received_Mbps": r.received_Mbps,
    }))
"#;

/// Feed `report` to `iperf3.TestResult`.
fn read_with_iperf3_package(report: &[u8]) -> Value {
    let mut child = Command::new("python3")
        .args(["-c", READER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(report).expect("feed the report");
    }
    let out = child.wait_with_output().expect("python3 ends");
    assert!(
        out.status.success(),
        "iperf3.TestResult failed on the report:\n{}\nreport: {}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(report)
    );
    serde_json::from_slice(&out.stdout).expect("the reader's JSON")
}

/// `tcptune serve -1` on an ephemeral loopback port; returns it and its port.
fn serve_once() -> (std::process::Child, u16) {
    let mut child = Command::new(BIN)
        .args(["serve", "-1", "--bind", "127.0.0.1", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tcptune serve -1");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().expect("a first line").expect("readable");
    let port = first
        .rsplit(':')
        .next()
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no port in '{first}'"));
    std::thread::spawn(move || for _ in lines {});
    (child, port)
}

fn send(port: u16, extra: &[&str]) -> Output {
    Command::new(BIN)
        .args(["send", "127.0.0.1", "--port", &port.to_string(), "--json"])
        .args(["--no-progress", "--no-path-db"])
        .args(extra)
        .output()
        .expect("run tcptune send")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(1.0)
}

#[test]
fn iperf3_package_reads_a_send_report() {
    if !tcptune_testkit::require_python_module("iperf3_package_reads_a_send_report", "iperf3") {
        return;
    }
    let (mut server, port) = serve_once();
    let o = send(port, &["-P", "2", "-n", "16", "--tune", "kernel"]);
    let _ = server.wait();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let report: Value = serde_json::from_slice(&o.stdout).expect("report JSON");
    let r = read_with_iperf3_package(&o.stdout);
    assert_eq!(r["error"], Value::Null, "{r}");
    let end = &report["end"];
    assert_eq!(r["sent_bytes"], end["sum_sent"]["bytes"]);
    assert_eq!(r["received_bytes"], end["sum_received"]["bytes"]);
    assert_eq!(r["received_bytes"], 16u64 << 20);
    for (theirs, ours) in [
        ("sent_bps", &end["sum_sent"]["bits_per_second"]),
        ("received_bps", &end["sum_received"]["bits_per_second"]),
        (
            "local_cpu_total",
            &end["cpu_utilization_percent"]["host_total"],
        ),
    ] {
        let (a, b) = (
            r[theirs].as_f64().expect("a number"),
            ours.as_f64().expect("a number"),
        );
        assert!(close(a, b), "{theirs}: {a} vs {b}");
    }
    let mbps = r["received_Mbps"].as_f64().expect("Mbit/s");
    assert!(mbps > 0.0);
    assert_eq!(r["retransmits"], end["sum_sent"]["retransmits"]);
    assert_eq!(r["protocol"], "TCP");
    assert_eq!(r["num_streams"], 2);
    assert_eq!(r["blksize"], 1u64 << 20);
    assert_eq!(r["reverse"], false);
    assert_eq!(r["type"], "client");
    assert_eq!(
        r["remote_port"],
        report["start"]["connected"][0]["remote_port"]
    );
    assert_eq!(r["timesecs"], report["start"]["timestamp"]["timesecs"]);
    assert!(
        r["time"].as_str().is_some_and(|t| t.ends_with(" GMT")),
        "{r}"
    );
    assert!(
        r["tcp_mss_default"].as_u64().is_some_and(|m| m > 500),
        "{r}"
    );
    assert!(r["version"]
        .as_str()
        .is_some_and(|v| v.starts_with("tcptune ")));
}

#[test]
fn iperf3_package_sees_the_error_of_a_failed_send() {
    if !tcptune_testkit::require_python_module(
        "iperf3_package_sees_the_error_of_a_failed_send",
        "iperf3",
    ) {
        return;
    }
    // A port nobody listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let o = send(port, &["-n", "1"]);
    assert_eq!(o.status.code(), Some(3), "connection failure status");
    let report: Value = serde_json::from_slice(&o.stdout).expect("a JSON report even now");
    assert_eq!(report["schema_version"], 2);
    let r = read_with_iperf3_package(&o.stdout);
    let e = r["error"].as_str().expect("an error");
    assert!(e.contains("127.0.0.1"), "{e}");
    assert_eq!(report["error"].as_str(), Some(e));
}
