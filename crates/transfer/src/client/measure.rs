//! How the client learns the path's rate before the transfer: a fresh entry of the path
//! database, the bandwidth probe, or nothing; and what it records afterwards.

use super::ClientConfig;
use crate::pathdb::PathDbFile;
use crate::report::PathDbReport;
use std::time::Duration;
use tcptune_core::pathdb::{Direction, Known, Measurement, PathDbPolicy};
use tcptune_core::{PathHint, TuneMode};

/// The path database as one transfer uses it.
pub(crate) struct PathDbUse {
    file: Option<PathDbFile>,
    pub(crate) report: Option<PathDbReport>,
    peer: String,
    direction: Direction,
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
    /// No rate.
    None,
}

impl Source {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Source::Given => "given",
            Source::PathDb => "path_db",
            Source::Probe => "probe",
            Source::None => "none",
        }
    }
}

impl PathDbUse {
    pub(crate) fn new(cfg: &ClientConfig, peer: String) -> PathDbUse {
        let file = cfg.path_db.as_ref().map(PathDbFile::new);
        let report = file.as_ref().map(|f| PathDbReport {
            file: f.path().display().to_string(),
            used: false,
            entry_age_s: None,
            entry_samples: None,
            entry_full_pipe: None,
            recorded: Vec::new(),
            warnings: Vec::new(),
        });
        PathDbUse {
            file,
            report,
            peer,
            direction: if cfg.reverse {
                Direction::Receive
            } else {
                Direction::Send
            },
        }
    }

    /// A fresh entry for this path, if the database has one (problems become warnings).
    pub(crate) fn lookup(&mut self, rtt: Duration) -> Option<Known> {
        let f = self.file.as_ref()?;
        let known = match f.load() {
            Ok(d) => d.lookup(
                &self.peer,
                self.direction,
                rtt,
                unix_now(),
                &PathDbPolicy::default(),
            ),
            Err(e) => {
                if let Some(r) = self.report.as_mut() {
                    r.warnings.push(e.to_string());
                }
                None
            }
        };
        if let (Some(k), Some(r)) = (&known, self.report.as_mut()) {
            r.entry_age_s = Some(k.age.as_secs_f64());
            r.entry_samples = Some(k.samples);
            r.entry_full_pipe = Some(k.full_pipe);
        }
        known
    }

    /// Mark the entry as used.
    pub(crate) fn used(&mut self) {
        if let Some(r) = self.report.as_mut() {
            r.used = true;
        }
    }

    /// Record a measurement (when a database is in use and the RTT is known); problems with
    /// the file become warnings of the report.
    pub(crate) fn record(
        &mut self,
        hint: &PathHint,
        what: &str,
        rate: tcptune_core::Rate,
        full_pipe: bool,
    ) {
        let (Some(f), Some(r), Some(rtt)) = (&self.file, self.report.as_mut(), hint.rtt) else {
            return;
        };
        let m = Measurement {
            rate,
            min_rtt: rtt,
            full_pipe,
            at_unix_s: unix_now(),
        };
        let (peer, dir) = (&self.peer, self.direction);
        match f.update(|d| d.record(peer, dir, &m, &PathDbPolicy::default())) {
            Ok(warning) => {
                r.recorded.push(what.to_string());
                r.warnings.extend(warning.map(|w| w.to_string()));
            }
            Err(e) => r.warnings.push(e.to_string()),
        }
    }
}

/// Whether the transfer needs a probe first, and the rate it already has.
pub(crate) enum Plan {
    /// The rate is known (given or from the database): no probe.
    Known(Source),
    /// Run the probe.
    Probe,
    /// Go without a rate.
    Without,
}

/// Decide how to learn the rate: `hint` is updated with what is known already.
pub(crate) fn decide(cfg: &ClientConfig, db: &mut PathDbUse, hint: &mut PathHint) -> Plan {
    if let TuneMode::Manual(Some(r)) = &cfg.tune {
        hint.rate = Some(*r);
        return Plan::Known(Source::Given);
    }
    if !cfg.tune.needs_rate_probe() || cfg.custom_tuner.is_some() {
        return Plan::Without;
    }
    let known = hint.rtt.and_then(|rtt| db.lookup(rtt));
    match known.filter(|k| k.full_pipe || !cfg.probe) {
        Some(k) => {
            hint.rate = Some(k.rate);
            hint.rate_is_lower_bound = !k.full_pipe;
            db.used();
            Plan::Known(Source::PathDb)
        }
        None if cfg.probe => Plan::Probe,
        None => Plan::Without,
    }
}

pub(crate) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
