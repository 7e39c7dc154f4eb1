//! `tcptune lab --psc`: the experiments of Semke, Mahdavi & Mathis, *Automatic TCP Buffer
//! Tuning* (SIGCOMM 1998) on the emulator, and their paper-vs-today claims.
//!
//! # The testbed and why it is arranged this way
//!
//! PSC's setting is one memory-limited **sender** whose connections go to two receivers
//! over very different paths at once: a remote one (40 Mbit/s bottleneck, 68 ms, a 340 kB
//! bandwidth-delay product) and a local one (10 Mbit/s Ethernet, about 1 ms, 1.25 kB). One
//! emulated topology reproduces it: path 0 (the remote path) reaches side B's address
//! `198.19.0.1`, an extra path (the local one) reaches `198.19.0.2`, and the emulator picks
//! a packet's path by its side-B address (`tcptune_emu::path_addr`).
//!
//! The sender must be ONE process whose send buffers all draw from one pool, PSC's kernel
//! with its `AUTO_SND_THRESH`: that is `tcptune serve --memory-budget`, whose `psc` and
//! `auto` streams of every session share the budget max-min fairly (PSC's Appendix A). So
//! the server runs in side A (`198.18.0.1`) and every connection is a client in side B,
//! `tcptune send --reverse` (the server sends, the client receives), bound with `--bind`
//! to its path's side-B address. The other arrangement (the server in side B listening on
//! both addresses, clients in side A sending to it) would make each client process a
//! sender with its own buffers, and no budget would bind them together.
//!
//! # The budget and the memory limit
//!
//! PSC's sender had 4 MB of network memory (`NMBCLUSTERS`) and `AUTO_SND_THRESH` = 2 MB
//! for auto-tuned send buffers (sections 3 and 4.1, 4.3). The plan keeps those numbers
//! unscaled, in `SO_SNDBUF` units (tcptune's budget unit; Linux itself holds twice that):
//! the remote path's BDP is the paper's, so the budget is the same 6 BDPs it was.
//! `default` (16 kB) and `hiperf` (400 kB) are fixed buffers outside the budget, as PSC's
//! were outside `AUTO_SND_THRESH`; a Linux host does not crash when they exceed 4 MB, so a
//! connection count is *sustained* when every connection completed and the send queues'
//! peak stayed within the 4 MB PSC's kernel had ([`aggregate::RunStats::sustained`]).
//!
//! # Connections
//!
//! As PSC ran them: the **basic** experiment (section 4.1, Figures 3 and 4) opens N
//! connections to the remote receiver (1 to 30); the **diverse** experiment (section 4.3,
//! Figures 7 and 8) opens N to each receiver at once (1 to 15 each, 30 in all). All
//! connections of a run are of one mode and start together. Receivers use large windows
//! (PSC's were 1 MB): `psc` and `auto` receivers take `net.core.rmem_max` (4 MiB in a
//! namespace), but tcptune's `fixed:SIZE` sets both ends, so `default` and `hiperf`
//! connections are limited by the receive window as much as by the send buffer (both give
//! the same window, 16 kB or 400 kB of payload per round trip, as PSC's senders did).
//!
//! # Congestion control
//!
//! PSC's sender and receivers ran Reno with SACK, so every connection runs `reno`
//! (`send -C reno`, both ends; the plan's `congestion` key). A namespace's default is often
//! bbr or cubic, whose windows do not follow Reno's sawtooth that PSC's `sb_net_target`
//! tracks.
//!
//! # Modules
//!
//! [`plan`] (the presets and plan files), [`record`] (one run; `ss` output parsed),
//! [`aggregate`] (throughput per path, Jain's indices, memory), [`claims`], [`figures`] and
//! [`report`] (the folder, `summary.json`'s `psc` section, `report.html`). The runner is
//! [`crate::runner::psc`].

pub mod aggregate;
pub mod claims;
pub mod figures;
pub mod plan;
pub mod record;
pub mod report;

pub use plan::{Experiment, PscCell, PscPlan};
pub use record::PscRecord;
pub use report::{build, rebuild, PscBuilt, PscSummary};
