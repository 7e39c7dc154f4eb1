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
//!
//! A user other than root keeps the same files in a directory of its own ([`state_dir`]):
//! its topologies are rootless (see [`mode`](crate::mode)), with no names under
//! `/run/netns`; the record then says where `emu exec` finds their namespaces
//! ([`RootlessRecord`]: descriptors the owner holds, opened as `/proc/PID/fd/N`).

use crate::config::{PathConfig, Side};
use crate::error::EmuError;
use crate::host::{self, Cleanup};
use crate::ns::{command_in, NsId, NsRef};
use crate::statedir::StateLock;
pub use crate::statedir::{ensure_state_dir, state_dir, STATE_DIR};
use crate::stats::EmuStats;
use crate::sys;
use serde::{Deserialize, Serialize};
use std::fs;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use tcptune_sys::process::ProcessId;

/// Version of the record layout.
pub const RECORD_SCHEMA_VERSION: u32 = 1;

/// `ioctl(NS_GET_USERNS)`: the user namespace that owns a namespace.
const NS_GET_USERNS: libc::c_ulong = 0xb701;

/// Where a rootless topology's namespaces are: the owner's descriptors of side A's and
/// side B's network namespaces (`/proc/OWNER/fd/N`), and which namespaces they must be.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootlessRecord {
    /// Descriptor numbers in the owner process, side A then side B.
    pub ns_fds: [i32; 2],
    /// The namespaces, side A then side B.
    pub ns_ids: [NsId; 2],
}

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
    /// Rootless mode: where the namespaces are (root mode: `None`, they are named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootless: Option<RootlessRecord>,
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
    /// `TCPTUNE_PEER` set (in rootless mode also inside the topology's user namespace).
    pub fn command(
        &self,
        side: Side,
        program: impl AsRef<std::ffi::OsStr>,
    ) -> Result<Command, EmuError> {
        Ok(command_in(
            &self.namespace(side)?,
            self.addr(side),
            self.addr(side.peer()),
            program,
        ))
    }

    /// The namespace of `side`: the named one, or (rootless) the owner's descriptor of it,
    /// checked to be the recorded namespace, with the user namespace that owns it.
    fn namespace(&self, side: Side) -> Result<NsRef, EmuError> {
        let label = self.netns(side).to_string();
        let Some(rl) = &self.rootless else {
            return Ok(NsRef {
                user: None,
                net: Arc::new(sys::open_netns(&label)?),
                label,
            });
        };
        let path = format!("/proc/{}/fd/{}", self.owner_pid, rl.ns_fds[side.index()]);
        let net = OwnedFd::from(fs::File::open(&path).map_err(|e| {
            EmuError::sys(
                format!("opening {path} (network namespace {label}, held by its owner)"),
                e,
            )
        })?);
        if NsId::of_fd(&net, &label)? != rl.ns_ids[side.index()] {
            return Err(EmuError::State {
                path: record_path(&self.name).display().to_string(),
                detail: format!("{path} is no longer network namespace {label}"),
            });
        }
        // SAFETY: NS_GET_USERNS on a namespace descriptor returns a new descriptor.
        let user = unsafe { libc::ioctl(net.as_raw_fd(), NS_GET_USERNS) };
        if user < 0 {
            return Err(EmuError::last_os(format!(
                "ioctl NS_GET_USERNS on network namespace {label}"
            )));
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let user = unsafe { OwnedFd::from_raw_fd(user) };
        Ok(NsRef {
            user: Some(Arc::new(user)),
            net: Arc::new(net),
            label,
        })
    }

    /// Root or rootless mode.
    pub fn mode(&self) -> crate::mode::Mode {
        if self.rootless.is_some() {
            crate::mode::Mode::Rootless
        } else {
            crate::mode::Mode::Root
        }
    }

    /// The processes inside its namespaces now (never this process).
    pub fn processes(&self) -> Vec<i32> {
        match &self.rootless {
            Some(rl) => rl
                .ns_ids
                .iter()
                .flat_map(|id| sys::pids_in_ns(*id))
                .collect(),
            None => self
                .netns
                .iter()
                .flat_map(|n| sys::pids_in_netns(n))
                .collect(),
        }
    }

    /// The owner's latest counters, if it has written any.
    pub fn stats(&self) -> Option<EmuStats> {
        let text = fs::read_to_string(stats_path(&self.name)).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// The record file of `name`.
pub fn record_path(name: &str) -> PathBuf {
    state_dir().join(format!("{name}.json"))
}

/// The stats file of `name`.
pub fn stats_path(name: &str) -> PathBuf {
    state_dir().join(format!("{name}.stats.json"))
}

/// The log file of an `emu up` daemon.
pub fn log_path(name: &str) -> PathBuf {
    state_dir().join(format!("{name}.log"))
}

/// Every record (or the error reading it), sorted by name.
pub fn list() -> Vec<Result<TopologyRecord, EmuError>> {
    let Ok(dir) = fs::read_dir(state_dir()) else {
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
    ensure_state_dir()?;
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
        if record.rootless.is_none() && sys::netns_path(ns).exists() {
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
    let tmp = state_dir().join(format!(".{}.{}.tmp", record.name, std::process::id()));
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

/// Replace the record this process claimed (atomically: readers see the old or the new).
pub(crate) fn rewrite(record: &TopologyRecord) -> Result<(), EmuError> {
    let path = record_path(&record.name);
    let text = serde_json::to_string_pretty(record).map_err(|e| EmuError::State {
        path: path.display().to_string(),
        detail: e.to_string(),
    })?;
    let tmp = state_dir().join(format!(".{}.{}.tmp", record.name, std::process::id()));
    fs::write(&tmp, text).map_err(|e| EmuError::sys(format!("writing {}", tmp.display()), e))?;
    fs::rename(&tmp, &path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        EmuError::sys(
            format!("renaming {} to {}", tmp.display(), path.display()),
            e,
        )
    })
}

/// Remove a topology's processes, namespaces and files (its owner must be dead, or be us).
pub(crate) fn remove_topology(record: &TopologyRecord) {
    if let Some(rl) = &record.rootless {
        // The namespaces went with their owner's descriptors; what still runs in them keeps
        // them alive until it is stopped.
        for (i, id) in rl.ns_ids.iter().enumerate() {
            let label = &record.netns[i];
            if let Err(e) = sys::kill_ns_processes(*id, label, Duration::from_millis(500)) {
                eprintln!(
                    "tcptune emu: cleaning up stale topology '{}': {e}",
                    record.name
                );
            }
        }
        remove_files(&record.name);
        return;
    }
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
    // (Only root changes them, and only root can put them back.)
    if state_dir() == std::path::Path::new(STATE_DIR) {
        match host::restore_stale_locked() {
            Ok(r) => cleanup.sysctls = r,
            Err(e) => cleanup
                .errors
                .push(format!("restoring the host's sysctls: {e}")),
        }
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
    let tmp = state_dir().join(format!(".{name}.stats.tmp"));
    if fs::write(&tmp, text).is_ok() {
        let _ = fs::rename(&tmp, stats_path(name));
    }
}
