//! `tcptune paths`: list, show, forget, export and import the entries of the path database
//! (the measurements `send` records and reuses; see `tcptune_pathdb`), a host's SQLite file
//! or a fleet's PostgreSQL database.

use crate::{exit, out};
use anyhow::{anyhow, Context};
use serde::Serialize;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tcptune_core::pathdb::{rtt_bucket_range, Direction, PathDbPolicy};
use tcptune_doctor::sizing::{human_duration, human_rate};
use tcptune_pathdb::{Host, PathStore, Source, StoredEntry, StoredMeasurement};
use tcptune_sys::os::unix_now;

/// Version of the JSON written by `paths --json`, `paths show --json`, `paths forget --json`
/// and each line of `paths export`.
const PATHS_SCHEMA_VERSION: u32 = 1;

/// Options of `tcptune paths`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = "\
The path database holds what tcptune measured of each path (peer, direction of the data, RTT
bucket): the bottleneck rate, either of a full pipe (a probe whose rate stopped growing: the
path's capacity) or a lower bound (what a transfer delivered). `send` uses a fresh entry
(updated within a day) instead of probing, and records what it measures.

Location: --path-db FILE or --path-db postgres://USER@HOST[:PORT]/DB[?sslmode=...] (a
PostgreSQL database a fleet of hosts shares), else $TCPTUNE_PATH_DB, else
~/.cache/tcptune/paths.sqlite. Each entry names the host that measured it (MEASURED BY:
hostname and the local address of the measuring connection).

Examples:
  tcptune paths                       list every path
  tcptune paths show dtn2.example.org one host's paths and recent measurements
  tcptune paths forget 10.0.0.2       measure that peer afresh next time (every host's entries)
  tcptune paths forget --all
  tcptune paths export > paths.jsonl  one JSON object per line
  tcptune paths add 10.1.0.0/16 --rate 10gbit --rtt 50ms   an operator's site (for the agent)
  tcptune paths --path-db postgres://tcptune@db.example.org/paths?sslmode=verify-full \\
      import ~/.cache/tcptune/paths.sqlite   a host's file into the fleet's database

Exit status: 0 success, 1 failure (including: nothing is recorded for HOST), 2 usage.")]
pub(crate) struct Opts {
    #[command(subcommand)]
    command: Option<PathsCommand>,
    /// Print JSON (a document with `schema_version` and `paths`).
    #[arg(long)]
    json: bool,
    /// The path database: a SQLite file or a postgres:// URL (default: $TCPTUNE_PATH_DB,
    /// else ~/.cache/tcptune/paths.sqlite).
    #[arg(long, value_name = "FILE|URL", global = true)]
    path_db: Option<PathBuf>,
}

#[derive(clap::Subcommand, Debug)]
enum PathsCommand {
    /// One host's paths and their recent measurements.
    Show(ShowOpts),
    /// Forget a host's paths (or every path), so the next transfer measures afresh.
    Forget(ForgetOpts),
    /// Every path as JSON Lines (one object with `schema_version` per line), to FILE or
    /// stdout; `paths import` reads them back.
    Export(ExportOpts),
    /// Add the paths of FILE to this database: a host's SQLite file, or what `paths export`
    /// wrote. Each keeps its measuring host; where a path is already stored, the newer wins.
    Import(ImportOpts),
    /// Add what an operator knows of a site: PREFIX (or one address) at RATE and RTT, as a
    /// full pipe (`tcptune agent` applies a prefix to every address in it).
    Add(AddOpts),
}

#[derive(clap::Args, Debug)]
struct AddOpts {
    /// An address prefix (10.1.0.0/16, 2001:db8::/32) or one address.
    prefix: String,
    /// The path's bottleneck rate (its capacity), e.g. 10gbit.
    #[arg(long, value_name = "RATE", value_parser = crate::args::rate(tcptune_core::Rate(1_000), tcptune_core::Rate(10_000_000_000_000)))]
    rate: tcptune_core::Rate,
    /// The path's round-trip time, e.g. 50ms.
    #[arg(long, value_name = "DURATION", value_parser = crate::args::duration(Duration::from_micros(1), Duration::from_secs(10)))]
    rtt: Duration,
}

#[derive(clap::Args, Debug)]
struct ExportOpts {
    /// Write here instead of stdout.
    file: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct ImportOpts {
    /// A SQLite path database, or JSON Lines from `paths export`.
    file: PathBuf,
    /// The measuring host of entries that name none (files from before hosts were
    /// recorded): NAME or NAME/ADDRESS (default: this host's name).
    #[arg(long, value_name = "NAME[/ADDRESS]")]
    measured_by: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct ShowOpts {
    /// Host name or address.
    host: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct ForgetOpts {
    /// Host name or address.
    #[arg(required_unless_present = "all")]
    host: Option<String>,
    /// Forget every path.
    #[arg(long, conflicts_with = "host")]
    all: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// One path, for people and programs.
#[derive(Clone, Debug, PartialEq, Serialize)]
struct PathView {
    peer: String,
    direction: Direction,
    rtt_bucket: i32,
    /// The bucket's RTTs, `[low, high)`, microseconds.
    rtt_low_us: u64,
    rtt_high_us: u64,
    min_rtt_us: u64,
    rate_bps: u64,
    /// A full pipe's rate (the path's capacity), else a lower bound.
    full_pipe: bool,
    samples: u32,
    first_seen_unix_s: f64,
    updated_unix_s: f64,
    /// Since the estimate last changed, seconds.
    age_s: f64,
    /// Young enough for `send` to use instead of measuring.
    fresh: bool,
    /// The measurement that set the estimate.
    source: Source,
    /// The latest measurement merged.
    last_source: Source,
    last_measured_unix_s: f64,
    /// The host that measured it: hostname and the measuring connection's local address
    /// (empty when unknown).
    measured_by: Host,
}

#[derive(Debug, Serialize)]
struct ListReport {
    schema_version: u32,
    file: String,
    fresh_for_s: f64,
    paths: Vec<PathView>,
}

#[derive(Debug, Serialize)]
struct MeasurementView {
    direction: Direction,
    rtt_bucket: i32,
    at_unix_s: f64,
    age_s: f64,
    source: Source,
    rate_bps: u64,
    full_pipe: bool,
    min_rtt_us: u64,
}

#[derive(Debug, Serialize)]
struct ShowReport {
    schema_version: u32,
    file: String,
    host: String,
    addresses: Vec<String>,
    paths: Vec<PathView>,
    measurements: Vec<MeasurementView>,
}

#[derive(Debug, Serialize)]
struct ForgetReport {
    schema_version: u32,
    file: String,
    host: Option<String>,
    forgotten: usize,
}

#[derive(Debug, Serialize)]
struct ImportReport {
    schema_version: u32,
    file: String,
    from: String,
    read: usize,
    imported: usize,
}

#[derive(Debug, Serialize)]
struct ExportLine<'a> {
    schema_version: u32,
    #[serde(flatten)]
    path: &'a PathView,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn age(now_unix_s: f64, then: f64) -> f64 {
    let a = now_unix_s - then;
    if a.is_finite() {
        a.max(0.0)
    } else {
        0.0
    }
}

fn view(s: &StoredEntry, now_unix_s: f64, policy: &PathDbPolicy) -> PathView {
    let e = &s.entry;
    let (low, high) = rtt_bucket_range(e.rtt_bucket);
    let age_s = age(now_unix_s, e.updated_unix_s);
    PathView {
        peer: e.peer.clone(),
        direction: e.direction,
        rtt_bucket: e.rtt_bucket,
        rtt_low_us: micros(low),
        rtt_high_us: micros(high),
        min_rtt_us: e.min_rtt_us,
        rate_bps: e.rate_bps,
        full_pipe: e.full_pipe,
        samples: e.samples,
        first_seen_unix_s: e.first_seen_unix_s,
        updated_unix_s: e.updated_unix_s,
        age_s,
        fresh: age_s <= policy.fresh_for.as_secs_f64(),
        source: s.source.clone(),
        last_source: s.last_source.clone(),
        last_measured_unix_s: s.last_measured_unix_s,
        measured_by: s.measured_by.clone(),
    }
}

fn measurement_view(m: &StoredMeasurement, now_unix_s: f64) -> MeasurementView {
    MeasurementView {
        direction: m.direction,
        rtt_bucket: m.rtt_bucket,
        at_unix_s: m.at_unix_s,
        age_s: age(now_unix_s, m.at_unix_s),
        source: m.source.clone(),
        rate_bps: m.rate_bps,
        full_pipe: m.full_pipe,
        min_rtt_us: m.min_rtt_us,
    }
}

/// `78-110 ms`, `0.42-0.6 ms`; the floor's bucket is `< 108 us`.
fn rtt_range(low_us: u64, high_us: u64) -> String {
    let (div, unit) = if high_us >= 2_000_000 {
        (1e6, "s")
    } else if high_us >= 1_000 {
        (1e3, "ms")
    } else {
        (1.0, "us")
    };
    let num = |us: u64| {
        let v = us as f64 / div;
        let s = if v >= 10.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.2}")
        };
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if low_us == 0 {
        format!("< {} {unit}", num(high_us))
    } else {
        format!("{}-{} {unit}", num(low_us), num(high_us))
    }
}

/// `45 s`, `12 min`, `3.2 h`, `4 d`.
fn human_age(secs: f64) -> String {
    if secs < 90.0 {
        format!("{secs:.0} s")
    } else if secs < 90.0 * 60.0 {
        format!("{:.0} min", secs / 60.0)
    } else if secs < 48.0 * 3600.0 {
        format!("{:.1} h", secs / 3600.0)
    } else {
        format!("{:.0} d", secs / 86400.0)
    }
}

fn kind(full_pipe: bool) -> &'static str {
    if full_pipe {
        "full pipe"
    } else {
        "lower bound"
    }
}

fn direction_word(d: Direction) -> &'static str {
    match d {
        Direction::Send => "send",
        Direction::Receive => "receive",
    }
}

/// The table of paths.
fn render_paths(paths: &[PathView]) -> String {
    let w = paths.iter().map(|p| p.peer.len()).max().unwrap_or(0).max(4);
    let mut s = format!(
        "{:<w$} {:<7} {:<14} {:>9} {:>13} {:<11} {:>7} {:>12}  {:<9} {}\n",
        "PEER",
        "DIR",
        "RTT BUCKET",
        "MIN RTT",
        "RATE",
        "KIND",
        "SAMPLES",
        "AGE",
        "SOURCE",
        "MEASURED BY"
    );
    for p in paths {
        let age = if p.fresh {
            human_age(p.age_s)
        } else {
            format!("{} stale", human_age(p.age_s))
        };
        s.push_str(&format!(
            "{:<w$} {:<7} {:<14} {:>9} {:>13} {:<11} {:>7} {:>12}  {:<9} {}\n",
            p.peer,
            direction_word(p.direction),
            rtt_range(p.rtt_low_us, p.rtt_high_us),
            human_duration(Duration::from_micros(p.min_rtt_us)),
            human_rate(p.rate_bps),
            kind(p.full_pipe),
            p.samples,
            age,
            p.source.to_string(),
            p.measured_by
        ));
    }
    s
}

fn render_measurements(ms: &[MeasurementView]) -> String {
    let mut s = format!(
        "{:>12}  {:<7} {:<14} {:>9} {:>13} {:<11}  {}\n",
        "WHEN", "DIR", "RTT BUCKET", "MIN RTT", "RATE", "KIND", "SOURCE"
    );
    for m in ms {
        let (low, high) = rtt_bucket_range(m.rtt_bucket);
        s.push_str(&format!(
            "{:>12}  {:<7} {:<14} {:>9} {:>13} {:<11}  {}\n",
            format!("{} ago", human_age(m.age_s)),
            direction_word(m.direction),
            rtt_range(micros(low), micros(high)),
            human_duration(Duration::from_micros(m.min_rtt_us)),
            human_rate(m.rate_bps),
            kind(m.full_pipe),
            m.source
        ));
    }
    s
}

/// The addresses a host name or address stands for (as the database keys peers); a prefix
/// (`10.1.0.0/16`, as `paths add` stores it) stands for itself.
fn addresses_of(host: &str) -> anyhow::Result<Vec<String>> {
    if let Some((ip, len)) = tcptune_agent::policy::parse_prefix(host.trim()) {
        return Ok(vec![format!("{ip}/{len}")]);
    }
    let h = host.trim().trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = h.parse::<IpAddr>() {
        return Ok(vec![ip.to_string()]);
    }
    let mut ips: Vec<String> = (h, 0)
        .to_socket_addrs()
        .with_context(|| format!("resolving {host}"))?
        .map(|a| a.ip().to_string())
        .collect();
    ips.sort();
    ips.dedup();
    Ok(ips)
}

fn location(opts: &Opts) -> anyhow::Result<PathBuf> {
    opts.path_db
        .clone()
        .or_else(tcptune_pathdb::default_location)
        .ok_or_else(|| {
            exit::fail(
                exit::USAGE,
                anyhow!(
                    "no path database location: set HOME or TCPTUNE_PATH_DB, or pass --path-db"
                ),
            )
        })
}

/// Open the database if there is one, printing what opening it found.
fn open(path: &std::path::Path) -> anyhow::Result<Option<PathStore>> {
    let store = PathStore::open_existing(path).map_err(|e| exit::fail(exit::FAILURE, e))?;
    Ok(store.map(|mut s| {
        for w in s.take_warnings() {
            eprintln!("tcptune: warning: {w}");
        }
        s
    }))
}

/// The measuring host for entries that name none: `NAME[/ADDRESS]`, or this host's name.
fn measured_by(given: Option<&str>) -> Host {
    match given {
        Some(g) => {
            let (name, addr) = g.split_once('/').unwrap_or((g, ""));
            Host {
                name: name.to_string(),
                addr: addr.to_string(),
            }
        }
        None => Host::this(),
    }
}

fn nothing_recorded(host: &str, addresses: &[String], file: &str) -> anyhow::Error {
    let via = match addresses {
        [one] if one == host => String::new(),
        [] => String::new(),
        many => format!(" ({})", many.join(", ")),
    };
    exit::fail(
        exit::FAILURE,
        anyhow!("nothing is recorded for {host}{via} in the path database {file}"),
    )
}

/// Run `tcptune paths`.
pub(crate) fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    let path = location(&opts)?;
    let file = tcptune_pathdb::describe_location(&path);
    let policy = PathDbPolicy::default();
    let now = unix_now();
    let mut store = open(&path)?;
    let mut entries = || -> anyhow::Result<Vec<StoredEntry>> {
        match store.as_mut() {
            Some(s) => Ok(s.entries()?),
            None => Ok(Vec::new()),
        }
    };
    match &opts.command {
        None => {
            let paths: Vec<PathView> = entries()?.iter().map(|e| view(e, now, &policy)).collect();
            if opts.json {
                out::json(&ListReport {
                    schema_version: PATHS_SCHEMA_VERSION,
                    file,
                    fresh_for_s: policy.fresh_for.as_secs_f64(),
                    paths,
                })?;
            } else if paths.is_empty() {
                out::line(&format!("No paths recorded in {file}."));
            } else {
                out::line(&format!(
                    "{} path(s) in {file} (an entry replaces a measurement for {:.0} h after \
                     its last update)\n",
                    paths.len(),
                    policy.fresh_for.as_secs_f64() / 3600.0
                ));
                out::text(&render_paths(&paths));
            }
        }
        Some(PathsCommand::Add(o)) => {
            let peer = match tcptune_agent::policy::parse_prefix(o.prefix.trim()) {
                Some((ip, len)) => format!("{ip}/{len}"),
                None => o
                    .prefix
                    .trim()
                    .parse::<IpAddr>()
                    .map(|ip| ip.to_string())
                    .map_err(|_| {
                        exit::fail(
                            exit::USAGE,
                            anyhow!(
                                "'{}' is neither an address prefix (10.1.0.0/16) nor an address",
                                o.prefix
                            ),
                        )
                    })?,
            };
            let mut store = PathStore::open(&path).map_err(|e| exit::fail(exit::FAILURE, e))?;
            for w in store.take_warnings() {
                eprintln!("tcptune: warning: {w}");
            }
            let m = tcptune_core::pathdb::Measurement {
                rate: o.rate,
                min_rtt: o.rtt,
                full_pipe: true,
                at_unix_s: now,
            };
            let source = Source::from_name(tcptune_agent::policy::OPERATOR_SOURCE);
            store.record(&peer, Direction::Send, &m, &source, &policy)?;
            out::line(&format!(
                "Added {peer}: {} at {} (a full pipe, source {source}) to {file}; kept {:.0} days \
                 after its last update",
                human_rate(o.rate.0),
                human_duration(o.rtt),
                policy.forget_after.as_secs_f64() / 86_400.0
            ));
        }
        Some(PathsCommand::Export(o)) => {
            let mut text = String::new();
            for e in entries()? {
                let v = view(&e, now, &policy);
                text.push_str(&serde_json::to_string(&ExportLine {
                    schema_version: PATHS_SCHEMA_VERSION,
                    path: &v,
                })?);
                text.push('\n');
            }
            match &o.file {
                Some(f) => std::fs::write(f, text)
                    .with_context(|| format!("writing {}", f.display()))
                    .map_err(|e| exit::fail(exit::FAILURE, e))?,
                None => out::text(&text),
            }
        }
        Some(PathsCommand::Import(o)) => {
            let fallback = measured_by(o.measured_by.as_deref());
            let read = super::paths_import::read(&o.file, &fallback)
                .map_err(|e| exit::fail(exit::FAILURE, e))?;
            let store = match store.as_mut() {
                Some(s) => s,
                None => {
                    store = Some(PathStore::open(&path).map_err(|e| exit::fail(exit::FAILURE, e))?);
                    store
                        .as_mut()
                        .ok_or_else(|| anyhow!("the database is not open"))?
                }
            };
            let imported = store.import(&read)?;
            for w in store.take_warnings() {
                eprintln!("tcptune: warning: {w}");
            }
            let from = o.file.display().to_string();
            if o.json {
                out::json(&ImportReport {
                    schema_version: PATHS_SCHEMA_VERSION,
                    file,
                    from,
                    read: read.len(),
                    imported,
                })?;
            } else {
                out::line(&format!(
                    "Imported {imported} of {} path(s) from {from} into {file} (the others \
                     were already there, as new or newer).",
                    read.len()
                ));
            }
        }
        Some(PathsCommand::Show(o)) => {
            let addresses = addresses_of(&o.host).map_err(|e| exit::fail(exit::FAILURE, e))?;
            let Some(s) = store.as_mut() else {
                return Err(nothing_recorded(&o.host, &addresses, &file));
            };
            let paths: Vec<PathView> = s
                .entries_of(&addresses)?
                .iter()
                .map(|e| view(e, now, &policy))
                .collect();
            if paths.is_empty() {
                return Err(nothing_recorded(&o.host, &addresses, &file));
            }
            let measurements: Vec<MeasurementView> = s
                .history(&addresses)?
                .iter()
                .map(|m| measurement_view(m, now))
                .collect();
            if o.json {
                out::json(&ShowReport {
                    schema_version: PATHS_SCHEMA_VERSION,
                    file,
                    host: o.host.clone(),
                    addresses,
                    paths,
                    measurements,
                })?;
            } else {
                out::line(&format!(
                    "{} ({}): {} path(s) in {file}\n",
                    o.host,
                    addresses.join(", "),
                    paths.len()
                ));
                out::text(&render_paths(&paths));
                out::line(&format!(
                    "\nRecent measurements ({}, oldest first):",
                    measurements.len()
                ));
                out::text(&render_measurements(&measurements));
            }
        }
        Some(PathsCommand::Forget(o)) => {
            let (host, forgotten) = match (&o.host, store.as_mut()) {
                (None, Some(s)) => (None, s.forget_all()?),
                (None, None) => (None, 0),
                (Some(h), s) => {
                    let addresses = addresses_of(h).map_err(|e| exit::fail(exit::FAILURE, e))?;
                    let n = match s {
                        Some(s) => s.forget(&addresses)?,
                        None => 0,
                    };
                    if n == 0 {
                        return Err(nothing_recorded(h, &addresses, &file));
                    }
                    (Some(h.clone()), n)
                }
            };
            if o.json {
                out::json(&ForgetReport {
                    schema_version: PATHS_SCHEMA_VERSION,
                    file,
                    host,
                    forgotten,
                })?;
            } else {
                out::line(&format!(
                    "Forgot {forgotten} path(s){} in {file}.",
                    host.map(|h| format!(" to {h}")).unwrap_or_default()
                ));
            }
        }
    }
    Ok(ExitCode::from(exit::OK))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcptune_core::pathdb::{rtt_bucket, PathEntry};

    fn stored(rate_bps: u64, full: bool, updated: f64) -> StoredEntry {
        StoredEntry {
            entry: PathEntry {
                peer: "10.0.0.2".into(),
                direction: Direction::Send,
                rtt_bucket: rtt_bucket(Duration::from_millis(100)),
                rate_bps,
                full_pipe: full,
                min_rtt_us: 100_000,
                first_seen_unix_s: 0.0,
                updated_unix_s: updated,
                samples: 3,
            },
            source: Source::Probe,
            last_source: Source::Transfer,
            last_measured_unix_s: updated,
            measured_by: tcptune_pathdb::Host {
                name: "dtn1".into(),
                addr: "10.0.0.1".into(),
            },
        }
    }

    #[test]
    fn rtt_ranges_read_in_one_unit() {
        assert_eq!(rtt_range(77_900, 110_200), "78-110 ms");
        assert_eq!(rtt_range(420, 600), "420-600 us");
        assert_eq!(rtt_range(0, 108), "< 108 us");
        assert_eq!(rtt_range(1_000, 1_400), "1-1.4 ms");
        assert_eq!(rtt_range(1_600_000, 2_300_000), "1.6-2.3 s");
    }

    #[test]
    fn a_view_says_how_old_and_whether_fresh() {
        let p = PathDbPolicy::default();
        let v = view(&stored(950_000_000, true, 1000.0), 1000.0 + 7200.0, &p);
        assert_eq!((v.age_s, v.fresh), (7200.0, true));
        assert_eq!((v.rtt_low_us, v.rtt_high_us), (77_935, 110_217));
        let v = view(&stored(950_000_000, true, 0.0), 2.0 * 86400.0, &p);
        assert!(!v.fresh);
        let table = render_paths(&[v]);
        assert!(table.contains("950 Mbit/s"), "{table}");
        assert!(table.contains("full pipe"), "{table}");
        assert!(table.contains("2 d stale"), "{table}");
        assert!(table.contains("78-110 ms"), "{table}");
    }

    #[test]
    fn an_export_line_is_one_flat_object_with_the_schema_version() {
        let v = view(
            &stored(40_000_000, false, 10.0),
            20.0,
            &PathDbPolicy::default(),
        );
        let line = serde_json::to_string(&ExportLine {
            schema_version: PATHS_SCHEMA_VERSION,
            path: &v,
        })
        .expect("json");
        assert!(!line.contains('\n'));
        let back: serde_json::Value = serde_json::from_str(&line).expect("parse");
        assert_eq!(back["schema_version"], 1);
        assert_eq!(back["peer"], "10.0.0.2");
        assert_eq!(back["direction"], "send");
        assert_eq!(back["full_pipe"], false);
        assert_eq!(back["source"], "probe");
        assert_eq!(back["last_source"], "transfer");
    }

    #[test]
    fn ages_are_short_words() {
        assert_eq!(human_age(45.0), "45 s");
        assert_eq!(human_age(12.0 * 60.0), "12 min");
        assert_eq!(human_age(3.2 * 3600.0), "3.2 h");
        assert_eq!(human_age(4.0 * 86400.0), "4 d");
    }

    #[test]
    fn addresses_are_taken_as_they_are_and_names_resolved() {
        assert_eq!(addresses_of("10.0.0.2").expect("ip"), ["10.0.0.2"]);
        assert_eq!(addresses_of("[::1]").expect("ip"), ["::1"]);
        assert!(addresses_of("localhost")
            .expect("resolves")
            .iter()
            .any(|a| a == "127.0.0.1" || a == "::1"));
    }
}
