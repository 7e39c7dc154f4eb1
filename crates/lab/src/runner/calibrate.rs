//! Is the emulator faithful at the chosen rate? One well-buffered transfer through a fresh
//! path, then a verdict from its throughput, the RTT it saw and the emulator's lateness.

use crate::record::Calibration;

/// Throughput a well-buffered transfer must reach, as a fraction of the rate.
pub const MIN_THROUGHPUT: f64 = 0.85;
/// Largest acceptable 99th-percentile lateness of the emulator, microseconds.
pub const MAX_LATENESS_P99_US: f64 = 2_000.0;
/// The calibration path's RTT, microseconds (short, so slow start costs little).
pub const CALIBRATION_RTT_US: u64 = 10_000;

/// What one calibration transfer measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// Rate configured, bit/s.
    pub rate_bps: u64,
    /// Receiver-measured throughput, bit/s.
    pub throughput_bps: f64,
    /// RTT measured by TCP on the idle path (handshake or smallest smoothed RTT), us.
    pub rtt_us: Option<u64>,
    /// Emulator p99 lateness, us.
    pub lateness_p99_us: Option<f64>,
    /// Packets the emulator dropped.
    pub drops: u64,
}

/// Judge a measurement (pure).
pub fn judge(m: &Measured, rtt_configured_us: u64) -> Calibration {
    let mut problems = Vec::new();
    let frac = m.throughput_bps / m.rate_bps.max(1) as f64;
    if frac < MIN_THROUGHPUT {
        problems.push(format!(
            "a well-buffered transfer reached {:.0} Mbit/s, {:.0}% of the rate (needs {:.0}%)",
            m.throughput_bps / 1e6,
            frac * 100.0,
            MIN_THROUGHPUT * 100.0
        ));
    }
    if let Some(l) = m.lateness_p99_us {
        if l > MAX_LATENESS_P99_US {
            problems.push(format!(
                "the emulator released packets up to {:.1} ms late (p99; allowed {:.1} ms)",
                l / 1000.0,
                MAX_LATENESS_P99_US / 1000.0
            ));
        }
    }
    if let Some(r) = m.rtt_us {
        let tol = (rtt_configured_us as f64 * 0.10).max(500.0);
        if (r as f64 - rtt_configured_us as f64).abs() > tol {
            problems.push(format!(
                "TCP measured a RTT of {:.2} ms on a {:.2} ms path",
                r as f64 / 1000.0,
                rtt_configured_us as f64 / 1000.0
            ));
        }
    }
    let faithful = problems.is_empty();
    Calibration {
        rate_bps: m.rate_bps,
        rtt_configured_us,
        rtt_measured_us: m.rtt_us,
        throughput_bps: m.throughput_bps,
        lateness_p99_us: m.lateness_p99_us,
        drops: m.drops,
        faithful,
        verdict: if faithful {
            format!(
                "faithful: {:.0}% of the rate, lateness within {:.1} ms",
                frac * 100.0,
                MAX_LATENESS_P99_US / 1000.0
            )
        } else {
            problems.join("; ")
        },
        lower_rates: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(tput: f64, late: f64, rtt: u64) -> Measured {
        Measured {
            rate_bps: 1_000_000_000,
            throughput_bps: tput,
            rtt_us: Some(rtt),
            lateness_p99_us: Some(late),
            drops: 0,
        }
    }

    #[test]
    fn a_fast_punctual_path_is_faithful() {
        let c = judge(&m(940e6, 300.0, 10_150), 10_000);
        assert!(c.faithful, "{}", c.verdict);
    }

    #[test]
    fn a_slow_or_late_path_is_refused_with_reasons() {
        let c = judge(&m(400e6, 300.0, 10_100), 10_000);
        assert!(!c.faithful);
        assert!(c.verdict.contains("400 Mbit/s"), "{}", c.verdict);
        let c = judge(&m(950e6, 16_000.0, 10_100), 10_000);
        assert!(c.verdict.contains("16.0 ms late"), "{}", c.verdict);
        let c = judge(&m(950e6, 100.0, 30_000), 10_000);
        assert!(c.verdict.contains("30.00 ms"), "{}", c.verdict);
    }
}
