//! `--raise-limits`: which host maxima to raise so that the policies' buffers fit, and the
//! journal that lets the next agent restore them after a crash (pure; the driver that reads
//! and writes the sysctls is in the command).
//!
//! Only `net.core.wmem_max` and `net.core.rmem_max` are raised (a socket's `SO_SNDBUF` and
//! `SO_RCVBUF` are capped by them, even from BPF); autotuning's `tcp_wmem`/`tcp_rmem` are left
//! alone. The agent writes the journal before it changes anything, restores the previous
//! values when it exits, and an agent that starts and finds the journal of a dead one
//! restores them first. A value someone else changed since is left as it is.

use crate::policy::{HostLimits, Settings};
use serde::{Deserialize, Serialize};

/// The most a limit is raised to, whatever an entry says (256 MiB).
pub const MAX_RAISED: u64 = 256 << 20;
/// Version of the journal file.
pub const JOURNAL_VERSION: u32 = 1;

/// One sysctl to raise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Raise {
    /// The sysctl (`net.core.wmem_max`).
    pub key: &'static str,
    /// What it holds now.
    pub from: u64,
    /// What to write.
    pub to: u64,
}

/// The limits to compute policies under for [`raise_plan`]: the host's, with both maxima at
/// [`MAX_RAISED`].
pub fn unbounded(limits: &HostLimits) -> HostLimits {
    HostLimits {
        wmem_max: MAX_RAISED,
        rmem_max: MAX_RAISED,
        ..*limits
    }
}

/// What to raise so that every policy's buffers fit (nothing when they already do):
/// `settings` computed under [`unbounded`] limits, `limits` the host's now.
pub fn raise_plan(settings: &[Settings], limits: &HostLimits) -> Vec<Raise> {
    let want_snd = settings
        .iter()
        .map(|s| u64::from(s.sndbuf_request))
        .max()
        .unwrap_or(0);
    let want_rcv = settings
        .iter()
        .map(|s| u64::from(s.rcvbuf_request))
        .max()
        .unwrap_or(0);
    let mut out = Vec::new();
    for (key, want, now) in [
        ("net.core.wmem_max", want_snd, limits.wmem_max),
        ("net.core.rmem_max", want_rcv, limits.rmem_max),
    ] {
        let to = want.min(MAX_RAISED);
        if to > now {
            out.push(Raise { key, from: now, to });
        }
    }
    out
}

/// One sysctl in the journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// The sysctl.
    pub key: String,
    /// Its value before the agent wrote it.
    pub previous: String,
    /// What the agent wrote.
    pub written: String,
}

/// The journal of raised limits (a JSON file while an agent holds them raised).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    /// [`JOURNAL_VERSION`].
    pub schema_version: u32,
    /// The agent that raised them.
    pub owner_pid: u32,
    /// What it changed.
    pub entries: Vec<JournalEntry>,
}

/// What to write back: each entry's previous value, where the sysctl still holds what the
/// agent wrote (`current` reads a sysctl; someone who changed it since keeps their value).
pub fn restore_plan(
    journal: &Journal,
    current: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    journal
        .entries
        .iter()
        // By words: the kernel reads vectors (`tcp_rmem`) back with tabs.
        .filter(|e| {
            current(&e.key).is_some_and(|v| v.split_whitespace().eq(e.written.split_whitespace()))
        })
        .map(|e| (e.key.clone(), e.previous.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{settings_for, PolicyOptions};
    use std::time::Duration;
    use tcptune_core::pathdb::{rtt_bucket, Direction, PathEntry};

    fn host() -> HostLimits {
        HostLimits {
            wmem_max: 4 << 20,
            rmem_max: 4 << 20,
            tcp_wmem_max: 4 << 20,
            tcp_rmem_max: 32 << 20,
        }
    }

    fn settings(direction: Direction, rate_bps: u64, rtt_ms: u64) -> Settings {
        let e = PathEntry {
            peer: "10.0.0.2".into(),
            direction,
            rtt_bucket: rtt_bucket(Duration::from_millis(rtt_ms)),
            rate_bps,
            full_pipe: false,
            min_rtt_us: rtt_ms * 1000,
            first_seen_unix_s: 0.0,
            updated_unix_s: 0.0,
            samples: 1,
        };
        let (s, r) = match direction {
            Direction::Send => (Some(&e), None),
            Direction::Receive => (None, Some(&e)),
        };
        settings_for(s, r, &unbounded(&host()), &PolicyOptions::default()).expect("settings")
    }

    #[test]
    fn raises_wmem_max_to_what_the_fastest_path_needs() {
        // 1.75 x 12.5 MB in the kernel: a request of 10.9 MB.
        let s = settings(Direction::Send, 1_000_000_000, 100);
        assert_eq!(
            raise_plan(&[s], &host()),
            vec![Raise {
                key: "net.core.wmem_max",
                from: 4 << 20,
                to: 10_937_500
            }]
        );
        // A bad entry cannot ask for more than MAX_RAISED.
        let huge = settings(Direction::Send, 100_000_000_000_000, 1000);
        assert_eq!(raise_plan(&[huge], &host())[0].to, MAX_RAISED);
        assert!(raise_plan(&[], &host()).is_empty());
    }

    #[test]
    fn raises_rmem_max_only_past_what_autotuning_reaches() {
        // 25 MB of receive buffer: autotuning reaches 32 MiB, no buffer to set or raise
        // (only the first window is offered, which no maximum caps).
        let e = PathEntry {
            peer: "10.0.0.2".into(),
            direction: Direction::Receive,
            rtt_bucket: rtt_bucket(Duration::from_millis(100)),
            rate_bps: 1_000_000_000,
            full_pipe: false,
            min_rtt_us: 100_000,
            first_seen_unix_s: 0.0,
            updated_unix_s: 0.0,
            samples: 1,
        };
        let s = settings_for(
            None,
            Some(&e),
            &unbounded(&host()),
            &PolicyOptions::default(),
        )
        .expect("a receive window");
        assert_eq!((s.sndbuf_request, s.rcvbuf_request), (0, 0));
        assert!(raise_plan(&[s], &host()).is_empty());
        let s = settings(Direction::Receive, 10_000_000_000, 100);
        let plan = raise_plan(&[s], &host());
        assert_eq!(plan[0].key, "net.core.rmem_max");
        assert_eq!(plan[0].to, 125_000_000);
    }

    #[test]
    fn restores_only_what_still_holds_the_written_value() {
        let j = Journal {
            schema_version: JOURNAL_VERSION,
            owner_pid: 1,
            entries: vec![
                JournalEntry {
                    key: "net.core.wmem_max".into(),
                    previous: "4194304".into(),
                    written: "10937500".into(),
                },
                JournalEntry {
                    key: "net.core.rmem_max".into(),
                    previous: "212992".into(),
                    written: "8388608".into(),
                },
            ],
        };
        let now = |k: &str| match k {
            "net.core.wmem_max" => Some("10937500\n".to_string()),
            _ => Some("1000000".to_string()),
        };
        assert_eq!(
            restore_plan(&j, now),
            vec![("net.core.wmem_max".to_string(), "4194304".to_string())]
        );
        let text = serde_json::to_string(&j).expect("json");
        assert_eq!(serde_json::from_str::<Journal>(&text).expect("parse"), j);
    }

    #[test]
    fn a_vector_read_back_with_tabs_is_still_what_was_written() {
        let j = Journal {
            schema_version: JOURNAL_VERSION,
            owner_pid: 1,
            entries: vec![JournalEntry {
                key: "net.ipv4.tcp_rmem".into(),
                previous: "4096 131072 33554432".into(),
                written: "4096 131072 134217728".into(),
            }],
        };
        let now = |_: &str| Some("4096\t131072\t134217728\n".to_string());
        assert_eq!(
            restore_plan(&j, now),
            vec![(
                "net.ipv4.tcp_rmem".to_string(),
                "4096 131072 33554432".to_string()
            )]
        );
        let changed = |_: &str| Some("4096\t131072\t67108864".to_string());
        assert!(restore_plan(&j, changed).is_empty());
    }
}
