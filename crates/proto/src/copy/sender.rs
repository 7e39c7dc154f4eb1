//! The sending side of a copy as a state machine: stream 0's conversation (the manifest
//! out, the plan in, the end of each round, the resend lists, the final digest check) and
//! the queue every stream takes blocks from. No I/O and no clock: the driver (the transfer
//! crate's `engine::files`) reads and writes the records and hashes the files.
//!
//! # Calling order
//!
//! 1. [`Sender::new`] with the manifest's entries (walked by the driver).
//! 2. Drain [`Sender::poll_output`] after every call and carry the outputs out in order:
//!    [`SenderOutput::Record`] is a JSON record to write on stream 0,
//!    [`SenderOutput::StartBlocks`] says the plan is in (blocks may go on every stream),
//!    [`SenderOutput::Done`] and [`SenderOutput::Failed`] end the copy.
//! 3. Every frame from the receiver goes to [`Sender::handle_frame`] (or its body, still
//!    JSON, to [`Sender::handle_frame_bytes`]); a lost connection to
//!    [`Sender::handle_closed`].
//! 4. Once blocks may go, every stream takes [`Sender::take`] and reports each item with
//!    [`Sender::block_done`], [`Sender::check_done`] or [`Sender::abandon`]. When the round's
//!    items are all written, [`Sender::poll_output`] gives the round's `End` record.
//! 5. [`Sender::handle_timeout`] at [`Sender::poll_timeout`]: waiting for the receiver
//!    (its plan, its answer to a round) longer than the idle timeout fails the copy.

use super::digest::{self, Cv};
use super::queue::{Have, Item, ResendList, SendQueue};
use super::wire::{parse_record, PlanFile, ToReceiver, ToSender, ENTRIES_PER_RECORD};
use super::wire::{ITEMS_PER_RECORD, MAX_JSON};
use super::{violation, MAX_ROUNDS};
use crate::files::{Entry, FailKind, FileFailure};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the sender's driver does next.
#[derive(Clone, Debug, PartialEq)]
pub enum SenderOutput {
    /// Write this JSON record on stream 0.
    Record(ToReceiver),
    /// The receiver's plan is in: every stream takes blocks.
    StartBlocks,
    /// The receiver confirmed every file with the sender's tree digest.
    Done,
    /// The copy failed (once; nothing else follows).
    Failed(FileFailure),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Manifest,
    Plan,
    Blocks,
    Round,
    Done,
    Failed,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Sender {
    entries: Arc<Vec<Entry>>,
    warnings: Vec<String>,
    state: State,
    next_chunk: usize,
    have: Have,
    queue: SendQueue,
    round: u32,
    resend: ResendList,
    idle_timeout: Duration,
    heard: Option<Instant>,
    out: VecDeque<SenderOutput>,
}

impl Sender {
    /// A copy of `entries` (`warnings`: what the walk skipped), failing when the receiver
    /// says nothing for `idle_timeout` while it is waited for.
    pub fn new(entries: Vec<Entry>, warnings: Vec<String>, idle_timeout: Duration) -> Sender {
        Sender {
            queue: SendQueue::new(&[], &Have::default()),
            entries: Arc::new(entries),
            warnings,
            state: State::Manifest,
            next_chunk: 0,
            have: Have::default(),
            round: 0,
            resend: ResendList::default(),
            idle_timeout,
            heard: None,
            out: VecDeque::new(),
        }
    }

    /// The manifest's entries.
    pub fn entries(&self) -> &Arc<Vec<Entry>> {
        &self.entries
    }

    /// What the receiver said it has (empty before the plan).
    pub fn have(&self) -> &Have {
        &self.have
    }

    /// The queue (its counters and digests for the report).
    pub fn queue(&self) -> &SendQueue {
        &self.queue
    }

    /// The current round (0 first).
    pub fn round(&self) -> u32 {
        self.round
    }

    /// The copy is over (done or failed).
    pub fn is_over(&self) -> bool {
        matches!(self.state, State::Done | State::Failed)
    }

    /// The next thing to do, if any.
    pub fn poll_output(&mut self) -> Option<SenderOutput> {
        if let Some(o) = self.out.pop_front() {
            return Some(o);
        }
        match self.state {
            State::Manifest => Some(SenderOutput::Record(self.next_manifest_record())),
            State::Blocks if self.queue.idle() => {
                self.state = State::Round;
                self.heard = None;
                Some(SenderOutput::Record(ToReceiver::End {
                    round: self.round,
                    records: self.queue.records(),
                }))
            }
            _ => None,
        }
    }

    fn next_manifest_record(&mut self) -> ToReceiver {
        let at = self.next_chunk * ENTRIES_PER_RECORD;
        if at < self.entries.len() {
            self.next_chunk += 1;
            let end = (at + ENTRIES_PER_RECORD).min(self.entries.len());
            return ToReceiver::Manifest {
                entries: self.entries[at..end].to_vec(),
            };
        }
        self.state = State::Plan;
        self.heard = None;
        ToReceiver::ManifestEnd {
            warnings: self.warnings.clone(),
        }
    }

    /// When [`Sender::handle_timeout`] is due: the idle timeout, while the receiver is
    /// waited for.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Plan | State::Round => self.heard.and_then(|t| t.checked_add(self.idle_timeout)),
            _ => None,
        }
    }

    /// Time passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        if !matches!(self.state, State::Plan | State::Round) {
            return;
        }
        let heard = *self.heard.get_or_insert(now);
        if now.saturating_duration_since(heard) >= self.idle_timeout {
            self.fail(FileFailure::new(
                FailKind::Io,
                format!(
                    "no word from the receiver for {:.0} s",
                    self.idle_timeout.as_secs_f64()
                ),
            ));
        }
    }

    /// The connection to the receiver is gone (before its `Done`).
    pub fn handle_closed(&mut self, _now: Instant) {
        if !self.is_over() {
            self.fail(FileFailure::new(
                FailKind::Io,
                "the receiver closed the stream",
            ));
        }
    }

    /// A frame's JSON body (its length not yet checked).
    pub fn handle_frame_bytes(&mut self, now: Instant, body: &[u8]) {
        if body.len() > MAX_JSON {
            return self.fail(violation(format!("a record of {} bytes", body.len())));
        }
        match parse_record::<ToSender>(body) {
            Ok(msg) => self.handle_frame(now, msg),
            Err(f) => self.fail(f),
        }
    }

    /// A frame from the receiver.
    pub fn handle_frame(&mut self, now: Instant, msg: ToSender) {
        if self.is_over() {
            return;
        }
        self.heard = Some(now);
        let r = match (self.state, msg) {
            (State::Plan | State::Round, ToSender::Planning { .. }) => Ok(()),
            (State::Plan, ToSender::Plan { files }) => self.on_plan(files),
            (State::Plan, ToSender::PlanEnd) => {
                self.queue = SendQueue::new(&self.entries, &self.have);
                self.state = State::Blocks;
                self.out.push_back(SenderOutput::StartBlocks);
                Ok(())
            }
            (State::Round, ToSender::Resend { blocks, last }) => self.on_resend(&blocks, last),
            (State::Round, ToSender::Done { tree_digest, .. }) => self.on_done(&tree_digest),
            (State::Round, other) => Err(violation(format!("{other:?} after a round"))),
            (State::Plan, other) => Err(violation(format!("{other:?} before the plan's end"))),
            (_, other) => Err(violation(format!("{other:?} while blocks go"))),
        };
        if let Err(f) = r {
            self.fail(f);
        }
    }

    /// A record of the plan: every entry and block it names must exist.
    fn on_plan(&mut self, files: Vec<PlanFile>) -> Result<(), FileFailure> {
        for PlanFile { id, present, have } in files {
            let Some(e) = self.entries.get(id as usize) else {
                return Err(violation(format!("a plan for entry {id}")));
            };
            if let Some(d) = present {
                let d =
                    digest::from_hex(&d).ok_or_else(|| violation("a digest that is not hex"))?;
                self.have.present.insert(id, d);
            }
            for (b, cv) in have {
                let cv =
                    digest::from_hex(&cv).ok_or_else(|| violation("a checksum that is not hex"))?;
                if b >= e.blocks() {
                    return Err(violation(format!("block {b} of entry {id}")));
                }
                self.have.blocks.insert((id, b), cv);
            }
        }
        Ok(())
    }

    fn on_resend(&mut self, blocks: &[(u32, u64)], last: bool) -> Result<(), FileFailure> {
        self.resend
            .add(&self.queue, blocks, last, ITEMS_PER_RECORD)
            .map_err(violation)?;
        if !last {
            return Ok(());
        }
        let list = std::mem::take(&mut self.resend);
        self.round += 1;
        if self.round >= MAX_ROUNDS {
            return Err(FileFailure::new(
                FailKind::Integrity,
                format!(
                    "{} block(s) still failed their checksum after {MAX_ROUNDS} rounds",
                    list.blocks().len()
                ),
            ));
        }
        self.queue.resend(list.blocks()).map_err(violation)?;
        self.state = State::Blocks;
        Ok(())
    }

    fn on_done(&mut self, theirs: &str) -> Result<(), FileFailure> {
        if self.queue.tree_digest(&self.entries).as_deref() != Some(theirs) {
            return Err(FileFailure::new(
                FailKind::Integrity,
                "the receiver's digests differ from the sender's",
            ));
        }
        self.state = State::Done;
        self.out.push_back(SenderOutput::Done);
        Ok(())
    }

    fn fail(&mut self, f: FileFailure) {
        if self.is_over() {
            return;
        }
        self.state = State::Failed;
        self.out.clear();
        self.out.push_back(SenderOutput::Failed(f));
    }

    /// The next item for a stream, while blocks go.
    pub fn take(&mut self) -> Option<Item> {
        if self.state != State::Blocks {
            return None;
        }
        self.queue.take()
    }

    /// Whether every item of the round is taken and written (or there are none yet).
    pub fn round_idle(&self) -> bool {
        self.state != State::Blocks || self.queue.idle()
    }

    /// A block's record was written (see [`SendQueue::block_done`]); whether its file's
    /// checksums are all known now.
    pub fn block_done(
        &mut self,
        file: u32,
        block: u64,
        cv: Cv,
        carried: u64,
        present: u64,
    ) -> bool {
        self.queue.block_done(file, block, cv, carried, present)
    }

    /// A whole file was checked (see [`SendQueue::check_done`]).
    pub fn check_done(&mut self, file: u32, cvs: Vec<Cv>, confirmed: bool) {
        let size = self.entries.get(file as usize).map_or(0, |e| e.size);
        self.queue.check_done(file, cvs, confirmed, size);
    }

    /// A stream gave up on its item (it fails the copy).
    pub fn abandon(&mut self) {
        self.queue.abandon();
    }

    /// The tree digest, once every file's checksums are known.
    pub fn tree_digest(&self) -> Option<String> {
        self.queue.tree_digest(&self.entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::{EntryKind, BLOCK_SIZE};

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

    fn started(entries: Vec<Entry>) -> (Sender, Instant) {
        let t0 = Instant::now();
        let mut s = Sender::new(entries, vec![], Duration::from_secs(10));
        while let Some(SenderOutput::Record(r)) = s.poll_output() {
            if matches!(r, ToReceiver::ManifestEnd { .. }) {
                break;
            }
        }
        (s, t0)
    }

    #[test]
    fn sends_the_manifest_in_records_of_at_most_two_thousand_entries() {
        let entries: Vec<Entry> = (0..4500).map(|i| file(&format!("f{i}"), 1)).collect();
        let mut s = Sender::new(entries, vec!["w".into()], Duration::from_secs(10));
        let mut sizes = vec![];
        loop {
            match s.poll_output() {
                Some(SenderOutput::Record(ToReceiver::Manifest { entries })) => {
                    sizes.push(entries.len())
                }
                Some(SenderOutput::Record(ToReceiver::ManifestEnd { warnings })) => {
                    assert_eq!(warnings, vec!["w".to_string()]);
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(sizes, vec![2000, 2000, 500]);
        assert_eq!(s.poll_output(), None);
    }

    #[test]
    fn ends_the_round_once_every_taken_block_is_done() {
        let (mut s, t0) = started(vec![file("a", BLOCK_SIZE + 1)]);
        s.handle_frame(t0, ToSender::PlanEnd);
        assert_eq!(s.poll_output(), Some(SenderOutput::StartBlocks));
        let a = s.take().expect("block 0");
        let b = s.take().expect("block 1");
        assert_eq!(s.poll_output(), None, "blocks in flight");
        for it in [a, b] {
            if let Item::Block { file, block, .. } = it {
                s.block_done(file, block, [block as u8; 32], 1, 0);
            }
        }
        assert_eq!(
            s.poll_output(),
            Some(SenderOutput::Record(ToReceiver::End {
                round: 0,
                records: 2
            }))
        );
    }

    #[test]
    fn fails_when_a_plan_names_a_block_past_the_file() {
        let (mut s, t0) = started(vec![file("a", 10)]);
        s.handle_frame(
            t0,
            ToSender::Plan {
                files: vec![PlanFile {
                    id: 0,
                    present: None,
                    have: vec![(1, digest::hex(&[0; 32]))],
                }],
            },
        );
        let Some(SenderOutput::Failed(f)) = s.poll_output() else {
            panic!("no failure");
        };
        assert_eq!(f.kind, FailKind::Protocol);
        assert_eq!(s.poll_output(), None);
    }

    #[test]
    fn fails_after_the_idle_timeout_without_a_plan() {
        let (mut s, t0) = started(vec![file("a", 10)]);
        s.handle_timeout(t0);
        assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(10)));
        s.handle_timeout(t0 + Duration::from_secs(9));
        assert_eq!(s.poll_output(), None);
        s.handle_timeout(t0 + Duration::from_secs(10));
        assert!(matches!(s.poll_output(), Some(SenderOutput::Failed(_))));
    }

    #[test]
    fn a_done_with_another_digest_is_an_integrity_failure() {
        let (mut s, t0) = started(vec![file("a", 10)]);
        s.handle_frame(t0, ToSender::PlanEnd);
        assert_eq!(s.poll_output(), Some(SenderOutput::StartBlocks));
        let Some(Item::Block { file, block, .. }) = s.take() else {
            panic!("no block");
        };
        s.block_done(file, block, [1; 32], 10, 0);
        assert!(matches!(s.poll_output(), Some(SenderOutput::Record(_))));
        s.handle_frame(
            t0,
            ToSender::Done {
                files: 1,
                tree_digest: "00".into(),
            },
        );
        let Some(SenderOutput::Failed(f)) = s.poll_output() else {
            panic!("no failure");
        };
        assert_eq!(f.kind, FailKind::Integrity);
    }
}
