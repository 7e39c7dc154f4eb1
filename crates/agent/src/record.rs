//! The program's ring-buffer records (`struct tt_record` in `bpf/sockops.c`) as typed values,
//! and a close record as a measurement for the path database.
//!
//! Every record is checked before use: its length against [`RECORD_LEN`], its version and its
//! kind. A close record becomes a **lower bound** on the path's rate: the program has no
//! signal that separates a full pipe from a connection limited by its application or its
//! buffers (it samples no RTTs), so it never claims a full pipe; the path database's merge
//! raises an entry with a lower bound but never lowers one.

use serde::Serialize;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;
use tcptune_core::pathdb::{Direction, Measurement};
use tcptune_core::Rate;

/// Size of `struct tt_record`.
pub const RECORD_LEN: usize = 112;
/// Size of `struct tt_override`.
pub const OVERRIDE_LEN: usize = 56;
/// `SO_SNDBUF`.
const SO_SNDBUF: u32 = 7;
/// `SO_RCVBUF`.
const SO_RCVBUF: u32 = 8;
/// The version this build reads (`TT_RECORD_VERSION`).
pub const RECORD_VERSION: u16 = 1;
/// Connections that moved less than this (either way) are reported but not recorded: their
/// rate says more about the application than about the path.
pub const MIN_BYTES_TO_RECORD: u64 = 1 << 20;

/// Bits of [`ConnRecord::applied`] (the `A_*` of the program).
pub mod applied {
    /// `SO_SNDBUF` was set.
    pub const SNDBUF: u32 = 1;
    /// `SO_RCVBUF` was set.
    pub const RCVBUF: u32 = 2;
    /// `TCP_CONGESTION` was set.
    pub const CC: u32 = 4;
    /// `SO_MAX_PACING_RATE` was set.
    pub const PACING: u32 = 8;
    /// `TCP_BPF_IW` was set.
    pub const IW: u32 = 16;
    /// A policy matched the destination.
    pub const KNOWN: u32 = 32;
    /// The handshake RTT was outside the policy's RTT bucket: nothing was applied.
    pub const RTT_OUTSIDE: u32 = 64;
    /// Advise mode: the bits say what would have been set; nothing was.
    pub const ADVISED: u32 = 128;
    /// The kernel refused one of the settings.
    pub const FAILED: u32 = 256;
    /// The pacing cap was lifted after careful resume's two round trips (or a
    /// retransmission): the connection was paced only while its first windows left.
    pub const LIFTED: u32 = 512;
    /// Accepted from a listener the agent raised, from a peer with a policy: it was offered
    /// the listener's receive window from the handshake on.
    pub const RWND: u32 = 1024;
    /// Accepted from a listener the agent raised, from a peer without a policy: its initial
    /// window was held to the one Linux offered before 6.10 (64 KiB).
    pub const RWND_HELD: u32 = 2048;
    /// Every setting bit with its name.
    pub const NAMES: [(u32, &str); 6] = [
        (SNDBUF, "sndbuf"),
        (RCVBUF, "rcvbuf"),
        (CC, "congestion"),
        (PACING, "pacing"),
        (IW, "initial_window"),
        (RWND, "receive_window"),
    ];
}

/// Why bytes from the ring buffer are not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Shorter than a record of its kind.
    #[error("a ring buffer record of {len} bytes (one of its kind has {want})")]
    Short {
        /// Its length.
        len: usize,
        /// The length of its kind.
        want: usize,
    },
    /// Another version of the program wrote it.
    #[error("a ring buffer record of version {found} (this tcptune reads {RECORD_VERSION})")]
    Version {
        /// The version found.
        found: u16,
    },
    /// A kind this build does not know.
    #[error("a ring buffer record of unknown kind {found}")]
    Kind {
        /// The kind found.
        found: u16,
    },
}

/// What a record reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A connection closed.
    Close,
    /// Advise mode: what would have been set on a new connection.
    Advice,
}

/// Who opened the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Opened {
    /// This host connected (`connect`).
    Active,
    /// The peer connected (`accept`).
    Passive,
}

/// One record, checked.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConnRecord {
    /// What it reports.
    pub kind: Kind,
    /// The peer (IPv4 unmapped).
    pub peer: IpAddr,
    /// The peer's port.
    pub peer_port: u16,
    /// This host's address.
    pub local: IpAddr,
    /// This host's port.
    pub local_port: u16,
    /// Who opened the connection.
    pub opened: Opened,
    /// The smoothed RTT at `*_ESTABLISHED` (the handshake's), microseconds.
    pub handshake_rtt_us: u32,
    /// The smallest RTT seen, microseconds.
    pub min_rtt_us: u32,
    /// The smoothed RTT at the end, microseconds.
    pub srtt_us: u32,
    /// Bytes the peer acknowledged (sent by this host).
    pub bytes_acked: u64,
    /// Bytes received from the peer.
    pub bytes_received: u64,
    /// Segments retransmitted.
    pub retransmits: u32,
    /// From `*_ESTABLISHED` to the record, microseconds.
    pub duration_us: u64,
    /// The last delivery-rate sample, bit/s (0: none).
    pub delivery_rate_bps: u64,
    /// The policy that matched (0: none).
    pub policy_id: u32,
    /// Raw `A_*` bits ([`applied`]).
    pub applied_bits: u32,
    /// What was set (in advise mode: what would have been).
    pub applied: Vec<&'static str>,
    /// The application had fixed its send buffer (`SO_SNDBUF`; left alone).
    pub app_locked_sndbuf: bool,
    /// The application had fixed its receive buffer (`SO_RCVBUF`; left alone).
    pub app_locked_rcvbuf: bool,
    /// The application paced the connection itself (`SO_MAX_PACING_RATE`, before the agent
    /// could, or over the agent's cap before it was lifted): its pacing was left as it was.
    pub app_paced: bool,
    /// The application chose the congestion control itself (`TCP_CONGESTION`; left alone).
    pub app_congestion: bool,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn addr_at(b: &[u8], at: usize) -> IpAddr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    let v6 = Ipv6Addr::from(a);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// Parse one record (its length is checked first; extra bytes from a newer program that kept
/// the version are ignored).
pub fn parse(bytes: &[u8]) -> Result<ConnRecord, RecordError> {
    if bytes.len() < RECORD_LEN {
        return Err(RecordError::Short {
            len: bytes.len(),
            want: RECORD_LEN,
        });
    }
    let b = &bytes[..RECORD_LEN];
    let version = u16_at(b, 0);
    if version != RECORD_VERSION {
        return Err(RecordError::Version { found: version });
    }
    let kind = match u16_at(b, 2) {
        1 => Kind::Close,
        2 => Kind::Advice,
        found => return Err(RecordError::Kind { found }),
    };
    let flags = u32_at(b, 4);
    let (delivered, interval_us, mss) = (u32_at(b, 88), u32_at(b, 92), u32_at(b, 96));
    let delivery_rate_bps = if interval_us == 0 {
        0
    } else {
        (u128::from(delivered) * u128::from(mss) * 8 * 1_000_000 / u128::from(interval_us))
            .min(u128::from(u64::MAX)) as u64
    };
    let applied_bits = u32_at(b, 100);
    let locked = u32_at(b, 104);
    Ok(ConnRecord {
        kind,
        peer: addr_at(b, 8),
        peer_port: u16_at(b, 40),
        local: addr_at(b, 24),
        local_port: u16_at(b, 42),
        opened: if flags & 1 != 0 {
            Opened::Passive
        } else {
            Opened::Active
        },
        handshake_rtt_us: u32_at(b, 44),
        min_rtt_us: u32_at(b, 48),
        srtt_us: u32_at(b, 52),
        bytes_acked: u64_at(b, 56),
        bytes_received: u64_at(b, 64),
        retransmits: u32_at(b, 72),
        policy_id: u32_at(b, 76),
        duration_us: u64_at(b, 80) / 1000,
        delivery_rate_bps,
        applied_bits,
        applied: applied::NAMES
            .iter()
            .filter(|(bit, _)| applied_bits & bit != 0)
            .map(|(_, name)| *name)
            .collect(),
        app_locked_sndbuf: locked & 1 != 0,
        app_locked_rcvbuf: locked & 2 != 0,
        app_paced: locked & 4 != 0,
        app_congestion: locked & 8 != 0,
    })
}

/// An application's buffer request that `--override-app-buffers` raised to the path's need.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OverrideRecord {
    /// Always `override`.
    pub kind: &'static str,
    /// The process (its thread group ID).
    pub pid: u32,
    /// Its name (`comm`, up to 15 bytes).
    pub comm: String,
    /// The socket's peer, `None` before `connect` (or on a listener).
    pub peer: Option<IpAddr>,
    /// `SO_SNDBUF` or `SO_RCVBUF`.
    pub option: &'static str,
    /// What the application asked for, bytes.
    pub requested_bytes: u32,
    /// What the path needs (requests below it are ignored), bytes.
    pub need_bytes: u32,
}

/// Anything the ring buffer carries.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A connection closed, or advise mode's advice.
    Conn(ConnRecord),
    /// An application's request raised to the path's need.
    Override(OverrideRecord),
}

/// Parse one ring buffer item of any kind (each kind's length is checked first).
pub fn parse_event(bytes: &[u8]) -> Result<Event, RecordError> {
    if bytes.len() < 4 {
        return Err(RecordError::Short {
            len: bytes.len(),
            want: 4,
        });
    }
    if u16_at(bytes, 2) != 3 {
        return parse(bytes).map(Event::Conn);
    }
    if bytes.len() < OVERRIDE_LEN {
        return Err(RecordError::Short {
            len: bytes.len(),
            want: OVERRIDE_LEN,
        });
    }
    let b = &bytes[..OVERRIDE_LEN];
    let version = u16_at(b, 0);
    if version != RECORD_VERSION {
        return Err(RecordError::Version { found: version });
    }
    let comm_bytes = &b[24..40];
    let end = comm_bytes.iter().position(|c| *c == 0).unwrap_or(16);
    let peer = addr_at(b, 8);
    let option = match u32_at(b, 40) {
        SO_SNDBUF => "SO_SNDBUF",
        SO_RCVBUF => "SO_RCVBUF",
        _ => "?",
    };
    Ok(Event::Override(OverrideRecord {
        kind: "override",
        pid: u32_at(b, 4),
        comm: String::from_utf8_lossy(&comm_bytes[..end]).into_owned(),
        peer: (!peer.is_unspecified() && b[8..24] != [0u8; 16]).then_some(peer),
        option,
        requested_bytes: u32_at(b, 44),
        need_bytes: u32_at(b, 48),
    }))
}

impl OverrideRecord {
    /// The log line: which process, which destination, what was ignored.
    pub fn line(&self) -> String {
        format!(
            "overrode {} ({}) {}={} {}: below the {} the path needs; the socket keeps autotuning",
            self.comm,
            self.pid,
            self.option,
            self.requested_bytes,
            match self.peer {
                Some(p) => format!("to {p}"),
                None => "before connect (destination not known yet)".to_string(),
            },
            self.need_bytes
        )
    }
}

impl ConnRecord {
    /// Whether the program set anything on this connection.
    pub fn tuned(&self) -> bool {
        self.applied_bits & applied::ADVISED == 0 && !self.applied.is_empty()
    }
}

/// A measurement to record in the path database.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The peer, as the database keys it.
    pub peer: String,
    /// Direction of the data (the larger of the two byte counts).
    pub direction: Direction,
    /// The measurement (always a lower bound).
    pub measurement: Measurement,
}

/// A close record as a measurement for the path database: `None` for advice records, for
/// connections that moved less than [`MIN_BYTES_TO_RECORD`], lasted no time, or had a
/// loopback or unspecified peer.
pub fn to_measurement(r: &ConnRecord, at_unix_s: f64) -> Option<Measured> {
    if r.kind != Kind::Close || r.peer.is_loopback() || r.peer.is_unspecified() {
        return None;
    }
    // bytes_acked counts the SYN and the FIN; bytes_received the peer's FIN.
    let (direction, bytes) = if r.bytes_acked >= r.bytes_received {
        (Direction::Send, r.bytes_acked)
    } else {
        (Direction::Receive, r.bytes_received)
    };
    if bytes < MIN_BYTES_TO_RECORD || r.duration_us == 0 {
        return None;
    }
    let average = (u128::from(bytes) * 8 * 1_000_000 / u128::from(r.duration_us))
        .min(u128::from(u64::MAX)) as u64;
    // The last delivery-rate sample describes the data this host sent; for received data
    // only the average is known.
    let rate = match direction {
        Direction::Send => average.max(r.delivery_rate_bps),
        Direction::Receive => average,
    };
    let rtt_us = match (r.min_rtt_us, r.handshake_rtt_us) {
        (0, hs) => hs,
        (min, 0) => min,
        (min, hs) => min.min(hs),
    };
    if rtt_us == 0 {
        return None;
    }
    Some(Measured {
        peer: r.peer.to_string(),
        direction,
        measurement: Measurement {
            rate: Rate(rate),
            min_rtt: Duration::from_micros(u64::from(rtt_us)),
            full_pipe: false,
            at_unix_s,
        },
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A close record as the program writes it.
    pub(crate) fn raw(kind: u16, acked: u64, received: u64, duration_ns: u64) -> Vec<u8> {
        let mut b = vec![0u8; RECORD_LEN];
        b[0..2].copy_from_slice(&RECORD_VERSION.to_le_bytes());
        b[2..4].copy_from_slice(&kind.to_le_bytes());
        b[4..8].copy_from_slice(&0u32.to_le_bytes());
        let peer = std::net::Ipv4Addr::new(10, 231, 0, 2).to_ipv6_mapped();
        b[8..24].copy_from_slice(&peer.octets());
        let local = std::net::Ipv4Addr::new(10, 231, 0, 1).to_ipv6_mapped();
        b[24..40].copy_from_slice(&local.octets());
        b[40..42].copy_from_slice(&5001u16.to_le_bytes());
        b[42..44].copy_from_slice(&40000u16.to_le_bytes());
        b[44..48].copy_from_slice(&100_000u32.to_le_bytes());
        b[48..52].copy_from_slice(&99_000u32.to_le_bytes());
        b[52..56].copy_from_slice(&101_000u32.to_le_bytes());
        b[56..64].copy_from_slice(&acked.to_le_bytes());
        b[64..72].copy_from_slice(&received.to_le_bytes());
        b[72..76].copy_from_slice(&3u32.to_le_bytes());
        b[76..80].copy_from_slice(&7u32.to_le_bytes());
        b[80..88].copy_from_slice(&duration_ns.to_le_bytes());
        b[88..92].copy_from_slice(&100u32.to_le_bytes());
        b[92..96].copy_from_slice(&10_000u32.to_le_bytes());
        b[96..100].copy_from_slice(&1448u32.to_le_bytes());
        b[100..104].copy_from_slice(&(applied::SNDBUF | applied::KNOWN).to_le_bytes());
        b[104..108].copy_from_slice(&2u32.to_le_bytes());
        b
    }

    #[test]
    fn a_close_record_is_read_field_by_field() {
        let r = parse(&raw(1, 8 << 20, 2, 2_000_000_000)).expect("record");
        assert_eq!(r.kind, Kind::Close);
        assert_eq!(r.peer, "10.231.0.2".parse::<IpAddr>().expect("ip"));
        assert_eq!(r.local, "10.231.0.1".parse::<IpAddr>().expect("ip"));
        assert_eq!((r.peer_port, r.local_port), (5001, 40000));
        assert_eq!(r.opened, Opened::Active);
        assert_eq!(
            (r.handshake_rtt_us, r.min_rtt_us, r.srtt_us),
            (100_000, 99_000, 101_000)
        );
        assert_eq!((r.bytes_acked, r.bytes_received), (8 << 20, 2));
        assert_eq!(
            (r.retransmits, r.policy_id, r.duration_us),
            (3, 7, 2_000_000)
        );
        // 100 segments of 1448 bytes in 10 ms.
        assert_eq!(r.delivery_rate_bps, 115_840_000);
        assert_eq!(r.applied, vec!["sndbuf"]);
        assert!(r.tuned());
        assert!(!r.app_locked_sndbuf && r.app_locked_rcvbuf);
    }

    #[test]
    fn short_records_and_unknown_versions_or_kinds_are_refused() {
        let good = raw(1, 1, 1, 1);
        for len in [0, 1, RECORD_LEN - 1] {
            assert_eq!(
                parse(&good[..len]),
                Err(RecordError::Short {
                    len,
                    want: RECORD_LEN
                })
            );
        }
        let mut longer = good.clone();
        longer.extend_from_slice(&[0xff; 8]);
        assert!(parse(&longer).is_ok());
        let mut v2 = good.clone();
        v2[0] = 2;
        assert_eq!(parse(&v2), Err(RecordError::Version { found: 2 }));
        assert_eq!(parse(&raw(9, 1, 1, 1)), Err(RecordError::Kind { found: 9 }));
    }

    fn raw_override(peer: [u8; 16]) -> Vec<u8> {
        let mut b = vec![0u8; OVERRIDE_LEN];
        b[0..2].copy_from_slice(&RECORD_VERSION.to_le_bytes());
        b[2..4].copy_from_slice(&3u16.to_le_bytes());
        b[4..8].copy_from_slice(&4242u32.to_le_bytes());
        b[8..24].copy_from_slice(&peer);
        b[24..30].copy_from_slice(b"iperf3");
        b[40..44].copy_from_slice(&7u32.to_le_bytes());
        b[44..48].copy_from_slice(&65536u32.to_le_bytes());
        b[48..52].copy_from_slice(&4194304u32.to_le_bytes());
        b
    }

    #[test]
    fn an_override_record_names_the_process_and_the_destination() {
        let peer = std::net::Ipv4Addr::new(198, 19, 0, 1)
            .to_ipv6_mapped()
            .octets();
        let Ok(Event::Override(o)) = parse_event(&raw_override(peer)) else {
            panic!("not an override")
        };
        assert_eq!(
            (o.pid, o.comm.as_str(), o.option),
            (4242, "iperf3", "SO_SNDBUF")
        );
        assert_eq!((o.requested_bytes, o.need_bytes), (65536, 4194304));
        assert!(
            o.line()
                .contains("iperf3 (4242) SO_SNDBUF=65536 to 198.19.0.1"),
            "{}",
            o.line()
        );
        let Ok(Event::Override(o)) = parse_event(&raw_override([0; 16])) else {
            panic!("not an override")
        };
        assert_eq!(o.peer, None);
        assert!(o.line().contains("before connect"));
        let short = raw_override(peer);
        assert_eq!(
            parse_event(&short[..OVERRIDE_LEN - 1]),
            Err(RecordError::Short {
                len: OVERRIDE_LEN - 1,
                want: OVERRIDE_LEN
            })
        );
        assert!(matches!(parse_event(&raw(1, 1, 1, 1)), Ok(Event::Conn(_))));
        assert!(parse_event(&[1, 0]).is_err());
    }

    #[test]
    fn a_close_record_becomes_a_lower_bound_in_the_direction_of_the_data() {
        // 8 MiB sent in 2 s: 33.5 Mbit/s on average, below the last sample's 115.84 Mbit/s.
        let r = parse(&raw(1, 8 << 20, 2, 2_000_000_000)).expect("record");
        let m = to_measurement(&r, 1.7e9).expect("a measurement");
        assert_eq!(m.peer, "10.231.0.2");
        assert_eq!(m.direction, Direction::Send);
        assert_eq!(m.measurement.rate, Rate(115_840_000));
        assert_eq!(m.measurement.min_rtt, Duration::from_micros(99_000));
        assert!(!m.measurement.full_pipe);
        // Received data: the average only.
        let r = parse(&raw(1, 2, 16 << 20, 1_000_000_000)).expect("record");
        let m = to_measurement(&r, 1.7e9).expect("a measurement");
        assert_eq!(m.direction, Direction::Receive);
        assert_eq!(m.measurement.rate, Rate((16u64 << 20) * 8));
    }

    #[test]
    fn small_instant_and_advice_records_are_not_measurements() {
        let small = parse(&raw(1, 1000, 1000, 1_000_000)).expect("record");
        assert_eq!(to_measurement(&small, 0.0), None);
        let instant = parse(&raw(1, 8 << 20, 0, 0)).expect("record");
        assert_eq!(to_measurement(&instant, 0.0), None);
        let advice = parse(&raw(2, 8 << 20, 0, 1_000_000_000)).expect("record");
        assert_eq!(to_measurement(&advice, 0.0), None);
    }
}
