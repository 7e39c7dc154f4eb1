//! Buffer sizing for a target path: the bandwidth-delay product, the buffer each end needs,
//! what this host's limits allow one stream, and how many parallel streams would fill the
//! path under the current limits. Pure arithmetic over [`HostLimits`].
//!
//! The model, stated once (the kernel facts behind it are in [`HostLimits`]):
//! * one stream's throughput is at most `payload / RTT`, where `payload` is the data its
//!   buffers can hold in flight;
//! * a kernel-autotuned buffer grows to `tcp_wmem[2]` / `tcp_rmem[2]`; an application
//!   calling `setsockopt(SO_SNDBUF, v)` gets `2 * min(v, wmem_max)` bytes of buffer;
//! * a buffer of `B` bytes of kernel memory keeps about 0.70 B (send) or 0.65 B (receive) of
//!   data in flight when it is the limit: measured, see
//!   [`tcptune_core::linux::SNDBUF_INFLIGHT_FRACTION`] (the same model the tuners use);
//! * so each end needs somewhat less than `2 * BDP` bytes of buffer memory (the classic
//!   advice, kept for headroom), and buffer sizes are C `int`s: nothing above 2 GiB - 1
//!   ([`INT_MAX`]) can be set.

use serde::{Deserialize, Serialize};
use std::time::Duration;
use tcptune_core::{linux, Bytes, HostLimits, Rate};

/// The largest socket buffer Linux accepts (`int`): 2 GiB - 1.
pub const INT_MAX: u64 = i32::MAX as u64;

/// What the user wants one transfer to reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// Bottleneck rate in bit/s.
    #[serde(rename = "rate_bps", alias = "rate")]
    pub rate: Rate,
    /// Round-trip time, microseconds.
    #[serde(with = "duration_us", rename = "rtt_us", alias = "rtt")]
    pub rtt: Duration,
    /// Where the numbers came from.
    pub source: TargetSource,
}

/// Where a [`Target`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetSource {
    /// `--target` and `--rtt`.
    User,
    /// Nothing given: a long fat pipe assumed (the NIC's speed or 1 Gbit/s, 100 ms).
    Assumed,
    /// Measured on a path (`doctor HOST`), rate given or assumed.
    Measured,
}

/// Serialize a `Duration` as whole microseconds (`rtt_us`).
pub(crate) mod duration_us {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_micros(u64::deserialize(d)?))
    }
}

/// What one end of a stream can hold under this host's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndLimit {
    /// Autotuning's maximum buffer (`tcp_wmem[2]` or `tcp_rmem[2]`).
    pub autotune_max_bytes: u64,
    /// Data an autotuned buffer keeps in flight at its maximum (about 0.7 of it).
    pub autotune_payload_bytes: u64,
    /// The buffer an application gets when it sets `SO_SNDBUF`/`SO_RCVBUF` as high as allowed
    /// (twice `wmem_max`/`rmem_max`).
    pub app_max_bytes: u64,
    /// The most data one stream's buffer can hold by either means.
    pub best_payload_bytes: u64,
    /// `autotune_payload_bytes / RTT`: the ceiling of one stream left to autotuning.
    pub autotune_rate_bps: u64,
    /// `best_payload_bytes / RTT`: the ceiling of one stream that sets its buffer.
    pub best_rate_bps: u64,
}

/// The buffer arithmetic for one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sizing {
    /// Bandwidth-delay product: the data in flight that fills the path.
    pub bdp_bytes: u64,
    /// Buffer memory each end needs for one stream to fill the path (2 x BDP).
    pub buffer_needed_bytes: u64,
    /// What the `tcp_*mem` maximum should be: `buffer_needed_bytes` rounded up to a MiB and
    /// capped at [`INT_MAX`].
    pub buffer_recommended_bytes: u64,
    /// Streams needed even with the recommended settings (more than 1 only past 2 GiB).
    pub streams_needed_at_recommended: u32,
    /// The sending end of one stream on this host.
    pub send: EndLimit,
    /// The receiving end of one stream on this host.
    pub recv: EndLimit,
    /// Parallel streams that fill the path under the current limits when the application
    /// sets its buffers as high as allowed (this host's limits applied to both ends).
    pub streams_needed: u32,
    /// Parallel streams that fill the path under the current limits when the kernel
    /// autotunes every buffer.
    pub streams_needed_autotuned: u32,
}

fn rate_of(payload: u64, rtt: Duration) -> u64 {
    Rate::from_bytes_over(Bytes(payload), rtt).bits_per_sec()
}

fn end_limit(
    autotune_max: Bytes,
    core_max: Bytes,
    rtt: Duration,
    inflight: fn(u64) -> u64,
) -> EndLimit {
    // The kernel keeps buffer sizes in an int: more than INT_MAX is never used.
    let autotune_max = Bytes(autotune_max.0.min(INT_MAX));
    let autotune_payload = inflight(autotune_max.0);
    // SO_*BUF(v) stores 2 * min(v, max), capped by the int range.
    let app_max = core_max.0.saturating_mul(2).min(INT_MAX);
    let best = autotune_payload.max(inflight(app_max));
    EndLimit {
        autotune_max_bytes: autotune_max.0,
        autotune_payload_bytes: autotune_payload,
        app_max_bytes: app_max,
        best_payload_bytes: best,
        autotune_rate_bps: rate_of(autotune_payload, rtt),
        best_rate_bps: rate_of(best, rtt),
    }
}

/// What one stream of a target needs, independent of the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    /// Bandwidth-delay product.
    pub bdp_bytes: u64,
    /// Buffer memory per end (2 x BDP), uncapped.
    pub buffer_needed_bytes: u64,
    /// `buffer_needed_bytes` rounded up to a MiB, capped at [`INT_MAX`].
    pub buffer_recommended_bytes: u64,
    /// Streams needed at the recommended buffer (more than 1 only past 2 GiB).
    pub streams_at_recommended: u32,
}

impl Need {
    /// The needs of `target`.
    pub fn of(target: &Target) -> Need {
        let bdp = target.rate.bdp(target.rtt).0;
        let needed = bdp.saturating_mul(2);
        let recommended = round_up_mib(needed).min(INT_MAX);
        Need {
            bdp_bytes: bdp,
            buffer_needed_bytes: needed,
            buffer_recommended_bytes: recommended,
            streams_at_recommended: ceil_div_u32(needed, recommended),
        }
    }
}

/// Round up to a whole MiB.
pub fn round_up_mib(bytes: u64) -> u64 {
    bytes.div_ceil(Bytes::MIB).saturating_mul(Bytes::MIB)
}

fn ceil_div_u32(a: u64, b: u64) -> u32 {
    if b == 0 {
        return u32::MAX;
    }
    u32::try_from(a.div_ceil(b)).unwrap_or(u32::MAX).max(1)
}

impl Sizing {
    /// The sizing of `target` on a host with `limits`.
    pub fn compute(target: &Target, limits: &HostLimits) -> Sizing {
        let need = Need::of(target);
        let bdp = need.bdp_bytes;
        let send = end_limit(
            limits.tcp_wmem[2],
            limits.wmem_max,
            target.rtt,
            linux::sndbuf_inflight,
        );
        let recv = end_limit(
            limits.tcp_rmem[2],
            limits.rmem_max,
            target.rtt,
            linux::rcvbuf_inflight,
        );
        let per_stream = send.best_payload_bytes.min(recv.best_payload_bytes);
        Sizing {
            bdp_bytes: bdp,
            buffer_needed_bytes: need.buffer_needed_bytes,
            buffer_recommended_bytes: need.buffer_recommended_bytes,
            streams_needed_at_recommended: need.streams_at_recommended,
            send,
            recv,
            streams_needed: ceil_div_u32(bdp, per_stream),
            streams_needed_autotuned: ceil_div_u32(
                bdp,
                send.autotune_payload_bytes.min(recv.autotune_payload_bytes),
            ),
        }
    }
}

/// `1.5 MiB`, `125 MiB`, `640 KiB`, `900 B`: sizes in messages (the one formatter of
/// `tcptune_core::units`).
pub fn human_bytes(b: u64) -> String {
    Bytes(b).human()
}

/// `320 Mbit/s`, `10 Gbit/s`, `1.5 kbit/s`: rates in messages.
pub fn human_rate(bps: u64) -> String {
    tcptune_core::human_bps(bps as f64)
}

/// `100 ms`, `250 us`, `1.2 s`.
pub fn human_duration(d: Duration) -> String {
    tcptune_core::human_duration(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(rate: Rate, ms: u64) -> Target {
        Target {
            rate,
            rtt: Duration::from_millis(ms),
            source: TargetSource::User,
        }
    }

    #[test]
    fn ten_gigabit_at_100ms_needs_125_megabytes_in_flight() {
        let s = Sizing::compute(&target(Rate::gbit(10), 100), &HostLimits::linux_defaults());
        assert_eq!(s.bdp_bytes, 125_000_000);
        assert_eq!(s.buffer_needed_bytes, 250_000_000);
        assert_eq!(s.buffer_recommended_bytes, 239 * Bytes::MIB);
        // Default host: 4 MiB send max, 0.7 of it in flight => 2.8 MiB / 100 ms (measured
        // 235 Mbit/s on the emulator: docs/bench/buffer_model.md).
        assert_eq!(s.send.autotune_payload_bytes, 2_936_012);
        assert_eq!(s.send.autotune_rate_bps, 234_880_960);
        // An application setting SO_SNDBUF to wmem_max (4 MiB) gets 8 MiB of buffer.
        assert_eq!(s.send.best_payload_bytes, 5_872_025);
        assert_eq!(s.send.best_rate_bps, 469_762_000);
        // The receive end (tcp_rmem max 32 MiB): 0.65 x 32 MiB in flight.
        assert_eq!(s.recv.best_payload_bytes, 21_810_380);
        // 125 MB / 5.6 MiB per stream (the send end limits) = 21.3 => 22 streams.
        assert_eq!(s.streams_needed, 22);
        assert_eq!(s.streams_needed_autotuned, 43);
        assert_eq!(s.streams_needed_at_recommended, 1);
    }

    #[test]
    fn paths_past_two_gibibytes_are_capped_and_need_several_streams() {
        // 100 Gbit/s x 300 ms = 3.75 GB in flight: no single socket can hold it.
        let s = Sizing::compute(&target(Rate::gbit(100), 300), &HostLimits::linux_defaults());
        assert_eq!(s.bdp_bytes, 3_750_000_000);
        assert_eq!(s.buffer_recommended_bytes, INT_MAX);
        assert_eq!(s.streams_needed_at_recommended, 4);
    }

    #[test]
    fn huge_core_limits_saturate_instead_of_overflowing() {
        let mut l = HostLimits::linux_defaults();
        l.wmem_max = Bytes(u64::MAX);
        l.rmem_max = Bytes(1 << 40);
        let s = Sizing::compute(&target(Rate::gbit(1), 10), &l);
        assert_eq!(s.send.app_max_bytes, INT_MAX);
        assert_eq!(s.streams_needed, 1);
    }

    #[test]
    fn zero_rtt_or_rate_does_not_divide_by_zero() {
        let s = Sizing::compute(&target(Rate(0), 0), &HostLimits::linux_defaults());
        assert_eq!(s.bdp_bytes, 0);
        assert_eq!(s.streams_needed, 1);
        assert_eq!(s.send.best_rate_bps, 0);
    }

    #[test]
    fn humans_read_round_numbers() {
        assert_eq!(human_bytes(4 * Bytes::MIB), "4 MiB");
        assert_eq!(human_bytes(125_000_000), "119 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_rate(335_544_320), "336 Mbit/s");
        assert_eq!(human_rate(10_000_000_000), "10 Gbit/s");
        assert_eq!(human_duration(Duration::from_micros(250)), "250 us");
        assert_eq!(human_duration(Duration::from_micros(2500)), "2.5 ms");
    }
}
