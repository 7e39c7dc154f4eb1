//! `tcptune emu` end to end, in the mode the test process gets (root mode as root, rootless
//! mode otherwise; CI runs them both ways): run (and what goes to stdout), up, exec, status,
//! down, exit codes, Ctrl-C.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use tcptune_testkit::Need;

fn tcptune() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tcptune"))
}

fn can_run_as_root(test: &str) -> bool {
    tcptune_testkit::require(test, &[Need::Root, Need::Tun])
}

/// The emulator runs here, root or rootless.
fn can_run(test: &str) -> bool {
    tcptune_testkit::require(test, &[Need::Emulator])
}

/// The emulator runs here and `ping` is installed (the command run across the path).
fn can_run_ping(test: &str) -> bool {
    tcptune_testkit::require(test, &[Need::Emulator, Need::Program("ping")])
}

fn rootless() -> bool {
    tcptune_testkit::emulator_mode() == Some(tcptune_emu::Mode::Rootless)
}

/// The mode `emu` says it used (its "mode ..." line on stderr).
fn said_mode(stderr: &str) -> Option<&str> {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("tcptune emu: mode "))
        .and_then(|l| l.split(':').next())
}

/// A topology name unique to this process and call.
fn name(prefix: &str) -> String {
    tcptune_emu::unique_name(prefix)
}

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Takes a daemon down even if the test fails half-way.
struct DownOnDrop(String);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        let _ = tcptune().args(["emu", "down", &self.0]).output();
    }
}

#[test]
fn run_passes_peer_address_and_exit_code_and_cleans_up() {
    if !can_run_ping("run_passes_peer_address_and_exit_code_and_cleans_up") {
        return;
    }
    let n = name("r");
    let stats = std::env::temp_dir().join(format!("{n}.json"));
    let out = run(tcptune()
        .args([
            "emu",
            "run",
            "--name",
            &n,
            "--delay",
            "5ms",
            "--rate",
            "100mbit",
            "--server",
            "sleep 60",
            "--stats-json",
        ])
        .arg(&stats)
        .args([
            "--",
            "sh",
            "-c",
            "test \"$TCPTUNE_PEER\" = 198.19.0.1 && test \"$TCPTUNE_SELF\" = 198.18.0.1 && \
         ping -c 2 -i 0.2 -W 2 $TCPTUNE_PEER >/dev/null && exit 3",
        ]));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "stderr: {stderr}");
    let want = if rootless() { "rootless" } else { "root" };
    assert_eq!(said_mode(&stderr), Some(want), "{stderr}");
    assert!(!Path::new(&format!("/run/netns/tt-{n}-a")).exists());
    assert!(!tcptune_emu::state::record_path(&n).exists());
    let json = std::fs::read_to_string(&stats).unwrap_or_default();
    let _ = std::fs::remove_file(&stats);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
    assert_eq!(v["schema_version"], 1, "{json}");
    assert!(v["a_to_b"]["packets_out"].as_u64() >= Some(2), "{json}");
}

#[test]
fn run_keeps_cmd_stdout_parseable_while_the_server_talks() {
    if !can_run("run_keeps_cmd_stdout_parseable_while_the_server_talks")
        || !tcptune_testkit::require(
            "run_keeps_cmd_stdout_parseable_while_the_server_talks",
            &[Need::Program("iperf3")],
        )
    {
        return;
    }
    // The server writes to its stdout and stderr; CMD's stdout must still be one JSON
    // document (the `emu run ... -- iperf3 -J | jq` use).
    let out = run(tcptune().args([
        "emu",
        "run",
        "--rtt",
        "20ms",
        "--rate",
        "100mbit",
        "--server",
        "echo server-banner; echo server-warning >&2; iperf3 -s -1",
        "--",
        "sh",
        "-c",
        "iperf3 -c $TCPTUNE_PEER -t 2 -J",
    ]));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stderr: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("CMD's stdout is not clean JSON ({e}):\n{stdout}"));
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    // Data crossed, and never faster than the bottleneck (goodput is below the IP rate).
    // How close it gets to the rate is measured by bench/emu_rates.sh, not asserted here.
    assert!(bps > 0.0 && bps <= 100e6, "received {bps} bit/s; {stdout}");
    assert!(stderr.contains("[server] server-banner\n"), "{stderr}");
    assert!(stderr.contains("[server] server-warning\n"), "{stderr}");
    assert!(!stdout.contains("server-"), "{stdout}");
}

#[test]
fn run_json_puts_the_report_on_stdout_and_cmd_output_on_stderr() {
    if !can_run_ping("run_json_puts_the_report_on_stdout_and_cmd_output_on_stderr") {
        return;
    }
    let out = run(tcptune().args([
        "emu",
        "run",
        "--json",
        "--rtt",
        "2ms",
        "--server",
        "echo srv-line; sleep 60",
        "--",
        "sh",
        "-c",
        "echo cmd-line; ping -c 2 -i 0.2 -W 2 $TCPTUNE_PEER >/dev/null; exit 3",
    ]));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "stderr: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{stdout}"));
    assert_eq!(v["schema_version"], 2, "{stdout}");
    assert_eq!(v["exit_code"], 3, "{stdout}");
    let want = if rootless() { "rootless" } else { "root" };
    assert_eq!(v["mode"], want, "{stdout}");
    assert!(v["interrupted_by"].is_null(), "{stdout}");
    assert!(
        v["stats"]["a_to_b"]["packets_out"].as_u64() >= Some(2),
        "{stdout}"
    );
    assert!(stderr.contains("cmd-line\n"), "{stderr}");
    assert!(stderr.contains("[server] srv-line\n"), "{stderr}");
}

#[test]
fn run_extra_path_reaches_side_bs_second_address_over_its_own_path() {
    if !can_run_ping("run_extra_path_reaches_side_bs_second_address_over_its_own_path") {
        return;
    }
    // Pings to 198.19.0.2 cross the extra path only: its counters see them, path 0's none.
    let out = run(tcptune().args([
        "emu",
        "run",
        "--json",
        "--rtt",
        "20ms",
        "--extra-path",
        "rtt=2ms",
        "--",
        "ping",
        "-c",
        "3",
        "-i",
        "0.2",
        "-W",
        "2",
        "198.19.0.2",
    ]));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{stdout}"));
    assert_eq!(v["extra_paths"][0]["rtt_us"], 2000.0, "{stdout}");
    let extra = &v["stats"]["extra"][0];
    assert!(
        extra["a_to_b"]["packets_out"].as_u64() >= Some(3),
        "{stdout}"
    );
    assert!(
        extra["b_to_a"]["packets_out"].as_u64() >= Some(3),
        "{stdout}"
    );
    assert_eq!(v["stats"]["a_to_b"]["packets_out"], 0, "{stdout}");
    let bad = run(tcptune().args(["emu", "run", "--extra-path", "speed=1", "--", "true"]));
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
}

#[test]
fn server_log_takes_the_server_output_off_stderr() {
    if !can_run("server_log_takes_the_server_output_off_stderr") {
        return;
    }
    let log = std::env::temp_dir().join(format!("{}.log", name("slog")));
    let out = run(tcptune()
        .args([
            "emu",
            "run",
            "--rtt",
            "2ms",
            "--server",
            "echo to-log; echo err-to-log >&2; sleep 60",
            "--server-log",
        ])
        .arg(&log)
        .args(["--", "sh", "-c", "sleep 0.3; echo cmd-out"]));
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "stderr: {stderr}");
    assert_eq!(text(&out.stdout), "cmd-out\n");
    assert!(
        logged.contains("to-log\n") && logged.contains("err-to-log\n"),
        "{logged}"
    );
    assert!(!stderr.contains("[server]"), "{stderr}");
}

#[test]
fn up_exec_status_down_cycle() {
    if !can_run_ping("up_exec_status_down_cycle") {
        return;
    }
    let n = name("u");
    let out = run(tcptune().args([
        "emu",
        "up",
        &n,
        "--rtt",
        "10ms",
        "--rate",
        "50mbit",
        "--loss",
        "0%",
        "--sysctl",
        "net.ipv4.tcp_wmem=4096 16384 8388608",
        "--json",
    ]));
    let _guard = DownOnDrop(n.clone());
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(v["netns_a"], format!("tt-{n}-a"));
    assert_eq!(v["mode"], if rootless() { "rootless" } else { "root" });
    // Named (ip netns) in root mode only.
    assert_eq!(
        Path::new(&format!("/run/netns/tt-{n}-a")).exists(),
        !rootless()
    );

    // Name taken: exit 5.
    let again = run(tcptune().args(["emu", "up", &n]));
    assert_eq!(again.status.code(), Some(5), "{}", text(&again.stderr));

    // exec (a separate process: in rootless mode it joins the daemon's user namespace):
    // sysctl applied, root inside, peer reachable, exit code passed on.
    let ex = run(tcptune().args([
        "emu",
        "exec",
        &n,
        "a",
        "--",
        "sh",
        "-c",
        "cat /proc/sys/net/ipv4/tcp_wmem; id -u; ping -c 3 -i 0.2 -W 2 $TCPTUNE_PEER >/dev/null && exit 4",
    ]));
    assert_eq!(ex.status.code(), Some(4), "stderr: {}", text(&ex.stderr));
    assert!(text(&ex.stdout).contains("8388608"));
    assert!(
        text(&ex.stdout).trim_end().ends_with("\n0"),
        "{}",
        text(&ex.stdout)
    );
    // A server started by one exec is reached from another: both in the daemon's namespaces.
    let srv = run(tcptune().args([
        "emu",
        "exec",
        &n,
        "b",
        "--",
        "sh",
        "-c",
        "sleep 30 </dev/null >/dev/null 2>&1 &",
    ]));
    assert!(srv.status.success(), "stderr: {}", text(&srv.stderr));
    let record = tcptune_emu::state::load(&n).unwrap_or_else(|e| panic!("record: {e}"));
    assert!(tcptune_testkit::wait_for(Duration::from_secs(3), || {
        !record.processes().is_empty()
    }));

    // status: counters of the pings (published every 100-250 ms).
    std::thread::sleep(Duration::from_millis(600));
    let st = run(tcptune().args(["emu", "status", &n, "--json"]));
    assert!(st.status.success());
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap_or_default();
    let t = &v["topologies"][0];
    assert_eq!(t["alive"], true);
    assert_eq!(t["owner_kind"], "daemon");
    assert!(
        t["stats"]["a_to_b"]["packets_out"].as_u64() >= Some(3),
        "{}",
        text(&st.stdout)
    );
    let human = run(tcptune().args(["emu", "status"]));
    assert!(text(&human.stdout).contains(&n));

    let down = run(tcptune().args(["emu", "down", &n]));
    assert!(down.status.success(), "stderr: {}", text(&down.stderr));
    assert!(!Path::new(&format!("/run/netns/tt-{n}-a")).exists());
    // The sleeper exec left behind went down with the path.
    assert!(record.processes().is_empty());
    let gone = run(tcptune().args(["emu", "status", &n]));
    assert_eq!(gone.status.code(), Some(1));
    let gone = run(tcptune().args(["emu", "exec", &n, "a", "--", "true"]));
    assert_eq!(gone.status.code(), Some(1));
}

#[test]
fn bad_options_are_usage_errors() {
    for args in [
        vec!["emu", "up", "x", "--queue", "lots"],
        vec!["emu", "up", "x", "--loss", "150%"],
        vec!["emu", "up", "x", "--delay", "25"],
        vec!["emu", "up", "x", "--sysctl", "net.core.rmem_max=1"],
        vec!["emu", "up", "bad/name"],
        vec!["emu", "run", "--delay", "1ms"],
    ] {
        let out = run(tcptune().args(&args));
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn interrupted_run_tears_down_and_exits_130() {
    if !can_run("interrupted_run_tears_down_and_exits_130") {
        return;
    }
    let n = name("i");
    let mut child = tcptune()
        .args([
            "emu",
            "run",
            "--name",
            &n,
            "--delay",
            "1ms",
            "--server",
            "sleep 120",
            "--",
            "sleep",
            "120",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let ns = format!("/run/netns/tt-{n}-a");
    let record = tcptune_emu::state::record_path(&n);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !tcptune_emu::state::stats_path(&n).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let processes = tcptune_emu::state::load(&n)
        .map(|r| r.processes())
        .unwrap_or_default();
    assert!(!processes.is_empty(), "nothing runs in the path");
    // SAFETY: kill(2) on our child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap_or_else(|e| panic!("wait: {e}"));
    assert_eq!(status.code(), Some(130));
    assert!(!Path::new(&ns).exists(), "namespace left behind");
    assert!(!record.exists());
    // Gone, or a zombie until whoever inherited it reaps it.
    let gone = |pid: &i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
        })
    };
    for pid in processes {
        assert!(
            tcptune_testkit::wait_for(Duration::from_secs(3), || gone(&pid)),
            "process {pid} of the path survived"
        );
    }
}

#[test]
fn without_net_admin_capability_root_mode_exits_5_and_auto_goes_rootless() {
    let test = "without_net_admin_capability_root_mode_exits_5_and_auto_goes_rootless";
    if !can_run_as_root(test) || !tcptune_testkit::require_program(test, "setpriv") {
        return;
    }
    // Drop CAP_NET_ADMIN and CAP_SYS_ADMIN from a root process with util-linux's setpriv.
    let without_caps = |mode: &str| {
        Command::new("setpriv")
            .args([
                "--bounding-set=-net_admin,-sys_admin",
                "--inh-caps=-net_admin,-sys_admin",
                env!("CARGO_BIN_EXE_tcptune"),
                "emu",
                "run",
                "--",
                "true",
            ])
            .env("TCPTUNE_EMU_MODE", mode)
            .output()
    };
    let out = without_caps("root").unwrap_or_else(|e| panic!("setpriv: {e}"));
    assert_eq!(out.status.code(), Some(5), "stderr: {}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("needs root"),
        "{}",
        text(&out.stderr)
    );
    // The same process without forcing root mode builds its topology rootless.
    if tcptune_testkit::require(
        "without_net_admin_capability_auto_goes_rootless",
        &[Need::UserNs],
    ) {
        let out = without_caps("auto").unwrap_or_else(|e| panic!("setpriv: {e}"));
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "stderr: {stderr}");
        assert_eq!(said_mode(&stderr), Some("rootless"), "{stderr}");
    }
}

#[test]
fn rootless_mode_can_be_forced_and_says_what_it_cannot_do() {
    if !tcptune_testkit::require(
        "rootless_mode_can_be_forced_and_says_what_it_cannot_do",
        &[Need::UserNs, Need::Program("ping")],
    ) {
        return;
    }
    let out = run(tcptune()
        .env("TCPTUNE_EMU_MODE", "rootless")
        .args(["emu", "run", "--rtt", "2ms", "--", "sh", "-c"])
        .arg("ping -c 2 -i 0.2 -W 2 $TCPTUNE_PEER >/dev/null && id -u"));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "stderr: {stderr}");
    assert_eq!(text(&out.stdout), "0\n");
    assert_eq!(said_mode(&stderr), Some("rootless"), "{stderr}");
    assert!(
        stderr.contains("cannot raise the global net.core.rmem_max/wmem_max"),
        "{stderr}"
    );
}
