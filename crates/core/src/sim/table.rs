//! The paper's matrix in the simulator: every mode on every RTT and stream count, against
//! the best fixed buffer ("ideal"), printed as a table (the snapshot the tests check).

use super::{raised_limits, run, SimConfig, SimOutcome};
use crate::mode::TuneMode;
use crate::tuner::HostLimits;
use crate::units::Bytes;
use std::fmt::Write as _;
use std::time::Duration;

/// One line of the table.
#[derive(Clone, Debug)]
pub struct Row {
    /// Round-trip time of the path.
    pub rtt: Duration,
    /// Streams the transfer started with.
    pub streams: u32,
    /// Mode label (`auto`, `kernel+` for raised limits, `ideal(4MiB)`).
    pub label: String,
    /// What the simulation measured.
    pub outcome: SimOutcome,
    /// Throughput as a fraction of the ideal row's.
    pub of_ideal: f64,
}

/// The modes the table runs under default limits, in order.
pub fn default_modes() -> Vec<TuneMode> {
    TuneMode::all()
}

/// The best fixed buffer (same `SO_SNDBUF` and `SO_RCVBUF` on every stream, raised limits)
/// among powers of two from half to eight times the per-stream BDP (at least 64 KiB).
pub fn ideal(rtt: Duration, streams: u32) -> (Bytes, SimOutcome) {
    let probe = SimConfig::paper(TuneMode::Kernel, rtt, streams);
    let per_stream = probe.path.bdp().0 / u64::from(streams.max(1));
    let mut size = (per_stream / 2).max(64 * 1024).next_power_of_two();
    let top = (per_stream * 8).max(256 * 1024);
    let mut best: Option<(Bytes, SimOutcome)> = None;
    while size <= top {
        let cfg = SimConfig::paper(TuneMode::Fixed(Bytes(size)), rtt, streams)
            .with_limits(raised_limits());
        let out = run(&cfg);
        if best
            .as_ref()
            .is_none_or(|(_, b)| out.throughput > b.throughput)
        {
            best = Some((Bytes(size), out));
        }
        size *= 2;
    }
    best.unwrap_or_else(|| {
        let cfg = SimConfig::paper(TuneMode::Fixed(Bytes::mib(4)), rtt, streams)
            .with_limits(raised_limits());
        (Bytes::mib(4), run(&cfg))
    })
}

/// Run the matrix: for each RTT and stream count, `ideal`, every mode under default limits,
/// `kernel`/`auto` under raised limits (suffix `+`), `auto` fed by a probe that is one
/// socket wide (`auto-1p`: a rate that is only a lower bound), `auto` without any rate
/// (`auto-0`: no probe, no database entry: it measures the rate in band, as on a path it has
/// never seen) and `auto` told not to measure at all (`auto-nm`: `--no-probe`).
pub fn rows(rtts: &[Duration], streams: &[u32]) -> Vec<Row> {
    let mut out = Vec::new();
    for &rtt in rtts {
        for &p in streams {
            let (size, ideal_out) = ideal(rtt, p);
            let ideal_bps = ideal_out.throughput.0.max(1) as f64;
            let mut push = |label: String, outcome: SimOutcome| {
                let of_ideal = outcome.throughput.0 as f64 / ideal_bps;
                out.push(Row {
                    rtt,
                    streams: p,
                    label,
                    outcome,
                    of_ideal,
                });
            };
            push(format!("ideal({size})"), ideal_out.clone());
            let runs: Vec<(String, TuneMode, HostLimits)> = default_modes()
                .into_iter()
                .map(|m| (m.to_string(), m, HostLimits::linux_defaults()))
                .chain([
                    ("kernel+".to_string(), TuneMode::Kernel, raised_limits()),
                    ("auto+".to_string(), TuneMode::Auto, raised_limits()),
                ])
                .collect();
            for (label, mode, limits) in runs {
                let cfg = SimConfig::paper(mode, rtt, p).with_limits(limits);
                push(label, run(&cfg));
            }
            let mut one_socket = SimConfig::paper(TuneMode::Auto, rtt, p);
            one_socket.probe_single_socket = true;
            push("auto-1p".to_string(), run(&one_socket));
            let mut blind = SimConfig::paper(TuneMode::Auto, rtt, p);
            blind.probe_enabled = false;
            push("auto-0".to_string(), run(&blind));
            blind.in_band = false;
            push("auto-nm".to_string(), run(&blind));
        }
    }
    out
}

fn mib(b: Bytes) -> f64 {
    b.as_mib_f64()
}

/// Render rows as a fixed-width table.
pub fn render(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>6} {:>2} {:<13} {:>7} {:>6} {:>6} {:>4} {:>8} {:>8} {:>8} {:>7} {:>7} {:>6}",
        "rtt_ms",
        "P",
        "mode",
        "Mbit/s",
        "done_s",
        "ideal",
        "used",
        "sndbuf",
        "queued",
        "rcvbuf",
        "q/BDP",
        "retx",
        "capped"
    );
    for r in rows {
        let bdp = crate::units::Rate::gbit(1).bdp(r.rtt).0.max(1) as f64;
        let o = &r.outcome;
        let _ = writeln!(
            s,
            "{:>6} {:>2} {:<13} {:>7.1} {:>6.3} {:>6.2} {:>4} {:>8.2} {:>8.2} {:>8.2} {:>7.2} {:>7.2} {:>6}",
            crate::units::format_duration(r.rtt).trim_end_matches("ms"),
            r.streams,
            r.label,
            o.throughput.as_mbit_f64(),
            o.completion.as_secs_f64(),
            r.of_ideal,
            o.streams_used,
            mib(o.peak_sndbuf),
            mib(o.peak_wmem_queued),
            mib(o.peak_rcvbuf),
            o.peak_wmem_queued.0 as f64 / bdp,
            mib(o.retransmitted),
            if o.capped { "yes" } else { "" }
        );
    }
    s
}

/// The standard table: RTT 0.5, 25, 50, 100, 200 ms; 1 and 4 streams; 1 Gbit/s.
pub fn paper_table() -> String {
    let rtts: Vec<Duration> = [500u64, 25_000, 50_000, 100_000, 200_000]
        .iter()
        .map(|&us| Duration::from_micros(us))
        .collect();
    let header = "# tcptune-core simulation: 1 Gbit/s, queue 1 BDP, 128 x 1 MiB, CUBIC-like sender.\n\
                  # Modes under default limits (tcp_wmem max 4 MiB, *mem_max 4 MiB, tcp_rmem max 32 MiB);\n\
                  # '+' rows and ideal (best fixed buffer) under raised limits (256 MiB);\n\
                  # auto-1p: auto fed by a lower-bound rate (a one-stream probe: what one socket carries);\n\
                  # auto-0: auto without any rate (it measures in band);\n\
                  # auto-nm: auto told not to measure (slow-start decisions only).\n\
                  # done_s: from the first SYN to the last byte (what a user waits for, less setup);\n\
                  # sndbuf/queued/rcvbuf: MiB, sum over streams of per-stream peaks; q/BDP: queued / BDP;\n\
                  # retx: MiB retransmitted.\n";
    format!("{header}{}", render(&rows(&rtts, &[1, 4])))
}
