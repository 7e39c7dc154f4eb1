//! The first 48 bytes of a data connection.
//!
//! ```text
//! 0          8               24          28             32                 48
//! | magic    | session token | phase seq | stream index | tag              |
//! ```
//!
//! `magic` is `b"tcptune\x03"`; the numbers are big-endian; `tag` is HMAC-SHA256 under the
//! session's data-hello key (see [`crate::keys`]) of the first 32 bytes, truncated to 16: the
//! token alone, which crosses the network in clear, does not let anyone else open a stream
//! into the session. A control connection starts with a frame length instead, whose first
//! byte is 0 for any frame the server accepts, so the first byte tells the two apart.

use super::Token;
use crate::keys::{ct_eq, SessionKeys, TAG_LEN};

/// Length of the data-connection hello.
pub const DATA_HELLO_LEN: usize = 48;
/// Bytes of the hello the tag covers.
const SIGNED_LEN: usize = 32;
/// The first bytes of a data connection.
pub const DATA_MAGIC: [u8; 8] = *b"tcptune\x03";

/// What a data connection says first: which session, phase and stream it belongs to, and
/// the proof that it knows the session's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataHello {
    /// The session's token.
    pub token: Token,
    /// The phase (`StartPhase.seq`).
    pub seq: u32,
    /// The stream's index in the phase (0-based).
    pub stream: u32,
    /// The tag of the first 32 bytes under the session's data-hello key.
    pub tag: [u8; TAG_LEN],
}

impl DataHello {
    /// The hello of stream `stream` of phase `seq`, tagged with `keys`.
    pub fn sealed(keys: &SessionKeys, token: Token, seq: u32, stream: u32) -> DataHello {
        let mut h = DataHello {
            token,
            seq,
            stream,
            tag: [0; TAG_LEN],
        };
        h.tag = keys.data_hello_tag(&h.encode()[..SIGNED_LEN]);
        h
    }

    /// Whether the tag is right under `keys` (constant time).
    pub fn verify(&self, keys: &SessionKeys) -> bool {
        let want = keys.data_hello_tag(&self.encode()[..SIGNED_LEN]);
        ct_eq(&want, &self.tag)
    }

    /// The bytes on the wire.
    pub fn encode(&self) -> [u8; DATA_HELLO_LEN] {
        let mut h = [0u8; DATA_HELLO_LEN];
        h[..8].copy_from_slice(&DATA_MAGIC);
        h[8..24].copy_from_slice(&self.token.0);
        h[24..28].copy_from_slice(&self.seq.to_be_bytes());
        h[28..32].copy_from_slice(&self.stream.to_be_bytes());
        h[32..48].copy_from_slice(&self.tag);
        h
    }

    /// Parse a hello; `None` unless it starts with the magic and is complete. The tag is
    /// not checked here: that takes the session's keys ([`DataHello::verify`]).
    pub fn decode(b: &[u8]) -> Option<DataHello> {
        if b.len() != DATA_HELLO_LEN || b[..8] != DATA_MAGIC {
            return None;
        }
        let mut token = [0u8; 16];
        token.copy_from_slice(&b[8..24]);
        let word = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&b[32..48]);
        Some(DataHello {
            token: Token(token),
            seq: word(24),
            stream: word(28),
            tag,
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

    fn keys(dh: u8) -> SessionKeys {
        SessionKeys::derive(&[dh; 32], None, &Token([9; 16]), &[1; 32], &[2; 32]).expect("keys")
    }

    #[test]
    fn hellos_round_trip_and_garbage_is_refused() {
        let h = DataHello::sealed(&keys(5), Token([9; 16]), 2, 63);
        let b = h.encode();
        assert_eq!(DataHello::decode(&b), Some(h));
        assert!(DataHello::could_start(&b[..3]));
        assert!(DataHello::could_start(&b));
        assert!(!DataHello::could_start(&[0, 0, 0, 12]));
        assert!(
            !DataHello::could_start(b"tcptune\x02"),
            "the old version's magic"
        );
        assert_eq!(DataHello::decode(&b[..47]), None);
        let mut bad = b;
        bad[0] = b'T';
        assert_eq!(DataHello::decode(&bad), None);
    }

    #[test]
    fn a_hello_verifies_only_under_its_keys_and_for_its_fields() {
        let k = keys(5);
        let h = DataHello::sealed(&k, Token([9; 16]), 2, 63);
        assert!(h.verify(&k));
        assert!(!h.verify(&keys(6)), "another session's keys");
        for mutate in [
            (|h: &mut DataHello| h.seq += 1) as fn(&mut DataHello),
            |h| h.stream ^= 1,
            |h| h.token.0[0] ^= 1,
            |h| h.tag[15] ^= 1,
        ] {
            let mut m = h;
            mutate(&mut m);
            assert!(!m.verify(&k), "{m:?}");
        }
    }
}
