//! `tcptune send` between two network namespaces with different buffer limits: each end's
//! tuner gets its own namespace's limits, and the report says which were which.
//!
//! Needs root (network namespaces); runs for real when root, and must not skip under CI.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");
static COUNTER: AtomicU32 = AtomicU32::new(0);

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Two namespaces joined by a veth pair; deleted on drop (even on panic).
struct Pair {
    a: String,
    b: String,
}

impl Pair {
    fn new() -> Pair {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}x{n}", std::process::id());
        let p = Pair {
            a: format!("tttxa{tag}"),
            b: format!("tttxb{tag}"),
        };
        ip(&["netns", "add", &p.a]);
        ip(&["netns", "add", &p.b]);
        let (va, vb) = (format!("tva{tag}"), format!("tvb{tag}"));
        let (va, vb) = (&va[..va.len().min(15)], &vb[..vb.len().min(15)]);
        ip(&[
            "-n", &p.a, "link", "add", va, "type", "veth", "peer", "name", vb, "netns", &p.b,
        ]);
        ip(&["-n", &p.a, "addr", "add", "10.231.0.1/30", "dev", va]);
        ip(&["-n", &p.b, "addr", "add", "10.231.0.2/30", "dev", vb]);
        for (ns, dev) in [(&p.a, va), (&p.b, vb)] {
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        p
    }

    fn exec(&self, ns: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(args);
        c
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.a]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.b]).status();
    }
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn each_end_tunes_with_its_own_namespaces_limits() {
    if !is_root() {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "CI=true: this test needs root and must not skip"
        );
        eprintln!("SKIP: needs root for network namespaces");
        return;
    }
    let p = Pair::new();
    let sysctl = |ns: &str, kv: &str| {
        let o = p.exec(ns, &["sysctl", "-qw", kv]).output().expect("sysctl");
        assert!(
            o.status.success(),
            "{kv}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    sysctl(&p.a, "net.ipv4.tcp_wmem=4096 16384 3145728");
    sysctl(&p.b, "net.ipv4.tcp_rmem=4096 131072 7340032");
    let server = Kill(
        p.exec(
            &p.b,
            &[
                BIN,
                "serve",
                "--bind",
                "10.231.0.2",
                "--port",
                "5310",
                "--json",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the server"),
    );
    // Wait until it listens (ss in its namespace).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let o = p
            .exec(&p.b, &["ss", "-Htln", "sport = :5310"])
            .output()
            .expect("ss");
        if !String::from_utf8_lossy(&o.stdout).trim().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    for reverse in [false, true] {
        let mut args = vec![
            BIN,
            "send",
            "10.231.0.2",
            "--tune",
            "kernel",
            "-n",
            "8",
            "--json",
        ];
        if reverse {
            args.push("-R");
        }
        let o = p.exec(&p.a, &args).output().expect("send");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        let t = &v["start"]["tcptune"];
        let (client, server_side) = if reverse {
            (&t["receiver_limits"], &t["sender_limits"])
        } else {
            (&t["sender_limits"], &t["receiver_limits"])
        };
        assert_eq!(client["tcp_wmem"][2], 3_145_728, "client's namespace: {t}");
        assert_eq!(
            server_side["tcp_rmem"][2], 7_340_032,
            "server's namespace: {t}"
        );
        assert_eq!(
            client["tcp_rmem"][2], 33_554_432,
            "untouched default in the client's: {t}"
        );
        assert_eq!(v["end"]["tcptune"]["complete"], true);
        assert!(
            t["path_hint"]["rtt"].is_object(),
            "control RTT measured: {t}"
        );
    }
    drop(server);
}
