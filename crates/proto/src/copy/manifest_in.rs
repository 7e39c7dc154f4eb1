//! The receiver's side of the manifest as a small state machine without I/O: record
//! headers and bodies in, the complete manifest out, every record and entry admitted by
//! the [`ManifestBudget`] before it is read or kept.
//!
//! # Calling order
//!
//! [`ManifestIn::new`] with the receiver's limits. For each record header from stream 0:
//! [`ManifestIn::admit`], which answers how many body bytes to read (nothing is read or
//! allocated for a refused record), then [`ManifestIn::on_body`] with exactly those bytes,
//! until it answers [`ManifestStep::Done`]. Any `Err` ends the copy with that failure.

use super::budget::{CopyLimits, ManifestBudget};
use super::violation;
use super::wire::{parse_record, Header, Tag, ToReceiver, MAX_JSON};
use crate::files::{Entry, FileFailure};

/// What a record did.
#[derive(Debug, PartialEq)]
pub enum ManifestStep {
    /// More records to come.
    More,
    /// The manifest is complete.
    Done {
        /// Every entry, in order.
        entries: Vec<Entry>,
        /// What the sender skipped.
        warnings: Vec<String>,
    },
}

/// See the module documentation.
#[derive(Debug)]
pub struct ManifestIn {
    budget: ManifestBudget,
    entries: Vec<Entry>,
    done: bool,
}

impl ManifestIn {
    /// A manifest to come, within `limits`.
    pub fn new(limits: CopyLimits) -> ManifestIn {
        ManifestIn {
            budget: ManifestBudget::new(limits),
            entries: Vec::new(),
            done: false,
        }
    }

    /// A record header: the length of the body to read next, or why not.
    pub fn admit(&mut self, h: &Header) -> Result<usize, FileFailure> {
        if self.done {
            return Err(violation("a record after the end of the manifest"));
        }
        if h.tag != Tag::Json {
            return Err(violation("a block before the plan"));
        }
        let len = h.len as usize;
        if len > MAX_JSON {
            return Err(violation(format!("a record of {len} bytes")));
        }
        self.budget.admit_record(u64::from(h.len))?;
        Ok(len)
    }

    /// The body of the record last admitted.
    pub fn on_body(&mut self, body: &[u8]) -> Result<ManifestStep, FileFailure> {
        match parse_record::<ToReceiver>(body)? {
            ToReceiver::Manifest { entries } => {
                self.budget.admit_entries(&entries)?;
                self.entries.extend(entries);
                Ok(ManifestStep::More)
            }
            ToReceiver::ManifestEnd { warnings } => {
                self.done = true;
                Ok(ManifestStep::Done {
                    entries: std::mem::take(&mut self.entries),
                    warnings,
                })
            }
            other => Err(violation(format!("{other:?} in the manifest"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::EntryKind;

    fn json(h_len: usize) -> Header {
        Header {
            tag: Tag::Json,
            file: 0,
            offset: 0,
            len: h_len as u32,
            round: 0,
        }
    }

    fn limits() -> CopyLimits {
        CopyLimits {
            max_entries: 10,
            max_file_size: 1 << 30,
            max_total_bytes: 1 << 31,
            max_manifest_bytes: 4096,
        }
    }

    fn feed(m: &mut ManifestIn, body: &str) -> Result<ManifestStep, FileFailure> {
        let n = m.admit(&json(body.len()))?;
        m.on_body(&body.as_bytes()[..n])
    }

    #[test]
    fn records_build_the_manifest_until_its_end() {
        let mut m = ManifestIn::new(limits());
        let r = r#"{"type":"manifest","entries":[{"path":"a","kind":"file","size":3,"mode":420,"mtime_s":1}]}"#;
        assert_eq!(feed(&mut m, r), Ok(ManifestStep::More));
        match feed(&mut m, r#"{"type":"manifest_end","warnings":["w"]}"#) {
            Ok(ManifestStep::Done { entries, warnings }) => {
                assert_eq!(entries.len(), 1);
                assert_eq!(entries[0].kind, EntryKind::File);
                assert_eq!(warnings, vec!["w".to_string()]);
            }
            other => panic!("{other:?}"),
        }
        assert!(m.admit(&json(2)).is_err(), "nothing after the end");
    }

    #[test]
    fn a_block_an_oversized_or_deep_record_and_other_messages_are_refused() {
        let mut m = ManifestIn::new(limits());
        let mut block = json(3);
        block.tag = Tag::Block;
        assert!(m.admit(&block).is_err());
        assert!(m.admit(&json(MAX_JSON + 1)).is_err());
        assert!(m.admit(&json(5000)).is_err(), "over the manifest budget");
        let deep = format!("{}{}", "[".repeat(50), "]".repeat(50));
        assert!(feed(&mut ManifestIn::new(limits()), &deep).is_err());
        assert!(feed(&mut ManifestIn::new(limits()), r#"{"type":"alive"}"#).is_err());
        assert!(feed(&mut ManifestIn::new(limits()), "not json\n").is_err());
    }
}
