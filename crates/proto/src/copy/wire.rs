//! What the data streams of a copy carry (after their `DataHello`).
//!
//! From the sender, on every stream, records that start with a 24-byte header:
//!
//! ```text
//! 0     1          4        8          16       20      24
//! | tag | reserved | file   | offset   | len    | round |
//! ```
//!
//! * [`Tag::Block`]: `len` bytes of the file at `offset`, then their [`Trailer`]: the
//!   32-byte checksum (BLAKE3's chaining value) and its 16-byte tag. In a copy that seals
//!   its blocks ([`crate::files::FileJob::encrypt`]) the `len` bytes are the ciphertext
//!   (ChaCha20-Poly1305, the header as associated data; the driver's: the transfer crate's
//!   `seal` module documents the nonce), followed by its 16-byte Poly1305 tag, then the
//!   trailer, whose checksum stays over the plaintext. The receiver reads `len + 16`
//!   bytes, opens them before it hashes or writes anything, and treats a body that fails
//!   to open as a forged block ([`super::receiver::Receiver::handle_unopened`]).
//! * [`Tag::Confirm`]: no data, the trailer of the block at `offset` (`len` its length):
//!   the receiver's copy of it, from an earlier run, is right.
//! * [`Tag::ConfirmFile`]: the trailer of the whole file's digest: the receiver's complete
//!   copy is right.
//!
//! The tag is BLAKE3's keyed mode under the session's block key, over the 24-byte header
//! and the checksum ([`crate::keys::BlockKey`]): the receiver checks it after hashing what
//! it received, so a forger who hashes what it sends still fails it; the record then counts
//! as a mismatch and its block is sent again.
//! * [`Tag::Json`] (stream 0 only): `len` bytes of JSON, a [`ToReceiver`].
//!
//! From the receiver, on stream 0 only: frames of a 4-byte big-endian length and JSON, a
//! [`ToSender`] each. Numbers are big-endian. Every length is checked against the manifest
//! (a block's) or a bound ([`MAX_JSON`]) before anything is read or allocated.

use super::digest::Cv;
use super::violation;
use crate::files::{Entry, FileFailure};
use crate::keys::BlockKey;
use serde::{Deserialize, Serialize};

/// Length of a record header.
pub const HEADER_LEN: usize = 24;
/// Length of a checksum.
pub const CV_LEN: usize = 32;
/// Length of a checksum's tag.
pub use crate::keys::TAG_LEN;
/// Length of the trailer of a block or confirmation: the checksum, then its tag.
pub const TRAILER_LEN: usize = CV_LEN + TAG_LEN;
/// Largest JSON record either way.
pub const MAX_JSON: usize = 4 << 20;
/// Deepest nesting of arrays and objects in a JSON record (the deepest record, a plan,
/// nests 4): checked before the parser, whose recursion runs on a data thread's small stack.
pub const MAX_JSON_DEPTH: usize = 8;
/// Manifest entries per record.
pub const ENTRIES_PER_RECORD: usize = 2000;
/// Plan files or resend blocks per record.
pub const ITEMS_PER_RECORD: usize = 8000;

/// Whether `body` nests arrays and objects at most `max` deep (a linear scan that skips
/// strings; it does not validate: the parser does that next).
pub fn json_depth_within(body: &[u8], max: usize) -> bool {
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    for &b in body {
        if in_str {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

/// Parse a JSON record or frame body: its nesting checked first (the parser recurses on a
/// data thread's small stack), a parse error escaped for the logs.
pub fn parse_record<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, FileFailure> {
    if !json_depth_within(body, MAX_JSON_DEPTH) {
        return Err(violation(format!(
            "a record nested deeper than {MAX_JSON_DEPTH}"
        )));
    }
    serde_json::from_slice(body).map_err(|e| violation(crate::escape(&e.to_string(), 200)))
}

/// The kind of a record from the sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag {
    /// A block with its data and checksum.
    Block = 1,
    /// A block's checksum only: the receiver's copy is right.
    Confirm = 2,
    /// A whole file's digest: the receiver's copy is right.
    ConfirmFile = 3,
    /// A JSON record ([`ToReceiver`]).
    Json = 4,
}

/// A record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What the record is.
    pub tag: Tag,
    /// The manifest entry.
    pub file: u32,
    /// The block's offset in the file.
    pub offset: u64,
    /// Bytes of data (a block's length, or a JSON body's).
    pub len: u32,
    /// The round the record belongs to.
    pub round: u32,
}

impl Header {
    /// The header's 24 bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0] = self.tag as u8;
        h[4..8].copy_from_slice(&self.file.to_be_bytes());
        h[8..16].copy_from_slice(&self.offset.to_be_bytes());
        h[16..20].copy_from_slice(&self.len.to_be_bytes());
        h[20..24].copy_from_slice(&self.round.to_be_bytes());
        h
    }

    /// A header from its 24 bytes, or why not.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, String> {
        let tag = match b[0] {
            1 => Tag::Block,
            2 => Tag::Confirm,
            3 => Tag::ConfirmFile,
            4 => Tag::Json,
            t => return Err(format!("unknown record type {t}")),
        };
        if b[1..4] != [0, 0, 0] {
            return Err("reserved bytes of a record header are not zero".into());
        }
        let w32 = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut o = [0u8; 8];
        o.copy_from_slice(&b[8..16]);
        Ok(Header {
            tag,
            file: w32(4),
            offset: u64::from_be_bytes(o),
            len: w32(16),
            round: w32(20),
        })
    }
}

/// What follows a block's data, or a confirmation's header: the checksum and its tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trailer {
    /// The block's chaining value, or the file's digest.
    pub cv: Cv,
    /// Its tag under the session's block key.
    pub tag: [u8; TAG_LEN],
}

impl Trailer {
    /// The trailer of the record with header `h` and checksum `cv`, tagged with `key`.
    pub fn sealed(key: &BlockKey, h: &Header, cv: Cv) -> Trailer {
        Trailer {
            cv,
            tag: key.tag(&h.encode(), &cv),
        }
    }

    /// Whether the tag is right for header `h` under `key` (constant time).
    pub fn verify(&self, key: &BlockKey, h: &Header) -> bool {
        key.verify(&h.encode(), &self.cv, &self.tag)
    }

    /// The trailer's bytes.
    pub fn encode(&self) -> [u8; TRAILER_LEN] {
        let mut b = [0u8; TRAILER_LEN];
        b[..CV_LEN].copy_from_slice(&self.cv);
        b[CV_LEN..].copy_from_slice(&self.tag);
        b
    }

    /// A trailer from its bytes.
    pub fn decode(b: &[u8; TRAILER_LEN]) -> Trailer {
        let mut t = Trailer {
            cv: [0; CV_LEN],
            tag: [0; TAG_LEN],
        };
        t.cv.copy_from_slice(&b[..CV_LEN]);
        t.tag.copy_from_slice(&b[CV_LEN..]);
        t
    }
}

/// A block or file the receiver already has from an earlier run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanFile {
    /// The manifest entry.
    pub id: u32,
    /// The complete target is there (same size and time): its digest, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub present: Option<String>,
    /// Blocks of a partial file that are there: (block, checksum hex).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub have: Vec<(u64, String)>,
}

/// Stream 0, sender to receiver.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToReceiver {
    /// Entries of the manifest, in order.
    Manifest {
        /// The entries.
        entries: Vec<Entry>,
    },
    /// The manifest is complete.
    ManifestEnd {
        /// What the sender skipped (symlinks, devices, ...).
        warnings: Vec<String>,
    },
    /// Every record of round `round` is written: `records` in all rounds so far.
    End {
        /// The round that ends.
        round: u32,
        /// Records of all rounds so far.
        records: u64,
    },
    /// The sender is busy hashing (a keep-alive, on any stream).
    Alive,
}

/// Stream 0, receiver to sender.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToSender {
    /// Still resolving and hashing what an earlier run left (a keep-alive).
    Planning {
        /// Bytes hashed so far.
        checked_bytes: u64,
    },
    /// What is there already.
    Plan {
        /// Files with something there.
        files: Vec<PlanFile>,
    },
    /// The plan is complete; the receiver takes blocks.
    PlanEnd,
    /// Blocks to send again (failed checksums) before the next `End`; `last` ends the list.
    Resend {
        /// (entry, block) pairs.
        blocks: Vec<(u32, u64)>,
        /// The last record of the list.
        last: bool,
    },
    /// Every file is in place.
    Done {
        /// Files complete.
        files: u64,
        /// Digest over all files' digests, hex.
        tree_digest: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_garbage_is_refused() {
        let h = Header {
            tag: Tag::Block,
            file: 7,
            offset: 1 << 40,
            len: 4 << 20,
            round: 2,
        };
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        let mut b = h.encode();
        b[0] = 9;
        assert!(Header::decode(&b).is_err());
        let mut b = h.encode();
        b[2] = 1;
        assert!(Header::decode(&b).is_err());
    }

    #[test]
    fn deep_json_is_refused_before_parsing_and_strings_do_not_count() {
        let plan = ToSender::Plan {
            files: vec![PlanFile {
                id: 1,
                present: None,
                have: vec![(0, "ab".into())],
            }],
        };
        let body = serde_json::to_vec(&plan).expect("json");
        assert!(json_depth_within(&body, MAX_JSON_DEPTH));
        assert!(!json_depth_within(&body, 3));
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(!json_depth_within(deep.as_bytes(), MAX_JSON_DEPTH));
        let quoted = br#"{"path":"[[[[[[[[[[[[ \" {{{{{{{{{{"}"#;
        assert!(json_depth_within(quoted, 1));
    }

    #[test]
    fn lead_messages_are_tagged_json() {
        let m = ToSender::Resend {
            blocks: vec![(1, 2)],
            last: true,
        };
        let s = serde_json::to_string(&m).expect("json");
        assert!(s.contains("\"type\":\"resend\""), "{s}");
        assert_eq!(serde_json::from_str::<ToSender>(&s).expect("parse"), m);
    }
}
