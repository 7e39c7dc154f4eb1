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
//! * [`mode`]: as root it names its namespaces (`ip netns`) and uses TUN devices; anyone
//!   else gets the rootless mode, where the namespaces live in a user namespace of the
//!   topology's own and veth pairs with packet sockets stand in for the TUN devices (what
//!   that mode cannot do: [`Mode::summary`]). [`Namespace`] is a bare rootless namespace.
//!
//! * Programs run around the emulator are supervised by [`tcptune_sys::process`] (children
//!   that die with their parent, SIGTERM-grace-SIGKILL, stop signals, a daemon with a typed
//!   readiness message): `tcptune emu`, the lab and the tests share it.
//!
//! * [`state`] keeps a record per topology under `/run/tcptune/` (a directory of the user's
//!   own in rootless mode: [`state::state_dir`]) (owner pid and start time,
//!   live counters), so that `tcptune emu status` sees every topology and a crashed owner's
//!   leftovers are removed by the next `up` — never those of a live owner.
//! * [`host`] changes the host's global sysctls (net.core.rmem_max, ...) through a journal
//!   written before each change, so that the next program puts back what a crashed owner
//!   raised.
//!
//! Addresses (inside the namespaces only): side A is [`ADDR_A`] (198.18.0.1), side B is
//! [`ADDR_B`] (198.19.0.1), from 198.18.0.0/15, the range RFC 2544 sets aside for
//! benchmarking. Every topology uses the same two addresses in its own namespaces
//! (`tt-NAME-a`, `tt-NAME-b`), each with a TUN device `tt0` and point-to-point routes.
//!
//! A topology may have more than one path ([`TopologyConfig::extra_path`]): side B then
//! also has the addresses [`path_addr`]`(1)` (198.19.0.2), `path_addr(2)`, ..., and each
//! packet crosses the path its side-B address selects ([`path_index`]), with that path's
//! own queue, rate, delay, loss and counters ([`EmuStats::extra`]). One sender in A can
//! so reach several receivers over different paths at once. [`Topology::path_control`]
//! changes a path while it runs.
//!
//! ```no_run
//! use std::time::Duration;
//! use tcptune_core::Rate;
//! use tcptune_emu::{unique_name, PathConfig, Side, Topology, TopologyConfig};
//!
//! let path = PathConfig {
//!     delay: Duration::from_millis(25),
//!     rate: Some(Rate::gbit(1)),
//!     ..PathConfig::default()
//! };
//! let cfg = TopologyConfig::new(unique_name("demo"), path)
//!     .sysctl("net.ipv4.tcp_wmem", "4096 16384 268435456");
//! let topo = Topology::up(&cfg)?;
//! let status = topo.command(Side::A, "ping").args(["-c", "3", "198.19.0.1"]).status();
//! let stats = topo.down()?;
//! println!("{} packets A->B, p99 lateness {} us", stats.a_to_b.packets_out, stats.a_to_b.lateness.p99_us);
//! # Ok::<(), tcptune_emu::EmuError>(())
//! ```

mod addr;
pub mod capacity;
pub mod config;
pub mod daemon;
pub mod host;
pub mod mode;
pub mod packet;
pub mod path;
pub mod paths;
pub mod stage;
pub mod state;
mod statedir;
pub mod stats;

mod error;
mod namespace;
mod ns;
mod nsexec;
mod rootless;
mod sys;
mod topology;
mod worker;

pub use capacity::capacity_warning;
pub use config::{ConfigError, PathConfig, QueueLimit, Side, TopologyConfig, MAX_EXTRA_PATHS};
pub use error::{EmuError, HelperError};
pub use mode::{Mode, ModeChoice};
pub use namespace::Namespace;
pub use ns::NsId;
pub use path::Path;
pub use paths::{path_addr, path_index, Paths};
pub use state::{OwnerKind, RootlessRecord, TopologyRecord};
pub use stats::{DirStats, Drops, EmuStats, LatenessSummary, PathStats};
pub use topology::{unique_name, PathControl, Topology, UpOptions, ADDR_A, ADDR_B, TUN_NAME};
