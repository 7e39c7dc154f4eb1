//! `tcptune serve --metrics` end to end: a server on loopback with its exporter, a transfer
//! each way and a refused connection, then `/metrics` parsed by the Prometheus project's own
//! Python parsers (`prometheus_client`); the families docs/METRICS.md lists, with the counts
//! those sessions must have left.
//!
//! Needs `python3` with `prometheus_client` (`.ci/run` installs it): skipped with a reason
//! outside CI when missing, a failure under `CI=true`.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

const PARSER: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
from prometheus_client.parser import text_string_to_metric_families as prometheus
text = sys.stdin.read()
families = {}
for f in openmetrics(text):
    families[f.name] = {
        "type": f.type,
        "samples": [{"name": s.name, "labels": s.labels, "value": s.value} for s in f.samples],
    }
classic = sorted({f.name for f in prometheus(text)})
print(json.dumps({"families": families, "classic": classic}))
"#;

/// Kills and reaps the server on drop.
struct Serve(Child);
impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the exporter");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
        .expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response");
    out
}

fn parse(body: &str) -> Value {
    let mut child = Command::new("python3")
        .args(["-c", PARSER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("feed");
    let out = child.wait_with_output().expect("python3 ends");
    assert!(
        out.status.success(),
        "the Prometheus parsers refused /metrics:\n{}\n{body}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("parser output")
}

fn value(v: &Value, family: &str, labels: &[(&str, &str)], suffix: &str) -> f64 {
    v["families"][family]["samples"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["name"].as_str() == Some(&format!("{family}{suffix}")))
        .filter(|s| {
            labels
                .iter()
                .all(|(k, x)| s["labels"][*k].as_str() == Some(*x))
        })
        .filter_map(|s| s["value"].as_f64())
        .sum()
}

#[test]
fn serve_metrics_count_sessions_bytes_and_refusals_for_prometheus() {
    let test = "serve_metrics_count_sessions_bytes_and_refusals_for_prometheus";
    if !tcptune_testkit::require_python_module(test, "prometheus_client") {
        return;
    }
    let mut child = Command::new(BIN)
        .args(["serve", "-B", "127.0.0.1", "-p", "0", "--no-path-db"])
        .args(["--metrics", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tcptune serve");
    let stderr = child.stderr.take().expect("stderr");
    let stdout = child.stdout.take().expect("stdout");
    let _guard = Serve(child);
    // Both outputs are drained to the end (the server keeps logging); the first line of
    // each that says where it listens is handed over.
    let found = |pipe: Box<dyn Read + Send>, key: &'static str| {
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if line.contains(key) {
                    let _ = tx.send(line);
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("serve never printed '{key}'"))
    };
    let first = found(Box::new(stderr), "http://");
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|r| r.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no address in '{first}'"))
        .to_string();
    let listening = found(Box::new(stdout), "listening on");
    let port = listening
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.rsplit(':').next())
        .expect("a port")
        .to_string();
    for extra in [&["--tune", "kernel"][..], &["--tune", "fixed:1m", "-R"]] {
        let o = Command::new(BIN)
            .args(["send", "127.0.0.1", "-p", &port, "-n", "4", "--no-path-db"])
            .args(extra)
            .output()
            .expect("tcptune send");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // Not tcptune: refused as a protocol error.
    if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port.parse::<u16>().expect("port"))) {
        let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = s.read_to_end(&mut Vec::new());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = get(&addr, "/metrics");
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        let body = r.split_once("\r\n\r\n").map(|x| x.1).unwrap_or_default();
        let v = parse(body);
        let ended = value(&v, "tcptune_serve_sessions_ended", &[], "_total");
        let refused = value(&v, "tcptune_serve_refused", &[], "_total");
        if ended >= 2.0 && refused >= 1.0 || Instant::now() > deadline {
            for family in [
                "tcptune_serve_sessions_active",
                "tcptune_serve_sessions",
                "tcptune_serve_bytes",
                "tcptune_serve_refused",
                "tcptune_serve_handshake_seconds",
                "tcptune_serve_throughput_bits_per_second",
            ] {
                assert!(v["families"][family].is_object(), "no {family}: {body}");
            }
            assert_eq!(ended, 2.0, "{body}");
            assert!(refused >= 1.0, "{body}");
            assert_eq!(
                value(
                    &v,
                    "tcptune_serve_sessions",
                    &[("mode", "kernel")],
                    "_total"
                ),
                1.0,
                "{body}"
            );
            // 4 MiB each way, as the server saw them.
            let recv = value(
                &v,
                "tcptune_serve_bytes",
                &[("direction", "receive"), ("mode", "kernel")],
                "_total",
            );
            let sent = value(
                &v,
                "tcptune_serve_bytes",
                &[("direction", "send"), ("mode", "fixed")],
                "_total",
            ) + value(
                &v,
                "tcptune_serve_bytes",
                &[("direction", "send"), ("mode", "fixed:1048576")],
                "_total",
            );
            assert!(recv >= 4.0 * 1048576.0, "{body}");
            assert!(sent >= 4.0 * 1048576.0, "{body}");
            assert_eq!(
                value(&v, "tcptune_serve_handshake_seconds", &[], "_count"),
                2.0,
                "{body}"
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
