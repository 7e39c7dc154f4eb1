//! The sans-IO core of tcptune: units, TCP snapshots, path estimates and the buffer tuners.
//!
//! Nothing in this crate makes a syscall or reads the clock: time comes in as [`Time`],
//! connection state as [`TcpSnapshot`], and decisions go out as [`Action`]s. The Linux glue
//! (`tcptune-sys`) reads `TCP_INFO` and applies the actions; simulations drive the same
//! tuners without any socket.

pub mod estimate;
pub mod linux;
pub mod mode;
pub mod sim;
pub mod snapshot;
pub mod time;
pub mod tuner;
pub mod tuners;
pub mod units;

pub use estimate::{PathEstimate, PathEstimator};
pub use mode::{ParseModeError, TuneMode, TunerFactory};
pub use snapshot::{TcpSnapshot, TcpState};
pub use time::Time;
pub use tuner::{Action, ConnEvent, HostLimits, PathHint, Role, Tuner, TunerContext};
pub use units::{format_duration, parse_duration, Bytes, ParseQuantityError, Rate};
