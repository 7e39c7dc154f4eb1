//! A bulk TCP flow (iperf3) across real topologies (root or rootless mode): what must hold however loaded the
//! machine and whatever the build (debug too): data crosses, no packet is lost without being
//! counted (every packet in is delivered or counted as a drop, and none stays stuck inside),
//! random loss happens only where configured, and the receiver never gets more than the
//! bottleneck can carry.
//!
//! How close a flow gets to the configured rate, and how late packets leave, depend on the
//! machine's load and the build: those are measured, with medians and ratios, by
//! bench/emu_rates.sh (which holds the targets these tests used to assert) and
//! bench/emu_accuracy.sh.

mod common;

use common::{can_run, wait_for};
use std::process::Stdio;
use std::time::Duration;
use tcptune_core::Rate;
use tcptune_emu::{unique_name, DirStats, PathConfig, Side, Topology, TopologyConfig};

fn have_iperf3(test: &str) -> bool {
    tcptune_testkit::require(test, &[tcptune_testkit::Need::Program("iperf3")])
}

/// What one flow left: the counters of both directions once the path is empty, and iperf3's
/// receiver-side goodput (bit/s) and bytes.
struct Flow {
    a_to_b: DirStats,
    b_to_a: DirStats,
    goodput_bps: f64,
    received_bytes: u64,
}

/// Run iperf3 A -> B for `secs` over a fresh topology, then wait for the path to drain.
fn flow(prefix: &str, path: PathConfig, secs: u64) -> Flow {
    let cfg = TopologyConfig::new(unique_name(prefix), path)
        .sysctl("net.ipv4.tcp_rmem", "4096 131072 33554432")
        .sysctl("net.ipv4.tcp_wmem", "4096 16384 33554432");
    let topo = Topology::up(&cfg).unwrap_or_else(|e| panic!("up: {e}"));
    let mut server = topo.command(Side::B, "iperf3");
    server.args(["-s", "-1"]).stdout(Stdio::null());
    let _server = tcptune_testkit::ChildGuard::spawn(&mut server);
    assert!(
        wait_for(Duration::from_secs(10), || topo
            .tcp_listeners(Side::B)
            .unwrap_or(0)
            > 0),
        "iperf3 server did not listen"
    );
    let out = topo
        .command(Side::A, "iperf3")
        .args(["-c", &topo.addr(Side::B).to_string(), "-J", "-t"])
        .arg(secs.to_string())
        .stdout(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("iperf3 -c: {e}"));
    assert!(
        out.status.success(),
        "iperf3 -c: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let received = &v["end"]["sum_received"];
    // Every packet has left the emulator once nothing is in flight in either direction
    // (the counters are published every 100 ms).
    let drained = wait_for(Duration::from_secs(5), || {
        let s = topo.stats();
        s.a_to_b.in_flight_packets == 0 && s.b_to_a.in_flight_packets == 0
    });
    std::thread::sleep(Duration::from_millis(250));
    let s = topo.stats();
    assert!(drained, "packets stuck in the emulator: {s:?}");
    drop(topo);
    Flow {
        a_to_b: s.a_to_b,
        b_to_a: s.b_to_a,
        goodput_bps: received["bits_per_second"].as_f64().unwrap_or(0.0),
        received_bytes: received["bytes"].as_u64().unwrap_or(0),
    }
}

/// Every packet that entered is delivered or counted as dropped, and nothing is inside.
fn assert_conserved(label: &str, d: &DirStats) {
    let accounted =
        d.packets_out + d.drops.queue + d.drops.loss + d.drops.malformed + d.drops.write_failed;
    assert_eq!(d.packets_in, accounted, "{label}: {d:?}");
    assert_eq!(d.in_flight_packets, 0, "{label}: {d:?}");
    assert!(d.bytes_out <= d.bytes_in, "{label}: {d:?}");
    assert_eq!(d.drops.malformed, 0, "{label}: {d:?}");
}

/// One flow at a time: two flows on two cores would only slow each other down.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_bulk_flow_is_conserved_and_never_beats_the_bottleneck() {
    let t = "a_bulk_flow_is_conserved_and_never_beats_the_bottleneck";
    if !(can_run(t) && have_iperf3(t)) {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rate = Rate::mbit(100);
    let f = flow(
        "load",
        PathConfig {
            delay: Duration::from_millis(10),
            rate: Some(rate),
            ..PathConfig::default()
        },
        3,
    );
    eprintln!(
        "100 Mbit/s, 20 ms: goodput {:.1} Mbit/s, {} packets a->b, queue drops {}",
        f.goodput_bps / 1e6,
        f.a_to_b.packets_out,
        f.a_to_b.drops.queue
    );
    assert!(f.received_bytes > 0, "no data crossed");
    assert!(f.a_to_b.packets_out > 0 && f.b_to_a.packets_out > 0);
    // TCP payload is less than the IP bytes the link serializes at the rate.
    assert!(
        f.goodput_bps <= rate.bits_per_sec() as f64,
        "goodput {} bit/s above the {rate} bottleneck",
        f.goodput_bps
    );
    assert_conserved("a->b", &f.a_to_b);
    assert_conserved("b->a", &f.b_to_a);
    assert_eq!(
        f.a_to_b.drops.loss + f.b_to_a.drops.loss,
        0,
        "no loss configured"
    );
}

#[test]
fn random_loss_is_counted_and_every_packet_accounted_for() {
    let t = "random_loss_is_counted_and_every_packet_accounted_for";
    if !(can_run(t) && have_iperf3(t)) {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f = flow(
        "loss",
        PathConfig {
            delay: Duration::from_millis(5),
            rate: Some(Rate::mbit(200)),
            loss: 0.005,
            ..PathConfig::default()
        },
        3,
    );
    eprintln!(
        "0.5% loss: {} of {} packets a->b lost",
        f.a_to_b.drops.loss, f.a_to_b.packets_in
    );
    assert!(f.received_bytes > 0, "no data crossed");
    // Thousands of packets at 0.5%: some are lost (a seeded generator, not a coin toss).
    assert!(f.a_to_b.packets_in > 1000, "{:?}", f.a_to_b);
    assert!(f.a_to_b.drops.loss > 0, "{:?}", f.a_to_b);
    assert_conserved("a->b", &f.a_to_b);
    assert_conserved("b->a", &f.b_to_a);
}
