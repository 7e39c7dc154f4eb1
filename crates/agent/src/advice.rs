//! Advise mode: what the agent would set, as one line per distinct advice, logged once per
//! destination per day, under an ID derived from the actions (the same advice has the same ID
//! in every run and on every host, so it can be looked up and silenced).

use crate::policy::{human_bytes, Settings};
use crate::record::{applied, ConnRecord};
use std::collections::HashMap;
use std::net::IpAddr;

/// At most this many (destination, advice) pairs are remembered; beyond, the oldest days are
/// forgotten first.
pub const MAX_REMEMBERED: usize = 4096;

/// The advice's ID: `A` and the policy's ID in hex.
pub fn advice_id(policy_id: u32) -> String {
    format!("A{policy_id:08x}")
}

/// The advice line for a connection the program advised on (`record.applied` says what it
/// would have set on that socket), with the settings the ID stands for.
pub fn advice_line(record: &ConnRecord, settings: &Settings) -> String {
    let bits = record.applied_bits;
    let mut would = Vec::new();
    if bits & applied::SNDBUF != 0 {
        would.push(format!(
            "SO_SNDBUF {} ({} in the kernel)",
            human_bytes(u64::from(settings.sndbuf_request)),
            human_bytes(u64::from(settings.sndbuf_request) * 2)
        ));
    }
    if bits & applied::RCVBUF != 0 {
        would.push(format!(
            "SO_RCVBUF {}",
            human_bytes(u64::from(settings.rcvbuf_request))
        ));
    }
    if bits & applied::CC != 0 {
        would.push(format!(
            "TCP_CONGESTION {}",
            settings.congestion.as_deref().unwrap_or("?")
        ));
    }
    if bits & applied::PACING != 0 {
        would.push(format!(
            "pacing at {} Mbit/s shared by the connections that carry data",
            settings.pacing_bytes_per_s * 8 / 1_000_000
        ));
    }
    if bits & applied::IW != 0 {
        would.push(format!(
            "an initial window of {} segments",
            settings.initial_window
        ));
    }
    let mut line = format!(
        "advice {} for {}: would set {}",
        advice_id(record.policy_id),
        record.peer,
        if would.is_empty() {
            "nothing (the application fixed its buffers)".to_string()
        } else {
            would.join(", ")
        }
    );
    if record.app_locked_sndbuf || record.app_locked_rcvbuf {
        line.push_str("; the application fixed its own buffers, which are left alone");
    }
    for l in &settings.limits {
        line.push_str("; ");
        line.push_str(l);
    }
    line.push_str(" (run with --mode enforce to apply)");
    line
}

/// Which advice was logged today for which destination.
#[derive(Debug, Default)]
pub struct AdviceLog {
    seen: HashMap<(IpAddr, u32), i64>,
}

impl AdviceLog {
    /// An empty log.
    pub fn new() -> AdviceLog {
        AdviceLog::default()
    }

    /// Whether advice `id` for `peer` is to be logged now (the first time each UTC day), and
    /// remember it.
    pub fn should_log(&mut self, peer: IpAddr, id: u32, now_unix_s: f64) -> bool {
        let day = (now_unix_s / 86_400.0).floor() as i64;
        if self.seen.get(&(peer, id)) == Some(&day) {
            return false;
        }
        if self.seen.len() >= MAX_REMEMBERED && !self.seen.contains_key(&(peer, id)) {
            self.seen.retain(|_, d| *d == day);
            if self.seen.len() >= MAX_REMEMBERED {
                // A day with more distinct advice than the cap: log, but do not remember.
                return true;
            }
        }
        self.seen.insert((peer, id), day);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{settings_for, HostLimits, PolicyOptions};
    use crate::record::{parse, tests::raw};
    use std::time::Duration;
    use tcptune_core::pathdb::{rtt_bucket, Direction, PathEntry};

    fn settings() -> Settings {
        let e = PathEntry {
            peer: "10.231.0.2".into(),
            direction: Direction::Send,
            rtt_bucket: rtt_bucket(Duration::from_millis(100)),
            rate_bps: 1_000_000_000,
            full_pipe: false,
            min_rtt_us: 100_000,
            first_seen_unix_s: 0.0,
            updated_unix_s: 0.0,
            samples: 1,
        };
        let host = HostLimits {
            wmem_max: 4 << 20,
            rmem_max: 4 << 20,
            tcp_wmem_max: 4 << 20,
            tcp_rmem_max: 32 << 20,
        };
        settings_for(Some(&e), None, &host, &PolicyOptions::default()).expect("settings")
    }

    #[test]
    fn the_line_names_the_id_the_setting_and_the_limit() {
        let mut r = parse(&raw(2, 0, 0, 0)).expect("record");
        r.policy_id = 0xabc;
        let line = advice_line(&r, &settings());
        assert!(
            line.starts_with(
                "advice A00000abc for 10.231.0.2: would set SO_SNDBUF 4 MiB (8 MiB in the kernel)"
            ),
            "{line}"
        );
        assert!(line.contains("capped by net.core.wmem_max 4 MiB"), "{line}");
        assert!(line.contains("fixed its own buffers"), "{line}");
    }

    #[test]
    fn each_advice_is_logged_once_per_destination_per_day() {
        let mut log = AdviceLog::new();
        let a: IpAddr = "10.0.0.1".parse().expect("ip");
        let b: IpAddr = "10.0.0.2".parse().expect("ip");
        let day = 86_400.0;
        assert!(log.should_log(a, 1, 10.0));
        assert!(!log.should_log(a, 1, 20.0));
        assert!(log.should_log(b, 1, 20.0));
        assert!(log.should_log(a, 2, 30.0));
        assert!(log.should_log(a, 1, day + 1.0));
        assert!(!log.should_log(a, 1, day + 2.0));
    }

    #[test]
    fn the_memory_is_bounded() {
        let mut log = AdviceLog::new();
        for i in 0..(MAX_REMEMBERED as u32 + 10) {
            let ip = IpAddr::from([10, 0, (i >> 8) as u8, i as u8]);
            assert!(log.should_log(ip, i, 5.0));
        }
        assert!(log.seen.len() <= MAX_REMEMBERED);
        // The next day starts afresh.
        assert!(log.should_log(IpAddr::from([10, 9, 9, 9]), 1, 90_000.0));
        assert_eq!(log.seen.len(), 1);
    }
}
