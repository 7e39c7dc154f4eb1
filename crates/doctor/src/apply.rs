//! `doctor --apply`: write the required changes to the running system, recording what each
//! sysctl held before so the change can be undone. The only code in `doctor` that changes
//! anything.

use crate::sysctl_file::{normalize, Change};
use serde::Serialize;
use tcptune_sys::sysctl::{read_sysctl, write_sysctl};

/// What happened to one sysctl.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Applied {
    /// The sysctl.
    pub key: String,
    /// Its value before (as read just before writing).
    pub previous: Option<String>,
    /// The value written.
    pub value: String,
    /// The value read back after writing.
    pub now: Option<String>,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

impl Applied {
    /// The command that restores the previous value.
    pub fn undo_command(&self) -> Option<String> {
        self.previous
            .as_ref()
            .map(|p| crate::finding::SysctlSetting::new(&self.key, p.clone()).command())
    }
}

/// Apply the changes marked `required`, in order. Never stops half-way on an error: every
/// change is attempted and reported.
pub fn apply(changes: &[Change]) -> Vec<Applied> {
    changes
        .iter()
        .filter(|c| c.required)
        .map(|c| {
            let key = &c.setting.key;
            let previous = read_sysctl(key).ok().map(|v| normalize(&v));
            let result = write_sysctl(key, &c.setting.value);
            let now = read_sysctl(key).ok().map(|v| normalize(&v));
            let error = match result {
                Err(e) => Some(e.to_string()),
                Ok(()) if now.as_deref() != Some(normalize(&c.setting.value).as_str()) => {
                    Some(format!(
                        "the kernel kept '{}' after writing '{}'",
                        now.as_deref().unwrap_or("?"),
                        c.setting.value
                    ))
                }
                Ok(()) => None,
            };
            Applied {
                key: key.clone(),
                previous,
                value: c.setting.value.clone(),
                now,
                error,
            }
        })
        .collect()
}
