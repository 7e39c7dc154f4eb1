//! The receiver's bookkeeping, without I/O: which blocks of which file are verified, what
//! an earlier run left (and its checksums), when a file is complete, and what to ask for
//! again after a round.
//!
//! # Calling order
//!
//! [`RecvTable::new`] from the manifest; the plan adds what is there
//! ([`RecvTable::set_have`], [`RecvTable::set_present`], [`RecvTable::set_fresh`]). For
//! every record header: [`RecvTable::check`] (a hostile sender's header is refused before
//! any data is read), then after the data [`RecvTable::on_block`], or
//! [`RecvTable::on_confirm`] / [`RecvTable::on_confirm_file`]. Once a round's records are
//! all in: [`RecvTable::resend_list`], empty when every file is complete.

use super::digest::{file_digest, Cv, TreeDigest};
use super::wire::{Header, Tag};
use crate::files::{Entry, EntryKind, BLOCK_SIZE};
use std::collections::{BTreeMap, HashMap};

/// What a record did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// The block (or the file) checks out; `complete`: the file's last missing one.
    Verified {
        /// The file's last missing block: the file is complete.
        complete: bool,
    },
    /// The checksum does not match: the block is not trusted and will be asked for again.
    Mismatch,
    /// The file or block was verified already (a late duplicate): nothing changes.
    Duplicate,
}

#[derive(Debug)]
struct RecvFile {
    size: u64,
    /// Blocks in the file.
    blocks: u64,
    /// Checksums of the blocks verified so far: it grows with what arrives, never with
    /// what a manifest claims (a size of 2^64 costs nothing until its blocks come).
    verified: BTreeMap<u64, Cv>,
    remaining: u64,
    have: HashMap<u64, Cv>,
    present: Option<Cv>,
    confirmed: Option<Cv>,
    done: bool,
    fresh: bool,
}

/// The receiver's table. See the module documentation.
#[derive(Debug)]
pub struct RecvTable {
    files: Vec<Option<RecvFile>>,
    /// Records of all rounds taken in.
    pub records: u64,
    /// Files complete.
    pub files_done: u64,
    /// Bytes of blocks that came with their data and were verified.
    pub carried_bytes: u64,
    /// Bytes that were there already (confirmed by the sender).
    pub present_bytes: u64,
    /// Blocks whose checksum did not match (forged ones included).
    pub mismatches: u64,
    /// Records whose tag did not verify under the session's block key (see
    /// [`crate::keys::BlockKey`]): forged, or damaged in the trailer.
    pub forged: u64,
}

impl RecvTable {
    /// A table for `entries`, nothing verified.
    pub fn new(entries: &[Entry]) -> RecvTable {
        let files = entries
            .iter()
            .map(|e| {
                (e.kind == EntryKind::File).then(|| {
                    let n = e.blocks();
                    RecvFile {
                        size: e.size,
                        blocks: n,
                        verified: BTreeMap::new(),
                        remaining: n,
                        have: HashMap::new(),
                        present: None,
                        confirmed: None,
                        done: false,
                        fresh: false,
                    }
                })
            })
            .collect();
        RecvTable {
            files,
            records: 0,
            files_done: 0,
            carried_bytes: 0,
            present_bytes: 0,
            mismatches: 0,
            forged: 0,
        }
    }

    fn file(&mut self, id: u32) -> Option<&mut RecvFile> {
        self.files.get_mut(id as usize).and_then(Option::as_mut)
    }

    /// Block `block` of file `id` is there from an earlier run with checksum `cv`.
    pub fn set_have(&mut self, id: u32, block: u64, cv: Cv) {
        if let Some(f) = self.file(id) {
            f.have.insert(block, cv);
        }
    }

    /// The complete target of file `id` is there with digest `digest`.
    pub fn set_present(&mut self, id: u32, digest: Cv) {
        if let Some(f) = self.file(id) {
            f.present = Some(digest);
        }
    }

    /// File `id`'s temporary file must be emptied before it is written.
    pub fn set_fresh(&mut self, id: u32) {
        if let Some(f) = self.file(id) {
            f.fresh = true;
        }
    }

    /// A file with no blocks (empty) written in place at once.
    pub fn mark_done(&mut self, id: u32) {
        if let Some(f) = self.file(id) {
            if !f.done {
                f.done = true;
                self.files_done += 1;
            }
        }
    }

    /// Whether file `id` is complete.
    pub fn is_done(&self, id: u32) -> bool {
        self.files
            .get(id as usize)
            .and_then(Option::as_ref)
            .is_some_and(|f| f.done)
    }

    /// Whether the temporary file of `id` must be emptied first (then not again).
    pub fn take_fresh(&mut self, id: u32) -> bool {
        self.file(id).is_some_and(|f| std::mem::take(&mut f.fresh))
    }

    /// Whether the complete target of `id` was found (blocks for it now replace it).
    pub fn is_present(&self, id: u32) -> bool {
        self.files
            .get(id as usize)
            .and_then(Option::as_ref)
            .is_some_and(|f| f.present.is_some())
    }

    /// Check a record header against the manifest: `Ok((file, block))` for a block or
    /// confirmation that may be read, `Err` for a protocol violation.
    pub fn check(&self, h: &Header) -> Result<(u32, u64), String> {
        let f = self
            .files
            .get(h.file as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| format!("a record for entry {}, which is not a file", h.file))?;
        if h.tag == Tag::ConfirmFile {
            return if f.present.is_some() {
                Ok((h.file, 0))
            } else {
                Err(format!(
                    "a confirmation of file {}, which is not here",
                    h.file
                ))
            };
        }
        if !h.offset.is_multiple_of(BLOCK_SIZE) || h.offset >= f.size {
            return Err(format!(
                "a block at offset {} of file {} ({} bytes)",
                h.offset, h.file, f.size
            ));
        }
        let block = h.offset / BLOCK_SIZE;
        let len = f.size.saturating_sub(h.offset).min(BLOCK_SIZE);
        if u64::from(h.len) != len {
            return Err(format!(
                "a block of {} bytes where block {block} of file {} has {len}",
                h.len, h.file
            ));
        }
        if h.tag == Tag::Confirm && !f.have.contains_key(&block) {
            return Err(format!(
                "a confirmation of block {block} of file {}, which is not here",
                h.file
            ));
        }
        Ok((h.file, block))
    }

    /// Whether the data of a block of `id` is to be written (not for a complete file).
    pub fn wants_data(&self, id: u32) -> bool {
        !self.is_done(id)
    }

    fn verify(&mut self, id: u32, block: u64, cv: Cv) -> Received {
        let Some(f) = self.files.get_mut(id as usize).and_then(Option::as_mut) else {
            return Received::Mismatch;
        };
        if block >= f.blocks {
            return Received::Mismatch;
        }
        if f.done || f.verified.contains_key(&block) {
            return Received::Duplicate;
        }
        f.verified.insert(block, cv);
        f.remaining -= 1;
        let complete = f.remaining == 0;
        if complete {
            f.done = true;
            self.files_done += 1;
        }
        Received::Verified { complete }
    }

    /// A block's data arrived (`len` bytes) with the sender's checksum `sent`; `computed`
    /// is what the bytes hash to here.
    pub fn on_block(&mut self, id: u32, block: u64, sent: Cv, computed: Cv, len: u64) -> Received {
        self.records += 1;
        self.carried_bytes += len;
        if let Some(f) = self.file(id) {
            // Whatever was there is overwritten now.
            f.have.remove(&block);
            f.present = None;
        }
        if sent != computed {
            self.mismatches += 1;
            return Received::Mismatch;
        }
        self.verify(id, block, sent)
    }

    /// A record (a block, or a confirmation of a block or file) whose tag did not verify:
    /// what it says is not taken, and what it covered is asked for again as a mismatch is.
    pub fn on_forged(&mut self, h: &Header, block: u64) -> Received {
        self.records += 1;
        self.mismatches += 1;
        self.forged += 1;
        if let Some(f) = self.file(h.file) {
            match h.tag {
                Tag::Block => {
                    // What a write of its bytes left there is not this end's copy any more.
                    f.have.remove(&block);
                    f.present = None;
                }
                Tag::ConfirmFile if !f.done => {
                    f.present = None;
                    f.fresh = true;
                }
                _ => {}
            }
        }
        if h.tag == Tag::Block {
            self.carried_bytes += u64::from(h.len);
        }
        Received::Mismatch
    }

    /// The sender confirms this end's copy of a block (its checksum `cv`).
    pub fn on_confirm(&mut self, id: u32, block: u64, cv: Cv) -> Received {
        self.records += 1;
        let mine = self
            .files
            .get(id as usize)
            .and_then(Option::as_ref)
            .and_then(|f| f.have.get(&block).copied());
        if mine != Some(cv) {
            self.mismatches += 1;
            return Received::Mismatch;
        }
        let r = self.verify(id, block, cv);
        if matches!(r, Received::Verified { .. }) {
            let len = self
                .files
                .get(id as usize)
                .and_then(Option::as_ref)
                .map_or(0, |f| {
                    f.size.saturating_sub(block * BLOCK_SIZE).min(BLOCK_SIZE)
                });
            self.present_bytes += len;
        }
        r
    }

    /// The sender confirms this end's complete copy of file `id` (its digest).
    pub fn on_confirm_file(&mut self, id: u32, digest: Cv) -> Received {
        self.records += 1;
        let Some(f) = self.files.get_mut(id as usize).and_then(Option::as_mut) else {
            return Received::Mismatch;
        };
        if f.done {
            return Received::Duplicate;
        }
        if f.present != Some(digest) {
            self.mismatches += 1;
            f.present = None;
            f.fresh = true;
            return Received::Mismatch;
        }
        f.confirmed = Some(digest);
        f.done = true;
        f.remaining = 0;
        self.files_done += 1;
        self.present_bytes += f.size;
        Received::Verified { complete: true }
    }

    /// Blocks of incomplete files not verified yet: what to ask for again.
    pub fn resend_list(&self) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        for (id, f) in self.files.iter().enumerate() {
            let Some(f) = f else { continue };
            if f.done {
                continue;
            }
            out.extend(
                (0..f.blocks)
                    .filter(|b| !f.verified.contains_key(b))
                    .map(|b| (id as u32, b)),
            );
        }
        out
    }

    /// The digest of file `id`, once complete.
    pub fn digest(&self, id: u32) -> Option<Cv> {
        let f = self.files.get(id as usize)?.as_ref()?;
        if !f.done {
            return None;
        }
        if let Some(d) = f.confirmed {
            return Some(d);
        }
        if f.verified.len() as u64 != f.blocks {
            return None;
        }
        let cvs: Vec<Cv> = f.verified.values().copied().collect();
        Some(file_digest(&cvs))
    }

    /// Whether file `id` was (partly) there from an earlier run.
    pub fn resumed(&self, id: u32) -> bool {
        self.files
            .get(id as usize)
            .and_then(Option::as_ref)
            .is_some_and(|f| !f.have.is_empty())
    }

    /// The digest over all files' digests, once every file is complete.
    pub fn tree_digest(&self) -> Option<String> {
        let mut t = TreeDigest::default();
        for (id, f) in self.files.iter().enumerate() {
            if f.is_some() {
                t.add(id as u32, &self.digest(id as u32)?);
            }
        }
        Some(t.hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copy::digest::block_cv;

    fn entries() -> Vec<Entry> {
        let e = |path: &str, kind, size| Entry {
            path: path.into(),
            kind,
            size,
            mode: 0o644,
            mtime_s: 0,
            mtime_ns: 0,
        };
        vec![
            e("t", EntryKind::Dir, 0),
            e("t/big", EntryKind::File, 2 * BLOCK_SIZE + 5),
            e("t/small", EntryKind::File, 3),
        ]
    }

    fn hdr(tag: Tag, file: u32, offset: u64, len: u32) -> Header {
        Header {
            tag,
            file,
            offset,
            len,
            round: 0,
        }
    }

    #[test]
    fn a_manifest_size_of_u64_max_costs_nothing_until_blocks_arrive() {
        // This allocated size / 4 MiB checksums at once (145 TB) and aborted the process.
        let mut m = entries();
        m[1].size = u64::MAX;
        let mut t = RecvTable::new(&m);
        let last = u64::MAX / BLOCK_SIZE * BLOCK_SIZE;
        assert_eq!(
            t.check(&hdr(Tag::Block, 1, last, (u64::MAX - last) as u32)),
            Ok((1, u64::MAX / BLOCK_SIZE))
        );
        let cv = [7u8; 32];
        assert_eq!(
            t.on_block(1, 0, cv, cv, BLOCK_SIZE),
            Received::Verified { complete: false }
        );
        assert_eq!(t.on_block(1, 0, cv, cv, BLOCK_SIZE), Received::Duplicate);
        assert_eq!(t.digest(1), None);
    }

    #[test]
    fn headers_that_do_not_fit_the_manifest_are_refused() {
        let t = RecvTable::new(&entries());
        assert_eq!(
            t.check(&hdr(Tag::Block, 1, BLOCK_SIZE, BLOCK_SIZE as u32)),
            Ok((1, 1))
        );
        assert_eq!(t.check(&hdr(Tag::Block, 1, 2 * BLOCK_SIZE, 5)), Ok((1, 2)));
        for bad in [
            hdr(Tag::Block, 0, 0, 0),
            hdr(Tag::Block, 9, 0, 3),
            hdr(Tag::Block, 1, 1, BLOCK_SIZE as u32),
            hdr(Tag::Block, 1, 3 * BLOCK_SIZE, 5),
            hdr(Tag::Block, 1, 0, 7),
            hdr(Tag::Block, 2, 0, 4),
            hdr(Tag::Confirm, 2, 0, 3),
            hdr(Tag::ConfirmFile, 2, 0, 0),
        ] {
            assert!(t.check(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_file_completes_when_every_block_is_verified_and_mismatches_are_asked_again() {
        let mut t = RecvTable::new(&entries());
        let size = 2 * BLOCK_SIZE + 5;
        let cv = |b: u64| block_cv(size, BLOCK_SIZE, b * BLOCK_SIZE, &[b as u8; 8]);
        t.set_have(1, 2, cv(2));
        assert_eq!(
            t.on_block(1, 0, cv(0), cv(0), BLOCK_SIZE),
            Received::Verified { complete: false }
        );
        assert_eq!(
            t.on_block(1, 1, cv(1), cv(0), BLOCK_SIZE),
            Received::Mismatch
        );
        assert_eq!(
            t.on_confirm(1, 2, cv(2)),
            Received::Verified { complete: false }
        );
        assert_eq!(
            t.on_block(2, 0, [1; 32], [1; 32], 3),
            Received::Verified { complete: true }
        );
        assert_eq!(t.resend_list(), vec![(1, 1)]);
        assert_eq!(t.tree_digest(), None);
        assert_eq!(
            t.on_block(1, 1, cv(1), cv(1), BLOCK_SIZE),
            Received::Verified { complete: true }
        );
        assert_eq!(
            t.on_block(1, 1, cv(1), cv(1), BLOCK_SIZE),
            Received::Duplicate
        );
        assert!(t.resend_list().is_empty());
        assert_eq!(t.digest(1), Some(file_digest(&[cv(0), cv(1), cv(2)])));
        assert!(t.tree_digest().is_some());
        assert_eq!((t.files_done, t.mismatches, t.records), (2, 1, 6));
        assert_eq!(t.present_bytes, 5);
        assert!(t.resumed(1));
    }

    #[test]
    fn a_present_file_is_confirmed_whole_or_asked_for_in_full() {
        let mut t = RecvTable::new(&entries());
        t.set_present(2, [4; 32]);
        assert!(t.check(&hdr(Tag::ConfirmFile, 2, 0, 0)).is_ok());
        assert_eq!(t.on_confirm_file(2, [5; 32]), Received::Mismatch);
        assert!(t.take_fresh(2), "the wrong copy is replaced");
        assert!(!t.take_fresh(2));
        assert_eq!(t.resend_list(), vec![(1, 0), (1, 1), (1, 2), (2, 0)]);
        let mut t = RecvTable::new(&entries());
        t.set_present(2, [4; 32]);
        assert_eq!(
            t.on_confirm_file(2, [4; 32]),
            Received::Verified { complete: true }
        );
        assert_eq!(t.digest(2), Some([4; 32]));
        assert_eq!(t.present_bytes, 3);
    }
}
