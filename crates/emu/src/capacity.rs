//! What the emulator was measured to hold accurately (`bench/emu_capacity.sh`, results in
//! `docs/bench/emu.md`), and the warning `emu up`/`emu run` print above it.

use crate::config::PathConfig;
use tcptune_core::Rate;

/// The highest bottleneck rate that kept the 99th percentile of lateness under 1 ms with
/// GSO offload, at MTU 1500 and at MTU 9000, on the 2-core reference machine with sender and
/// receiver on the same host (medians of repeated runs; see docs/bench/emu.md).
pub const MEASURED_ACCURATE_RATE: [(u32, Rate); 2] =
    [(1500, Rate(2_000_000_000)), (9000, Rate(2_000_000_000))];

/// The highest rate held accurately without offload (one read and write per packet).
pub const MEASURED_ACCURATE_RATE_NO_OFFLOAD: Rate = Rate(300_000_000);

/// The measured limit for `mtu` (interpolated between the measured MTUs).
pub fn accurate_rate_limit(mtu: u32, offload: bool) -> Rate {
    if !offload {
        return MEASURED_ACCURATE_RATE_NO_OFFLOAD;
    }
    let [(m0, r0), (m1, r1)] = MEASURED_ACCURATE_RATE;
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
