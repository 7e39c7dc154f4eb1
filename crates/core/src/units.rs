//! Quantities with explicit units: one parser and one formatter for each kind, used by every
//! command-line option and every output of tcptune.
//!
//! # Spellings
//!
//! Units are case-insensitive and may be separated from the number by a space (`4MiB`,
//! `4 MiB`, `4 mib`). Numbers are decimal (`1.5`), never negative, and parsed exactly (no
//! floating point): `0.1s` is exactly 100 ms.
//!
//! * [`Bytes`], sizes in bytes. `B` (or no unit) is bytes. Binary units: `KiB`, `MiB`, `GiB`,
//!   `TiB` and the single letters `k`, `m`, `g`, `t` (as in iperf3's `-l 128K`: `4M` is
//!   4 MiB). Decimal units: `kB`, `MB`, `GB`, `TB` (`4MB` is 4,000,000 bytes).
//! * [`Rate`], rates in bits per second. `bit/s` (also `bit`, `bps`), `kbit/s`, `Mbit/s`,
//!   `Gbit/s`, `Tbit/s` (also `kbit`, `kbps`, ...) and the single letters `k`, `m`, `g`, `t`
//!   (as in iperf3's `-b 500M`: `500M` is 500 Mbit/s). All decimal. A number without a unit
//!   is refused (`5` is not a rate), and so is a rate in bytes (`100MB/s`: write `800mbit`).
//! * Durations ([`parse_duration`]): `ns`, `us` (or `µs`), `ms`, `s`, `min`, `h`. A number
//!   without a unit is refused, except by [`parse_duration_or_seconds`], which the
//!   iperf3-compatible options of `tcptune send` use (`-t 10` is 10 s, as in iperf3).
//!
//! # Output
//!
//! Each kind prints in two forms, both accepted back by its parser:
//!
//! * exact ([`fmt::Display`] of [`Bytes`] and [`Rate`], [`format_duration`]): compact, no
//!   rounding, for values a user gave and the tool echoes (`fixed:16MiB`, `25ms`,
//!   `1Gbit/s`): `parse(format(x)) == x` always holds;
//! * human ([`Bytes::human`], [`Rate::human`], [`human_bps`], [`human_duration`]): three
//!   significant digits and a space before the unit, for measurements in tables and reports
//!   (`16 MiB`, `18.1 Gbit/s`, `35 us`).
//!
//! Arithmetic helpers ([`Rate::bdp`], [`Rate::time_to_send`]) round in a documented direction.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Why a quantity could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseQuantityError {
    /// The text was empty.
    #[error("empty value")]
    Empty,
    /// The number part was not a non-negative decimal number.
    #[error("'{0}' is not a number")]
    BadNumber(String),
    /// The unit was not one of the accepted spellings.
    #[error("unknown unit '{unit}' in '{text}' (expected one of: {expected})")]
    BadUnit {
        /// The full text.
        text: String,
        /// The unit part.
        unit: String,
        /// The accepted units.
        expected: &'static str,
    },
    /// A number without the unit this kind of quantity needs.
    #[error("'{text}' has no unit: write it with one, e.g. {example} ({expected})")]
    MissingUnit {
        /// The full text.
        text: String,
        /// The same number with a unit.
        example: String,
        /// The accepted units.
        expected: &'static str,
    },
    /// A rate given in bytes per second.
    #[error("'{text}' is a rate in bytes; rates are in bits per second: write {bits}")]
    BytesPerSecond {
        /// The full text.
        text: String,
        /// The same rate in bits.
        bits: String,
    },
    /// The value does not fit in 64 bits.
    #[error("'{0}' is too large")]
    Overflow(String),
}

const SIZE_UNITS: &str =
    "B, KiB/MiB/GiB/TiB or k/m/g/t (binary), kB/MB/GB/TB (decimal); e.g. 4MiB, 64k, 1500";
const RATE_UNITS: &str =
    "bit/s, kbit/s, Mbit/s, Gbit/s, Tbit/s, or k/m/g/t (decimal bits); e.g. 1gbit, 500M";
const DURATION_UNITS: &str = "ns, us, ms, s, min, h; e.g. 25ms, 1.5s";

/// A non-negative decimal number, exactly: `mantissa / 10^scale`.
#[derive(Clone, Copy, Debug)]
struct Decimal {
    mantissa: u128,
    scale: u32,
}

impl Decimal {
    /// `self * factor`, rounded to the nearest integer; `None` past `u64::MAX`.
    fn times(self, factor: u128) -> Option<u64> {
        let div = 10u128.checked_pow(self.scale)?;
        let num = self.mantissa.checked_mul(factor)?;
        let v = (num + div / 2) / div;
        u64::try_from(v).ok()
    }
}

/// Split "12.5 mbit" into (12.5, "mbit") with the unit's original case.
fn split_number(text: &str) -> Result<(Decimal, String), ParseQuantityError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(ParseQuantityError::Empty);
    }
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    let bad = || ParseQuantityError::BadNumber(t.to_string());
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(bad());
    }
    // Digits past the 30th cannot change a u64 after scaling by at most 10^12; drop them.
    let frac = &frac[..frac.len().min(30)];
    let digits = format!("{int}{frac}");
    let mantissa: u128 = if digits.len() > 38 {
        return Err(ParseQuantityError::Overflow(t.to_string()));
    } else {
        digits.parse().map_err(|_| bad())?
    };
    let scale = u32::try_from(frac.len()).map_err(|_| bad())?;
    Ok((Decimal { mantissa, scale }, unit.trim().to_string()))
}

fn scaled(text: &str, value: Decimal, factor: u128) -> Result<u64, ParseQuantityError> {
    value
        .times(factor)
        .ok_or_else(|| ParseQuantityError::Overflow(text.trim().to_string()))
}

/// `v / div` with at most `max_decimals` decimals, exactly, trailing zeros trimmed; `None`
/// when it does not fit.
fn exact_ratio(v: u64, div: u64, max_decimals: u32) -> Option<String> {
    let int = v / div;
    let rem = v % div;
    if rem == 0 {
        return Some(int.to_string());
    }
    if max_decimals == 0 {
        return None;
    }
    let p = 10u128.pow(max_decimals);
    let scaled = u128::from(rem) * p;
    if !scaled.is_multiple_of(u128::from(div)) {
        return None;
    }
    let frac = format!(
        "{:0width$}",
        scaled / u128::from(div),
        width = max_decimals as usize
    );
    Some(format!("{int}.{}", frac.trim_end_matches('0')))
}

/// Three significant digits (`1.18`, `11.8`, `118`), trailing zeros trimmed.
fn sig3(v: f64) -> String {
    let s = if v >= 99.95 {
        format!("{v:.0}")
    } else if v >= 9.995 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A byte count.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Bytes(pub u64);

impl Bytes {
    /// Zero bytes.
    pub const ZERO: Bytes = Bytes(0);
    /// One KiB.
    pub const KIB: u64 = 1024;
    /// One MiB.
    pub const MIB: u64 = 1024 * 1024;
    /// One GiB.
    pub const GIB: u64 = 1024 * 1024 * 1024;
    /// One TiB.
    pub const TIB: u64 = 1024 * 1024 * 1024 * 1024;

    /// `n` KiB.
    pub const fn kib(n: u64) -> Bytes {
        Bytes(n * Self::KIB)
    }

    /// `n` MiB.
    pub const fn mib(n: u64) -> Bytes {
        Bytes(n * Self::MIB)
    }

    /// The count as `u64`.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The count as a `u32`, saturating (socket options take `int`-sized values).
    pub fn saturating_u32(self) -> u32 {
        u32::try_from(self.0).unwrap_or(u32::MAX)
    }

    /// The count in MiB as a float, for reports.
    pub fn as_mib_f64(self) -> f64 {
        self.0 as f64 / Self::MIB as f64
    }

    /// For people: three significant digits of the largest binary unit that fits, with a
    /// space (`16 MiB`, `1.18 MiB`, `640 KiB`, `900 B`).
    pub fn human(self) -> String {
        let b = self.0;
        let (div, unit) = if b >= Self::TIB {
            (Self::TIB, "TiB")
        } else if b >= Self::GIB {
            (Self::GIB, "GiB")
        } else if b >= Self::MIB {
            (Self::MIB, "MiB")
        } else if b >= Self::KIB {
            (Self::KIB, "KiB")
        } else {
            return format!("{b} B");
        };
        format!("{} {unit}", sig3(b as f64 / div as f64))
    }
}

impl FromStr for Bytes {
    type Err = ParseQuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (value, unit) = split_number(s)?;
        let factor: u128 = match unit.to_ascii_lowercase().as_str() {
            "" | "b" | "byte" | "bytes" => 1,
            "k" | "kib" => 1 << 10,
            "m" | "mib" => 1 << 20,
            "g" | "gib" => 1 << 30,
            "t" | "tib" => 1 << 40,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "tb" => 1_000_000_000_000,
            _ => {
                return Err(ParseQuantityError::BadUnit {
                    text: s.trim().to_string(),
                    unit,
                    expected: SIZE_UNITS,
                })
            }
        };
        Ok(Bytes(scaled(s, value, factor)?))
    }
}

impl fmt::Display for Bytes {
    /// Exact and compact: the largest binary unit that holds the count with at most three
    /// decimals (`64KiB`, `4MiB`, `1.5MiB`), else a decimal unit (`4MB`), else bytes
    /// (`1234567B`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        const BINARY: [(u64, &str); 4] = [
            (Bytes::TIB, "TiB"),
            (Bytes::GIB, "GiB"),
            (Bytes::MIB, "MiB"),
            (Bytes::KIB, "KiB"),
        ];
        const DECIMAL: [(u64, &str); 4] = [
            (1_000_000_000_000, "TB"),
            (1_000_000_000, "GB"),
            (1_000_000, "MB"),
            (1_000, "kB"),
        ];
        // Binary with at most one decimal (`1.5MiB`), then decimal whole numbers (`4MB`),
        // then either with up to three decimals.
        let passes: [(&[(u64, &str)], u32); 3] = [(&BINARY, 1), (&DECIMAL, 0), (&BINARY, 3)];
        for (units, decimals) in passes {
            for &(div, unit) in units {
                if v >= div {
                    if let Some(n) = exact_ratio(v, div, decimals) {
                        return write!(f, "{n}{unit}");
                    }
                }
            }
        }
        write!(f, "{v}B")
    }
}

/// A bit rate in bits per second.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Rate(pub u64);

impl Rate {
    /// `n` Mbit/s (10⁶ bit/s).
    pub const fn mbit(n: u64) -> Rate {
        Rate(n * 1_000_000)
    }

    /// `n` Gbit/s (10⁹ bit/s).
    pub const fn gbit(n: u64) -> Rate {
        Rate(n * 1_000_000_000)
    }

    /// Bits per second.
    pub const fn bits_per_sec(self) -> u64 {
        self.0
    }

    /// Bytes per second (truncated).
    pub const fn bytes_per_sec(self) -> u64 {
        self.0 / 8
    }

    /// The rate that moves `bytes` in `elapsed` (zero for a zero duration).
    pub fn from_bytes_over(bytes: Bytes, elapsed: Duration) -> Rate {
        let secs = elapsed.as_secs_f64();
        if secs <= 0.0 {
            return Rate(0);
        }
        Rate((bytes.0 as f64 * 8.0 / secs).round() as u64)
    }

    /// Bandwidth-delay product: the bytes in flight at this rate over `rtt` (rounded up).
    pub fn bdp(self, rtt: Duration) -> Bytes {
        let bits = self.0 as u128 * rtt.as_nanos();
        Bytes(u64::try_from(bits.div_ceil(8 * 1_000_000_000)).unwrap_or(u64::MAX))
    }

    /// Time needed to serialize `bytes` at this rate (rounded up; `Duration::MAX` at zero rate).
    pub fn time_to_send(self, bytes: Bytes) -> Duration {
        if self.0 == 0 {
            return Duration::MAX;
        }
        let nanos = (bytes.0 as u128 * 8 * 1_000_000_000).div_ceil(self.0 as u128);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The rate in Mbit/s as a float, for reports.
    pub fn as_mbit_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// For people: three significant digits with a space (`18.1 Gbit/s`, `950 Mbit/s`).
    pub fn human(self) -> String {
        human_bps(self.0 as f64)
    }

    /// Compact, exact and lowercase, without a slash (`1gbit`, `2.5mbit`): the spelling of
    /// `--tune manual:RATE` that every version of the server parses.
    pub fn compact(self) -> String {
        let s = self.to_string();
        s.trim_end_matches("/s").to_ascii_lowercase()
    }
}

/// A rate in bit/s for people (`18.1 Gbit/s`, `950 Mbit/s`, `0 bit/s`); the one formatter of
/// measured rates (which are floats in iperf3's JSON).
pub fn human_bps(bps: f64) -> String {
    let bps = if bps.is_finite() { bps.max(0.0) } else { 0.0 };
    let (div, unit) = if bps >= 999.5e9 {
        (1e12, "Tbit/s")
    } else if bps >= 999.5e6 {
        (1e9, "Gbit/s")
    } else if bps >= 999.5e3 {
        (1e6, "Mbit/s")
    } else if bps >= 999.5 {
        (1e3, "kbit/s")
    } else {
        return format!("{bps:.0} bit/s");
    };
    format!("{} {unit}", sig3(bps / div))
}

impl FromStr for Rate {
    type Err = ParseQuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (value, unit) = split_number(s)?;
        if unit.is_empty() {
            return Err(ParseQuantityError::MissingUnit {
                text: s.trim().to_string(),
                example: format!("{}mbit or {}gbit", s.trim(), s.trim()),
                expected: RATE_UNITS,
            });
        }
        let base = ["/s", "/sec", "ps"]
            .iter()
            .find_map(|suffix| unit.strip_suffix(suffix))
            .unwrap_or(&unit);
        let lower = base.to_ascii_lowercase();
        // `MB/s`, `MBps`, `MiB/s`, `mbyte/s`: bytes (a capital B), which a rate never is here.
        if lower.contains("byte") || (base.ends_with('B') && !lower.ends_with("bit")) {
            let binary = lower.get(1..2) == Some("i");
            let factor: u128 = match (lower.chars().next(), binary) {
                (Some('k'), false) => 1_000,
                (Some('m'), false) => 1_000_000,
                (Some('g'), false) => 1_000_000_000,
                (Some('t'), false) => 1_000_000_000_000,
                (Some('k'), true) => 1 << 10,
                (Some('m'), true) => 1 << 20,
                (Some('g'), true) => 1 << 30,
                (Some('t'), true) => 1 << 40,
                _ => 1,
            };
            let bits = value
                .times(factor * 8)
                .map_or_else(|| "a rate in bits".to_string(), |b| Rate(b).compact());
            return Err(ParseQuantityError::BytesPerSecond {
                text: s.trim().to_string(),
                bits,
            });
        }
        let base = lower.strip_suffix("bit").unwrap_or(&lower);
        let base = base.strip_suffix('b').unwrap_or(base);
        let factor: u128 = match base {
            "" => 1,
            "k" => 1_000,
            "m" => 1_000_000,
            "g" => 1_000_000_000,
            "t" => 1_000_000_000_000,
            _ => {
                return Err(ParseQuantityError::BadUnit {
                    text: s.trim().to_string(),
                    unit,
                    expected: RATE_UNITS,
                })
            }
        };
        Ok(Rate(scaled(s, value, factor)?))
    }
}

impl fmt::Display for Rate {
    /// Exact and compact, in the largest decimal unit that fits (`1Gbit/s`, `2.5Gbit/s`,
    /// `42.982123456Gbit/s`, `64kbit/s`, `5bit/s`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        let units: [(u64, &str); 4] = [
            (1_000_000_000_000, "Tbit/s"),
            (1_000_000_000, "Gbit/s"),
            (1_000_000, "Mbit/s"),
            (1_000, "kbit/s"),
        ];
        for (div, unit) in units {
            if v >= div {
                if let Some(n) = exact_ratio(v, div, div.ilog10()) {
                    return write!(f, "{n}{unit}");
                }
            }
        }
        write!(f, "{v}bit/s")
    }
}

fn duration_from(text: &str, value: Decimal, unit: &str) -> Result<Duration, ParseQuantityError> {
    let nanos_per: u128 = match unit.to_ascii_lowercase().as_str() {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" | "sec" | "secs" => 1_000_000_000,
        "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => {
            return Err(ParseQuantityError::BadUnit {
                text: text.trim().to_string(),
                unit: unit.to_string(),
                expected: DURATION_UNITS,
            })
        }
    };
    Ok(Duration::from_nanos(scaled(text, value, nanos_per)?))
}

/// Parse a duration such as `25ms`, `0.5ms`, `1.5s`, `250us` or `10ns`.
///
/// A bare number is rejected, naming the units: a delay without a unit is a mistake waiting
/// to happen (`--rtt 50`: 50 ms or 50 s?).
pub fn parse_duration(s: &str) -> Result<Duration, ParseQuantityError> {
    let (value, unit) = split_number(s)?;
    if unit.is_empty() {
        let t = s.trim();
        return Err(ParseQuantityError::MissingUnit {
            text: t.to_string(),
            example: format!("{t}s or {t}ms"),
            expected: DURATION_UNITS,
        });
    }
    duration_from(s, value, &unit)
}

/// [`parse_duration`], except that a bare number is seconds: the convention of iperf3's
/// options (`-t 10`), kept by `tcptune send`'s duration options only.
pub fn parse_duration_or_seconds(s: &str) -> Result<Duration, ParseQuantityError> {
    let (value, unit) = split_number(s)?;
    duration_from(s, value, if unit.is_empty() { "s" } else { &unit })
}

/// Format a duration exactly and compactly: `25ms`, `0.5ms`, `1.2s`, `800us`, `10ns`.
/// [`parse_duration`] gives back the same duration.
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    let (div, unit) = if nanos >= 1_000_000_000 {
        (1_000_000_000u128, "s")
    } else if nanos >= 1_000_000 {
        (1_000_000, "ms")
    } else if nanos >= 1_000 {
        (1_000, "us")
    } else {
        return format!("{nanos}ns");
    };
    let int = nanos / div;
    let rem = nanos % div;
    if rem == 0 {
        return format!("{int}{unit}");
    }
    let width = div.ilog10() as usize;
    let frac = format!("{rem:0width$}");
    format!("{int}.{}{unit}", frac.trim_end_matches('0'))
}

/// A duration for people: three significant digits with a space (`100 ms`, `0.25 ms` is
/// `250 us`, `1.2 s`, `35 us`).
pub fn human_duration(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns >= 999.5e6 {
        format!("{} s", sig3(ns / 1e9))
    } else if ns >= 999.5e3 {
        format!("{} ms", sig3(ns / 1e6))
    } else if ns >= 999.5 {
        format!("{} us", sig3(ns / 1e3))
    } else {
        format!("{ns:.0} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn single_letters_and_iec_units_are_binary_si_units_decimal() {
        assert_eq!("64k".parse::<Bytes>(), Ok(Bytes(65536)));
        assert_eq!("64KiB".parse::<Bytes>(), Ok(Bytes(65536)));
        assert_eq!("64KB".parse::<Bytes>(), Ok(Bytes(64_000)));
        assert_eq!("256kb".parse::<Bytes>(), Ok(Bytes(256_000)));
        assert_eq!("4m".parse::<Bytes>(), Ok(Bytes(4 << 20)));
        assert_eq!("4M".parse::<Bytes>(), Ok(Bytes(4 << 20)));
        assert_eq!("4 MiB".parse::<Bytes>(), Ok(Bytes(4 << 20)));
        assert_eq!("4MB".parse::<Bytes>(), Ok(Bytes(4_000_000)));
        assert_eq!("1.5MiB".parse::<Bytes>(), Ok(Bytes(3 << 19)));
        assert_eq!("16.0 MiB".parse::<Bytes>(), Ok(Bytes(16 << 20)));
        assert_eq!("1000".parse::<Bytes>(), Ok(Bytes(1000)));
        assert_eq!("1000 B".parse::<Bytes>(), Ok(Bytes(1000)));
        assert!("4x".parse::<Bytes>().is_err());
        assert!("".parse::<Bytes>().is_err());
        assert!("-1k".parse::<Bytes>().is_err());
        assert!("1.2.3k".parse::<Bytes>().is_err());
        assert!(".".parse::<Bytes>().is_err());
        assert!("99999999999g".parse::<Bytes>().is_err());
    }

    #[test]
    fn rates_are_decimal_bits_in_every_printed_spelling() {
        for (s, v) in [
            ("1gbit", 1_000_000_000),
            ("1Gbit/s", 1_000_000_000),
            ("1 Gbit/s", 1_000_000_000),
            ("18.1 Gbit/s", 18_100_000_000),
            ("1gbps", 1_000_000_000),
            ("500M", 500_000_000),
            ("500mbit", 500_000_000),
            ("100mbit", 100_000_000),
            ("2.5Gbit", 2_500_000_000),
            ("64kbit", 64_000),
            ("5bit/s", 5),
            ("5 bit/s", 5),
            ("20204.8 Mbit/s", 20_204_800_000),
        ] {
            assert_eq!(s.parse::<Rate>(), Ok(Rate(v)), "{s}");
        }
        assert!("1gbyte".parse::<Rate>().is_err());
    }

    #[test]
    fn a_rate_without_a_unit_or_in_bytes_is_refused_with_the_fix() {
        let e = "5".parse::<Rate>().expect_err("bare");
        assert!(e.to_string().contains("5mbit"), "{e}");
        for s in ["100MB/s", "100 MBps", "100MiB/s", "12 B/s"] {
            let e = s.parse::<Rate>().expect_err(s);
            assert!(
                matches!(e, ParseQuantityError::BytesPerSecond { .. }),
                "{s}: {e}"
            );
        }
        assert_eq!(
            "100MB/s".parse::<Rate>().map_err(|e| e.to_string()),
            Err("'100MB/s' is a rate in bytes; rates are in bits per second: write 800mbit".into())
        );
    }

    #[test]
    fn durations_need_a_unit_except_for_iperf3_seconds() {
        assert_eq!(parse_duration("25ms"), Ok(Duration::from_millis(25)));
        assert_eq!(parse_duration("25 ms"), Ok(Duration::from_millis(25)));
        assert_eq!(parse_duration("0.25ms"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0.1s"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration("2min"), Ok(Duration::from_secs(120)));
        let e = parse_duration("25").expect_err("bare");
        assert!(e.to_string().contains("25s or 25ms"), "{e}");
        assert_eq!(parse_duration_or_seconds("10"), Ok(Duration::from_secs(10)));
        assert_eq!(
            parse_duration_or_seconds("500ms"),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(format_duration(Duration::from_micros(500)), "500us");
        assert_eq!(format_duration(Duration::from_micros(2500)), "2.5ms");
        assert_eq!(
            format_duration(Duration::from_nanos(1_000_000_001)),
            "1.000000001s"
        );
    }

    #[test]
    fn human_forms_have_three_digits_and_parse_back() {
        assert_eq!(Bytes(16 << 20).human(), "16 MiB");
        assert_eq!(Bytes(1_234_567).human(), "1.18 MiB");
        assert_eq!(Bytes(900).human(), "900 B");
        assert_eq!(human_bps(18.104e9), "18.1 Gbit/s");
        assert_eq!(human_bps(20_204.8e6), "20.2 Gbit/s");
        assert_eq!(human_bps(999.9e6), "1 Gbit/s");
        assert_eq!(human_bps(11.4e6), "11.4 Mbit/s");
        assert_eq!(human_duration(Duration::from_micros(35)), "35 us");
        assert_eq!(human_duration(Duration::from_micros(12_345)), "12.3 ms");
        for s in ["16 MiB", "1.18 MiB", "900 B"] {
            assert!(s.parse::<Bytes>().is_ok(), "{s}");
        }
        for s in ["18.1 Gbit/s", "11.4 Mbit/s", "0 bit/s"] {
            assert!(s.parse::<Rate>().is_ok(), "{s}");
        }
        for s in ["35 us", "12.3 ms", "1.2 s"] {
            assert!(parse_duration(s).is_ok(), "{s}");
        }
    }

    #[test]
    fn bdp_of_gigabit_at_100ms_is_12_5_megabytes() {
        assert_eq!(
            Rate::gbit(1).bdp(Duration::from_millis(100)),
            Bytes(12_500_000)
        );
        assert_eq!(
            Rate::gbit(1).time_to_send(Bytes(1500)),
            Duration::from_nanos(12_000)
        );
        assert_eq!(Rate(0).time_to_send(Bytes(1)), Duration::MAX);
    }

    #[test]
    fn display_is_exact_and_compact() {
        for (v, s) in [
            (65536, "64KiB"),
            (4 << 20, "4MiB"),
            (1 << 30, "1GiB"),
            (1000, "1kB"),
            (4_000_000, "4MB"),
            (1_234_567, "1234567B"),
            (3 << 19, "1.5MiB"),
        ] {
            assert_eq!(Bytes(v).to_string(), s);
        }
        for (v, s) in [
            (1_000_000_000, "1Gbit/s"),
            (100_000_000, "100Mbit/s"),
            (64_000, "64kbit/s"),
            (5, "5bit/s"),
            (42_982_123_456, "42.982123456Gbit/s"),
        ] {
            assert_eq!(Rate(v).to_string(), s);
        }
        assert_eq!(Rate::gbit(1).compact(), "1gbit");
    }

    proptest! {
        #[test]
        fn bytes_parse_their_own_display(v in any::<u64>()) {
            prop_assert_eq!(Bytes(v).to_string().parse::<Bytes>(), Ok(Bytes(v)));
        }

        #[test]
        fn rates_parse_their_own_display(v in any::<u64>()) {
            prop_assert_eq!(Rate(v).to_string().parse::<Rate>(), Ok(Rate(v)));
            prop_assert_eq!(Rate(v).compact().parse::<Rate>(), Ok(Rate(v)));
        }

        #[test]
        fn durations_parse_their_own_format(ns in any::<u64>()) {
            let d = Duration::from_nanos(ns);
            prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }

        #[test]
        fn human_forms_parse_back_to_within_half_a_percent(v in 1u64..u64::MAX / 2) {
            let b = Bytes(v).human().parse::<Bytes>().map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!((b.0 as f64 - v as f64).abs() <= v as f64 * 0.005 + 1.0);
            let r = Rate(v).human().parse::<Rate>().map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!((r.0 as f64 - v as f64).abs() <= v as f64 * 0.005 + 1.0);
            let d = Duration::from_nanos(v % 1_000_000_000_000_000);
            let back = parse_duration(&human_duration(d)).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!((back.as_nanos() as f64 - d.as_nanos() as f64).abs() <= d.as_nanos() as f64 * 0.005 + 1.0);
        }
    }
}
