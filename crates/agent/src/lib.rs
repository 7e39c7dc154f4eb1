//! `tcptune agent`: tune the TCP sockets of unmodified programs per destination, from the
//! path database, with an eBPF `sock_ops` program attached to a cgroup v2.
//!
//! The program (`bpf/sockops.c`, compiled by `build.rs` with clang) looks each new connection's
//! destination up in a policy map the agent fills from the path database, and when the
//! handshake RTT falls inside the entry's RTT bucket (a rerouted path is another path) it
//! sets what the policy says: a send buffer sized from the path's rate and RTT, a receive
//! buffer on passive sockets, a congestion control, pacing at the path's rate divided by the
//! destination's connections that share it (those that carry data or just opened), and a larger initial window only for full-pipe entries,
//! with pacing. A listener opened in the cgroup offers the known destinations a receive
//! window from the handshake on (`SO_RCVLOWAT` at `TCP_LISTEN_CB` raises its buffer without
//! locking it), and at `RWND_INIT` a peer without a policy is held to the 64 KiB Linux
//! offered before 6.10 ([`policy::initial_receive_window`]). At each close it reports the
//! connection through a ring buffer; the agent turns the record into a measurement for the
//! path database.
//!
//! The decisions are pure and tested here without a kernel: [`policy`] (path entry and host
//! limits to settings, and the program's per-socket rule as a reference model), [`record`]
//! (close record bytes to a measurement), [`advice`] (advise mode's IDs and once-a-day log),
//! [`stale`] (which leftover programs to detach). The kernel is touched only by [`loader`]
//! (aya), [`cgroup`] and [`caps`].

pub mod advice;
pub mod caps;
pub mod cgroup;
pub mod limits;
pub mod loader;
pub mod maps;
pub mod metrics;
pub mod policy;
pub mod record;
pub mod stale;

/// What the agent does with a known destination's connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Record every connection; set nothing.
    Observe,
    /// Compute what would be set and log it (once per destination and day); set nothing.
    Advise,
    /// Set what the policy says.
    Enforce,
}

impl Mode {
    /// The value the program reads (`MODE_*` in `bpf/sockops.c`).
    pub fn code(self) -> u32 {
        match self {
            Mode::Observe => 0,
            Mode::Advise => 1,
            Mode::Enforce => 2,
        }
    }

    /// Its name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Observe => "observe",
            Mode::Advise => "advise",
            Mode::Enforce => "enforce",
        }
    }
}
