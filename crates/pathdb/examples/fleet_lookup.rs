//! Lookups in a large fleet database: 1,048,576 stored paths (256 hosts x 4096, the core's
//! bound per host), 16 clients looking up at once, each on its own connection; the p50 and
//! p99 of one lookup, PostgreSQL (a throw-away cluster on a Unix socket, `tcptune_testkit::pg`)
//! against the SQLite store on the same machine. `FLEET_HOSTS=16` makes it smaller.
//!
//! `cargo run --release -p tcptune-pathdb --example fleet_lookup`

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tcptune_core::pathdb::{rtt_bucket, Direction, PathDbPolicy, PathEntry};
use tcptune_pathdb::{Host, PathStore, Source, StoredEntry};
use tcptune_testkit::pg::PgCluster;

const PER_HOST: u32 = 4096;
const CLIENTS: u32 = 16;
const LOOKUPS_EACH: u32 = 2000;

fn peer(h: u32, i: u32) -> String {
    format!("10.{}.{}.{}", h, i >> 8, i & 255)
}

fn entries(h: u32) -> Vec<StoredEntry> {
    let rtt = Duration::from_millis(50);
    (0..PER_HOST)
        .map(|i| StoredEntry {
            entry: PathEntry {
                peer: peer(h, i),
                direction: Direction::Send,
                rtt_bucket: rtt_bucket(rtt),
                rate_bps: 1_000_000_000,
                full_pipe: true,
                min_rtt_us: 50_000,
                first_seen_unix_s: 1.7e9,
                updated_unix_s: 1.7e9,
                samples: 1,
            },
            source: Source::Probe,
            last_source: Source::Probe,
            last_measured_unix_s: 1.7e9,
            measured_by: Host {
                name: format!("dtn{h}"),
                addr: format!("192.0.2.{}", h % 250),
            },
        })
        .collect()
}

fn fill(location: &Path, hosts: u32) -> Result<(), Box<dyn std::error::Error>> {
    let mut s = PathStore::open(location)?;
    let t = Instant::now();
    for h in 0..hosts {
        s.import(&entries(h))?;
    }
    println!(
        "  filled {} paths in {:.1} s",
        hosts * PER_HOST,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Every lookup's time from `CLIENTS` threads at once, sorted.
fn lookups(location: &Path, hosts: u32) -> Vec<Duration> {
    let threads: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let location: PathBuf = location.to_path_buf();
            std::thread::spawn(move || {
                let mut s = PathStore::open(&location).expect("open");
                let policy = PathDbPolicy::default();
                let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ u64::from(c);
                let mut times = Vec::with_capacity(LOOKUPS_EACH as usize);
                for _ in 0..LOOKUPS_EACH {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let h = (x % u64::from(hosts)) as u32;
                    let i = ((x >> 20) % u64::from(PER_HOST)) as u32;
                    let t = Instant::now();
                    let k = s
                        .lookup(
                            &peer(h, i),
                            Direction::Send,
                            Duration::from_millis(50),
                            1.7e9 + 60.0,
                            &policy,
                        )
                        .expect("lookup");
                    times.push(t.elapsed());
                    assert!(k.is_some());
                }
                times
            })
        })
        .collect();
    let mut all: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("client"))
        .collect();
    all.sort();
    all
}

fn report(name: &str, times: &[Duration]) -> (f64, f64) {
    let pct = |p: f64| times[((times.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1e3;
    let (p50, p99) = (pct(0.5), pct(0.99));
    println!(
        "  {name}: {} lookups, p50 {p50:.3} ms, p99 {p99:.3} ms",
        times.len()
    );
    (p50, p99)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts: u32 = std::env::var("FLEET_HOSTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let dir = std::env::temp_dir().join(format!("tcptune-fleet-lookup-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!("SQLite ({} paths, {CLIENTS} clients):", hosts * PER_HOST);
    let sqlite = dir.join("paths.sqlite");
    fill(&sqlite, hosts)?;
    let (_, s99) = report("sqlite", &lookups(&sqlite, hosts));
    println!(
        "PostgreSQL ({} paths, {CLIENTS} clients):",
        hosts * PER_HOST
    );
    let cluster = PgCluster::start();
    cluster.create_database("fleet");
    let url = PathBuf::from(cluster.url("fleet"));
    fill(&url, hosts)?;
    let (_, p99) = report("postgres", &lookups(&url, hosts));
    println!("p99 postgres / sqlite: {:.2}", p99 / s99);
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
