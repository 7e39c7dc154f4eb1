//! What a transfer's main phase carries: `send`'s verified pattern or `cp`'s files. A
//! session is the same for both (admission, authentication, tuners, stream count, in-band
//! measurement, report); the workload decides only what the server is asked for, what this
//! end's engine carries, and how the session's settings follow from it.
//!
//! It is an enum and not a trait: there are two workloads, both known to this crate, and
//! what the driver needs of them are the engine's crate-private types (a copy's
//! `FileWork`) that a public trait could not name. Matching on two variants in three small
//! methods reads more plainly than a trait object would.

use super::ClientConfig;
use crate::files::workload::FilesWorkload;
use crate::files::{FileJob, FilesSide, BLOCK_SIZE};
use crate::report::Report;
use std::borrow::Cow;
use std::sync::Arc;

/// The main phase's workload (see the module documentation).
#[derive(Clone, Copy, Debug)]
pub enum Workload<'a> {
    /// Messages of the verified pattern: `ClientConfig::messages` of `message_size` bytes,
    /// or for `duration` (the pattern's parameters stay in [`ClientConfig`], where `send`'s
    /// options put them).
    Pattern,
    /// A copy's files, prepared with [`FilesWorkload::prepare`].
    Files(&'a FilesWorkload),
}

/// A finished transfer: the report, and what the server said of a copy's files.
#[derive(Debug)]
pub struct Transferred {
    /// The report, as `send --json` writes it.
    pub report: Report,
    /// The server's summary of a copy's files (`None` for the pattern).
    pub remote_files: Option<FilesSide>,
}

impl Workload<'_> {
    /// The session's settings for this workload: a copy moves blocks of files, in the
    /// direction of the copy, for as long as it takes, without `send`'s intervals.
    pub(crate) fn session_config<'c>(&self, cfg: &'c ClientConfig) -> Cow<'c, ClientConfig> {
        match self {
            Workload::Pattern => Cow::Borrowed(cfg),
            Workload::Files(files) => {
                let mut c = cfg.clone();
                c.reverse = files.pull();
                c.message_size = BLOCK_SIZE;
                c.messages = 1;
                c.duration = None;
                c.max_time = None;
                c.interval = None;
                Cow::Owned(c)
            }
        }
    }

    /// The copy the server is asked for (`None`: the pattern).
    pub(crate) fn file_job(&self) -> Option<FileJob> {
        match self {
            Workload::Pattern => None,
            Workload::Files(files) => Some(files.job().clone()),
        }
    }

    /// What this end's engine carries instead of the pattern in the main phase.
    pub(crate) fn engine_files(&self) -> Option<Arc<crate::files::work::FileWork>> {
        match self {
            Workload::Pattern => None,
            Workload::Files(files) => Some(files.work().clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::workload::{Direction, FilesConfig};

    #[test]
    fn the_pattern_keeps_the_configuration_and_asks_for_no_files() {
        let cfg = ClientConfig::new("127.0.0.1");
        let w = Workload::Pattern;
        assert!(matches!(w.session_config(&cfg), Cow::Borrowed(_)));
        assert!(w.file_job().is_none());
        assert!(w.engine_files().is_none());
    }

    #[test]
    fn a_pull_runs_reversed_in_blocks_without_a_time_limit_or_intervals() {
        let dir = std::env::temp_dir();
        let files = FilesWorkload::prepare(&FilesConfig::new(Direction::Pull {
            sources: vec!["x".into()],
            dest: dir.clone(),
        }))
        .expect("the temporary directory is a destination");
        let mut cfg = ClientConfig::new("127.0.0.1");
        cfg.duration = Some(std::time::Duration::from_secs(3));
        let w = Workload::Files(&files);
        let c = w.session_config(&cfg);
        assert!(c.reverse);
        assert_eq!(c.message_size, BLOCK_SIZE);
        assert_eq!((c.duration, c.max_time, c.interval), (None, None, None));
        assert_eq!(w.file_job().map(|j| j.sources), Some(vec!["x".to_string()]));
        assert!(w.engine_files().is_some());
    }
}
