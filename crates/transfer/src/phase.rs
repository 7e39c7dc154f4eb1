//! What both ends share about a phase: which tuner each stream gets, and the plumbing that
//! opens a data stream with the tuner's pre-connect options in place.

use crate::probe::ProbeTuner;
use crate::proto::Phase;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;
use tcptune_core::{HostLimits, PathHint, Role, Time, TuneMode, Tuner, TunerContext, TunerFactory};
use tcptune_sys::driver::TunerDriver;

/// Which tuners the streams of a phase get.
pub(crate) enum PhaseTuning {
    /// The transfer's mode.
    Mode(TunerFactory),
    /// The bandwidth probe's fixed setup.
    Probe,
    /// A tuner supplied by the library's user.
    Custom(CustomBuild),
}

pub(crate) type CustomBuild = std::sync::Arc<dyn Fn(TunerContext) -> Box<dyn Tuner> + Send + Sync>;

impl PhaseTuning {
    pub(crate) fn for_phase(phase: Phase, mode: &TuneMode) -> PhaseTuning {
        match phase {
            Phase::Probe { .. } => PhaseTuning::Probe,
            Phase::Main => PhaseTuning::Mode(TunerFactory::new(mode.clone())),
        }
    }

    fn build(&self, ctx: TunerContext) -> Result<Box<dyn Tuner>, String> {
        match self {
            PhaseTuning::Probe => Ok(Box::new(ProbeTuner::new(&ctx))),
            PhaseTuning::Custom(f) => Ok(f(ctx)),
            PhaseTuning::Mode(f) => {
                // A tuning mode the core does not implement yet panics in build(); turn that
                // into an error for this session instead of taking the process down.
                let mode = f.mode().clone();
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.build(ctx)))
                    .map_err(|_| format!("tuning mode '{mode}' is not available in this build"))
            }
        }
    }
}

/// Whether this build can run `mode` (the core's factory builds a tuner for it).
pub(crate) fn mode_available(mode: &TuneMode) -> Result<(), String> {
    let probe = PhaseTuning::Mode(TunerFactory::new(mode.clone()));
    probe
        .build(TunerContext::for_tests(Role::Sender))
        .map(|_| ())
}

/// Everything needed to build the driver of one stream.
#[derive(Debug, Clone)]
pub(crate) struct DriverSpec {
    pub(crate) role: Role,
    pub(crate) limits: HostLimits,
    pub(crate) hint: PathHint,
    pub(crate) force: bool,
    pub(crate) record_series: bool,
    pub(crate) epoch: Instant,
}

impl DriverSpec {
    /// The driver of stream `index` (0-based) when the transfer has `streams` streams.
    pub(crate) fn driver(
        &self,
        tuning: &PhaseTuning,
        index: u32,
        streams: u32,
    ) -> Result<Box<TunerDriver>, String> {
        let ctx = TunerContext {
            role: self.role,
            limits: self.limits.clone(),
            hint: self.hint.clone(),
            stream_index: index,
            streams,
        };
        let tuner = tuning.build(ctx)?;
        Ok(Box::new(TunerDriver::new(
            tuner,
            index + 1,
            streams,
            self.force,
            self.record_series,
        )))
    }

    pub(crate) fn now(&self) -> Time {
        Time::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

/// A new socket for a data stream with the congestion control and the tuner's
/// `BeforeConnect` options applied.
pub(crate) fn prepared_socket(
    addr: &SocketAddr,
    driver: &mut TunerDriver,
    spec: &DriverSpec,
    congestion: Option<&str>,
) -> Result<OwnedFd, String> {
    let fd = tcptune_sys::net::tcp_socket(addr).map_err(|e| e.to_string())?;
    if let Some(cc) = congestion {
        tcptune_sys::sockopt::set_congestion(fd.as_fd(), cc).map_err(|e| e.to_string())?;
    }
    driver.before_connect(spec.now(), fd.as_fd());
    Ok(fd)
}
