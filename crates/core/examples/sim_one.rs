//! Compare auto on a path never seen (measured in band), auto on a known path, the best fixed
//! size and kernel autotuning in the simulation: completion time from the first SYN and
//! memory (setsockopt units, x BDP). A development aid for the in-band measurement.
use std::time::Duration;
use tcptune_core::sim::{raised_limits, run, SimConfig};
use tcptune_core::{Bytes, TuneMode};

fn main() {
    let rtts: Vec<f64> = std::env::args()
        .nth(1)
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![25.0, 50.0, 100.0, 200.0]);
    println!("rtt   P  mode        completion  Mbit/s  streams  mem/BDP  measured");
    for rtt in rtts {
        let d = Duration::from_secs_f64(rtt / 1000.0);
        for p in [1u32, 4, 8] {
            let bdp = tcptune_core::Rate::gbit(1).bdp(d).0 as f64;
            let mut rows = Vec::new();
            let mut new = SimConfig::paper(TuneMode::Auto, d, p);
            new.probe_enabled = false;
            rows.push(("auto-new", new));
            rows.push(("auto-known", SimConfig::paper(TuneMode::Auto, d, p)));
            rows.push(("kernel", SimConfig::paper(TuneMode::Kernel, d, p)));
            let per = Bytes((bdp * 1.3 / f64::from(p)) as u64);
            rows.push((
                "fixed1.3",
                SimConfig::paper(TuneMode::Fixed(per), d, p).with_limits(raised_limits()),
            ));
            for (name, cfg) in rows {
                let o = run(&cfg);
                let mem = o.peak_sndbuf.max(o.peak_rcvbuf).0 as f64 / 2.0 / bdp;
                let (ms, mr) = (
                    o.peak_sndbuf.0 as f64 / 2.0 / bdp,
                    o.peak_rcvbuf.0 as f64 / 2.0 / bdp,
                );
                println!(
                    "{rtt:<5} {p}  {name:<10}  {:>8.2}s  {:>6.0}  {:>7}  {:>7.2} (s {ms:.2} r {mr:.2})  {}",
                    o.completion.as_secs_f64(),
                    o.throughput.0 as f64 / 1e6,
                    o.streams_used,
                    mem,
                    o.measured_in.map_or("-".into(), |m| format!("{:.2}s", m.as_secs_f64()))
                );
            }
        }
    }
}
