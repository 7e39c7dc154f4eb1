//! `tcptune doctor` end to end: JSON schema, exit codes, usage errors, --write-sysctl,
//! --apply inside a namespace of our own, and the path errors (refused, unresolvable,
//! unreachable, filtered) on loopback or inside our own namespaces.

use serde_json::Value;
use std::process::{Command, Output};
use tcptune_testkit::{Need, Netns};

fn tcptune() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tcptune"))
}

fn run(args: &[&str]) -> Output {
    tcptune().args(args).output().expect("run tcptune")
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            stderr(o)
        )
    })
}

#[test]
fn json_report_has_schema_facts_findings_and_matching_exit_code() {
    let o = run(&["doctor", "--json", "--target", "10gbit", "--rtt", "100ms"]);
    let j = json(&o);
    assert_eq!(j["schema_version"], 2);
    assert_eq!(j["mode"], "host");
    assert_eq!(j["target"]["rate_bps"], 10_000_000_000u64);
    assert_eq!(j["target"]["rtt_us"], 100_000);
    assert_eq!(j["target"]["source"], "user");
    assert_eq!(j["sizing"]["bdp_bytes"], 125_000_000);
    assert!(j["facts"]["sysctls"]["net.ipv4.tcp_rmem"]["status"] == "ok");
    assert!(j["facts"]["interfaces"]
        .as_array()
        .is_some_and(|a| !a.is_empty()));
    let findings = j["findings"].as_array().expect("findings");
    for f in findings {
        for k in ["id", "severity", "message"] {
            assert!(f[k].is_string(), "{f}");
        }
        assert!(f.get("fix").is_some(), "{f}");
    }
    let problems = findings
        .iter()
        .filter(|f| f["severity"] == "warning" || f["severity"] == "error")
        .count();
    assert_eq!(j["problems"], problems);
    assert_eq!(code(&o), i32::from(problems > 0), "{}", stderr(&o));
}

#[test]
fn tiny_target_on_a_default_host_passes() {
    // 1 Mbit/s at 1 ms needs 125 bytes in flight: no buffer limit stands in the way.
    let o = run(&["doctor", "--json", "--target", "1mbit", "--rtt", "1ms"]);
    let j = json(&o);
    let ids: Vec<&str> = j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["id"].as_str())
        .collect();
    for id in ["tcp-wmem-max-small", "tcp-rmem-max-small", "wmem-max-small"] {
        assert!(!ids.contains(&id), "{ids:?}");
    }
}

#[test]
fn text_report_sizes_the_advice_for_the_target() {
    let o = run(&["doctor", "--target", "10gbit", "--rtt", "100ms"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("target: 10 Gbit/s at 100 ms RTT (as given)"),
        "{out}"
    );
    assert!(out.contains("bandwidth-delay product 119 MiB"), "{out}");
    assert!(out.contains("parallel streams needed"), "{out}");
}

#[test]
fn bad_options_are_usage_errors() {
    for args in [
        &["doctor", "--target", "fast"][..],
        &["doctor", "--rtt", "25"],
        &["doctor", "--target", "0"],
        &["doctor", "--samples", "0"],
        &["doctor", "--timeout", "0s"],
        &["doctor", "127.0.0.1:1", "--rtt", "10ms"],
        &["doctor", "[::1"],
        &["doctor", "host:99999"],
    ] {
        let o = run(args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).is_empty());
    }
}

#[test]
fn write_sysctl_writes_a_commented_file_and_changes_nothing() {
    let file = std::env::temp_dir().join(format!("tcptune-sysctl-{}.conf", std::process::id()));
    let before = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem").unwrap();
    let o = run(&[
        "doctor",
        "--target",
        "40gbit",
        "--rtt",
        "150ms",
        "--write-sysctl",
        file.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&file).expect("file written");
    let _ = std::fs::remove_file(&file);
    assert!(
        text.starts_with("# TCP tuning written by tcptune"),
        "{text}"
    );
    assert!(text.contains("Sized for 40 Gbit/s at 150 ms RTT"), "{text}");
    // 40 Gbit/s x 150 ms = 750 MB in flight: 1.4 GiB of buffer per end.
    assert!(
        text.lines()
            .any(|l| l.starts_with("net.ipv4.tcp_wmem = ") && l.ends_with(" 1500512256")),
        "{text}"
    );
    assert!(text.contains("# was: "), "{text}");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem").unwrap(),
        before
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("wrote "));
}

/// Run tcptune with `args` inside `ns`.
fn tcptune_in(ns: &Netns, args: &[&str]) -> Output {
    ns.command(env!("CARGO_BIN_EXE_tcptune"))
        .args(args)
        .output()
        .expect("ip netns exec tcptune")
}

/// A namespace of the test's own: named as root, in a user namespace otherwise.
fn root() -> bool {
    tcptune_testkit::require(
        "doctor_cli (namespaces)",
        &[Need::Netns, Need::Program("sysctl")],
    )
}

/// Run `ip ARGS` inside `ns` (root there in both modes).
fn ip_in(ns: &Netns, args: &[&str]) {
    let o = ns
        .command("ip")
        .args(args)
        .output()
        .expect("ip in the namespace");
    assert!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn apply_in_a_namespace_fixes_per_namespace_settings_and_prints_previous_values() {
    if !root() {
        return;
    }
    let ns = Netns::new("dcli");
    ns.set_sysctl("net.ipv4.tcp_timestamps", "0");
    ns.set_sysctl("net.ipv4.tcp_sack", "0");
    let host_ts = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_timestamps").unwrap();
    // A tiny target: the only problems are the two switches, both per-namespace sysctls,
    // so nothing global (net.core.*) is touched.
    let o = tcptune_in(
        &ns,
        &[
            "doctor", "--apply", "--json", "--target", "1mbit", "--rtt", "1ms",
        ],
    );
    let j = json(&o);
    let applied = j["applied"].as_array().expect("applied");
    let keys: Vec<&str> = applied.iter().filter_map(|a| a["key"].as_str()).collect();
    assert_eq!(
        keys,
        ["net.ipv4.tcp_timestamps", "net.ipv4.tcp_sack"],
        "{j}"
    );
    for a in applied {
        assert_eq!(a["previous"], "0");
        assert_eq!(a["now"], "1");
        assert!(a["error"].is_null());
    }
    assert_eq!(ns.sysctl("net.ipv4.tcp_timestamps"), "1");
    assert_eq!(ns.sysctl("net.ipv4.tcp_sack"), "1");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_timestamps").unwrap(),
        host_ts
    );
    // After the change nothing stands: exit 0.
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // The text form prints how to undo it.
    ns.set_sysctl("net.ipv4.tcp_sack", "0");
    let o = tcptune_in(
        &ns,
        &["doctor", "--apply", "--target", "1mbit", "--rtt", "1ms"],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("net.ipv4.tcp_sack: 0 -> 1"), "{out}");
    assert!(out.contains("sysctl -w net.ipv4.tcp_sack=0"), "{out}");
}

#[test]
fn path_to_a_closed_loopback_port_is_refused() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let o = run(&["doctor", &format!("127.0.0.1:{port}"), "--samples", "2"]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("refused"), "{}", stderr(&o));
}

#[test]
fn path_to_an_unresolvable_name_says_so() {
    let o = run(&["doctor", "no-such-host.invalid:5201"]);
    assert_eq!(code(&o), 3);
    assert!(
        stderr(&o).contains("cannot resolve 'no-such-host.invalid'"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn path_to_a_loopback_listener_reports_handshake_samples() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    // Accept (and drop) the probes in the background.
    std::thread::spawn(move || for _ in l.incoming() {});
    let o = run(&[
        "doctor",
        &format!("127.0.0.1:{port}"),
        "--samples",
        "5",
        "--json",
    ]);
    let j = json(&o);
    assert_eq!(j["mode"], "path");
    assert_eq!(j["target"]["source"], "measured");
    let rtt = &j["path"]["rtt"];
    assert_eq!(rtt["samples_us"].as_array().map(Vec::len), Some(5), "{j}");
    assert!(rtt["min_us"].as_u64() <= rtt["median_us"].as_u64());
    assert_eq!(j["target"]["rtt_us"], rtt["median_us"]);
}

#[test]
fn path_without_a_route_is_unreachable() {
    if !root() {
        return;
    }
    let ns = Netns::new("dcli");
    // Only loopback exists in the namespace: no route to 10.88.0.1.
    let o = tcptune_in(&ns, &["doctor", "10.88.0.1:80", "--samples", "1"]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(stderr(&o).contains("unreachable"), "{}", stderr(&o));
}

#[test]
fn path_whose_packets_vanish_is_filtered() {
    if !root() {
        return;
    }
    let ns = Netns::new("dcli");
    // A veth pair inside our namespace; 10.77.0.2 has a fixed MAC, so SYNs leave v0, arrive
    // at v1 (no address, no forwarding) and are dropped: no answer, as behind a firewall.
    ip_in(
        &ns,
        &["link", "add", "v0", "type", "veth", "peer", "name", "v1"],
    );
    ip_in(&ns, &["addr", "add", "10.77.0.1/24", "dev", "v0"]);
    ip_in(&ns, &["link", "set", "v0", "up"]);
    ip_in(&ns, &["link", "set", "v1", "up"]);
    ip_in(
        &ns,
        &[
            "neigh",
            "add",
            "10.77.0.2",
            "lladdr",
            "02:00:00:00:77:02",
            "dev",
            "v0",
            "nud",
            "permanent",
        ],
    );
    let o = tcptune_in(
        &ns,
        &[
            "doctor",
            "10.77.0.2:80",
            "--samples",
            "1",
            "--timeout",
            "1s",
        ],
    );
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no answer from 10.77.0.2:80"),
        "{}",
        stderr(&o)
    );
}

/// A `tcptune serve` child on loopback, killed on drop.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn path_to_a_tcptune_server_runs_the_bandwidth_probe() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let _server = Server(
        tcptune()
            .args(["serve", "-B", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn server"),
    );
    let addr = format!("127.0.0.1:{port}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(std::time::Instant::now() < deadline, "server did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = run(&[
        "doctor",
        &addr,
        "--samples",
        "3",
        "--probe-time",
        "1s",
        "--probe-streams",
        "2",
        "--json",
    ]);
    let j = json(&o);
    let probe = &j["path"]["probe"];
    let bps = probe["rate_bps"].as_u64().unwrap_or(0);
    assert!(bps > 0, "{j}");
    assert_eq!(probe["streams"], 2);
    // Without --target the probe's rate sizes the advice.
    assert_eq!(j["target"]["rate_bps"], bps);
    // --no-probe sends only the handshakes.
    let o = run(&["doctor", &addr, "--samples", "2", "--no-probe", "--json"]);
    let j = json(&o);
    assert!(j["path"]["probe"].is_null());
    assert_eq!(j["path"]["probe_skipped"], "--no-probe");
}
