//! `tcptune serve` as a process under hostile clients: a client's string cannot forge a log
//! line, and a client that asks for every sample of 64 slow streams for a minute does not
//! make the server grow (its memory is bounded; see the bound below).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

/// A `tcptune serve` on 127.0.0.1, its log lines on a channel, killed on drop.
struct Server {
    child: Child,
    port: u16,
    lines: Receiver<String>,
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
        let mut reader = BufReader::new(stdout).lines();
        let first = reader.next().expect("a first line").expect("readable");
        let port = first
            .rsplit(':')
            .next()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no port in '{first}'"));
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in reader.map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Server { child, port, lines }
    }

    /// Log lines until one satisfies `f` (or `wait` passes); all lines seen.
    fn log_until(&self, wait: Duration, f: impl Fn(&str) -> bool) -> Vec<String> {
        let deadline = Instant::now() + wait;
        let mut seen = Vec::new();
        while let Ok(l) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            let done = f(&l);
            seen.push(l);
            if done {
                break;
            }
        }
        seen
    }

    /// Resident memory of the server process, bytes.
    fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server's /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .expect("VmRSS")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_client_cannot_forge_a_line_of_the_servers_log() {
    let s = Server::start(&[]);
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
    let body = br#"{"type":"x\nFAKE LINE: session 00000000 ended: 1TiB moved"}"#;
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(body);
    c.write_all(&frame).expect("write");
    let lines = s.log_until(Duration::from_secs(10), |l| l.contains("refused"));
    let refused = lines
        .iter()
        .find(|l| l.contains("refused"))
        .unwrap_or_else(|| panic!("no refusal logged: {lines:?}"));
    assert!(refused.contains("\\nFAKE LINE"), "{refused}");
    assert!(
        !lines.iter().any(|l| l.starts_with("FAKE LINE")),
        "{lines:?}"
    );
}

/// The issue's bound: a session recording every sample of 64 streams keeps at most 512
/// samples per stream (decimated over the stream's life), so the server's memory stops
/// growing once the series are full; a minute of such a session grows the server by less
/// than 8 MiB after its first 10 s (it grew by about 1.7 MB/s without bound before).
#[test]
fn sixty_seconds_of_samples_on_64_slow_streams_keep_the_server_bounded() {
    let s = Server::start(&[]);
    let db = std::env::temp_dir().join(format!("tcptune-hostile-{}.json", std::process::id()));
    // Slow streams that cost no CPU: this end receives with 4 KiB buffers set before
    // connecting (a window below one loopback segment makes each stream crawl).
    let client = Command::new(BIN)
        .args(["send", "127.0.0.1", "--port", &s.port.to_string()])
        .args([
            "-P",
            "64",
            "-t",
            "60",
            "--samples",
            "-R",
            "--tune",
            "fixed:4k",
        ])
        .args(["--json", "--no-progress", "--no-path-db"])
        .env("TCPTUNE_PATH_DB", &db)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tcptune send");
    std::thread::sleep(Duration::from_secs(10));
    let early = s.rss();
    let mut peak = early;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(48) {
        std::thread::sleep(Duration::from_secs(2));
        peak = peak.max(s.rss());
    }
    let out = client.wait_with_output().expect("send ends");
    let _ = std::fs::remove_file(&db);
    let grown = peak.saturating_sub(early);
    println!(
        "server RSS at 10 s {:.1} MiB, peak over the next 48 s {:.1} MiB (+{:.1} MiB)",
        early as f64 / 1048576.0,
        peak as f64 / 1048576.0,
        grown as f64 / 1048576.0
    );
    assert!(grown < 8 << 20, "the server grew by {grown} bytes");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(report["end"]["tcptune"]["streams_used"], 64);
    // The series that came back are bounded too.
    for st in report["end"]["tcptune"]["streams"]
        .as_array()
        .expect("streams")
    {
        let n = st["sender"]["samples"].as_array().map_or(0, |a| a.len());
        assert!(n <= 512, "{n} samples");
    }
}
