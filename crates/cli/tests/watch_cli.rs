//! `tcptune watch` end to end on connections this test makes on loopback.

use serde_json::Value;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::time::Duration;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tcptune"))
        .args(args)
        .output()
        .expect("run tcptune")
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// A connection that moved 1 MiB, both ends open.
fn busy_pair() -> (TcpListener, TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("loopback pair");
    let mut c = TcpStream::connect(l.local_addr().expect("loopback pair")).expect("loopback pair");
    let (mut s, _) = l.accept().expect("loopback pair");
    let t = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 20];
        s.read_exact(&mut buf).expect("loopback pair");
        s
    });
    c.write_all(&vec![3u8; 1 << 20]).expect("loopback pair");
    let s = t.join().expect("loopback pair");
    (l, c, s)
}

fn rows(j: &Value) -> &Vec<Value> {
    j["connections"].as_array().expect("connections")
}

#[test]
fn once_json_shows_both_ends_of_our_connection_filtered_by_port() {
    let (l, c, _s) = busy_pair();
    let port = l.local_addr().unwrap().port();
    let o = run(&["watch", "--once", "--json", "--port", &port.to_string()]);
    assert_eq!(o.status.code(), Some(0));
    let j = json(&o);
    assert_eq!(j["schema_version"], 1);
    let r = rows(&j);
    assert_eq!(r.len(), 2, "{j}");
    let me = r
        .iter()
        .find(|x| x["local"] == c.local_addr().unwrap().to_string())
        .expect("client row");
    assert_eq!(me["peer"], format!("127.0.0.1:{port}"));
    assert_eq!(me["state"], "ESTAB");
    assert!(me["rtt_us"].as_u64().is_some());
    assert!(me["cwnd_segs"].as_u64().unwrap() > 0);
    assert!(me["sndbuf_bytes"].as_u64().unwrap() > 0);
    // --once looks twice, --interval apart: RATE and the shares are over that interval.
    assert_eq!(me["share_basis"], "interval");
    assert!(
        me["send_rate_bps"].is_u64() || me["recv_rate_bps"].is_u64(),
        "{me}"
    );
    assert!(r.iter().all(|x| {
        x["local"].as_str().unwrap().ends_with(&format!(":{port}"))
            || x["peer"].as_str().unwrap().ends_with(&format!(":{port}"))
    }));
}

#[test]
fn process_filter_finds_this_test_process() {
    let (l, _c, _s) = busy_pair();
    let port = l.local_addr().unwrap().port().to_string();
    let pid = std::process::id().to_string();
    let o = run(&[
        "watch",
        "--once",
        "--json",
        "--process",
        &pid,
        "--port",
        &port,
    ]);
    let j = json(&o);
    let r = rows(&j);
    assert_eq!(r.len(), 2, "{j}");
    assert!(r
        .iter()
        .all(|x| x["owner"]["pid"].as_u64() == Some(std::process::id().into())));
    let o = run(&[
        "watch",
        "--once",
        "--json",
        "--process",
        "no-such-command-xyz",
    ]);
    assert!(rows(&json(&o)).is_empty());
}

#[test]
fn repeated_refreshes_measure_over_the_interval() {
    let (l, _c, _s) = busy_pair();
    let port = l.local_addr().unwrap().port().to_string();
    let o = run(&[
        "watch",
        "--json",
        "--count",
        "2",
        "--interval",
        "100ms",
        "--port",
        &port,
    ]);
    assert_eq!(o.status.code(), Some(0));
    let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON document per line"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["refresh"], 1);
    assert!(rows(&lines[1])
        .iter()
        .all(|r| r["share_basis"] == "interval"));
}

#[test]
fn stalled_sender_is_highlighted_with_a_hint() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (_s, _) = l.accept().unwrap(); // never reads: the window closes
    c.set_nonblocking(true).unwrap();
    let chunk = vec![9u8; 1 << 16];
    let mut sent = 0usize;
    for _ in 0..100_000 {
        match c.write(&chunk) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(sent > 0);
    std::thread::sleep(Duration::from_millis(300));
    let local = c.local_addr().unwrap().to_string();
    let port = l.local_addr().unwrap().port().to_string();
    let o = run(&["watch", "--once", "--json", "--port", &port, "--limited"]);
    let j = json(&o);
    let me = rows(&j)
        .iter()
        .find(|r| r["local"] == local)
        .unwrap_or_else(|| panic!("stalled sender not listed as limited: {j}"));
    let hint = me["limit"]["hint"].as_str().expect("hint");
    // The receiver never reads: its buffer is full and no limit is to blame.
    assert!(hint.contains("reads too slowly"), "{hint}");
    // Text form: the hint line follows the row.
    let o = run(&[
        "watch",
        "--once",
        "--port",
        &port,
        "--limited",
        "--no-color",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("\n  ^ "), "{text}");
}

#[test]
fn bad_options_are_usage_errors() {
    for args in [
        &["watch", "--sort", "bogus"][..],
        &["watch", "--interval", "1ms"],
        &["watch", "--addr", "not-an-ip"],
        &["watch", "--addr", "10.0.0.0/40"],
        &["watch", "--port", "70000"],
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
    }
}
