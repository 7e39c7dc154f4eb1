//! The fixes as an `/etc/sysctl.d/` file (`doctor --write-sysctl FILE`) and as a list of
//! changes to apply (`doctor --apply`). Pure: the file is a string; applying is in
//! [`crate::apply`].

use crate::facts::{Fact, HostFacts};
use crate::finding::{Finding, SysctlSetting};
use crate::sizing::{human_bytes, human_duration, human_rate, Target};

/// One change: a setting, the finding that asks for it, and the value it replaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// What to set.
    pub setting: SysctlSetting,
    /// The finding id that asks for it.
    pub finding: String,
    /// Whether the finding is a warning or worse (`--apply` applies only those).
    pub required: bool,
    /// The current value, as read (`None` if unreadable).
    pub previous: Option<String>,
}

/// The changes the findings ask for, each sysctl once (the first finding that sets a key
/// wins), skipping settings equal to the current value.
pub fn changes(findings: &[Finding], facts: &HostFacts) -> Vec<Change> {
    let mut out: Vec<Change> = Vec::new();
    for f in findings {
        for s in &f.sysctl {
            if out.iter().any(|c| c.setting.key == s.key) {
                continue;
            }
            let previous = match facts.sysctls.get(&s.key) {
                Some(Fact::Ok(v)) => Some(normalize(v)),
                _ => None,
            };
            if previous.as_deref() == Some(normalize(&s.value).as_str()) {
                continue;
            }
            out.push(Change {
                setting: s.clone(),
                finding: f.id.clone(),
                required: f.is_problem(),
                previous,
            });
        }
    }
    out
}

/// Whitespace-normalized sysctl text (`4096\t131072\t6291456` -> `4096 131072 6291456`).
pub fn normalize(v: &str) -> String {
    v.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Render the sysctl.d file. Required changes are active lines; optional ones (from info
/// findings) are commented out. Each says which finding asked for it and the value it
/// replaces, so the file documents how to undo itself.
pub fn render(findings: &[Finding], facts: &HostFacts, target: &Target, version: &str) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "# TCP tuning written by tcptune {version} (tcptune doctor --write-sysctl).\n"
    ));
    s.push_str(&format!(
        "# Sized for {} at {} RTT ({} in flight per stream).\n",
        human_rate(target.rate.bits_per_sec()),
        human_duration(target.rtt),
        human_bytes(target.rate.bdp(target.rtt).0)
    ));
    if let Fact::Ok(k) = &facts.kernel_release {
        s.push_str(&format!("# Host kernel: {k}.\n"));
    }
    s.push_str(
        "# Install: copy to /etc/sysctl.d/90-tcptune.conf and run 'sysctl --system'\n\
         # (or 'sysctl -p FILE' to load only this file). net.core.* values are global; the\n\
         # net.ipv4.* values apply to the network namespace that loads the file.\n\
         # Undo: set the 'was' values below back (sysctl -w key='value') and delete the file.\n",
    );
    let changes = changes(findings, facts);
    if changes.is_empty() {
        s.push_str("\n# Nothing to change for this target.\n");
        return s;
    }
    for c in &changes {
        let why = findings
            .iter()
            .find(|f| f.id == c.finding)
            .map(|f| wrap_comment(&f.message))
            .unwrap_or_default();
        s.push('\n');
        s.push_str(&format!("# {}:\n{why}", c.finding));
        s.push_str(&format!(
            "# was: {}\n",
            c.previous.as_deref().unwrap_or("(unreadable)")
        ));
        if c.required {
            s.push_str(&format!("{} = {}\n", c.setting.key, c.setting.value));
        } else {
            s.push_str(&format!(
                "# optional: {} = {}\n",
                c.setting.key, c.setting.value
            ));
        }
    }
    s
}

/// A message as `#` comment lines of at most ~90 characters.
fn wrap_comment(text: &str) -> String {
    let mut out = String::new();
    let mut line = String::from("#  ");
    for word in text.split_whitespace() {
        if line.len() + word.len() + 1 > 90 && line.len() > 3 {
            out.push_str(line.trim_end());
            out.push('\n');
            line = String::from("#  ");
        }
        line.push(' ');
        line.push_str(word);
    }
    if line.len() > 3 {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
