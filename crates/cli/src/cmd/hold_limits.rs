//! `tcptune hold-limits --max BYTES`: raise this host's socket-buffer maxima while the command
//! runs, and put them back when it ends. It is the far end of `lab --remote`'s raised host
//! configurations (kernel-only and user/kernel tuning, the paper's cases 2 and 3), started
//! over the same ssh as the transfers; the lab raises its own host with the same functions.
//!
//! The order: [`identity`] (this host's kernel and network namespace), [`writes`] (pure:
//! what to raise, never lowering anything), then the journal and the writes
//! (`agent_limits::raise_values`), one JSON line saying what was raised, and the wait for
//! the end: standard input closed (the lab closes it; ssh closes it when the connection
//! dies) or SIGINT/SIGTERM/SIGHUP. Then the values are put back (only where they still hold
//! what was written: someone who changed one since keeps theirs) and a last line says so.
//! After a crash or `kill -9`, the next `hold-limits` or `lab --remote` in the same network
//! namespace finds the journal of a dead owner and puts the values back first.
//!
//! `--caller-kernel` and `--caller-netns` name the caller's kernel (boot id) and network
//! namespace: the host-global `net.core.*` keys are left to the caller when both run on one
//! kernel (an emulated path between two namespaces), and everything when they also share
//! the namespace.

use crate::cmd::agent_limits::{self, Raised};
use crate::{args, exit, signals};
use anyhow::anyhow;
use serde::Serialize;
use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use tcptune_core::Bytes;
use tcptune_sys::sysctl::read_sysctl;

/// Version of the JSON lines `hold-limits --json` prints.
pub(crate) const HOLD_SCHEMA_VERSION: u32 = 1;

/// The host-global maxima (`SO_SNDBUF`/`SO_RCVBUF` are capped by them).
const GLOBAL_KEYS: [&str; 2] = ["net.core.rmem_max", "net.core.wmem_max"];
/// Autotuning's vectors, per network namespace: only their third field (the maximum) is
/// raised; the minimum and the default stay the host's.
const NETNS_KEYS: [&str; 2] = ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"];
/// The most a maximum is raised to, whatever the caller asks (1 GiB: 4 x the BDP of
/// 10 Gbit/s at 200 ms).
pub(crate) const MAX_HELD: Bytes = Bytes(1 << 30);

const LONG_ABOUT: &str = "\
Raise this host's socket-buffer maxima (net.core.rmem_max and wmem_max, and the third field \
of net.ipv4.tcp_rmem and tcp_wmem) to at least --max while this command runs, and put them \
back when it ends: when its standard input closes, or on Ctrl-C, SIGTERM or SIGHUP. Nothing is \
lowered. The previous values are journaled under /run/tcptune/ first, so that after a crash \
the next hold-limits (or lab --remote) in the same network namespace puts them back. A value \
someone changed in the meantime is left as they set it.

This is how `tcptune lab --remote HOST` applies its raised host configurations on the far \
host (started over the same ssh); it needs root there. Run by hand: \
`ssh root@HOST tcptune hold-limits --max 256m` holds them while the ssh session lasts.";

/// Options of `tcptune hold-limits`.
#[derive(clap::Args, Debug)]
#[command(long_about = LONG_ABOUT)]
pub(crate) struct Opts {
    /// Raise each maximum to at least this many bytes (at most 1 GiB).
    #[arg(long, value_parser = args::size(Bytes(1), MAX_HELD))]
    max: Bytes,
    /// The caller's kernel (its /proc/sys/kernel/random/boot_id): when it is this host's,
    /// the host-global net.core keys are the caller's to raise and are left alone.
    #[arg(long, value_name = "BOOT_ID")]
    caller_kernel: Option<String>,
    /// The caller's network namespace (the link of its /proc/self/ns/net): when the kernel
    /// and the namespace are this one's, nothing is raised here (the caller did it).
    #[arg(long, value_name = "NETNS")]
    caller_netns: Option<String>,
    /// One JSON object per line on stdout (schema_version 1): `held` once raised (or
    /// `error`), `released` at the end.
    #[arg(long)]
    json: bool,
}

/// Where a kernel and network namespace are told apart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Identity {
    /// `/proc/sys/kernel/random/boot_id`.
    pub(crate) boot_id: String,
    /// The link of `/proc/self/ns/net` (`net:[4026531840]`).
    pub(crate) netns: String,
    /// Whether that is the host's own network namespace: only there may the host-global
    /// `net.core` keys be written (the kernel refuses them elsewhere). Without root the
    /// keys are not writable anywhere, which `hold` refuses first.
    #[serde(skip)]
    pub(crate) host_netns: bool,
}

/// This process's kernel and network namespace.
pub(crate) fn identity() -> anyhow::Result<Identity> {
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map_err(|e| anyhow!("reading /proc/sys/kernel/random/boot_id: {e}"))?
        .trim()
        .to_string();
    let netns = std::fs::read_link("/proc/self/ns/net")
        .map_err(|e| anyhow!("reading /proc/self/ns/net: {e}"))?
        .display()
        .to_string();
    // The kernel shows the global keys read-only (0444) in every other namespace; init's
    // own namespace link cannot be read from there to compare.
    let host_netns = GLOBAL_KEYS.iter().all(|k| {
        let path = format!("/proc/sys/{}\0", k.replace('.', "/"));
        // SAFETY: access(2) on a NUL-terminated path; it only reads it.
        unsafe { libc::access(path.as_ptr().cast(), libc::W_OK) == 0 }
    });
    Ok(Identity {
        boot_id,
        netns,
        host_netns,
    })
}

/// The journal of this network namespace's held limits (one holder per namespace).
pub(crate) fn journal_path(id: &Identity) -> PathBuf {
    let ns: String = id.netns.chars().filter(char::is_ascii_digit).collect();
    PathBuf::from(format!("/run/tcptune/held-limits-{ns}.json"))
}

/// What to write (pure): for each key in `current` (its value now) that is below `max`, the
/// value with its maximum raised to `max` (a scalar, or the last field of a vector); keys
/// already at or above it, or unreadable as numbers, are left out.
pub(crate) fn writes(current: &[(&str, String)], max: u64) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (key, value) in current {
        let mut words: Vec<&str> = value.split_whitespace().collect();
        let Some(last) = words.last().and_then(|w| w.parse::<u64>().ok()) else {
            continue;
        };
        if last >= max {
            continue;
        }
        let max_text = max.to_string();
        if let Some(w) = words.last_mut() {
            *w = &max_text;
        }
        out.push((key.to_string(), words.join(" ")));
    }
    out
}

/// Which keys this holder raises, and why it leaves some out (pure): the global ones only
/// from the host's own network namespace and unless the caller shares the kernel (it raises
/// them), none when the caller also shares the namespace.
pub(crate) fn keys_for(
    me: &Identity,
    caller: Option<&Identity>,
) -> (Vec<&'static str>, Option<String>) {
    let same_kernel = caller.is_some_and(|c| c.boot_id == me.boot_id);
    let same_netns = same_kernel && caller.is_some_and(|c| c.netns == me.netns);
    let mut keys = Vec::new();
    let note = if same_netns {
        Some("this host and the caller share the kernel and the network namespace: the caller raises them".to_string())
    } else if same_kernel {
        Some("this host shares the caller's kernel (an emulated path?): the host-global net.core keys are the caller's".to_string())
    } else if !me.host_netns {
        Some("net.core.rmem_max/wmem_max are host-global and writable only from the host's own network namespace: left as they are".to_string())
    } else {
        None
    };
    if !same_kernel && me.host_netns {
        keys.extend(GLOBAL_KEYS);
    }
    if !same_netns {
        keys.extend(NETNS_KEYS);
    }
    (keys, note)
}

/// One value raised, for the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Change {
    pub(crate) key: String,
    pub(crate) before: String,
    pub(crate) set: String,
}

/// Raised limits, put back when dropped (or by [`Held::release`]).
pub(crate) struct Held {
    raised: Option<Raised>,
    /// What was raised.
    pub(crate) changes: Vec<Change>,
    /// Why some keys were left out (see [`keys_for`]).
    pub(crate) note: Option<String>,
}

impl Held {
    /// Put the values back now.
    pub(crate) fn release(self) {
        if let Some(r) = self.raised {
            r.restore();
        }
    }
}

/// Raise the maxima [`keys_for`] names to at least `max` in this namespace, journaled (a dead
/// holder's journal is put back first; a live one's makes this fail). Needs root.
pub(crate) fn hold(
    me: &Identity,
    caller: Option<&Identity>,
    max: Bytes,
    until: &str,
) -> anyhow::Result<Held> {
    let (keys, note) = keys_for(me, caller);
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid != 0 {
        return Err(exit::msg(
            exit::ENVIRONMENT,
            format!("raising the host's socket-buffer maxima needs root (this is uid {uid})"),
        ));
    }
    let path = journal_path(me);
    agent_limits::recover_as(&path, true, "hold-limits", "raising the limits")?;
    let mut current: Vec<(&str, String)> = Vec::new();
    for key in keys {
        let v = read_sysctl(key).map_err(|e| anyhow!("reading {key}: {e}"))?;
        current.push((key, v));
    }
    let writes = writes(&current, max.0);
    let changes = writes
        .iter()
        .map(|(key, set)| Change {
            key: key.clone(),
            before: current
                .iter()
                .find(|(k, _)| *k == key.as_str())
                .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_default(),
            set: set.clone(),
        })
        .collect();
    let raised = agent_limits::raise_values(&path, &writes, until)?;
    Ok(Held {
        raised,
        changes,
        note,
    })
}

#[derive(Serialize)]
struct Line<'a> {
    schema_version: u32,
    /// `held`, `released` or `error`.
    event: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<&'a Identity>,
    #[serde(skip_serializing_if = "Option::is_none")]
    changes: Option<&'a [Change]>,
    /// Why some keys were left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Write one line on stdout; a closed stdout is not an error here (the values must still be
/// put back), so this never exits the process.
fn say(json: bool, line: &Line<'_>, text: &str) {
    let s = if json {
        serde_json::to_string(line).unwrap_or_default()
    } else {
        text.to_string()
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{s}").and_then(|_| out.flush());
}

/// Run `tcptune hold-limits`.
pub(crate) fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    let me = identity()?;
    let caller = opts.caller_kernel.as_ref().map(|k| Identity {
        boot_id: k.trim().to_string(),
        netns: opts.caller_netns.clone().unwrap_or_default(),
        host_netns: false,
    });
    let held = match hold(&me, caller.as_ref(), opts.max, "hold-limits ends") {
        Ok(h) => h,
        Err(e) => {
            // One line on stderr as every command says its error, and under --json one
            // compact line on stdout (the caller reads lines; main's error document is
            // pretty-printed over several).
            let msg = exit::one_line(&e);
            eprintln!("tcptune: error: {msg}");
            if opts.json {
                say(
                    true,
                    &Line {
                        schema_version: HOLD_SCHEMA_VERSION,
                        event: "error",
                        host: Some(&me),
                        changes: None,
                        note: None,
                        error: Some(msg),
                    },
                    "",
                );
            }
            return Ok(ExitCode::from(exit::code_of(&e)));
        }
    };
    let mut text = if held.changes.is_empty() {
        "holding: nothing to raise (already at or above --max, or the caller's own)".to_string()
    } else {
        let list: Vec<String> = held
            .changes
            .iter()
            .map(|c| format!("{}={}", c.key, c.set))
            .collect();
        format!(
            "holding {} until standard input closes or a signal",
            list.join(", ")
        )
    };
    if let Some(n) = &held.note {
        text.push_str(&format!(" ({n})"));
    }
    say(
        opts.json,
        &Line {
            schema_version: HOLD_SCHEMA_VERSION,
            event: "held",
            host: Some(&me),
            changes: Some(&held.changes),
            note: held.note.as_deref(),
            error: None,
        },
        &text,
    );
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let on_signal = tx.clone();
    signals::on_stop(move || {
        let _ = on_signal.send(());
    })?;
    std::thread::Builder::new()
        .name("hold-stdin".into())
        .spawn(move || {
            // Read (and drop) whatever comes until the end: the caller closes its end, or
            // ssh does when the connection dies.
            let mut buf = [0u8; 512];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
            let _ = tx.send(());
        })?;
    let _ = rx.recv();
    held.release();
    say(
        opts.json,
        &Line {
            schema_version: HOLD_SCHEMA_VERSION,
            event: "released",
            host: None,
            changes: None,
            note: None,
            error: None,
        },
        "released",
    );
    Ok(ExitCode::from(match signals::fired() {
        Some(_) => exit::INTERRUPTED,
        None => exit::OK,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(boot: &str, ns: &str) -> Identity {
        Identity {
            boot_id: boot.into(),
            netns: ns.into(),
            host_netns: true,
        }
    }

    #[test]
    fn raises_scalars_and_the_last_field_of_vectors_and_never_lowers() {
        let current = [
            ("net.core.rmem_max", "4194304".to_string()),
            ("net.core.wmem_max", "268435456".to_string()),
            ("net.ipv4.tcp_rmem", "4096\t131072\t33554432".to_string()),
            ("net.ipv4.tcp_wmem", "4096 16384 4194304".to_string()),
        ];
        assert_eq!(
            writes(&current, 128 << 20),
            vec![
                ("net.core.rmem_max".to_string(), "134217728".to_string()),
                (
                    "net.ipv4.tcp_rmem".to_string(),
                    "4096 131072 134217728".to_string()
                ),
                (
                    "net.ipv4.tcp_wmem".to_string(),
                    "4096 16384 134217728".to_string()
                ),
            ]
        );
        assert!(writes(&current, 1 << 20).is_empty());
    }

    #[test]
    fn a_value_that_is_not_a_number_is_left_alone() {
        assert!(writes(&[("net.core.rmem_max", "?".to_string())], 1 << 30).is_empty());
        assert!(writes(&[("net.core.rmem_max", String::new())], 1 << 30).is_empty());
    }

    #[test]
    fn a_caller_on_the_same_kernel_keeps_the_global_keys_and_in_the_same_namespace_all() {
        let me = id("b1", "net:[1]");
        assert_eq!(keys_for(&me, None), (ALL.to_vec(), None));
        assert_eq!(keys_for(&me, Some(&id("b2", "net:[1]"))).0, ALL.to_vec());
        let (keys, note) = keys_for(&me, Some(&id("b1", "net:[2]")));
        assert_eq!(keys, NETNS_KEYS.to_vec());
        assert!(note.is_some_and(|n| n.contains("kernel")));
        let (keys, note) = keys_for(&me, Some(&id("b1", "net:[1]")));
        assert!(keys.is_empty());
        assert!(note.is_some_and(|n| n.contains("namespace")));
    }

    const ALL: [&str; 4] = [
        "net.core.rmem_max",
        "net.core.wmem_max",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    ];

    #[test]
    fn the_global_keys_are_written_only_from_the_hosts_own_namespace() {
        let mut me = id("b1", "net:[7]");
        me.host_netns = false;
        let (keys, note) = keys_for(&me, None);
        assert_eq!(keys, NETNS_KEYS.to_vec());
        assert!(note.is_some_and(|n| n.contains("host-global")));
    }

    #[test]
    fn each_namespace_has_its_own_journal() {
        let a = journal_path(&id("b", "net:[4026531840]"));
        let b = journal_path(&id("b", "net:[4026532001]"));
        assert_ne!(a, b);
        assert_eq!(a, PathBuf::from("/run/tcptune/held-limits-4026531840.json"));
        // Nothing of a name but its digits reaches the path.
        assert_eq!(
            journal_path(&id("b", "../../etc/x")),
            PathBuf::from("/run/tcptune/held-limits-.json")
        );
    }
}
