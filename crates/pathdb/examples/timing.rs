//! How long the path database's operations take on a full database (4096 paths, the core's
//! bound, each with a history): `cargo run --release -p tcptune-pathdb --example timing`.
//! A transfer pays one open, one lookup and up to two records.

use std::path::PathBuf;
use std::time::{Duration, Instant};
use tcptune_core::pathdb::{Direction, Measurement, PathDbPolicy};
use tcptune_core::Rate;
use tcptune_pathdb::{PathStore, Source};

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("tcptune-pathdb-timing-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path: PathBuf = dir.join("paths.sqlite");
    let policy = PathDbPolicy::default();
    let m = |i: u32| Measurement {
        rate: Rate::mbit(100 + u64::from(i % 900)),
        min_rtt: Duration::from_millis(1 + u64::from(i % 200)),
        full_pipe: i.is_multiple_of(2),
        at_unix_s: 1.7e9 + f64::from(i),
    };
    let mut s = PathStore::open(&path)?;
    let t = Instant::now();
    for i in 0..4096u32 {
        let peer = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
        for k in 0..4 {
            s.record(&peer, Direction::Send, &m(i + k), &Source::Probe, &policy)?;
        }
    }
    println!(
        "filled 4096 paths x 4 measurements in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    drop(s);
    let n = 20u32;
    let mut open = Duration::ZERO;
    let mut lookup = Duration::ZERO;
    let mut record = Duration::ZERO;
    for i in 0..n {
        let t = Instant::now();
        let mut s = PathStore::open(&path)?;
        open += t.elapsed();
        let t = Instant::now();
        s.lookup(
            "10.0.3.7",
            Direction::Send,
            Duration::from_millis(8),
            1.7e9 + 5000.0,
            &policy,
        )?;
        lookup += t.elapsed();
        let t = Instant::now();
        s.record(
            "10.0.3.7",
            Direction::Send,
            &m(4096 + i),
            &Source::Transfer,
            &policy,
        )?;
        record += t.elapsed();
    }
    let size = std::fs::metadata(&path)?.len();
    println!(
        "database {:.1} MiB; per call: open {:.2} ms (incl. quick_check), lookup {:.3} ms, record {:.2} ms",
        size as f64 / 1048576.0,
        ms(open) / f64::from(n),
        ms(lookup) / f64::from(n),
        ms(record) / f64::from(n)
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
