//! The interface every buffer-tuning technique implements. This file only defines it; each
//! technique lives in its own file under `tuners/`.

use crate::snapshot::TcpSnapshot;
use crate::time::Time;
use crate::units::{Bytes, Rate};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Which end of the data flow a tuner runs at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The end that writes the bulk data (tunes the send buffer).
    Sender,
    /// The end that reads the bulk data (tunes the receive buffer / advertised window).
    Receiver,
}

/// The buffer limits of the host (more exactly: of the network namespace) a tuner runs on.
///
/// All values are as the sysctls hold them. Remember the kernel's rules:
/// * `setsockopt(SO_SNDBUF, v)` stores `2 * min(v, wmem_max)` and locks the buffer, turning
///   the kernel's send autotuning off for that socket (same for receive with `rmem_max`);
/// * kernel autotuning grows buffers up to `tcp_wmem[2]` / `tcp_rmem[2]` only;
/// * `SO_SNDBUFFORCE`/`SO_RCVBUFFORCE` ignore the `*mem_max` caps but need `CAP_NET_ADMIN`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostLimits {
    /// `net.core.rmem_max`: the largest value `SO_RCVBUF` accepts.
    pub rmem_max: Bytes,
    /// `net.core.wmem_max`: the largest value `SO_SNDBUF` accepts.
    pub wmem_max: Bytes,
    /// `net.ipv4.tcp_rmem` (min, default, max): receive autotuning bounds.
    pub tcp_rmem: [Bytes; 3],
    /// `net.ipv4.tcp_wmem` (min, default, max): send autotuning bounds.
    pub tcp_wmem: [Bytes; 3],
    /// `net.ipv4.tcp_moderate_rcvbuf`: receive autotuning enabled.
    pub moderate_rcvbuf: bool,
    /// Whether `SO_*BUFFORCE` may be used (the process has `CAP_NET_ADMIN`) and the
    /// configuration allows it.
    pub can_force: bool,
}

impl HostLimits {
    /// The limits of an untouched Linux 6.x namespace on this project's reference machine
    /// (`rmem_max = wmem_max = 4 MiB`, `tcp_rmem = 4096 131072 32 MiB`,
    /// `tcp_wmem = 4096 16384 4 MiB`): a fixture for tests and simulations.
    pub fn linux_defaults() -> HostLimits {
        HostLimits {
            rmem_max: Bytes::mib(4),
            wmem_max: Bytes::mib(4),
            tcp_rmem: [Bytes(4096), Bytes(131_072), Bytes::mib(32)],
            tcp_wmem: [Bytes(4096), Bytes(16_384), Bytes::mib(4)],
            moderate_rcvbuf: true,
            can_force: false,
        }
    }

    /// The largest payload a send buffer can hold on this host by any means available to
    /// the tuner: the larger of kernel autotuning's maximum and what `SO_SNDBUF` can set
    /// (unbounded here when forcing is allowed: returns `None`).
    pub fn max_sndbuf_payload(&self) -> Option<Bytes> {
        if self.can_force {
            return None;
        }
        // SO_SNDBUF(v) stores 2v of which roughly v is payload; autotuning's tcp_wmem[2]
        // counts overhead too, so roughly half of it is payload.
        Some(Bytes(self.wmem_max.0.max(self.tcp_wmem[2].0 / 2)))
    }

    /// The largest payload a receive buffer can hold on this host by any means available to
    /// the tuner (`None` when forcing is allowed). Same reasoning as
    /// [`max_sndbuf_payload`](Self::max_sndbuf_payload).
    pub fn max_rcvbuf_payload(&self) -> Option<Bytes> {
        if self.can_force {
            return None;
        }
        Some(Bytes(self.rmem_max.0.max(self.tcp_rmem[2].0 / 2)))
    }
}

/// What is known about the path before the connection carries data: measured out of band
/// (the control connection's handshake, a probe) or given by the user.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathHint {
    /// Round-trip time, if measured (e.g. the control connection's handshake time).
    pub rtt: Option<Duration>,
    /// Bottleneck rate, if given by the user or measured by a probe.
    pub rate: Option<Rate>,
    /// `rate` is only a lower bound: a probe limited by its own sockets, or what an earlier
    /// transfer delivered (the path may be faster). Tuners may then grow past what the rate
    /// implies, on evidence.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rate_is_lower_bound: bool,
    /// No rate yet, but the transfer measures it in band and hands it to every tuner with
    /// [`Tuner::handle_hint`] once the pipe is full: until then a tuner may size buffers
    /// from what the stream delivers (`auto` does).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rate_in_band: bool,
    /// `rate` is the path's own, measured with a full pipe at this RTT and fresh (a path
    /// database entry the control connection's RTT confirms), and the sender's host starts
    /// new connections to the peer with a large initial window: a sender may start at the
    /// rate (careful resume), paced, and retreats to normal behaviour on the first loss or
    /// a longer RTT.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resume: bool,
    /// The streams the user asked for (`-P`), when the transfer runs more (streams opened to
    /// measure the path or to hold its BDP): in a queue shared with flows it does not
    /// control, the transfer keeps no more in its send buffers than kernel autotuning would
    /// give this many streams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams_asked: Option<u32>,
}

/// Everything a tuner is told when it is built.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunerContext {
    /// Which end of the data flow this tuner runs at.
    pub role: Role,
    /// The host's buffer limits.
    pub limits: HostLimits,
    /// What is known about the path before connecting.
    pub hint: PathHint,
    /// Index of the stream this tuner drives within its transfer (0-based).
    pub stream_index: u32,
    /// Number of parallel streams the transfer currently runs.
    pub streams: u32,
}

impl TunerContext {
    /// A context for tests: the given role on a host with [`HostLimits::linux_defaults`],
    /// no hints, stream 0 of 1.
    pub fn for_tests(role: Role) -> TunerContext {
        TunerContext {
            role,
            limits: HostLimits::linux_defaults(),
            hint: PathHint::default(),
            stream_index: 0,
            streams: 1,
        }
    }
}

/// Something that happened to the connection, other than a new snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnEvent {
    /// The socket exists but is not connected (client: before `connect()`; server: before
    /// `listen()` on the data listener). Options that must be in place at SYN time (buffer
    /// sizes that fix the window scale) are returned now.
    BeforeConnect,
    /// The three-way handshake completed.
    Established,
    /// The application set a buffer size itself; PSC-style tuners stop tuning that buffer.
    UserSetBuffer,
    /// The connection closed; the tuner releases shared resources (pool shares).
    Closed,
}

/// A change a tuner asks its driver to make.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "action", content = "value")]
pub enum Action {
    /// `setsockopt(SO_SNDBUF, bytes)`: the value passed to the kernel, which stores twice it
    /// (capped at `wmem_max` unless forced); roughly this many bytes of payload fit.
    SetSndBuf(Bytes),
    /// `setsockopt(SO_RCVBUF, bytes)`: as [`Action::SetSndBuf`], for receiving.
    SetRcvBuf(Bytes),
    /// `setsockopt(TCP_WINDOW_CLAMP, bytes)`: bound the advertised receive window (can move
    /// both ways mid-connection; the advertised window itself never shrinks).
    SetWindowClamp(Bytes),
    /// `setsockopt(TCP_NOTSENT_LOWAT, bytes)`: limit unsent data queued in the kernel.
    SetNotsentLowat(Bytes),
    /// `setsockopt(SO_MAX_PACING_RATE)`: send at most at this rate (once set, Linux paces in
    /// TCP itself, without the fq qdisc); `None` lifts the cap.
    SetMaxPacingRate(Option<Rate>),
    /// Ask the transfer engine for `count` more parallel streams.
    OpenStreams {
        /// How many streams to add.
        count: u32,
        /// A sentence for the report ("4 MiB per-socket maximum holds 0.3 BDP").
        reason: String,
    },
}

/// A buffer-tuning technique, as a state machine. It does no I/O and never reads the clock.
///
/// # Calling order
///
/// A driver (one per socket) must call it in this order:
///
/// 1. Build it from its config with a [`TunerContext`].
/// 2. Before `connect()` (client) or `listen()` (server data listener):
///    `handle_event(now, ConnEvent::BeforeConnect)`, then drain [`poll_action`] and apply
///    every action to the unconnected socket.
/// 3. When the handshake completes: `handle_event(now, ConnEvent::Established)`, drain
///    [`poll_action`].
/// 4. While the connection is open, repeatedly: read a [`TcpSnapshot`], call
///    [`handle_snapshot`], drain [`poll_action`] and apply the actions in order. Sample again
///    after [`poll_interval`] (drivers clamp it to 10 ms..200 ms; about one RTT is typical).
/// 5. If the application sets a buffer itself: `handle_event(now, ConnEvent::UserSetBuffer)`.
///    If the transfer learns something new about the path while it runs:
///    [`handle_hint`](Tuner::handle_hint), then drain [`poll_action`].
/// 6. When the connection closes: `handle_event(now, ConnEvent::Closed)`. No calls after this.
///
/// `now` must never go backwards across calls. Actions are returned at most once; a driver
/// that fails to apply one records the failure and goes on (the next snapshot shows the
/// effective values).
///
/// [`poll_action`]: Tuner::poll_action
/// [`handle_snapshot`]: Tuner::handle_snapshot
/// [`poll_interval`]: Tuner::poll_interval
pub trait Tuner: Send {
    /// Short name of the technique (`"psc"`, `"drs"`, ...), as `--tune` spells it.
    fn name(&self) -> &'static str;

    /// A connection event happened.
    fn handle_event(&mut self, now: Time, event: ConnEvent);

    /// A new sample of the connection's state.
    fn handle_snapshot(&mut self, now: Time, snapshot: &TcpSnapshot);

    /// The next change to apply, if any.
    fn poll_action(&mut self) -> Option<Action>;

    /// How long until the tuner wants the next snapshot (`None`: it does not need any).
    fn poll_interval(&self) -> Option<Duration>;

    /// What is known about the path changed while the connection runs: the transfer
    /// measured the path's rate in band (or found the rate it had wrong), and the transfer
    /// now has `streams` streams. A tuner may settle its buffers to it (drain
    /// [`Tuner::poll_action`] afterwards). Most tuners decide once and ignore this.
    fn handle_hint(&mut self, _now: Time, _hint: &PathHint, _streams: u32) {}

    /// This connection's standing in the shared memory pool it draws from (PSC's
    /// `hiwat_fair_share`, what it wants and what it holds), if it draws from one: for the
    /// record (drivers keep it with each sample).
    fn pool_share(&self) -> Option<crate::tuners::pool::PoolShare> {
        None
    }
}

/// A tuner's request for more parallel streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRequest {
    /// Streams the tuner knew of when it asked (its context's `streams`).
    pub known_streams: u32,
    /// How many more it wants.
    pub count: u32,
    /// Its reason.
    pub reason: String,
}
