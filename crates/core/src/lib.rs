//! The sans-IO core of tcptune: units, TCP snapshots, path estimates and the buffer tuners.
//!
//! Nothing in this crate makes a syscall or reads the clock: time comes in as [`Time`],
//! connection state as [`TcpSnapshot`], and decisions go out as [`Action`]s. The Linux glue
//! (`tcptune-sys`) reads `TCP_INFO` and applies the actions; simulations drive the same
//! tuners without any socket.
//!
//! * [`units`], [`time`], [`snapshot`], [`tuner`], [`mode`]: the shared contracts.
//! * [`estimate`]: a [`PathEstimate`] (minimum and smoothed RTT, bottleneck rate, BDP) from
//!   samples.
//! * [`linux`]: the kernel's socket-buffer rules the tuners reason with.
//! * [`fullpipe`]: the pre-transfer bandwidth probe's decisions (how many streams, when the
//!   pipe is full).
//! * [`pathdb`]: the database of per-path measurements (lookup, merging, aging).
//! * [`stats`]: the per-stream statistics every layer shares (driver, report, lab), and a
//!   bounded time series.
//! * [`tuners`]: one file per technique (`fixed`, `kernel`, `manual`, `psc` with its shared
//!   `pool`, `drs`, `probe`, `auto`), built through [`TunerFactory`].
//! * [`sim`]: a deterministic fluid simulation of the paper's experiment that runs every
//!   tuner against a bottleneck with Linux's buffer semantics
//!   (`cargo run --release -p tcptune-core --example sim_table` prints its table).

pub mod estimate;
pub mod fullpipe;
pub mod linux;
pub mod mode;
pub mod pathdb;
pub mod sim;
pub mod snapshot;
pub mod stats;
pub mod time;
pub mod tuner;
pub mod tuners;
pub mod units;

pub use estimate::{PathEstimate, PathEstimator};
pub use mode::{ParseModeError, TuneMode, TunerFactory};
pub use snapshot::{TcpSnapshot, TcpState};
pub use stats::{Decimated, SampleRecord, StreamStats};
pub use time::Time;
pub use tuner::{
    Action, ConnEvent, HostLimits, PathHint, Role, StreamRequest, Tuner, TunerContext,
};
pub use units::{
    format_duration, human_bps, human_duration, parse_duration, parse_duration_or_seconds, Bytes,
    ParseQuantityError, Rate,
};
