//! `tcptune watch --metrics` end to end: `/metrics` fetched over loopback while watch runs,
//! parsed by the Prometheus project's own Python parsers (`prometheus_client`: the strict
//! OpenMetrics one and the classic text-format one), families and labels checked.
//!
//! Needs `python3` with `prometheus_client` (`.ci/run` installs it): skipped with a reason
//! outside CI when missing, a failure under `CI=true`.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// Kills and reaps the child on drop.
struct Watch(Child);
impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A connection that moved 1 MiB, both ends open.
fn busy_pair() -> (TcpListener, TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("loopback pair");
    let mut c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (mut s, _) = l.accept().expect("accept");
    let t = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 20];
        s.read_exact(&mut buf).expect("read");
        s
    });
    c.write_all(&vec![3u8; 1 << 20]).expect("write");
    let s = t.join().expect("reader");
    (l, c, s)
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

#[test]
fn metrics_are_served_and_read_by_prometheus_parsers() {
    if !tcptune_testkit::require_python_module(
        "metrics_are_served_and_read_by_prometheus_parsers",
        "prometheus_client",
    ) {
        return;
    }
    let (l, _c, _s) = busy_pair();
    let port = l.local_addr().expect("addr").port().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tcptune"))
        .args(["watch", "--metrics", "127.0.0.1:0", "--port", &port])
        .args(["--interval", "100ms", "--metrics-max-connections", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tcptune watch");
    let stderr = child.stderr.take().expect("stderr");
    let stdout = child.stdout.take().expect("stdout");
    let _guard = Watch(child);
    let first = BufReader::new(stderr)
        .lines()
        .next()
        .expect("a first line")
        .expect("readable");
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|r| r.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no address in '{first}'"))
        .to_string();

    // Wait for a few refreshes.
    let deadline = Instant::now() + Duration::from_secs(10);
    let families = loop {
        let r = get(&addr, "/metrics");
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        let body = r.split_once("\r\n\r\n").map(|x| x.1).unwrap_or_default();
        let v = parse(body);
        let refreshes = v["families"]["tcptune_watch_refreshes"]["samples"][0]["value"]
            .as_f64()
            .unwrap_or(0.0);
        if refreshes >= 3.0 {
            // The classic text-format parser reads the same families.
            let classic: Vec<&str> = v["classic"]
                .as_array()
                .expect("classic")
                .iter()
                .filter_map(Value::as_str)
                .collect();
            assert!(
                classic.contains(&"tcptune_watch_connections"),
                "{classic:?}"
            );
            assert!(classic.contains(&"tcptune_watch_refreshes"), "{classic:?}");
            break v["families"].clone();
        }
        assert!(Instant::now() < deadline, "watch never refreshed: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };

    let fam = |name: &str| -> &Value {
        let f = &families[name];
        assert!(!f.is_null(), "no family {name} in {families}");
        f
    };
    let by_factor = fam("tcptune_watch_connections");
    assert_eq!(by_factor["type"], "gauge");
    let samples = by_factor["samples"].as_array().expect("samples");
    let mut factors: Vec<&str> = samples
        .iter()
        .filter_map(|s| s["labels"]["factor"].as_str())
        .collect();
    factors.sort();
    assert_eq!(
        factors,
        [
            "application",
            "congestion_window",
            "receive_window",
            "receiving",
            "send_buffer"
        ]
    );
    let total: f64 = samples.iter().filter_map(|s| s["value"].as_f64()).sum();
    assert_eq!(total, 2.0, "both ends of our connection on port {port}");

    // The cap: one connection has series of its own, the other is summed and counted.
    let per_conn = fam("tcptune_watch_connection_throughput_bits_per_second");
    let s = per_conn["samples"].as_array().expect("samples");
    assert_eq!(s.len(), 1, "{per_conn}");
    let labels = s[0]["labels"].as_object().expect("labels");
    let mut keys: Vec<&str> = labels.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["factor", "local", "peer"]);
    assert!(
        labels["local"].as_str().is_some_and(|a| a.ends_with(&port))
            || labels["peer"].as_str().is_some_and(|a| a.ends_with(&port)),
        "{labels:?}"
    );
    assert_eq!(
        fam("tcptune_watch_connection_rtt_seconds")["samples"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(
        fam("tcptune_watch_unlisted_connections")["samples"][0]["value"],
        1.0
    );
    let dropped = fam("tcptune_watch_connection_series_dropped");
    assert_eq!(dropped["type"], "counter");
    assert!(dropped["samples"][0]["value"].as_f64().unwrap_or(0.0) >= 3.0);
    assert_eq!(
        fam("tcptune_watch_connection_series_limit")["samples"][0]["value"],
        1.0
    );
    assert_eq!(
        fam("tcptune_watch_connection_retransmits")["type"],
        "counter"
    );

    // Anything but /metrics is refused; watch printed nothing on stdout (not a terminal).
    assert!(get(&addr, "/").starts_with("HTTP/1.1 404"));
    drop(_guard);
    let mut printed = String::new();
    let _ = BufReader::new(stdout).read_to_string(&mut printed);
    assert!(printed.is_empty(), "{printed}");
}
