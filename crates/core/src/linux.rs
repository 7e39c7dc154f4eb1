//! The Linux socket-buffer rules the tuners reason with (and the simulation obeys).
//!
//! These are the few kernel facts (Linux 6.x) that decide what a buffer size means, written
//! down once so that the tuners and [`crate::sim`] agree:
//!
//! * `setsockopt(SO_SNDBUF, v)` stores `sk_sndbuf = max(2 * min(v, wmem_max), 4608)` and
//!   locks the buffer (send autotuning stops for that socket); `SO_RCVBUF` likewise with
//!   `rmem_max` and a floor of 2304. The doubling is meant to pay for metadata, so "about `v`
//!   bytes of payload" is the contract the [`Action`](crate::Action) docs promise.
//! * Send autotuning (unlocked sockets) grows `sk_sndbuf` to about
//!   `2 * max(cwnd, 10) * per_mss` (`per_mss` is 4352 bytes at MSS 1448), capped at
//!   `tcp_wmem[2]`; it never shrinks it.
//! * `sk_wmem_queued` counts `truesize`; with GSO-sized skbs about [`SNDBUF_PAYLOAD_FRACTION`]
//!   of it is payload. A writer blocked on a full buffer is woken when a third of the buffer
//!   is free.
//! * Received data costs `truesize`, about twice the payload for 1500-byte frames: the
//!   advertised window is about [`RCVBUF_WINDOW_FRACTION`] of `sk_rcvbuf`.
//! * The window scale is chosen at SYN time from `max(tcp_rmem[2], rmem_max)`, bounded by a
//!   window clamp or a locked `SO_RCVBUF` set before `connect()`/`listen()`; the window
//!   clamp of a socket whose `SO_RCVBUF` was locked before connecting stays at that buffer's
//!   window until `TCP_WINDOW_CLAMP` raises it.

use crate::tuner::HostLimits;
use crate::units::Bytes;

/// Smallest `sk_sndbuf` the kernel allows (`SOCK_MIN_SNDBUF`).
pub const SOCK_MIN_SNDBUF: u64 = 4608;
/// Smallest `sk_rcvbuf` the kernel allows (`SOCK_MIN_RCVBUF`).
pub const SOCK_MIN_RCVBUF: u64 = 2304;
/// Fraction of `sk_sndbuf` (kernel memory) that holds payload with GSO-sized skbs.
pub const SNDBUF_PAYLOAD_FRACTION: f64 = 0.9;
/// Fraction of `sk_rcvbuf` the receiver advertises as window (`truesize` of 1500-byte
/// frames is about twice their payload; Linux 6.x measures this "scaling ratio" per socket).
pub const RCVBUF_WINDOW_FRACTION: f64 = 0.5;
/// Data one stream keeps in flight per byte of `sk_sndbuf` when its send buffer is what
/// limits it, in steady state: measured 0.70 on Linux 6.18 (`bench/buffer_model.sh`, cubic,
/// 1 Gbit/s x 100 ms, MTU 1500; `docs/bench/buffer_model.md`). Lower than
/// [`SNDBUF_PAYLOAD_FRACTION`] because a writer blocked on a full buffer is only woken once a
/// third of it is free, so the queue swings between two thirds and all of the buffer. This
/// is the figure behind every "one stream can reach at most" tcptune prints.
pub const SNDBUF_INFLIGHT_FRACTION: f64 = 0.70;
/// Data in flight per byte of `sk_rcvbuf` when the receive buffer is what limits a stream:
/// measured 0.65 with the same method (the kernel's per-socket payload/`truesize` ratio
/// for 1500-byte frames; it varies with the NIC driver, so the tuners size with the more
/// cautious [`RCVBUF_WINDOW_FRACTION`]).
pub const RCVBUF_INFLIGHT_FRACTION: f64 = 0.65;
/// Memory send autotuning budgets per segment of congestion window at MSS 1448
/// (`roundup_pow_of_two(mss + MAX_TCP_HEADER + shinfo) + sizeof(sk_buff)`).
pub const AUTOTUNE_PER_MSS: u64 = 4352;
/// Largest window scale shift (RFC 7323).
pub const MAX_WSCALE: u8 = 14;

/// `sk_sndbuf` after `setsockopt(SO_SNDBUF, value)` on a host with `limits`.
pub fn sndbuf_after_setsockopt(value: Bytes, limits: &HostLimits) -> u64 {
    let v = if limits.can_force {
        value.0
    } else {
        value.0.min(limits.wmem_max.0)
    };
    v.saturating_mul(2).clamp(SOCK_MIN_SNDBUF, i32::MAX as u64)
}

/// `sk_rcvbuf` after `setsockopt(SO_RCVBUF, value)` on a host with `limits`.
pub fn rcvbuf_after_setsockopt(value: Bytes, limits: &HostLimits) -> u64 {
    let v = if limits.can_force {
        value.0
    } else {
        value.0.min(limits.rmem_max.0)
    };
    v.saturating_mul(2).clamp(SOCK_MIN_RCVBUF, i32::MAX as u64)
}

/// Data a stream keeps in flight, in steady state, when a send buffer of `sk_sndbuf` bytes
/// of kernel memory limits it ([`SNDBUF_INFLIGHT_FRACTION`]).
pub fn sndbuf_inflight(sk_sndbuf: u64) -> u64 {
    (sk_sndbuf as f64 * SNDBUF_INFLIGHT_FRACTION) as u64
}

/// Data a stream keeps in flight, in steady state, when a receive buffer of `sk_rcvbuf`
/// bytes of kernel memory limits it ([`RCVBUF_INFLIGHT_FRACTION`]).
pub fn rcvbuf_inflight(sk_rcvbuf: u64) -> u64 {
    (sk_rcvbuf as f64 * RCVBUF_INFLIGHT_FRACTION) as u64
}

/// Payload a send buffer of `sk_sndbuf` bytes of kernel memory holds.
pub fn sndbuf_payload(sk_sndbuf: u64) -> u64 {
    (sk_sndbuf as f64 * SNDBUF_PAYLOAD_FRACTION) as u64
}

/// The `SO_SNDBUF` value whose buffer holds `payload` bytes (the inverse of
/// [`sndbuf_payload`] after the kernel's doubling), rounded up.
pub fn sndbuf_value_for_payload(payload: u64) -> Bytes {
    Bytes((payload as f64 / (2.0 * SNDBUF_PAYLOAD_FRACTION)).ceil() as u64)
}

/// The receive window a receive buffer of `sk_rcvbuf` bytes supports.
pub fn rcvbuf_window(sk_rcvbuf: u64) -> u64 {
    (sk_rcvbuf as f64 * RCVBUF_WINDOW_FRACTION) as u64
}

/// The `SO_RCVBUF` value whose buffer supports a window of `window` bytes, rounded up.
pub fn rcvbuf_value_for_window(window: u64) -> Bytes {
    Bytes((window as f64 / (2.0 * RCVBUF_WINDOW_FRACTION)).ceil() as u64)
}

/// `sk_sndbuf` that send autotuning asks for at a congestion window of `cwnd_segs` segments
/// (`sndbuf_expand` factor 2, as for Reno and CUBIC), before the `tcp_wmem[2]` cap.
pub fn autotune_sndbuf(cwnd_segs: u64) -> u64 {
    2 * cwnd_segs.max(10) * AUTOTUNE_PER_MSS
}

/// Window scale chosen at SYN time for a receive space of `space` bytes (the kernel's
/// `clamp(ilog2(space) - 15, 0, 14)`).
pub fn window_scale_for(space: u64) -> u8 {
    if space == 0 {
        return 0;
    }
    let log = 63 - space.leading_zeros() as i64;
    (log - 15).clamp(0, i64::from(MAX_WSCALE)) as u8
}

/// Largest window representable with window scale `wscale`.
pub fn max_window(wscale: u8) -> u64 {
    65_535u64 << wscale.min(MAX_WSCALE)
}

/// Largest payload one socket can hold for sending on this host, by the larger of send
/// autotuning (`tcp_wmem[2]`) and `SO_SNDBUF` (`2 * wmem_max`); `None` when forcing is
/// allowed (no cap).
pub fn max_send_payload(limits: &HostLimits) -> Option<u64> {
    if limits.can_force {
        return None;
    }
    let kernel = limits.tcp_wmem[2]
        .0
        .max(limits.wmem_max.0.saturating_mul(2));
    Some(sndbuf_payload(kernel))
}

/// Largest receive window one socket can advertise on this host, by the larger of receive
/// autotuning (`tcp_rmem[2]`, when enabled) and `SO_RCVBUF` (`2 * rmem_max`); `None` when
/// forcing is allowed.
pub fn max_receive_window(limits: &HostLimits) -> Option<u64> {
    if limits.can_force {
        return None;
    }
    let auto = if limits.moderate_rcvbuf {
        limits.tcp_rmem[2].0
    } else {
        0
    };
    Some(rcvbuf_window(auto.max(limits.rmem_max.0.saturating_mul(2))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setsockopt_doubles_and_caps_at_the_host_maximum() {
        let l = HostLimits::linux_defaults();
        assert_eq!(sndbuf_after_setsockopt(Bytes::kib(64), &l), 131_072);
        assert_eq!(sndbuf_after_setsockopt(Bytes::mib(64), &l), 8 << 20);
        assert_eq!(sndbuf_after_setsockopt(Bytes(1), &l), SOCK_MIN_SNDBUF);
        assert_eq!(rcvbuf_after_setsockopt(Bytes::mib(64), &l), 8 << 20);
        let forced = HostLimits {
            can_force: true,
            ..HostLimits::linux_defaults()
        };
        assert_eq!(sndbuf_after_setsockopt(Bytes::mib(64), &forced), 128 << 20);
    }

    #[test]
    fn window_scale_follows_the_kernel_formula() {
        // 32 MiB of tcp_rmem[2]: ilog2 = 25, scale 10.
        assert_eq!(window_scale_for(32 << 20), 10);
        assert_eq!(window_scale_for(65_535), 0);
        assert_eq!(window_scale_for(4 << 20), 7);
        assert_eq!(window_scale_for(u64::MAX), MAX_WSCALE);
        assert!(max_window(7) >= 4 << 20);
    }

    #[test]
    fn payload_conversions_round_trip() {
        let v = sndbuf_value_for_payload(3_000_000);
        assert!(sndbuf_payload(v.0 * 2) >= 3_000_000 - 2);
        let r = rcvbuf_value_for_window(1_000_000);
        assert!(rcvbuf_window(r.0 * 2) >= 1_000_000 - 2);
    }

    #[test]
    fn default_namespace_holds_about_seven_megabytes_per_socket() {
        let l = HostLimits::linux_defaults();
        let send = max_send_payload(&l).expect("capped");
        assert!((7_000_000..8_000_000).contains(&send), "{send}");
        let recv = max_receive_window(&l).expect("capped");
        assert_eq!(recv, 16 << 20);
    }
}
