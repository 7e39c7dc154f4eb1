//! `tcptune lab --remote HOST`: the lab's matrix across a real path, the far end started
//! over ssh. Once on loopback with a fake ssh (a script that runs the far end's command
//! itself), and once through OpenSSH's sshd in side B of an emulated path standing in for
//! the real one (root; runs for real in CI), where a raised host configuration runs with
//! both sides' maxima held raised (`hold-limits` over the same ssh) and put back. One cell
//! of 8 MiB each.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;
use tcptune_emu::{unique_name, PathConfig, Side, Topology, TopologyConfig};
use tcptune_testkit::{sshd, Sshd};

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

/// Two runnable cells (untuned, kernel then manual sized from kernel's measured rate, one
/// stream, 8 x 1 MiB) and one that is never run across a real path (the ideal sweep).
const PLAN: &str = r#"
name = "remote-one-cell"
streams = [1]
repetitions = 1
messages = 8
message_size = "1m"
max_time = "60s"
[hosts]
untuned = ["kernel", "manual"]
user_kernel = ["ideal"]
"#;

/// [`PLAN`] and one cell of a raised host configuration (kernel autotuning with both hosts'
/// maxima raised to 64 MiB).
const PLAN_RAISED: &str = r#"
name = "remote-raised"
streams = [1]
repetitions = 1
messages = 8
message_size = "1m"
max_time = "60s"
raised_max = "64m"
[hosts]
untuned = ["kernel", "manual"]
kernel_only = ["kernel"]
user_kernel = ["ideal"]
"#;

struct Tmp(PathBuf);
impl Tmp {
    fn new(tag: &str, plan: &str) -> Tmp {
        let d =
            std::env::temp_dir().join(format!("tcptune-labremote-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("home")).expect("mkdir");
        std::fs::write(d.join("plan.toml"), plan).expect("plan");
        Tmp(d)
    }
    fn plan(&self) -> String {
        self.0.join("plan.toml").display().to_string()
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The report's checks: the untuned cells ran and measured the path, `manual` with the rate
/// `kernel` measured; the ideal sweep is marked with its reason; both hosts' limits are in
/// it.
fn check(o: &Output) -> serde_json::Value {
    assert!(
        o.status.success(),
        "lab --remote failed ({}): {}\n{}",
        o.status,
        text(&o.stderr),
        text(&o.stdout)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&o.stdout)));
    assert_eq!(v["schema_version"], 3);
    let cells = v["cells"].as_array().expect("cells");
    let ran: Vec<&serde_json::Value> = cells
        .iter()
        .filter(|c| c["not_applied"].is_null() && c["host"] == "untuned")
        .collect();
    assert_eq!(ran.len(), 2, "{v}");
    assert_eq!(ran[0]["mode"], "kernel");
    assert_eq!(ran[0]["rates_bps"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(ran[1]["mode"], "manual");
    assert_eq!(ran[1]["rates_bps"].as_array().map(Vec::len), Some(1), "{v}");
    let measured = ran[0]["rates_bps"][0].as_f64().expect("kernel's rate");
    assert_eq!(
        ran[1]["tuned_with"].as_str(),
        Some(format!("manual:{}bit", measured.floor() as u64).as_str()),
        "manual is sized from the best rate measured before it: {v}"
    );
    let hosts = v["hosts"].as_array().expect("hosts");
    assert_eq!(hosts.len(), 2, "{v}");
    assert_eq!(hosts[0]["role"], "sender");
    assert_eq!(hosts[1]["role"], "receiver");
    for h in hosts {
        assert!(h["error"].is_null(), "{h}");
        assert!(h["wmem_max"].is_u64() && h["tcp_rmem_max"].is_u64(), "{h}");
        assert!(h["one_stream_autotuned_bps"].is_u64(), "{h}");
    }
    assert!(v["path"]["min_rtt_us"].is_u64(), "{v}");
    assert!(v["path"]["best_rate_bps"].is_f64(), "{v}");
    let ideal: Vec<&serde_json::Value> = cells.iter().filter(|c| c["mode"] == "ideal").collect();
    assert_eq!(ideal.len(), 1, "{v}");
    assert!(
        ideal[0]["not_applied"]
            .as_str()
            .is_some_and(|w| w.contains("sweep")),
        "{v}"
    );
    v
}

#[test]
fn lab_remote_runs_its_cells_over_a_fake_ssh_and_marks_what_it_cannot_apply() {
    let t = Tmp::new("fake", PLAN);
    let rsh = t.0.join("fake-ssh");
    std::fs::write(
        &rsh,
        format!(
            "#!/bin/sh\nshift\nexport HOME='{}' SSH_CONNECTION='127.0.0.1 50000 127.0.0.1 22'\nexec sh -c \"$*\"\n",
            t.0.join("home").display()
        ),
    )
    .expect("write fake ssh");
    std::fs::set_permissions(&rsh, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = t.0.join("out");
    let o = std::process::Command::new(BIN)
        .args(["lab", "--remote", "fake", "--json", "--plan", &t.plan()])
        .arg("--out")
        .arg(&out)
        .args(["-e", rsh.to_str().expect("utf-8"), "--remote-tcptune", BIN])
        .stdin(Stdio::null())
        .output()
        .expect("run tcptune lab --remote");
    let v = check(&o);
    assert!(v["raised"].is_null(), "no raised cell in the plan: {v}");
    // --out: the same report as results.json, and report.html with a bar per cell that ran.
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).expect("results.json"))
            .expect("results.json is JSON");
    assert_eq!(saved, v);
    let page = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert_eq!(page.matches("<rect ").count(), 2, "{page}");
    assert!(page.contains("not applied"), "{page}");
}

#[test]
fn lab_remote_runs_across_an_emulated_path_through_sshd() {
    if !tcptune_testkit::require(
        "lab_remote_runs_across_an_emulated_path_through_sshd",
        sshd::NEEDS,
    ) {
        return;
    }
    let t = Tmp::new("sshd", PLAN_RAISED);
    let topo = Topology::up(&TopologyConfig::new(
        unique_name("labr"),
        PathConfig {
            delay: Duration::from_millis(5),
            ..PathConfig::default()
        },
    ))
    .unwrap_or_else(|e| panic!("up: {e}"));
    let sysctls = |side: Side| -> Vec<String> {
        ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"]
            .iter()
            .map(|k| {
                let o = topo
                    .command(side, "sysctl")
                    .args(["-n", k])
                    .output()
                    .expect("sysctl");
                text(&o.stdout)
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    };
    let before = (sysctls(Side::A), sysctls(Side::B));
    let server = Sshd::start(&topo, Side::B);
    let o = topo
        .command(Side::A, BIN)
        .args(["lab", "--remote", &server.destination(), "--json"])
        .args([
            "--plan",
            &t.plan(),
            "-e",
            &server.rsh(),
            "--remote-tcptune",
            BIN,
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run tcptune lab --remote in side A");
    let v = check(&o);
    // The raised cell ran with both sides' autotuning maxima raised to the plan's 64 MiB (the
    // host-global net.core keys are read-only inside the namespaces: left, and said), and
    // everything is back as it was.
    let raised = v["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .find(|c| c["host"] == "kernel_only")
        .expect("the kernel_only cell")
        .clone();
    assert!(raised["not_applied"].is_null(), "{v}");
    assert_eq!(raised["raised"], true);
    assert_eq!(raised["rates_bps"].as_array().map(Vec::len), Some(1), "{v}");
    let r = &v["raised"];
    assert_eq!(r["max_bytes"], 64u64 << 20, "{v}");
    for side in ["here", "there"] {
        let keys: Vec<&str> = r[side]
            .as_array()
            .unwrap_or_else(|| panic!("{side}: {v}"))
            .iter()
            .filter_map(|c| c["key"].as_str())
            .collect();
        // A namespace's default tcp_wmem maximum (4 MiB) is below 64 MiB; tcp_rmem's may be.
        assert!(keys.contains(&"net.ipv4.tcp_wmem"), "{side}: {v}");
        for c in r[side].as_array().into_iter().flatten() {
            assert!(
                c["set"].as_str().is_some_and(|s| s.ends_with(" 67108864")),
                "{c}"
            );
        }
    }
    assert!(
        r["restore_errors"].as_array().is_some_and(Vec::is_empty),
        "{v}"
    );
    let after = tcptune_testkit::wait_for(Duration::from_secs(10), || {
        (sysctls(Side::A), sysctls(Side::B)) == before
    });
    assert!(
        after,
        "limits not put back: before {before:?}, after {:?}",
        (sysctls(Side::A), sysctls(Side::B))
    );
    // Every far end exited with its session.
    let gone = tcptune_testkit::wait_for(Duration::from_secs(10), || {
        server
            .processes()
            .iter()
            .all(|(_, c)| !c.contains("--stdio") && !c.contains("hold-limits"))
    });
    assert!(gone, "far ends left: {:?}", server.processes());
    // The RTT measured is the real (here: emulated) path's, at least its propagation delay.
    assert!(
        v["path"]["min_rtt_us"]
            .as_u64()
            .is_some_and(|us| us >= 10_000),
        "{v}\nsshd's log:\n{}",
        std::fs::read_to_string(server.log()).unwrap_or_default()
    );
}
