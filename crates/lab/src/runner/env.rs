//! Facts about the machine recorded with the results, and the default results folder name.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Kernel release (`/proc/sys/kernel/osrelease`).
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// CPUs available to this process.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `tcptune --version` of the binary the lab runs.
pub fn binary_version(bin: &Path) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| {
            format!(
                "tcptune {} (version query failed)",
                env!("CARGO_PKG_VERSION")
            )
        })
}

/// Seconds since the Unix epoch.
pub use tcptune_sys::os::unix_now;

/// `YYYYMMDD-HHMMSS` (UTC) of a Unix time.
pub fn utc_stamp(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        secs / 3600,
        (secs % 3600) / 60,
        secs % 60
    )
}

/// A new folder under `./lab-results/` named after the current UTC time (with a suffix if
/// taken).
pub fn default_out_dir() -> PathBuf {
    let base = PathBuf::from("lab-results").join(utc_stamp(unix_now() as u64));
    if !base.exists() {
        return base;
    }
    (2..)
        .map(|i| PathBuf::from(format!("{}-{i}", base.display())))
        .find(|p| !p.exists())
        .unwrap_or(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamp_formats_known_dates() {
        assert_eq!(utc_stamp(0), "19700101-000000");
        assert_eq!(utc_stamp(951_782_400), "20000229-000000");
        assert_eq!(utc_stamp(1_795_322_096), "20261122-043456");
    }
}
