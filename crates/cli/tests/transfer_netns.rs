//! `tcptune send` between two network namespaces with different buffer limits: each end's
//! tuner gets its own namespace's limits, and the report says which were which.
//!
//! Needs network namespaces of its own (root, or a user namespace as an ordinary user); must
//! not skip under CI.

use std::process::Stdio;
use std::time::Duration;
use tcptune_testkit::{wait_for, ChildGuard, Need, Netns};

const BIN: &str = env!("CARGO_BIN_EXE_tcptune");

#[test]
fn each_end_tunes_with_its_own_namespaces_limits() {
    if !tcptune_testkit::require(
        "each_end_tunes_with_its_own_namespaces_limits",
        &[Need::Netns, Need::Program("sysctl"), Need::Program("ss")],
    ) {
        return;
    }
    // a at 10.231.0.1, b at 10.231.0.2.
    let (a, b) = Netns::veth_pair("tx");
    a.set_sysctl("net.ipv4.tcp_wmem", "4096 16384 3145728");
    b.set_sysctl("net.ipv4.tcp_rmem", "4096 131072 7340032");
    let server = ChildGuard::spawn(
        b.command(BIN)
            .args(["serve", "--bind", "10.231.0.2", "--port", "5310", "--json"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let listening = || {
        let o = b
            .command("ss")
            .args(["-Htln", "sport = :5310"])
            .output()
            .expect("ss");
        !String::from_utf8_lossy(&o.stdout).trim().is_empty()
    };
    assert!(
        wait_for(Duration::from_secs(10), listening),
        "server did not listen"
    );
    for reverse in [false, true] {
        let mut args = vec![
            "send",
            "10.231.0.2",
            "--tune",
            "kernel",
            "-n",
            "8",
            "--json",
            "--no-path-db",
        ];
        if reverse {
            args.push("-R");
        }
        let o = a.command(BIN).args(&args).output().expect("send");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        let t = &v["start"]["tcptune"];
        let (client, server_side) = if reverse {
            (&t["receiver_limits"], &t["sender_limits"])
        } else {
            (&t["sender_limits"], &t["receiver_limits"])
        };
        assert_eq!(
            client["tcp_wmem_bytes"][2], 3_145_728,
            "client's namespace: {t}"
        );
        assert_eq!(
            server_side["tcp_rmem_bytes"][2], 7_340_032,
            "server's namespace: {t}"
        );
        assert_eq!(
            client["tcp_rmem_bytes"][2], 33_554_432,
            "untouched default in the client's: {t}"
        );
        assert_eq!(v["end"]["tcptune"]["complete"], true);
        assert!(
            t["path_hint"]["rtt_us"].is_u64(),
            "control RTT measured: {t}"
        );
    }
    drop(server);
}
