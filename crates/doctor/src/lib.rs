//! Host audit (`tcptune doctor`) and live connection view (`tcptune watch`).
//!
//! `doctor` is split the way the style guide asks:
//! * [`gather`]: a small I/O layer that reads sysctls, `/sys/class/net`, `/proc/net/snmp` and
//!   `/proc/net/netstat`, the qdiscs the kernel has and its release into [`HostFacts`];
//! * [`checks`]: pure functions from facts and a [`Target`] to [`Finding`]s, each with a
//!   severity, a message a non-expert understands and the exact fix;
//! * [`sizing`]: the buffer arithmetic (BDP, buffer per end, what one stream can reach,
//!   parallel streams needed);
//! * [`sysctl_file`] and [`apply`]: the fixes as a `sysctl.d` file, or applied (only on
//!   request), with the previous values kept for undo;
//! * [`path`]: the RTT of a path from TCP handshake times.
//!
//! `watch` reads every TCP socket of the namespace through `inet_diag` netlink: [`diag`] has
//! the pure message parser and the socket driver, [`watch`] turns two successive dumps into
//! rows with limitation shares and hints.

pub mod apply;
pub mod checks;
pub mod diag;
pub mod facts;
pub mod finding;
pub mod gather;
pub mod parse;
pub mod path;
pub mod procmap;
pub mod report;
pub mod sizing;
pub mod sysctl_file;
pub mod watch;

pub use facts::{Fact, HostFacts, SCHEMA_VERSION};
pub use finding::{Finding, Severity, SysctlSetting};
pub use gather::FactSource;
pub use sizing::{Sizing, Target, TargetSource};
