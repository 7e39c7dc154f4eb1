//! `auto` on a path it has never seen (no probe, no database entry: it measures the rate
//! in band), 25-200 ms x 1, 4 and 8 streams at 1 Gbit/s: the memory it holds in the lab's
//! units, and how long the transfer takes against kernel autotuning and the rule before the
//! buffers stopped keeping room to double once the pipe was full.
//!
//! Print the table with
//! `cargo test --release -p tcptune-core --test sim_new_path -- --nocapture`.

use std::sync::OnceLock;
use std::time::Duration;
use tcptune_core::sim::{run, SimConfig, SimOutcome};
use tcptune_core::TuneMode;

/// Completion (first SYN to last byte, seconds) of each row under the rule before (commit
/// 82e4978: room to double until the client's full-pipe estimator reported, and every
/// stream the settled plan counted opened however little was left).
const BEFORE: [(u64, u32, f64); 12] = [
    (25, 1, 1.331),
    (25, 4, 1.331),
    (25, 8, 1.285),
    (50, 1, 1.530),
    (50, 4, 1.530),
    (50, 8, 1.530),
    (100, 1, 2.149),
    (100, 4, 2.149),
    (100, 8, 2.149),
    (200, 1, 3.401),
    (200, 4, 3.401),
    (200, 8, 3.401),
];

struct Row {
    rtt_ms: u64,
    streams: u32,
    auto: SimOutcome,
    kernel: SimOutcome,
    before_s: f64,
    bdp: f64,
}

impl Row {
    /// The lab's memory figure: the larger end's sum of per-stream peaks, in `setsockopt`
    /// units (the kernel holds twice the value set), over the BDP.
    fn memory_bdp(&self) -> f64 {
        let o = &self.auto;
        o.peak_sndbuf.max(o.peak_rcvbuf).0 as f64 / 2.0 / self.bdp
    }
}

fn rows() -> &'static [Row] {
    static ROWS: OnceLock<Vec<Row>> = OnceLock::new();
    ROWS.get_or_init(|| {
        let rows: Vec<Row> = BEFORE
            .iter()
            .map(|&(rtt_ms, streams, before_s)| {
                let rtt = Duration::from_millis(rtt_ms);
                let mut new_path = SimConfig::paper(TuneMode::Auto, rtt, streams);
                new_path.probe_enabled = false;
                let kernel = SimConfig::paper(TuneMode::Kernel, rtt, streams);
                Row {
                    rtt_ms,
                    streams,
                    bdp: new_path.path.bdp().0 as f64,
                    auto: run(&new_path),
                    kernel: run(&kernel),
                    before_s,
                }
            })
            .collect();
        println!(
            "{:>6} {:>2} {:>7} {:>7} {:>7} {:>8} {:>7} {:>7} {:>7} {:>4}",
            "rtt_ms",
            "P",
            "done_s",
            "before",
            "kernel",
            "/before",
            "snd/BDP",
            "rcv/BDP",
            "mem/BDP",
            "used"
        );
        for r in &rows {
            let o = &r.auto;
            let done = o.completion.as_secs_f64();
            println!(
                "{:>6} {:>2} {:>7.3} {:>7.3} {:>7.3} {:>8.3} {:>7.2} {:>7.2} {:>7.2} {:>4}",
                r.rtt_ms,
                r.streams,
                done,
                r.before_s,
                r.kernel.completion.as_secs_f64(),
                done / r.before_s,
                o.peak_sndbuf.0 as f64 / 2.0 / r.bdp,
                o.peak_rcvbuf.0 as f64 / 2.0 / r.bdp,
                r.memory_bdp(),
                o.streams_used
            );
        }
        rows
    })
}

#[test]
fn on_a_new_path_auto_holds_at_most_twice_the_bdp_at_either_end() {
    for r in rows() {
        assert!(!r.auto.capped);
        assert_eq!(r.auto.bytes, 128 << 20);
        assert!(
            r.auto.measured_in.is_some(),
            "{} ms x {}: measured in band",
            r.rtt_ms,
            r.streams
        );
        assert!(
            r.memory_bdp() <= 2.0,
            "{} ms x {}: {:.2} x BDP",
            r.rtt_ms,
            r.streams,
            r.memory_bdp()
        );
    }
}

#[test]
fn on_a_new_path_the_memory_is_not_bought_with_time() {
    for r in rows() {
        let done = r.auto.completion.as_secs_f64();
        assert!(
            done <= 1.02 * r.before_s,
            "{} ms x {}: {done:.3} s against {:.3} s before",
            r.rtt_ms,
            r.streams,
            r.before_s
        );
    }
}
