//! Enable's advice, without I/O: what an application should set on its sockets (and which
//! system limits it needs raised) to fill a path whose RTT and rate a server knows.
//!
//! `tcptune serve` answers `tcptune advise` with the [`PathFacts`] of the path between them
//! (from its path database, or measured on the spot) and the [`Advice`] it derives from
//! them with [`advise`]: the same [`AutoPlan`] that `--tune auto` plans a transfer with, so
//! that an application following the advice sizes its buffers as tcptune's own transfers
//! do. The client derives the advice again from the facts it was told (a server's numbers
//! are bounded first, see [`PathFacts::bounded`]) and turns it into the exact
//! `setsockopt` calls ([`Advice::sockopts`]) and sysctl changes ([`Advice::sysctls`]) for
//! each end.
//!
//! # What the numbers mean
//!
//! The advice is for an application on the client's host that moves data in
//! [`Advice::direction`] (seen from the client: `send` means the client's host sends) with
//! a peer on the server's host, or on a host with the same limits.
//!
//! * `sndbuf_bytes`: the `SO_SNDBUF` value for the sending end (the kernel doubles it for
//!   its bookkeeping, as it does with every `SO_SNDBUF`): it holds 1.75 x the stream's share
//!   of the bandwidth-delay product plus the unsent reserve, within the sending host's
//!   `net.core.wmem_max`.
//! * `rcvbuf_bytes`: the `SO_RCVBUF` value for the receiving end, set before `connect()` or
//!   `listen()` so that the window scale can reach it: 1.75 x the stream's share, within
//!   the receiving host's `net.core.rmem_max`.
//! * `streams`: parallel streams when one socket cannot hold 1.25 x the BDP within those
//!   caps (the reason says which cap); `unbounded` gives the values and stream count with
//!   the caps raised, and [`Advice::sysctls`] the changes that raise them.
//! * `notsent_lowat_bytes`: the sender's `TCP_NOTSENT_LOWAT` (optional): unsent data kept in
//!   the kernel, about 6 ms at the stream's rate.

use serde::{Deserialize, Serialize};
use std::time::Duration;
use tcptune_core::pathdb::Direction;
use tcptune_core::tuners::auto::{AutoConfig, AutoPlan, RecvPlan, SendPlan};
use tcptune_core::{Bytes, HostLimits, PathHint, Rate, Role, TunerContext};

/// Version of the advice in the protocol and in `advise --json`.
pub const ADVICE_SCHEMA_VERSION: u32 = 1;
/// The largest buffer Linux accepts (`int`).
const INT_MAX: u64 = i32::MAX as u64;
/// The longest RTT an advice is given for.
pub const MAX_RTT: Duration = Duration::from_secs(60);
/// The fastest rate an advice is given for (10 Tbit/s).
pub const MAX_RATE: Rate = Rate(10_000_000_000_000);
/// Most streams an advice asks for.
pub const MAX_STREAMS: u32 = 256;

/// Where the numbers of the path came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FactsSource {
    /// The server's path database (a fresh entry).
    PathDb,
    /// A measurement the server made to answer (a few round trips of data).
    Measured,
}

impl FactsSource {
    /// The name shown and written.
    pub fn as_str(self) -> &'static str {
        match self {
            FactsSource::PathDb => "path_db",
            FactsSource::Measured => "measured",
        }
    }
}

/// What the server knows of the path between it and the client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathFacts {
    /// Smallest RTT seen, microseconds.
    pub rtt_us: u64,
    /// The path's rate, bit/s.
    pub rate_bps: u64,
    /// The rate was measured with a full pipe (else it is a lower bound: the path may be
    /// faster).
    pub full_pipe: bool,
    /// When the rate was measured (or last confirmed), seconds since the Unix epoch.
    pub measured_at_unix_s: f64,
    /// Measurements merged into it.
    pub samples: u32,
    /// Where it came from.
    pub source: FactsSource,
    /// For a measurement made to answer: how long the server measured, seconds.
    pub measure_seconds: Option<f64>,
    /// For a measurement made to answer: with how many streams.
    pub measure_streams: Option<u32>,
    /// For a measurement made to answer: rounds of one RTT it took.
    pub measure_rounds: Option<u32>,
    /// Why the server did not measure though it was asked to (a measurement of this
    /// address was made recently), if so.
    pub note: Option<String>,
}

impl PathFacts {
    /// The RTT.
    pub fn rtt(&self) -> Duration {
        Duration::from_micros(self.rtt_us)
    }

    /// The facts within the bounds an advice is given for (what a server sends is not
    /// trusted blindly): RTT 1 µs to 60 s, rate 1 bit/s to 10 Tbit/s, a finite time.
    pub fn bounded(mut self) -> PathFacts {
        self.rtt_us = self.rtt_us.clamp(1, MAX_RTT.as_micros() as u64);
        self.rate_bps = self.rate_bps.clamp(1, MAX_RATE.0);
        if !self.measured_at_unix_s.is_finite() || self.measured_at_unix_s < 0.0 {
            self.measured_at_unix_s = 0.0;
        }
        self.samples = self.samples.max(1);
        self.measure_seconds = self.measure_seconds.filter(|s| s.is_finite() && *s >= 0.0);
        self.note = self
            .note
            .take()
            .map(|n| crate::session::guard::escape(&n, 300));
        self
    }
}

/// The socket settings that fill the path, with its bandwidth-delay product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sizing {
    /// `SO_SNDBUF` value for the sending end, bytes.
    pub sndbuf_bytes: u64,
    /// `SO_RCVBUF` value for the receiving end, bytes.
    pub rcvbuf_bytes: u64,
    /// `TCP_NOTSENT_LOWAT` for the sending end, bytes.
    pub notsent_lowat_bytes: u64,
    /// Parallel streams.
    pub streams: u32,
}

/// What to set on the path between the client and the server (see the module
/// documentation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    /// Which way the data flows, seen from the client.
    pub direction: Direction,
    /// What the server knows of the path.
    pub path: PathFacts,
    /// Bandwidth-delay product, bytes.
    pub bdp_bytes: u64,
    /// The settings within both hosts' current limits.
    pub sizing: Sizing,
    /// Why more than one stream, if so.
    pub streams_reason: Option<String>,
    /// The settings with the `SO_*BUF` caps out of the way (what [`Advice::sysctls`]
    /// raises them for).
    pub unbounded: Sizing,
    /// The client's host limits the advice was sized with.
    pub client_limits: HostLimits,
    /// The server's host limits.
    pub server_limits: HostLimits,
}

fn sizing(plan: &AutoPlan) -> Sizing {
    let sndbuf = match plan.send {
        SendPlan::Explicit(v) | SendPlan::Measuring(v) => v.0,
        SendPlan::Kernel => 0,
    };
    let rcvbuf = match plan.recv {
        RecvPlan::Sized { max_buffer, .. } | RecvPlan::Fixed(max_buffer) => max_buffer.0,
        RecvPlan::Kernel | RecvPlan::Measuring => 0,
    };
    Sizing {
        sndbuf_bytes: sndbuf.min(INT_MAX),
        rcvbuf_bytes: rcvbuf.min(INT_MAX),
        notsent_lowat_bytes: plan.lowat.0.min(INT_MAX),
        streams: plan.streams_total.max(1),
    }
}

/// The advice for an application on the client's host moving data in `direction` over a
/// path with `facts`, the client's host having `client` limits and the server's `server`,
/// opening at most `max_streams` streams: `--tune auto`'s plan ([`AutoPlan::compute`]) for
/// that path.
pub fn advise(
    direction: Direction,
    facts: PathFacts,
    client: &HostLimits,
    server: &HostLimits,
    max_streams: u32,
) -> Advice {
    let facts = facts.bounded();
    let max_streams = max_streams.clamp(1, MAX_STREAMS);
    let role = match direction {
        Direction::Send => Role::Sender,
        Direction::Receive => Role::Receiver,
    };
    let plan_with = |own: &HostLimits, peer: &HostLimits| {
        let cfg = AutoConfig::default()
            .peer_limits(Some(peer.clone()))
            .max_streams(max_streams);
        AutoPlan::compute(
            &cfg,
            &TunerContext {
                role,
                limits: own.clone(),
                hint: PathHint {
                    rtt: Some(facts.rtt()),
                    rate: Some(Rate(facts.rate_bps)),
                    rate_is_lower_bound: !facts.full_pipe,
                    ..PathHint::default()
                },
                stream_index: 0,
                streams: 1,
            },
        )
    };
    let plan = plan_with(client, server);
    let raised = |l: &HostLimits| HostLimits {
        can_force: true,
        ..l.clone()
    };
    let unbounded = plan_with(&raised(client), &raised(server));
    Advice {
        direction,
        bdp_bytes: plan.bdp.map_or(0, |b| b.0),
        sizing: sizing(&plan),
        streams_reason: plan.reason.clone(),
        unbounded: sizing(&unbounded),
        client_limits: client.clone(),
        server_limits: server.clone(),
        path: facts,
    }
}

/// Which host a setting is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Host {
    /// The client's host (where `tcptune advise` ran).
    Local,
    /// The server's host (the application's peer).
    Server,
}

/// One `setsockopt` call an end should make.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Sockopt {
    /// Which end.
    pub host: Host,
    /// `SOL_SOCKET` or `IPPROTO_TCP`.
    pub level: &'static str,
    /// `SO_SNDBUF`, `SO_RCVBUF`, `TCP_NOTSENT_LOWAT`.
    pub option: &'static str,
    /// The value, bytes.
    pub value_bytes: u64,
    /// Whether the advice works without it (`TCP_NOTSENT_LOWAT` only saves memory).
    pub optional: bool,
    /// When to call it.
    pub when: &'static str,
    /// The call in C.
    pub c: String,
}

/// One system setting an end needs raised.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Sysctl {
    /// Which host.
    pub host: Host,
    /// The setting, `net.core.wmem_max`.
    pub key: &'static str,
    /// Its value now, bytes.
    pub current_bytes: u64,
    /// The value the advice needs, bytes.
    pub value_bytes: u64,
    /// The command that sets it (until reboot; put `key = value` in
    /// `/etc/sysctl.d/90-tcptune.conf` to keep it).
    pub command: String,
    /// What it is for.
    pub why: String,
}

impl Advice {
    /// One buffer size that serves either end: the larger of the two values (setting both
    /// options to it is harmless, a buffer only costs memory for the data it holds).
    pub fn buffer_bytes(&self) -> u64 {
        self.sizing.sndbuf_bytes.max(self.sizing.rcvbuf_bytes)
    }

    fn sending_host(&self) -> Host {
        match self.direction {
            Direction::Send => Host::Local,
            Direction::Receive => Host::Server,
        }
    }

    fn receiving_host(&self) -> Host {
        match self.direction {
            Direction::Send => Host::Server,
            Direction::Receive => Host::Local,
        }
    }

    fn limits_of(&self, h: Host) -> &HostLimits {
        match h {
            Host::Local => &self.client_limits,
            Host::Server => &self.server_limits,
        }
    }

    /// The `setsockopt` calls of every stream, the local end's first.
    pub fn sockopts(&self) -> Vec<Sockopt> {
        let s = &self.sizing;
        let call = |host, level, option, value: u64, optional, when| Sockopt {
            host,
            level,
            option,
            value_bytes: value,
            optional,
            when,
            c: format!("int v = {value}; setsockopt(fd, {level}, {option}, &v, sizeof v);"),
        };
        let send = [
            call(
                self.sending_host(),
                "SOL_SOCKET",
                "SO_SNDBUF",
                s.sndbuf_bytes,
                false,
                "before connect() or listen()",
            ),
            call(
                self.sending_host(),
                "IPPROTO_TCP",
                "TCP_NOTSENT_LOWAT",
                s.notsent_lowat_bytes,
                true,
                "any time",
            ),
        ];
        let recv = call(
            self.receiving_host(),
            "SOL_SOCKET",
            "SO_RCVBUF",
            s.rcvbuf_bytes,
            false,
            "before connect() or listen() (the window scale is chosen then)",
        );
        let mut out: Vec<Sockopt> = send.into_iter().chain([recv]).collect();
        out.sort_by_key(|c| c.host != Host::Local);
        out
    }

    /// The sysctl changes that let each end set the unbounded values (`net.core.wmem_max`
    /// at the sender, `net.core.rmem_max` at the receiver), where the current value is
    /// lower and the host cannot force its buffers. Empty when nothing needs raising.
    pub fn sysctls(&self) -> Vec<Sysctl> {
        let mut out = Vec::new();
        let mut need = |host: Host, key: &'static str, current: Bytes, want: u64, what: &str| {
            let l = self.limits_of(host);
            if l.can_force || want <= current.0 {
                return;
            }
            out.push(Sysctl {
                host,
                key,
                current_bytes: current.0,
                value_bytes: want,
                command: format!("sysctl -w {key}={want}"),
                why: format!(
                    "{what} of {} needs {key} of at least {} (now {}): then {} stream(s) fill the path instead of {}",
                    Bytes(want),
                    Bytes(want),
                    current,
                    self.unbounded.streams,
                    self.sizing.streams
                ),
            });
        };
        let (tx, rx) = (self.sending_host(), self.receiving_host());
        need(
            tx,
            "net.core.wmem_max",
            self.limits_of(tx).wmem_max,
            self.unbounded.sndbuf_bytes,
            "SO_SNDBUF",
        );
        need(
            rx,
            "net.core.rmem_max",
            self.limits_of(rx).rmem_max,
            self.unbounded.rcvbuf_bytes,
            "SO_RCVBUF",
        );
        out.sort_by_key(|c| c.host != Host::Local);
        out
    }
}

/// A host's limits as a peer reported them, bounded: every size within 4 KiB..2 GiB - 1
/// (as Linux allows) and the autotuning triples ordered, so that no arithmetic on them can
/// overflow or divide by zero.
pub fn bounded_limits(mut l: HostLimits) -> HostLimits {
    let b = |v: Bytes| Bytes(v.0.clamp(4096, INT_MAX));
    l.rmem_max = b(l.rmem_max);
    l.wmem_max = b(l.wmem_max);
    for t in [&mut l.tcp_rmem, &mut l.tcp_wmem] {
        for v in t.iter_mut() {
            *v = b(*v);
        }
        t[1] = t[1].max(t[0]);
        t[2] = t[2].max(t[1]);
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(rtt_ms: u64, mbit: u64, full_pipe: bool) -> PathFacts {
        PathFacts {
            rtt_us: rtt_ms * 1000,
            rate_bps: Rate::mbit(mbit).0,
            full_pipe,
            measured_at_unix_s: 1.7e9,
            samples: 1,
            source: FactsSource::Measured,
            measure_seconds: Some(1.0),
            measure_streams: Some(4),
            measure_rounds: Some(9),
            note: None,
        }
    }

    #[test]
    fn the_advice_is_the_auto_plan_of_the_path_and_fits_in_one_stream_when_it_can() {
        let l = HostLimits::linux_defaults();
        let a = advise(Direction::Send, facts(50, 200, true), &l, &l, 16);
        // 200 Mbit/s x 50 ms = 1.25 MB.
        assert_eq!(a.bdp_bytes, 1_250_000);
        assert_eq!(a.sizing.streams, 1, "{a:?}");
        assert!(a.streams_reason.is_none());
        // About 1.75 x BDP of window, well under the 4 MiB caps.
        let window = a.sizing.rcvbuf_bytes;
        assert!((2_000_000..2_400_000).contains(&window), "{window}");
        assert!(a.sizing.sndbuf_bytes >= a.bdp_bytes, "{a:?}");
        assert_eq!(a.sizing, a.unbounded, "nothing is capped");
        assert!(a.sysctls().is_empty());
        assert_eq!(a.buffer_bytes(), a.sizing.sndbuf_bytes.max(window));
        let calls = a.sockopts();
        assert_eq!(
            calls.iter().map(|c| (c.host, c.option)).collect::<Vec<_>>(),
            [
                (Host::Local, "SO_SNDBUF"),
                (Host::Local, "TCP_NOTSENT_LOWAT"),
                (Host::Server, "SO_RCVBUF")
            ]
        );
        assert_eq!(
            calls[0].c,
            format!(
                "int v = {}; setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);",
                a.sizing.sndbuf_bytes
            )
        );
    }

    #[test]
    fn a_path_beyond_one_socket_asks_for_streams_and_says_which_sysctl_spares_them() {
        let l = HostLimits::linux_defaults();
        // 1 Gbit/s x 100 ms = 12.5 MB: more than a 4 MiB wmem_max holds.
        let a = advise(Direction::Receive, facts(100, 1000, true), &l, &l, 16);
        assert!(a.sizing.streams > 1, "{a:?}");
        assert!(a
            .streams_reason
            .as_deref()
            .is_some_and(|r| r.contains("streams in all")));
        assert_eq!(a.unbounded.streams, 1);
        assert!(a.sizing.sndbuf_bytes <= l.wmem_max.0);
        assert!(a.sizing.rcvbuf_bytes <= l.rmem_max.0);
        let s = a.sysctls();
        // Receiving here: rmem_max locally, wmem_max at the server.
        assert_eq!(
            s.iter().map(|c| (c.host, c.key)).collect::<Vec<_>>(),
            [
                (Host::Local, "net.core.rmem_max"),
                (Host::Server, "net.core.wmem_max")
            ]
        );
        assert_eq!(
            s[0].command,
            format!("sysctl -w net.core.rmem_max={}", a.unbounded.rcvbuf_bytes)
        );
        assert!(s[0].value_bytes > s[0].current_bytes);
        assert_eq!(a.sockopts()[0].option, "SO_RCVBUF");
    }

    #[test]
    fn a_lower_bound_and_the_stream_cap_are_honoured() {
        let l = HostLimits::linux_defaults();
        let a = advise(Direction::Send, facts(200, 10_000, false), &l, &l, 3);
        assert_eq!(a.sizing.streams, 3);
        // A lower bound: the receive buffer may grow to the host's maximum.
        assert_eq!(a.sizing.rcvbuf_bytes, l.rmem_max.0);
    }

    #[test]
    fn absurd_numbers_from_a_peer_are_bounded_before_any_arithmetic() {
        let wild = HostLimits {
            rmem_max: Bytes(u64::MAX),
            wmem_max: Bytes(0),
            tcp_rmem: [Bytes(u64::MAX), Bytes(0), Bytes(1)],
            tcp_wmem: [Bytes(0), Bytes(0), Bytes(0)],
            moderate_rcvbuf: true,
            can_force: false,
        };
        let l = bounded_limits(wild);
        assert_eq!(l.rmem_max, Bytes(INT_MAX));
        assert_eq!(l.wmem_max, Bytes(4096));
        assert!(l.tcp_rmem[0] <= l.tcp_rmem[1] && l.tcp_rmem[1] <= l.tcp_rmem[2]);
        let f = PathFacts {
            rtt_us: u64::MAX,
            rate_bps: u64::MAX,
            measured_at_unix_s: f64::NAN,
            samples: 0,
            note: Some("a\nFAKE LOG LINE".into()),
            ..facts(1, 1, true)
        };
        let a = advise(Direction::Send, f, &l, &l, u32::MAX);
        assert_eq!(a.path.rtt(), MAX_RTT);
        assert_eq!(a.path.rate_bps, MAX_RATE.0);
        assert_eq!(a.path.measured_at_unix_s, 0.0);
        assert_eq!(a.path.note.as_deref(), Some("a\\nFAKE LOG LINE"));
        assert!(a.sizing.streams <= MAX_STREAMS);
        assert!(a.sizing.sndbuf_bytes <= INT_MAX && a.unbounded.rcvbuf_bytes <= INT_MAX);
        let zero = advise(Direction::Receive, facts(0, 0, true), &l, &l, 0);
        assert_eq!(zero.sizing.streams, 1);
    }
}
