//! What the emulator was measured to hold accurately (`bench/emu_capacity.sh`, results in
//! `docs/bench/emu.md`), and the warning `emu up`/`emu run` print above it.

use crate::config::PathConfig;
use tcptune_core::Rate;

/// The highest bottleneck rate that stayed within 5% of the configured rate with the 99th
/// percentile of lateness under 1 ms, with GSO offload (the default), at MTU 1500 and 9000:
/// a single iperf3 flow on the 2-core reference machine with sender and receiver on the same
/// host, medians of 3 runs (docs/bench/emu.md; 6 Gbit/s was not held at either MTU).
pub const MEASURED_ACCURATE_RATE: [(u32, Rate); 2] =
    [(1500, Rate(5_000_000_000)), (9000, Rate(5_000_000_000))];

/// The same without offload (one read and one write per packet): 1 Gbit/s was not held at
/// MTU 1500, 2 Gbit/s was at MTU 9000.
pub const MEASURED_ACCURATE_RATE_NO_OFFLOAD: [(u32, Rate); 2] =
    [(1500, Rate(500_000_000)), (9000, Rate(2_000_000_000))];

/// The measured limit for `mtu` (interpolated between the measured MTUs).
pub fn accurate_rate_limit(mtu: u32, offload: bool) -> Rate {
    let table = if offload {
        MEASURED_ACCURATE_RATE
    } else {
        MEASURED_ACCURATE_RATE_NO_OFFLOAD
    };
    let [(m0, r0), (m1, r1)] = table;
    if mtu <= m0 {
        return r0;
    }
    if mtu >= m1 {
        return r1;
    }
    let f = f64::from(mtu - m0) / f64::from(m1 - m0);
    Rate((r0.0 as f64 + f * (r1.0 as f64 - r0.0 as f64)) as u64)
}

/// A warning when the path asks for more than was measured to be accurate (or for an
/// unlimited rate, where the emulator itself is the bottleneck).
pub fn capacity_warning(path: &PathConfig, offload: bool) -> Option<String> {
    let limit = accurate_rate_limit(path.mtu, offload);
    match path.rate {
        Some(r) if r > limit => Some(format!(
            "rate {r} is above the {limit} this emulator was measured to hold accurately at \
             MTU {} on a 2-core host (docs/BENCHMARKS.md): expect late packets and a lower \
             rate; check the lateness with 'tcptune emu status'",
            path.mtu
        )),
        None if !path.delay.is_zero() => Some(format!(
            "no --rate: the emulator itself is the bottleneck (about {limit} accurate here), \
             and above that the delay is not accurate; set --rate for a faithful path"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn warns_only_above_the_measured_rate() {
        let mut p = PathConfig {
            rate: Some(Rate::mbit(100)),
            ..PathConfig::default()
        };
        assert_eq!(capacity_warning(&p, true), None);
        p.rate = Some(Rate::gbit(40));
        assert!(capacity_warning(&p, true).is_some());
        p.rate = Some(Rate::gbit(1));
        assert_eq!(capacity_warning(&p, true), None);
        assert!(
            capacity_warning(&p, false).is_some(),
            "plain TUN at MTU 1500 holds 0.5"
        );
        p.mtu = 9000;
        assert_eq!(capacity_warning(&p, false), None);
        p.rate = None;
        assert_eq!(
            capacity_warning(&p, true),
            None,
            "unlimited, no delay: nothing to be late"
        );
        p.delay = Duration::from_millis(10);
        assert!(capacity_warning(&p, true).is_some());
    }
}
