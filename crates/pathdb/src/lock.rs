//! An exclusive lock on a file next to the database, for the rare steps SQLite's own locking
//! cannot cover: replacing the database file itself (moving a damaged one aside, converting
//! a JSON file in place).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// Longest wait for another process's transaction (SQLite's busy timeout) or lock file.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the lock could not be taken.
#[derive(Debug)]
pub(crate) enum LockError {
    /// Opening or locking the file failed.
    Io(&'static str, std::io::Error),
    /// Another process held it for over [`BUSY_TIMEOUT`].
    TimedOut,
}

/// Held while alive (the lock is released when the file is closed).
#[derive(Debug)]
pub(crate) struct FileLock {
    _file: File,
}

impl FileLock {
    /// Take an exclusive `flock` on `path` (created if missing), waiting at most
    /// [`BUSY_TIMEOUT`].
    pub(crate) fn acquire(path: &Path) -> Result<FileLock, LockError> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| LockError::Io("opening its lock file", e))?;
        let deadline = Instant::now() + BUSY_TIMEOUT;
        loop {
            // SAFETY: flock on a descriptor we own; no memory is passed.
            let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if r == 0 {
                return Ok(FileLock { _file: file });
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(LockError::Io("locking its lock file", e));
            }
            if Instant::now() > deadline {
                return Err(LockError::TimedOut);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
