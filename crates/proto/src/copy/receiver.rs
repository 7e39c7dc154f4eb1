//! The receiving side of a copy as a state machine: the manifest in under the budgets, the
//! plan out, every record header checked against the table before its body is read, and
//! the end of each round answered with a resend list or `Done`. No I/O and no clock: the
//! driver (the transfer crate's `engine::files`) reads the records, plans with the file
//! system, writes the blocks and puts complete files into place.
//!
//! # Calling order
//!
//! 1. [`Receiver::new`] with the limits the sender's manifest is held to.
//! 2. For every record header on any stream, [`Receiver::handle_header`]: it answers what
//!    to read next ([`Body`]) or refuses (nothing is read or allocated for a refused record).
//!    Then, with exactly that body: [`Receiver::handle_json`], or for a block
//!    [`Receiver::handle_block`] (its trailer as sent, whose tag it checks, and the checksum
//!    computed over what was read),
//!    [`Receiver::handle_confirm`], [`Receiver::handle_confirm_file`]. A record that makes a
//!    file complete ([`Received::Verified`] with `complete`) is put into place by the driver,
//!    which then calls [`Receiver::handle_finalized`].
//! 3. Drain [`Receiver::poll_output`] after every call and carry the outputs out in order:
//!    [`ReceiverOutput::Plan`] (plan [`Receiver::entries`] with the file system, answer with
//!    [`Receiver::handle_planned`]), [`ReceiverOutput::Frame`] (write it on stream 0),
//!    [`ReceiverOutput::FinishDirs`] (give the directories their modes, answer with
//!    [`Receiver::handle_dirs_finished`]), [`ReceiverOutput::Done`] and
//!    [`ReceiverOutput::Failed`].
//! 4. [`Receiver::handle_timeout`] at [`Receiver::poll_timeout`]: while a round's last
//!    records are awaited, a keep-alive frame goes out every [`KEEPALIVE`]; no record for the
//!    idle timeout fails the copy.

use super::manifest_in::{ManifestIn, ManifestStep};
use super::table::{Received, RecvTable};
use super::wire::MAX_JSON;
use super::wire::{
    parse_record, Header, PlanFile, Tag, ToReceiver, ToSender, Trailer, ITEMS_PER_RECORD,
};
use super::{budget::CopyLimits, digest::Cv, violation, MAX_ROUNDS};
use crate::files::{Entry, FailKind, FileFailure};
use crate::keys::BlockKey;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a receiver waiting for a round's records tells the sender it is alive.
pub const KEEPALIVE: Duration = Duration::from_millis(1000);

/// What to read after a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// `len` bytes of JSON, for [`Receiver::handle_json`].
    Json(usize),
    /// A block's data and checksum, for [`Receiver::handle_block`].
    Block {
        /// The manifest entry.
        file: u32,
        /// The block's index.
        block: u64,
        /// The file's size (for the block's hasher).
        size: u64,
        /// Write the data at the block's offset (not for a file complete already).
        write: bool,
    },
    /// A block's checksum, for [`Receiver::handle_confirm`].
    Confirm {
        /// The manifest entry.
        file: u32,
        /// The block's index.
        block: u64,
    },
    /// A file's digest, for [`Receiver::handle_confirm_file`].
    ConfirmFile {
        /// The manifest entry.
        file: u32,
    },
}

/// What the receiver's driver does next.
#[derive(Clone, Debug, PartialEq)]
pub enum ReceiverOutput {
    /// The manifest is complete: plan [`Receiver::entries`] (what the sender skipped comes
    /// along for the report).
    Plan {
        /// The sender's warnings.
        warnings: Vec<String>,
    },
    /// Write this frame on stream 0.
    Frame(ToSender),
    /// Every file is in place: give the directories this copy created their modes.
    FinishDirs,
    /// `Done` is written: the copy is complete here.
    Done,
    /// The copy failed (once; nothing else follows).
    Failed(FileFailure),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Manifest,
    Planning,
    Blocks,
    Finishing,
    Done,
    Failed,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Receiver {
    state: State,
    manifest: ManifestIn,
    entries: Arc<Vec<Entry>>,
    table: RecvTable,
    round: u32,
    /// The records the sender counted at the end of the round awaited.
    end: Option<u64>,
    finalizing: u32,
    tree_digest: Option<String>,
    idle_timeout: Duration,
    heard: Option<Instant>,
    alive_sent: Option<Instant>,
    out: VecDeque<ReceiverOutput>,
    /// The session's block key: every trailer's tag is checked with it.
    key: BlockKey,
}

impl Receiver {
    /// A copy to receive: the manifest held to `limits`; a round's records awaited at most
    /// `idle_timeout` without one arriving; every block's and confirmation's tag checked
    /// with the session's block `key`.
    pub fn new(limits: CopyLimits, idle_timeout: Duration, key: BlockKey) -> Receiver {
        Receiver {
            state: State::Manifest,
            manifest: ManifestIn::new(limits),
            entries: Arc::new(Vec::new()),
            table: RecvTable::new(&[]),
            round: 0,
            end: None,
            finalizing: 0,
            tree_digest: None,
            idle_timeout,
            heard: None,
            alive_sent: None,
            out: VecDeque::new(),
            key,
        }
    }

    /// The manifest's entries (empty until it is complete).
    pub fn entries(&self) -> &Arc<Vec<Entry>> {
        &self.entries
    }

    /// The table (its counters and digests for the report).
    pub fn table(&self) -> &RecvTable {
        &self.table
    }

    /// The table, for the driver's file operations (which file to empty first).
    pub fn table_mut(&mut self) -> &mut RecvTable {
        &mut self.table
    }

    /// The current round (0 first).
    pub fn round(&self) -> u32 {
        self.round
    }

    /// The digest over every file, once `Done` is sent.
    pub fn tree_digest(&self) -> Option<&str> {
        self.tree_digest.as_deref()
    }

    /// The copy is over (done or failed).
    pub fn is_over(&self) -> bool {
        matches!(self.state, State::Done | State::Failed)
    }

    /// The sender ended a round whose answer is not out yet.
    pub fn round_pending(&self) -> bool {
        self.end.is_some() || self.state == State::Finishing
    }

    /// The next thing to do, if any.
    pub fn poll_output(&mut self) -> Option<ReceiverOutput> {
        self.out.pop_front()
    }

    fn fail(&mut self, f: FileFailure) -> FileFailure {
        if !self.is_over() {
            self.state = State::Failed;
            self.out.clear();
            self.out.push_back(ReceiverOutput::Failed(f.clone()));
        }
        f
    }

    /// A record header on stream `stream`: what to read next, or why not (the copy fails).
    pub fn handle_header(
        &mut self,
        now: Instant,
        stream: u32,
        h: &Header,
    ) -> Result<Body, FileFailure> {
        self.heard = Some(now);
        let r = match self.state {
            State::Manifest if stream == 0 => self.manifest.admit(h).map(Body::Json),
            State::Manifest | State::Planning => Err(violation("a block before the plan")),
            State::Blocks | State::Finishing | State::Done => self.check(h),
            State::Failed => Err(FileFailure::new(FailKind::Io, "the copy failed")),
        };
        r.map_err(|f| self.fail(f))
    }

    fn check(&self, h: &Header) -> Result<Body, FileFailure> {
        if h.tag == Tag::Json {
            let len = h.len as usize;
            if len > MAX_JSON {
                return Err(violation(format!("a record of {len} bytes")));
            }
            return Ok(Body::Json(len));
        }
        let (file, block) = self.table.check(h).map_err(violation)?;
        Ok(match h.tag {
            Tag::Confirm => Body::Confirm { file, block },
            Tag::ConfirmFile => Body::ConfirmFile { file },
            _ => Body::Block {
                file,
                block,
                size: self.entries.get(file as usize).map_or(0, |e| e.size),
                write: self.table.wants_data(file),
            },
        })
    }

    /// The body of a JSON record admitted by [`Receiver::handle_header`]; `Err` if it
    /// breaks the protocol (the copy fails).
    pub fn handle_json(
        &mut self,
        now: Instant,
        stream: u32,
        body: &[u8],
    ) -> Result<(), FileFailure> {
        self.heard = Some(now);
        if self.state == State::Manifest {
            return match self.manifest.on_body(body) {
                Ok(ManifestStep::More) => Ok(()),
                Ok(ManifestStep::Done { entries, warnings }) => {
                    self.table = RecvTable::new(&entries);
                    self.entries = Arc::new(entries);
                    self.state = State::Planning;
                    self.out.push_back(ReceiverOutput::Plan { warnings });
                    Ok(())
                }
                Err(f) => Err(self.fail(f)),
            };
        }
        let msg = parse_record::<ToReceiver>(body).map_err(|f| self.fail(f))?;
        match msg {
            ToReceiver::Alive => Ok(()),
            ToReceiver::End { records, .. }
                if stream == 0 && self.state == State::Blocks && self.end.is_none() =>
            {
                self.end = Some(records);
                self.alive_sent = Some(now);
                self.check_round();
                Ok(())
            }
            other => Err(self.fail(violation(format!("{other:?} during the blocks")))),
        }
    }

    /// The plan the driver made for [`Receiver::entries`]: the table with what an earlier
    /// run left, and the plan's files for the sender (or why planning failed).
    pub fn handle_planned(
        &mut self,
        now: Instant,
        planned: Result<(RecvTable, Vec<PlanFile>), FileFailure>,
    ) {
        if self.state != State::Planning {
            return;
        }
        self.heard = Some(now);
        match planned {
            Ok((table, plan)) => {
                self.table = table;
                for files in plan.chunks(ITEMS_PER_RECORD) {
                    self.out.push_back(ReceiverOutput::Frame(ToSender::Plan {
                        files: files.to_vec(),
                    }));
                }
                self.out.push_back(ReceiverOutput::Frame(ToSender::PlanEnd));
                self.state = State::Blocks;
            }
            Err(f) => {
                self.fail(f);
            }
        }
    }

    /// A block's data was read (and written if asked): its checksum as sent and as
    /// computed over what was read.
    pub fn handle_block(
        &mut self,
        now: Instant,
        h: &Header,
        block: u64,
        sent: Trailer,
        computed: Cv,
    ) -> Received {
        self.heard = Some(now);
        let r = if sent.verify(&self.key, h) {
            self.table
                .on_block(h.file, block, sent.cv, computed, u64::from(h.len))
        } else {
            self.table.on_forged(h, block)
        };
        self.received(r)
    }

    /// A sealed block (header `h`, `cp --encrypt`) whose body failed to open: corrupted,
    /// forged or moved on its way. Nothing of it was written; it is asked for again, as a
    /// block whose tag fails is.
    pub fn handle_unopened(&mut self, now: Instant, h: &Header, block: u64) -> Received {
        self.heard = Some(now);
        let r = self.table.on_forged(h, block);
        self.received(r)
    }

    /// A confirmation (header `h`) of the receiver's copy of a block.
    pub fn handle_confirm(
        &mut self,
        now: Instant,
        h: &Header,
        block: u64,
        sent: Trailer,
    ) -> Received {
        self.heard = Some(now);
        let r = if sent.verify(&self.key, h) {
            self.table.on_confirm(h.file, block, sent.cv)
        } else {
            self.table.on_forged(h, block)
        };
        self.received(r)
    }

    /// A confirmation (header `h`) of the receiver's complete copy of a file.
    pub fn handle_confirm_file(&mut self, now: Instant, h: &Header, sent: Trailer) -> Received {
        self.heard = Some(now);
        let r = if sent.verify(&self.key, h) {
            self.table.on_confirm_file(h.file, sent.cv)
        } else {
            self.table.on_forged(h, 0)
        };
        self.received(r)
    }

    fn received(&mut self, r: Received) -> Received {
        if r == (Received::Verified { complete: true }) {
            self.finalizing += 1;
        } else {
            self.check_round();
        }
        r
    }

    /// A complete file is in place (or could not be put there).
    pub fn handle_finalized(&mut self, _now: Instant, r: Result<(), FileFailure>) {
        self.finalizing = self.finalizing.saturating_sub(1);
        match r {
            Ok(()) => self.check_round(),
            Err(f) => {
                self.fail(f);
            }
        }
    }

    /// Every record of the round awaited is in and every complete file in place: ask for
    /// what failed, or finish.
    fn check_round(&mut self) {
        let Some(records) = self.end else { return };
        if self.table.records > records {
            self.fail(violation("more records than the sender counted"));
            return;
        }
        if self.table.records < records || self.finalizing > 0 {
            return;
        }
        self.end = None;
        let resend = self.table.resend_list();
        if resend.is_empty() {
            self.state = State::Finishing;
            self.out.push_back(ReceiverOutput::FinishDirs);
            return;
        }
        self.round += 1;
        if self.round >= MAX_ROUNDS {
            self.fail(FileFailure::new(
                FailKind::Integrity,
                format!(
                    "{} block(s) still failed their checksum after {MAX_ROUNDS} rounds",
                    resend.len()
                ),
            ));
            return;
        }
        let n = resend.chunks(ITEMS_PER_RECORD).count();
        for (i, blocks) in resend.chunks(ITEMS_PER_RECORD).enumerate() {
            self.out.push_back(ReceiverOutput::Frame(ToSender::Resend {
                blocks: blocks.to_vec(),
                last: i + 1 == n,
            }));
        }
    }

    /// The directories are finished (or could not be): `Done` goes out.
    pub fn handle_dirs_finished(&mut self, _now: Instant, r: Result<(), FileFailure>) {
        if self.state != State::Finishing {
            return;
        }
        if let Err(f) = r {
            self.fail(f);
            return;
        }
        let Some(tree_digest) = self.table.tree_digest() else {
            self.fail(FileFailure::new(FailKind::Integrity, "files incomplete"));
            return;
        };
        self.tree_digest = Some(tree_digest.clone());
        self.state = State::Done;
        self.out.push_back(ReceiverOutput::Frame(ToSender::Done {
            files: self.table.files_done,
            tree_digest,
        }));
        self.out.push_back(ReceiverOutput::Done);
    }

    /// When [`Receiver::handle_timeout`] is due: while a round's records are awaited, the
    /// next keep-alive or the idle timeout, whichever comes first.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.end?;
        let alive = self.alive_sent.and_then(|t| t.checked_add(KEEPALIVE));
        let idle = self.heard.and_then(|t| t.checked_add(self.idle_timeout));
        alive.into_iter().chain(idle).min()
    }

    /// Time passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.end.is_none() || self.is_over() {
            return;
        }
        let heard = *self.heard.get_or_insert(now);
        if now.saturating_duration_since(heard) >= self.idle_timeout {
            self.fail(FileFailure::new(
                FailKind::Io,
                format!(
                    "no record from the sender for {:.0} s",
                    self.idle_timeout.as_secs_f64()
                ),
            ));
            return;
        }
        let sent = *self.alive_sent.get_or_insert(now);
        if now.saturating_duration_since(sent) >= KEEPALIVE {
            self.alive_sent = Some(now);
            self.out
                .push_back(ReceiverOutput::Frame(ToSender::Planning {
                    checked_bytes: 0,
                }));
        }
    }

    /// The connection to the sender is gone before the copy ended.
    pub fn handle_closed(&mut self, _now: Instant) {
        if !self.is_over() {
            self.fail(FileFailure::new(
                FailKind::Io,
                "the sender closed the stream",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copy::digest::{block_cv, file_digest};
    use crate::files::EntryKind;

    fn json_header(len: usize) -> Header {
        Header {
            tag: Tag::Json,
            file: 0,
            offset: 0,
            len: len as u32,
            round: 0,
        }
    }

    fn feed(r: &mut Receiver, now: Instant, msg: &ToReceiver) -> Result<(), FileFailure> {
        let body = serde_json::to_vec(msg).map_err(violation)?;
        let Body::Json(n) = r.handle_header(now, 0, &json_header(body.len()))? else {
            return Err(violation("not json"));
        };
        r.handle_json(now, 0, &body[..n])
    }

    fn planned(entries: Vec<Entry>) -> (Receiver, Instant) {
        let t0 = Instant::now();
        let limits = CopyLimits::server(100, 1 << 40);
        let mut r = Receiver::new(limits, Duration::from_secs(10), key());
        feed(&mut r, t0, &ToReceiver::Manifest { entries }).expect("manifest");
        feed(&mut r, t0, &ToReceiver::ManifestEnd { warnings: vec![] }).expect("end");
        assert_eq!(
            r.poll_output(),
            Some(ReceiverOutput::Plan { warnings: vec![] })
        );
        let table = RecvTable::new(r.entries());
        r.handle_planned(t0, Ok((table, vec![])));
        assert_eq!(
            r.poll_output(),
            Some(ReceiverOutput::Frame(ToSender::PlanEnd))
        );
        (r, t0)
    }

    fn key() -> BlockKey {
        BlockKey::from_bytes([1; 32])
    }

    fn small(data: &[u8]) -> Vec<Entry> {
        vec![Entry {
            path: "a".into(),
            kind: EntryKind::File,
            size: data.len() as u64,
            mode: 0o644,
            mtime_s: 0,
            mtime_ns: 0,
        }]
    }

    #[test]
    fn refuses_a_block_before_the_plan() {
        let mut r = Receiver::new(CopyLimits::server(10, 100), Duration::from_secs(1), key());
        let h = Header {
            tag: Tag::Block,
            ..json_header(10)
        };
        assert!(r.handle_header(Instant::now(), 0, &h).is_err());
        assert!(matches!(r.poll_output(), Some(ReceiverOutput::Failed(_))));
    }

    #[test]
    fn asks_again_for_a_block_that_failed_and_finishes_after_it_came() {
        let data = b"hello";
        let (mut r, t0) = planned(small(data));
        let cv = block_cv(5, crate::files::BLOCK_SIZE, 0, data);
        let h = Header {
            tag: Tag::Block,
            len: 5,
            ..json_header(5)
        };
        let body = r.handle_header(t0, 1, &h).expect("block");
        assert!(matches!(
            body,
            Body::Block {
                file: 0,
                block: 0,
                write: true,
                ..
            }
        ));
        let sent = Trailer::sealed(&key(), &h, cv);
        assert_eq!(r.handle_block(t0, &h, 0, sent, [0; 32]), Received::Mismatch);
        feed(
            &mut r,
            t0,
            &ToReceiver::End {
                round: 0,
                records: 1,
            },
        )
        .expect("end");
        assert_eq!(
            r.poll_output(),
            Some(ReceiverOutput::Frame(ToSender::Resend {
                blocks: vec![(0, 0)],
                last: true
            }))
        );
        r.handle_header(t0, 1, &h).expect("block again");
        let got = r.handle_block(t0, &h, 0, sent, cv);
        assert_eq!(got, Received::Verified { complete: true });
        feed(
            &mut r,
            t0,
            &ToReceiver::End {
                round: 1,
                records: 2,
            },
        )
        .expect("end");
        assert_eq!(r.poll_output(), None, "the file is not in place yet");
        r.handle_finalized(t0, Ok(()));
        assert_eq!(r.poll_output(), Some(ReceiverOutput::FinishDirs));
        r.handle_dirs_finished(t0, Ok(()));
        let Some(ReceiverOutput::Frame(ToSender::Done { files, tree_digest })) = r.poll_output()
        else {
            panic!("no done");
        };
        assert_eq!(files, 1);
        let mut t = crate::copy::digest::TreeDigest::default();
        t.add(0, &file_digest(&[cv]));
        assert_eq!(tree_digest, t.hex());
        assert_eq!(r.poll_output(), Some(ReceiverOutput::Done));
    }

    #[test]
    fn a_forged_block_with_a_right_checksum_but_no_key_is_a_mismatch_asked_again() {
        let data = b"hello";
        let (mut r, t0) = planned(small(data));
        let cv = block_cv(5, crate::files::BLOCK_SIZE, 0, data);
        let h = Header {
            tag: Tag::Block,
            len: 5,
            ..json_header(5)
        };
        r.handle_header(t0, 1, &h).expect("block");
        // The forger hashed what it sent: the checksum is right, the tag is not.
        let forged = Trailer::sealed(&BlockKey::from_bytes([2; 32]), &h, cv);
        assert_eq!(r.handle_block(t0, &h, 0, forged, cv), Received::Mismatch);
        // A right tag moved to another header (another offset or round) fails too.
        let other = Header { round: 1, ..h };
        let moved = Trailer::sealed(&key(), &other, cv);
        assert_eq!(r.handle_block(t0, &h, 0, moved, cv), Received::Mismatch);
        assert_eq!((r.table().forged, r.table().mismatches), (2, 2));
        // A confirmation or a file's with a wrong tag is not taken either.
        let confirm = Header {
            tag: Tag::ConfirmFile,
            len: 0,
            ..h
        };
        let digest = file_digest(&[cv]);
        let bad = Trailer::sealed(&BlockKey::from_bytes([2; 32]), &confirm, digest);
        assert_eq!(r.handle_confirm_file(t0, &confirm, bad), Received::Mismatch);
        end_round_and_verify_the_resent_block(&mut r, t0, &h, cv, 3);
    }

    /// Ends round 0 after `records` records, expects block 0 of file 0 asked again, and
    /// verifies it when it comes in round 1.
    fn end_round_and_verify_the_resent_block(
        r: &mut Receiver,
        t0: Instant,
        h: &Header,
        cv: [u8; 32],
        records: u64,
    ) {
        feed(r, t0, &ToReceiver::End { round: 0, records }).expect("end");
        assert_eq!(
            r.poll_output(),
            Some(ReceiverOutput::Frame(ToSender::Resend {
                blocks: vec![(0, 0)],
                last: true
            }))
        );
        let again = Header { round: 1, ..*h };
        r.handle_header(t0, 1, &again).expect("block again");
        let sent = Trailer::sealed(&key(), &again, cv);
        assert_eq!(
            r.handle_block(t0, &again, 0, sent, cv),
            Received::Verified { complete: true }
        );
    }

    #[test]
    fn a_sealed_block_that_fails_to_open_is_a_mismatch_asked_again_in_the_next_round() {
        let data = b"hello";
        let (mut r, t0) = planned(small(data));
        let cv = block_cv(5, crate::files::BLOCK_SIZE, 0, data);
        let h = Header {
            tag: Tag::Block,
            len: 5,
            ..json_header(5)
        };
        r.handle_header(t0, 1, &h).expect("block");
        assert_eq!(r.handle_unopened(t0, &h, 0), Received::Mismatch);
        assert_eq!((r.table().forged, r.table().mismatches), (1, 1));
        assert_eq!(r.table().digest(0), None, "nothing of it is taken");
        end_round_and_verify_the_resent_block(&mut r, t0, &h, cv, 1);
    }

    #[test]
    fn more_records_than_the_sender_counted_is_a_violation() {
        let data = b"x";
        let (mut r, t0) = planned(small(data));
        let cv = block_cv(1, crate::files::BLOCK_SIZE, 0, data);
        let h = Header {
            tag: Tag::Block,
            len: 1,
            ..json_header(1)
        };
        r.handle_block(t0, &h, 0, Trailer::sealed(&key(), &h, cv), [0; 32]);
        feed(
            &mut r,
            t0,
            &ToReceiver::End {
                round: 0,
                records: 0,
            },
        )
        .expect("end");
        let Some(ReceiverOutput::Failed(f)) = r.poll_output() else {
            panic!("no failure");
        };
        assert_eq!(f.kind, FailKind::Protocol);
    }

    #[test]
    fn sends_keepalives_while_it_waits_for_a_rounds_records_then_gives_up() {
        let (mut r, t0) = planned(small(b"abc"));
        feed(
            &mut r,
            t0,
            &ToReceiver::End {
                round: 0,
                records: 1,
            },
        )
        .expect("end");
        assert_eq!(r.poll_timeout(), Some(t0 + KEEPALIVE));
        r.handle_timeout(t0 + KEEPALIVE);
        assert_eq!(
            r.poll_output(),
            Some(ReceiverOutput::Frame(ToSender::Planning {
                checked_bytes: 0
            }))
        );
        r.handle_timeout(t0 + Duration::from_secs(10));
        assert!(matches!(r.poll_output(), Some(ReceiverOutput::Failed(_))));
    }
}
