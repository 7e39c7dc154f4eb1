//! State files under `/run/tcptune/`: who owns which topology, live counters, and cleaning
//! up after owners that died.
//!
//! `/run/tcptune/NAME.json` is the [`TopologyRecord`] (created atomically before any
//! namespace exists, so every namespace the emulator makes has a record naming its owner);
//! `/run/tcptune/NAME.stats.json` holds the owner's latest [`EmuStats`], rewritten every
//! quarter second. A record whose owner process is gone (pid and start time) is stale: its
//! namespaces, processes and files are removed by the next `up`, `run` or `down`, after the
//! host sysctls a dead owner raised are put back (`/run/tcptune/host-sysctls.journal`, see
//! [`host`](crate::host)).
//! `/run/tcptune/.lock` serializes claiming names against cleaning up.

use crate::config::{PathConfig, Side};
use crate::error::EmuError;
use crate::host::{self, Cleanup};
use crate::process::ProcessId;
use crate::stats::EmuStats;
use crate::sys;
use serde::{Deserialize, Serialize};
use std::fs;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// Version of the record layout.
pub const RECORD_SCHEMA_VERSION: u32 = 1;

/// Where records live.
pub const STATE_DIR: &str = "/run/tcptune";

/// What kind of program owns a topology.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnerKind {
    /// A `tcptune emu up` daemon (`emu down` stops it).
    Daemon,
    /// A `tcptune emu run`.
    Run,
    /// Any other program using the library (a test, the lab).
    Library,
}

/// The record of one topology.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TopologyRecord {
    /// Layout version.
    pub schema_version: u32,
    /// Topology name.
    pub name: String,
    /// Who owns it.
    pub owner_kind: OwnerKind,
    /// Owner process id.
    pub owner_pid: u32,
    /// Owner start time (clock ticks after boot), to tell a reused pid apart.
    pub owner_start: u64,
    /// Namespace names, side A then side B.
    pub netns: [String; 2],
    /// Addresses, side A then side B.
    pub addrs: [IpAddr; 2],
    /// The path.
    pub path: PathConfig,
    /// Sysctls applied in both namespaces.
    pub sysctls: Vec<(String, String)>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
}

impl TopologyRecord {
    /// Whether the owner process is still alive.
    pub fn owner_alive(&self) -> bool {
        ProcessId {
            pid: self.owner_pid,
            start: self.owner_start,
        }
        .alive()
    }

    /// Address of `side`.
    pub fn addr(&self, side: Side) -> IpAddr {
        self.addrs[side.index()]
    }

    /// Namespace of `side`.
    pub fn netns(&self, side: Side) -> &str {
        &self.netns[side.index()]
    }

    /// A command that runs `program` inside `side`'s namespace with `TCPTUNE_SELF` and
    /// `TCPTUNE_PEER` set.
    pub fn command(
        &self,
        side: Side,
        program: impl AsRef<std::ffi::OsStr>,
    ) -> Result<Command, EmuError> {
        let fd = Arc::new(sys::open_netns(self.netns(side))?);
        Ok(command_in(
            fd,
            self.addr(side),
            self.addr(side.peer()),
            program,
        ))
    }

    /// The owner's latest counters, if it has written any.
    pub fn stats(&self) -> Option<EmuStats> {
        let text = fs::read_to_string(stats_path(&self.name)).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// A command that enters the namespace `fd` between fork and exec.
pub(crate) fn command_in(
    fd: Arc<std::os::fd::OwnedFd>,
    me: IpAddr,
    peer: IpAddr,
    program: impl AsRef<std::ffi::OsStr>,
) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("TCPTUNE_SELF", me.to_string())
        .env("TCPTUNE_PEER", peer.to_string());
    let raw = fd.as_raw_fd();
    // SAFETY: the hook only calls setns(2), which is async-signal-safe, on a descriptor kept
    // open by the Arc the closure owns.
    unsafe {
        cmd.pre_exec(move || {
            let _keep = &fd;
            if libc::setns(raw, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// The record file of `name`.
pub fn record_path(name: &str) -> PathBuf {
    PathBuf::from(STATE_DIR).join(format!("{name}.json"))
}

/// The stats file of `name`.
pub fn stats_path(name: &str) -> PathBuf {
    PathBuf::from(STATE_DIR).join(format!("{name}.stats.json"))
}

/// The log file of an `emu up` daemon.
pub fn log_path(name: &str) -> PathBuf {
    PathBuf::from(STATE_DIR).join(format!("{name}.log"))
}

fn ensure_dir() -> Result<(), EmuError> {
    fs::create_dir_all(STATE_DIR).map_err(|e| EmuError::sys(format!("creating {STATE_DIR}"), e))
}

/// Holds `/run/tcptune/.lock` (an exclusive flock) while alive.
pub(crate) struct StateLock(#[allow(dead_code)] fs::File);

impl StateLock {
    pub(crate) fn acquire() -> Result<StateLock, EmuError> {
        ensure_dir()?;
        let path = PathBuf::from(STATE_DIR).join(".lock");
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

/// Every record (or the error reading it), sorted by name.
pub fn list() -> Vec<Result<TopologyRecord, EmuError>> {
    let Ok(dir) = fs::read_dir(STATE_DIR) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.ends_with(".json") && !n.ends_with(".stats.json") && !n.starts_with('.'))
        .map(|n| n.trim_end_matches(".json").to_string())
        .collect();
    names.sort();
    names.into_iter().map(|n| load(&n)).collect()
}

/// The record of `name`.
pub fn load(name: &str) -> Result<TopologyRecord, EmuError> {
    let path = record_path(name);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(EmuError::NotFound(name.to_string()))
        }
        Err(e) => return Err(EmuError::sys(format!("reading {}", path.display()), e)),
    };
    serde_json::from_str(&text).map_err(|e| EmuError::State {
        path: path.display().to_string(),
        detail: e.to_string(),
    })
}

/// Write `record` as the owner of its name; fails if the name is held by a live owner or
/// its namespaces exist without a record. Call with the [`StateLock`] held.
pub(crate) fn claim(record: &TopologyRecord) -> Result<(), EmuError> {
    ensure_dir()?;
    let path = record_path(&record.name);
    if let Ok(old) = load(&record.name) {
        if old.owner_alive() {
            return Err(EmuError::NameTaken {
                name: record.name.clone(),
                why: format!("it is in use by process {}", old.owner_pid),
            });
        }
        remove_topology(&old);
    }
    for ns in &record.netns {
        if sys::netns_path(ns).exists() {
            return Err(EmuError::NameTaken {
                name: record.name.clone(),
                why: format!(
                    "network namespace {ns} exists but no tcptune record owns it \
                     (remove it with 'ip netns del {ns}' if it is yours)"
                ),
            });
        }
    }
    let text = serde_json::to_string_pretty(record).map_err(|e| EmuError::State {
        path: path.display().to_string(),
        detail: e.to_string(),
    })?;
    let tmp = PathBuf::from(STATE_DIR).join(format!(".{}.{}.tmp", record.name, std::process::id()));
    fs::write(&tmp, text).map_err(|e| EmuError::sys(format!("writing {}", tmp.display()), e))?;
    // link(2) fails if the name exists: a claim is atomic even without the lock.
    let linked = fs::hard_link(&tmp, &path);
    let _ = fs::remove_file(&tmp);
    linked.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            EmuError::NameTaken {
                name: record.name.clone(),
                why: "another process claimed it at the same moment".into(),
            }
        } else {
            EmuError::sys(format!("creating {}", path.display()), e)
        }
    })
}

/// Remove a topology's processes, namespaces and files (its owner must be dead, or be us).
pub(crate) fn remove_topology(record: &TopologyRecord) {
    for ns in &record.netns {
        if let Err(e) = sys::kill_netns_processes(ns, Duration::from_millis(500)) {
            eprintln!(
                "tcptune emu: cleaning up stale topology '{}': {e}",
                record.name
            );
        }
        let _ = sys::delete_netns(ns);
    }
    remove_files(&record.name);
}

/// Remove the record, stats and log files of `name`.
pub(crate) fn remove_files(name: &str) {
    let _ = fs::remove_file(stats_path(name));
    let _ = fs::remove_file(log_path(name));
    let _ = fs::remove_file(record_path(name));
}

/// Undo what dead owners left behind: first the host's global sysctls they raised (see
/// [`host`](crate::host)), then their topologies (processes, namespaces, files). What live
/// owners (other programs' tests, the lab, daemons) hold is never touched.
/// Errors do not stop the cleanup; they are in [`Cleanup::errors`].
pub fn cleanup_stale() -> Result<Cleanup, EmuError> {
    let _lock = StateLock::acquire()?;
    Ok(cleanup_stale_locked())
}

pub(crate) fn cleanup_stale_locked() -> Cleanup {
    let mut cleanup = Cleanup::default();
    // First: a raised value must never be mistaken for the host's own by what runs next.
    match host::restore_stale_locked() {
        Ok(r) => cleanup.sysctls = r,
        Err(e) => cleanup
            .errors
            .push(format!("restoring the host's sysctls: {e}")),
    }
    for record in list().into_iter().flatten() {
        if !record.owner_alive() {
            remove_topology(&record);
            cleanup.topologies.push(record.name);
        }
    }
    cleanup
}

/// Write the stats file of `name` (atomically: readers never see half a file).
pub(crate) fn write_stats(name: &str, stats: &EmuStats) {
    let Ok(text) = serde_json::to_string(stats) else {
        return;
    };
    let tmp = PathBuf::from(STATE_DIR).join(format!(".{name}.stats.tmp"));
    if fs::write(&tmp, text).is_ok() {
        let _ = fs::rename(&tmp, stats_path(name));
    }
}
