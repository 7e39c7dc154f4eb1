//! Value parsers for every quantity on the command line: one per kind (durations, rates,
//! sizes), each with the bounds of its option, so that zero and absurd values are refused by
//! clap before anything runs, in one line that names the option. The spellings are those of
//! `tcptune_core::units` (see `tcptune --help`).

use std::time::Duration;
use tcptune_core::units::{
    format_duration, parse_duration, parse_duration_or_seconds, Bytes, Rate,
};

/// The rules shown under `tcptune --help`.
pub(crate) const UNITS_HELP: &str = "\
Units (every option, and everything tcptune prints is accepted back):
  durations  need a unit: 25ms, 1.5s, 250us, 2min (ns us ms s min h). Only send's
             iperf3-style options (-t, -i, --max-time, --connect-timeout) take a bare number
             as seconds, as iperf3 does: -t 10 is 10s.
  rates      bits per second, decimal: 1gbit, 1Gbit/s, 500mbit, 500M (k m g t = 10^3 10^6
             10^9 10^12 bit/s); a bare number or a rate in bytes (MB/s) is refused.
  sizes      bytes: 4MiB, 4 MiB, 4M and 64k are binary (KiB MiB GiB, as iperf3's -l);
             4MB and 64kB are decimal (10^6, 10^3); a bare number is bytes.";

fn check_duration(d: Duration, min: Duration, max: Duration) -> Result<Duration, String> {
    if d.is_zero() && !min.is_zero() {
        return Err("must be greater than zero".into());
    }
    if d < min {
        return Err(format!("must be at least {}", format_duration(min)));
    }
    if d > max {
        return Err(format!("must be at most {}", format_duration(max)));
    }
    Ok(d)
}

/// A duration with a unit, between `min` and `max`.
pub(crate) fn duration(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let d = parse_duration(s).map_err(|e| e.to_string())?;
        check_duration(d, min, max)
    }
}

/// A duration where a bare number is seconds (send's iperf3-style options), between `min`
/// and `max`.
pub(crate) fn seconds(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let d = parse_duration_or_seconds(s).map_err(|e| e.to_string())?;
        check_duration(d, min, max)
    }
}

/// A rate in bits per second between `min` and `max`.
pub(crate) fn rate(
    min: Rate,
    max: Rate,
) -> impl Fn(&str) -> Result<Rate, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let r: Rate = s
            .parse()
            .map_err(|e: tcptune_core::ParseQuantityError| e.to_string())?;
        if r.0 == 0 {
            return Err("must be greater than zero".into());
        }
        if r < min {
            return Err(format!("must be at least {min}"));
        }
        if r > max {
            return Err(format!("must be at most {max}"));
        }
        Ok(r)
    }
}

/// A size in bytes between `min` and `max`.
pub(crate) fn size(
    min: Bytes,
    max: Bytes,
) -> impl Fn(&str) -> Result<Bytes, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let b: Bytes = s
            .parse()
            .map_err(|e: tcptune_core::ParseQuantityError| e.to_string())?;
        if b.0 == 0 {
            return Err("must be greater than zero".into());
        }
        if b < min {
            return Err(format!("must be at least {min}"));
        }
        if b > max {
            return Err(format!("must be at most {max}"));
        }
        Ok(b)
    }
}

/// Milliseconds.
pub(crate) const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Seconds.
pub(crate) const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_absurd_values_are_refused_with_the_bound() {
        let p = duration(ms(50), secs(3600));
        assert_eq!(p("1s"), Ok(secs(1)));
        assert_eq!(p("0s"), Err("must be greater than zero".into()));
        assert_eq!(p("10ms"), Err("must be at least 50ms".into()));
        assert_eq!(p("2h"), Err("must be at most 3600s".into()));
        assert!(p("1").unwrap_err().contains("1s or 1ms"));
        let s = seconds(ms(1), secs(86_400));
        assert_eq!(s("10"), Ok(secs(10)));
        assert_eq!(s("500ms"), Ok(ms(500)));
        let r = rate(Rate(1000), Rate::gbit(1000));
        assert_eq!(r("1Gbit/s"), Ok(Rate::gbit(1)));
        assert!(r("5").unwrap_err().contains("no unit"));
        assert_eq!(r("5bit"), Err("must be at least 1kbit/s".into()));
        let b = size(Bytes(1), Bytes::mib(16));
        assert_eq!(b("4 MiB"), Ok(Bytes::mib(4)));
        assert_eq!(b("0"), Err("must be greater than zero".into()));
    }
}
