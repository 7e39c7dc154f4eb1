//! Reading and writing sysctls of the current network namespace through `/proc/sys`.
//!
//! Parsing is split from I/O: [`parse_u64`] and [`parse_triple`] are pure and accept what the
//! kernel prints (tab-separated triples, trailing newline).

use std::path::PathBuf;
use tcptune_core::{Bytes, HostLimits};

/// Why a sysctl could not be read, written or understood.
#[derive(Debug, thiserror::Error)]
pub enum SysctlError {
    /// The key contains characters that cannot name a sysctl.
    #[error("invalid sysctl name '{0}'")]
    BadKey(String),
    /// The file could not be read.
    #[error("reading sysctl {key} ({path}): {source}")]
    Read {
        /// The sysctl.
        key: String,
        /// Its `/proc/sys` path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file could not be written.
    #[error("writing sysctl {key}={value} ({path}): {source}")]
    Write {
        /// The sysctl.
        key: String,
        /// The value being written.
        value: String,
        /// Its `/proc/sys` path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The value is not in the expected form.
    #[error("sysctl {key} has unexpected value '{value}': expected {expected}")]
    Parse {
        /// The sysctl.
        key: String,
        /// The value read.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
}

/// The `/proc/sys` path of a dotted sysctl name (`net.core.rmem_max`).
pub fn sysctl_path(key: &str) -> Result<PathBuf, SysctlError> {
    let ok = !key.is_empty()
        && key.split('.').all(|p| {
            !p.is_empty()
                && p != ".."
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        });
    if !ok {
        return Err(SysctlError::BadKey(key.to_string()));
    }
    Ok(PathBuf::from("/proc/sys").join(key.replace('.', "/")))
}

/// Read a sysctl as text, without the trailing newline.
pub fn read_sysctl(key: &str) -> Result<String, SysctlError> {
    let path = sysctl_path(key)?;
    std::fs::read_to_string(&path)
        .map(|s| s.trim_end_matches('\n').to_string())
        .map_err(|source| SysctlError::Read {
            key: key.to_string(),
            path: path.display().to_string(),
            source,
        })
}

/// Write a sysctl (needs privileges; affects the current network namespace, or the whole
/// host for global ones such as `net.core.rmem_max`).
pub fn write_sysctl(key: &str, value: &str) -> Result<(), SysctlError> {
    let path = sysctl_path(key)?;
    std::fs::write(&path, value).map_err(|source| SysctlError::Write {
        key: key.to_string(),
        value: value.to_string(),
        path: path.display().to_string(),
        source,
    })
}

/// Parse a single unsigned integer value (surrounding whitespace allowed).
pub fn parse_u64(key: &str, value: &str) -> Result<u64, SysctlError> {
    value.trim().parse().map_err(|_| SysctlError::Parse {
        key: key.to_string(),
        value: value.to_string(),
        expected: "an unsigned integer",
    })
}

/// Parse a `min default max` triple such as `tcp_rmem` (any whitespace between values).
pub fn parse_triple(key: &str, value: &str) -> Result<[u64; 3], SysctlError> {
    let parts: Vec<&str> = value.split_whitespace().collect();
    let err = || SysctlError::Parse {
        key: key.to_string(),
        value: value.to_string(),
        expected: "three unsigned integers",
    };
    if parts.len() != 3 {
        return Err(err());
    }
    let mut out = [0u64; 3];
    for (o, p) in out.iter_mut().zip(parts) {
        *o = p.parse().map_err(|_| err())?;
    }
    Ok(out)
}

/// Read a single integer sysctl.
pub fn read_u64(key: &str) -> Result<u64, SysctlError> {
    parse_u64(key, &read_sysctl(key)?)
}

/// Read a triple sysctl.
pub fn read_triple(key: &str) -> Result<[u64; 3], SysctlError> {
    parse_triple(key, &read_sysctl(key)?)
}

/// The buffer limits of the current network namespace. `can_force` is false here: whether a
/// tuner may use `SO_*BUFFORCE` is a decision of the caller (privilege and configuration).
pub fn read_host_limits() -> Result<HostLimits, SysctlError> {
    let t = |v: [u64; 3]| [Bytes(v[0]), Bytes(v[1]), Bytes(v[2])];
    Ok(HostLimits {
        rmem_max: Bytes(read_u64("net.core.rmem_max")?),
        wmem_max: Bytes(read_u64("net.core.wmem_max")?),
        tcp_rmem: t(read_triple("net.ipv4.tcp_rmem")?),
        tcp_wmem: t(read_triple("net.ipv4.tcp_wmem")?),
        moderate_rcvbuf: read_u64("net.ipv4.tcp_moderate_rcvbuf")? != 0,
        can_force: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_proc_paths_and_reject_traversal() {
        assert_eq!(
            sysctl_path("net.core.rmem_max").ok(),
            Some(PathBuf::from("/proc/sys/net/core/rmem_max"))
        );
        assert!(sysctl_path("net..core").is_err());
        assert!(sysctl_path("net/../../etc").is_err());
        assert!(sysctl_path("").is_err());
    }

    #[test]
    fn triples_accept_tabs_and_reject_garbage() {
        assert_eq!(
            parse_triple("k", "4096\t131072\t33554432\n").ok(),
            Some([4096, 131072, 33554432])
        );
        assert!(parse_triple("k", "4096 131072").is_err());
        assert!(parse_triple("k", "4096 x 1").is_err());
        assert_eq!(parse_u64("k", " 4194304\n").ok(), Some(4194304));
        assert!(parse_u64("k", "-1").is_err());
    }

    #[test]
    fn reads_this_hosts_limits() {
        // /proc/sys exists on every Linux host this crate targets.
        let l = read_host_limits().expect("readable sysctls");
        assert!(l.tcp_rmem[2] >= l.tcp_rmem[0]);
    }
}
