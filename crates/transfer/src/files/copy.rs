//! `tcptune cp`'s client: check the local side first (walk the sources of a push, find the
//! destination of a pull: a missing source fails before anything is sent), run the session
//! with the files as the main phase's workload, then judge it end to end (every file in
//! place at the receiver, both ends' digests equal) and report it.
//!
//! ```no_run
//! use tcptune_transfer::client::ClientConfig;
//! use tcptune_transfer::files::copy::{copy, CopyConfig, Direction};
//! let cfg = CopyConfig::new(
//!     ClientConfig::new("127.0.0.1"),
//!     Direction::Push { sources: vec!["data".into()], dest: "backup/".into() },
//! );
//! let report = copy(&cfg, None).expect("copy");
//! println!("{} files, {} bytes carried", report.files, report.transferred_bytes);
//! ```

use super::budget::CopyLimits;
use super::plan::DestSpec;
use super::walk::{self, WalkLimits};
use super::work::{FileWork, Source, Spec};
use super::{CopiedFile, FailKind, FileFailure, FileJob, FilesSide, BLOCK_SIZE};
use crate::client::driver::{run_with, CopyJob};
use crate::client::{ClientConfig, ClientError, Progress};
use crate::files::FileFailureExt;
use crate::report::{MeasurementReport, StreamDetail};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
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

/// What to copy and how. Build with [`CopyConfig::new`].
#[derive(Clone, Debug)]
pub struct CopyConfig {
    /// The session: server, port, streams (`-P`), tuning, secret, path database, Ctrl-C.
    pub client: ClientConfig,
    /// The files.
    pub direction: Direction,
    /// Copy directories (`-r`).
    pub recursive: bool,
    /// Use what an earlier run left (default); `false` copies everything again.
    pub resume: bool,
    /// Flush each file to its device before it is renamed into place.
    pub fsync: bool,
    /// Most files and directories this end sends or accepts.
    pub max_files: u64,
    /// Largest file this end accepts in a pull (default: no bound but the free space).
    pub max_file_size: u64,
    /// Most bytes of manifest records this end accepts in a pull (the memory a server's
    /// manifest may take here; default 1 GiB).
    pub max_manifest_bytes: u64,
}

impl CopyConfig {
    /// A copy with resume on, no fsync.
    pub fn new(client: ClientConfig, direction: Direction) -> CopyConfig {
        CopyConfig {
            client,
            direction,
            recursive: false,
            resume: true,
            fsync: false,
            max_files: 10_000_000,
            max_file_size: u64::MAX,
            max_manifest_bytes: 1 << 30,
        }
    }

    fn pull(&self) -> bool {
        matches!(self.direction, Direction::Pull { .. })
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
}

fn local_fail(f: FileFailure) -> ClientError {
    ClientError::File(f)
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

/// Run a copy. `progress` is called about 5 times a second.
pub fn copy(
    cfg: &CopyConfig,
    progress: Option<&mut dyn FnMut(&CopyProgress)>,
) -> Result<CopyReport, ClientError> {
    let start = Instant::now();
    let cpu0 = tcptune_sys::os::process_cpu().unwrap_or_default();
    let (spec, job, sources, destination) = match &cfg.direction {
        Direction::Push { sources, dest } => {
            let tops = walk::local_tops(sources).map_err(local_fail)?;
            let limits = WalkLimits {
                max_entries: cfg.max_files,
                max_bytes: u64::MAX,
            };
            let manifest =
                walk::walk(tops, cfg.recursive, limits, &mut |_| {}).map_err(local_fail)?;
            (
                Spec::Send {
                    source: Source::Ready(manifest),
                },
                FileJob {
                    sources: Vec::new(),
                    dest: Some(dest.clone()),
                    recursive: cfg.recursive,
                    resume: cfg.resume,
                    fsync: cfg.fsync,
                },
                sources.iter().map(|p| p.display().to_string()).collect(),
                dest.clone(),
            )
        }
        Direction::Pull { sources, dest } => {
            if sources.len() > 1 && !dest.is_dir() {
                return Err(local_fail(FileFailure::new(
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
                )));
            }
            let d = pull_dest(dest, sources).map_err(local_fail)?;
            (
                Spec::Recv {
                    dest: d,
                    resume: cfg.resume,
                    fsync: cfg.fsync,
                    limits: CopyLimits {
                        max_entries: cfg.max_files,
                        max_file_size: cfg.max_file_size,
                        max_total_bytes: u64::MAX,
                        max_manifest_bytes: cfg.max_manifest_bytes,
                    },
                },
                FileJob {
                    sources: sources.clone(),
                    dest: None,
                    recursive: cfg.recursive,
                    resume: cfg.resume,
                    fsync: cfg.fsync,
                },
                sources.clone(),
                dest.display().to_string(),
            )
        }
    };
    let work = Arc::new(FileWork::new(spec));
    let mut client = cfg.client.clone();
    client.reverse = cfg.pull();
    client.message_size = BLOCK_SIZE;
    client.messages = 1;
    client.duration = None;
    client.max_time = None;
    client.interval = None;
    let w = work.clone();
    let mut progress = progress;
    let mut cb = |p: &Progress| {
        if let Some(f) = progress.as_mut() {
            f(&CopyProgress {
                preparing: !w.started(),
                bytes: p.bytes,
                total_bytes: w.to_carry.load(Ordering::Relaxed),
                files_done: w.files_done.load(Ordering::Relaxed),
                files_total: w.files_total.load(Ordering::Relaxed),
                streams: p.streams,
                elapsed: start.elapsed(),
            });
        }
    };
    let result = run_with(
        &client,
        Some(&mut cb),
        Some(CopyJob {
            job,
            work: work.clone(),
        }),
    );
    if let Some(f) = work.failure() {
        return Err(ClientError::File(f));
    }
    let (report, remote) = result?;
    if report.end.tcptune.interrupted {
        return Err(ClientError::Interrupted);
    }
    let local = work.summary();
    let remote = remote.unwrap_or_default();
    let (sender, receiver): (&FilesSide, &FilesSide) = if cfg.pull() {
        (&remote, &local)
    } else {
        (&local, &remote)
    };
    if receiver.files_done != receiver.files || receiver.tree_digest.is_none() {
        return Err(ClientError::File(FileFailure::new(
            FailKind::Integrity,
            format!(
                "{} of {} files complete at the receiver",
                receiver.files_done, receiver.files
            ),
        )));
    }
    if sender.tree_digest != receiver.tree_digest {
        return Err(ClientError::File(FileFailure::new(
            FailKind::Integrity,
            "the files' digests differ between the ends",
        )));
    }
    let seconds = start.elapsed().as_secs_f64();
    let cpu = tcptune_sys::os::process_cpu()
        .unwrap_or_default()
        .since(&cpu0);
    let t = &report.end.tcptune;
    Ok(CopyReport {
        schema_version: COPY_SCHEMA_VERSION,
        direction: if cfg.pull() { "pull" } else { "push" }.into(),
        sources,
        destination,
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
        streams_used: t.streams_used,
        streams_reason: t.streams_reason.clone(),
        tune: t.tune.clone(),
        path_hint: report.start.tcptune.path_hint.clone(),
        measurement: report.start.tcptune.measurement.clone(),
        tree_digest: receiver.tree_digest.clone(),
        warnings: sender.warnings.clone(),
        entries: work.copied(),
        streams: t.streams.clone(),
        cpu_s: cpu.total().as_secs_f64(),
    })
}
