//! The experiments beyond the paper's matrix (issue 13): each one an optional plan section
//! that expands into cells with a role of its own.
//!
//! | section | what it adds | role |
//! | --- | --- | --- |
//! | `known_path = true` | every `auto`/`probe` cell of the matrix again with a warm path database (a first transfer records the path, the measured one reuses it) | [`CellRole::KnownPath`] |
//! | `[congestion_sweep]` | modes under reno, cubic, bbr | [`CellRole::Congestion`] |
//! | `[size_sweep]` | transfer sizes (8 MiB to 1 GiB) | [`CellRole::Size`] |
//! | `[competing]` | a second transfer starting mid-way through the first on the same path; Jain's index | [`CellRole::Competing`] |
//! | `[path_change]` | one transfer while the emulated path's delay or rate changes; the window's time series | [`CellRole::PathChange`] |
//!
//! The runner runs every one of them. A `[competing]` cell starts a second `tcptune send` of
//! the same mode on the same path `second_at` after the first and records both, with their
//! rates over the overlap and Jain's index ([`crate::scenario::competing`]). A
//! `[path_change]` cell runs one `send --samples` while a thread changes the emulated path
//! (`tcptune_emu::PathControl`) `at` after it started, puts the path back afterwards, and
//! records the first stream's time series and when the change came
//! ([`crate::scenario::series`]); the report draws it. Both are duration workloads (`send
//! -t`) that measure the path afresh.
//!
//! Modes are written `MODE` or `MODE@HOST` (`kernel@kernel_only`, `fixed:4m@user_kernel`);
//! without a host the mode runs untuned (the namespace's defaults).

use super::{CellRole, HostConfig, PlanError};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use tcptune_core::{Bytes, Rate, TuneMode};

/// A mode under a host configuration (`auto`, `kernel@kernel_only`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct ModeAt {
    /// The mode (canonical spelling).
    pub tune: TuneMode,
    /// The host configuration.
    pub host: HostConfig,
}

impl ModeAt {
    /// `tune` untuned.
    pub fn untuned(tune: TuneMode) -> ModeAt {
        ModeAt {
            tune,
            host: HostConfig::Untuned,
        }
    }
}

impl fmt::Display for ModeAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host == HostConfig::Untuned {
            write!(f, "{}", self.tune)
        } else {
            write!(f, "{}@{}", self.tune, self.host)
        }
    }
}

impl FromStr for ModeAt {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (mode, host) = match s.split_once('@') {
            Some((m, h)) => (m, h.parse()?),
            None => (s, HostConfig::Untuned),
        };
        if mode.trim().eq_ignore_ascii_case("ideal") {
            return Err(PlanError::Invalid(format!(
                "'{s}': ideal is a sweep of the main matrix; list fixed:SIZE here instead"
            )));
        }
        let tune: TuneMode = mode
            .trim()
            .parse()
            .map_err(|e| PlanError::Invalid(format!("mode '{s}': {e}")))?;
        if host == HostConfig::UserKernel && !sets_buffers(&tune) {
            return Err(PlanError::Invalid(format!(
                "'{s}': user_kernel means buffers set with setsockopt; {tune} sets none (use kernel_only)"
            )));
        }
        Ok(ModeAt { tune, host })
    }
}

/// Whether a mode sets buffers with `setsockopt` (what user/kernel tuning means).
fn sets_buffers(m: &TuneMode) -> bool {
    matches!(
        m,
        TuneMode::None | TuneMode::Fixed(_) | TuneMode::Manual(_) | TuneMode::Probe
    )
}

impl From<ModeAt> for String {
    fn from(m: ModeAt) -> String {
        m.to_string()
    }
}

impl TryFrom<String> for ModeAt {
    type Error = PlanError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// Modes under the congestion controls Linux offers today (the paper ran Reno/SACK only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CongestionSweep {
    /// Congestion controls (`reno`, `cubic`, `bbr`).
    pub controls: Vec<String>,
    /// Round-trip times, microseconds.
    pub rtts_us: Vec<u64>,
    /// Stream counts.
    pub streams: Vec<u32>,
    /// Modes.
    pub modes: Vec<ModeAt>,
}

/// Modes at several transfer sizes (the paper's 128 MB is mostly slow start at long RTTs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SizeSweep {
    /// Bytes per transfer (whole messages of the plan's message size).
    pub sizes: Vec<Bytes>,
    /// Round-trip times, microseconds.
    pub rtts_us: Vec<u64>,
    /// Stream counts.
    pub streams: Vec<u32>,
    /// Modes.
    pub modes: Vec<ModeAt>,
}

/// Two transfers of the same mode on one path, the second starting while the first runs:
/// how the bandwidth is shared (Jain's index over the overlap, per transfer and per stream).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompetingSpec {
    /// Round-trip times, microseconds.
    pub rtts_us: Vec<u64>,
    /// Streams of each transfer.
    pub streams: Vec<u32>,
    /// Modes (both transfers use the same one).
    pub modes: Vec<ModeAt>,
    /// Length of the first transfer, milliseconds (a duration workload, `send -t`).
    pub first_ms: u64,
    /// When the second transfer starts after the first, milliseconds.
    pub second_at_ms: u64,
    /// Length of the second transfer, milliseconds.
    pub second_ms: u64,
}

/// One transfer while the path changes under it: PSC's Figure 1 (the buffer following the
/// window) on a path whose delay or rate changes mid-transfer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathChangeSpec {
    /// Round-trip time before the change, microseconds.
    pub rtt_us: u64,
    /// Round-trip time after the change (`None`: unchanged).
    pub to_rtt_us: Option<u64>,
    /// Bottleneck rate after the change (`None`: unchanged).
    pub to_rate: Option<Rate>,
    /// When the path changes after the transfer started, milliseconds.
    pub at_ms: u64,
    /// Length of the transfer, milliseconds (a duration workload).
    pub duration_ms: u64,
    /// Streams.
    pub streams: u32,
    /// Modes.
    pub modes: Vec<ModeAt>,
}

/// Every extra experiment of a plan (all off by default).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Extras {
    /// Known-path rows: `auto` and `probe` cells of the matrix again with a warm database.
    #[serde(default)]
    pub known_path: bool,
    /// Congestion controls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<CongestionSweep>,
    /// Transfer sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizes: Option<SizeSweep>,
    /// Competing transfers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub competing: Option<CompetingSpec>,
    /// Paths that change mid-transfer (each with its own starting RTT).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_change: Vec<PathChangeSpec>,
}

impl Extras {
    /// Whether any extra experiment is planned.
    pub fn any(&self) -> bool {
        self.known_path
            || self.congestion.is_some()
            || self.sizes.is_some()
            || self.competing.is_some()
            || !self.path_change.is_empty()
    }

    /// Check ranges.
    pub fn validate(&self) -> Result<(), PlanError> {
        let bad = |m: String| Err(PlanError::Invalid(m));
        if let Some(c) = &self.congestion {
            if c.controls.is_empty() || c.rtts_us.is_empty() || c.streams.is_empty() {
                return bad("congestion_sweep needs controls, rtts and streams".into());
            }
            if let Some(x) = c
                .controls
                .iter()
                .find(|x| x.is_empty() || !x.chars().all(|c| c.is_ascii_alphanumeric()))
            {
                return bad(format!(
                    "congestion_sweep: '{x}' is not a congestion control name"
                ));
            }
            check_modes("congestion_sweep", &c.modes)?;
        }
        if let Some(s) = &self.sizes {
            if s.sizes.is_empty() || s.rtts_us.is_empty() || s.streams.is_empty() {
                return bad("size_sweep needs sizes, rtts and streams".into());
            }
            if let Some(b) = s.sizes.iter().find(|b| b.0 == 0 || b.0 > 64 * Bytes::GIB) {
                return bad(format!("size_sweep: size {b} is outside 1 B..64 GiB"));
            }
            check_modes("size_sweep", &s.modes)?;
        }
        if let Some(c) = &self.competing {
            if c.rtts_us.is_empty() || c.streams.is_empty() {
                return bad("competing needs rtts and streams".into());
            }
            if c.second_at_ms >= c.first_ms {
                return bad(format!(
                    "competing: the second transfer starts at {} ms, after the first ({} ms) ended",
                    c.second_at_ms, c.first_ms
                ));
            }
            if c.first_ms < 1000 || c.second_ms < 1000 {
                return bad("competing: each transfer must last at least 1 s".into());
            }
            check_modes("competing", &c.modes)?;
        }
        for (i, p) in self.path_change.iter().enumerate() {
            if self.path_change[..i].iter().any(|q| q.rtt_us == p.rtt_us) {
                return bad(format!(
                    "path_change: two changes start from RTT {} ms; give each its own",
                    p.rtt_us as f64 / 1000.0
                ));
            }
            if p.to_rtt_us.is_none() && p.to_rate.is_none() {
                return bad("path_change needs to_rtt or to_rate".into());
            }
            if p.at_ms >= p.duration_ms {
                return bad(format!(
                    "path_change: the change at {} ms comes after the transfer's {} ms",
                    p.at_ms, p.duration_ms
                ));
            }
            if p.to_rate.is_some_and(|r| r.0 < 1_000_000) {
                return bad("path_change: to_rate must be at least 1mbit".into());
            }
            if p.streams == 0 || p.streams > 64 {
                return bad("path_change: streams must be 1..=64".into());
            }
            check_modes("path_change", &p.modes)?;
        }
        Ok(())
    }
}

fn check_modes(what: &str, modes: &[ModeAt]) -> Result<(), PlanError> {
    if modes.is_empty() {
        return Err(PlanError::Invalid(format!("{what} lists no modes")));
    }
    Ok(())
}

/// Add the extra experiments' cells of `plan` through `add` (after the matrix's, which
/// `matrix` lists: the known-path rows repeat its `auto` and `probe` cells).
pub(super) fn expand(
    plan: &super::Plan,
    matrix: &[super::CellKey],
    add: &mut dyn FnMut(super::CellKey, CellRole),
) {
    use super::CellKey;
    let x = &plan.extras;
    let key = |rtt_us: u64, m: &ModeAt, streams: u32| {
        CellKey::new(rtt_us, m.host, streams, m.tune.to_string())
    };
    if x.known_path {
        for k in matrix {
            if matches!(k.mode(), Some(TuneMode::Auto | TuneMode::Probe)) {
                add(
                    CellKey {
                        path: PathKnowledge::Known,
                        ..k.clone()
                    },
                    CellRole::KnownPath,
                );
            }
        }
    }
    if let Some(c) = &x.congestion {
        for cc in &c.controls {
            // The plan's own congestion control is the matrix's cell.
            let cc = (plan.congestion.as_deref() != Some(cc.as_str())).then(|| cc.clone());
            for &rtt in &c.rtts_us {
                for &n in &c.streams {
                    for m in &c.modes {
                        add(
                            CellKey {
                                cc: cc.clone(),
                                ..key(rtt, m, n)
                            },
                            CellRole::Congestion,
                        );
                    }
                }
            }
        }
    }
    if let Some(s) = &x.sizes {
        let default = plan.transfer_bytes();
        for &size in &s.sizes {
            let bytes = plan.whole_messages(size);
            let bytes = (bytes != default).then_some(bytes);
            for &rtt in &s.rtts_us {
                for &n in &s.streams {
                    for m in &s.modes {
                        add(
                            CellKey {
                                bytes,
                                ..key(rtt, m, n)
                            },
                            CellRole::Size,
                        );
                    }
                }
            }
        }
    }
    if let Some(c) = &x.competing {
        for &rtt in &c.rtts_us {
            for &n in &c.streams {
                for m in &c.modes {
                    add(
                        CellKey {
                            scenario: Some(Scenario::Competing),
                            ..key(rtt, m, n)
                        },
                        CellRole::Competing,
                    );
                }
            }
        }
    }
    for p in &x.path_change {
        for m in &p.modes {
            add(
                CellKey {
                    scenario: Some(Scenario::PathChange),
                    ..key(p.rtt_us, m, p.streams)
                },
                CellRole::PathChange,
            );
        }
    }
}

/// The scenario of a cell that is not one transfer alone on its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// A second transfer starts while this one runs ([`CompetingSpec`]).
    Competing,
    /// The path changes mid-transfer ([`PathChangeSpec`]).
    PathChange,
}

impl Scenario {
    /// The role of the cells of this scenario.
    pub fn role(self) -> CellRole {
        match self {
            Scenario::Competing => CellRole::Competing,
            Scenario::PathChange => CellRole::PathChange,
        }
    }
}

/// What the path database knows when a transfer starts.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum PathKnowledge {
    /// Nothing: an empty database (a path the tool has never seen).
    #[default]
    New,
    /// A transfer of the same cell just recorded the path (a warm database).
    Known,
}

impl PathKnowledge {
    /// Whether this is the default ([`PathKnowledge::New`]).
    pub fn is_new(&self) -> bool {
        *self == PathKnowledge::New
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_with_and_without_a_host_parse_and_print_back() {
        let m: ModeAt = "kernel@kernel_only".parse().expect("valid");
        assert_eq!(
            (m.tune.clone(), m.host),
            (TuneMode::Kernel, HostConfig::KernelOnly)
        );
        assert_eq!(m.to_string(), "kernel@kernel_only");
        let a: ModeAt = "auto".parse().expect("valid");
        assert_eq!(a.host, HostConfig::Untuned);
        assert_eq!(a.to_string(), "auto");
        let f: ModeAt = "fixed:4m@user_kernel".parse().expect("valid");
        assert_eq!(f.to_string(), "fixed:4194304@user_kernel");
    }

    #[test]
    fn bad_modes_say_what_is_wrong() {
        let e = "ideal@user_kernel".parse::<ModeAt>().expect_err("ideal");
        assert!(e.to_string().contains("fixed:SIZE"), "{e}");
        let e = "kernel@user_kernel"
            .parse::<ModeAt>()
            .expect_err("kernel sets nothing");
        assert!(e.to_string().contains("kernel_only"), "{e}");
        let e = "warp@untuned".parse::<ModeAt>().expect_err("no such mode");
        assert!(e.to_string().contains("warp"), "{e}");
        let e = "auto@lunar".parse::<ModeAt>().expect_err("no such host");
        assert!(e.to_string().contains("lunar"), "{e}");
    }

    #[test]
    fn extras_validation_names_the_section() {
        let mut x = Extras {
            competing: Some(CompetingSpec {
                rtts_us: vec![25_000],
                streams: vec![1],
                modes: vec![ModeAt::untuned(TuneMode::Auto)],
                first_ms: 6_000,
                second_at_ms: 7_000,
                second_ms: 3_000,
            }),
            ..Extras::default()
        };
        let e = x.validate().expect_err("second after first");
        assert!(e.to_string().contains("competing"), "{e}");
        x.competing = None;
        x.path_change = vec![PathChangeSpec {
            rtt_us: 25_000,
            to_rtt_us: None,
            to_rate: None,
            at_ms: 1000,
            duration_ms: 5000,
            streams: 1,
            modes: vec![ModeAt::untuned(TuneMode::Auto)],
        }];
        let e = x.validate().expect_err("nothing changes");
        assert!(e.to_string().contains("to_rtt"), "{e}");
        assert!(!Extras::default().any());
    }
}
