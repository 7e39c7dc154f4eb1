//! A deterministic fluid simulation of the paper's experiment, to run every tuner against a
//! bottleneck without a network.
//!
//! The model: N TCP connections (CUBIC-like, SACK) share one bottleneck of a given rate with
//! a drop-tail queue (1 BDP by default) and a fixed propagation delay; each connection's
//! sockets obey Linux's buffer rules ([`crate::linux`]: `SO_SNDBUF`/`SO_RCVBUF` doubling and
//! locking, autotuning caps, writer wake-up rules and `TCP_NOTSENT_LOWAT`, window scale and
//! clamp fixed at SYN time). The workload is the paper's: M messages of S bytes split evenly
//! over the streams, timed at the receiver from the first byte to the last. Each stream's
//! tuners (one per end, built by a [`TunerFactory`](crate::TunerFactory) per end exactly as the transfer engine
//! does) are fed snapshots at their requested interval (clamped to 10..200 ms like the real
//! driver) and their actions are applied; `OpenStreams` opens more streams and hands them
//! the messages not yet started.
//!
//! Time advances in steps of RTT/20 (25 µs..1 ms). Randomness (the application's wake-up
//! latency) comes from a seeded generator, so a run is a pure function of its
//! [`SimConfig`]. It is a model, not Linux: no pacing, no BBR, no CPU limits, no delayed
//! ACKs; it is here to check that the tuners make sound decisions and to catch regressions.

mod engine;
pub mod table;
mod tcp;

use crate::mode::TuneMode;
use crate::tuner::HostLimits;
use crate::units::{Bytes, Rate};
use std::time::Duration;

pub use engine::run;

/// The emulated path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimPath {
    /// Bottleneck rate.
    pub rate: Rate,
    /// Round-trip propagation delay.
    pub rtt: Duration,
    /// Drop-tail queue at the bottleneck.
    pub queue: Bytes,
    /// Segment payload.
    pub mss: u32,
}

impl SimPath {
    /// A path of `rate` and `rtt` with a queue of one BDP (at least 64 KiB) and MSS 1448.
    pub fn new(rate: Rate, rtt: Duration) -> SimPath {
        SimPath {
            rate,
            rtt,
            queue: Bytes(rate.bdp(rtt).0.max(64 * 1024)),
            mss: 1448,
        }
    }

    /// The bandwidth-delay product.
    pub fn bdp(&self) -> Bytes {
        self.rate.bdp(self.rtt)
    }
}

/// One simulated transfer.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The path.
    pub path: SimPath,
    /// The tuning mode of both ends.
    pub mode: TuneMode,
    /// Streams the transfer starts with.
    pub streams: u32,
    /// Messages to move.
    pub messages: u64,
    /// Bytes per message.
    pub message_size: Bytes,
    /// Buffer limits of the sending host.
    pub sender_limits: HostLimits,
    /// Buffer limits of the receiving host.
    pub receiver_limits: HostLimits,
    /// What the engine's pre-transfer probe reports, as a fraction of the bottleneck rate
    /// (only for modes that ask for a probe).
    pub probe_accuracy: f64,
    /// The probe is one stream with the largest send buffer the host allows: it then
    /// reports at most what that socket carries (two thirds of its payload per RTT), and
    /// says the rate is a lower bound.
    pub probe_single_socket: bool,
    /// Modes that ask for a rate get one (else they start without: no probe, no database
    /// entry).
    pub probe_enabled: bool,
    /// Without a rate, a mode that needs one measures it in band as the client does
    /// (`auto` on a path never seen); with `false` it goes without (`--no-probe`).
    pub in_band: bool,
    /// A woken writer runs again after a uniformly random delay up to this.
    pub writer_jitter: Duration,
    /// Stop after this much simulated time (the result is then marked capped).
    pub max_time: Duration,
    /// Never run more streams than this, whatever tuners ask.
    pub max_streams: u32,
    /// Seed of the random generator.
    pub seed: u64,
}

impl SimConfig {
    /// The paper's workload (128 x 1 MiB) over a 1 Gbit/s path of this RTT with a 1-BDP
    /// queue, default Linux limits at both ends, a probe that reports 90% of the rate (not
    /// limited by one socket), up to 200 µs of wake-up latency, 10 s cap, seed 1.
    pub fn paper(mode: TuneMode, rtt: Duration, streams: u32) -> SimConfig {
        SimConfig {
            path: SimPath::new(Rate::gbit(1), rtt),
            mode,
            streams,
            messages: 128,
            message_size: Bytes::mib(1),
            sender_limits: HostLimits::linux_defaults(),
            receiver_limits: HostLimits::linux_defaults(),
            probe_accuracy: 0.9,
            probe_single_socket: false,
            probe_enabled: true,
            in_band: true,
            writer_jitter: Duration::from_micros(200),
            max_time: Duration::from_secs(10),
            max_streams: 32,
            seed: 1,
        }
    }

    /// Both ends with these limits.
    pub fn with_limits(mut self, limits: HostLimits) -> SimConfig {
        self.sender_limits = limits.clone();
        self.receiver_limits = limits;
        self
    }
}

/// Raised limits, as the paper's "kernel tuning" host configuration: every maximum at
/// 256 MiB (`net.core.*mem_max`, `tcp_rmem[2]`, `tcp_wmem[2]`).
pub fn raised_limits() -> HostLimits {
    let big = Bytes::mib(256);
    let d = HostLimits::linux_defaults();
    HostLimits {
        rmem_max: big,
        wmem_max: big,
        tcp_rmem: [d.tcp_rmem[0], d.tcp_rmem[1], big],
        tcp_wmem: [d.tcp_wmem[0], d.tcp_wmem[1], big],
        ..d
    }
}

/// What a simulated transfer achieved.
#[derive(Clone, Debug, PartialEq)]
pub struct SimOutcome {
    /// Bytes received times 8 over the receiver's first-to-last-byte time.
    pub throughput: Rate,
    /// First-to-last-byte time at the receiver (to the cap when capped).
    pub seconds: f64,
    /// Bytes received.
    pub bytes: u64,
    /// The time cap stopped the transfer.
    pub capped: bool,
    /// Streams used in all.
    pub streams_used: u32,
    /// Why streams were added, when they were.
    pub streams_reason: Option<String>,
    /// Sum over streams of each stream's peak `sk_sndbuf`.
    pub peak_sndbuf: Bytes,
    /// Sum over streams of each stream's peak `sk_wmem_queued`.
    pub peak_wmem_queued: Bytes,
    /// Sum over streams of each stream's peak `sk_rcvbuf`.
    pub peak_rcvbuf: Bytes,
    /// Sum over streams of each stream's peak `sk_rmem_alloc`.
    pub peak_rmem_alloc: Bytes,
    /// Bytes retransmitted.
    pub retransmitted: Bytes,
    /// Tuner actions applied.
    pub actions: u64,
    /// From the first SYN to the last byte at the receiver (capped runs: to the cap).
    pub completion: Duration,
    /// When the in-band measurement found the path's rate, if it ran and did.
    pub measured_in: Option<Duration>,
}
