//! The first 32 bytes of a data connection.
//!
//! ```text
//! 0          8               24          28            32
//! | magic    | session token | phase seq | stream index |
//! ```
//!
//! `magic` is `b"tcptune\x02"`; the numbers are big-endian. A control connection starts with
//! a frame length instead, whose first byte is 0 for any frame the server accepts, so the
//! first byte tells the two apart.

use super::Token;

/// Length of the data-connection hello.
pub const DATA_HELLO_LEN: usize = 32;
/// The first bytes of a data connection.
pub const DATA_MAGIC: [u8; 8] = *b"tcptune\x02";

/// What a data connection says first: which session, phase and stream it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataHello {
    /// The session's token.
    pub token: Token,
    /// The phase (`StartPhase.seq`).
    pub seq: u32,
    /// The stream's index in the phase (0-based).
    pub stream: u32,
}

impl DataHello {
    /// The bytes on the wire.
    pub fn encode(&self) -> [u8; DATA_HELLO_LEN] {
        let mut h = [0u8; DATA_HELLO_LEN];
        h[..8].copy_from_slice(&DATA_MAGIC);
        h[8..24].copy_from_slice(&self.token.0);
        h[24..28].copy_from_slice(&self.seq.to_be_bytes());
        h[28..32].copy_from_slice(&self.stream.to_be_bytes());
        h
    }

    /// Parse a hello; `None` unless it starts with the magic and is complete.
    pub fn decode(b: &[u8]) -> Option<DataHello> {
        if b.len() != DATA_HELLO_LEN || b[..8] != DATA_MAGIC {
            return None;
        }
        let mut token = [0u8; 16];
        token.copy_from_slice(&b[8..24]);
        let word = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(DataHello {
            token: Token(token),
            seq: word(24),
            stream: word(28),
        })
    }

    /// Whether the first bytes of a connection (any number, possibly fewer than 8) can be
    /// the start of a data hello.
    pub fn could_start(prefix: &[u8]) -> bool {
        let n = prefix.len().min(DATA_MAGIC.len());
        prefix[..n] == DATA_MAGIC[..n]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hellos_round_trip_and_garbage_is_refused() {
        let h = DataHello {
            token: Token([9; 16]),
            seq: 2,
            stream: 63,
        };
        let b = h.encode();
        assert_eq!(DataHello::decode(&b), Some(h));
        assert!(DataHello::could_start(&b[..3]));
        assert!(DataHello::could_start(&b));
        assert!(!DataHello::could_start(&[0, 0, 0, 12]));
        assert_eq!(DataHello::decode(&b[..31]), None);
        let mut bad = b;
        bad[0] = b'T';
        assert_eq!(DataHello::decode(&bad), None);
    }
}
