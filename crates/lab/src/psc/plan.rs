//! PSC's experiments as a plan: the two paths, the memory budget, the modes, the connection
//! counts of each experiment, and their expansion into [`PscCell`]s.
//!
//! A plan file (`tcptune lab --psc --plan FILE`, TOML; every key optional, missing keys take
//! the full plan's values):
//!
//! ```toml
//! name = "mine"
//! modes = ["default", "hiperf", "psc", "auto"]
//! basic = [1, 2, 4, 8, 16, 30]   # connections to the remote receiver (section 4.1)
//! diverse = [1, 2, 5, 10, 15]    # connections to EACH receiver (section 4.3)
//! repetitions = 2
//! seconds = 20.0                 # each transfer's length
//! budget = 2097152               # the server's --memory-budget, bytes
//! network_memory = 4194304       # PSC's NMBCLUSTERS: what "sustained" is judged against
//! congestion = "reno"            # -C of every connection; "default" keeps the namespace's
//! ```

use serde::{Deserialize, Serialize};
use std::fmt;

/// One emulated path of the testbed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PscPath {
    /// Bottleneck rate, bit/s.
    pub rate_bps: u64,
    /// Round-trip time, microseconds.
    pub rtt_us: u64,
}

impl PscPath {
    /// Bandwidth-delay product, bytes.
    pub fn bdp_bytes(&self) -> u64 {
        (self.rate_bps as u128 * self.rtt_us as u128 / 8_000_000) as u64
    }

    /// The drop-tail queue: `queue_bdp` BDPs, but never fewer than [`MIN_QUEUE_PACKETS`]
    /// full packets (the local path's BDP, 1.25 kB, is less than one packet; a 1998
    /// Ethernet interface queued tens of packets).
    pub fn queue_bytes(&self, queue_bdp: f64, mtu: u32) -> u64 {
        let bdp = (self.bdp_bytes() as f64 * queue_bdp).round() as u64;
        bdp.max(MIN_QUEUE_PACKETS * u64::from(mtu))
    }
}

/// The smallest queue of a path, in full packets.
pub const MIN_QUEUE_PACKETS: u64 = 32;

/// Which of PSC's experiments a cell belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Experiment {
    /// Section 4.1 (Figures 3 and 4): every connection to the remote receiver.
    Basic,
    /// Section 4.3 (Figures 7 and 8): the same number to each receiver at once.
    Diverse,
}

impl fmt::Display for Experiment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Experiment::Basic => "basic",
            Experiment::Diverse => "diverse",
        })
    }
}

/// Path indices: the remote (40 Mbit/s x 68 ms) path is path 0, the local one path 1.
pub const REMOTE: usize = 0;
/// The local (10 Mbit/s x 1 ms) path.
pub const LOCAL: usize = 1;

/// One combination to run: an experiment, a mode and how many connections on each path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PscCell {
    /// The experiment.
    pub experiment: Experiment,
    /// The PSC mode name (`default`, `hiperf`, `psc`, `auto`).
    pub mode: String,
    /// Connections on the remote path and on the local path.
    pub connections: [u32; 2],
}

impl PscCell {
    /// Every connection of the run.
    pub fn total(&self) -> u32 {
        self.connections[REMOTE] + self.connections[LOCAL]
    }

    /// The x value of PSC's figures: the total (Figure 3, 4, 8) or per receiver (Figure 7).
    pub fn per_receiver(&self) -> u32 {
        match self.experiment {
            Experiment::Basic => self.total(),
            Experiment::Diverse => self.connections[REMOTE],
        }
    }

    /// `diverse/psc/10+10`.
    pub fn id(&self) -> String {
        format!(
            "{}/{}/{}+{}",
            self.experiment, self.mode, self.connections[REMOTE], self.connections[LOCAL]
        )
    }

    /// The path of connection `i` (0-based): remote connections first.
    pub fn path_of(&self, i: u32) -> usize {
        if i < self.connections[REMOTE] {
            REMOTE
        } else {
            LOCAL
        }
    }
}

/// The `--tune` value of a PSC mode: `default` is NetBSD 1.2's 16 kB, `hiperf` PSC's
/// hand-tuned 400 kB, `psc` tcptune's PSC tuner, `auto` tcptune's own (both under the
/// server's memory budget). `None` for an unknown name.
pub fn tune_of(mode: &str) -> Option<&'static str> {
    match mode {
        "default" => Some("fixed:16k"),
        "hiperf" => Some("fixed:400k"),
        "psc" => Some("psc"),
        "auto" => Some("auto"),
        _ => None,
    }
}

/// Whether a mode draws its send buffers from the server's memory budget.
pub fn budgeted(mode: &str) -> bool {
    matches!(mode, "psc" | "auto")
}

/// A plan of PSC's experiments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PscPlan {
    /// Name (`quick`, `full`).
    pub name: String,
    /// The remote path (PSC: 40 Mbit/s bottleneck, 68 ms).
    pub remote: PscPath,
    /// The local path (PSC: 10 Mbit/s Ethernet, about 1 ms).
    pub local: PscPath,
    /// The server's `--memory-budget`, bytes (`SO_SNDBUF` units; PSC's `AUTO_SND_THRESH`).
    pub budget: u64,
    /// The sender's network memory (PSC's `NMBCLUSTERS`), `SO_SNDBUF` units: a connection
    /// count is sustained when the send buffers' peak use stays within it.
    pub network_memory: u64,
    /// Modes (see [`tune_of`]).
    pub modes: Vec<String>,
    /// Section 4.1: connections to the remote receiver.
    pub basic: Vec<u32>,
    /// Section 4.3: connections to each receiver.
    pub diverse: Vec<u32>,
    /// Runs per cell.
    pub repetitions: u32,
    /// Length of each transfer, seconds.
    pub seconds: f64,
    /// Queue of each path, in BDPs (see [`PscPath::queue_bytes`]).
    pub queue_bdp: f64,
    /// MTU of both paths.
    pub mtu: u32,
    /// Seed of the emulator and of the run order.
    pub seed: u64,
    /// Congestion control of every connection (`send -C`, both ends): PSC's stacks were
    /// Reno with SACK, so `reno`; `default` keeps the namespace's (often bbr or cubic).
    pub congestion: String,
}

impl Default for PscPlan {
    fn default() -> Self {
        PscPlan::full()
    }
}

/// Why a PSC plan cannot run.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum PscPlanError {
    /// A mode that is not one of PSC's.
    #[error("unknown PSC mode '{0}' (use default, hiperf, psc, auto)")]
    UnknownMode(String),
    /// Nothing to run.
    #[error("the plan runs nothing: it needs modes and basic or diverse connection counts")]
    Empty,
    /// A count of 0, or more connections than the server takes.
    #[error("connection count {0} is out of range (1 to {MAX_CONNECTIONS} in all)")]
    Count(u32),
    /// Repetitions or seconds of 0, or a budget too small.
    #[error("{0}")]
    Value(String),
}

/// The most connections one run opens.
pub const MAX_CONNECTIONS: u32 = 64;

impl PscPlan {
    /// PSC's whole range: 1 to 30 connections to the remote receiver, 1 to 15 to each.
    pub fn full() -> PscPlan {
        PscPlan {
            name: "full".into(),
            remote: PscPath {
                rate_bps: 40_000_000,
                rtt_us: 68_000,
            },
            local: PscPath {
                rate_bps: 10_000_000,
                rtt_us: 1_000,
            },
            budget: 2 << 20,
            network_memory: 4 << 20,
            modes: ["default", "hiperf", "psc", "auto"]
                .map(String::from)
                .to_vec(),
            basic: vec![1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30],
            diverse: vec![1, 2, 3, 4, 6, 8, 10, 12, 15],
            repetitions: 2,
            seconds: 20.0,
            queue_bdp: 1.0,
            mtu: 1500,
            seed: 1,
            congestion: "reno".into(),
        }
    }

    /// `--quick`: 1, 4, 10 and 20 connections, one repetition, 8-second transfers.
    pub fn quick() -> PscPlan {
        PscPlan {
            name: "quick".into(),
            basic: vec![1, 4, 10, 20],
            diverse: vec![1, 2, 5, 10],
            repetitions: 1,
            seconds: 8.0,
            ..PscPlan::full()
        }
    }

    /// A plan file (see the module documentation).
    pub fn from_toml(text: &str) -> Result<PscPlan, String> {
        toml::from_str(text).map_err(|e| format!("PSC plan file: {e}"))
    }

    /// Check that it can run.
    pub fn validate(&self) -> Result<(), PscPlanError> {
        if let Some(m) = self.modes.iter().find(|m| tune_of(m).is_none()) {
            return Err(PscPlanError::UnknownMode(m.clone()));
        }
        if self.modes.is_empty() || (self.basic.is_empty() && self.diverse.is_empty()) {
            return Err(PscPlanError::Empty);
        }
        if let Some(&n) = self.basic.iter().find(|&&n| n == 0 || n > MAX_CONNECTIONS) {
            return Err(PscPlanError::Count(n));
        }
        if let Some(&n) = self
            .diverse
            .iter()
            .find(|&&n| n == 0 || 2 * n > MAX_CONNECTIONS)
        {
            return Err(PscPlanError::Count(n));
        }
        if self.repetitions == 0 || self.seconds.is_nan() || self.seconds < 1.0 {
            return Err(PscPlanError::Value(
                "repetitions must be at least 1 and seconds at least 1".into(),
            ));
        }
        if self.budget < 64 * 1024 || self.network_memory < self.budget {
            return Err(PscPlanError::Value(
                "budget must be at least 64 KiB and network_memory at least the budget".into(),
            ));
        }
        Ok(())
    }

    /// Every cell: the basic experiment's counts, then the diverse one's, each in every mode.
    pub fn cells(&self) -> Vec<PscCell> {
        let mut v = Vec::new();
        for &n in &self.basic {
            for m in &self.modes {
                v.push(PscCell {
                    experiment: Experiment::Basic,
                    mode: m.clone(),
                    connections: [n, 0],
                });
            }
        }
        for &n in &self.diverse {
            for m in &self.modes {
                v.push(PscCell {
                    experiment: Experiment::Diverse,
                    mode: m.clone(),
                    connections: [n, n],
                });
            }
        }
        v
    }

    /// The `-C` value of the clients, if any (`None` for `default`).
    pub fn congestion_arg(&self) -> Option<&str> {
        (self.congestion != "default").then_some(self.congestion.as_str())
    }

    /// The path of index `i` ([`REMOTE`] or [`LOCAL`]).
    pub fn path(&self, i: usize) -> PscPath {
        if i == LOCAL {
            self.local
        } else {
            self.remote
        }
    }

    /// Expected length of one run, seconds (the transfer plus starting and collecting).
    pub fn run_seconds(&self, cell: &PscCell) -> f64 {
        self.seconds + 2.0 + 0.05 * f64::from(cell.total())
    }

    /// Expected length of the whole plan, seconds.
    pub fn expected_seconds(&self) -> f64 {
        self.cells()
            .iter()
            .map(|c| self.run_seconds(c) * f64::from(self.repetitions))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_psc_s_and_their_bdps_match_the_paper() {
        let p = PscPlan::full();
        // "a bandwidth-delay product of 340kB" and "1.25kB".
        assert_eq!(p.remote.bdp_bytes(), 340_000);
        assert_eq!(p.local.bdp_bytes(), 1_250);
        assert_eq!(p.local.queue_bytes(1.0, 1500), 32 * 1500);
        assert_eq!(p.remote.queue_bytes(1.0, 1500), 340_000);
    }

    #[test]
    fn cells_cover_both_experiments_in_every_mode() {
        let p = PscPlan::quick();
        let cells = p.cells();
        assert_eq!(cells.len(), (4 + 4) * 4);
        let d = cells
            .iter()
            .find(|c| c.experiment == Experiment::Diverse && c.connections[0] == 5)
            .unwrap();
        assert_eq!(d.total(), 10);
        assert_eq!(d.per_receiver(), 5);
        assert_eq!(d.path_of(4), REMOTE);
        assert_eq!(d.path_of(5), LOCAL);
        assert_eq!(d.id(), "diverse/default/5+5");
    }

    #[test]
    fn quick_plan_fits_in_fifteen_minutes() {
        let p = PscPlan::quick();
        assert!(p.validate().is_ok());
        assert!(
            p.expected_seconds() < 12.0 * 60.0,
            "{}",
            p.expected_seconds()
        );
        assert!(PscPlan::full().validate().is_ok());
        assert_eq!(PscPlan::full().basic.last(), Some(&30));
    }

    #[test]
    fn plan_files_override_keys_and_bad_values_are_refused() {
        let p = PscPlan::from_toml("basic = [1, 2]\ndiverse = []\nseconds = 3.0\n").unwrap();
        assert_eq!(p.basic, vec![1, 2]);
        assert_eq!(p.budget, 2 << 20);
        assert!(p.validate().is_ok());
        assert_eq!(p.congestion_arg(), Some("reno"));
        let d = PscPlan::from_toml("congestion = \"default\"").unwrap();
        assert_eq!(d.congestion_arg(), None);
        assert!(PscPlan::from_toml("bogus = 1").is_err());
        let bad = PscPlan {
            modes: vec!["turbo".into()],
            ..PscPlan::quick()
        };
        assert_eq!(
            bad.validate(),
            Err(PscPlanError::UnknownMode("turbo".into()))
        );
        let zero = PscPlan {
            basic: vec![0],
            ..PscPlan::quick()
        };
        assert_eq!(zero.validate(), Err(PscPlanError::Count(0)));
        assert_eq!(tune_of("hiperf"), Some("fixed:400k"));
        assert!(budgeted("psc") && !budgeted("default"));
    }
}
