//! The directory that holds the emulator's records and journals (`/run/tcptune/` for root,
//! a directory of the user's own otherwise) and the lock that serializes changes to it.
//!
//! The lowest of the record layers: [`host`](crate::host)'s journal of global sysctls and
//! [`state`](crate::state)'s topology records both live here and take [`StateLock`].

use crate::error::EmuError;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::PathBuf;

/// Where root's records live (and the journal of the host's global sysctls).
pub const STATE_DIR: &str = "/run/tcptune";

/// Where this process's records live: [`STATE_DIR`] for root; for anyone else
/// `$XDG_RUNTIME_DIR/tcptune`, or `tcptune-UID` in the temporary directory.
pub fn state_dir() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return PathBuf::from(STATE_DIR);
    }
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(d) if d.is_absolute() => d.join("tcptune"),
        _ => std::env::temp_dir().join(format!("tcptune-{uid}")),
    }
}

/// Create the state directory and return it; one that is not root's must be a directory
/// of this user's that nobody else may write (it is under a shared temporary directory).
pub fn ensure_state_dir() -> Result<PathBuf, EmuError> {
    ensure_dir()?;
    Ok(state_dir())
}

fn ensure_dir() -> Result<(), EmuError> {
    let dir = state_dir();
    if dir == std::path::Path::new(STATE_DIR) {
        return fs::create_dir_all(&dir)
            .map_err(|e| EmuError::sys(format!("creating {}", dir.display()), e));
    }
    match fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(EmuError::sys(format!("creating {}", dir.display()), e)),
    }
    let meta = fs::symlink_metadata(&dir)
        .map_err(|e| EmuError::sys(format!("checking {}", dir.display()), e))?;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(EmuError::State {
            path: dir.display().to_string(),
            detail: format!(
                "not a directory of uid {uid} that only it may write; remove it or set \
                 XDG_RUNTIME_DIR"
            ),
        });
    }
    Ok(())
}

/// Holds `/run/tcptune/.lock` (an exclusive flock) while alive.
pub(crate) struct StateLock(#[allow(dead_code)] fs::File);

impl StateLock {
    pub(crate) fn acquire() -> Result<StateLock, EmuError> {
        ensure_dir()?;
        let path = state_dir().join(".lock");
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| EmuError::sys(format!("opening {}", path.display()), e))?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(EmuError::last_os(format!("flock {}", path.display())));
        }
        Ok(StateLock(f))
    }
}
