//! The sender's bookkeeping, without I/O: which blocks (and which files to check whole)
//! are still to go, which are being sent, every block's checksum, and each file's digest
//! once its blocks are all known.
//!
//! # Calling order
//!
//! [`SendQueue::new`] from the manifest and the receiver's plan. Each sending stream calls
//! [`SendQueue::take`] and, once the item's record is written (or it gave up on it),
//! [`SendQueue::block_done`], [`SendQueue::check_done`] or [`SendQueue::abandon`]. A round
//! is over when [`SendQueue::idle`]; the receiver's resend list goes to
//! [`SendQueue::resend`] and starts the next.

use super::digest::{file_digest, Cv, TreeDigest};
use crate::files::{Entry, EntryKind};
use std::collections::{HashMap, VecDeque};

/// One thing a stream does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// Send block `block` of `file`, unless the receiver's copy (`expect`) matches it.
    Block {
        /// The manifest entry.
        file: u32,
        /// The block's index in the file.
        block: u64,
        /// The checksum of the receiver's copy of it, from an earlier run.
        expect: Option<Cv>,
    },
    /// The receiver has the whole file with this digest: hash it, and confirm it or send
    /// all its blocks.
    CheckFile {
        /// The manifest entry.
        file: u32,
        /// The receiver's digest of it.
        digest: Cv,
    },
}

/// What the receiver said it has.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Have {
    /// Complete files: their digest.
    pub present: HashMap<u32, Cv>,
    /// Blocks of partial files.
    pub blocks: HashMap<(u32, u64), Cv>,
}

/// A round's list of blocks to send again, as it comes in records from the receiver: it
/// names only blocks that exist, each once, so it never holds more than the manifest's
/// blocks however many records a receiver sends.
#[derive(Debug, Default)]
pub struct ResendList {
    blocks: Vec<(u32, u64)>,
    seen: std::collections::HashSet<(u32, u64)>,
}

impl ResendList {
    /// One record of the list (`last` ends it); `Err` names the violation.
    pub fn add(
        &mut self,
        queue: &SendQueue,
        more: &[(u32, u64)],
        last: bool,
        per_record: usize,
    ) -> Result<(), String> {
        if more.len() > per_record {
            return Err(format!(
                "a resend record of {} blocks (at most {per_record})",
                more.len()
            ));
        }
        if more.is_empty() && !last {
            return Err("an empty resend record that does not end the list".into());
        }
        for &(file, block) in more {
            if !queue.exists(file, block) {
                return Err(format!(
                    "a resend of block {block} of entry {file}, which does not exist"
                ));
            }
            if !self.seen.insert((file, block)) {
                return Err(format!(
                    "block {block} of entry {file} twice in one resend list"
                ));
            }
        }
        self.blocks.extend_from_slice(more);
        Ok(())
    }

    /// The blocks, in the order asked.
    pub fn blocks(&self) -> &[(u32, u64)] {
        &self.blocks
    }
}

/// The sender's queue. See the module documentation.
#[derive(Debug)]
pub struct SendQueue {
    items: VecDeque<Item>,
    in_flight: u32,
    records: u64,
    /// Per manifest entry: the checksums of its blocks (empty for directories).
    cvs: Vec<Vec<Option<Cv>>>,
    missing: Vec<u64>,
    entries: usize,
    /// Bytes of blocks sent with their data.
    pub carried_bytes: u64,
    /// Bytes the receiver had already (confirmed, not sent).
    pub present_bytes: u64,
    /// Blocks sent again after a failed checksum.
    pub resent_blocks: u64,
    /// Whole files the receiver had already.
    pub files_confirmed: u64,
    confirmed: std::collections::HashSet<u32>,
}

impl SendQueue {
    /// Every block of every file in `entries`, less what `have` says is there.
    pub fn new(entries: &[Entry], have: &Have) -> SendQueue {
        let mut items = VecDeque::new();
        let mut cvs = Vec::with_capacity(entries.len());
        let mut missing = Vec::with_capacity(entries.len());
        for (id, e) in entries.iter().enumerate() {
            let id = id as u32;
            let n = e.blocks();
            cvs.push(vec![None; n as usize]);
            missing.push(n);
            if e.kind != EntryKind::File || n == 0 {
                continue;
            }
            if let Some(d) = have.present.get(&id) {
                items.push_back(Item::CheckFile {
                    file: id,
                    digest: *d,
                });
                continue;
            }
            for block in 0..n {
                items.push_back(Item::Block {
                    file: id,
                    block,
                    expect: have.blocks.get(&(id, block)).copied(),
                });
            }
        }
        SendQueue {
            items,
            in_flight: 0,
            records: 0,
            cvs,
            missing,
            entries: entries.len(),
            carried_bytes: 0,
            present_bytes: 0,
            resent_blocks: 0,
            files_confirmed: 0,
            confirmed: std::collections::HashSet::new(),
        }
    }

    /// The next item, if any.
    pub fn take(&mut self) -> Option<Item> {
        let it = self.items.pop_front()?;
        self.in_flight += 1;
        Some(it)
    }

    /// Nothing queued and nothing being sent: the round is over.
    pub fn idle(&self) -> bool {
        self.items.is_empty() && self.in_flight == 0
    }

    /// Records written in all rounds.
    pub fn records(&self) -> u64 {
        self.records
    }

    fn set_cv(&mut self, file: u32, block: u64, cv: Cv) -> bool {
        let Some(slot) = self
            .cvs
            .get_mut(file as usize)
            .and_then(|v| v.get_mut(block as usize))
        else {
            return false;
        };
        let first = slot.is_none();
        *slot = Some(cv);
        if first {
            self.missing[file as usize] -= 1;
        }
        first && self.missing[file as usize] == 0
    }

    /// A block's record was written: its data (`carried` bytes) or a confirmation of the
    /// receiver's copy (`present` bytes). Returns whether the file's checksums are now all
    /// known.
    pub fn block_done(
        &mut self,
        file: u32,
        block: u64,
        cv: Cv,
        carried: u64,
        present: u64,
    ) -> bool {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.records += 1;
        self.carried_bytes += carried;
        self.present_bytes += present;
        self.set_cv(file, block, cv)
    }

    /// A whole-file check ended: `cvs` are the file's checksums as hashed here. When they
    /// give the receiver's digest a confirmation was written; otherwise every block is
    /// queued to be sent first.
    pub fn check_done(&mut self, file: u32, cvs: Vec<Cv>, confirmed: bool, size: u64) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if confirmed {
            self.records += 1;
            self.present_bytes += size;
            self.files_confirmed += 1;
            self.confirmed.insert(file);
            for (b, cv) in cvs.into_iter().enumerate() {
                self.set_cv(file, b as u64, cv);
            }
        } else {
            let n = self.cvs.get(file as usize).map_or(0, Vec::len) as u64;
            for block in (0..n).rev() {
                self.items.push_front(Item::Block {
                    file,
                    block,
                    expect: None,
                });
            }
        }
    }

    /// Whether the receiver's complete copy of `file` was confirmed.
    pub fn confirmed(&self, file: u32) -> bool {
        self.confirmed.contains(&file)
    }

    /// A stream gave up on an item (it failed or the transfer stops).
    pub fn abandon(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Whether block `block` of entry `file` exists.
    fn exists(&self, file: u32, block: u64) -> bool {
        self.cvs
            .get(file as usize)
            .is_some_and(|v| (block as usize) < v.len())
    }

    /// The receiver wants these blocks again (they failed their checksum); unknown ones
    /// are refused.
    pub fn resend(&mut self, blocks: &[(u32, u64)]) -> Result<(), String> {
        for &(file, block) in blocks {
            if !self.exists(file, block) {
                return Err(format!(
                    "a resend of block {block} of entry {file}, which does not exist"
                ));
            }
            self.resent_blocks += 1;
            self.items.push_back(Item::Block {
                file,
                block,
                expect: None,
            });
        }
        Ok(())
    }

    /// The digest of file `file`, once every block's checksum is known.
    pub fn digest(&self, file: u32) -> Option<Cv> {
        let v = self.cvs.get(file as usize)?;
        let all: Option<Vec<Cv>> = v.iter().copied().collect();
        all.map(|cvs| file_digest(&cvs))
    }

    /// The digest over all files' digests (`None` while one is incomplete).
    pub fn tree_digest(&self, entries: &[Entry]) -> Option<String> {
        let mut t = TreeDigest::default();
        for (id, e) in entries.iter().enumerate().take(self.entries) {
            if e.kind == EntryKind::File {
                t.add(id as u32, &self.digest(id as u32)?);
            }
        }
        Some(t.hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::BLOCK_SIZE;

    fn entry(path: &str, kind: EntryKind, size: u64) -> Entry {
        Entry {
            path: path.into(),
            kind,
            size,
            mode: 0o644,
            mtime_s: 1,
            mtime_ns: 0,
        }
    }

    fn manifest() -> Vec<Entry> {
        vec![
            entry("d", EntryKind::Dir, 0),
            entry("d/a", EntryKind::File, 2 * BLOCK_SIZE + 1),
            entry("d/empty", EntryKind::File, 0),
            entry("d/b", EntryKind::File, 10),
        ]
    }

    #[test]
    fn blocks_are_queued_in_file_order_with_what_the_receiver_has() {
        let mut have = Have::default();
        have.blocks.insert((1, 1), [9; 32]);
        have.present.insert(3, [7; 32]);
        let mut q = SendQueue::new(&manifest(), &have);
        let mut got = Vec::new();
        while let Some(it) = q.take() {
            got.push(it);
        }
        assert_eq!(
            got,
            vec![
                Item::Block {
                    file: 1,
                    block: 0,
                    expect: None
                },
                Item::Block {
                    file: 1,
                    block: 1,
                    expect: Some([9; 32])
                },
                Item::Block {
                    file: 1,
                    block: 2,
                    expect: None
                },
                Item::CheckFile {
                    file: 3,
                    digest: [7; 32]
                },
            ]
        );
        assert!(!q.idle(), "four items are being sent");
        for b in 0..3 {
            q.block_done(1, b, [b as u8; 32], 10, 0);
        }
        q.check_done(3, vec![[7; 32]], true, 10);
        assert!(q.idle());
        assert_eq!(q.records(), 4);
        assert!(q.digest(1).is_some());
        assert_eq!(q.digest(3), Some([7; 32]));
        assert!(
            q.tree_digest(&manifest()).is_some(),
            "an empty file needs no block"
        );
    }

    #[test]
    fn a_file_that_differs_is_sent_whole_and_resends_are_bounded_to_known_blocks() {
        let mut have = Have::default();
        have.present.insert(1, [1; 32]);
        let mut q = SendQueue::new(&manifest(), &have);
        assert!(matches!(q.take(), Some(Item::CheckFile { file: 1, .. })));
        q.check_done(1, vec![[0; 32]; 3], false, 0);
        let next: Vec<_> = std::iter::from_fn(|| q.take()).take(3).collect();
        assert!(next.iter().enumerate().all(|(i, it)| *it
            == Item::Block {
                file: 1,
                block: i as u64,
                expect: None
            }));
        assert!(q.tree_digest(&manifest()).is_none());
        assert!(q.resend(&[(1, 2)]).is_ok());
        assert!(q.resend(&[(1, 3)]).is_err());
        assert!(q.resend(&[(40, 0)]).is_err());
        assert_eq!(q.resent_blocks, 1);
    }

    #[test]
    fn a_resend_list_names_each_existing_block_once_whatever_the_receiver_sends() {
        let q = SendQueue::new(&manifest(), &Have::default());
        let mut l = ResendList::default();
        l.add(&q, &[(1, 0), (1, 2)], false, 2)
            .expect("known blocks");
        // The attack: records full of [0,0] with last: false, forever. The second is refused.
        assert!(l.add(&q, &[(1, 0)], false, 2).is_err(), "a block twice");
        assert!(
            l.add(&q, &[], false, 2).is_err(),
            "an empty record that is not last"
        );
        assert!(
            l.add(&q, &[(1, 1), (3, 0), (1, 1)], true, 2).is_err(),
            "over a record"
        );
        assert!(l.add(&q, &[(3, 1)], true, 2).is_err(), "no such block");
        assert!(
            l.add(&q, &[(0, 0)], true, 2).is_err(),
            "a directory has no block"
        );
        l.add(&q, &[(3, 0)], true, 2).expect("last");
        assert_eq!(l.blocks(), &[(1, 0), (1, 2), (3, 0)]);
        // At most every block of the manifest, however many records.
        let mut l = ResendList::default();
        let all = [(1, 0), (1, 1), (1, 2), (3, 0)];
        for b in all {
            l.add(&q, &[b], false, 1).expect("each once");
        }
        assert!(all.iter().all(|b| l.add(&q, &[*b], false, 1).is_err()));
        assert_eq!(l.blocks().len(), 4);
    }
}
