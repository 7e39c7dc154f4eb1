//! Root or rootless: how a topology gets its namespaces, decided from facts about this
//! process.
//!
//! * [`Mode::Root`] (root, or `CAP_NET_ADMIN` and `CAP_SYS_ADMIN`): named network namespaces
//!   (`ip netns`) and a TUN device in each, as always.
//! * [`Mode::Rootless`] (anyone, where unprivileged user namespaces are allowed): the
//!   namespaces belong to a user namespace that tcptune creates, in which the user is root.
//!   They are held by file descriptors (no names under `/run/netns`, which only root may
//!   write), joined by veth pairs whose ends in the emulator's own namespace are read and
//!   written through packet sockets (`/dev/net/tun` is often open to root only; veth and
//!   packet sockets need nothing from outside the user namespace). Everything disappears
//!   with the process that holds the descriptors. What it cannot do is in
//!   [`Mode::summary`]: the global `net.core.rmem_max`/`wmem_max` stay as they are and
//!   `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE` are refused (they want `CAP_NET_ADMIN` in the host's
//!   user namespace).
//!
//! [`choose`] is the pure decision; [`Facts::gather`] collects what it needs. The choice
//! comes from [`ModeChoice`], by default from the environment variable `TCPTUNE_EMU_MODE`
//! (`auto`, `root` or `rootless`; `auto` when unset).

use crate::error::EmuError;
use crate::nsexec::{Op, Script};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The environment variable that forces a mode (`root`, `rootless`, `auto`).
pub const MODE_ENV: &str = "TCPTUNE_EMU_MODE";

/// How topologies are built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Named network namespaces and TUN devices (needs root).
    Root,
    /// Inside a user namespace of tcptune's own (needs no privilege).
    Rootless,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Root => "root",
            Mode::Rootless => "rootless",
        })
    }
}

impl Mode {
    /// One line: which mode, and what it cannot do.
    pub fn summary(self, facts: &Facts) -> String {
        match self {
            Mode::Root => "root: named network namespaces (ip netns) and TUN devices; the global \
                           net.core.rmem_max/wmem_max can be raised"
                .to_string(),
            Mode::Rootless => {
                let mut s = String::from(
                    "rootless: a user namespace of tcptune's own (you are root only inside it), \
                     veth pairs and packet sockets instead of TUN devices; it cannot raise the \
                     global net.core.rmem_max/wmem_max nor use SO_RCVBUFFORCE/SO_SNDBUFFORCE, \
                     and its namespaces are not listed by 'ip netns'",
                );
                if !facts.realtime {
                    s.push_str(
                        "; no real-time priority for the emulator threads (RLIMIT_RTPRIO is 0)",
                    );
                }
                s
            }
        }
    }

    /// Whether this mode can raise the host's global sysctls (`net.core.rmem_max`, ...) and
    /// use `SO_*BUFFORCE`.
    pub fn can_raise_global_limits(self) -> bool {
        self == Mode::Root
    }
}

/// What the caller asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModeChoice {
    /// Root mode when privileged, rootless otherwise.
    #[default]
    Auto,
    /// Root mode or an error.
    Root,
    /// Rootless mode even when privileged (for comparisons).
    Rootless,
}

impl ModeChoice {
    /// The choice `TCPTUNE_EMU_MODE` makes (`auto` when unset or not understood: a warning
    /// is printed then).
    pub fn from_env() -> ModeChoice {
        match std::env::var(MODE_ENV) {
            Err(_) => ModeChoice::Auto,
            Ok(v) => v.parse().unwrap_or_else(|e| {
                eprintln!("tcptune emu: ignoring {MODE_ENV}: {e}");
                ModeChoice::Auto
            }),
        }
    }
}

impl std::str::FromStr for ModeChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(ModeChoice::Auto),
            "root" => Ok(ModeChoice::Root),
            "rootless" => Ok(ModeChoice::Rootless),
            other => Err(format!(
                "unknown mode '{other}' (expected auto, root or rootless)"
            )),
        }
    }
}

/// What the decision needs to know about this process and host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// `CAP_NET_ADMIN` and `CAP_SYS_ADMIN` in the effective set.
    pub privileged: bool,
    /// `/dev/net/tun` exists.
    pub tun: bool,
    /// Whether this process may create a user namespace with a network namespace and
    /// packet sockets in it (`None`: not checked).
    pub userns: Option<Result<(), String>>,
    /// Whether the emulator threads may run at real-time priority.
    pub realtime: bool,
}

impl Facts {
    /// Gather the facts `choice` needs (user namespaces are tried only when the choice may
    /// need them, since that forks).
    pub fn gather(choice: ModeChoice) -> Facts {
        let privileged = privileged();
        let need_userns = match choice {
            ModeChoice::Root => false,
            ModeChoice::Rootless => true,
            ModeChoice::Auto => !privileged,
        };
        Facts {
            privileged,
            tun: std::path::Path::new(crate::sys::TUN_PATH).exists(),
            userns: need_userns.then(userns_available),
            realtime: privileged || rtprio_allowed(),
        }
    }
}

/// Pick the mode (pure).
pub fn choose(choice: ModeChoice, facts: &Facts) -> Result<Mode, EmuError> {
    let root = || {
        if !facts.privileged {
            Err(EmuError::NotPermitted)
        } else if !facts.tun {
            Err(EmuError::NoTun(crate::sys::TUN_PATH.to_string()))
        } else {
            Ok(Mode::Root)
        }
    };
    let rootless = || match &facts.userns {
        Some(Ok(())) => Ok(Mode::Rootless),
        Some(Err(why)) => Err(EmuError::NoUserNamespaces(why.clone())),
        None => Err(EmuError::NoUserNamespaces("not checked".into())),
    };
    match choice {
        ModeChoice::Root => root(),
        ModeChoice::Rootless => rootless(),
        ModeChoice::Auto if facts.privileged => root(),
        ModeChoice::Auto => rootless(),
    }
}

/// The mode topologies get here with `choice`, and the facts it was decided from.
pub fn detect(choice: ModeChoice) -> (Result<Mode, EmuError>, Facts) {
    let facts = Facts::gather(choice);
    (choose(choice, &facts), facts)
}

/// `CAP_NET_ADMIN` (12) and `CAP_SYS_ADMIN` (21) in the effective set.
fn privileged() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    cap_eff & (1 << 12) != 0 && cap_eff & (1 << 21) != 0
}

/// Whether `RLIMIT_RTPRIO` allows the emulator's SCHED_FIFO priority.
fn rtprio_allowed() -> bool {
    // SAFETY: getrlimit writes into the struct.
    let mut rl: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_RTPRIO, &mut rl) };
    r == 0 && rl.rlim_cur >= 10
}

/// Why the host's sysctls forbid unprivileged user namespaces, if they do (pure: fed the
/// values of `user.max_user_namespaces`, `kernel.unprivileged_userns_clone` (Debian) and
/// `kernel.apparmor_restrict_unprivileged_userns` (Ubuntu), `None` when absent).
pub fn userns_sysctl_problem(
    max_user_namespaces: Option<&str>,
    unprivileged_userns_clone: Option<&str>,
    apparmor_restrict: Option<&str>,
) -> Option<String> {
    let is = |v: Option<&str>, want: &str| v.is_some_and(|v| v.trim() == want);
    if is(max_user_namespaces, "0") {
        return Some(
            "user.max_user_namespaces is 0 (sysctl -w user.max_user_namespaces=10000 allows them)"
                .into(),
        );
    }
    if is(unprivileged_userns_clone, "0") {
        return Some(
            "kernel.unprivileged_userns_clone is 0 (sysctl -w kernel.unprivileged_userns_clone=1 \
             allows them)"
                .into(),
        );
    }
    if is(apparmor_restrict, "1") {
        return Some(
            "AppArmor restricts unprivileged user namespaces \
             (kernel.apparmor_restrict_unprivileged_userns is 1)"
                .into(),
        );
    }
    None
}

/// The identity map of this process's user into a new user namespace (uid and gid 0 inside
/// are ours outside): the contents of `uid_map` and `gid_map`.
pub(crate) fn root_maps() -> (String, String) {
    // SAFETY: geteuid/getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    (format!("0 {uid} 1\n"), format!("0 {gid} 1\n"))
}

/// Add the steps that create a user namespace with a network namespace, and map this
/// process's user to root inside.
pub(crate) fn push_new_userns(script: &mut Script) {
    let (uid_map, gid_map) = root_maps();
    script.push(
        Op::Unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET),
        "unshare(CLONE_NEWUSER | CLONE_NEWNET): creating a user namespace",
    );
    for (path, data, what) in [
        (
            "/proc/self/setgroups",
            "deny",
            "writing deny to /proc/self/setgroups",
        ),
        (
            "/proc/self/uid_map",
            uid_map.trim_end(),
            "writing the uid map",
        ),
        (
            "/proc/self/gid_map",
            gid_map.trim_end(),
            "writing the gid map",
        ),
    ] {
        if let Ok(path) = std::ffi::CString::new(path) {
            script.push(
                Op::Write {
                    path,
                    data: data.as_bytes().to_vec(),
                },
                format!("{what} of a new user namespace ({data})"),
            );
        }
    }
}

/// Whether this process can run the rootless mode: the host's sysctls allow unprivileged
/// user namespaces, and a child can create one with a network namespace and a packet
/// socket in it. `Err` says why not.
pub fn userns_available() -> Result<(), String> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let max = read("/proc/sys/user/max_user_namespaces");
    let clone = read("/proc/sys/kernel/unprivileged_userns_clone");
    let apparmor = read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    let problem = userns_sysctl_problem(max.as_deref(), clone.as_deref(), apparmor.as_deref());
    let mut script = Script::new();
    push_new_userns(&mut script);
    script.push(
        Op::Socket {
            domain: libc::AF_PACKET,
            ty: libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            protocol: 0,
        },
        "creating a packet socket inside a new user namespace",
    );
    match script.run() {
        Ok(_) => Ok(()),
        Err(e) => Err(match problem {
            Some(p) => format!("{p}: {e}"),
            None => e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(privileged: bool, tun: bool, userns: Option<Result<(), String>>) -> Facts {
        Facts {
            privileged,
            tun,
            userns,
            realtime: privileged,
        }
    }

    #[test]
    fn auto_uses_root_mode_when_privileged_and_rootless_otherwise() {
        let root = facts(true, true, None);
        assert_eq!(choose(ModeChoice::Auto, &root).ok(), Some(Mode::Root));
        let user = facts(false, false, Some(Ok(())));
        assert_eq!(choose(ModeChoice::Auto, &user).ok(), Some(Mode::Rootless));
    }

    #[test]
    fn root_mode_without_privilege_or_tun_is_an_environment_error() {
        let user = facts(false, true, Some(Ok(())));
        let e = choose(ModeChoice::Root, &user).err();
        assert!(matches!(e, Some(EmuError::NotPermitted)), "{e:?}");
        let no_tun = facts(true, false, None);
        let e = choose(ModeChoice::Auto, &no_tun).err();
        assert!(matches!(e, Some(EmuError::NoTun(_))), "{e:?}");
    }

    #[test]
    fn rootless_can_be_forced_as_root_and_says_why_it_cannot_run() {
        let root = facts(true, true, Some(Ok(())));
        assert_eq!(
            choose(ModeChoice::Rootless, &root).ok(),
            Some(Mode::Rootless)
        );
        let locked = facts(
            false,
            true,
            Some(Err("user.max_user_namespaces is 0".into())),
        );
        let e = choose(ModeChoice::Auto, &locked).err();
        match e {
            Some(e @ EmuError::NoUserNamespaces(_)) => {
                assert!(e.is_environment());
                assert!(e.to_string().contains("max_user_namespaces"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn choices_parse_from_the_environment_spelling() {
        assert_eq!("".parse(), Ok(ModeChoice::Auto));
        assert_eq!("Rootless".parse(), Ok(ModeChoice::Rootless));
        assert_eq!(" root ".parse(), Ok(ModeChoice::Root));
        assert!("sudo".parse::<ModeChoice>().is_err());
    }

    #[test]
    fn sysctls_that_forbid_user_namespaces_are_named() {
        assert_eq!(userns_sysctl_problem(Some("96364\n"), None, None), None);
        let p = userns_sysctl_problem(Some("0\n"), None, None).unwrap_or_default();
        assert!(p.contains("user.max_user_namespaces"), "{p}");
        let p = userns_sysctl_problem(Some("10"), Some("0"), None).unwrap_or_default();
        assert!(p.contains("unprivileged_userns_clone"), "{p}");
        let p = userns_sysctl_problem(None, Some("1"), Some("1\n")).unwrap_or_default();
        assert!(p.contains("AppArmor"), "{p}");
    }

    #[test]
    fn the_rootless_summary_names_what_it_cannot_do() {
        let s = Mode::Rootless.summary(&facts(false, false, Some(Ok(()))));
        assert!(s.starts_with("rootless: "), "{s}");
        assert!(s.contains("net.core.rmem_max/wmem_max"), "{s}");
        assert!(s.contains("RLIMIT_RTPRIO"), "{s}");
        let r = Mode::Root.summary(&facts(true, true, None));
        assert!(r.starts_with("root: "), "{r}");
    }
}
