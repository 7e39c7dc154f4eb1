//! `agent --raise-limits`: the driver around `tcptune_agent::limits` (which sysctls, the
//! journal format). Writes go through `doctor --apply`'s `apply` (each read back); the journal
//! is written before anything changes, so that the next agent restores what a crashed one
//! left raised. `hold-limits` (the raised host configurations of `lab --remote`) keeps its
//! own journal through the same functions ([`recover_as`], [`raise_values`]).

use anyhow::{anyhow, Context};
use std::path::{Path, PathBuf};
use tcptune_agent::limits::{restore_plan, Journal, JournalEntry, Raise, JOURNAL_VERSION};
use tcptune_doctor::apply::apply;
use tcptune_doctor::finding::SysctlSetting;
use tcptune_doctor::sysctl_file::Change;
use tcptune_sys::sysctl::read_sysctl;

/// Where the journal lives: `$TCPTUNE_AGENT_JOURNAL`, else `/run/tcptune/agent-limits.json`.
pub(crate) fn journal_path() -> PathBuf {
    std::env::var_os("TCPTUNE_AGENT_JOURNAL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/tcptune/agent-limits.json"))
}

fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn write(key: &str, value: &str) -> Option<String> {
    let previous = read_sysctl(key).ok();
    apply(&[Change {
        setting: SysctlSetting::new(key, value),
        finding: "agent-raise-limits".into(),
        required: true,
        previous,
    }])
    .into_iter()
    .find_map(|a| a.error)
}

/// Put back what a journal recorded (where the value is still the one written), then
/// remove the journal. Returns the lines to log.
fn restore(path: &Path, journal: &Journal) -> Vec<String> {
    let mut said = Vec::new();
    for (key, previous) in restore_plan(journal, |k| read_sysctl(k).ok()) {
        match write(&key, &previous) {
            None => said.push(format!("restored {key}={previous}")),
            Some(e) => said.push(format!("restoring {key}={previous} failed: {e}")),
        }
    }
    if let Err(e) = std::fs::remove_file(path) {
        said.push(format!("removing {}: {e}", path.display()));
    }
    said
}

/// At start: restore what a dead agent left raised. A live agent's journal is left alone;
/// `--raise-limits` then fails (two agents cannot both own the limits).
pub(crate) fn recover(path: &Path, want_raise: bool) -> anyhow::Result<()> {
    recover_as(path, want_raise, "agent", "--raise-limits")
}

/// [`recover`] for any owner of a journal: `who` names it in messages ("agent"), `option`
/// what cannot proceed while a live one holds the journal.
pub(crate) fn recover_as(
    path: &Path,
    want_raise: bool,
    who: &str,
    option: &str,
) -> anyhow::Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(anyhow!("reading the journal {}: {e}", path.display())),
    };
    let journal: Journal = serde_json::from_str(&text)
        .with_context(|| format!("the journal {} is damaged", path.display()))?;
    if journal.owner_pid != std::process::id() && alive(journal.owner_pid) {
        if want_raise {
            return Err(anyhow!(
                "another {who} (pid {}) holds raised limits (journal {}): {option} needs it to exit first",
                journal.owner_pid,
                path.display()
            ));
        }
        return Ok(());
    }
    for line in restore(path, &journal) {
        eprintln!(
            "tcptune: {line} (left raised by a dead {who}, pid {})",
            journal.owner_pid
        );
    }
    Ok(())
}

/// Raised limits: restored when [`Raised::restore`] runs or the value is dropped.
pub(crate) struct Raised {
    path: PathBuf,
    journal: Option<Journal>,
}

impl Raised {
    /// Put the previous values back now.
    pub(crate) fn restore(mut self) {
        self.restore_now();
    }

    fn restore_now(&mut self) {
        if let Some(j) = self.journal.take() {
            for line in restore(&self.path, &j) {
                eprintln!("tcptune: {line}");
            }
        }
    }
}

impl Drop for Raised {
    fn drop(&mut self) {
        self.restore_now();
    }
}

/// Write the journal, then raise what `plan` says; `None` when there is nothing to raise.
pub(crate) fn raise(path: &Path, plan: &[Raise]) -> anyhow::Result<Option<Raised>> {
    let writes: Vec<(String, String)> = plan
        .iter()
        .map(|r| (r.key.to_string(), r.to.to_string()))
        .collect();
    raise_values(path, &writes, "the agent exits")
}

/// Write the journal (each key's value now), then write each `(key, value)`; `None` when
/// there is nothing to write. `until` ends the line said for each ("the agent exits"). A
/// write that fails puts back what was written before it.
pub(crate) fn raise_values(
    path: &Path,
    writes: &[(String, String)],
    until: &str,
) -> anyhow::Result<Option<Raised>> {
    if writes.is_empty() {
        return Ok(None);
    }
    let mut journal = Journal {
        schema_version: JOURNAL_VERSION,
        owner_pid: std::process::id(),
        entries: Vec::new(),
    };
    for (key, to) in writes {
        let previous = read_sysctl(key)
            .map_err(|e| anyhow!("reading {key}: {e}"))?
            .trim()
            .to_string();
        journal.entries.push(JournalEntry {
            key: key.clone(),
            previous,
            written: to.clone(),
        });
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the journal's directory {}", dir.display()))?;
    }
    std::fs::write(path, serde_json::to_string_pretty(&journal)?)
        .with_context(|| format!("writing the journal {}", path.display()))?;
    let from: Vec<String> = journal.entries.iter().map(|e| e.previous.clone()).collect();
    let raised = Raised {
        path: path.to_path_buf(),
        journal: Some(journal),
    };
    for ((key, to), from) in writes.iter().zip(from) {
        if let Some(e) = write(key, to) {
            // `raised` drops here and puts back what was written.
            return Err(anyhow!("raising {key} to {to}: {e}"));
        }
        eprintln!("tcptune: raised {key} from {from} to {to} (restored when {until})");
    }
    Ok(Some(raised))
}
