//! What a check says: a [`Finding`] with a severity, a message for a non-expert, and the exact
//! fix.

use serde::{Deserialize, Serialize};

/// How much a finding matters for the target path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing; does not limit the target.
    Info,
    /// Limits transfers on the target path (or could not be checked and might).
    Warning,
    /// Breaks or cripples long-distance transfers.
    Error,
}

impl Severity {
    /// The word printed in reports.
    pub fn label(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// One sysctl to set: `key = value` as in an `/etc/sysctl.d` file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SysctlSetting {
    /// Dotted name.
    pub key: String,
    /// The new value (triples separated by single spaces).
    pub value: String,
}

impl SysctlSetting {
    /// A setting.
    pub fn new(key: &str, value: impl Into<String>) -> SysctlSetting {
        SysctlSetting {
            key: key.to_string(),
            value: value.into(),
        }
    }

    /// The command that applies it now: `sysctl -w key='value'`.
    pub fn command(&self) -> String {
        if self.value.contains(' ') {
            format!("sysctl -w {}='{}'", self.key, self.value)
        } else {
            format!("sysctl -w {}={}", self.key, self.value)
        }
    }
}

/// A result of one check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable identifier (`tcp-wmem-max-small`), for scripts and docs.
    pub id: String,
    /// How much it matters.
    pub severity: Severity,
    /// What is wrong and what it costs, in words a non-expert understands, with numbers.
    pub message: String,
    /// The exact fix: commands, one per line (`sysctl -w ...`, `ethtool ...`). `None` when
    /// there is nothing to run.
    pub fix: Option<String>,
    /// The sysctls the fix sets (what `--write-sysctl` writes and `--apply` applies).
    #[serde(default)]
    pub sysctl: Vec<SysctlSetting>,
}

impl Finding {
    /// A finding without a fix.
    pub fn new(id: &str, severity: Severity, message: impl Into<String>) -> Finding {
        Finding {
            id: id.to_string(),
            severity,
            message: message.into(),
            fix: None,
            sysctl: Vec::new(),
        }
    }

    /// Fix by setting sysctls (the fix text is the `sysctl -w` commands).
    pub fn with_sysctls(mut self, settings: Vec<SysctlSetting>) -> Finding {
        let cmds: Vec<String> = settings.iter().map(SysctlSetting::command).collect();
        self.fix = Some(cmds.join("\n"));
        self.sysctl = settings;
        self
    }

    /// Fix by running a command.
    pub fn with_command(mut self, command: impl Into<String>) -> Finding {
        self.fix = Some(command.into());
        self
    }

    /// Whether it stands in the way (warning or worse).
    pub fn is_problem(&self) -> bool {
        self.severity >= Severity::Warning
    }
}
