//! Lookups in a large fleet database: 1,048,576 stored paths (256 hosts x 4096, the core's
//! bound per host), 16 clients looking up at once, each on its own connection; the p50 and
//! p99 of one lookup, PostgreSQL (a throw-away cluster on a Unix socket, `tcptune_testkit::pg`)
//! against the SQLite store on the same machine. `FLEET_HOSTS=16` makes it smaller.
//!
//! `cargo run --release -p tcptune-pathdb --example fleet_lookup`; `bench/fleet_lookup.sh`
//! runs it with `FLEET_REPS` rounds of lookups on both stores, interleaved, and `FLEET_RAW`
//! naming the raw file its rows are appended to (one per store and round: bench/tables
//! makes docs/bench/fleet_lookup.md of them); `FLEET_COMMIT` is the commit they record.

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

/// Store `hosts` x [`PER_HOST`] paths; the seconds it took.
fn fill(location: &Path, hosts: u32) -> Result<f64, Box<dyn std::error::Error>> {
    let mut s = PathStore::open(location)?;
    let t = Instant::now();
    for h in 0..hosts {
        s.import(&entries(h))?;
    }
    let secs = t.elapsed().as_secs_f64();
    println!("  filled {} paths in {secs:.1} s", hosts * PER_HOST);
    Ok(secs)
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

/// The p50 and p99 of `times` (sorted), milliseconds.
fn percentiles(times: &[Duration]) -> (f64, f64) {
    let pct = |p: f64| times[((times.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1e3;
    (pct(0.5), pct(0.99))
}

/// One raw row (see bench/fleet_lookup.sh for the header).
struct Row<'a> {
    store: &'a str,
    rep: u32,
    paths: u32,
    lookups: usize,
    p50_ms: f64,
    p99_ms: f64,
    fill_s: f64,
}

fn append(raw: &Path, commit: &str, r: &Row<'_>) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new().append(true).open(raw)?;
    writeln!(
        f,
        "lookup\t{}\ttcptune-pathdb\t{commit}\t{} paths, {CLIENTS} clients x {LOOKUPS_EACH} lookups\t{}\t{}\t{CLIENTS}\t{}\t{:.4}\t{:.4}\t{:.1}\t0",
        r.store, r.paths, r.rep, r.paths, r.lookups, r.p50_ms, r.p99_ms, r.fill_s
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let env_u32 = |k: &str, d: u32| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let hosts = env_u32("FLEET_HOSTS", 256);
    let reps = env_u32("FLEET_REPS", 1).max(1);
    let raw = std::env::var_os("FLEET_RAW").map(PathBuf::from);
    let commit = std::env::var("FLEET_COMMIT").unwrap_or_else(|_| "-".into());
    let paths = hosts * PER_HOST;
    let dir = std::env::temp_dir().join(format!("tcptune-fleet-lookup-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!("filling both stores with {paths} paths");
    let sqlite = dir.join("paths.sqlite");
    let sqlite_fill = fill(&sqlite, hosts)?;
    let cluster = PgCluster::start();
    cluster.create_database("fleet");
    let url = PathBuf::from(cluster.url("fleet"));
    let pg_fill = fill(&url, hosts)?;
    // Rounds interleaved, so that a change in the machine's load falls on both stores.
    for rep in 1..=reps {
        let mut p99 = [0.0; 2];
        for (i, (store, location, fill_s)) in [
            ("sqlite", &sqlite, sqlite_fill),
            ("postgres", &url, pg_fill),
        ]
        .into_iter()
        .enumerate()
        {
            let times = lookups(location, hosts);
            let (p50_ms, p99_ms) = percentiles(&times);
            p99[i] = p99_ms;
            println!(
                "  round {rep} {store}: {} lookups from {CLIENTS} clients, p50 {p50_ms:.3} ms, p99 {p99_ms:.3} ms",
                times.len()
            );
            if let Some(raw) = &raw {
                append(
                    raw,
                    &commit,
                    &Row {
                        store,
                        rep,
                        paths,
                        lookups: times.len(),
                        p50_ms,
                        p99_ms,
                        fill_s,
                    },
                )?;
            }
        }
        println!(
            "  round {rep}: p99 postgres / sqlite {:.2}",
            p99[1] / p99[0]
        );
    }
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
