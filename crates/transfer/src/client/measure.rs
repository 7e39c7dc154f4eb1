//! How the client learns the path's rate before the transfer: a fresh entry of the path
//! database, the bandwidth probe, or nothing; and what it records afterwards.

use super::ClientConfig;
use crate::pathdb::{PathDbSession, Source as DbSource};
use crate::report::PathDbReport;
use std::time::Duration;
use tcptune_core::pathdb::{Direction, Known, Measurement};
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
    let known = hint.rtt.and_then(|rtt| db.lookup(rtt, now_unix));
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
