//! What the database holds beyond the core's entries: where each measurement came from, and
//! the history of measurements.

use serde::{Serialize, Serializer};
use std::fmt;
use tcptune_core::pathdb::{Direction, PathEntry};

/// Where a measurement came from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// `send`'s pre-transfer bandwidth probe.
    Probe,
    /// What a transfer delivered (a lower bound), recorded by `send`.
    Transfer,
    /// What `serve` measured of a client's path.
    Server,
    /// A short measurement made to answer `advise`.
    Advise,
    /// Imported from the old JSON database (its source is unknown).
    Imported,
    /// What an unmodified program's connection achieved, reported by `tcptune agent` at its
    /// close (a lower bound).
    Agent,
    /// A name this build does not know (written by a newer tcptune).
    Other(String),
}

impl Source {
    /// The name stored and shown.
    pub fn as_str(&self) -> &str {
        match self {
            Source::Probe => "probe",
            Source::Transfer => "transfer",
            Source::Server => "server",
            Source::Advise => "advise",
            Source::Imported => "imported",
            Source::Agent => "agent",
            Source::Other(s) => s,
        }
    }

    /// The source of a stored name (unknown names are kept as [`Source::Other`]).
    pub fn from_name(s: &str) -> Source {
        match s {
            "probe" => Source::Probe,
            "transfer" => Source::Transfer,
            "server" => Source::Server,
            "advise" => Source::Advise,
            "imported" => Source::Imported,
            "agent" => Source::Agent,
            other => Source::Other(other.to_string()),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Source {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One path as stored: the core's entry plus where its numbers came from.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredEntry {
    /// The estimate (the core's type, as the core merged it).
    pub entry: PathEntry,
    /// The source of the measurement that set the current estimate.
    pub source: Source,
    /// The source of the latest measurement merged (it may have changed nothing).
    pub last_source: Source,
    /// When the latest measurement was merged, seconds since the Unix epoch.
    pub last_measured_unix_s: f64,
    /// The host that measured it (with SQLite: the latest host to change it).
    pub measured_by: crate::host::Host,
}

/// One measurement as recorded (the newest [`crate::HISTORY_PER_PATH`] of each path are
/// kept).
#[derive(Clone, Debug, PartialEq)]
pub struct StoredMeasurement {
    /// The peer's address.
    pub peer: String,
    /// Direction of the data.
    pub direction: Direction,
    /// The path's RTT bucket.
    pub rtt_bucket: i32,
    /// When, seconds since the Unix epoch.
    pub at_unix_s: f64,
    /// Where it came from.
    pub source: Source,
    /// Rate measured, bit/s.
    pub rate_bps: u64,
    /// Measured with a full pipe (else a lower bound).
    pub full_pipe: bool,
    /// Smallest RTT seen, microseconds.
    pub min_rtt_us: u64,
}

/// Order entries by peer, direction, RTT bucket and measuring host.
pub(crate) fn sort_entries(rows: &mut [StoredEntry]) {
    rows.sort_by(|a, b| {
        (
            a.entry.peer.as_str(),
            a.entry.direction as u8,
            a.entry.rtt_bucket,
            &a.measured_by,
        )
            .cmp(&(
                b.entry.peer.as_str(),
                b.entry.direction as u8,
                b.entry.rtt_bucket,
                &b.measured_by,
            ))
    });
}

/// The stored name of a direction.
pub(crate) fn direction_name(d: Direction) -> &'static str {
    match d {
        Direction::Send => "send",
        Direction::Receive => "receive",
    }
}

/// The direction of a stored name.
pub(crate) fn direction_from(s: &str) -> Option<Direction> {
    match s {
        "send" => Some(Direction::Send),
        "receive" => Some(Direction::Receive),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_names_round_trip_and_unknown_names_are_kept() {
        for s in [
            Source::Probe,
            Source::Transfer,
            Source::Server,
            Source::Advise,
            Source::Imported,
            Source::Agent,
        ] {
            assert_eq!(Source::from_name(s.as_str()), s);
        }
        assert_eq!(
            Source::from_name("satellite"),
            Source::Other("satellite".into())
        );
        assert_eq!(
            serde_json::to_string(&Source::Probe).expect("json"),
            "\"probe\""
        );
        assert_eq!(
            direction_from(direction_name(Direction::Receive)),
            Some(Direction::Receive)
        );
        assert_eq!(direction_from("sideways"), None);
    }
}
