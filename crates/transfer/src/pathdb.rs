//! The client's use of the path database ([`tcptune_pathdb`], whose rules are
//! [`tcptune_core::pathdb`]'s): open it once per transfer, look the path up, record the
//! probe's and the transfer's measurements, and turn whatever went wrong into warnings of the
//! report. Nothing here is ever fatal to a transfer.
//!
//! [`default_location`] and the store itself are re-exported, so that
//! `tcptune_transfer::pathdb::default_location` keeps working.

use crate::report::PathDbReport;
use std::path::Path;
use std::time::Duration;
use tcptune_core::pathdb::{Direction, Known, Measurement, PathDbPolicy};
pub use tcptune_pathdb::{default_location, Location, PathStore, Source, ENV_VAR};

/// The path database for one transfer, and what it contributed (for the report).
#[derive(Debug)]
pub(crate) struct PathDbSession {
    store: Option<PathStore>,
    report: PathDbReport,
    policy: PathDbPolicy,
}

impl PathDbSession {
    /// Open the database at `path`; a failure becomes a warning and the session goes on
    /// without it.
    pub(crate) fn open(path: &Path) -> PathDbSession {
        let mut report = PathDbReport {
            file: Location::resolve(path).database.display().to_string(),
            used: false,
            entry_age_s: None,
            entry_samples: None,
            entry_full_pipe: None,
            recorded: Vec::new(),
            warnings: Vec::new(),
        };
        let store = match PathStore::open(path) {
            Ok(mut s) => {
                report
                    .warnings
                    .extend(s.take_warnings().iter().map(ToString::to_string));
                Some(s)
            }
            Err(e) => {
                report.warnings.push(e.to_string());
                None
            }
        };
        PathDbSession {
            store,
            report,
            policy: PathDbPolicy::default(),
        }
    }

    fn take_warnings(&mut self) {
        if let Some(s) = self.store.as_mut() {
            self.report
                .warnings
                .extend(s.take_warnings().iter().map(ToString::to_string));
        }
    }

    /// The entry for this path that is fresh at `now_unix_s` (Unix seconds), if any (noted
    /// in the report, used or not).
    pub(crate) fn lookup(
        &mut self,
        peer: &str,
        direction: Direction,
        rtt: Duration,
        now_unix_s: f64,
    ) -> Option<Known> {
        let store = self.store.as_mut()?;
        let known = match store.lookup(peer, direction, rtt, now_unix_s, &self.policy) {
            Ok(k) => k,
            Err(e) => {
                self.report.warnings.push(e.to_string());
                None
            }
        };
        self.take_warnings();
        if let Some(k) = &known {
            self.report.entry_age_s = Some(k.age.as_secs_f64());
            self.report.entry_samples = Some(k.samples);
            self.report.entry_full_pipe = Some(k.full_pipe);
        }
        known
    }

    /// The entry found was used instead of probing.
    pub(crate) fn mark_used(&mut self) {
        self.report.used = true;
    }

    /// Record a measurement, made at its `at_unix_s` (when the path's RTT is known: without
    /// it the entry would land in a meaningless RTT bucket).
    pub(crate) fn record(
        &mut self,
        peer: &str,
        direction: Direction,
        rtt_known: bool,
        source: Source,
        m: &Measurement,
    ) {
        let Some(store) = self.store.as_mut() else {
            return;
        };
        if !rtt_known {
            return;
        }
        match store.record(peer, direction, m, &source, &self.policy) {
            Ok(_) => self.report.recorded.push(source.as_str().to_string()),
            Err(e) => self.report.warnings.push(e.to_string()),
        }
        self.take_warnings();
    }

    /// What the database contributed.
    pub(crate) fn into_report(self) -> PathDbReport {
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcptune_core::Rate;

    /// The wall clock's time in the tests (Unix seconds).
    const NOW: f64 = 1_704_164_645.0;

    fn probe(at_unix_s: f64) -> Measurement {
        Measurement {
            rate: Rate::mbit(10),
            min_rtt: Duration::from_millis(10),
            full_pipe: true,
            at_unix_s,
        }
    }

    #[test]
    fn an_unusable_database_becomes_a_warning_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("tcptune-session-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("not-a-db");
        std::fs::write(&path, "plain text").expect("write");
        let mut s = PathDbSession::open(&path);
        assert!(s
            .lookup("10.0.0.2", Direction::Send, Duration::from_millis(10), NOW)
            .is_none());
        s.record(
            "10.0.0.2",
            Direction::Send,
            true,
            Source::Probe,
            &probe(NOW),
        );
        let r = s.into_report();
        assert!(r.recorded.is_empty());
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        assert!(
            r.warnings[0].contains("not touching it"),
            "{:?}",
            r.warnings
        );
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "plain text");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_recorded_probe_is_found_by_the_next_session() {
        let dir = std::env::temp_dir().join(format!("tcptune-session2-{}", std::process::id()));
        let path = dir.join("paths.sqlite");
        let mut s = PathDbSession::open(&path);
        s.record(
            "10.0.0.2",
            Direction::Send,
            true,
            Source::Probe,
            &probe(NOW),
        );
        // Without an RTT nothing is recorded.
        s.record(
            "10.0.0.2",
            Direction::Send,
            false,
            Source::Transfer,
            &probe(NOW),
        );
        assert_eq!(s.into_report().recorded, ["probe"]);
        let mut s = PathDbSession::open(&path);
        let k = s
            .lookup(
                "10.0.0.2",
                Direction::Send,
                Duration::from_millis(11),
                NOW + 60.0,
            )
            .expect("found");
        assert_eq!(k.rate, Rate::mbit(10));
        // Its age is counted from the time it was recorded at to the time of the lookup.
        assert!((k.age.as_secs_f64() - 60.0).abs() < 1e-3, "{:?}", k.age);
        let r = s.into_report();
        assert_eq!(r.entry_samples, Some(1));
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
