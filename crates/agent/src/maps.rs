//! The layouts shared with `bpf/sockops.c` (keep both in step): the policy map's value, its
//! keys, the configuration and the counters.

use std::net::{IpAddr, Ipv6Addr};

/// `tt_policy`'s and `tt_prefix`'s value (`struct tt_policy`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyValue {
    /// `SO_SNDBUF` to request, bytes (0: leave the buffer to autotuning).
    pub sndbuf: u32,
    /// `SO_RCVBUF` to request at `PASSIVE_ESTABLISHED` (0: leave).
    pub rcvbuf: u32,
    /// The path's rate, bytes/s (0: no pacing); the program divides it by the destination's
    /// connections that share it (those that carry data or just opened).
    pub pacing_bytes_per_s: u64,
    /// The entry's RTT bucket, `[rtt_lo_us, rtt_hi_us)`.
    pub rtt_lo_us: u32,
    /// End of the RTT bucket (exclusive).
    pub rtt_hi_us: u32,
    /// `TCP_BPF_IW`, segments (0: none).
    pub iw: u32,
    /// The policy's ID ([`crate::policy::Settings::id`]).
    pub id: u32,
    /// [`POLICY_FULL_PIPE`].
    pub flags: u32,
    /// `--override-app-buffers`: an application's `SO_SNDBUF` request below this is raised to it.
    pub need_snd: u32,
    /// The same for `SO_RCVBUF`.
    pub need_rcv: u32,
    /// Padding (zero).
    pub pad: u32,
    /// `TCP_CONGESTION`, NUL-terminated (empty: leave).
    pub cc: [u8; 16],
}

// SAFETY: repr(C), plain integers and bytes, no padding the compiler adds (64 bytes, checked
// in a test), valid for every bit pattern.
unsafe impl aya::Pod for PolicyValue {}

/// [`PolicyValue::flags`]: the entry's rate was measured with a full pipe.
pub const POLICY_FULL_PIPE: u32 = 1;

/// A destination as the maps key it: IPv6, or IPv4-mapped (`::ffff:a.b.c.d`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AddrKey(pub [u8; 16]);

// SAFETY: 16 bytes, valid for every bit pattern.
unsafe impl aya::Pod for AddrKey {}

impl AddrKey {
    /// The key of an address.
    pub fn of(ip: IpAddr) -> AddrKey {
        AddrKey(mapped(ip).octets())
    }
}

/// An address as the program sees it: IPv6, IPv4 mapped into IPv6.
pub fn mapped(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// A prefix over the 128 bits of a mapped address: an IPv4 `/n` is `/96+n`.
pub fn mapped_prefix_len(ip: IpAddr, len: u8) -> Option<u32> {
    match ip {
        IpAddr::V4(_) if len <= 32 => Some(96 + u32::from(len)),
        IpAddr::V6(_) if len <= 128 => Some(u32::from(len)),
        _ => None,
    }
}

/// `tt_cfg`'s value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CfgValue {
    /// [`crate::Mode`] as the program reads it.
    pub mode: u32,
    /// `--override-app-buffers` (1: on).
    pub override_on: u32,
    /// On sockets without a known peer yet: an application's `SO_SNDBUF` request below
    /// this is ignored ([`crate::policy::unconnected_needs`]).
    pub override_snd: u32,
    /// The same for `SO_RCVBUF`.
    pub override_rcv: u32,
    /// The receive window a listener opened under the agent offers from its SYN-ACK on,
    /// bytes (0: listeners are left alone; [`crate::policy::listen_offer`]).
    pub listen_offer: u32,
    /// The initial window a peer without a policy gets on such a listener, segments.
    pub stranger_rwnd: u32,
}

// SAFETY: six u32s.
unsafe impl aya::Pod for CfgValue {}

/// Index in `tt_stats`: sockets the program tuned.
pub const STAT_TUNED: u32 = 0;
/// Index in `tt_stats`: sockets only observed.
pub const STAT_OBSERVED: u32 = 1;
/// Index in `tt_stats`: sockets advised on (advise mode).
pub const STAT_ADVISED: u32 = 2;
/// Index in `tt_stats`: records dropped (ring buffer full).
pub const STAT_DROPPED: u32 = 3;
/// Index in `tt_stats`: sockets whose close the program saw (each counted once in
/// [`STAT_TUNED`], [`STAT_OBSERVED`] or [`STAT_ADVISED`] when it was established).
pub const STAT_CLOSED: u32 = 4;
/// Index in `tt_stats`: listeners the program raised (they offer the known peers' window).
pub const STAT_LISTENERS: u32 = 5;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_c_structs() {
        assert_eq!(std::mem::size_of::<PolicyValue>(), 64);
        assert_eq!(std::mem::size_of::<AddrKey>(), 16);
        assert_eq!(std::mem::size_of::<CfgValue>(), 24);
    }

    #[test]
    fn ipv4_is_mapped_into_ipv6_with_its_prefix_shifted() {
        let ip: IpAddr = "10.0.0.2".parse().expect("ip");
        assert_eq!(
            AddrKey::of(ip).0,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2]
        );
        assert_eq!(mapped_prefix_len(ip, 24), Some(120));
        assert_eq!(mapped_prefix_len(ip, 33), None);
        let v6: IpAddr = "2001:db8::1".parse().expect("ip");
        assert_eq!(mapped_prefix_len(v6, 48), Some(48));
    }
}
