//! The addresses and device names inside a topology's namespaces: side A's and side B's
//! addresses, the address of each extra path on side B, and the `ip` lines that set them.

use std::net::{IpAddr, Ipv4Addr};

/// Side A's address inside its namespace (198.18.0.0/15 is reserved for benchmarking).
pub const ADDR_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// Side B's address inside its namespace.
pub const ADDR_B: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
/// Name of the TUN device inside each namespace.
pub const TUN_NAME: &str = "tt0";

/// The first three octets of side B's path addresses (198.19.0.0/24).
pub(crate) const PATH_NET: [u8; 3] = [198, 19, 0];

/// Side B's address reached through path `index` (0 is the topology's first path):
/// 198.19.0.1, 198.19.0.2, ... (`index` below 254).
pub fn path_addr(index: usize) -> Ipv4Addr {
    let last = u8::try_from(index + 1).unwrap_or(u8::MAX);
    Ipv4Addr::new(PATH_NET[0], PATH_NET[1], PATH_NET[2], last)
}

/// The `ip -batch` lines that give side B (`side` 1) the extra paths' addresses, or side A
/// (`side` 0, address `addr_a`) routes to them.
pub(crate) fn extra_addr_cmds(side: usize, addr_a: IpAddr, extra_b: &[IpAddr]) -> String {
    extra_b
        .iter()
        .map(|b| {
            if side == 1 {
                format!("addr add {b}/32 dev {TUN_NAME}\n")
            } else {
                format!("route add {b}/32 dev {TUN_NAME} src {addr_a}\n")
            }
        })
        .collect()
}
