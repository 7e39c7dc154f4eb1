//! What the data streams of a copy carry (after their `DataHello`).
//!
//! From the sender, on every stream, records that start with a 24-byte header:
//!
//! ```text
//! 0     1          4        8          16       20      24
//! | tag | reserved | file   | offset   | len    | round |
//! ```
//!
//! * [`Tag::Block`]: `len` bytes of the file at `offset`, then their 32-byte checksum.
//! * [`Tag::Confirm`]: no data, the 32-byte checksum of the block at `offset` (`len` its
//!   length): the receiver's copy of it, from an earlier run, is right.
//! * [`Tag::ConfirmFile`]: the 32-byte digest of the whole file: the receiver's complete
//!   copy is right.
//! * [`Tag::Json`] (stream 0 only): `len` bytes of JSON, a [`ToReceiver`].
//!
//! From the receiver, on stream 0 only: frames of a 4-byte big-endian length and JSON, a
//! [`ToSender`] each. Numbers are big-endian. Every length is checked against the manifest
//! (a block's) or a bound ([`MAX_JSON`]) before anything is read or allocated.

use super::work::violation;
use super::{Entry, FileFailure};
use serde::{Deserialize, Serialize};

/// Length of a record header.
pub(crate) const HEADER_LEN: usize = 24;
/// Length of a checksum trailer.
pub(crate) const CV_LEN: usize = 32;
/// Largest JSON record either way.
pub(crate) const MAX_JSON: usize = 4 << 20;
/// Deepest nesting of arrays and objects in a JSON record (the deepest record, a plan,
/// nests 4): checked before the parser, whose recursion runs on a data thread's small stack.
pub(crate) const MAX_JSON_DEPTH: usize = 8;
/// Manifest entries per record.
pub(crate) const ENTRIES_PER_RECORD: usize = 2000;
/// Plan files or resend blocks per record.
pub(crate) const ITEMS_PER_RECORD: usize = 8000;

/// Whether `body` nests arrays and objects at most `max` deep (a linear scan that skips
/// strings; it does not validate: the parser does that next).
pub(crate) fn json_depth_within(body: &[u8], max: usize) -> bool {
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
pub(crate) fn parse_record<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, FileFailure> {
    if !json_depth_within(body, MAX_JSON_DEPTH) {
        return Err(violation(format!(
            "a record nested deeper than {MAX_JSON_DEPTH}"
        )));
    }
    serde_json::from_slice(body).map_err(|e| violation(crate::server::escape(&e.to_string(), 200)))
}

/// The kind of a record from the sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tag {
    Block = 1,
    Confirm = 2,
    ConfirmFile = 3,
    Json = 4,
}

/// A record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) tag: Tag,
    pub(crate) file: u32,
    pub(crate) offset: u64,
    pub(crate) len: u32,
    pub(crate) round: u32,
}

impl Header {
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0] = self.tag as u8;
        h[4..8].copy_from_slice(&self.file.to_be_bytes());
        h[8..16].copy_from_slice(&self.offset.to_be_bytes());
        h[16..20].copy_from_slice(&self.len.to_be_bytes());
        h[20..24].copy_from_slice(&self.round.to_be_bytes());
        h
    }

    pub(crate) fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, String> {
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

/// A block or file the receiver already has from an earlier run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PlanFile {
    /// The manifest entry.
    pub(crate) id: u32,
    /// The complete target is there (same size and time): its digest, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) present: Option<String>,
    /// Blocks of a partial file that are there: (block, checksum hex).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) have: Vec<(u64, String)>,
}

/// Stream 0, sender to receiver.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ToReceiver {
    /// Entries of the manifest, in order.
    Manifest { entries: Vec<Entry> },
    /// The manifest is complete.
    ManifestEnd {
        /// What the sender skipped (symlinks, devices, ...).
        warnings: Vec<String>,
    },
    /// Every record of round `round` is written: `records` in all rounds so far.
    End { round: u32, records: u64 },
    /// The sender is busy hashing (a keep-alive, on any stream).
    Alive,
}

/// Stream 0, receiver to sender.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ToSender {
    /// Still resolving and hashing what an earlier run left (a keep-alive).
    Planning { checked_bytes: u64 },
    /// What is there already.
    Plan { files: Vec<PlanFile> },
    /// The plan is complete; the receiver takes blocks.
    PlanEnd,
    /// Blocks to send again (failed checksums) before the next `End`; `last` ends the list.
    Resend { blocks: Vec<(u32, u64)>, last: bool },
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
