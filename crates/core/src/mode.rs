//! The `--tune MODE` spellings and the factory that builds a tuner per stream.

use crate::tuner::{HostLimits, Tuner, TunerContext};
use crate::tuners;
use crate::tuners::pool::{PoolConfig, SharedPool};
use crate::units::{Bytes, ParseQuantityError, Rate};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A tuning technique as selected on the command line (`--tune MODE`).
///
/// Spellings: `none` (fixed 64 KiB, the untuned stack of the papers), `fixed:SIZE`
/// (`fixed:4m`), `kernel`, `manual` or `manual:RATE` (`manual:1gbit`), `psc`, `drs`,
/// `probe`, `auto`. [`fmt::Display`] gives back the canonical spelling, which is what the
/// client sends to the server.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum TuneMode {
    /// Fixed 64 KiB buffers on both ends (the untuned default of the papers).
    None,
    /// A fixed buffer on both ends, set before connecting (the papers' "user tuning").
    Fixed(Bytes),
    /// Change nothing: Linux autotuning is in charge.
    Kernel,
    /// 2 x BDP from a measured RTT and a given (or assumed 100 Mbit/s) rate, set once.
    Manual(Option<Rate>),
    /// PSC sender-side autotuning (Semke, Mahdavi & Mathis 1998).
    Psc,
    /// Dynamic Right-Sizing, receiver side (Fisk & Feng).
    Drs,
    /// Measure the path once before the transfer, then static (NLANR auto-tuned FTP).
    Probe,
    /// tcptune's own tuner.
    Auto,
}

impl TuneMode {
    /// The buffer of [`TuneMode::None`]: 64 KiB.
    pub const UNTUNED_BUFFER: Bytes = Bytes::kib(64);

    /// All modes with their default parameters, in report order.
    pub fn all() -> Vec<TuneMode> {
        vec![
            TuneMode::None,
            TuneMode::Kernel,
            TuneMode::Manual(None),
            TuneMode::Psc,
            TuneMode::Drs,
            TuneMode::Probe,
            TuneMode::Auto,
        ]
    }

    /// Whether the mode wants the path's rate in [`PathHint::rate`](crate::PathHint) (the
    /// engine always puts the control connection's RTT in `PathHint::rtt`): from the path
    /// database when it knows the path, else measured.
    ///
    /// `probe` measures with a short bandwidth probe before the transfer (NLANR's way);
    /// `auto` measures in band, during the transfer itself, on paths of 5 ms or more
    /// ([`PathHint::rate_in_band`](crate::PathHint::rate_in_band)), and sizes buffers and
    /// counts streams before the first byte when the rate is already known.
    pub fn needs_rate_probe(&self) -> bool {
        matches!(self, TuneMode::Probe | TuneMode::Auto)
    }

    /// The spelling for people: sizes and rates with units (`fixed:16MiB`, `manual:1gbit`);
    /// it parses back to the same mode.
    pub fn describe(&self) -> String {
        match self {
            TuneMode::Fixed(b) => format!("fixed:{b}"),
            other => other.to_string(),
        }
    }

    /// The technique's short name without parameters (`fixed`, `manual`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            TuneMode::None => "none",
            TuneMode::Fixed(_) => "fixed",
            TuneMode::Kernel => "kernel",
            TuneMode::Manual(_) => "manual",
            TuneMode::Psc => "psc",
            TuneMode::Drs => "drs",
            TuneMode::Probe => "probe",
            TuneMode::Auto => "auto",
        }
    }
}

/// Why a `--tune` value was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseModeError {
    /// Not one of the known names.
    #[error("unknown tuning mode '{0}' (expected none, fixed:SIZE, kernel, manual[:RATE], psc, drs, probe or auto)")]
    Unknown(String),
    /// `fixed` without a size.
    #[error("'fixed' needs a size, e.g. fixed:4m")]
    MissingSize,
    /// A size or rate that does not parse.
    #[error("in tuning mode '{text}': {source}")]
    BadParameter {
        /// The whole mode text.
        text: String,
        /// What was wrong with the parameter.
        source: ParseQuantityError,
    },
    /// A zero-sized fixed buffer or a zero rate.
    #[error("in tuning mode '{0}': the value must be greater than zero")]
    Zero(String),
    /// A parameter given to a mode that takes none.
    #[error("tuning mode '{0}' takes no parameter")]
    UnexpectedParameter(String),
}

impl FromStr for TuneMode {
    type Err = ParseModeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let (name, param) = match text.split_once(':') {
            Some((n, p)) => (n.to_ascii_lowercase(), Some(p)),
            None => (text.to_ascii_lowercase(), None),
        };
        let bad = |source| ParseModeError::BadParameter {
            text: text.to_string(),
            source,
        };
        let mode = match (name.as_str(), param) {
            ("fixed", None) => return Err(ParseModeError::MissingSize),
            ("fixed", Some(p)) => {
                let b: Bytes = p.parse().map_err(bad)?;
                if b.0 == 0 {
                    return Err(ParseModeError::Zero(text.to_string()));
                }
                TuneMode::Fixed(b)
            }
            ("manual", None) => TuneMode::Manual(None),
            ("manual", Some(p)) => {
                let r: Rate = p.parse().map_err(bad)?;
                if r.0 == 0 {
                    return Err(ParseModeError::Zero(text.to_string()));
                }
                TuneMode::Manual(Some(r))
            }
            (n, Some(_)) if ["none", "kernel", "psc", "drs", "probe", "auto"].contains(&n) => {
                return Err(ParseModeError::UnexpectedParameter(text.to_string()))
            }
            ("none", None) => TuneMode::None,
            ("kernel", None) => TuneMode::Kernel,
            ("psc", None) => TuneMode::Psc,
            ("drs", None) => TuneMode::Drs,
            ("probe", None) => TuneMode::Probe,
            ("auto", None) => TuneMode::Auto,
            _ => return Err(ParseModeError::Unknown(text.to_string())),
        };
        Ok(mode)
    }
}

impl fmt::Display for TuneMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The byte count: the lab's cell ids and saved results use this spelling, and
            // every version of the server reads it alike. `describe` is the form for people.
            TuneMode::Fixed(b) => write!(f, "fixed:{}", b.0),
            TuneMode::Manual(Some(r)) => write!(f, "manual:{}", r.compact()),
            other => f.write_str(other.name()),
        }
    }
}

impl From<TuneMode> for String {
    fn from(m: TuneMode) -> String {
        m.to_string()
    }
}

impl TryFrom<String> for TuneMode {
    type Error = ParseModeError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// Builds one tuner per stream for a transfer, holding the state the streams of one process
/// share (PSC's memory pool).
///
/// Create one factory per transfer end; call [`TunerFactory::build`] for each stream, the
/// streams a tuner asked for ([`Action::OpenStreams`](crate::Action)) included, with
/// `stream_index` counting on and `streams` the new total. Every `psc` tuner built by one
/// factory shares the factory's [`SharedPool`]; feed all of them `now` from one clock
/// (one epoch), since the pool recomputes its fair share every 500 ms of that `now`.
///
/// What each mode does before connecting (the actions of `ConnEvent::BeforeConnect`):
///
/// | mode | sender | receiver |
/// | --- | --- | --- |
/// | `none`, `fixed:S` | `SO_SNDBUF` | `SO_RCVBUF` |
/// | `kernel` | nothing | nothing |
/// | `manual[:R]` | `SO_SNDBUF` = 2 x BDP (nothing without an RTT hint) | `SO_RCVBUF` likewise |
/// | `psc` | `SO_SNDBUF` = 16 KiB, then grows | `SO_RCVBUF` = `rmem_max` |
/// | `drs` | nothing | `SO_RCVBUF` = `rmem_max` (then clamp + buffer grow) |
/// | `probe` | `SO_SNDBUF` = 1.25 x BDP (nothing without rate and RTT) | `SO_RCVBUF` likewise |
/// | `auto` | maybe `OpenStreams` (stream 0), `SO_SNDBUF` + `TCP_NOTSENT_LOWAT` for large shares | usually nothing |
#[derive(Debug)]
pub struct TunerFactory {
    mode: TuneMode,
    pool: SharedPool,
    /// Under a memory budget (`serve --memory-budget`): `auto` draws from the pool too.
    budget: bool,
    peer_limits: Option<HostLimits>,
    measure: tuners::auto::MeasureShare,
}

impl TunerFactory {
    /// A factory for `mode`, with a PSC pool of [`PoolConfig::default`].
    pub fn new(mode: TuneMode) -> TunerFactory {
        TunerFactory {
            mode,
            pool: PoolConfig::default().shared(),
            budget: false,
            peer_limits: None,
            measure: tuners::auto::MeasureShare::new(),
        }
    }

    /// Use a pool with this configuration (size = PSC's `AUTO_SND_THRESH`).
    pub fn with_pool_config(mut self, cfg: PoolConfig) -> TunerFactory {
        self.pool = cfg.shared();
        self
    }

    /// Draw from a memory budget shared with other transfers (every session of a server):
    /// `psc` tuners use `pool` as their pool and `auto` senders get their send buffers
    /// granted from it ([`tuners::budget::Budgeted`]). `pool` is this transfer's view of the
    /// budget ([`SharedPool::view`]: its clock offset and name).
    pub fn with_budget(mut self, pool: SharedPool) -> TunerFactory {
        self.pool = pool;
        self.budget = true;
        self
    }

    /// Whether this factory's streams draw from a budget shared with other transfers.
    pub fn budgeted(&self) -> bool {
        self.budget
    }

    /// The other end's buffer limits, when known (the report carries both ends'): `auto`
    /// then counts the streams it needs against the receiver's real limits instead of
    /// assuming they equal this host's.
    pub fn with_peer_limits(mut self, limits: HostLimits) -> TunerFactory {
        self.peer_limits = Some(limits);
        self
    }

    /// The mode this factory builds.
    pub fn mode(&self) -> &TuneMode {
        &self.mode
    }

    /// The memory pool shared by this factory's `psc` tuners.
    pub fn pool(&self) -> &SharedPool {
        &self.pool
    }

    /// A tuner for one stream.
    pub fn build(&self, ctx: TunerContext) -> Box<dyn Tuner> {
        match &self.mode {
            TuneMode::None => Box::new(
                tuners::fixed::FixedConfig::default()
                    .buffer(TuneMode::UNTUNED_BUFFER)
                    .build(ctx),
            ),
            TuneMode::Fixed(b) => {
                Box::new(tuners::fixed::FixedConfig::default().buffer(*b).build(ctx))
            }
            TuneMode::Kernel => Box::new(tuners::kernel::KernelConfig::default().build(ctx)),
            TuneMode::Manual(rate) => Box::new(
                tuners::manual::ManualConfig::default()
                    .rate(*rate)
                    .build(ctx),
            ),
            TuneMode::Psc => Box::new(
                tuners::psc::PscConfig::default()
                    .pool(self.pool.clone())
                    .build(ctx),
            ),
            TuneMode::Drs => Box::new(tuners::drs::DrsConfig::default().build(ctx)),
            TuneMode::Probe => Box::new(tuners::probe::ProbeConfig::default().build(ctx)),
            TuneMode::Auto => {
                let auto = Box::new(
                    tuners::auto::AutoConfig::default()
                        .peer_limits(self.peer_limits.clone())
                        .share(self.measure.clone())
                        .build(ctx.clone()),
                );
                if self.budget {
                    Box::new(tuners::budget::Budgeted::new(auto, self.pool.clone(), &ctx))
                } else {
                    auto
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_parses_and_round_trips() {
        for s in [
            "none",
            "fixed:4m",
            "kernel",
            "manual",
            "manual:1gbit",
            "psc",
            "drs",
            "probe",
            "auto",
        ] {
            let m: TuneMode = s.parse().expect(s);
            let again: TuneMode = m.to_string().parse().expect("canonical spelling parses");
            assert_eq!(m, again, "{s}");
        }
        assert_eq!("fixed:4m".parse(), Ok(TuneMode::Fixed(Bytes::mib(4))));
        assert_eq!("AUTO".parse(), Ok(TuneMode::Auto));
        assert_eq!(
            TuneMode::Fixed(Bytes::mib(16)).to_string(),
            "fixed:16777216"
        );
        assert_eq!(TuneMode::Fixed(Bytes::mib(16)).describe(), "fixed:16MiB");
        assert_eq!(
            TuneMode::Manual(Some(Rate::gbit(1))).to_string(),
            "manual:1gbit"
        );
    }

    #[test]
    fn bad_spellings_say_what_is_wrong() {
        assert_eq!(
            "fixed".parse::<TuneMode>(),
            Err(ParseModeError::MissingSize)
        );
        assert!(matches!(
            "fixed:0".parse::<TuneMode>(),
            Err(ParseModeError::Zero(_))
        ));
        assert!(matches!(
            "fixed:4x".parse::<TuneMode>(),
            Err(ParseModeError::BadParameter { .. })
        ));
        assert!(matches!(
            "psc:3".parse::<TuneMode>(),
            Err(ParseModeError::UnexpectedParameter(_))
        ));
        assert!(matches!(
            "bogus".parse::<TuneMode>(),
            Err(ParseModeError::Unknown(_))
        ));
    }

    #[test]
    fn factory_builds_every_mode_under_its_own_name() {
        use crate::tuner::Role;
        for mode in TuneMode::all()
            .into_iter()
            .chain([TuneMode::Fixed(Bytes::mib(1))])
        {
            let f = TunerFactory::new(mode.clone());
            for role in [Role::Sender, Role::Receiver] {
                let t = f.build(TunerContext::for_tests(role));
                let expected = match mode {
                    TuneMode::None => "fixed",
                    ref m => m.name(),
                };
                assert_eq!(t.name(), expected, "{mode}");
            }
        }
    }

    #[test]
    fn psc_tuners_of_one_factory_share_its_pool() {
        use crate::time::Time;
        use crate::tuner::{ConnEvent, Role};
        let f = TunerFactory::new(TuneMode::Psc);
        let mut a = f.build(TunerContext::for_tests(Role::Sender));
        let mut b = f.build(TunerContext::for_tests(Role::Sender));
        a.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        b.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(f.pool().with(|p| p.len()), 2);
        a.handle_event(Time::ZERO, ConnEvent::Closed);
        drop(b);
        assert!(f.pool().with(|p| p.is_empty()));
    }

    #[test]
    fn probe_and_auto_ask_the_engine_for_a_rate_probe() {
        let probing: Vec<String> = TuneMode::all()
            .into_iter()
            .filter(TuneMode::needs_rate_probe)
            .map(|m| m.to_string())
            .collect();
        assert_eq!(probing, ["probe", "auto"]);
    }
}
