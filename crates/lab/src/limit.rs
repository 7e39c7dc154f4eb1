//! The physical limit of a transfer: the best completion time any TCP sender could reach on
//! an emulated path, a reference line for every figure and the headline.
//!
//! From the command's start: the control connection's handshake (one round trip), the data
//! connection's handshake (a second; the request rides on it), then every byte at the
//! path's goodput, then the last byte's one-way trip to the receiver:
//!
//! `limit = 2 RTT + bytes / goodput + RTT / 2`
//!
//! The goodput is the link rate times the share of each packet that is payload. The
//! emulator's rate counts IP bytes (no link-layer framing), and every full segment carries
//! an IPv4 header (20 bytes), a TCP header (20) and the timestamp option (12, as Linux
//! sends by default), so `goodput = rate x (MTU - 52) / MTU`: 0.9653 x the rate at MTU 1500.

use tcptune_core::Rate;

/// IPv4 header, TCP header and the timestamp option (10 bytes padded to 12), per segment.
pub const HEADER_BYTES: u32 = 20 + 20 + 12;

/// Payload bit/s a link of `rate` carries at `mtu` (full segments).
pub fn goodput_bps(rate: Rate, mtu: u32) -> f64 {
    let mtu = mtu.max(HEADER_BYTES + 1);
    rate.0 as f64 * f64::from(mtu - HEADER_BYTES) / f64::from(mtu)
}

/// The best completion time of `bytes` on a path of `rtt_us`, `rate` and `mtu`, seconds.
pub fn limit_s(rate: Rate, mtu: u32, rtt_us: u64, bytes: u64) -> f64 {
    let rtt = rtt_us as f64 / 1e6;
    2.0 * rtt + bytes as f64 * 8.0 / goodput_bps(rate, mtu).max(1.0) + rtt / 2.0
}

/// The same as a throughput over the completion time (bytes over [`limit_s`]), bit/s.
pub fn limit_bps(rate: Rate, mtu: u32, rtt_us: u64, bytes: u64) -> f64 {
    bytes as f64 * 8.0 / limit_s(rate, mtu, rtt_us, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goodput_at_1500_bytes_is_1448_of_1500() {
        let g = goodput_bps(Rate::gbit(1), 1500) / 1e9;
        assert!((g - 0.965_33).abs() < 1e-5, "{g}");
        // Jumbo frames waste less on headers.
        assert!(goodput_bps(Rate::gbit(1), 9000) > 0.99e9);
    }

    #[test]
    fn limit_adds_two_and_a_half_round_trips_to_the_serialization() {
        // 128 MiB at 200 ms and 1 Gbit/s: 0.5 s of round trips and 1.112 s of data.
        let l = limit_s(Rate::gbit(1), 1500, 200_000, 128 << 20);
        assert!((l - (0.5 + 1.112_1)).abs() < 0.001, "{l}");
        // At 0.5 ms the round trips hardly count.
        let l = limit_s(Rate::gbit(1), 1500, 500, 128 << 20);
        assert!((l - 1.113_4).abs() < 0.001, "{l}");
        let b = limit_bps(Rate::gbit(1), 1500, 500, 128 << 20);
        assert!(b < 0.9654e9 && b > 0.96e9, "{b}");
    }
}
