//! The store's test suite, one body per behaviour, run against both backends: a SQLite file
//! and a throw-away PostgreSQL cluster (`tcptune_testkit::pg`, skipped outside CI when
//! PostgreSQL is not installed).

use std::any::Any;
use std::path::PathBuf;
use std::time::Duration;
use tcptune_core::pathdb::{Direction, Known, Measurement, PathDbPolicy, RecordBounds};
use tcptune_core::Rate;
use tcptune_pathdb::{Host, PathStore, Recorded, Source, HISTORY_PER_PATH};
use tcptune_testkit::pg::{self, PgCluster};

/// A database to open, and what keeps it alive (a folder, a cluster).
struct Fixture {
    location: PathBuf,
    _guard: Box<dyn Any>,
}

impl Fixture {
    fn open(&self) -> PathStore {
        PathStore::open(&self.location).expect("open")
    }
}

/// A folder removed on drop.
struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn sqlite(tag: &str) -> Option<Fixture> {
    let d = std::env::temp_dir().join(format!("tcptune-suite-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    Some(Fixture {
        location: d.join("paths.sqlite"),
        _guard: Box::new(TempDir(d)),
    })
}

fn postgres(tag: &str) -> Option<Fixture> {
    if !pg::require(tag, false) {
        return None;
    }
    let c = PgCluster::start();
    c.create_database("paths");
    Some(Fixture {
        location: PathBuf::from(c.url("paths")),
        _guard: Box::new(c),
    })
}

macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test]
            fn $name() {
                if let Some(f) = super::sqlite(stringify!($name)) {
                    super::$name(&f);
                }
            })*
        }
        mod postgres {
            $(#[test]
            fn $name() {
                if let Some(f) = super::postgres(stringify!($name)) {
                    super::$name(&f);
                }
            })*
        }
    };
}

on_both_backends!(
    measurements_merge_by_the_cores_rules_and_remember_their_source,
    history_keeps_the_newest_measurements_of_each_path,
    bounded_recording_keeps_a_group_to_its_share_and_refuses_when_full_of_fresh_paths,
    old_paths_age_out_with_their_history_and_forget_removes_them,
    entries_name_their_host_and_a_lookup_uses_any_hosts_entry,
    forget_removes_one_peers_paths_of_every_host,
    imported_entries_keep_their_host_and_the_newer_wins,
);

const PEER: &str = "10.0.0.2";
const HOUR: f64 = 3600.0;

fn m(mbit: u64, full: bool, at: f64) -> Measurement {
    Measurement {
        rate: Rate::mbit(mbit),
        min_rtt: Duration::from_millis(100),
        full_pipe: full,
        at_unix_s: at,
    }
}

fn record(s: &mut PathStore, mbit: u64, full: bool, at: f64, src: Source) -> Recorded {
    s.record(
        PEER,
        Direction::Send,
        &m(mbit, full, at),
        &src,
        &PathDbPolicy::default(),
    )
    .expect("record")
}

fn look(s: &mut PathStore, now: f64) -> Option<Known> {
    s.lookup(
        PEER,
        Direction::Send,
        Duration::from_millis(100),
        now,
        &PathDbPolicy::default(),
    )
    .expect("lookup")
}

fn host(name: &str, addr: &str) -> Host {
    Host {
        name: name.into(),
        addr: addr.into(),
    }
}

fn measurements_merge_by_the_cores_rules_and_remember_their_source(f: &Fixture) {
    let mut s = f.open();
    assert!(s.take_warnings().is_empty());
    assert!(look(&mut s, 0.0).is_none());
    let r = record(&mut s, 900, true, 0.0, Source::Probe);
    assert_eq!(
        r,
        Recorded::Merged {
            estimate_changed: true,
            pruned: 0
        }
    );
    record(&mut s, 1000, true, 10.0, Source::Probe);
    let k = look(&mut s, 11.0).expect("fresh");
    assert_eq!((k.rate, k.full_pipe, k.samples), (Rate::mbit(950), true, 2));
    // A transfer that delivered less changes only the sample count: the estimate keeps the
    // probe as its source, the latest measurement is the transfer's.
    let r = record(&mut s, 300, false, 20.0, Source::Transfer);
    assert_eq!(
        r,
        Recorded::Merged {
            estimate_changed: false,
            pruned: 0
        }
    );
    let e = s.entries().expect("list");
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].entry.samples, 3);
    assert_eq!(e[0].source, Source::Probe);
    assert_eq!(e[0].last_source, Source::Transfer);
    assert_eq!(e[0].last_measured_unix_s, 20.0);
    // One that delivered more raises it and becomes the source.
    record(&mut s, 990, false, 30.0, Source::Transfer);
    let e = s.entries().expect("list");
    assert_eq!(e[0].entry.rate_bps, Rate::mbit(990).0);
    assert_eq!(e[0].source, Source::Transfer);
    // A zero rate is ignored, as the core ignores it.
    assert_eq!(
        record(&mut s, 0, true, 40.0, Source::Probe),
        Recorded::Ignored
    );
    // Reopening finds the same.
    drop(s);
    let mut s = f.open();
    assert_eq!(look(&mut s, 31.0).map(|k| k.rate), Some(Rate::mbit(990)));
}

fn history_keeps_the_newest_measurements_of_each_path(f: &Fixture) {
    let mut s = f.open();
    let n = HISTORY_PER_PATH + 8;
    for i in 0..n {
        record(&mut s, 100 + i as u64, true, i as f64, Source::Probe);
    }
    let h = s.history(&[PEER.to_string()]).expect("history");
    assert_eq!(h.len(), HISTORY_PER_PATH);
    assert_eq!(h[0].at_unix_s, 8.0);
    assert_eq!(
        h.last().map(|x| x.rate_bps),
        Some(Rate::mbit(100 + n as u64 - 1).0)
    );
    assert!(h.iter().all(|x| x.source == Source::Probe && x.full_pipe));
}

fn bounded_recording_keeps_a_group_to_its_share_and_refuses_when_full_of_fresh_paths(f: &Fixture) {
    let mut s = f.open();
    let policy = PathDbPolicy::default();
    let bounds = RecordBounds {
        per_group: 2,
        max_entries: 3,
    };
    let at = |rtt_ms: u64, t: f64| Measurement {
        min_rtt: Duration::from_millis(rtt_ms),
        ..m(100, true, t)
    };
    let rec = |s: &mut PathStore, peer: &str, rtt_ms: u64, t: f64| {
        s.record_bounded(
            peer,
            Direction::Receive,
            &at(rtt_ms, t),
            &Source::Server,
            &policy,
            &bounds,
        )
        .expect("record")
    };
    rec(&mut s, PEER, 100, 1000.0);
    rec(&mut s, "10.9.9.9", 10, 1001.0);
    rec(&mut s, "10.9.9.9", 40, 1002.0);
    // The group's third path replaces its own oldest.
    assert_eq!(
        rec(&mut s, "10.9.9.9", 160, 1003.0),
        Recorded::Merged {
            estimate_changed: true,
            pruned: 1
        }
    );
    assert_eq!(rec(&mut s, "10.8.8.8", 50, 1004.0), Recorded::Refused);
    let peers: Vec<String> = s
        .entries()
        .expect("list")
        .into_iter()
        .map(|e| format!("{} {}", e.entry.peer, e.entry.min_rtt_us / 1000))
        .collect();
    assert_eq!(peers, ["10.0.0.2 100", "10.9.9.9 40", "10.9.9.9 160"]);
    assert!(s.history(&["10.8.8.8".into()]).expect("history").is_empty());
}

fn old_paths_age_out_with_their_history_and_forget_removes_them(f: &Fixture) {
    let mut s = f.open();
    record(&mut s, 500, true, 0.0, Source::Probe);
    s.record(
        "10.0.0.3",
        Direction::Receive,
        &m(200, false, 40.0 * 24.0 * HOUR),
        &Source::Transfer,
        &PathDbPolicy::default(),
    )
    .expect("record");
    // The first path is 40 days old by then: the core's aging dropped it.
    let e = s.entries().expect("list");
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].entry.peer, "10.0.0.3");
    assert!(s.history(&[PEER.to_string()]).expect("history").is_empty());
    record(&mut s, 500, true, 40.0 * 24.0 * HOUR, Source::Probe);
    assert_eq!(s.forget(&[PEER.to_string()]).expect("forget"), 1);
    assert_eq!(s.forget(&[PEER.to_string()]).expect("forget"), 0);
    assert!(s.history(&[PEER.to_string()]).expect("history").is_empty());
    assert_eq!(s.entries_of(&["10.0.0.3".into()]).expect("of").len(), 1);
    assert_eq!(s.forget_all().expect("all"), 1);
    assert!(s.entries().expect("list").is_empty());
}

fn entries_name_their_host_and_a_lookup_uses_any_hosts_entry(f: &Fixture) {
    let mut a = f.open();
    a.set_host(host("dtn1", "10.0.0.1"));
    record(&mut a, 900, true, 0.0, Source::Probe);
    let mut b = f.open();
    b.set_host(host("dtn2", "10.0.0.9"));
    // dtn2 never measured the path: dtn1's entry answers.
    let k = look(&mut b, 10.0).expect("dtn1's entry");
    assert_eq!(k.rate, Rate::mbit(900));
    let e = b.entries().expect("list");
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].measured_by, host("dtn1", "10.0.0.1"));
    record(&mut b, 800, true, 20.0, Source::Server);
    let e = b.entries().expect("list");
    if b.is_remote() {
        // The fleet keeps each host's entry.
        let hosts: Vec<&Host> = e.iter().map(|e| &e.measured_by).collect();
        assert_eq!(
            hosts,
            [&host("dtn1", "10.0.0.1"), &host("dtn2", "10.0.0.9")]
        );
        assert_eq!(e[0].entry.samples, 1);
        assert_eq!(e[1].entry.rate_bps, Rate::mbit(800).0);
    } else {
        // One host's file: one entry, named after the host that changed it last.
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].measured_by, host("dtn2", "10.0.0.9"));
        assert_eq!(e[0].entry.samples, 2);
    }
    assert!(look(&mut a, 30.0).is_some());
}

fn forget_removes_one_peers_paths_of_every_host(f: &Fixture) {
    let mut a = f.open();
    let mut b = f.open();
    a.set_host(host("dtn1", "10.0.0.1"));
    b.set_host(host("dtn2", "10.0.0.9"));
    for s in [&mut a, &mut b] {
        record(s, 900, true, 0.0, Source::Probe);
        s.record(
            "10.7.7.7",
            Direction::Send,
            &m(100, true, 0.0),
            &Source::Probe,
            &PathDbPolicy::default(),
        )
        .expect("record");
    }
    let per_peer = if a.is_remote() { 2 } else { 1 };
    assert_eq!(a.forget(&[PEER.to_string()]).expect("forget"), per_peer);
    let left: Vec<String> = b
        .entries()
        .expect("list")
        .into_iter()
        .map(|e| e.entry.peer)
        .collect();
    assert_eq!(left, vec!["10.7.7.7".to_string(); per_peer]);
}

fn imported_entries_keep_their_host_and_the_newer_wins(f: &Fixture) {
    let src = sqlite("import-source").expect("sqlite");
    let mut from = src.open();
    from.set_host(host("dtn3", "10.0.0.3"));
    record(&mut from, 700, true, 100.0, Source::Probe);
    let exported = from.entries().expect("list");
    let mut to = f.open();
    to.set_host(host("dtn3", "10.0.0.3"));
    record(&mut to, 500, true, 50.0, Source::Probe);
    assert_eq!(to.import(&exported).expect("import"), 1);
    let e = to.entries().expect("list");
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].entry.rate_bps, Rate::mbit(700).0);
    assert_eq!(e[0].measured_by, host("dtn3", "10.0.0.3"));
    // Importing the same again changes nothing: it is not newer.
    assert_eq!(to.import(&exported).expect("import"), 0);
}
