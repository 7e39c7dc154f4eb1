//! The global sysctls the raised host configurations need (`net.core.rmem_max` and
//! `net.core.wmem_max` are not per network namespace), changed through
//! `tcptune_emu::host::HostSysctls`: the original values are journaled under `/run/tcptune/`
//! before anything is raised, so that they are put back at the end, on error, on panic
//! (unwinding), after Ctrl-C (the runner unwinds) and, if the lab is killed outright, by the
//! next lab, emulator or `tcptune lab --cleanup`. This guard adds the record the lab keeps in
//! `meta.json`.
//!
//! In rootless mode the lab cannot change them: [`GlobalSysctls::untouchable`] changes
//! nothing (the cells that would need them raised are not run, see `crate::feasible`).

use crate::record::SysctlChange;
use anyhow::Context as _;
use tcptune_emu::host::{HostSysctls, Restored};

/// The guard.
#[derive(Debug)]
pub struct GlobalSysctls {
    /// `None` in rootless mode: nothing is changed.
    host: Option<HostSysctls>,
    changes: Vec<SysctlChange>,
}

impl GlobalSysctls {
    /// Take charge of the host's global sysctls. What a lab that died left raised is put
    /// back first (and returned), so that the values read from now on are the host's own.
    pub fn acquire() -> anyhow::Result<(GlobalSysctls, Vec<Restored>)> {
        let (host, restored) = HostSysctls::acquire().context(
            "taking charge of the host's global sysctls (/run/tcptune/host-sysctls.journal)",
        )?;
        Ok((
            GlobalSysctls {
                host: Some(host),
                changes: Vec::new(),
            },
            restored,
        ))
    }

    /// The guard of a lab that may not change them (rootless mode): raising is a no-op.
    pub fn untouchable() -> GlobalSysctls {
        GlobalSysctls {
            host: None,
            changes: Vec::new(),
        }
    }

    /// Make sure `key` is at least `value` (never lowers it). Records what it changed.
    pub fn raise_to(&mut self, key: &str, value: u64) -> anyhow::Result<()> {
        let Some(host) = self.host.as_mut() else {
            return Ok(());
        };
        let Some(change) = host
            .raise_to(key, value)
            .with_context(|| format!("raising global {key} to {value}"))?
        else {
            return Ok(());
        };
        match self.changes.iter_mut().find(|c| c.key == key) {
            Some(c) => {
                c.set = change.set;
                c.restored = false;
            }
            None => self.changes.push(SysctlChange {
                key: change.key,
                before: change.original,
                set: change.set,
                restored: false,
            }),
        }
        Ok(())
    }

    /// Put every changed value back (idempotent). Returns the errors, if any.
    pub fn restore(&mut self) -> Vec<String> {
        let Some(host) = self.host.as_mut() else {
            return Vec::new();
        };
        let (_, errors) = host.restore();
        let still_raised: Vec<String> = host.changes().iter().map(|c| c.key.clone()).collect();
        for c in &mut self.changes {
            c.restored = !still_raised.contains(&c.key);
        }
        errors.into_iter().map(|e| e.to_string()).collect()
    }

    /// What was changed and whether it was restored.
    pub fn changes(&self) -> &[SysctlChange] {
        &self.changes
    }
}
