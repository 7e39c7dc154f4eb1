//! What a receiver lets a sender's manifest cost, checked before anything is allocated or
//! done for it (STYLE: "whatever a peer sends is a budget question first").
//!
//! A manifest is untrusted: its sender chooses every path, size and count. Each record's
//! length is admitted against the manifest's budget *before* the record is read
//! ([`ManifestBudget::admit_record`]); each entry is admitted *before* it is kept
//! ([`ManifestBudget::admit_entries`]): its path length, its size against the largest file
//! this end accepts, and the running total of all sizes. The plan then checks the total
//! against the free space before it creates or hashes anything, and the receiver's table
//! grows with the blocks that arrive, never with what the manifest claims.
//!
//! A refusal is a [`FileFailure`] of kind [`FailKind::Refused`] whose one line names the
//! entry (escaped), what it claimed and the budget with the option that raises it, for
//! example `c1big: size 18446744073709551615 exceeds --max-file-size 1.0 TiB`.

use crate::files::{Entry, EntryKind, FailKind, FileFailure, MAX_PATH};
use tcptune_core::Bytes;

/// The default of [`CopyLimits::max_file_size`] at a server: 1 TiB.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 1 << 40;
/// The default of [`CopyLimits::max_manifest_bytes`] at a server: 40 MiB of manifest
/// records (about 250,000 entries with 60-byte paths; what they cost in memory is about
/// as much again).
pub const DEFAULT_MAX_MANIFEST_BYTES: u64 = 40 << 20;

/// What one copy may claim at the receiving end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyLimits {
    /// Most files and directories in one copy (`--max-files`).
    pub max_entries: u64,
    /// Largest file (`--max-file-size`).
    pub max_file_size: u64,
    /// Most bytes of all files together.
    pub max_total_bytes: u64,
    /// Most bytes of manifest records (`--max-manifest`): the memory the manifest may take.
    pub max_manifest_bytes: u64,
}

impl CopyLimits {
    /// A server's defaults: [`DEFAULT_MAX_FILE_SIZE`], [`DEFAULT_MAX_MANIFEST_BYTES`], the
    /// given counts.
    pub fn server(max_entries: u64, max_total_bytes: u64) -> CopyLimits {
        CopyLimits {
            max_entries,
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            max_total_bytes,
            max_manifest_bytes: DEFAULT_MAX_MANIFEST_BYTES,
        }
    }
}

/// The running account of one manifest. See the module documentation.
#[derive(Debug)]
pub struct ManifestBudget {
    limits: CopyLimits,
    record_bytes: u64,
    entries: u64,
    total_bytes: u64,
}

fn refused(message: String) -> FileFailure {
    FileFailure::new(FailKind::Refused, message)
}

impl ManifestBudget {
    /// An empty account against `limits`.
    pub fn new(limits: CopyLimits) -> ManifestBudget {
        ManifestBudget {
            limits,
            record_bytes: 0,
            entries: 0,
            total_bytes: 0,
        }
    }

    /// A record of `len` bytes is about to be read: `Err` if the manifest would pass its
    /// budget (nothing is read or allocated for it then).
    pub fn admit_record(&mut self, len: u64) -> Result<(), FileFailure> {
        let after = self.record_bytes.saturating_add(len);
        if after > self.limits.max_manifest_bytes {
            return Err(refused(format!(
                "the manifest exceeds --max-manifest {} after {} entries (the receiver's limit; split the copy)",
                Bytes(self.limits.max_manifest_bytes),
                self.entries
            )));
        }
        self.record_bytes = after;
        Ok(())
    }

    /// Entries parsed from an admitted record, before they are kept.
    pub fn admit_entries(&mut self, more: &[Entry]) -> Result<(), FileFailure> {
        let count = self.entries.saturating_add(more.len() as u64);
        if count > self.limits.max_entries {
            return Err(refused(format!(
                "more than {} files and directories in one copy (the receiver's limit --max-files; split the copy)",
                self.limits.max_entries
            )));
        }
        for e in more {
            self.admit_entry(e)?;
        }
        self.entries = count;
        Ok(())
    }

    fn admit_entry(&mut self, e: &Entry) -> Result<(), FileFailure> {
        if e.path.len() > MAX_PATH {
            return Err(refused(format!(
                "a manifest path of {} bytes (at most {MAX_PATH})",
                e.path.len()
            )));
        }
        let shown = || crate::escape(&e.path, 200);
        match e.kind {
            EntryKind::Dir if e.size != 0 => Err(FileFailure::protocol(format!(
                "{}: a directory with a size",
                shown()
            ))),
            EntryKind::Dir => Ok(()),
            EntryKind::File if e.size > self.limits.max_file_size => Err(refused(format!(
                "{}: size {} exceeds --max-file-size {}",
                shown(),
                e.size,
                Bytes(self.limits.max_file_size)
            ))),
            EntryKind::File => {
                let total = self.total_bytes.saturating_add(e.size);
                if total > self.limits.max_total_bytes {
                    return Err(refused(format!(
                        "{}: the files so far make {total} bytes, more than the receiver's limit of {} in one copy",
                        shown(),
                        Bytes(self.limits.max_total_bytes)
                    )));
                }
                self.total_bytes = total;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, size: u64) -> Entry {
        Entry {
            path: path.into(),
            kind: EntryKind::File,
            size,
            mode: 0o644,
            mtime_s: 0,
            mtime_ns: 0,
        }
    }

    fn limits() -> CopyLimits {
        CopyLimits {
            max_entries: 3,
            max_file_size: 1 << 20,
            max_total_bytes: 3 << 19,
            max_manifest_bytes: 1000,
        }
    }

    #[test]
    fn a_file_larger_than_max_file_size_is_refused_naming_it_and_the_option() {
        let mut b = ManifestBudget::new(CopyLimits::server(10, u64::MAX));
        let f = b
            .admit_entries(&[file("c1big", u64::MAX)])
            .expect_err("refused");
        assert_eq!(f.kind, FailKind::Refused);
        assert_eq!(
            f.message,
            format!(
                "c1big: size 18446744073709551615 exceeds --max-file-size {}",
                Bytes(DEFAULT_MAX_FILE_SIZE)
            )
        );
    }

    #[test]
    fn records_are_refused_once_the_manifest_budget_is_spent() {
        let mut b = ManifestBudget::new(limits());
        b.admit_record(600).expect("fits");
        b.admit_record(400).expect("fits exactly");
        let f = b.admit_record(1).expect_err("over");
        assert!(f.message.contains("--max-manifest"), "{}", f.message);
        // A length near 2^64 does not wrap.
        let mut b = ManifestBudget::new(limits());
        b.admit_record(10).expect("fits");
        assert!(b.admit_record(u64::MAX).is_err());
    }

    #[test]
    fn counts_paths_and_totals_are_bounded_before_entries_are_kept() {
        let mut b = ManifestBudget::new(limits());
        b.admit_entries(&[file("a", 1 << 20), file("b", 1 << 19)])
            .expect("fits");
        let f = b.admit_entries(&[file("c", 1)]).expect_err("total");
        assert!(f.message.contains("limit"), "{}", f.message);
        let mut b = ManifestBudget::new(limits());
        assert!(b
            .admit_entries(&[file("a", 1), file("b", 1), file("c", 1), file("d", 1)])
            .is_err());
        let mut b = ManifestBudget::new(limits());
        assert!(b
            .admit_entries(&[file(&"p".repeat(MAX_PATH + 1), 1)])
            .is_err());
        let mut dir = file("d", 5);
        dir.kind = EntryKind::Dir;
        assert_eq!(
            b.admit_entries(&[dir]).expect_err("dir").kind,
            FailKind::Protocol
        );
    }

    #[test]
    fn a_path_with_control_characters_is_shown_escaped() {
        let mut b = ManifestBudget::new(limits());
        let f = b
            .admit_entries(&[file("evil\nlog line", u64::MAX)])
            .expect_err("refused");
        assert!(!f.message.contains('\n'), "{}", f.message);
    }
}
