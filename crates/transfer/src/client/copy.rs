//! `tcptune cp`'s client: a transfer whose workload is files (see [`Workload::Files`]).
//! Prepare the files workload (a missing source fails before anything is sent), run the
//! session with it, then judge the copy end to end and report it
//! ([`FilesWorkload::judge`]).
//!
//! ```no_run
//! use tcptune_transfer::client::ClientConfig;
//! use tcptune_transfer::client::copy::{copy, CopyConfig, Direction};
//! let cfg = CopyConfig::new(
//!     ClientConfig::new("127.0.0.1"),
//!     Direction::Push { sources: vec!["data".into()], dest: "backup/".into() },
//! );
//! let report = copy(&cfg, None).expect("copy");
//! println!("{} files, {} bytes carried", report.files, report.transferred_bytes);
//! ```

use super::workload::{Transferred, Workload};
use super::{driver, ClientConfig, ClientError, Progress};
use crate::files::workload::FilesWorkload;
use std::time::Instant;

pub use crate::files::workload::{
    CopyProgress, CopyReport, Direction, FilesConfig, COPY_SCHEMA_VERSION,
};

/// What to copy and how. Build with [`CopyConfig::new`].
#[derive(Clone, Debug)]
pub struct CopyConfig {
    /// The session: server, port, streams (`-P`), tuning, secret, path database, Ctrl-C.
    pub client: ClientConfig,
    /// The files: direction, `-r`, resume, fsync, this end's limits.
    pub files: FilesConfig,
}

impl CopyConfig {
    /// A copy with resume on, no fsync.
    pub fn new(client: ClientConfig, direction: Direction) -> CopyConfig {
        CopyConfig {
            client,
            files: FilesConfig::new(direction),
        }
    }
}

/// Run a copy. `progress` is called about 5 times a second.
pub fn copy(
    cfg: &CopyConfig,
    progress: Option<&mut dyn FnMut(&CopyProgress)>,
) -> Result<CopyReport, ClientError> {
    let start = Instant::now();
    let cpu0 = tcptune_sys::os::process_cpu().unwrap_or_default();
    let files = FilesWorkload::prepare(&cfg.files).map_err(ClientError::File)?;
    let mut progress = progress;
    let mut cb = |p: &Progress| {
        if let Some(f) = progress.as_mut() {
            f(&files.progress(p.bytes, p.streams, start.elapsed()));
        }
    };
    let result = driver::transfer(&cfg.client, Workload::Files(&files), Some(&mut cb));
    let Transferred {
        report,
        remote_files,
    } = finished(&files, result)?;
    let cpu = tcptune_sys::os::process_cpu()
        .unwrap_or_default()
        .since(&cpu0);
    files
        .judge(
            &report,
            remote_files,
            start.elapsed().as_secs_f64(),
            cpu.total().as_secs_f64(),
        )
        .map_err(ClientError::File)
}

/// The session's result as the copy's: a file failure first (it is why the session
/// failed, if it did), then the session's own error, then an interruption.
fn finished(
    files: &FilesWorkload,
    result: Result<Transferred, ClientError>,
) -> Result<Transferred, ClientError> {
    if let Some(f) = files.failure() {
        return Err(ClientError::File(f));
    }
    let done = result?;
    if done.report.end.tcptune.interrupted {
        return Err(ClientError::Interrupted);
    }
    Ok(done)
}
