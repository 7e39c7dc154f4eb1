//! Several paths through one pair of devices: side B has one address per path, and each
//! packet takes the path its side-B address selects ([`path_index`]).

pub use crate::addr::path_addr;
use crate::addr::PATH_NET;
use crate::config::{ConfigError, PathConfig};
use crate::packet::Packet;
use crate::path::Path;
use crate::stats::DirStats;
use std::time::Duration;
use tcptune_core::Time;

/// The path an IP packet takes in direction `direction` (0 = A→B: by its destination, 1 =
/// B→A: by its source) when there are `count` paths. Anything that is not an IPv4 packet
/// to or from one of side B's path addresses takes path 0.
pub fn path_index(ip: &[u8], direction: usize, count: usize) -> usize {
    if count <= 1 || ip.len() < 20 || ip[0] >> 4 != 4 {
        return 0;
    }
    let at = if direction == 0 { 16 } else { 12 };
    if ip[at..at + 3] != PATH_NET {
        return 0;
    }
    match usize::from(ip[at + 3]) {
        n @ 1.. if n <= count => n - 1,
        _ => 0,
    }
}

/// One direction of every path of a topology.
///
/// # Calling order
///
/// As for one [`Path`]: [`push`](Self::push) each packet as it is read, then
/// [`poll_out`](Self::poll_out) until `None` (writing each packet at once; report a refused
/// write with [`write_failed`](Self::write_failed)), then wait until
/// [`poll_timeout`](Self::poll_timeout) or the next packet. [`set`](Self::set) changes a
/// path between any two calls. `now` must never go backwards.
#[derive(Debug)]
pub struct Paths {
    direction: usize,
    paths: Vec<Path>,
}

impl Paths {
    /// Direction `direction` (0 = A→B, 1 = B→A) of the paths `cfgs` (path 0 first; at
    /// least one).
    pub fn new<'a>(
        cfgs: impl IntoIterator<Item = &'a PathConfig>,
        direction: usize,
        max_burst: Duration,
    ) -> Paths {
        let mut paths: Vec<Path> = cfgs
            .into_iter()
            .map(|c| Path::with_max_burst(c, direction as u64, max_burst))
            .collect();
        if paths.is_empty() {
            paths.push(Path::with_max_burst(
                &PathConfig::default(),
                direction as u64,
                max_burst,
            ));
        }
        Paths { direction, paths }
    }

    /// Number of paths.
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// Always false: there is at least one path.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Path `index`.
    pub fn get(&self, index: usize) -> Option<&Path> {
        self.paths.get(index)
    }

    fn index_of(&self, p: &Packet) -> usize {
        path_index(p.ip(), self.direction, self.paths.len())
    }

    /// A packet arrived at `now`: it enters the path its address selects.
    pub fn push(&mut self, now: Time, packet: Packet) {
        let i = self.index_of(&packet);
        self.paths[i].push(now, packet);
    }

    /// A packet that could not be parsed (counted on path 0).
    pub fn malformed(&mut self, ip_bytes: usize) {
        self.paths[0].malformed(ip_bytes);
    }

    /// The packet due earliest among those due by `now`.
    pub fn poll_out(&mut self, now: Time) -> Option<Packet> {
        if let [only] = self.paths.as_mut_slice() {
            return only.poll_out(now);
        }
        let mut best: Option<(usize, Time)> = None;
        for (i, p) in self.paths.iter().enumerate() {
            if let Some(t) = p.poll_timeout() {
                let earlier = match best {
                    Some((_, b)) => t < b,
                    None => true,
                };
                if t <= now && earlier {
                    best = Some((i, t));
                }
            }
        }
        self.paths[best?.0].poll_out(now)
    }

    /// The output refused a packet returned by [`poll_out`](Self::poll_out).
    pub fn write_failed(&mut self, p: &Packet) {
        let i = self.index_of(p);
        self.paths[i].write_failed(p);
    }

    /// When the next packet of any path is due (`None` when all are empty).
    pub fn poll_timeout(&self) -> Option<Time> {
        self.paths.iter().filter_map(Path::poll_timeout).min()
    }

    /// Change path `index` (see [`Path::set`]).
    pub fn set(&mut self, index: usize, cfg: &PathConfig) -> Result<(), ConfigError> {
        let count = self.paths.len();
        self.paths
            .get_mut(index)
            .ok_or(ConfigError::NoSuchPath { index, count })?
            .set(cfg)
    }

    /// Forget every path's counters (see [`Path::reset_counters`]).
    pub fn reset_counters(&mut self) {
        self.paths.iter_mut().for_each(Path::reset_counters);
    }

    /// The counters of each path, path 0 first.
    pub fn stats(&self) -> Vec<DirStats> {
        self.paths.iter().map(Path::stats).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ipv4(src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
        let mut ip = vec![0u8; 40];
        ip[0] = 0x45;
        ip[12..16].copy_from_slice(&src.octets());
        ip[16..20].copy_from_slice(&dst.octets());
        ip
    }

    const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

    #[test]
    fn path_addr_counts_up_from_side_b_first_address() {
        assert_eq!(path_addr(0), crate::addr::ADDR_B);
        assert_eq!(path_addr(1), Ipv4Addr::new(198, 19, 0, 2));
        assert_eq!(path_addr(8), Ipv4Addr::new(198, 19, 0, 9));
    }

    #[test]
    fn a_to_b_packet_takes_the_path_of_its_destination() {
        for i in 0..3 {
            assert_eq!(path_index(&ipv4(A, path_addr(i)), 0, 3), i);
        }
    }

    #[test]
    fn b_to_a_packet_takes_the_path_of_its_source() {
        for i in 0..3 {
            assert_eq!(path_index(&ipv4(path_addr(i), A), 1, 3), i);
        }
        // The direction decides which address counts.
        assert_eq!(path_index(&ipv4(path_addr(2), A), 0, 3), 0);
    }

    #[test]
    fn unknown_address_takes_path_zero() {
        let beyond = path_addr(3);
        assert_eq!(path_index(&ipv4(A, beyond), 0, 3), 0);
        assert_eq!(path_index(&ipv4(A, Ipv4Addr::new(198, 19, 0, 0)), 0, 3), 0);
        assert_eq!(path_index(&ipv4(A, Ipv4Addr::new(198, 19, 1, 2)), 0, 3), 0);
        assert_eq!(path_index(&ipv4(A, Ipv4Addr::new(10, 0, 0, 2)), 0, 3), 0);
        assert_eq!(path_index(&ipv4(A, path_addr(1)), 0, 1), 0);
    }

    #[test]
    fn short_or_non_ipv4_packet_takes_path_zero() {
        let mut v6 = ipv4(A, path_addr(1));
        v6[0] = 0x60;
        assert_eq!(path_index(&v6, 0, 3), 0);
        assert_eq!(path_index(&[0x45; 19], 0, 3), 0);
        assert_eq!(path_index(&[], 0, 3), 0);
    }

    #[test]
    fn each_path_delays_its_own_packets() {
        let slow = PathConfig {
            delay: Duration::from_millis(20),
            ..PathConfig::default()
        };
        let fast = PathConfig {
            delay: Duration::from_millis(2),
            ..PathConfig::default()
        };
        let mut paths = Paths::new([&slow, &fast], 0, Duration::ZERO);
        paths.push(Time::ZERO, Packet::from_ip(&ipv4(A, path_addr(0))));
        paths.push(Time::ZERO, Packet::from_ip(&ipv4(A, path_addr(1))));
        assert_eq!(paths.poll_timeout(), Some(Time::from_millis(2)));
        let first = paths.poll_out(Time::from_millis(2)).map(|p| p.ip()[19]);
        assert_eq!(first, Some(2));
        assert!(paths.poll_out(Time::from_millis(19)).is_none());
        assert_eq!(paths.poll_timeout(), Some(Time::from_millis(20)));
        let second = paths.poll_out(Time::from_millis(20)).map(|p| p.ip()[19]);
        assert_eq!(second, Some(1));
        let stats = paths.stats();
        assert_eq!((stats[0].packets_out, stats[1].packets_out), (1, 1));
    }

    #[test]
    fn set_on_a_missing_path_is_an_error() {
        let mut paths = Paths::new([&PathConfig::default()], 0, Duration::ZERO);
        assert_eq!(
            paths.set(1, &PathConfig::default()),
            Err(ConfigError::NoSuchPath { index: 1, count: 1 })
        );
    }
}
