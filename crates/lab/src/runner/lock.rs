//! One lab at a time per host: the global sysctls a lab raises and restores are shared, and
//! two labs would disturb each other's measurements.
//!
//! A rootless lab cannot create the host-wide lock file, but takes the lock on it when it
//! exists (flock works on a file opened read-only), so that it never runs beside a root lab;
//! otherwise it takes a lock of the user's own (in `tcptune_emu::state::state_dir`).

use anyhow::{bail, Context as _};
use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::os::fd::AsRawFd;

/// Where the lock lives.
pub(crate) const LOCK_PATH: &str = "/run/tcptune-lab.lock";

/// Held for the lab's lifetime; the kernel drops the lock when the file closes (also when
/// the process dies).
#[derive(Debug)]
pub(crate) struct LabLock {
    _file: File,
}

impl LabLock {
    /// The lock of a rootless lab (see the module documentation).
    pub(crate) fn acquire_rootless() -> anyhow::Result<LabLock> {
        let f = match File::open(LOCK_PATH) {
            Ok(f) => f,
            Err(_) => {
                let dir = tcptune_emu::state::ensure_state_dir()?;
                let path = dir.join("lab.lock");
                File::options()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .with_context(|| format!("opening the lab lock {}", path.display()))?
            }
        };
        // SAFETY: flock on a file descriptor we own.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r != 0 {
            bail!(super::Unavailable(
                "another tcptune lab is running on this host; labs disturb each other's \
                 measurements, so only one runs at a time"
                    .into()
            ));
        }
        Ok(LabLock { _file: f })
    }

    /// Take the lock or say who holds it.
    pub(crate) fn acquire() -> anyhow::Result<LabLock> {
        let mut f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(LOCK_PATH)
            .with_context(|| format!("opening the lab lock {LOCK_PATH}"))?;
        // SAFETY: flock on a file descriptor we own.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r != 0 {
            let mut holder = String::new();
            let _ = f.read_to_string(&mut holder);
            bail!(super::Unavailable(format!(
                "another tcptune lab is running on this host (pid {}); labs share the global \
                 net.core.rmem_max/wmem_max, so only one runs at a time",
                holder.trim()
            )));
        }
        f.set_len(0).context("truncating the lab lock")?;
        f.rewind().context("rewinding the lab lock")?;
        let _ = write!(f, "{}", std::process::id());
        Ok(LabLock { _file: f })
    }
}
