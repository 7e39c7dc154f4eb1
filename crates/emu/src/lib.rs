//! tcptune's user-space WAN emulator.
//!
//! Two network namespaces (side A and side B), each with a TUN device; background threads
//! read IP packets from one device and write them to the other after an emulated path:
//! random loss, a drop-tail queue in front of a bottleneck rate, propagation delay and
//! jitter. Any unmodified program run in one namespace sees a long fat pipe to the other.
//!
//! * The path model is pure ([`stage`], [`path::Path`]): state machines fed `now` and
//!   packets, tested without any device.
//! * [`Topology`] is the driver: it creates the namespaces and TUN devices, runs the
//!   emulator threads and tears everything down when dropped.
//!
//! Addresses (inside the namespaces only): side A is [`ADDR_A`] (198.18.0.1), side B is
//! [`ADDR_B`] (198.19.0.1), from 198.18.0.0/15, the range RFC 2544 sets aside for
//! benchmarking. Every topology uses the same two addresses in its own namespaces.

pub mod capacity;
pub mod config;
pub mod packet;
pub mod path;
pub mod stage;
pub mod stats;

pub use capacity::capacity_warning;
pub use config::{ConfigError, PathConfig, QueueLimit, Side, TopologyConfig};
pub use path::Path;
pub use stats::{DirStats, Drops, EmuStats, LatenessSummary};
pub mod state;

mod error;
mod sys;
mod topology;
mod worker;

pub use error::EmuError;
pub use state::{OwnerKind, TopologyRecord};
pub use topology::{unique_name, Topology, UpOptions, ADDR_A, ADDR_B, TUN_NAME};
