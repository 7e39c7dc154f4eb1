//! What both ends share about a phase: which tuner each stream gets, and the plumbing that
//! opens a data stream with the tuner's pre-connect options in place.

use crate::probe::ProbeTuner;
use crate::proto::Phase;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
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

    fn build(&self, ctx: TunerContext) -> Box<dyn Tuner> {
        match self {
            PhaseTuning::Probe => Box::new(ProbeTuner::new(&ctx)),
            PhaseTuning::Custom(f) => f(ctx),
            PhaseTuning::Mode(f) => f.build(ctx),
        }
    }
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
    ) -> Box<TunerDriver> {
        let ctx = TunerContext {
            role: self.role,
            limits: self.limits.clone(),
            hint: self.hint.clone(),
            stream_index: index,
            streams,
        };
        Box::new(TunerDriver::new(
            tuning.build(ctx),
            index + 1,
            streams,
            self.force,
            self.record_series,
        ))
    }

    /// The tuners' clock at `at`.
    pub(crate) fn time(&self, at: Instant) -> Time {
        Time::from_nanos(
            u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX),
        )
    }
}

/// A new socket for a data stream with the congestion control and the tuner's
/// `BeforeConnect` options applied (the client, before `connect()`).
pub(crate) fn prepared_socket(
    now: Instant,
    addr: &SocketAddr,
    driver: &mut TunerDriver,
    spec: &DriverSpec,
    congestion: Option<&str>,
) -> Result<OwnedFd, PrepareError> {
    let fd = tcptune_sys::net::tcp_socket(addr).map_err(PrepareError::Socket)?;
    if let Some(cc) = congestion {
        tcptune_sys::sockopt::set_congestion(fd.as_fd(), cc).map_err(PrepareError::Congestion)?;
    }
    driver.before_connect(spec.time(now), fd.as_fd());
    Ok(fd)
}

/// The same for a data connection the server accepted on its shared port: the options the
/// tuner would have set before `listen()` are applied at once, before the stream carries
/// data the server sends (the window scale was fixed at SYN time from the host's maximum,
/// which is what a larger buffer needs).
pub(crate) fn prepare_accepted(
    now: Instant,
    fd: BorrowedFd<'_>,
    driver: &mut TunerDriver,
    spec: &DriverSpec,
    congestion: Option<&str>,
) -> Result<(), PrepareError> {
    if let Some(cc) = congestion {
        tcptune_sys::sockopt::set_congestion(fd, cc).map_err(PrepareError::Congestion)?;
    }
    driver.accepted(spec.time(now), fd);
    Ok(())
}

/// Why a data socket could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// Creating the socket failed.
    #[error(transparent)]
    Socket(tcptune_sys::net::NetError),
    /// The congestion control could not be set.
    #[error(transparent)]
    Congestion(tcptune_sys::sockopt::SockoptError),
}
