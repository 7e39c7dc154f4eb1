//! The `--tune MODE` spellings and the factory that builds a tuner per stream.

use crate::tuner::{Tuner, TunerContext};
use crate::tuners;
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

    /// Whether the transfer engine must run a short bandwidth probe before the transfer and
    /// put the measured rate in [`PathHint::rate`](crate::PathHint) (the engine always puts the
    /// control connection's RTT in `PathHint::rtt`).
    pub fn needs_rate_probe(&self) -> bool {
        matches!(self, TuneMode::Probe)
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
            TuneMode::Fixed(b) => write!(f, "fixed:{}", b.0),
            TuneMode::Manual(Some(r)) => write!(f, "manual:{}bit", r.0),
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
/// Create one factory per transfer end; call [`TunerFactory::build`] for each stream.
#[derive(Debug)]
pub struct TunerFactory {
    mode: TuneMode,
}

impl TunerFactory {
    /// A factory for `mode`.
    pub fn new(mode: TuneMode) -> TunerFactory {
        TunerFactory { mode }
    }

    /// The mode this factory builds.
    pub fn mode(&self) -> &TuneMode {
        &self.mode
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
            // The remaining techniques land with issue 2 (one file each under tuners/).
            other => unimplemented!("tuning mode {other} is not implemented yet"),
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
}
