//! The global sysctls the raised host configurations need (`net.core.rmem_max` and
//! `net.core.wmem_max` are not per network namespace), changed through a guard that puts the
//! old values back when dropped: at the end, on error, on panic (unwinding) and after Ctrl-C
//! (the runner unwinds).

use crate::record::SysctlChange;
use anyhow::Context as _;
use tcptune_sys::sysctl::{read_sysctl, write_sysctl};

/// The guard.
#[derive(Debug, Default)]
pub struct GlobalSysctls {
    changes: Vec<SysctlChange>,
}

impl GlobalSysctls {
    /// Nothing changed yet.
    pub fn new() -> GlobalSysctls {
        GlobalSysctls::default()
    }

    /// Make sure `key` is at least `value` (never lowers it). Records what it changed.
    pub fn raise_to(&mut self, key: &str, value: u64) -> anyhow::Result<()> {
        let before = read_sysctl(key).with_context(|| format!("reading global {key}"))?;
        let current: u64 = before.trim().parse().unwrap_or(0);
        if current >= value {
            return Ok(());
        }
        write_sysctl(key, &value.to_string())
            .with_context(|| format!("raising global {key} from {current} to {value}"))?;
        if let Some(c) = self.changes.iter_mut().find(|c| c.key == key) {
            c.set = value.to_string();
            c.restored = false;
        } else {
            self.changes.push(SysctlChange {
                key: key.to_string(),
                before,
                set: value.to_string(),
                restored: false,
            });
        }
        Ok(())
    }

    /// Put every changed value back (idempotent). Returns the errors, if any.
    pub fn restore(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        for c in self.changes.iter_mut().rev() {
            if c.restored {
                continue;
            }
            match write_sysctl(&c.key, &c.before) {
                Ok(()) => c.restored = true,
                Err(e) => errors.push(format!("restoring {} to {}: {e}", c.key, c.before)),
            }
        }
        errors
    }

    /// What was changed and whether it was restored.
    pub fn changes(&self) -> &[SysctlChange] {
        &self.changes
    }
}

impl Drop for GlobalSysctls {
    fn drop(&mut self) {
        for e in self.restore() {
            eprintln!("tcptune lab: {e}");
        }
    }
}
