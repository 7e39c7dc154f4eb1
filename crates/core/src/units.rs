//! Quantities with explicit units, and their command-line spellings.
//!
//! * [`Bytes`]: a byte count. Suffixes are binary, as in iperf3 and the papers ("64 KB" is
//!   65,536 bytes): `k`/`kb`/`kib` = 1024, `m`/`mb`/`mib` = 1024², `g`/`gb`/`gib` = 1024³.
//! * [`Rate`]: a bit rate. Suffixes are decimal, as for link speeds: `kbit` = 10³ bit/s,
//!   `mbit` = 10⁶, `gbit` = 10⁹ (`k`, `m`, `g`, `kbps`, `mbps`, `gbps` are accepted too).
//! * Durations: [`parse_duration`] accepts `ns`, `us`, `ms`, `s` with a decimal number
//!   (`0.5ms`, `25ms`, `1.5s`).
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
    /// The value does not fit in 64 bits.
    #[error("'{0}' is too large")]
    Overflow(String),
}

/// Split "12.5mbit" into (12.5, "mbit").
fn split_number(text: &str) -> Result<(f64, String), ParseQuantityError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(ParseQuantityError::Empty);
    }
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    let value: f64 = num
        .parse()
        .map_err(|_| ParseQuantityError::BadNumber(t.to_string()))?;
    if !value.is_finite() || value < 0.0 {
        return Err(ParseQuantityError::BadNumber(t.to_string()));
    }
    Ok((value, unit.trim().to_ascii_lowercase()))
}

fn scaled(text: &str, value: f64, scale: f64) -> Result<u64, ParseQuantityError> {
    let v = (value * scale).round();
    if v >= u64::MAX as f64 {
        return Err(ParseQuantityError::Overflow(text.to_string()));
    }
    Ok(v as u64)
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
}

impl FromStr for Bytes {
    type Err = ParseQuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (value, unit) = split_number(s)?;
        let scale = match unit.as_str() {
            "" | "b" => 1.0,
            "k" | "kb" | "kib" => Self::KIB as f64,
            "m" | "mb" | "mib" => Self::MIB as f64,
            "g" | "gb" | "gib" => Self::GIB as f64,
            _ => {
                return Err(ParseQuantityError::BadUnit {
                    text: s.to_string(),
                    unit,
                    expected: "b, k/kb/kib, m/mb/mib, g/gb/gib (binary)",
                })
            }
        };
        Ok(Bytes(scaled(s, value, scale)?))
    }
}

impl fmt::Display for Bytes {
    /// Human form with a binary unit: `64KiB`, `4MiB`, `1.5MiB`, `1000B`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        let (unit, div) = if v >= Self::GIB {
            ("GiB", Self::GIB)
        } else if v >= Self::MIB {
            ("MiB", Self::MIB)
        } else if v >= Self::KIB {
            ("KiB", Self::KIB)
        } else {
            return write!(f, "{v}B");
        };
        if v.is_multiple_of(div) {
            write!(f, "{}{unit}", v / div)
        } else {
            write!(f, "{:.1}{unit}", v as f64 / div as f64)
        }
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
}

impl FromStr for Rate {
    type Err = ParseQuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (value, unit) = split_number(s)?;
        let scale = match unit.as_str() {
            "" | "bit" | "bps" => 1.0,
            "k" | "kbit" | "kbps" => 1e3,
            "m" | "mbit" | "mbps" => 1e6,
            "g" | "gbit" | "gbps" => 1e9,
            _ => {
                return Err(ParseQuantityError::BadUnit {
                    text: s.to_string(),
                    unit,
                    expected: "bit, kbit, mbit, gbit (decimal)",
                })
            }
        };
        Ok(Rate(scaled(s, value, scale)?))
    }
}

impl fmt::Display for Rate {
    /// Human form with a decimal unit: `1gbit`, `100mbit`, `2.5gbit`, `64kbit`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        let (unit, div) = if v >= 1_000_000_000 {
            ("gbit", 1_000_000_000u64)
        } else if v >= 1_000_000 {
            ("mbit", 1_000_000)
        } else if v >= 1_000 {
            ("kbit", 1_000)
        } else {
            return write!(f, "{v}bit");
        };
        if v.is_multiple_of(div) {
            write!(f, "{}{unit}", v / div)
        } else {
            write!(f, "{:.3}{unit}", v as f64 / div as f64)
        }
    }
}

/// Parse a duration such as `25ms`, `0.5ms`, `1.5s`, `250us` or `10ns`.
///
/// A bare number is rejected: a delay without a unit is a mistake waiting to happen.
pub fn parse_duration(s: &str) -> Result<Duration, ParseQuantityError> {
    let (value, unit) = split_number(s)?;
    let scale = match unit.as_str() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" | "sec" => 1e9,
        _ => {
            return Err(ParseQuantityError::BadUnit {
                text: s.to_string(),
                unit,
                expected: "ns, us, ms, s",
            })
        }
    };
    Ok(Duration::from_nanos(scaled(s, value, scale)?))
}

/// Format a duration compactly for humans: `25ms`, `0.5ms`, `1.2s`, `800us`.
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos >= 1_000_000_000 {
        trim_float(d.as_secs_f64(), "s")
    } else if nanos >= 1_000_000 {
        trim_float(nanos as f64 / 1e6, "ms")
    } else if nanos >= 1_000 {
        trim_float(nanos as f64 / 1e3, "us")
    } else {
        format!("{nanos}ns")
    }
}

fn trim_float(v: f64, unit: &str) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_suffixes_are_binary() {
        assert_eq!("64k".parse::<Bytes>(), Ok(Bytes(65536)));
        assert_eq!("64KB".parse::<Bytes>(), Ok(Bytes(65536)));
        assert_eq!("4m".parse::<Bytes>(), Ok(Bytes(4 << 20)));
        assert_eq!("1.5MiB".parse::<Bytes>(), Ok(Bytes(3 << 19)));
        assert_eq!("1000".parse::<Bytes>(), Ok(Bytes(1000)));
        assert!("4x".parse::<Bytes>().is_err());
        assert!("".parse::<Bytes>().is_err());
        assert!("-1k".parse::<Bytes>().is_err());
        assert!("99999999999g".parse::<Bytes>().is_err());
    }

    #[test]
    fn rate_suffixes_are_decimal() {
        assert_eq!("1gbit".parse::<Rate>(), Ok(Rate(1_000_000_000)));
        assert_eq!("100mbit".parse::<Rate>(), Ok(Rate(100_000_000)));
        assert_eq!("2.5Gbit".parse::<Rate>(), Ok(Rate(2_500_000_000)));
        assert_eq!("64kbit".parse::<Rate>(), Ok(Rate(64_000)));
        assert!("1gbyte".parse::<Rate>().is_err());
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("25ms"), Ok(Duration::from_millis(25)));
        assert_eq!(parse_duration("0.25ms"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("25").is_err());
        assert_eq!(format_duration(Duration::from_micros(500)), "500us");
        assert_eq!(format_duration(Duration::from_micros(2500)), "2.5ms");
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
    fn display_round_trips_common_values() {
        for s in ["64KiB", "4MiB", "1GiB", "1000B"] {
            assert_eq!(s.parse::<Bytes>().map(|b| b.to_string()).as_deref(), Ok(s));
        }
        for s in ["1gbit", "100mbit", "64kbit"] {
            assert_eq!(s.parse::<Rate>().map(|r| r.to_string()).as_deref(), Ok(s));
        }
    }
}
