//! How the client learns the path's rate before the transfer: a fresh entry of the path
//! database, the bandwidth probe, or nothing; and what it records afterwards.

use super::ClientConfig;
use crate::pathdb::{PathDbSession, Source as DbSource};
use crate::report::PathDbReport;
use std::time::Duration;
use tcptune_core::pathdb::{Direction, Known, Measurement};
use tcptune_core::tuners::auto::AutoPlan;
use tcptune_core::{PathHint, Rate, TuneMode};

/// The path database as one transfer uses it.
pub(crate) struct PathDbUse {
    db: Option<PathDbSession>,
    peer: String,
    direction: Direction,
}

impl PathDbUse {
    /// Start fetching the peer's entries beside the handshake (call before connecting).
    pub(crate) fn new(cfg: &ClientConfig, peer: String) -> PathDbUse {
        let direction = if cfg.reverse {
            Direction::Receive
        } else {
            Direction::Send
        };
        PathDbUse {
            db: cfg
                .path_db
                .as_deref()
                .map(|p| PathDbSession::start(p, &peer, direction)),
            peer,
            direction,
        }
    }

    /// The control connection's local address: this host's measurements are recorded as
    /// measured from it.
    pub(crate) fn set_local_addr(&mut self, addr: std::net::IpAddr) {
        if let Some(d) = self.db.as_mut() {
            d.set_local_addr(addr);
        }
    }

    /// A fresh entry for this path at `now_unix` (seconds since the Unix epoch), if the
    /// database has one (problems become warnings).
    pub(crate) fn lookup(&mut self, rtt: Duration, now_unix: f64) -> Option<Known> {
        let (peer, dir) = (self.peer.clone(), self.direction);
        self.db.as_mut()?.lookup(&peer, dir, rtt, now_unix)
    }

    /// The path's RTT with nothing queued, as far as the database knows (any entry of this
    /// peer and direction, whatever its RTT), after [`PathDbUse::lookup`].
    pub(crate) fn base_rtt(&self, now_unix: f64) -> Option<Duration> {
        self.db
            .as_ref()?
            .base_rtt(&self.peer, self.direction, now_unix)
    }

    /// The entry of this path that the handshake's RTT `rtt` would have matched without
    /// another flow's queue: no entry matched `rtt`, but this peer was measured at a lower
    /// RTT (the database's base RTT, [`PathDbUse::base_rtt`]) and `rtt` is above it by more
    /// than a queue's threshold ([`AutoPlan::measured_beside_another_flow`]). The entry
    /// nearest the base RTT is then the path's, seen from behind that queue; the report
    /// says how far above the base the handshake was.
    ///
    /// Without it a latecomer beside `iperf3 -P 4` on a known 25 ms path, its handshake
    /// at 45-50 ms in the next RTT bucket but one, measured in band as on a new path: its
    /// measuring streams, their buffers grown round by round behind the queue, left BBR's
    /// start-up with a small estimate of the path, and delivered 86-180 Mbit/s in the first
    /// second and 180-450 after it against kernel-tuned streams' 300-490 (`bench/fair_vs_iperf3.sh
    /// KNOWN=1`, 2026-12-08).
    pub(crate) fn lookup_behind_queue(&mut self, rtt: Duration, now_unix: f64) -> Option<Known> {
        let base = self.base_rtt(now_unix).filter(|b| rtt > *b)?;
        if !AutoPlan::measured_beside_another_flow(Some(rtt), Some(base)) {
            return None;
        }
        let known = self.lookup(base, now_unix)?;
        if let Some(d) = self.db.as_mut() {
            d.note_queue_over_base(rtt - base);
        }
        Some(known)
    }

    /// Mark the entry as used.
    pub(crate) fn used(&mut self) {
        if let Some(d) = self.db.as_mut() {
            d.mark_used();
        }
    }

    /// Record a measurement made at `now_unix` (when a database is in use and the RTT is
    /// known); problems with the file become warnings of the report.
    pub(crate) fn record(
        &mut self,
        hint: &PathHint,
        source: DbSource,
        rate: Rate,
        full_pipe: bool,
        now_unix: f64,
    ) {
        let (peer, dir) = (self.peer.clone(), self.direction);
        let Some(d) = self.db.as_mut() else { return };
        let min_rtt = hint.rtt.unwrap_or_default();
        let m = Measurement {
            rate,
            min_rtt,
            full_pipe,
            at_unix_s: now_unix,
        };
        d.record(&peer, dir, hint.rtt.is_some(), source, &m);
    }

    /// What the database contributed, for the report.
    pub(crate) fn report(&mut self) -> Option<PathDbReport> {
        self.db.take().map(PathDbSession::into_report)
    }
}

/// Where the rate came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// `--tune manual:RATE`.
    Given,
    /// A fresh database entry.
    PathDb,
    /// The probe ran.
    Probe,
    /// Measured by the transfer itself.
    InBand,
    /// No rate.
    None,
}

impl Source {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Source::Given => "given",
            Source::PathDb => "path_db",
            Source::Probe => "probe",
            Source::InBand => "in_band",
            Source::None => "none",
        }
    }
}

/// How the transfer learns the path's rate.
pub(crate) enum Plan {
    /// The rate is known (given or from the database): no measurement; a database rate is
    /// checked against what the transfer delivers when `check`. `entry` is the database's
    /// entry, when it gave the rate.
    Known {
        source: Source,
        check: bool,
        entry: Option<Known>,
    },
    /// The database knows only a lower bound (an earlier transfer ended before its pipe
    /// was seen full): start from it, and measure in band. `entry` is the database's entry.
    AtLeast { entry: Known },
    /// Run the out-of-band probe first (`--tune probe`, NLANR's way).
    Probe,
    /// Measure it in band: the transfer starts at once and finds the full pipe itself.
    InBand,
    /// Go without a rate (a short path: kernel autotuning; or measuring is off).
    Without,
}

/// Decide how to learn the rate at `now_unix`: `hint` is updated with what is known already.
pub(crate) fn decide(
    cfg: &ClientConfig,
    db: &mut PathDbUse,
    hint: &mut PathHint,
    now_unix: f64,
) -> Plan {
    if let TuneMode::Manual(Some(r)) = &cfg.tune {
        hint.rate = Some(*r);
        return Plan::Known {
            source: Source::Given,
            check: false,
            entry: None,
        };
    }
    if !cfg.tune.needs_rate_probe() || cfg.custom_tuner.is_some() {
        return Plan::Without;
    }
    // An entry for the handshake's RTT; or, when another flow's queue lengthened it past
    // the entry's bucket, the entry of the RTT under that queue (its rate is then checked,
    // and a reading beside the queue is a lower bound: the entry stays).
    let known = hint.rtt.and_then(|rtt| {
        db.lookup(rtt, now_unix)
            .or_else(|| db.lookup_behind_queue(rtt, now_unix))
    });
    let long = hint
        .rtt
        .is_some_and(|r| r >= tcptune_core::tuners::auto::MEASURE_MIN_RTT);
    match known {
        Some(k) if k.full_pipe || !cfg.probe => {
            hint.rate = Some(k.rate);
            hint.rate_is_lower_bound = !k.full_pipe;
            db.used();
            Plan::Known {
                source: Source::PathDb,
                check: cfg.probe && k.full_pipe,
                entry: Some(k),
            }
        }
        // A lower bound from a transfer that ended before its pipe was full (a long path,
        // a short transfer): auto starts from it and measures in band.
        Some(k) if cfg.tune == TuneMode::Auto && long => {
            hint.rate = Some(k.rate);
            hint.rate_is_lower_bound = true;
            db.used();
            Plan::AtLeast { entry: k }
        }
        _ if !cfg.probe => Plan::Without,
        _ if cfg.tune == TuneMode::Probe => Plan::Probe,
        _ if long => Plan::InBand,
        // A short path: kernel autotuning is in charge; nothing to measure.
        _ => Plan::Without,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wall clock's time in the tests (Unix seconds).
    const NOW: f64 = 1_704_164_645.0;
    const PEER: &str = "198.19.0.1";

    /// A database in a fresh directory that knows `PEER` at 965 Mbit/s (a full pipe)
    /// measured at `rtt_ms`; the configuration of an `auto` push that uses it.
    fn known_at(name: &str, rtt_ms: u64) -> (std::path::PathBuf, ClientConfig) {
        let dir = std::env::temp_dir().join(format!("tcptune-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("paths.sqlite");
        let mut s = PathDbSession::open(&path, PEER, Direction::Send);
        let m = Measurement {
            rate: Rate::mbit(965),
            min_rtt: Duration::from_millis(rtt_ms),
            full_pipe: true,
            at_unix_s: NOW,
        };
        s.record(PEER, Direction::Send, true, DbSource::Transfer, &m);
        assert_eq!(s.into_report().recorded, ["transfer"]);
        let mut cfg = ClientConfig::new(PEER);
        cfg.tune = TuneMode::Auto;
        cfg.path_db = Some(path);
        (dir, cfg)
    }

    /// What `decide` makes of a handshake of `handshake_ms`, and the database's report.
    fn decided(cfg: &ClientConfig, handshake_ms: u64) -> (Plan, PathHint, PathDbReport) {
        let mut db = PathDbUse::new(cfg, PEER.to_string());
        let mut hint = PathHint {
            rtt: Some(Duration::from_millis(handshake_ms)),
            ..PathHint::default()
        };
        let plan = decide(cfg, &mut db, &mut hint, NOW + 60.0);
        (plan, hint, db.report().expect("a database in use"))
    }

    fn checked_entry_at(plan: &Plan) -> Option<Duration> {
        match plan {
            Plan::Known {
                source: Source::PathDb,
                check: true,
                entry: Some(k),
            } => Some(k.min_rtt),
            _ => None,
        }
    }

    #[test]
    fn a_handshake_behind_another_flows_queue_finds_the_entry_of_the_rtt_under_it() {
        let (dir, cfg) = known_at("behind-queue", 25);
        // 48 ms: two RTT buckets above the entry's, the queue of `iperf3 -P 4` at 25 ms.
        let (plan, hint, report) = decided(&cfg, 48);
        assert_eq!(checked_entry_at(&plan), Some(Duration::from_millis(25)));
        assert_eq!(hint.rate, Some(Rate::mbit(965)));
        assert!(report.used);
        assert_eq!(report.queue_over_base_us, Some(23_000));
        // Within the entry's buckets the entry is found as before, and no queue is named.
        let (plan, _, report) = decided(&cfg, 27);
        assert_eq!(checked_entry_at(&plan), Some(Duration::from_millis(25)));
        assert_eq!(report.queue_over_base_us, None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_path_shorter_than_its_entry_or_another_peers_entry_is_measured_anew() {
        // A handshake far below the only entry: no queue explains it, the path changed.
        let (dir, cfg) = known_at("shorter", 100);
        let (plan, _, report) = decided(&cfg, 25);
        assert!(
            matches!(plan, Plan::InBand),
            "{:?}",
            checked_entry_at(&plan)
        );
        assert!(!report.used);
        assert_eq!(report.queue_over_base_us, None);
        // Another peer's entry gives no base RTT.
        let mut db = PathDbUse::new(&cfg, "198.19.0.9".to_string());
        let mut hint = PathHint {
            rtt: Some(Duration::from_millis(200)),
            ..PathHint::default()
        };
        assert!(matches!(
            decide(&cfg, &mut db, &mut hint, NOW + 60.0),
            Plan::InBand
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
