//! Experiment plans: the presets (`--quick`, the full matrix), the TOML format of `--plan FILE`,
//! and their expansion into [`Cell`]s (one combination of path, host configuration, stream
//! count and tuning mode; each cell is run `repetitions` times).
//!
//! A plan file looks like this (every key is optional; missing keys take the full matrix's
//! values):
//!
//! ```toml
//! name = "my-sweep"
//! rate = "1gbit"          # bottleneck rate (decimal units)
//! mtu = 1500
//! queue_bdp = 1.0         # drop-tail queue, in bandwidth-delay products
//! rtts = ["0.5ms", "25ms", "100ms"]
//! streams = [1, 2, 4, 8]
//! repetitions = 3
//! messages = 128
//! message_size = "1m"     # binary units
//! max_time = "20s"        # per-run cap
//! seed = 1
//! congestion = "cubic"    # or "default" to keep the namespace's
//! raised_max = "128m"     # the "raised" buffer maxima; "auto" sizes them from the paths
//! careful_resume_server = false   # true: the servers run `serve --careful-resume`
//!
//! [hosts]                 # modes to run under each host configuration
//! untuned = ["none", "kernel", "auto"]
//! kernel_only = ["kernel", "drs", "auto"]
//! user_kernel = ["manual", "ideal", "fixed:4m"]
//!
//! [ideal]                 # the sweep that finds `ideal`: per-stream sizes around BDP/streams
//! below = 1               # powers of two below
//! above = 2               # powers of two above (at most 64 MiB)
//!
//! [buffer_sweep]          # the paper's Figure 5
//! rtts = ["0.5ms", "25ms"]
//! streams = [1, 2]
//! min = "8k"
//! max = "64m"
//! step = 2                # multiply by this from min to max
//! ```
//!
//! Experiments beyond the paper's matrix are optional sections too (see [`extras`]):
//!
//! ```toml
//! known_path = true       # auto/probe again with a warm path database
//!
//! [congestion_sweep]
//! controls = ["reno", "cubic", "bbr"]
//! rtts = ["25ms", "100ms"]
//! streams = [1]
//! modes = ["kernel", "auto", "fixed:8m@user_kernel"]   # MODE or MODE@HOST
//!
//! [size_sweep]
//! sizes = ["8m", "64m", "1g"]
//! rtts = ["100ms"]
//! streams = [1]
//! modes = ["kernel", "auto"]
//!
//! [competing]              # a second transfer starts while the first runs
//! rtts = ["25ms"]
//! streams = [1]
//! modes = ["kernel", "auto"]
//! first = "8s"
//! second_at = "3s"
//! second = "3s"
//!
//! [[path_change]]          # the path changes under a running transfer (one per RTT)
//! rtt = "25ms"
//! to_rtt = "100ms"         # and/or to_rate = "300mbit"
//! at = "4s"
//! duration = "10s"
//! streams = 1
//! modes = ["auto", "kernel"]
//! ```
//!
//! The TOML is read in [`file`].

pub mod extras;
mod file;

pub use extras::{
    CompetingSpec, CongestionSweep, Extras, ModeAt, PathChangeSpec, PathKnowledge, Scenario,
    SizeSweep,
};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;
use tcptune_core::{format_duration, Bytes, Rate, TuneMode};

/// The paper's three host configurations (section III.A, "Buffer Sizes").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostConfig {
    /// Case 1: nothing tuned; the namespace's kernel defaults and the host's global maxima.
    Untuned,
    /// Case 2: kernel-only tuning; raised `net.core.{r,w}mem_max` and `tcp_{r,w}mem` maxima,
    /// kernel autotuning on.
    KernelOnly,
    /// Case 3: user and kernel tuning; raised maxima plus buffers set with `setsockopt()`.
    UserKernel,
}

impl HostConfig {
    /// All three, in the paper's order.
    pub const ALL: [HostConfig; 3] = [
        HostConfig::Untuned,
        HostConfig::KernelOnly,
        HostConfig::UserKernel,
    ];

    /// The key used in files (`untuned`, `kernel_only`, `user_kernel`).
    pub fn key(self) -> &'static str {
        match self {
            HostConfig::Untuned => "untuned",
            HostConfig::KernelOnly => "kernel_only",
            HostConfig::UserKernel => "user_kernel",
        }
    }

    /// The paper's figure title for this case.
    pub fn title(self) -> &'static str {
        match self {
            HostConfig::Untuned => "No tuning",
            HostConfig::KernelOnly => "Kernel-only tuning",
            HostConfig::UserKernel => "User/kernel tuning",
        }
    }

    /// Whether this configuration raises the buffer maxima.
    pub fn raises_limits(self) -> bool {
        !matches!(self, HostConfig::Untuned)
    }
}

impl fmt::Display for HostConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

impl FromStr for HostConfig {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "untuned" | "default" | "none" => Ok(HostConfig::Untuned),
            "kernel_only" | "kernel" | "raised" => Ok(HostConfig::KernelOnly),
            "user_kernel" | "user" => Ok(HostConfig::UserKernel),
            _ => Err(PlanError::Invalid(format!(
                "unknown host configuration '{s}' (expected untuned, kernel_only or user_kernel)"
            ))),
        }
    }
}

/// A mode as a plan lists it: a tuning mode the engine runs, or `ideal` (the best fixed size
/// of a sweep, which expands into `fixed:SIZE` cells).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum PlanMode {
    /// Run this mode.
    Tune(TuneMode),
    /// Sweep fixed sizes around the BDP and keep the best.
    Ideal,
}

impl fmt::Display for PlanMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanMode::Tune(m) => write!(f, "{m}"),
            PlanMode::Ideal => f.write_str("ideal"),
        }
    }
}

impl FromStr for PlanMode {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().eq_ignore_ascii_case("ideal") {
            return Ok(PlanMode::Ideal);
        }
        s.parse::<TuneMode>()
            .map(PlanMode::Tune)
            .map_err(|e| PlanError::Invalid(format!("mode '{s}': {e} (or 'ideal')")))
    }
}

impl From<PlanMode> for String {
    fn from(m: PlanMode) -> String {
        m.to_string()
    }
}

impl TryFrom<String> for PlanMode {
    type Error = PlanError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// Why a plan could not be read or is not valid.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The TOML did not parse or had unknown keys.
    #[error("plan file: {0}")]
    Toml(toml::de::Error),
    /// A value is out of range or inconsistent.
    #[error("plan: {0}")]
    Invalid(String),
}

/// The largest per-stream size the `ideal` sweep tries (the paper's sweep ended at 64 MB).
pub const MAX_IDEAL_SIZE: Bytes = Bytes::mib(64);

impl From<toml::de::Error> for PlanError {
    fn from(e: toml::de::Error) -> Self {
        PlanError::Toml(e)
    }
}

/// The sweep of fixed per-stream buffers that finds `ideal` on each path and stream count:
/// powers of two from `below` octaves under BDP/streams to `above` octaves over it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdealSweep {
    /// Powers of two below BDP/streams.
    pub below: u32,
    /// Powers of two above BDP/streams.
    pub above: u32,
}

/// The paper's Figure 5: throughput against a fixed per-stream buffer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BufferSweep {
    /// Round-trip times, microseconds.
    pub rtts_us: Vec<u64>,
    /// Stream counts.
    pub streams: Vec<u32>,
    /// Per-stream buffer sizes (the `setsockopt` values).
    pub sizes: Vec<Bytes>,
}

/// A validated experiment plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Name (`quick`, `full`, or the plan file's).
    pub name: String,
    /// Bottleneck rate.
    pub rate: Rate,
    /// MTU of the emulated path.
    pub mtu: u32,
    /// Queue size in BDPs.
    pub queue_bdp: f64,
    /// Round-trip times of the paths, microseconds (the emulator's one-way delay is half).
    pub rtts_us: Vec<u64>,
    /// Parallel stream counts.
    pub streams: Vec<u32>,
    /// Runs per cell.
    pub repetitions: u32,
    /// Messages per transfer.
    pub messages: u64,
    /// Bytes per message.
    pub message_size: Bytes,
    /// Time cap per run, milliseconds.
    pub max_time_ms: u64,
    /// Seed for the emulator.
    pub seed: u64,
    /// Congestion control set in the namespaces (`None`: the namespace's default).
    pub congestion: Option<String>,
    /// The raised maxima of host configurations 2 and 3 (`None`: sized from the paths).
    pub raised_max: Option<Bytes>,
    /// Modes per host configuration, in report order.
    pub hosts: BTreeMap<HostConfig, Vec<PlanMode>>,
    /// The sweep that finds `ideal`.
    pub ideal: IdealSweep,
    /// Figure 5's sweep, if any.
    pub buffer_sweep: Option<BufferSweep>,
    /// The servers run `serve --careful-resume` (the plan's `careful_resume_server`): a
    /// receiving client's streams get their initial window from the server, and every
    /// connection is offered a 4 MiB receive window from its SYN-ACK on (which helps every
    /// mode that pushes, kernel autotuning's too). Off by default.
    #[serde(default)]
    pub careful_resume_server: bool,
    /// The experiments beyond the paper's matrix.
    #[serde(default)]
    pub extras: Extras,
}

/// Why a cell is in the plan (a cell can be there for several reasons).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellRole {
    /// A mode of the main matrix (Figures 2-4 and 6-10).
    Matrix,
    /// A candidate size for `ideal`.
    IdealSweep,
    /// A point of the buffer sweep (Figure 5).
    BufferSweep,
    /// A matrix cell again on a known path (warm path database).
    KnownPath,
    /// A point of the congestion-control sweep.
    Congestion,
    /// A point of the transfer-size sweep.
    Size,
    /// Two transfers competing on one path.
    Competing,
    /// A transfer while the path changes.
    PathChange,
}

/// What identifies a cell: results with equal keys are repetitions of each other.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CellKey {
    /// Round-trip time of the path, microseconds.
    pub rtt_us: u64,
    /// Host configuration.
    pub host: HostConfig,
    /// Parallel streams requested.
    pub streams: u32,
    /// Tuning mode, canonical spelling (`fixed:1048576`).
    pub tune: String,
    /// What the path database knows at the start (default: nothing, a path never seen).
    #[serde(default, skip_serializing_if = "PathKnowledge::is_new")]
    pub path: PathKnowledge,
    /// Congestion control, when not the plan's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cc: Option<String>,
    /// Bytes per transfer, when not the plan's `messages x message_size` (serialized as
    /// `transfer_bytes`: a run record flattens its key beside its own `bytes` moved).
    #[serde(
        default,
        rename = "transfer_bytes",
        skip_serializing_if = "Option::is_none"
    )]
    pub bytes: Option<u64>,
    /// A scenario other than one transfer alone on its path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<Scenario>,
}

impl CellKey {
    /// A matrix cell: one transfer of the plan's size on a path never seen.
    pub fn new(rtt_us: u64, host: HostConfig, streams: u32, tune: impl Into<String>) -> CellKey {
        CellKey {
            rtt_us,
            host,
            streams,
            tune: tune.into(),
            path: PathKnowledge::New,
            cc: None,
            bytes: None,
            scenario: None,
        }
    }

    /// A stable, readable id: `rtt25ms/user_kernel/P2/fixed:1048576`, with `/known`,
    /// `/cc=reno`, `/size=8MiB`, `/competing` or `/path_change` when they apply.
    pub fn id(&self) -> String {
        let mut id = format!(
            "rtt{}/{}/P{}/{}",
            format_duration(Duration::from_micros(self.rtt_us)),
            self.host,
            self.streams,
            self.tune
        );
        if self.path == PathKnowledge::Known {
            id.push_str("/known");
        }
        if let Some(cc) = &self.cc {
            id.push_str(&format!("/cc={cc}"));
        }
        if let Some(b) = self.bytes {
            id.push_str(&format!("/size={}", Bytes(b)));
        }
        match self.scenario {
            Some(Scenario::Competing) => id.push_str("/competing"),
            Some(Scenario::PathChange) => id.push_str("/path_change"),
            None => {}
        }
        id
    }

    /// Whether this is a plain matrix cell (path never seen, the plan's congestion control
    /// and size, alone on the path): what the paper's figures and claims read.
    pub fn is_plain(&self) -> bool {
        self.path == PathKnowledge::New
            && self.cc.is_none()
            && self.bytes.is_none()
            && self.scenario.is_none()
    }

    /// The round-trip time in milliseconds.
    pub fn rtt_ms(&self) -> f64 {
        self.rtt_us as f64 / 1000.0
    }

    /// The tuning mode, parsed back.
    pub fn mode(&self) -> Option<TuneMode> {
        self.tune.parse().ok()
    }
}

/// One planned cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// What it is.
    #[serde(flatten)]
    pub key: CellKey,
    /// Why it is there.
    pub roles: Vec<CellRole>,
}

/// A plan with its cells, as written to `plan.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExpandedPlan {
    /// Version of this file's schema.
    pub schema_version: u32,
    /// The plan.
    pub plan: Plan,
    /// Every cell, ordered by host configuration, path, streams, mode.
    pub cells: Vec<Cell>,
}

/// Version of `plan.json`.
pub const PLAN_SCHEMA_VERSION: u32 = 2;

fn ms(v: f64) -> u64 {
    (v * 1000.0).round() as u64
}

fn modes(list: &[&str]) -> Vec<PlanMode> {
    list.iter()
        .filter_map(|s| s.parse().ok())
        .collect::<Vec<_>>()
}

/// Sizes from `min` to `max` (inclusive), multiplying by `step`.
pub fn geometric_sizes(min: Bytes, max: Bytes, step: u64) -> Vec<Bytes> {
    let mut out = Vec::new();
    let step = step.max(2);
    let mut v = min.0.max(1);
    while v <= max.0 {
        out.push(Bytes(v));
        v = match v.checked_mul(step) {
            Some(n) => n,
            None => break,
        };
    }
    out
}

impl Plan {
    /// The full matrix: the paper's delays plus 200 ms, 1-8 streams, every mode under the host
    /// configurations where it makes sense, 3 repetitions, the full 8 KB..64 MB buffer sweep.
    pub fn full() -> Plan {
        let mut hosts = BTreeMap::new();
        hosts.insert(
            HostConfig::Untuned,
            modes(&["none", "kernel", "manual", "psc", "drs", "probe", "auto"]),
        );
        hosts.insert(
            HostConfig::KernelOnly,
            modes(&["kernel", "psc", "drs", "auto"]),
        );
        // manual:100mbit is Tierney's advice when the bottleneck is unknown: "assume the
        // bandwidth is 100Mbps".
        hosts.insert(
            HostConfig::UserKernel,
            modes(&["manual", "manual:100mbit", "probe", "ideal"]),
        );
        let m = |s: &str| s.parse::<ModeAt>().ok();
        let three = |list: &[&str]| list.iter().filter_map(|s| m(s)).collect::<Vec<_>>();
        Plan {
            name: "full".into(),
            rate: Rate::gbit(1),
            mtu: 1500,
            queue_bdp: 1.0,
            rtts_us: vec![ms(0.5), ms(25.0), ms(50.0), ms(100.0), ms(200.0)],
            streams: vec![1, 2, 4, 8],
            repetitions: 3,
            messages: 128,
            message_size: Bytes::mib(1),
            max_time_ms: 20_000,
            seed: 1,
            congestion: Some("cubic".into()),
            raised_max: None,
            hosts,
            ideal: IdealSweep { below: 1, above: 2 },
            careful_resume_server: false,
            buffer_sweep: Some(BufferSweep {
                rtts_us: vec![ms(0.5), ms(25.0)],
                streams: vec![1, 2],
                sizes: geometric_sizes(Bytes::kib(8), Bytes::mib(64), 2),
            }),
            extras: Extras {
                known_path: true,
                congestion: Some(CongestionSweep {
                    controls: vec!["reno".into(), "cubic".into(), "bbr".into()],
                    rtts_us: vec![ms(25.0), ms(100.0)],
                    streams: vec![1, 4],
                    modes: three(&["kernel@kernel_only", "auto", "manual@user_kernel"]),
                }),
                sizes: Some(SizeSweep {
                    sizes: vec![
                        Bytes::mib(8),
                        Bytes::mib(32),
                        Bytes::mib(128),
                        Bytes::mib(512),
                        Bytes(Bytes::GIB),
                    ],
                    rtts_us: vec![ms(25.0), ms(100.0)],
                    streams: vec![1],
                    modes: three(&["kernel", "auto", "manual@user_kernel"]),
                }),
                competing: Some(CompetingSpec {
                    rtts_us: vec![ms(25.0), ms(100.0)],
                    streams: vec![1],
                    modes: three(&["kernel", "auto", "manual@user_kernel"]),
                    first_ms: 12_000,
                    second_at_ms: 4_000,
                    second_ms: 4_000,
                }),
                path_change: vec![
                    PathChangeSpec {
                        rtt_us: ms(25.0),
                        to_rtt_us: Some(ms(100.0)),
                        to_rate: None,
                        at_ms: 4_000,
                        duration_ms: 12_000,
                        streams: 1,
                        modes: three(&["auto", "kernel", "psc"]),
                    },
                    PathChangeSpec {
                        rtt_us: ms(50.0),
                        to_rtt_us: None,
                        to_rate: Some(Rate::mbit(250)),
                        at_ms: 4_000,
                        duration_ms: 12_000,
                        streams: 1,
                        modes: three(&["auto", "kernel", "psc"]),
                    },
                ],
            },
        }
    }

    /// The `--quick` subset (the CI smoke test; about 6 minutes on 2 cores): three paths,
    /// 1 and 4 streams, one repetition, the modes the headline and the DRS-vs-kernel claims
    /// need, a coarse Figure 5, and the headline's known-path rows (none of the other extra
    /// experiments).
    pub fn quick() -> Plan {
        let mut hosts = BTreeMap::new();
        hosts.insert(
            HostConfig::Untuned,
            modes(&["none", "kernel", "drs", "auto"]),
        );
        hosts.insert(HostConfig::KernelOnly, modes(&["kernel", "drs", "auto"]));
        hosts.insert(HostConfig::UserKernel, modes(&["manual", "ideal"]));
        Plan {
            name: "quick".into(),
            rtts_us: vec![ms(0.5), ms(25.0), ms(100.0)],
            streams: vec![1, 4],
            repetitions: 1,
            max_time_ms: 6_000,
            hosts,
            ideal: IdealSweep { below: 1, above: 2 },
            buffer_sweep: Some(BufferSweep {
                rtts_us: vec![ms(0.5), ms(25.0)],
                streams: vec![1],
                sizes: geometric_sizes(Bytes::kib(16), Bytes::mib(16), 4),
            }),
            extras: Extras {
                known_path: true,
                ..Extras::default()
            },
            ..Plan::full()
        }
    }

    /// Bytes of one transfer of the matrix: `messages x message_size`.
    pub fn transfer_bytes(&self) -> u64 {
        self.messages.saturating_mul(self.message_size.0)
    }

    /// `bytes` rounded up to whole messages of the plan's size.
    pub fn whole_messages(&self, bytes: Bytes) -> u64 {
        let m = self.message_size.0.max(1);
        bytes.0.div_ceil(m).max(1) * m
    }

    /// Messages of a cell's transfer (its size when it has one, else the plan's).
    pub fn messages_of(&self, key: &CellKey) -> u64 {
        key.bytes.map_or(self.messages, |b| {
            b.div_ceil(self.message_size.0.max(1)).max(1)
        })
    }

    /// Check ranges and consistency.
    pub fn validate(&self) -> Result<(), PlanError> {
        let bad = |m: String| Err(PlanError::Invalid(m));
        if self.rate.0 < 1_000_000 {
            return bad(format!("rate {} is below 1mbit", self.rate));
        }
        if !(576..=65_535).contains(&self.mtu) {
            return bad(format!("mtu {} is outside 576..65535", self.mtu));
        }
        if !(self.queue_bdp > 0.0 && self.queue_bdp <= 100.0) {
            return bad(format!("queue_bdp {} is outside (0, 100]", self.queue_bdp));
        }
        if self.rtts_us.is_empty() {
            return bad("no rtts".into());
        }
        if let Some(r) = self.rtts_us.iter().find(|&&r| r > 1_000_000) {
            return bad(format!("rtt {} ms is above 1 s", *r as f64 / 1000.0));
        }
        if self.streams.is_empty() || self.streams.iter().any(|&s| s == 0 || s > 64) {
            return bad("streams must be 1..=64 and not empty".into());
        }
        if self.repetitions == 0 || self.repetitions > 100 {
            return bad("repetitions must be 1..=100".into());
        }
        if self.messages == 0 || self.message_size.0 == 0 {
            return bad("messages and message_size must be > 0".into());
        }
        if self.max_time_ms < 500 {
            return bad("max_time must be at least 0.5s".into());
        }
        if self.hosts.values().all(|m| m.is_empty()) && !self.extras.any() {
            return bad("no modes in [hosts] and no extra experiment".into());
        }
        for (h, ms) in &self.hosts {
            if ms.contains(&PlanMode::Ideal) && *h != HostConfig::UserKernel {
                return bad(format!(
                    "'ideal' sets buffers with setsockopt: list it under user_kernel, not {h}"
                ));
            }
        }
        if self.ideal.below > 10 || self.ideal.above > 10 {
            return bad("ideal.below and ideal.above must be at most 10".into());
        }
        if let Some(b) = &self.buffer_sweep {
            if b.sizes.is_empty() || b.rtts_us.is_empty() || b.streams.is_empty() {
                return bad("buffer_sweep needs rtts, streams and min <= max".into());
            }
        }
        self.extras.validate()?;
        Ok(())
    }

    /// Bandwidth-delay product of a path of this plan.
    pub fn bdp(&self, rtt_us: u64) -> Bytes {
        self.rate.bdp(Duration::from_micros(rtt_us))
    }

    /// The per-stream sizes the `ideal` sweep tries on a path with `streams` streams: powers
    /// of two around BDP/streams, never below 4 KiB.
    pub fn ideal_sizes(&self, rtt_us: u64, streams: u32) -> Vec<Bytes> {
        let per = (self.bdp(rtt_us).0 / u64::from(streams.max(1))).max(4096);
        // The power of two nearest to BDP/streams (rounding up from 0.75 of the next one).
        let mut p = per.next_power_of_two();
        if p > per && (p as f64) > per as f64 * 1.5 {
            p /= 2;
        }
        let lo = (p >> self.ideal.below).max(4096);
        let hi = (p << self.ideal.above).min(MAX_IDEAL_SIZE.0).max(lo);
        geometric_sizes(Bytes(lo), Bytes(hi), 2)
    }

    /// The largest per-stream buffer any cell asks `setsockopt` for.
    pub fn largest_fixed(&self) -> Bytes {
        self.expand()
            .cells
            .iter()
            .filter_map(|c| match c.key.mode() {
                Some(TuneMode::Fixed(b)) => Some(b),
                _ => None,
            })
            .max()
            .unwrap_or(Bytes::ZERO)
    }

    /// The raised maxima for host configurations 2 and 3: the plan's value, or the next power
    /// of two at or above max(128 MiB, 4 x the largest BDP, the largest fixed buffer).
    pub fn raised_limit(&self) -> Bytes {
        if let Some(b) = self.raised_max {
            return b;
        }
        let max_bdp = self
            .rtts_us
            .iter()
            .map(|&r| self.bdp(r).0)
            .max()
            .unwrap_or(0);
        let need = (128 * Bytes::MIB)
            .max(max_bdp.saturating_mul(4))
            .max(self.largest_fixed().0);
        Bytes(need.next_power_of_two())
    }

    /// Expand into cells: the matrix (with `ideal` as its sweep), then Figure 5's sweep under
    /// user/kernel tuning; duplicates merged.
    pub fn expand(&self) -> ExpandedPlan {
        let mut cells: BTreeMap<CellKey, Vec<CellRole>> = BTreeMap::new();
        fn add(cells: &mut BTreeMap<CellKey, Vec<CellRole>>, key: CellKey, role: CellRole) {
            let roles = cells.entry(key).or_default();
            if !roles.contains(&role) {
                roles.push(role);
                roles.sort();
            }
        }
        for (&host, ms) in &self.hosts {
            for &rtt_us in &self.rtts_us {
                for &streams in &self.streams {
                    for m in ms {
                        match m {
                            PlanMode::Tune(t) => add(
                                &mut cells,
                                CellKey::new(rtt_us, host, streams, t.to_string()),
                                CellRole::Matrix,
                            ),
                            PlanMode::Ideal => {
                                for size in self.ideal_sizes(rtt_us, streams) {
                                    add(
                                        &mut cells,
                                        CellKey::new(
                                            rtt_us,
                                            host,
                                            streams,
                                            TuneMode::Fixed(size).to_string(),
                                        ),
                                        CellRole::IdealSweep,
                                    )
                                }
                            }
                        }
                    }
                }
            }
        }
        if let Some(b) = &self.buffer_sweep {
            for &rtt_us in &b.rtts_us {
                for &streams in &b.streams {
                    for &size in &b.sizes {
                        add(
                            &mut cells,
                            CellKey::new(
                                rtt_us,
                                HostConfig::UserKernel,
                                streams,
                                TuneMode::Fixed(size).to_string(),
                            ),
                            CellRole::BufferSweep,
                        )
                    }
                }
            }
        }
        let matrix: Vec<CellKey> = cells
            .iter()
            .filter(|(_, r)| r.contains(&CellRole::Matrix))
            .map(|(k, _)| k.clone())
            .collect();
        extras::expand(self, &matrix, &mut |k, r| add(&mut cells, k, r));
        ExpandedPlan {
            schema_version: PLAN_SCHEMA_VERSION,
            plan: self.clone(),
            cells: cells
                .into_iter()
                .map(|(key, roles)| Cell { key, roles })
                .collect(),
        }
    }

    /// Whether the matrix asks for `ideal` anywhere.
    pub fn wants_ideal(&self) -> bool {
        self.hosts.values().any(|m| m.contains(&PlanMode::Ideal))
    }
}

impl ExpandedPlan {
    /// Total runs: cells x repetitions.
    pub fn runs(&self) -> usize {
        self.cells.len() * self.plan.repetitions as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_preset_expands_every_mode_path_and_stream_count() {
        let p = Plan::full();
        let e = p.expand();
        let matrix = e
            .cells
            .iter()
            .filter(|c| c.roles.contains(&CellRole::Matrix))
            .count();
        // 5 paths x 4 stream counts x (7 + 4 + 3 non-ideal modes).
        assert_eq!(matrix, 5 * 4 * 14);
        // Every untuned cell of every path and stream count is there.
        for &r in &p.rtts_us {
            for &s in &p.streams {
                for m in ["none", "kernel", "manual", "psc", "drs", "probe", "auto"] {
                    let key = CellKey::new(r, HostConfig::Untuned, s, m);
                    assert!(e.cells.iter().any(|c| c.key == key), "{}", key.id());
                }
            }
        }
        // Figure 5: 8 KiB .. 64 MiB is 14 powers of two, at 2 paths and 2 stream counts.
        let fig5 = e
            .cells
            .iter()
            .filter(|c| c.roles.contains(&CellRole::BufferSweep))
            .count();
        assert_eq!(fig5, 14 * 2 * 2);
        assert_eq!(e.runs(), e.cells.len() * 3);
    }

    #[test]
    fn ideal_sweep_brackets_the_per_stream_bdp() {
        let p = Plan::full();
        // 25 ms at 1 Gbit/s: BDP 3,125,000 B; one stream: nearest power of two is 4 MiB.
        let s = p.ideal_sizes(25_000, 1);
        assert_eq!(s.first(), Some(&Bytes::mib(2)));
        assert_eq!(s.last(), Some(&Bytes::mib(16)));
        assert_eq!(s.len(), 4);
        // 200 ms: 25 MB, nearest 32 MiB; the sweep stops at 64 MiB.
        assert_eq!(p.ideal_sizes(200_000, 1).last(), Some(&MAX_IDEAL_SIZE));
        // Four streams share it: ~781 KB each, nearest power of two is 1 MiB.
        let s4 = p.ideal_sizes(25_000, 4);
        assert_eq!(s4.first(), Some(&Bytes::kib(512)));
        // 0.5 ms: 62,500 B, nearest power of two 64 KiB.
        assert_eq!(p.ideal_sizes(500, 1).first(), Some(&Bytes::kib(32)));
    }

    #[test]
    fn sweep_cells_shared_by_ideal_and_figure_5_are_merged() {
        let e = Plan::full().expand();
        let key = CellKey::new(25_000, HostConfig::UserKernel, 1, "fixed:4194304");
        let c = e.cells.iter().find(|c| c.key == key).expect("cell");
        assert_eq!(c.roles, vec![CellRole::IdealSweep, CellRole::BufferSweep]);
        let mut ids: Vec<String> = e.cells.iter().map(|c| c.key.id()).collect();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n, "no duplicate cells");
    }

    #[test]
    fn extras_expand_into_cells_of_their_own_and_merge_with_the_matrix() {
        let p = Plan::full();
        let e = p.expand();
        let with = |role: CellRole| e.cells.iter().filter(move |c| c.roles.contains(&role));
        // Known path: every auto and probe cell of the matrix, again.
        let autos = with(CellRole::Matrix)
            .filter(|c| c.key.tune == "auto" || c.key.tune == "probe")
            .count();
        assert_eq!(with(CellRole::KnownPath).count(), autos);
        assert!(with(CellRole::KnownPath).all(|c| c.key.path == PathKnowledge::Known));
        // cubic is the plan's own: those points are the matrix's cells.
        let cubic = CellKey::new(25_000, HostConfig::KernelOnly, 1, "kernel");
        let c = e
            .cells
            .iter()
            .find(|c| c.key == cubic)
            .expect("matrix cell");
        assert_eq!(c.roles, vec![CellRole::Matrix, CellRole::Congestion]);
        let reno = CellKey {
            cc: Some("reno".into()),
            ..cubic.clone()
        };
        assert!(e.cells.iter().any(|c| c.key == reno));
        assert_eq!(reno.id(), "rtt25ms/kernel_only/P1/kernel/cc=reno");
        // 128 MiB is the matrix's size; 1 GiB is a cell of its own.
        let gib = CellKey {
            bytes: Some(1 << 30),
            ..CellKey::new(100_000, HostConfig::Untuned, 1, "auto")
        };
        assert!(e.cells.iter().any(|c| c.key == gib));
        assert_eq!(p.messages_of(&gib), 1024);
        assert!(with(CellRole::Size).any(|c| c.key.bytes.is_none()));
        assert!(with(CellRole::Competing).all(|c| c.key.scenario == Some(Scenario::Competing)));
        assert_eq!(with(CellRole::PathChange).count(), 2 * 3);
    }

    #[test]
    fn a_plan_file_may_start_its_servers_with_careful_resume() {
        let toml = |extra: &str| {
            format!("rtts = [\"100ms\"]\nstreams = [1]\n{extra}\n[hosts]\nuntuned = [\"auto\"]\n")
        };
        let on = Plan::from_toml(&toml("careful_resume_server = true")).expect("parses");
        assert!(on.careful_resume_server);
        let off = Plan::from_toml(&toml("")).expect("parses");
        assert!(!off.careful_resume_server, "off unless asked");
        assert!(!Plan::full().careful_resume_server);
    }

    #[test]
    fn plan_file_extras_parse_and_are_not_inherited_from_the_full_preset() {
        let p = Plan::from_toml(
            r#"
            rtts = ["25ms"]
            streams = [1]
            known_path = true
            [hosts]
            untuned = ["auto"]
            [congestion_sweep]
            controls = ["reno", "BBR"]
            rtts = ["25ms"]
            streams = [1]
            modes = ["kernel@kernel_only", "auto"]
            [[path_change]]
            rtt = "25ms"
            to_rate = "100mbit"
            at = "2s"
            duration = "6s"
            modes = ["auto"]
            "#,
        )
        .expect("valid plan");
        assert!(p.extras.known_path);
        let c = p.extras.congestion.as_ref().expect("sweep");
        assert_eq!(c.controls, vec!["reno", "bbr"]);
        assert_eq!(c.modes[0].host, HostConfig::KernelOnly);
        assert_eq!(p.extras.path_change[0].to_rate, Some(Rate::mbit(100)));
        assert!(p.extras.sizes.is_none() && p.extras.competing.is_none());
        let bare = Plan::from_toml("rtts = [\"25ms\"]").expect("valid");
        assert!(
            !bare.extras.any(),
            "the full preset's extras are not inherited"
        );
        let e = Plan::from_toml("[competing]\nrtts=[\"25ms\"]\nstreams=[1]\nmodes=[\"auto\"]\nfirst=\"2s\"\nsecond_at=\"3s\"\nsecond=\"2s\"")
            .expect_err("second after first");
        assert!(e.to_string().contains("competing"), "{e}");
    }

    #[test]
    fn quick_preset_is_small() {
        let e = Plan::quick().expand();
        assert!(e.runs() <= 100, "quick has {} runs", e.runs());
        assert!(e.cells.iter().any(|c| c.key.tune == "auto"));
    }

    #[test]
    fn plan_file_overrides_and_keeps_defaults() {
        let p = Plan::from_toml(
            r#"
            name = "mine"
            rate = "100mbit"
            rtts = ["10ms", "0.5ms"]
            streams = [1, 2]
            max_time = "5s"
            [hosts]
            untuned = ["kernel", "auto"]
            user_kernel = ["ideal", "fixed:1m"]
            "#,
        )
        .expect("valid plan");
        assert_eq!(p.name, "mine");
        assert_eq!(p.rate, Rate::mbit(100));
        assert_eq!(p.rtts_us, vec![10_000, 500]);
        assert_eq!(p.max_time_ms, 5_000);
        assert_eq!(p.repetitions, 3);
        assert!(p.buffer_sweep.is_none());
        let e = p.expand();
        assert!(e.cells.iter().any(|c| c.key.tune == "fixed:1048576"));
        assert!(e.cells.iter().all(|c| c.key.tune != "none"));
    }

    #[test]
    fn plan_file_errors_name_the_problem() {
        let e = Plan::from_toml("rtts = [\"25\"]").expect_err("no unit");
        assert!(e.to_string().contains("rtt '25'"), "{e}");
        let e = Plan::from_toml("colour = 3").expect_err("unknown key");
        assert!(e.to_string().contains("colour"), "{e}");
        let e = Plan::from_toml("[hosts]\nuntuned = [\"ideal\"]").expect_err("ideal placement");
        assert!(e.to_string().contains("user_kernel"), "{e}");
        let e = Plan::from_toml("[hosts]\nuntuned = [\"warp\"]").expect_err("bad mode");
        assert!(e.to_string().contains("warp"), "{e}");
        let e = Plan::from_toml("streams = [0]").expect_err("zero streams");
        assert!(e.to_string().contains("streams"), "{e}");
    }

    #[test]
    fn the_benchmark_plan_in_the_repo_parses() {
        let p = Plan::from_toml(include_str!("../../../../bench/lab_auto.toml")).expect("plan");
        assert_eq!(p.repetitions, 3);
        assert!(p.hosts.values().flatten().any(|m| m.to_string() == "auto"));
        assert!(p.buffer_sweep.is_none());
    }

    #[test]
    fn raised_limit_covers_the_largest_bdp_and_buffer() {
        let p = Plan::full();
        // 64 MiB fixed buffers in Figure 5, 25 MB BDP at 200 ms: 128 MiB.
        assert_eq!(p.raised_limit(), Bytes::mib(128));
        let mut q = p.clone();
        q.raised_max = Some(Bytes::mib(16));
        assert_eq!(q.raised_limit(), Bytes::mib(16));
    }

    #[test]
    fn cell_ids_are_readable() {
        let k = CellKey::new(500, HostConfig::KernelOnly, 4, "drs");
        assert_eq!(k.id(), "rtt500us/kernel_only/P4/drs");
    }
}
