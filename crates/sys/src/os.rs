//! Small OS helpers the transfer engine needs: CPU time, random bytes, waiting for a socket,
//! and a `uname`-like description of the host.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// CPU time spent in user and kernel mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// User mode.
    pub user: Duration,
    /// Kernel mode.
    pub system: Duration,
}

impl CpuTimes {
    /// User plus system.
    pub fn total(&self) -> Duration {
        self.user + self.system
    }

    /// `self - earlier`, saturating at zero.
    pub fn since(&self, earlier: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }
}

impl std::ops::Add for CpuTimes {
    type Output = CpuTimes;
    fn add(self, o: CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user + o.user,
            system: self.system + o.system,
        }
    }
}

fn tv(t: libc::timeval) -> Duration {
    Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
        + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
}

fn rusage(who: libc::c_int) -> io::Result<CpuTimes> {
    // SAFETY: rusage is plain old data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(CpuTimes {
        user: tv(ru.ru_utime),
        system: tv(ru.ru_stime),
    })
}

/// CPU time of the whole process (`getrusage(RUSAGE_SELF)`).
pub fn process_cpu() -> io::Result<CpuTimes> {
    rusage(libc::RUSAGE_SELF)
}

/// CPU time of the calling thread (`getrusage(RUSAGE_THREAD)`).
pub fn thread_cpu() -> io::Result<CpuTimes> {
    rusage(libc::RUSAGE_THREAD)
}

/// Seconds since the Unix epoch by the wall clock (0.0 if the clock is before 1970): the
/// time stamps of records and of the path database.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Whole seconds since the Unix epoch by the wall clock (0 if the clock is before 1970).
pub fn unix_now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Fill `buf` with random bytes from the kernel (`getrandom`).
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: rest is valid for rest.len() bytes.
        let r = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += r as usize;
    }
    Ok(())
}

/// A random `u64` from the kernel.
pub fn random_u64() -> io::Result<u64> {
    let mut b = [0u8; 8];
    random_bytes(&mut b)?;
    Ok(u64::from_ne_bytes(b))
}

/// Wait until `fd` is readable (or has an error/hang-up) or `timeout` passes. Returns
/// whether it became ready.
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    loop {
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(r > 0);
    }
}

/// Raise this process's soft limit on open files (`RLIMIT_NOFILE`) to its hard limit, and
/// return the limit now in force. A server budgets its descriptors against it.
pub fn raise_nofile_limit() -> io::Result<u64> {
    // SAFETY: rlimit is plain old data.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if r.rlim_cur < r.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: r.rlim_max,
            rlim_max: r.rlim_max,
        };
        // SAFETY: valid pointer; raising the soft limit up to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            r.rlim_cur = r.rlim_max;
        }
    }
    Ok(r.rlim_cur as u64)
}

/// Congestion controls this kernel can load as modules (`tcp_*.ko*` under
/// `/lib/modules/$(uname -r)`), by name: a privileged socket may choose one before it is
/// loaded.
pub fn congestion_modules() -> Vec<String> {
    // SAFETY: utsname is plain old data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    if unsafe { libc::uname(&mut u) } != 0 {
        return Vec::new();
    }
    let release: String = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8 as char)
        .collect();
    let dir = std::path::Path::new("/lib/modules")
        .join(release)
        .join("kernel/net/ipv4");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let stem = name.split('.').next()?.strip_prefix("tcp_")?.to_string();
            (!stem.is_empty() && stem != "diag" && name.contains(".ko")).then_some(stem)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `sysname release machine` of this host (as `uname -srm`), for reports.
pub fn system_info() -> String {
    // SAFETY: utsname is plain old data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".to_string();
    }
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    format!(
        "{} {} {} {}",
        field(&u.sysname),
        field(&u.nodename),
        field(&u.release),
        field(&u.machine)
    )
}

/// Start time of a live process (clock ticks after boot, field 22 of `/proc/PID/stat`): with
/// the pid it names a process even after the pid is reused. `None` for a zombie or no process.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// Whether this process has `CAP_NET_ADMIN` in its effective set (needed for
/// `SO_*BUFFORCE` and for changing routes), read from `/proc/self/status`.
pub fn has_cap_net_admin() -> bool {
    const CAP_NET_ADMIN: u32 = 12;
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1u64 << CAP_NET_ADMIN) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work() {
        let before = thread_cpu().expect("rusage");
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let after = thread_cpu().expect("rusage");
        assert!(after.total() >= before.total());
        assert!(process_cpu().expect("rusage").total() >= after.since(&before).total());
    }

    #[test]
    fn random_bytes_are_not_all_zero() {
        let mut b = [0u8; 32];
        random_bytes(&mut b).expect("getrandom");
        assert!(b.iter().any(|&c| c != 0));
        assert!(system_info().starts_with("Linux"));
    }
}
