//! cgroup v2: finding its mount (never assumed at `/sys/fs/cgroup`: hybrid layouts mount it
//! at `/sys/fs/cgroup/unified`), and private child cgroups for `agent exec` and tests.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// What went wrong with a cgroup.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No cgroup2 file system is mounted.
    #[error("no cgroup v2 file system is mounted (none in /proc/self/mounts); mount one: mount -t cgroup2 none /sys/fs/cgroup/unified")]
    NoCgroup2,
    /// A file operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being attempted.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A path that is not a directory of the cgroup2 file system.
    #[error("{0} is not a cgroup v2 directory (no cgroup.procs; the cgroup2 mount is {1})")]
    NotCgroup2(PathBuf, PathBuf),
}

/// Undo the octal escapes of `/proc/mounts` (`\040` for a space).
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = std::str::from_utf8(&b[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(oct, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The first cgroup2 mount point in the text of `/proc/self/mounts`.
pub fn cgroup2_mount_in(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_dev, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(unescape(dir)))
    })
}

/// This host's cgroup2 mount (from `/proc/self/mounts`).
pub fn cgroup2_mount() -> Result<PathBuf, CgroupError> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").map_err(|e| CgroupError::Io {
        what: "reading",
        path: "/proc/self/mounts".into(),
        source: e,
    })?;
    cgroup2_mount_in(&mounts).ok_or(CgroupError::NoCgroup2)
}

/// Check that `path` is a directory of the cgroup2 file system.
pub fn check_cgroup2_dir(path: &Path) -> Result<(), CgroupError> {
    if path.join("cgroup.procs").exists() && path.join("cgroup.controllers").exists() {
        return Ok(());
    }
    let mount = cgroup2_mount()?;
    Err(CgroupError::NotCgroup2(path.to_path_buf(), mount))
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The owner's PID in the name of a child cgroup made by [`ChildCgroup::create`] with `tag`
/// (`<tag>-<pid>-<n>`).
pub fn owner_of(name: &str, tag: &str) -> Option<u32> {
    let rest = name.strip_prefix(tag)?.strip_prefix('-')?;
    let (pid, n) = rest.split_once('-')?;
    n.parse::<u32>().ok()?;
    pid.parse().ok()
}

/// Remove the empty child cgroups `<tag>-<pid>-<n>` of `parent` whose owner is dead (an
/// agent killed with SIGKILL cannot remove its own). Returns those removed.
pub fn sweep_stale_children(parent: &Path, tag: &str) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| owner_of(n, tag)) else {
            continue;
        };
        let Ok(raw) = libc::pid_t::try_from(pid) else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(raw, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive && std::fs::remove_dir(entry.path()).is_ok() {
            removed.push(entry.path());
        }
    }
    removed
}

/// A child cgroup this process made; dropping it kills what is left inside (`cgroup.kill`)
/// and removes it.
#[derive(Debug)]
pub struct ChildCgroup {
    path: PathBuf,
}

impl ChildCgroup {
    /// Make `PARENT/<tag>-<pid>-<n>`.
    pub fn create(parent: &Path, tag: &str) -> Result<ChildCgroup, CgroupError> {
        let name = format!(
            "{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = parent.join(name);
        std::fs::create_dir(&path).map_err(|e| CgroupError::Io {
            what: "creating cgroup",
            path: path.clone(),
            source: e,
        })?;
        Ok(ChildCgroup { path })
    }

    /// Its directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Make `cmd` join this cgroup before it runs (so every socket it makes is covered).
    pub fn add_to(&self, cmd: &mut Command) -> Result<(), CgroupError> {
        let procs = self.path.join("cgroup.procs");
        let c = CString::new(procs.as_os_str().as_bytes()).map_err(|_| CgroupError::Io {
            what: "naming",
            path: procs.clone(),
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        })?;
        // SAFETY: between fork and exec only async-signal-safe calls (open, write, close) on
        // memory prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let r = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if r != 1 {
                    return Err(err);
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// The processes inside now.
    pub fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.path.join("cgroup.procs"))
            .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }
}

impl Drop for ChildCgroup {
    fn drop(&mut self) {
        if !self.pids().is_empty() {
            let _ = std::fs::write(self.path.join("cgroup.kill"), "1");
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match std::fs::remove_dir(&self.path) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(e) if Instant::now() >= deadline => {
                    eprintln!(
                        "tcptune: warning: removing cgroup {}: {e}",
                        self.path.display()
                    );
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount_of_a_hybrid_layout() {
        let mounts = "sysfs /sys sysfs rw 0 0\n\
            tmpfs /sys/fs/cgroup tmpfs ro 0 0\n\
            cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n\
            cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n";
        assert_eq!(
            cgroup2_mount_in(mounts),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
    }

    #[test]
    fn the_owner_is_read_from_a_child_cgroups_name() {
        assert_eq!(
            owner_of("tcptune-agent-exec-4242-0", "tcptune-agent-exec"),
            Some(4242)
        );
        assert_eq!(
            owner_of("tcptune-agent-exec-4242", "tcptune-agent-exec"),
            None
        );
        assert_eq!(owner_of("system.slice", "tcptune-agent-exec"), None);
        assert_eq!(
            owner_of("tcptune-agent-exec-x-1", "tcptune-agent-exec"),
            None
        );
    }

    #[test]
    fn finds_a_unified_mount_and_unescapes_spaces() {
        assert_eq!(
            cgroup2_mount_in("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n"),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        assert_eq!(
            cgroup2_mount_in("none /mnt/my\\040cg cgroup2 rw 0 0\n"),
            Some(PathBuf::from("/mnt/my cg"))
        );
        assert_eq!(
            cgroup2_mount_in("cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\n"),
            None
        );
    }
}
