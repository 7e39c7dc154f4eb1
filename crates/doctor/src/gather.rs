//! The I/O half of `doctor`: read the facts of this host into a [`HostFacts`].
//!
//! Everything is read below a root directory (`/` on a real host), so a test can lay out a
//! fake `proc/` and `sys/` tree, including files that are missing or unreadable. Nothing here
//! decides anything; nothing here fails as a whole: an unreadable file becomes a
//! [`Fact::Unreadable`] and the checks say what they could not tell.

use crate::facts::{Duplex, Fact, HostFacts, Interface, QdiscFacts, SYSCTLS};
use crate::parse::{
    parse_snmp, qdisc_from_module_file, qdiscs_from_config, qdiscs_from_kallsyms, sysfs_number,
    Counters,
};
use std::collections::BTreeSet;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

/// Where to read facts from.
#[derive(Clone, Debug)]
pub struct FactSource {
    root: PathBuf,
}

impl Default for FactSource {
    fn default() -> Self {
        FactSource::host()
    }
}

impl FactSource {
    /// The running host (`/`), in the current network namespace.
    pub fn host() -> FactSource {
        FactSource {
            root: PathBuf::from("/"),
        }
    }

    /// A directory laid out like `/` (with `proc/sys/...`, `sys/class/net/...`), for tests.
    pub fn at(root: impl Into<PathBuf>) -> FactSource {
        FactSource { root: root.into() }
    }

    fn path(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    fn read(&self, abs: &str) -> Fact<String> {
        read_fact(&self.path(abs))
    }

    /// Gather every fact. Never fails: what cannot be read is recorded as such.
    pub fn gather(&self) -> HostFacts {
        let sysctls = SYSCTLS
            .iter()
            .map(|key| (key.to_string(), self.sysctl(key)))
            .collect();
        HostFacts {
            kernel_release: match self.read("/proc/sys/kernel/osrelease") {
                Fact::Ok(s) => Fact::Ok(s.trim().to_string()),
                other => other,
            },
            page_size: page_size(),
            sysctls,
            interfaces: self.interfaces(),
            counters: self.counters(),
            qdiscs: self.qdiscs(),
        }
    }

    /// One sysctl's text (trailing newline removed).
    pub fn sysctl(&self, key: &str) -> Fact<String> {
        match tcptune_sys::sysctl::sysctl_path(key) {
            Ok(p) => match read_fact(&self.root.join(p.strip_prefix("/").unwrap_or(&p))) {
                Fact::Ok(s) => Fact::Ok(s.trim_end_matches('\n').to_string()),
                other => other,
            },
            Err(e) => Fact::Unreadable(e.to_string()),
        }
    }

    fn counters(&self) -> Fact<Counters> {
        let mut counters = Counters::new();
        let mut errors = Vec::new();
        for file in ["/proc/net/snmp", "/proc/net/netstat"] {
            match self.read(file) {
                Fact::Ok(text) => parse_snmp(&text, &mut counters),
                Fact::Missing => errors.push(format!("{file}: missing")),
                Fact::Unreadable(e) => errors.push(e),
            }
        }
        if counters.is_empty() && !errors.is_empty() {
            Fact::Unreadable(errors.join("; "))
        } else {
            Fact::Ok(counters)
        }
    }

    fn interfaces(&self) -> Vec<Interface> {
        let dir = self.path("/sys/class/net");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
            .into_iter()
            .map(|name| {
                let base = dir.join(&name);
                let text = |f: &str| match read_fact(&base.join(f)) {
                    Fact::Ok(s) => Some(s),
                    _ => None,
                };
                let ty = text("type").and_then(|t| t.trim().parse::<u32>().ok());
                Interface {
                    mtu: text("mtu")
                        .and_then(|t| sysfs_number(&t))
                        .and_then(|v| u32::try_from(v).ok()),
                    speed_mbps: text("speed").and_then(|t| sysfs_number(&t)),
                    duplex: text("duplex").and_then(|t| match t.trim() {
                        "full" => Some(Duplex::Full),
                        "half" => Some(Duplex::Half),
                        _ => None,
                    }),
                    operstate: text("operstate")
                        .map(|t| t.trim().to_string())
                        .unwrap_or_else(|| "unknown".to_string()),
                    physical: base.join("device").exists(),
                    // ARPHRD_LOOPBACK = 772
                    loopback: ty == Some(772) || name == "lo",
                    name,
                }
            })
            .collect()
    }

    fn qdiscs(&self) -> QdiscFacts {
        let release = match self.read("/proc/sys/kernel/osrelease") {
            Fact::Ok(s) => s.trim().to_string(),
            _ => String::new(),
        };
        // 1. The kernel's own config: authoritative for built-in and module qdiscs.
        if let Some(cfg) = self.read_config_gz("/proc/config.gz") {
            return QdiscFacts {
                available: Some(qdiscs_from_config(&cfg).into_iter().collect()),
                source: "/proc/config.gz".into(),
            };
        }
        let boot = format!("/boot/config-{release}");
        if !release.is_empty() {
            if let Fact::Ok(cfg) = self.read(&boot) {
                return QdiscFacts {
                    available: Some(qdiscs_from_config(&cfg).into_iter().collect()),
                    source: boot,
                };
            }
        }
        // 2. What is in the running kernel, plus modules that could be loaded.
        let mut found = BTreeSet::new();
        let mut sources = Vec::new();
        if let Fact::Ok(ks) = self.read("/proc/kallsyms") {
            let s = qdiscs_from_kallsyms(&ks);
            if !s.is_empty() {
                found.extend(s);
                sources.push("/proc/kallsyms".to_string());
            }
        }
        let moddir = format!("/lib/modules/{release}/kernel/net/sched");
        if let Ok(entries) = std::fs::read_dir(self.path(&moddir)) {
            found.extend(
                entries
                    .filter_map(|e| e.ok())
                    .filter_map(|e| qdisc_from_module_file(&e.file_name().to_string_lossy())),
            );
            sources.push(moddir);
        }
        if sources.is_empty() {
            return QdiscFacts {
                available: None,
                source: "unknown (no kernel config, kallsyms or module directory readable)".into(),
            };
        }
        QdiscFacts {
            available: Some(found.into_iter().collect()),
            source: sources.join(" + "),
        }
    }

    fn read_config_gz(&self, abs: &str) -> Option<String> {
        let file = std::fs::File::open(self.path(abs)).ok()?;
        let mut text = String::new();
        flate2::read::GzDecoder::new(file)
            .read_to_string(&mut text)
            .ok()?;
        Some(text)
    }
}

fn read_fact(path: &Path) -> Fact<String> {
    match std::fs::read(path) {
        Ok(bytes) => Fact::Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) if e.kind() == ErrorKind::NotFound => Fact::Missing,
        Err(e) => Fact::Unreadable(format!("reading {}: {e}", path.display())),
    }
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(v).ok().filter(|&v| v > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::keys;

    #[test]
    fn gathers_this_hosts_sysctls_and_loopback() {
        let f = FactSource::host().gather();
        assert!(f.triple(keys::TCP_RMEM).is_ok(), "{:?}", f.sysctls);
        assert!(f.interfaces.iter().any(|i| i.loopback));
        assert!(f.counter("Tcp", "OutSegs").is_some());
        assert!(f.kernel_release.ok().is_some());
    }
}
