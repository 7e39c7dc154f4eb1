//! Host-global sysctls (`net.core.rmem_max`, `net.core.wmem_max`, ...: not per network
//! namespace) changed so that a crash cannot leave them changed for good.
//!
//! Before a value is raised, its original is written to a journal,
//! `/run/tcptune/host-sysctls.journal`, naming the owner process (pid and start time). The owner
//! puts the values back when it is done ([`HostSysctls::restore`], or on drop). If it dies
//! first, even by SIGKILL, the next tcptune program that cleans up after dead owners
//! (`emu up`/`run`/`down`, a library topology, `lab`, `lab --cleanup`: everything that calls
//! [`state::cleanup_stale`](crate::state::cleanup_stale)) restores the originals *before*
//! anything else, so that nobody ever mistakes a raised value for the host's own.
//!
//! A value is only put back if it is still what the owner set: if someone changed it since,
//! theirs is kept (and reported).

use crate::config::GLOBAL_NET_SYSCTLS;
use crate::error::EmuError;
use crate::statedir::{StateLock, STATE_DIR};
use crate::sys;
use serde::{Deserialize, Serialize};
use std::fs;
use std::path::PathBuf;
use tcptune_sys::process::ProcessId;

/// Version of the journal layout.
pub const JOURNAL_SCHEMA_VERSION: u32 = 1;

/// The journal file (JSON, but not named `*.json`: that is a topology record's name).
pub fn journal_path() -> PathBuf {
    PathBuf::from(STATE_DIR).join("host-sysctls.journal")
}

/// The journal: who changes the host's global sysctls, and what they were before.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostJournal {
    /// Layout version.
    pub schema_version: u32,
    /// The process changing them.
    pub owner: ProcessId,
    /// The values raised and not yet put back, in the order they were first raised.
    pub changes: Vec<HostChange>,
}

/// One raised sysctl.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostChange {
    /// The key, e.g. `net.core.rmem_max`.
    pub key: String,
    /// The host's value before the first raise.
    pub original: String,
    /// The value set.
    pub set: String,
}

/// What putting one change back found and did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Restored {
    /// The key.
    pub key: String,
    /// The value found.
    pub found: String,
    /// The original value.
    pub original: String,
    /// What was done.
    pub action: RestoreAction,
}

/// The decision for one change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RestoreAction {
    /// Still at the value set: the original was written back.
    Restored,
    /// Already at the original: nothing to do.
    AlreadyOriginal,
    /// Someone else changed it since: left as it is.
    LeftAlone,
}

/// Sysctl values compare by their words (the kernel separates vectors with tabs).
fn same_value(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
}

/// What to do with `change` when the sysctl reads `current` (pure).
pub fn restore_action(change: &HostChange, current: &str) -> RestoreAction {
    if same_value(current, &change.set) && !same_value(current, &change.original) {
        RestoreAction::Restored
    } else if same_value(current, &change.original) {
        RestoreAction::AlreadyOriginal
    } else {
        RestoreAction::LeftAlone
    }
}

fn check_key(key: &str) -> Result<(), EmuError> {
    if GLOBAL_NET_SYSCTLS.contains(&key) {
        Ok(())
    } else {
        Err(EmuError::State {
            path: journal_path().display().to_string(),
            detail: format!("'{key}' is not a global network sysctl tcptune changes"),
        })
    }
}

/// Put one change back; returns what was done.
fn restore_one(change: &HostChange) -> Result<Restored, EmuError> {
    check_key(&change.key)?;
    let found = sys::read_sysctl(&change.key)?;
    let action = restore_action(change, &found);
    if action == RestoreAction::Restored {
        sys::write_sysctl(&change.key, &change.original)?;
    }
    Ok(Restored {
        key: change.key.clone(),
        found: found.trim().to_string(),
        original: change.original.clone(),
        action,
    })
}

/// Put `changes` back, last first. Returns what was done and the changes that could not be
/// put back (with their errors).
fn restore_all(changes: &[HostChange]) -> (Vec<Restored>, Vec<(HostChange, EmuError)>) {
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for c in changes.iter().rev() {
        match restore_one(c) {
            Ok(r) => done.push(r),
            Err(e) => failed.push((c.clone(), e)),
        }
    }
    (done, failed)
}

fn load() -> Result<Option<HostJournal>, EmuError> {
    let path = journal_path();
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(EmuError::sys(format!("reading {}", path.display()), e)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| EmuError::State {
            path: path.display().to_string(),
            detail: e.to_string(),
        })
}

/// Write the journal atomically (a reader sees the old or the new one, never half).
fn save(journal: &HostJournal) -> Result<(), EmuError> {
    let path = journal_path();
    let text = serde_json::to_string_pretty(journal).map_err(|e| EmuError::State {
        path: path.display().to_string(),
        detail: e.to_string(),
    })?;
    fs::create_dir_all(STATE_DIR).map_err(|e| EmuError::sys(format!("creating {STATE_DIR}"), e))?;
    let tmp = PathBuf::from(STATE_DIR).join(format!(".host-sysctls.{}.tmp", std::process::id()));
    fs::write(&tmp, text).map_err(|e| EmuError::sys(format!("writing {}", tmp.display()), e))?;
    fs::rename(&tmp, &path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        EmuError::sys(
            format!("renaming {} to {}", tmp.display(), path.display()),
            e,
        )
    })
}

fn remove() -> Result<(), EmuError> {
    let path = journal_path();
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(EmuError::sys(format!("removing {}", path.display()), e)),
    }
}

/// Undo the changes of a dead owner's journal (call with the [`StateLock`] held). A live
/// owner's journal is left alone.
pub(crate) fn restore_stale_locked() -> Result<Vec<Restored>, EmuError> {
    let Some(journal) = load()? else {
        return Ok(Vec::new());
    };
    if journal.owner.alive() {
        return Ok(Vec::new());
    }
    let (done, failed) = restore_all(&journal.changes);
    for r in &done {
        if r.action == RestoreAction::Restored {
            eprintln!(
                "tcptune: restored the host's {} to {} (raised to {} by process {}, which died)",
                r.key, r.original, r.found, journal.owner.pid
            );
        }
    }
    match failed.into_iter().next() {
        None => {
            remove()?;
            Ok(done)
        }
        Some((_, e)) => Err(e),
    }
}

/// This process's changes to the host's global sysctls, as a guard: every raise is journaled
/// before it happens, and dropping the guard puts the values back and removes the journal.
///
/// # Use
///
/// 1. [`acquire`](Self::acquire) (restores what a dead owner left raised; fails if a live
///    process holds the journal).
/// 2. [`raise_to`](Self::raise_to) as needed; [`restore`](Self::restore) puts everything back
///    and keeps the guard for more raises.
/// 3. Drop it (or [`release`](Self::release) to see the errors).
#[derive(Debug)]
pub struct HostSysctls {
    journal: HostJournal,
    released: bool,
}

impl HostSysctls {
    /// Take charge of the host's global sysctls for this process. Also returns what was put
    /// back from a dead owner's journal.
    pub fn acquire() -> Result<(HostSysctls, Vec<Restored>), EmuError> {
        let _lock = StateLock::acquire()?;
        let me = ProcessId::current();
        let restored = restore_stale_locked()?;
        if let Some(j) = load()? {
            if j.owner.alive() && j.owner != me {
                return Err(EmuError::HostBusy { pid: j.owner.pid });
            }
        }
        let journal = HostJournal {
            schema_version: JOURNAL_SCHEMA_VERSION,
            owner: me,
            changes: Vec::new(),
        };
        save(&journal)?;
        Ok((
            HostSysctls {
                journal,
                released: false,
            },
            restored,
        ))
    }

    /// Make sure `key` is at least `value` (never lowers it). The original value is in the
    /// journal before the new one is written. Returns the change, or `None` if the value was
    /// already high enough.
    pub fn raise_to(&mut self, key: &str, value: u64) -> Result<Option<HostChange>, EmuError> {
        check_key(key)?;
        let current = sys::read_sysctl(key)?;
        let now: u64 = current.trim().parse().map_err(|_| EmuError::State {
            path: format!("/proc/sys/{}", key.replace('.', "/")),
            detail: format!("'{}' is not a number", current.trim()),
        })?;
        if now >= value {
            return Ok(None);
        }
        let set = value.to_string();
        let before = self.journal.changes.clone();
        match self.journal.changes.iter_mut().find(|c| c.key == key) {
            Some(c) => c.set = set.clone(),
            None => self.journal.changes.push(HostChange {
                key: key.to_string(),
                original: current.trim().to_string(),
                set: set.clone(),
            }),
        }
        save(&self.journal)?;
        if let Err(e) = sys::write_sysctl(key, &set) {
            self.journal.changes = before;
            let _ = save(&self.journal);
            return Err(e);
        }
        Ok(self.journal.changes.iter().find(|c| c.key == key).cloned())
    }

    /// Put every raised value back (last raised first); the guard stays in charge. Returns
    /// what was done and the errors; changes that could not be put back stay journaled.
    pub fn restore(&mut self) -> (Vec<Restored>, Vec<EmuError>) {
        let (done, failed) = restore_all(&self.journal.changes);
        let (keep, mut errors): (Vec<HostChange>, Vec<EmuError>) = failed.into_iter().unzip();
        self.journal.changes = keep;
        if let Err(e) = save(&self.journal) {
            errors.push(e);
        }
        (done, errors)
    }

    /// The changes in force (raised and not yet put back).
    pub fn changes(&self) -> &[HostChange] {
        &self.journal.changes
    }

    /// Put everything back and remove the journal.
    pub fn release(mut self) -> (Vec<Restored>, Vec<EmuError>) {
        self.release_inner()
    }

    fn release_inner(&mut self) -> (Vec<Restored>, Vec<EmuError>) {
        self.released = true;
        let (done, mut errors) = self.restore();
        if errors.is_empty() {
            if let Err(e) = remove() {
                errors.push(e);
            }
        }
        (done, errors)
    }
}

impl Drop for HostSysctls {
    fn drop(&mut self) {
        if !self.released {
            for e in self.release_inner().1 {
                eprintln!("tcptune: restoring the host's global sysctls: {e}");
            }
        }
    }
}

/// What [`cleanup_stale`](crate::state::cleanup_stale) found and undid.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Cleanup {
    /// Host sysctls put back from a dead owner's journal.
    pub sysctls: Vec<Restored>,
    /// Topologies of dead owners removed (their namespaces, processes and files).
    pub topologies: Vec<String>,
    /// What could not be undone.
    pub errors: Vec<String>,
}

impl Cleanup {
    /// Whether there was nothing to clean up.
    pub fn is_empty(&self) -> bool {
        self.sysctls.is_empty() && self.topologies.is_empty() && self.errors.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(original: &str, set: &str) -> HostChange {
        HostChange {
            key: "net.core.rmem_max".into(),
            original: original.into(),
            set: set.into(),
        }
    }

    #[test]
    fn a_value_still_at_what_was_set_is_restored() {
        let c = change("4194304", "134217728");
        assert_eq!(restore_action(&c, "134217728\n"), RestoreAction::Restored);
    }

    #[test]
    fn a_value_already_at_the_original_needs_nothing() {
        let c = change("4194304", "134217728");
        assert_eq!(
            restore_action(&c, "4194304\n"),
            RestoreAction::AlreadyOriginal
        );
        // Crash between journaling and raising: the value never changed.
        let same = change("212992", "212992");
        assert_eq!(
            restore_action(&same, "212992"),
            RestoreAction::AlreadyOriginal
        );
    }

    #[test]
    fn a_value_someone_else_changed_is_left_alone() {
        let c = change("4194304", "134217728");
        assert_eq!(restore_action(&c, "8388608"), RestoreAction::LeftAlone);
    }

    #[test]
    fn vectors_compare_by_words() {
        let c = HostChange {
            key: "net.ipv4.tcp_rmem".into(),
            original: "4096 131072 6291456".into(),
            set: "4096 131072 134217728".into(),
        };
        assert_eq!(
            restore_action(&c, "4096\t131072\t134217728\n"),
            RestoreAction::Restored
        );
    }

    #[test]
    fn only_known_global_sysctls_are_accepted_from_a_journal() {
        assert!(check_key("net.core.rmem_max").is_ok());
        assert!(check_key("net.core.wmem_max").is_ok());
        assert!(check_key("kernel.core_pattern").is_err());
        assert!(check_key("../../etc/passwd").is_err());
    }

    #[test]
    fn the_journal_round_trips() {
        let j = HostJournal {
            schema_version: JOURNAL_SCHEMA_VERSION,
            owner: ProcessId { pid: 7, start: 99 },
            changes: vec![change("1", "2")],
        };
        let text = serde_json::to_string(&j).unwrap_or_default();
        let back: Result<HostJournal, _> = serde_json::from_str(&text);
        assert_eq!(back.ok(), Some(j));
    }
}
