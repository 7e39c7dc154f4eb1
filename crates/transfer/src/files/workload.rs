//! The files workload of a transfer (`tcptune cp`): what a copy prepares on this end before
//! the session (walk the sources of a push, find the destination of a pull: a missing source
//! fails before anything is sent), what the main phase's engine carries instead of the
//! pattern, and how the finished copy is judged end to end (every file in place at the
//! receiver, both ends' digests equal) and reported.
//!
//! This module sits below the client: it knows nothing of connections or sessions. The
//! client's driver takes a [`FilesWorkload`] (see `client::Workload`) and hands back the
//! session's report, which [`FilesWorkload::judge`] turns into a [`CopyReport`].
//!
//! # Calling order
//!
//! 1. [`FilesWorkload::prepare`] with a [`FilesConfig`]: checks the local side.
//! 2. Run the session with it as the main phase's workload; while it runs,
//!    [`FilesWorkload::progress`] turns the session's progress into a [`CopyProgress`].
//! 3. [`FilesWorkload::failure`]: a file failure at this end is the copy's error, whatever
//!    the session says.
//! 4. [`FilesWorkload::judge`] with the session's report and the server's file summary.

use super::budget::CopyLimits;
use super::plan::DestSpec;
use super::walk::{self, WalkLimits};
use super::work::{FileWork, Source, Spec};
use super::{CopiedFile, FailKind, FileFailure, FileJob, FilesSide};
use crate::files::FileFailureExt;
use crate::report::{MeasurementReport, QueueReport, Report, StreamDetail};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tcptune_core::PathHint;
use tcptune_sys::fs::Dir;

/// Version of [`CopyReport`]'s JSON.
pub const COPY_SCHEMA_VERSION: u32 = 1;

/// Which way the files go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Local sources to a path under the server's root.
    Push {
        /// Local files and directories.
        sources: Vec<PathBuf>,
        /// The destination under the server's root (a trailing `/`: a directory).
        dest: String,
    },
    /// Paths under the server's root to a local destination.
    Pull {
        /// Files and directories under the server's root.
        sources: Vec<String>,
        /// The local destination.
        dest: PathBuf,
    },
}

/// What to copy and how, without the session (see `client::copy::CopyConfig`). Build with
/// [`FilesConfig::new`].
#[derive(Clone, Debug)]
pub struct FilesConfig {
    /// The files.
    pub direction: Direction,
    /// Copy directories (`-r`).
    pub recursive: bool,
    /// Use what an earlier run left (default); `false` copies everything again.
    pub resume: bool,
    /// Flush each file to its device before it is renamed into place.
    pub fsync: bool,
    /// Seal every block body (ChaCha20-Poly1305 under the session's key, `cp --encrypt`);
    /// a server that cannot fails the copy before any block goes.
    pub encrypt: bool,
    /// Most files and directories this end sends or accepts.
    pub max_files: u64,
    /// Largest file this end accepts in a pull (default: no bound but the free space).
    pub max_file_size: u64,
    /// Most bytes of manifest records this end accepts in a pull (the memory a server's
    /// manifest may take here; default 1 GiB).
    pub max_manifest_bytes: u64,
}

impl FilesConfig {
    /// A copy with resume on, no fsync.
    pub fn new(direction: Direction) -> FilesConfig {
        FilesConfig {
            direction,
            recursive: false,
            resume: true,
            fsync: false,
            encrypt: false,
            max_files: 10_000_000,
            max_file_size: u64::MAX,
            max_manifest_bytes: 1 << 30,
        }
    }

    /// The job the server is told of, with the sources and destination a pull names.
    fn job(&self, sources: Vec<String>, dest: Option<String>) -> FileJob {
        FileJob {
            sources,
            dest,
            recursive: self.recursive,
            resume: self.resume,
            fsync: self.fsync,
            encrypt: self.encrypt,
        }
    }
}

/// Progress of a running copy.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyProgress {
    /// Still preparing (walking, exchanging the manifest and the plan, hashing what an
    /// earlier run left): the totals are not known yet.
    pub preparing: bool,
    /// Payload bytes this run carried so far.
    pub bytes: u64,
    /// Bytes this run carries at most (known once prepared).
    pub total_bytes: u64,
    /// Files complete.
    pub files_done: u64,
    /// Files in all.
    pub files_total: u64,
    /// Streams open.
    pub streams: u32,
    /// Since the copy started.
    pub elapsed: Duration,
}

/// The report of a finished copy (`tcptune cp --json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CopyReport {
    /// [`COPY_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `push` (to the server) or `pull` (from it).
    pub direction: String,
    /// The sources as given.
    pub sources: Vec<String>,
    /// The destination as given.
    pub destination: String,
    /// Files copied (complete at the destination).
    pub files: u64,
    /// Directories copied.
    pub dirs: u64,
    /// Total bytes of the copied files.
    pub bytes: u64,
    /// Bytes carried over the network by this run (blocks sent again included).
    pub transferred_bytes: u64,
    /// Bytes not carried because the destination had them already (from an interrupted
    /// run, or an identical file), each block verified by its checksum.
    pub present_bytes: u64,
    /// Wall clock from the start of the copy to the last file in place, seconds.
    pub seconds: f64,
    /// `transferred_bytes * 8 / seconds`.
    pub bits_per_second: f64,
    /// Blocks that failed their checksum at the receiver and were sent again.
    pub resent_blocks: u64,
    /// Every block body was sealed on the wire (`cp --encrypt`).
    pub encrypted: bool,
    /// Streams used.
    pub streams_used: u32,
    /// Why more streams than asked for (`-P`), if so.
    pub streams_reason: Option<String>,
    /// The tuning mode.
    pub tune: String,
    /// What was known of the path (RTT, rate), as `send --json` writes it.
    #[serde(serialize_with = "crate::report_serde::path_hint::serialize")]
    pub path_hint: PathHint,
    /// How the path's rate was obtained.
    pub measurement: Option<MeasurementReport>,
    /// BLAKE3 over every file's digest, equal at both ends.
    pub tree_digest: Option<String>,
    /// Entries the sender skipped (symlinks, devices, names that are not UTF-8).
    pub warnings: Vec<String>,
    /// Every file with its BLAKE3 digest (what `b3sum` prints).
    pub entries: Vec<CopiedFile>,
    /// Per-stream tuning detail from both ends (as `send --json`'s `end.tcptune.streams`).
    pub streams: Vec<StreamDetail>,
    /// CPU seconds of this process (user + system).
    pub cpu_s: f64,
    /// CPU seconds of the far end's session (user + system of the threads that served its
    /// streams: reading or writing, hashing and checking every block).
    pub remote_cpu_s: f64,
    /// The wait in the server's queue for a session slot (as `send --json`'s
    /// `start.tcptune.queue`); `null` when the client never waited.
    pub queue: Option<QueueReport>,
}

/// Where a pull lands: the destination's directory (or its parent) as the root.
fn pull_dest(dest: &Path, sources: &[String]) -> Result<DestSpec, FileFailure> {
    let shown = dest.display().to_string();
    let must_be_dir = shown.ends_with('/') && shown.len() > 1;
    let expect: Vec<String> = sources
        .iter()
        .map(|s| super::last_component(s.trim_end_matches('/')).to_string())
        .collect();
    let (root, base) = match std::fs::metadata(dest) {
        Ok(m) if m.is_dir() => (dest.to_path_buf(), PathBuf::new()),
        _ => {
            let parent = match dest.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            let name = dest.file_name().ok_or_else(|| {
                FileFailure::new(
                    FailKind::Usage,
                    format!("{shown}: not a file or directory name"),
                )
            })?;
            (parent, PathBuf::from(name))
        }
    };
    let dir = Dir::open(&root).map_err(|e| {
        let mut f = FileFailure::fs(&e, &root.display().to_string());
        if f.kind == FailKind::NotFound {
            f.message = format!("{shown}: its directory {} does not exist", root.display());
        }
        f
    })?;
    Ok(DestSpec {
        root: Arc::new(dir),
        base,
        shown,
        must_be_dir,
        expect_tops: Some(expect),
    })
}

/// A copy's files, prepared on this end: the job the server hears and the work this end's
/// engine does (see the module's calling order).
#[derive(Debug)]
pub struct FilesWorkload {
    job: FileJob,
    work: Arc<FileWork>,
    pull: bool,
    /// The sources as given, for the report.
    sources: Vec<String>,
    /// The destination as given, for the report.
    destination: String,
}

impl FilesWorkload {
    /// Check the local side: walk a push's sources, open a pull's destination.
    pub fn prepare(cfg: &FilesConfig) -> Result<FilesWorkload, FileFailure> {
        match &cfg.direction {
            Direction::Push { sources, dest } => prepare_push(cfg, sources, dest),
            Direction::Pull { sources, dest } => prepare_pull(cfg, sources, dest),
        }
    }

    /// Whether the server sends (a pull).
    pub fn pull(&self) -> bool {
        self.pull
    }

    /// The job the server is asked for.
    pub(crate) fn job(&self) -> &FileJob {
        &self.job
    }

    /// What this end's engine carries in the main phase.
    pub(crate) fn work(&self) -> &Arc<FileWork> {
        &self.work
    }

    /// The copy's progress from the session's: `bytes` carried and `streams` open so far,
    /// `elapsed` since the copy started.
    pub fn progress(&self, bytes: u64, streams: u32, elapsed: Duration) -> CopyProgress {
        let w = &self.work;
        CopyProgress {
            preparing: !w.started(),
            bytes,
            total_bytes: w.to_carry.load(Ordering::Relaxed),
            files_done: w.files_done.load(Ordering::Relaxed),
            files_total: w.files_total.load(Ordering::Relaxed),
            streams,
            elapsed,
        }
    }

    /// The failure of a file at this end (or told by the server), if one ended the copy.
    pub fn failure(&self) -> Option<FileFailure> {
        self.work.failure()
    }

    /// Judge the finished copy end to end and report it: the session's `report`, the
    /// server's file summary (`remote`), the copy's wall time and this process's CPU time,
    /// seconds.
    pub fn judge(
        &self,
        report: &Report,
        remote: Option<FilesSide>,
        seconds: f64,
        cpu_s: f64,
    ) -> Result<CopyReport, FileFailure> {
        let local = self.work.summary();
        let remote = remote.unwrap_or_default();
        let (sender, receiver) = if self.pull {
            (&remote, &local)
        } else {
            (&local, &remote)
        };
        check_complete(sender, receiver)?;
        Ok(self.report(report, sender, receiver, seconds, cpu_s))
    }

    /// The copy's report from the session's and the ends' file summaries.
    fn report(
        &self,
        report: &Report,
        sender: &FilesSide,
        receiver: &FilesSide,
        seconds: f64,
        cpu_s: f64,
    ) -> CopyReport {
        let t = &report.end.tcptune;
        CopyReport {
            schema_version: COPY_SCHEMA_VERSION,
            direction: if self.pull { "pull" } else { "push" }.into(),
            sources: self.sources.clone(),
            destination: self.destination.clone(),
            files: receiver.files_done,
            dirs: receiver.dirs,
            bytes: receiver.bytes,
            transferred_bytes: receiver.carried_bytes,
            present_bytes: receiver.present_bytes,
            seconds,
            bits_per_second: if seconds > 0.0 {
                receiver.carried_bytes as f64 * 8.0 / seconds
            } else {
                0.0
            },
            resent_blocks: receiver.resent_blocks,
            encrypted: self.job.encrypt,
            streams_used: t.streams_used,
            streams_reason: t.streams_reason.clone(),
            tune: t.tune.clone(),
            path_hint: report.start.tcptune.path_hint.clone(),
            measurement: report.start.tcptune.measurement.clone(),
            tree_digest: receiver.tree_digest.clone(),
            warnings: sender.warnings.clone(),
            entries: self.work.copied(),
            streams: t.streams.clone(),
            cpu_s,
            remote_cpu_s: t.cpu_s.remote(),
            queue: report.start.tcptune.queue.clone(),
        }
    }
}

/// A push: walk the local sources (a missing one fails here); the server is told only the
/// destination, the manifest goes on stream 0.
fn prepare_push(
    cfg: &FilesConfig,
    sources: &[PathBuf],
    dest: &str,
) -> Result<FilesWorkload, FileFailure> {
    let tops = walk::local_tops(sources)?;
    let limits = WalkLimits {
        max_entries: cfg.max_files,
        max_bytes: u64::MAX,
    };
    let manifest = walk::walk(tops, cfg.recursive, limits, &mut |_| {})?;
    let spec = Spec::Send {
        source: Source::Ready(manifest),
    };
    Ok(FilesWorkload {
        job: cfg.job(Vec::new(), Some(dest.to_string())),
        work: Arc::new(FileWork::new(spec)),
        pull: false,
        sources: sources.iter().map(|p| p.display().to_string()).collect(),
        destination: dest.to_string(),
    })
}

/// A pull: find where it lands (several sources need a directory); the server is told the
/// sources.
fn prepare_pull(
    cfg: &FilesConfig,
    sources: &[String],
    dest: &Path,
) -> Result<FilesWorkload, FileFailure> {
    if sources.len() > 1 && !dest.is_dir() {
        return Err(FileFailure::new(
            if dest.exists() {
                FailKind::Usage
            } else {
                FailKind::NotFound
            },
            format!(
                "{} is not a directory (copying {} sources needs one)",
                dest.display(),
                sources.len()
            ),
        ));
    }
    let spec = Spec::Recv {
        dest: pull_dest(dest, sources)?,
        resume: cfg.resume,
        fsync: cfg.fsync,
        limits: CopyLimits {
            max_entries: cfg.max_files,
            max_file_size: cfg.max_file_size,
            max_total_bytes: u64::MAX,
            max_manifest_bytes: cfg.max_manifest_bytes,
        },
    };
    Ok(FilesWorkload {
        job: cfg.job(sources.to_vec(), None),
        work: Arc::new(FileWork::new(spec)),
        pull: true,
        sources: sources.to_vec(),
        destination: dest.display().to_string(),
    })
}

/// Every file in place at the receiver, and both ends' digests of the tree equal.
fn check_complete(sender: &FilesSide, receiver: &FilesSide) -> Result<(), FileFailure> {
    if receiver.files_done != receiver.files || receiver.tree_digest.is_none() {
        return Err(FileFailure::new(
            FailKind::Integrity,
            format!(
                "{} of {} files complete at the receiver",
                receiver.files_done, receiver.files
            ),
        ));
    }
    if sender.tree_digest != receiver.tree_digest {
        return Err(FileFailure::new(
            FailKind::Integrity,
            "the files' digests differ between the ends",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(files: u64, done: u64, digest: Option<&str>) -> FilesSide {
        FilesSide {
            files,
            files_done: done,
            tree_digest: digest.map(str::to_string),
            ..FilesSide::default()
        }
    }

    #[test]
    fn a_receiver_missing_files_fails_the_copy_as_an_integrity_failure() {
        let f = check_complete(&side(3, 3, Some("a")), &side(3, 2, None)).unwrap_err();
        assert_eq!(f.kind, FailKind::Integrity);
        assert_eq!(f.message, "2 of 3 files complete at the receiver");
    }

    #[test]
    fn digests_that_differ_between_the_ends_fail_the_copy() {
        let f = check_complete(&side(3, 3, Some("a")), &side(3, 3, Some("b"))).unwrap_err();
        assert_eq!(f.kind, FailKind::Integrity);
        assert!(check_complete(&side(3, 3, Some("a")), &side(3, 3, Some("a"))).is_ok());
    }

    #[test]
    fn a_pull_of_two_sources_into_a_missing_directory_fails_before_the_session() {
        let mut cfg = FilesConfig::new(Direction::Pull {
            sources: vec!["a".into(), "b".into()],
            dest: PathBuf::from("/nonexistent/tcptune-workload-test"),
        });
        cfg.recursive = true;
        let f = FilesWorkload::prepare(&cfg).unwrap_err();
        assert_eq!(f.kind, FailKind::NotFound);
        assert!(f.message.contains("is not a directory"), "{}", f.message);
    }

    #[test]
    fn a_push_of_a_missing_source_fails_before_the_session() {
        let cfg = FilesConfig::new(Direction::Push {
            sources: vec![PathBuf::from("/nonexistent/tcptune-workload-test")],
            dest: "x".into(),
        });
        let f = FilesWorkload::prepare(&cfg).unwrap_err();
        assert_eq!(f.kind, FailKind::NotFound);
    }
}
