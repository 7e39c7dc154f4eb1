//! The progress bar on stderr: runs done, percentage, elapsed time and an ETA from a cost
//! model of the remaining runs, corrected by how long the finished runs really took.

use crate::plan::{CellKey, Plan, Scenario};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};
use tcptune_core::{format_duration, TuneMode};

/// Fixed cost of one run (starting processes), seconds.
const OVERHEAD_S: f64 = 0.1;
/// Round trips of one session besides the data (control connection, phases, results).
const SESSION_RTTS: f64 = 12.0;
/// Round trips of the bandwidth probe (`auto`, `probe`; the lab's database is always cold),
/// in rounds of at least [`tcptune_core::fullpipe::MIN_ROUND`].
const PROBE_ROUNDS: f64 = 17.0;

/// The expected wall time of one run of `cell`, seconds: the overhead and the session's
/// round trips, the bandwidth probe for modes that measure the path, plus the transfer at
/// the slower of the link and the window the mode's buffers allow, plus slow start, capped
/// at the plan's time limit. (Fitted to measured runs: within about 10% on the emulator.)
pub fn expected_seconds(plan: &Plan, cell: &CellKey) -> f64 {
    let rtt = cell.rtt_us as f64 / 1e6;
    // The scenario cells send for a planned time.
    let planned_ms = match cell.scenario {
        Some(Scenario::Competing) => plan.extras.competing.as_ref().map(|c| c.first_ms),
        Some(Scenario::PathChange) => plan
            .extras
            .path_change
            .iter()
            .find(|p| p.rtt_us == cell.rtt_us)
            .map(|p| p.duration_ms),
        None => None,
    };
    if let Some(ms) = planned_ms {
        return OVERHEAD_S + SESSION_RTTS * rtt + ms as f64 / 1000.0;
    }
    let bytes = plan.messages as f64 * plan.message_size.0 as f64;
    let mode = cell.mode();
    let window = match mode {
        Some(TuneMode::None) => Some(TuneMode::UNTUNED_BUFFER.0 as f64),
        Some(TuneMode::Fixed(b)) => Some(b.0 as f64),
        _ => None,
    };
    let link = plan.rate.0 as f64;
    let rate = match window {
        Some(w) if rtt > 0.0 => (w * 8.0 * f64::from(cell.streams) / rtt).min(link),
        _ => link,
    };
    let probe = if mode.as_ref().is_some_and(TuneMode::needs_rate_probe) {
        PROBE_ROUNDS * rtt.max(tcptune_core::fullpipe::MIN_ROUND.as_secs_f64())
    } else {
        0.0
    };
    let transfer = bytes * 8.0 / rate.max(1.0) + 12.0 * rtt;
    OVERHEAD_S + SESSION_RTTS * rtt + probe + transfer.min(plan.max_time_ms as f64 / 1000.0)
}

/// Tracks runs and prints the bar.
#[derive(Debug)]
pub struct Progress {
    total_runs: usize,
    done_runs: usize,
    total_cost: f64,
    done_cost: f64,
    started: Instant,
    tty: bool,
    enabled: bool,
}

impl Progress {
    /// A bar for runs costing `total_cost` expected seconds in all.
    pub fn new(total_runs: usize, total_cost: f64, enabled: bool) -> Progress {
        Progress {
            total_runs,
            done_runs: 0,
            total_cost,
            done_cost: 0.0,
            started: Instant::now(),
            tty: std::io::stderr().is_terminal(),
            enabled,
        }
    }

    /// The ETA after `elapsed`, given the finished and total expected costs.
    pub fn eta(elapsed: Duration, done_cost: f64, total_cost: f64) -> Option<Duration> {
        if done_cost <= 0.0 {
            return (total_cost > 0.0).then(|| Duration::from_secs_f64(total_cost));
        }
        let speed = elapsed.as_secs_f64() / done_cost;
        let left = (total_cost - done_cost).max(0.0) * speed;
        Some(Duration::from_secs_f64(left))
    }

    /// Show that a run is starting.
    pub fn starting(&mut self, what: &str) {
        if self.enabled && self.tty {
            self.draw(what);
        }
    }

    /// Count a finished run of expected cost `cost`, with a result to show.
    pub fn finished(&mut self, cost: f64, what: &str, result: &str) {
        self.done_runs += 1;
        self.done_cost += cost;
        if !self.enabled {
            return;
        }
        if self.tty {
            self.draw(&format!("{what} -> {result}"));
        } else {
            let eta = Self::eta(self.started.elapsed(), self.done_cost, self.total_cost)
                .map_or("?".into(), fmt_secs);
            eprintln!(
                "[{}/{} {:.0}% elapsed {} ETA {}] {what} -> {result}",
                self.done_runs,
                self.total_runs,
                self.percent(),
                fmt_secs(self.started.elapsed()),
                eta
            );
        }
    }

    /// Print a message without breaking the bar.
    pub fn note(&self, msg: &str) {
        if self.tty && self.enabled {
            eprint!("\r\x1b[2K");
        }
        eprintln!("{msg}");
    }

    /// End the bar (newline on a terminal).
    pub fn done(&self) {
        if self.tty && self.enabled {
            eprintln!();
        }
    }

    fn percent(&self) -> f64 {
        if self.total_cost > 0.0 {
            100.0 * self.done_cost / self.total_cost
        } else {
            100.0
        }
    }

    fn draw(&self, what: &str) {
        let width = 28usize;
        let filled = ((self.percent() / 100.0) * width as f64).round() as usize;
        let bar: String = "=".repeat(filled.min(width)) + &" ".repeat(width - filled.min(width));
        let eta = Self::eta(self.started.elapsed(), self.done_cost, self.total_cost)
            .map_or("?".into(), fmt_secs);
        let mut line = format!(
            "[{bar}] {}/{} {:.0}% {} ETA {}  {what}",
            self.done_runs,
            self.total_runs,
            self.percent(),
            fmt_secs(self.started.elapsed()),
            eta
        );
        line.truncate(150);
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r\x1b[2K{line}");
        let _ = e.flush();
    }
}

/// `4m05s`, `12s`.
pub fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format_duration(Duration::from_secs(s)).replace("0ns", "0s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::HostConfig;

    fn key(rtt_us: u64, tune: &str, streams: u32) -> CellKey {
        CellKey::new(rtt_us, HostConfig::Untuned, streams, tune)
    }

    #[test]
    fn window_limited_cells_are_expected_to_hit_the_cap() {
        let p = Plan::quick();
        // 64 KiB at 100 ms: 5 Mbit/s, 128 MiB would take minutes: capped at 6 s.
        assert_eq!(
            expected_seconds(&p, &key(100_000, "none", 1)),
            OVERHEAD_S + SESSION_RTTS * 0.1 + 6.0
        );
        // Autotuning at 0.5 ms: about the link's 1.07 s (measured: 1.19 s).
        let k = expected_seconds(&p, &key(500, "kernel", 1));
        assert!((1.1..1.3).contains(&k), "{k}");
        // auto at 100 ms also probes the path (measured: 4.7 s in all).
        let a = expected_seconds(&p, &key(100_000, "auto", 1));
        assert!((4.0..5.5).contains(&a), "{a}");
    }

    #[test]
    fn eta_scales_the_remaining_cost_by_the_observed_speed() {
        // Half the cost done in 100 s when 50 were expected: twice as slow.
        let e = Progress::eta(Duration::from_secs(100), 50.0, 100.0).expect("eta");
        assert_eq!(e.as_secs(), 100);
        assert_eq!(
            Progress::eta(Duration::ZERO, 0.0, 30.0).map(|d| d.as_secs()),
            Some(30)
        );
        assert_eq!(fmt_secs(Duration::from_secs(245)), "4m05s");
    }
}
