//! One lab at a time per host: the global sysctls a lab raises and restores are shared.

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
