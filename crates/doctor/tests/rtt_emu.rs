//! The handshake RTT measurement across the emulator at known delays: the measured minimum
//! never lies below the emulated RTT, the samples are consistent, and the longer path
//! measures longer.
//!
//! How close the median comes to the emulated RTT depends on the machine's load and the
//! build: the targets asserted here before (the median within max(2 ms, 5%) of the RTT, the
//! two paths' difference within 5 ms of 80 ms) are measured by `bench/test_timings.sh`
//! (ONLY=doctor_rtt, with `tcptune doctor`, which uses this measurement).

use std::net::SocketAddr;
use std::time::Duration;
use tcptune_doctor::path::{measure_rtt, RttConfig};
use tcptune_emu::{unique_name, PathConfig, Side, Topology, TopologyConfig};
use tcptune_testkit::Need;

/// The emulator runs here, root or rootless: the measurement runs in a process of its own
/// inside side A (this test binary again, as a helper), as `tcptune doctor` would.
fn can_run() -> bool {
    tcptune_testkit::require(module_path!(), &[Need::Emulator])
}

/// Handshake times measured from side A, in microseconds.
#[derive(Debug)]
struct Measured {
    min_us: u64,
    median_us: u64,
    max_us: u64,
}

fn measure_across(topo: &Topology, samples: u32) -> Measured {
    let b = topo.addr(Side::B);
    let listener = topo
        .tcp_listener(Side::B, 0)
        .unwrap_or_else(|e| panic!("listen in B: {e}"));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let target = SocketAddr::new(b, port);
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let out = topo
        .command(Side::A, exe)
        .args([
            "--exact",
            "helper_measure_rtt",
            "--include-ignored",
            "--nocapture",
        ])
        .env("TT_RTT_TARGET", target.to_string())
        .env("TT_RTT_SAMPLES", samples.to_string())
        .output()
        .unwrap_or_else(|e| panic!("starting the helper in A: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let nums: Vec<u64> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("tt-rtt "))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    listener.set_nonblocking(true).ok();
    while listener.accept().is_ok() {}
    match nums[..] {
        [min_us, median_us, max_us] => Measured {
            min_us,
            median_us,
            max_us,
        },
        _ => panic!(
            "measure {target} from A failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Not a test on its own: the measurement, run by `measure_across` inside side A.
#[test]
#[ignore = "helper process: measures the handshake RTT inside side A"]
fn helper_measure_rtt() {
    let (Ok(target), Ok(samples)) = (
        std::env::var("TT_RTT_TARGET"),
        std::env::var("TT_RTT_SAMPLES"),
    ) else {
        return;
    };
    let target: SocketAddr = target.parse().expect("TT_RTT_TARGET is an address");
    let cfg = RttConfig {
        samples: samples.parse().expect("TT_RTT_SAMPLES is a number"),
        timeout: Duration::from_secs(5),
        interval: Duration::from_millis(20),
    };
    let s = measure_rtt(target, &cfg).unwrap_or_else(|e| panic!("measure {target}: {e}"));
    println!("tt-rtt {} {} {}", s.min_us, s.median_us, s.max_us);
}

#[test]
fn handshake_rtt_matches_the_emulated_delay() {
    if !can_run() {
        return;
    }
    let mut medians = Vec::new();
    for one_way_ms in [10u64, 50] {
        let cfg = TopologyConfig::new(
            unique_name("docrtt"),
            PathConfig {
                delay: Duration::from_millis(one_way_ms),
                ..PathConfig::default()
            },
        );
        let topo = Topology::up(&cfg).unwrap_or_else(|e| panic!("up: {e}"));
        let want_us = 2 * one_way_ms * 1000;
        let s = measure_across(&topo, 9);
        eprintln!(
            "one-way {one_way_ms} ms: handshake RTT min {} us, median {} us, max {} us (emulated {want_us} us)",
            s.min_us, s.median_us, s.max_us
        );
        // The emulator never delivers early: no sample is shorter than the RTT (0.2 ms
        // for timer granularity).
        assert!(s.min_us + 200 >= want_us, "{s:?}");
        assert!(s.min_us <= s.median_us && s.median_us <= s.max_us, "{s:?}");
        // A SYN lost and retransmitted (after 1 s) would be the only way past this.
        assert!(s.median_us < want_us + 500_000, "{s:?}");
        medians.push(s.median_us);
        drop(topo);
    }
    // The longer path measures longer (by 80 ms: see bench/test_timings.sh).
    assert!(medians[1] > medians[0], "{medians:?}");
}
