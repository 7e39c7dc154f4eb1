//! A copy [`Sender`] against a copy [`Receiver`] in memory (quinn-proto's `Pair`), on a
//! simulated clock: the records of every stream and the receiver's frames travel as bytes,
//! each stream in order but with its own delay (records of different streams arrive out of
//! order), blocks may be corrupted in flight (forcing resend rounds), the connection may be
//! lost mid-round (then the copy runs again and resumes from what the receiver's store
//! kept), and a hostile side may mutate one field of one record of either direction.
//!
//! The drivers here do what the transfer crate's `engine::files` does with the file system:
//! the sender's streams take items and write records, the receiver's store plans (what an
//! earlier run left), writes blocks and puts complete files in place.

use super::budget::CopyLimits;
use super::digest::{self, block_cv, file_digest, Cv};
use super::fuzz::{bound, Meter, Rng};
use super::queue::Item;
use super::receiver::{Body, Receiver, ReceiverOutput};
use super::sender::{Sender, SenderOutput};
use super::table::{Received, RecvTable};
use super::wire::{Header, PlanFile, Tag, Trailer, HEADER_LEN, MAX_JSON, TRAILER_LEN};
use crate::keys::BlockKey;

/// The session's block key both sides of the pair hold.
pub(super) fn block_key() -> BlockKey {
    BlockKey::from_bytes([0x42; 32])
}
use crate::files::{Entry, EntryKind, BLOCK_SIZE};
use crate::pair::set;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Streams of the simulated copy.
const STREAMS: u32 = 3;
/// The idle timeout of both machines.
const IDLE: Duration = Duration::from_secs(5);

/// A mutation of one record by a hostile side.
#[derive(Clone, Debug)]
pub(super) enum Hostile {
    /// The sender's record number `record` (counted over all streams) gets `how`.
    ToReceiver { record: usize, how: Mutation },
    /// The receiver's frame number `frame` gets `how`.
    ToSender { frame: usize, how: Mutation },
}

/// What a hostile side does to a record.
#[derive(Clone, Debug)]
pub(super) enum Mutation {
    /// Header byte range `at..at+len` (a field) set to `value`'s low bytes.
    HeaderField { at: usize, len: usize, value: u64 },
    /// JSON leaf number `leaf` set to `to`.
    JsonLeaf { leaf: usize, to: serde_json::Value },
    /// The length prefix of a frame set to `value`.
    FrameLen(u32),
    /// The body replaced with garbage.
    Garbage(Vec<u8>),
}

/// How a copy is disturbed.
#[derive(Clone, Debug, Default)]
pub(super) struct Trouble {
    /// Corrupt the data of one block record in `n` (0: never).
    pub(super) corrupt_one_in: u64,
    /// A forger on the path replaces one block record in `n` (0: never) with its own bytes,
    /// their checksum right (it hashed them) and a tag made without the session's key.
    pub(super) forge_one_in: u64,
    /// Lose the connection after this many records.
    pub(super) lose_after: Option<usize>,
    /// A hostile side.
    pub(super) hostile: Option<Hostile>,
}

/// A file tree in memory: entries and every file's bytes.
#[derive(Clone, Debug)]
pub(super) struct Tree {
    pub(super) entries: Vec<Entry>,
    pub(super) data: Vec<Vec<u8>>,
}

/// The receiver's store: the temporary files (with the blocks written) and what is in place.
#[derive(Clone, Debug, Default)]
pub(super) struct Store {
    temp: BTreeMap<String, (Vec<u8>, BTreeSet<u64>)>,
    placed: BTreeMap<String, Vec<u8>>,
}

/// How a copy ended.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    pub(super) sender_done: bool,
    pub(super) receiver_done: bool,
    pub(super) failure: Option<String>,
    pub(super) carried: u64,
    pub(super) rounds: u32,
    pub(super) sender_digest: Option<String>,
    pub(super) receiver_digest: Option<String>,
    /// The peak of what the machines held during one call, less what came in.
    pub(super) peak: isize,
    /// Records the sender wrote and frames the receiver wrote.
    pub(super) records: usize,
    pub(super) frames: usize,
    /// Records whose tag the receiver refused.
    pub(super) forged: u64,
}

/// A stream's bytes not yet taken, and the body awaited after a header.
type Inbox = (Vec<u8>, Option<(Header, Body)>);

enum Ev {
    /// Bytes on stream `n` to the receiver.
    ToReceiver(u32, Vec<u8>),
    /// A frame to the sender.
    ToSender(Vec<u8>),
}

/// See the module documentation.
pub(super) struct Pair {
    t0: Instant,
    now: Instant,
    rng: Rng,
    tree: Tree,
    sender: Sender,
    receiver: Receiver,
    store: Store,
    trouble: Trouble,
    events: BTreeMap<(Instant, u64), Ev>,
    seq: u64,
    /// Per stream: when its last bytes arrive (a stream stays in order).
    stream_due: [Instant; STREAMS as usize],
    frame_due: Instant,
    /// The receiver's unparsed bytes per stream and the body awaited after a header.
    inbox: [Inbox; STREAMS as usize],
    blocks_go: bool,
    records: usize,
    frames: usize,
    lost: bool,
    failure: Option<String>,
    meter: Meter,
}

impl Pair {
    pub(super) fn new(seed: u64, tree: Tree, store: Store, trouble: Trouble) -> Pair {
        let t0 = Instant::now();
        let limits = pair_limits();
        let sender = Sender::new(tree.entries.clone(), vec![], IDLE);
        Pair {
            t0,
            now: t0,
            rng: Rng(seed),
            tree,
            sender,
            receiver: Receiver::new(limits, IDLE, block_key()),
            store,
            trouble,
            events: BTreeMap::new(),
            seq: 0,
            stream_due: [t0; STREAMS as usize],
            frame_due: t0,
            inbox: Default::default(),
            blocks_go: false,
            records: 0,
            frames: 0,
            lost: false,
            failure: None,
            meter: Meter::start(),
        }
    }

    /// Run until both sides are over or `limit` of simulated time passed.
    pub(super) fn run(mut self, limit: Duration) -> (Outcome, Store) {
        while self.now < self.t0 + limit && !(self.sender.is_over() && self.receiver.is_over()) {
            self.drain_sender();
            self.send_blocks();
            self.drain_receiver();
            let timer = [self.sender.poll_timeout(), self.receiver.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let next = self.events.keys().next().map(|k| k.0);
            let Some(at) = next.into_iter().chain(timer).min() else {
                // Nothing moves: only the idle timers can end it.
                self.now += IDLE;
                self.timeouts();
                continue;
            };
            self.now = self.now.max(at);
            self.timeouts();
            while let Some(e) = self.events.first_entry() {
                if e.key().0 > self.now {
                    break;
                }
                let ev = e.remove();
                self.deliver(ev);
            }
        }
        let q = self.sender.queue();
        let out = Outcome {
            sender_done: self.sender.is_over() && self.failure.is_none(),
            receiver_done: self.receiver.tree_digest().is_some(),
            failure: self.failure.clone(),
            carried: q.carried_bytes,
            rounds: self.sender.round() + 1,
            sender_digest: self.sender.tree_digest(),
            receiver_digest: self.receiver.tree_digest().map(str::to_string),
            peak: self.meter.peak(),
            forged: self.receiver.table().forged,
            records: self.records,
            frames: self.frames,
        };
        (out, self.store)
    }

    fn timeouts(&mut self) {
        let now = self.now;
        self.sender.handle_timeout(now);
        let r = &mut self.receiver;
        self.meter.delta(0, || r.handle_timeout(now));
    }

    /// A side failed: it says so in one line and closes the connection.
    fn fail(&mut self, who: &str, why: String) {
        if self.failure.is_none() {
            self.failure = Some(format!("{who}: {why}"));
        }
        if !self.lost {
            self.lose();
        }
    }

    /// The connection is lost: nothing more arrives, both sides learn it.
    fn lose(&mut self) {
        self.lost = true;
        self.events.clear();
        self.sender.handle_closed(self.now);
        self.receiver.handle_closed(self.now);
    }

    fn jitter(&mut self) -> Duration {
        Duration::from_micros(500 + self.rng.below(20_000))
    }

    fn send_to_receiver(&mut self, stream: u32, mut bytes: Vec<u8>) {
        if self.lost {
            return;
        }
        let n = self.records;
        self.records += 1;
        if self.trouble.lose_after == Some(n) {
            return self.lose();
        }
        if let Some(Hostile::ToReceiver { record, how }) = &self.trouble.hostile {
            if *record == n {
                bytes = mutate_record(bytes, how);
            }
        }
        let s = stream as usize;
        let at = (self.now + self.jitter()).max(self.stream_due[s]);
        self.stream_due[s] = at;
        self.at(at, Ev::ToReceiver(stream, bytes));
    }

    fn send_to_sender(&mut self, body: Vec<u8>) {
        if self.lost {
            return;
        }
        let n = self.frames;
        self.frames += 1;
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        if let Some(Hostile::ToSender { frame: k, how }) = &self.trouble.hostile {
            if *k == n {
                frame = mutate_frame(frame, how);
            }
        }
        let at = (self.now + self.jitter()).max(self.frame_due);
        self.frame_due = at;
        self.at(at, Ev::ToSender(frame));
    }

    fn at(&mut self, when: Instant, ev: Ev) {
        self.seq += 1;
        self.events.insert((when, self.seq), ev);
    }

    fn drain_sender(&mut self) {
        while let Some(o) = self.sender.poll_output() {
            match o {
                SenderOutput::Record(r) => {
                    let body = serde_json::to_vec(&r).unwrap_or_default();
                    self.send_to_receiver(0, json_record(&body));
                }
                SenderOutput::StartBlocks => self.blocks_go = true,
                SenderOutput::Done => {}
                SenderOutput::Failed(f) => self.fail("sender", f.message),
            }
        }
    }

    /// Every stream writes one item's record, while there are any.
    fn send_blocks(&mut self) {
        if !self.blocks_go || self.lost {
            return;
        }
        for stream in 0..STREAMS {
            let Some(item) = self.sender.take() else {
                return;
            };
            let rec = self.record_of(item);
            self.send_to_receiver(stream, rec);
        }
    }

    /// The record of one item, as a stream of the sender writes it.
    fn record_of(&mut self, item: Item) -> Vec<u8> {
        let round = self.sender.round();
        match item {
            Item::Block {
                file,
                block,
                expect,
            } => {
                let (size, data) = self.block_data(file, block);
                let cv = block_cv(size, BLOCK_SIZE, block * BLOCK_SIZE, &data);
                let len = data.len() as u64;
                let h = Header {
                    tag: Tag::Block,
                    file,
                    offset: block * BLOCK_SIZE,
                    len: len as u32,
                    round,
                };
                if expect == Some(cv) {
                    self.sender.block_done(file, block, cv, 0, len);
                    let h = Header {
                        tag: Tag::Confirm,
                        ..h
                    };
                    let t = Trailer::sealed(&block_key(), &h, cv).encode();
                    return [&h.encode()[..], &t].concat();
                }
                self.sender.block_done(file, block, cv, len, 0);
                let mut data = data;
                let corrupt = self.trouble.corrupt_one_in;
                if corrupt > 0 && self.rng.one_in(corrupt) && !data.is_empty() {
                    let i = data.len() / 2;
                    data[i] ^= 1;
                }
                let forge = self.trouble.forge_one_in;
                if forge > 0 && self.rng.one_in(forge) {
                    // Its own bytes, hashed as BLAKE3 does: only the tag gives it away.
                    data.iter_mut().for_each(|b| *b = !*b);
                    let forged = block_cv(size, BLOCK_SIZE, block * BLOCK_SIZE, &data);
                    let t = Trailer::sealed(&BlockKey::from_bytes([0x66; 32]), &h, forged);
                    return [&h.encode()[..], &data, &t.encode()].concat();
                }
                let t = Trailer::sealed(&block_key(), &h, cv).encode();
                [&h.encode()[..], &data, &t].concat()
            }
            Item::CheckFile { file, digest: d } => {
                let blocks = self.tree.entries[file as usize].blocks();
                let cvs = cvs_of(&self.tree.data[file as usize], blocks);
                let ok = file_digest(&cvs) == d;
                self.sender.check_done(file, cvs, ok);
                let h = Header {
                    tag: Tag::ConfirmFile,
                    file,
                    offset: 0,
                    len: 0,
                    round: 0,
                };
                if ok {
                    let t = Trailer::sealed(&block_key(), &h, d).encode();
                    [&h.encode()[..], &t].concat()
                } else {
                    Vec::new()
                }
            }
        }
    }

    fn block_data(&self, file: u32, block: u64) -> (u64, Vec<u8>) {
        let data = &self.tree.data[file as usize];
        let at = (block * BLOCK_SIZE) as usize;
        let end = (at + BLOCK_SIZE as usize).min(data.len());
        (data.len() as u64, data[at.min(end)..end].to_vec())
    }

    fn deliver(&mut self, ev: Ev) {
        match ev {
            Ev::ToReceiver(stream, bytes) => {
                if bytes.is_empty() {
                    return;
                }
                self.inbox[stream as usize].0.extend_from_slice(&bytes);
                self.take_records(stream);
            }
            Ev::ToSender(frame) => self.take_frame(&frame),
        }
    }

    /// The sender reads a frame: its length, then its body.
    fn take_frame(&mut self, frame: &[u8]) {
        let now = self.now;
        let Some(len) = frame.get(..4) else { return };
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if len > MAX_JSON {
            return self.fail("sender", format!("a frame of {len} bytes"));
        }
        let Some(body) = frame.get(4..4 + len) else {
            return self.fail("sender", "the receiver closed the stream in a frame".into());
        };
        let s = &mut self.sender;
        self.meter.delta(0, || s.handle_frame_bytes(now, body));
    }

    /// The receiver reads what stream `stream` has: headers, then the bodies they admit.
    fn take_records(&mut self, stream: u32) {
        let s = stream as usize;
        loop {
            if self.receiver.is_over() {
                return;
            }
            let now = self.now;
            if self.inbox[s].1.is_none() {
                let Some(hb) = self.inbox[s].0.get(..HEADER_LEN) else {
                    return;
                };
                let mut b = [0u8; HEADER_LEN];
                b.copy_from_slice(hb);
                self.inbox[s].0.drain(..HEADER_LEN);
                let h = match Header::decode(&b) {
                    Ok(h) => h,
                    Err(e) => {
                        let f = super::violation(e);
                        self.receiver.handle_closed(now);
                        return self.fail("receiver", f.message);
                    }
                };
                let r = &mut self.receiver;
                match self.meter.delta(0, || r.handle_header(now, stream, &h)) {
                    Ok(body) => self.inbox[s].1 = Some((h, body)),
                    Err(f) => return self.fail("receiver", f.message),
                }
            }
            let Some((h, body)) = self.inbox[s].1 else {
                return;
            };
            let need = match body {
                Body::Json(n) => n,
                Body::Block { .. } => h.len as usize + TRAILER_LEN,
                Body::Confirm { .. } | Body::ConfirmFile { .. } => TRAILER_LEN,
            };
            if self.inbox[s].0.len() < need {
                return;
            }
            let bytes: Vec<u8> = self.inbox[s].0.drain(..need).collect();
            self.inbox[s].1 = None;
            self.take_body(now, stream, &h, body, &bytes);
        }
    }

    fn take_body(&mut self, now: Instant, stream: u32, h: &Header, body: Body, bytes: &[u8]) {
        let cv_at = bytes.len().saturating_sub(TRAILER_LEN);
        let mut tail = [0u8; TRAILER_LEN];
        if let Some(t) = bytes.get(cv_at..).filter(|t| t.len() == TRAILER_LEN) {
            tail.copy_from_slice(t);
        }
        let sent = Trailer::decode(&tail);
        let r = &mut self.receiver;
        let (file, got) = match body {
            Body::Json(_) => {
                if let Err(f) = self
                    .meter
                    .delta(bytes.len(), || r.handle_json(now, stream, bytes))
                {
                    self.fail("receiver", f.message);
                }
                return;
            }
            Body::Block {
                file,
                block,
                size,
                write,
            } => {
                let data = &bytes[..cv_at];
                let computed = block_cv(size, BLOCK_SIZE, h.offset, data);
                if write {
                    self.store
                        .write(&self.receiver.entries()[file as usize], block, data);
                }
                let r = &mut self.receiver;
                let got = self.meter.delta(bytes.len(), || {
                    r.handle_block(now, h, block, sent, computed)
                });
                (file, got)
            }
            Body::Confirm { file, block } => (file, r.handle_confirm(now, h, block, sent)),
            Body::ConfirmFile { file } => (file, r.handle_confirm_file(now, h, sent)),
        };
        if got == (Received::Verified { complete: true }) {
            let e = self.receiver.entries()[file as usize].clone();
            self.store.place(&e);
            self.receiver.handle_finalized(now, Ok(()));
        }
    }

    fn drain_receiver(&mut self) {
        let now = self.now;
        while let Some(o) = self.receiver.poll_output() {
            match o {
                ReceiverOutput::Plan { .. } => {
                    let entries = self.receiver.entries().clone();
                    let planned = self.store.plan(&entries);
                    self.receiver.handle_planned(now, Ok(planned));
                }
                ReceiverOutput::Frame(f) => {
                    let body = serde_json::to_vec(&f).unwrap_or_default();
                    self.send_to_sender(body);
                }
                ReceiverOutput::FinishDirs => self.receiver.handle_dirs_finished(now, Ok(())),
                ReceiverOutput::Done => {}
                ReceiverOutput::Failed(f) => self.fail("receiver", f.message),
            }
        }
    }
}

impl Store {
    /// What an earlier run left: a placed file of the same size is `present`, a temporary
    /// file's written blocks are `have`.
    fn plan(&self, entries: &[Entry]) -> (RecvTable, Vec<PlanFile>) {
        let mut table = RecvTable::new(entries);
        let mut plan = Vec::new();
        for (id, e) in entries.iter().enumerate() {
            let id = id as u32;
            if e.kind != EntryKind::File {
                continue;
            }
            if e.size == 0 {
                table.mark_done(id);
                continue;
            }
            if let Some(d) = self
                .placed
                .get(&e.path)
                .filter(|d| d.len() as u64 == e.size)
            {
                let cvs = cvs_of(d, e.blocks());
                let digest = file_digest(&cvs);
                table.set_present(id, digest);
                plan.push(PlanFile {
                    id,
                    present: Some(digest::hex(&digest)),
                    have: vec![],
                });
                continue;
            }
            let Some((data, written)) = self.temp.get(&e.path) else {
                table.set_fresh(id);
                continue;
            };
            let mut have = Vec::new();
            for &b in written.iter().filter(|b| **b < e.blocks()) {
                let at = (b * BLOCK_SIZE) as usize;
                let end = (at + BLOCK_SIZE as usize).min(data.len());
                let cv = block_cv(e.size, BLOCK_SIZE, at as u64, &data[at.min(end)..end]);
                table.set_have(id, b, cv);
                have.push((b, digest::hex(&cv)));
            }
            plan.push(PlanFile {
                id,
                present: None,
                have,
            });
        }
        (table, plan)
    }

    fn write(&mut self, e: &Entry, block: u64, data: &[u8]) {
        // A hostile size is refused before this: the store holds what the tree holds.
        let at = (block * BLOCK_SIZE) as usize;
        if at + data.len() > 1 << 26 {
            return;
        }
        let t = self.temp.entry(e.path.clone()).or_default();
        if t.0.len() < at + data.len() {
            t.0.resize(at + data.len(), 0);
        }
        t.0[at..at + data.len()].copy_from_slice(data);
        t.1.insert(block);
    }

    fn place(&mut self, e: &Entry) {
        if let Some((data, _)) = self.temp.remove(&e.path) {
            self.placed.insert(e.path.clone(), data);
        }
    }

    /// The placed file at `path`.
    pub(super) fn file(&self, path: &str) -> Option<&[u8]> {
        self.placed.get(path).map(Vec::as_slice)
    }
}

fn cvs_of(data: &[u8], blocks: u64) -> Vec<Cv> {
    let size = data.len() as u64;
    (0..blocks)
        .map(|b| {
            let at = (b * BLOCK_SIZE) as usize;
            let end = (at + BLOCK_SIZE as usize).min(data.len());
            block_cv(size, BLOCK_SIZE, at as u64, &data[at..end])
        })
        .collect()
}

fn json_record(body: &[u8]) -> Vec<u8> {
    let h = Header {
        tag: Tag::Json,
        file: 0,
        offset: 0,
        len: body.len() as u32,
        round: 0,
    };
    [&h.encode()[..], body].concat()
}

/// The leaves of a JSON value, as paths.
pub(super) fn leaves(v: &serde_json::Value) -> Vec<Vec<String>> {
    match v {
        serde_json::Value::Object(m) => m
            .iter()
            .flat_map(|(k, x)| {
                leaves(x)
                    .into_iter()
                    .map(move |p| [vec![k.clone()], p].concat())
            })
            .collect(),
        serde_json::Value::Array(a) if !a.is_empty() => a
            .iter()
            .enumerate()
            .flat_map(|(i, x)| {
                leaves(x)
                    .into_iter()
                    .map(move |p| [vec![i.to_string()], p].concat())
            })
            .collect(),
        _ => vec![Vec::new()],
    }
}

fn mutate_json(body: &[u8], how: &Mutation) -> Vec<u8> {
    match how {
        Mutation::JsonLeaf { leaf, to } => {
            let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(body) else {
                return body.to_vec();
            };
            let ls = leaves(&v);
            if let Some(p) = ls.get(leaf % ls.len().max(1)) {
                set(&mut v, p, to.clone());
            }
            serde_json::to_vec(&v).unwrap_or_default()
        }
        Mutation::Garbage(g) => g.clone(),
        _ => body.to_vec(),
    }
}

fn mutate_record(mut rec: Vec<u8>, how: &Mutation) -> Vec<u8> {
    match how {
        Mutation::HeaderField { at, len, value } => {
            let b = value.to_be_bytes();
            rec[*at..at + len].copy_from_slice(&b[8 - len..]);
            rec
        }
        Mutation::JsonLeaf { .. } | Mutation::Garbage(_) if rec[0] == Tag::Json as u8 => {
            let body = mutate_json(&rec[HEADER_LEN..], how);
            json_record(&body)
        }
        Mutation::Garbage(g) => [&rec[..], g].concat(),
        _ => rec,
    }
}

fn mutate_frame(frame: Vec<u8>, how: &Mutation) -> Vec<u8> {
    match how {
        Mutation::FrameLen(n) => [&n.to_be_bytes()[..], &frame[4..]].concat(),
        _ => {
            let body = mutate_json(&frame[4..], how);
            [&(body.len() as u32).to_be_bytes()[..], &body].concat()
        }
    }
}

/// A tree of `files` files (a few bytes to two blocks) in a directory.
pub(super) fn tree(rng: &mut Rng, files: u64) -> Tree {
    let mut entries = vec![Entry {
        path: "d".into(),
        kind: EntryKind::Dir,
        size: 0,
        mode: 0o755,
        mtime_s: 0,
        mtime_ns: 0,
    }];
    let mut data = vec![Vec::new()];
    for i in 0..files {
        let size = match rng.below(5) {
            0 => 0,
            1 => BLOCK_SIZE + 1 + rng.below(1000),
            _ => 1 + rng.below(5000),
        };
        let bytes: Vec<u8> = (0..size).map(|_| rng.next() as u8).collect();
        entries.push(Entry {
            path: format!("d/f{i}"),
            kind: EntryKind::File,
            size,
            mode: 0o644,
            mtime_s: 1,
            mtime_ns: 0,
        });
        data.push(bytes);
    }
    Tree { entries, data }
}

/// The limits the pair's receiver holds a manifest to (for the memory bound).
pub(super) fn pair_limits() -> CopyLimits {
    CopyLimits {
        max_entries: 100,
        max_file_size: 1 << 24,
        max_total_bytes: 1 << 26,
        max_manifest_bytes: 1 << 20,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn honest(seed: u64, trouble: Trouble) -> (Tree, Outcome, Store) {
        let mut rng = Rng(seed);
        let files = 1 + rng.below(6);
        let t = tree(&mut rng, files);
        let (out, store) =
            Pair::new(seed, t.clone(), Store::default(), trouble).run(Duration::from_secs(60));
        (t, out, store)
    }

    fn assert_same_tree(seed: u64, t: &Tree, out: &Outcome, store: &Store) {
        assert!(out.failure.is_none(), "seed {seed}: {:?}", out.failure);
        assert!(out.sender_done && out.receiver_done, "seed {seed}: {out:?}");
        assert_eq!(out.sender_digest, out.receiver_digest, "seed {seed}");
        for (e, d) in t.entries.iter().zip(&t.data) {
            if e.kind == EntryKind::File && e.size > 0 {
                assert_eq!(store.file(&e.path), Some(&d[..]), "seed {seed}: {}", e.path);
            }
        }
    }

    #[test]
    fn an_honest_copy_over_reordered_streams_ends_with_identical_trees_and_digests() {
        for seed in 0..40 {
            let (t, out, store) = honest(seed, Trouble::default());
            println!("copy pair: seed {seed}: carried {} bytes", out.carried);
            assert_same_tree(seed, &t, &out, &store);
            assert_eq!(out.rounds, 1, "seed {seed}");
        }
    }

    #[test]
    fn blocks_corrupted_in_flight_are_sent_again_in_later_rounds() {
        let mut resent = 0;
        for seed in 0..40 {
            let trouble = Trouble {
                corrupt_one_in: 3,
                ..Trouble::default()
            };
            let (t, out, store) = honest(seed, trouble);
            if out.failure.as_deref().is_some_and(|f| f.contains("rounds")) {
                // Four rounds of bad luck (one block in three corrupted): a refusal in one line.
                continue;
            }
            assert_same_tree(seed, &t, &out, &store);
            resent += u64::from(out.rounds > 1);
        }
        assert!(resent > 5, "only {resent} copies needed a second round");
    }

    #[test]
    fn blocks_forged_with_a_right_checksum_but_no_key_are_refused_and_sent_again() {
        let mut resent = 0;
        for seed in 0..40 {
            let trouble = Trouble {
                forge_one_in: 3,
                ..Trouble::default()
            };
            let (t, out, store) = honest(seed, trouble);
            if out.failure.as_deref().is_some_and(|f| f.contains("rounds")) {
                // A forger at it for four rounds: the copy fails cleanly, in one line.
                assert!(out.forged >= 4, "seed {seed}: {out:?}");
                continue;
            }
            // Not one forged byte is in place: every file is the sender's.
            assert_same_tree(seed, &t, &out, &store);
            resent += u64::from(out.forged > 0 && out.rounds > 1);
        }
        assert!(
            resent > 5,
            "only {resent} copies had a forged block sent again"
        );
    }

    #[test]
    fn a_connection_lost_mid_round_fails_both_sides_and_the_next_run_resumes() {
        let mut resumed = 0;
        for seed in 0..30 {
            let mut rng = Rng(seed);
            let n = 3 + rng.below(4);
            let t = tree(&mut rng, n);
            let lose = Trouble {
                lose_after: Some(2 + rng.below(6) as usize),
                ..Trouble::default()
            };
            let (first, store) =
                Pair::new(seed, t.clone(), Store::default(), lose).run(Duration::from_secs(60));
            if first.failure.is_none() {
                continue; // the copy was done before the loss
            }
            assert!(!first.receiver_done, "seed {seed}");
            let (out, store) = Pair::new(seed + 1, t.clone(), store, Trouble::default())
                .run(Duration::from_secs(60));
            assert_same_tree(seed, &t, &out, &store);
            let total: u64 = t.entries.iter().map(|e| e.size).sum();
            assert!(out.carried <= total, "seed {seed}");
            resumed += u64::from(out.carried < total);
        }
        assert!(
            resumed > 3,
            "only {resumed} runs resumed with less to carry"
        );
    }

    #[test]
    fn an_empty_tree_copies_with_one_round_and_no_blocks() {
        let t = Tree {
            entries: vec![],
            data: vec![],
        };
        let (out, _) =
            Pair::new(1, t, Store::default(), Trouble::default()).run(Duration::from_secs(10));
        assert!(out.sender_done && out.receiver_done, "{out:?}");
        let _ = pair_limits();
        let _ = bound(&pair_limits());
    }

    const FIELDS: [(usize, usize); 6] = [(0, 1), (1, 3), (4, 4), (8, 8), (16, 4), (20, 4)];

    fn hostile_values() -> Vec<serde_json::Value> {
        let deep = format!("{}{}", "[".repeat(64), "]".repeat(64));
        vec![
            serde_json::json!(u64::MAX),
            serde_json::json!(-1),
            serde_json::json!(0),
            serde_json::json!(""),
            serde_json::json!("p".repeat(5000)),
            serde_json::json!("../../etc/passwd"),
            serde_json::json!(null),
            serde_json::json!(1.5),
            serde_json::json!({"type": "done"}),
            serde_json::from_str(&deep).unwrap_or_default(),
        ]
    }

    /// Every mutation of one record or frame this test tries.
    fn mutations(records: usize, frames: usize) -> Vec<Hostile> {
        let mut all = Vec::new();
        let header_values = [0, 1, 5, BLOCK_SIZE, u64::MAX];
        for record in 0..records {
            for (at, len) in FIELDS {
                for value in header_values {
                    let how = Mutation::HeaderField { at, len, value };
                    all.push(Hostile::ToReceiver { record, how });
                }
            }
            for leaf in 0..6 {
                for to in hostile_values() {
                    let how = Mutation::JsonLeaf { leaf, to };
                    all.push(Hostile::ToReceiver { record, how });
                }
            }
            let how = Mutation::Garbage(b"{\"type\":".to_vec());
            all.push(Hostile::ToReceiver { record, how });
        }
        for frame in 0..frames {
            for n in [0, 3, u32::MAX, MAX_JSON as u32 + 1] {
                all.push(Hostile::ToSender {
                    frame,
                    how: Mutation::FrameLen(n),
                });
            }
            for leaf in 0..6 {
                for to in hostile_values() {
                    let how = Mutation::JsonLeaf { leaf, to };
                    all.push(Hostile::ToSender { frame, how });
                }
            }
            let how = Mutation::Garbage(vec![0xff; 40]);
            all.push(Hostile::ToSender { frame, how });
        }
        all
    }

    /// A small tree (one block per file: the hostile runs are many).
    fn small_tree(rng: &mut Rng) -> Tree {
        let n = 1 + rng.below(3);
        let mut t = tree(rng, n);
        for (e, d) in t.entries.iter_mut().zip(t.data.iter_mut()) {
            if e.size > 6000 {
                e.size = 6000;
                d.truncate(6000);
            }
        }
        t
    }

    /// One hostile run: no panic, an end, a refusal in one line or a copy whose digests
    /// agree, and no call of either machine holding more than the budgets allow.
    fn hostile_run(seed: u64, t: &Tree, h: Hostile) -> bool {
        let trouble = Trouble {
            hostile: Some(h.clone()),
            ..Trouble::default()
        };
        let (out, _) =
            Pair::new(seed, t.clone(), Store::default(), trouble).run(Duration::from_secs(60));
        let limit = bound(&pair_limits());
        assert!(
            out.peak <= limit,
            "seed {seed} {h:?}: {} bytes held in one call, more than the budgets allow ({limit})",
            out.peak
        );
        match &out.failure {
            Some(f) => {
                assert!(!f.contains('\n'), "seed {seed} {h:?}: {f}");
                assert!(!out.sender_done, "seed {seed} {h:?}: {f}");
                true
            }
            None => {
                assert!(
                    out.sender_done && out.receiver_done,
                    "seed {seed} {h:?}: {out:?}"
                );
                assert_eq!(out.sender_digest, out.receiver_digest, "seed {seed} {h:?}");
                false
            }
        }
    }

    fn hostile_seed(seed: u64) -> (u64, u64) {
        let mut rng = Rng(seed);
        let t = small_tree(&mut rng);
        let (honest, _) = Pair::new(seed, t.clone(), Store::default(), Trouble::default())
            .run(Duration::from_secs(60));
        assert!(honest.failure.is_none(), "seed {seed}: {honest:?}");
        let all = mutations(honest.records, honest.frames);
        let n = all.len() as u64;
        let refused = all
            .into_iter()
            .map(|h| u64::from(hostile_run(seed, &t, h)))
            .sum();
        (n, refused)
    }

    #[test]
    fn a_hostile_side_mutating_every_field_of_every_record_is_refused_or_harmless() {
        if let Some(seed) = std::env::var("TCPTUNE_FUZZ_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            println!("copy pair fuzzer: replaying seed {seed}");
            hostile_seed(seed);
            return;
        }
        let (mut runs, mut refused) = (0, 0);
        for seed in 0..3 {
            let (n, r) = hostile_seed(seed);
            println!("copy pair fuzzer: seed {seed}: {n} mutations, {r} refused");
            runs += n;
            refused += r;
        }
        assert!(
            refused * 4 > runs,
            "{refused} of {runs} hostile runs refused"
        );
        let start = std::time::Instant::now();
        let first = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        println!(
            "copy pair fuzzer: random seeds from {first} for {:?}",
            super::super::fuzz::seconds()
        );
        let mut n = 0u64;
        while start.elapsed() < super::super::fuzz::seconds() {
            let seed = first.wrapping_add(n);
            let mut rng = Rng(seed);
            let t = small_tree(&mut rng);
            let all = mutations(12, 4);
            let h = all[rng.below(all.len() as u64) as usize].clone();
            println!("copy pair fuzzer: seed {seed}");
            hostile_run(seed, &t, h);
            n += 1;
        }
        println!("copy pair fuzzer: {runs} fixed and {n} random runs");
    }
}
