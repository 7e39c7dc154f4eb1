//! The data threads of a copy (see [`crate::files`] for the protocol): stream 0's thread
//! exchanges the manifest and the plan and ends each round; every stream's thread moves
//! blocks, reading the file with `pread` and hashing it as it goes out, or verifying and
//! writing it with `pwrite` at its offset as it comes in. The bookkeeping is
//! [`crate::files::queue`]'s and [`crate::files::table`]'s; this is the I/O around it.
//!
//! A thread never waits without looking at the engine's abort flag and the copy's failure,
//! and never gives up on a peer that is busy with local work (walking, hashing an earlier
//! run's files): that work is counted as progress, and a stream that hashes for long sends
//! keep-alive records.

use super::stream::{is_timeout, ThreadOut};
use super::{nanos_since, Counters, EngineConfig, Event, Shared};
use crate::files::digest::{self, BlockHasher, Cv};
use crate::files::manifest_in::{ManifestIn, ManifestStep};
use crate::files::queue::{Have, Item, ResendList};
use crate::files::table::Received;
use crate::files::violation;
use crate::files::walk::{self, Manifest};
use crate::files::wire::{
    parse_record, Header, PlanFile, Tag, ToReceiver, ToSender, CV_LEN, ENTRIES_PER_RECORD,
    HEADER_LEN, ITEMS_PER_RECORD, MAX_JSON,
};
use crate::files::work::{FileWork, Run, Source, Spec};
use crate::files::FileFailureExt;
use crate::files::{plan, FailKind, FileFailure, BLOCK_SIZE};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tcptune_sys::fs::{self as sysfs, OpenMode};
use tcptune_sys::os::thread_cpu;

/// Bytes per read, hash and write.
const PIECE: usize = 1 << 20;
/// Rounds of sending before blocks that keep failing their checksums fail the copy.
const MAX_ROUNDS: u32 = 4;
/// How often a thread busy with local work tells the peer it is alive.
const KEEPALIVE: Duration = Duration::from_millis(1000);

/// Why a thread stopped.
enum Halt {
    /// The engine aborts or the copy failed elsewhere: just end.
    Stop,
    /// The peer closed the stream.
    Closed,
    /// This stream failed (a socket error, a stall): the report says so.
    Stream(String),
}

struct Ctx<'a> {
    stream: &'a TcpStream,
    shared: &'a Shared,
    counters: &'a Counters,
    cfg: &'a EngineConfig,
    work: &'a FileWork,
    out: ThreadOut,
    index: u32,
}

impl Ctx<'_> {
    fn stopping(&self) -> bool {
        self.shared.abort.load(Ordering::Relaxed) || self.work.has_failed()
    }

    /// The copy fails with `f` (the first failure is the session's; the rest just stop).
    fn fatal(&self, f: FileFailure) -> Halt {
        if self.work.fail(f.clone()) {
            self.shared.post(Event::FileFailed(f));
        }
        Halt::Stop
    }

    fn io_mark(&mut self, payload: u64, now: Instant) {
        self.out.first.get_or_insert(now);
        self.out.last = Some(now);
        self.out.bytes += payload;
        self.counters.bytes.store(self.out.bytes, Ordering::Relaxed);
        self.counters
            .last_io_ns
            .store(nanos_since(now, self.cfg.epoch), Ordering::Relaxed);
    }

    /// Read exactly `buf`. A close before the first byte is `Closed`.
    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), Halt> {
        let mut got = 0;
        let mut last = (Instant::now(), self.work.activity());
        let mut r = self.stream;
        while got < buf.len() {
            match r.read(&mut buf[got..]) {
                Ok(0) if got == 0 => return Err(Halt::Closed),
                Ok(0) => {
                    return Err(Halt::Stream(
                        "the peer closed the stream in a record".into(),
                    ))
                }
                Ok(n) => {
                    got += n;
                    last.0 = Instant::now();
                }
                Err(e) if is_timeout(&e) => {
                    if self.stopping() {
                        return Err(Halt::Stop);
                    }
                    let a = self.work.activity();
                    if a != last.1 {
                        last = (Instant::now(), a);
                    } else if last.0.elapsed() > self.cfg.idle_timeout {
                        return Err(Halt::Stream(format!(
                            "no data for {:.0} s: the sender stalled",
                            self.cfg.idle_timeout.as_secs_f64()
                        )));
                    }
                }
                Err(e) => {
                    if self.stopping() {
                        return Err(Halt::Stop);
                    }
                    return Err(Halt::Stream(format!("read: {e}")));
                }
            }
        }
        Ok(())
    }

    fn write_all(&mut self, mut buf: &[u8]) -> Result<(), Halt> {
        let mut w = self.stream;
        let mut last = (
            Instant::now(),
            self.counters.tcp_bytes.load(Ordering::Relaxed),
        );
        while !buf.is_empty() {
            if self.stopping() {
                return Err(Halt::Stop);
            }
            match w.write(buf) {
                Ok(0) => return Err(Halt::Stream("the connection accepted no more data".into())),
                Ok(n) => {
                    buf = &buf[n..];
                    last.0 = Instant::now();
                }
                Err(e) if is_timeout(&e) => {
                    let t = self.counters.tcp_bytes.load(Ordering::Relaxed);
                    if t != last.1 {
                        last = (Instant::now(), t);
                    } else if last.0.elapsed() > self.cfg.idle_timeout {
                        return Err(Halt::Stream(format!(
                            "no progress for {:.0} s: the receiver stopped reading",
                            self.cfg.idle_timeout.as_secs_f64()
                        )));
                    }
                }
                Err(e) => {
                    if self.stopping() {
                        return Err(Halt::Stop);
                    }
                    return Err(Halt::Stream(format!("write: {e}")));
                }
            }
        }
        Ok(())
    }

    fn header(&mut self) -> Result<Option<Header>, Halt> {
        let mut b = [0u8; HEADER_LEN];
        match self.read_exact(&mut b) {
            Ok(()) => {}
            Err(Halt::Closed) => return Ok(None),
            Err(e) => return Err(e),
        }
        Header::decode(&b)
            .map(Some)
            .map_err(|e| self.fatal(violation(e)))
    }

    fn cv(&mut self) -> Result<Cv, Halt> {
        let mut cv = [0u8; CV_LEN];
        self.read_exact(&mut cv).map_err(closed_in_record)?;
        Ok(cv)
    }

    fn json<T: for<'de> serde::Deserialize<'de>>(&mut self, len: usize) -> Result<T, Halt> {
        if len > MAX_JSON {
            return Err(self.fatal(violation(format!("a record of {len} bytes"))));
        }
        let body = self.body(len)?;
        parse_record(&body).map_err(|f| self.fatal(f))
    }

    /// The `len` bytes of a record whose length was admitted.
    fn body(&mut self, len: usize) -> Result<Vec<u8>, Halt> {
        let mut body = vec![0u8; len];
        self.read_exact(&mut body).map_err(closed_in_record)?;
        Ok(body)
    }

    /// A JSON record to the receiver (any stream).
    fn send_record(&mut self, msg: &ToReceiver) -> Result<(), Halt> {
        let body = serde_json::to_vec(msg).map_err(|e| Halt::Stream(e.to_string()))?;
        let h = Header {
            tag: Tag::Json,
            file: 0,
            offset: 0,
            len: body.len() as u32,
            round: 0,
        };
        self.write_all(&h.encode())?;
        self.write_all(&body)
    }

    /// A frame to the sender (stream 0).
    fn send_frame(&mut self, msg: &ToSender) -> Result<(), Halt> {
        let body = serde_json::to_vec(msg).map_err(|e| Halt::Stream(e.to_string()))?;
        self.write_all(&(body.len() as u32).to_be_bytes())?;
        self.write_all(&body)
    }

    fn recv_frame(&mut self) -> Result<ToSender, Halt> {
        let mut len = [0u8; 4];
        self.read_exact(&mut len).map_err(|h| match h {
            Halt::Closed => Halt::Stream("the receiver closed the stream".into()),
            h => h,
        })?;
        self.json(u32::from_be_bytes(len) as usize)
    }

    /// The end of a stream: FIN, then wait for the peer's.
    fn close(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Write);
        let mut b = [0u8; 64];
        let mut r = self.stream;
        let waited = Instant::now();
        loop {
            match r.read(&mut b) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if is_timeout(&e) => {
                    if self.shared.abort.load(Ordering::Relaxed)
                        || waited.elapsed() > self.cfg.idle_timeout
                    {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    }
}

fn closed_in_record(h: Halt) -> Halt {
    match h {
        Halt::Closed => Halt::Stream("the peer closed the stream in a record".into()),
        h => h,
    }
}

fn finish(mut c: Ctx<'_>, r: Result<(), Halt>, cpu0: tcptune_sys::os::CpuTimes) -> ThreadOut {
    match r {
        Ok(()) => {}
        Err(Halt::Stop) => {}
        Err(Halt::Closed) => {
            if !c.stopping() {
                c.out.error = Some("the peer closed the stream early".into());
            }
        }
        Err(Halt::Stream(e)) => {
            if !c.stopping() {
                c.out.error = Some(e);
            }
        }
    }
    c.out.cpu = thread_cpu().unwrap_or_default().since(&cpu0);
    c.out
}

// ----- sender -----

pub(super) fn send_loop(
    stream: &TcpStream,
    shared: &Shared,
    counters: &Counters,
    cfg: &EngineConfig,
    work: &FileWork,
    index: u32,
) -> ThreadOut {
    let cpu0 = thread_cpu().unwrap_or_default();
    let mut c = Ctx {
        stream,
        shared,
        counters,
        cfg,
        work,
        out: ThreadOut::default(),
        index,
    };
    let r = if index == 0 {
        lead_send(&mut c)
    } else {
        follow_send(&mut c)
    };
    if r.is_ok() {
        c.shared.post(Event::StreamWritten(index));
        c.close();
    }
    finish(c, r, cpu0)
}

fn follow_send(c: &mut Ctx<'_>) -> Result<(), Halt> {
    let mut g = c.work.lock();
    while matches!(&*g, Run::Waiting) {
        if c.stopping() {
            return Err(Halt::Stop);
        }
        g = c.work.wait(g, Duration::from_millis(200));
    }
    drop(g);
    send_items(c, false)
}

fn lead_send(c: &mut Ctx<'_>) -> Result<(), Halt> {
    let Some(Spec::Send { source, .. }) = c.work.take_spec() else {
        return Err(c.fatal(FileFailure::protocol("a copy without a source")));
    };
    let manifest = match source {
        Source::Ready(m) => m,
        Source::Share {
            root,
            sources,
            recursive,
            limits,
        } => {
            let work = c.work;
            let tops = walk::share_tops(&root, &sources).map_err(|f| c.fatal(f))?;
            walk::walk(tops, recursive, limits, &mut |n| work.touch(n)).map_err(|f| c.fatal(f))?
        }
    };
    c.work.add_warnings(&manifest.warnings);
    for chunk in manifest.entries.chunks(ENTRIES_PER_RECORD) {
        c.send_record(&ToReceiver::Manifest {
            entries: chunk.to_vec(),
        })?;
    }
    c.send_record(&ToReceiver::ManifestEnd {
        warnings: manifest.warnings.clone(),
    })?;
    let have = read_plan(c, &manifest)?;
    c.work.start_sending(manifest, have);
    loop {
        send_items(c, true)?;
        let (round, records) = {
            let g = c.work.lock();
            match &*g {
                Run::Send(s) => (s.round, s.queue.records()),
                _ => return Err(c.fatal(FileFailure::protocol("no run"))),
            }
        };
        c.send_record(&ToReceiver::End { round, records })?;
        let mut resend = ResendList::default();
        loop {
            match c.recv_frame()? {
                ToSender::Planning { .. } => c.work.touch(1),
                ToSender::Resend { blocks, last } => {
                    let added = match &*c.work.lock() {
                        Run::Send(s) => resend.add(&s.queue, &blocks, last, ITEMS_PER_RECORD),
                        _ => return Err(Halt::Stop),
                    };
                    added.map_err(|e| c.fatal(violation(e)))?;
                    if last {
                        break;
                    }
                }
                ToSender::Done { tree_digest, .. } => {
                    let mine = {
                        let g = c.work.lock();
                        match &*g {
                            Run::Send(s) => s.queue.tree_digest(&s.manifest.entries),
                            _ => None,
                        }
                    };
                    if mine.as_deref() != Some(tree_digest.as_str()) {
                        return Err(c.fatal(FileFailure::new(
                            FailKind::Integrity,
                            "the receiver's digests differ from the sender's",
                        )));
                    }
                    return Ok(());
                }
                other => {
                    return Err(c.fatal(violation(format!("{other:?} after a round"))));
                }
            }
        }
        let mut g = c.work.lock();
        let Run::Send(s) = &mut *g else {
            return Err(Halt::Stop);
        };
        s.round += 1;
        if s.round >= MAX_ROUNDS {
            drop(g);
            return Err(c.fatal(FileFailure::new(
                FailKind::Integrity,
                format!(
                    "{} block(s) still failed their checksum after {MAX_ROUNDS} rounds",
                    resend.blocks().len()
                ),
            )));
        }
        if let Err(e) = s.queue.resend(resend.blocks()) {
            drop(g);
            return Err(c.fatal(violation(e)));
        }
    }
}

/// The receiver's plan: what it has already.
fn read_plan(c: &mut Ctx<'_>, m: &Manifest) -> Result<Have, Halt> {
    let mut have = Have::default();
    loop {
        match c.recv_frame()? {
            ToSender::Planning { .. } => c.work.touch(1),
            ToSender::Plan { files } => {
                for PlanFile {
                    id,
                    present,
                    have: blocks,
                } in files
                {
                    let Some(e) = m.entries.get(id as usize) else {
                        return Err(c.fatal(violation(format!("a plan for entry {id}"))));
                    };
                    if let Some(d) = present {
                        let d = digest::from_hex(&d)
                            .ok_or_else(|| c.fatal(violation("a digest that is not hex")))?;
                        have.present.insert(id, d);
                    }
                    for (b, cv) in blocks {
                        let cv = digest::from_hex(&cv)
                            .ok_or_else(|| c.fatal(violation("a checksum that is not hex")))?;
                        if b >= e.blocks() {
                            return Err(c.fatal(violation(format!("block {b} of entry {id}"))));
                        }
                        have.blocks.insert((id, b), cv);
                    }
                }
            }
            ToSender::PlanEnd => return Ok(have),
            other => return Err(c.fatal(violation(format!("{other:?} before the plan's end")))),
        }
    }
}

/// Send items from the queue until it is empty (the lead: until the round is over).
fn send_items(c: &mut Ctx<'_>, lead: bool) -> Result<(), Halt> {
    let mut open: Option<(u32, File)> = None;
    let mut buf = vec![0u8; PIECE];
    loop {
        let (item, manifest) = {
            let mut g = c.work.lock();
            loop {
                if c.stopping() {
                    return Err(Halt::Stop);
                }
                let Run::Send(s) = &mut *g else {
                    return Err(Halt::Stop);
                };
                if let Some(it) = s.queue.take() {
                    break (it, s.manifest.clone());
                }
                if !lead || s.queue.idle() {
                    return Ok(());
                }
                g = c.work.wait(g, Duration::from_millis(200));
            }
        };
        let r = match &item {
            Item::Block {
                file,
                block,
                expect,
            } => send_block(c, &manifest, &mut open, &mut buf, *file, *block, *expect),
            Item::CheckFile { file, digest } => {
                check_file(c, &manifest, &mut open, &mut buf, *file, *digest)
            }
        };
        if let Err(h) = r {
            if let Run::Send(s) = &mut *c.work.lock() {
                s.queue.abandon();
            }
            c.work.notify();
            return Err(h);
        }
    }
}

fn open_source<'f>(
    c: &Ctx<'_>,
    m: &Manifest,
    open: &'f mut Option<(u32, File)>,
    file: u32,
) -> Result<&'f File, Halt> {
    if open.as_ref().is_none_or(|(id, _)| *id != file) {
        let (top, rel) = &m.srcs[file as usize];
        let t = &m.tops[*top as usize];
        let shown = format!("{}{}", t.shown, shown_tail(&m.entries[file as usize].path));
        // The top itself may be a symlink named on the command line; below it, never.
        let fd = if rel == &t.rel {
            t.base.open_beneath(rel, OpenMode::Read)
        } else {
            nofollow_read(&t.base, rel)
        }
        .map_err(|e| c.fatal(FileFailure::fs(&e, &shown)))?;
        sysfs::advise_sequential(fd.as_fd());
        *open = Some((file, File::from(fd)));
    }
    match open {
        Some((_, f)) => Ok(f),
        None => Err(Halt::Stop),
    }
}

/// Open a file below a source without following a symlink in its last component.
fn nofollow_read(
    base: &sysfs::Dir,
    rel: &std::path::Path,
) -> Result<std::os::fd::OwnedFd, sysfs::FsError> {
    // A file that turned into a symlink since the walk is refused: look, then open.
    match base.look(rel)? {
        Some(m) if m.kind == sysfs::Kind::File => base.open_beneath(rel, OpenMode::Read),
        _ => Err(sysfs::FsError {
            op: "open",
            path: rel.to_path_buf(),
            source: std::io::Error::from_raw_os_error(libc::ELOOP),
        }),
    }
}

fn shown_tail(path: &str) -> String {
    match path.split_once('/') {
        Some((_, rest)) => format!("/{rest}"),
        None => String::new(),
    }
}

fn read_piece(
    c: &Ctx<'_>,
    f: &File,
    buf: &mut [u8],
    at: u64,
    shown: &dyn Fn() -> String,
) -> Result<(), Halt> {
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], at + got as u64) {
            Ok(0) => {
                return Err(c.fatal(FileFailure::new(
                    FailKind::Io,
                    format!("{}: the file shrank during the copy", shown()),
                )))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(c.fatal(FileFailure::io(format_args!("read {}", shown()), &e))),
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn send_block(
    c: &mut Ctx<'_>,
    m: &Manifest,
    open: &mut Option<(u32, File)>,
    buf: &mut Vec<u8>,
    file: u32,
    block: u64,
    expect: Option<Cv>,
) -> Result<(), Halt> {
    let e = &m.entries[file as usize];
    let size = e.size;
    let offset = block * BLOCK_SIZE;
    let len = e.block_len(block);
    let shown = || e.path.clone();
    let round = match &*c.work.lock() {
        Run::Send(s) => s.round,
        _ => 0,
    };
    let f = open_source(c, m, open, file)?;
    let f = f
        .try_clone()
        .map_err(|err| c.fatal(FileFailure::io("dup", &err)))?;
    let header = |tag| Header {
        tag,
        file,
        offset,
        len: len as u32,
        round,
    };
    if let Some(theirs) = expect {
        // Hash first: only what differs goes over the network.
        if buf.len() < len as usize {
            buf.resize(len as usize, 0);
        }
        read_piece(c, &f, &mut buf[..len as usize], offset, &shown)?;
        c.work.touch(len);
        let cv = digest::block_cv(size, BLOCK_SIZE, offset, &buf[..len as usize]);
        if cv == theirs {
            c.write_all(&header(Tag::Confirm).encode())?;
            c.write_all(&cv)?;
            return block_done(c, file, block, cv, 0, len);
        }
        c.write_all(&header(Tag::Block).encode())?;
        let data = buf[..len as usize].to_vec();
        for piece in data.chunks(PIECE) {
            c.write_all(piece)?;
            c.io_mark(piece.len() as u64, Instant::now());
        }
        c.write_all(&cv)?;
        return block_done(c, file, block, cv, len, 0);
    }
    let seq = if round == 0 {
        c.work.block_seq.fetch_add(1, Ordering::Relaxed)
    } else {
        u64::MAX
    };
    let corrupt = c.cfg.corrupt == Some(seq);
    c.write_all(&header(Tag::Block).encode())?;
    let mut h = BlockHasher::new(size, BLOCK_SIZE, offset);
    let mut at = 0u64;
    while at < len {
        let n = ((len - at) as usize).min(PIECE);
        read_piece(c, &f, &mut buf[..n], offset + at, &shown)?;
        h.update(&buf[..n]);
        if corrupt && at == 0 {
            buf[n / 2] ^= 1;
        }
        let called = Instant::now();
        c.write_all(&buf[..n])?;
        c.out.first.get_or_insert(called);
        c.io_mark(n as u64, Instant::now());
        at += n as u64;
    }
    let cv = h.finish();
    c.write_all(&cv)?;
    block_done(c, file, block, cv, len, 0)
}

fn block_done(
    c: &mut Ctx<'_>,
    file: u32,
    block: u64,
    cv: Cv,
    carried: u64,
    present: u64,
) -> Result<(), Halt> {
    let complete = match &mut *c.work.lock() {
        Run::Send(s) => s.queue.block_done(file, block, cv, carried, present),
        _ => false,
    };
    if complete {
        c.work.files_done.fetch_add(1, Ordering::Relaxed);
    }
    c.work.notify();
    Ok(())
}

fn check_file(
    c: &mut Ctx<'_>,
    m: &Manifest,
    open: &mut Option<(u32, File)>,
    buf: &mut [u8],
    file: u32,
    theirs: Cv,
) -> Result<(), Halt> {
    let e = &m.entries[file as usize];
    let shown = || e.path.clone();
    let f = open_source(c, m, open, file)?;
    let f = f
        .try_clone()
        .map_err(|err| c.fatal(FileFailure::io("dup", &err)))?;
    let mut cvs = Vec::with_capacity(e.blocks() as usize);
    let mut alive = Instant::now();
    for b in 0..e.blocks() {
        let off = b * BLOCK_SIZE;
        let len = e.block_len(b);
        let mut h = BlockHasher::new(e.size, BLOCK_SIZE, off);
        let mut at = 0;
        while at < len {
            let n = ((len - at) as usize).min(buf.len());
            read_piece(c, &f, &mut buf[..n], off + at, &shown)?;
            h.update(&buf[..n]);
            at += n as u64;
            c.work.touch(n as u64);
        }
        cvs.push(h.finish());
        if alive.elapsed() >= KEEPALIVE {
            alive = Instant::now();
            c.send_record(&ToReceiver::Alive)?;
        }
    }
    let confirmed = digest::file_digest(&cvs) == theirs;
    if confirmed {
        let h = Header {
            tag: Tag::ConfirmFile,
            file,
            offset: 0,
            len: 0,
            round: 0,
        };
        c.write_all(&h.encode())?;
        c.write_all(&theirs)?;
    }
    if let Run::Send(s) = &mut *c.work.lock() {
        s.queue.check_done(file, cvs, confirmed, e.size);
    }
    if confirmed {
        c.work.files_done.fetch_add(1, Ordering::Relaxed);
    }
    c.work.notify();
    Ok(())
}

// ----- receiver -----

pub(super) fn recv_loop(
    stream: &TcpStream,
    shared: &Shared,
    counters: &Counters,
    cfg: &EngineConfig,
    work: &FileWork,
    index: u32,
) -> ThreadOut {
    let cpu0 = thread_cpu().unwrap_or_default();
    let mut c = Ctx {
        stream,
        shared,
        counters,
        cfg,
        work,
        out: ThreadOut::default(),
        index,
    };
    let r = if index == 0 {
        lead_recv(&mut c)
    } else {
        records(&mut c)
    };
    let _ = c.stream.shutdown(Shutdown::Write);
    finish(c, r, cpu0)
}

fn lead_recv(c: &mut Ctx<'_>) -> Result<(), Halt> {
    let Some(Spec::Recv {
        dest,
        resume,
        limits,
        ..
    }) = c.work.take_spec()
    else {
        return Err(c.fatal(FileFailure::protocol("a copy without a destination")));
    };
    // The manifest: every record and entry admitted before it is read or kept.
    let mut manifest = ManifestIn::new(limits);
    let entries = loop {
        let Some(h) = c.header()? else {
            return Err(Halt::Stream(
                "the sender closed the stream before its manifest".into(),
            ));
        };
        let len = manifest.admit(&h).map_err(|f| c.fatal(f))?;
        let body = c.body(len)?;
        match manifest.on_body(&body).map_err(|f| c.fatal(f))? {
            ManifestStep::More => c.work.touch(1),
            ManifestStep::Done { entries, warnings } => {
                c.work.add_warnings(&warnings);
                break entries;
            }
        }
    };
    // The plan, with keep-alives while earlier runs' files are hashed.
    let mut last = Instant::now();
    let mut checked = 0u64;
    let planned = {
        let work = c.work;
        let mut keepalive = |n: u64| -> Result<(), FileFailure> {
            work.touch(n);
            checked += n;
            if c.stopping() {
                return Err(FileFailure::new(FailKind::Io, "stopped"));
            }
            if last.elapsed() >= KEEPALIVE {
                last = Instant::now();
                if c.send_frame(&ToSender::Planning {
                    checked_bytes: checked,
                })
                .is_err()
                {
                    return Err(FileFailure::new(FailKind::Io, "the sender went away"));
                }
            }
            Ok(())
        };
        plan::plan(&dest, &entries, resume, &mut keepalive)
    };
    let planned = match planned {
        Ok(p) => p,
        Err(_) if c.stopping() => return Err(Halt::Stop),
        Err(f) => return Err(c.fatal(f)),
    };
    let chunks: Vec<Vec<PlanFile>> = planned
        .plan
        .chunks(ITEMS_PER_RECORD)
        .map(<[PlanFile]>::to_vec)
        .collect();
    c.work.start_receiving(entries, planned);
    for files in chunks {
        c.send_frame(&ToSender::Plan { files })?;
    }
    c.send_frame(&ToSender::PlanEnd)?;
    records(c)
}

/// Take records until the sender closes the stream.
fn records(c: &mut Ctx<'_>) -> Result<(), Halt> {
    let mut buf = vec![0u8; PIECE];
    loop {
        let Some(h) = c.header()? else {
            return Ok(());
        };
        match h.tag {
            Tag::Json => match c.json::<ToReceiver>(h.len as usize)? {
                // A sender busy hashing says it is alive.
                ToReceiver::Alive => c.work.touch(1),
                ToReceiver::End { records, .. } if c.index == 0 => end_round(c, records)?,
                other => return Err(c.fatal(violation(format!("{other:?} during the blocks")))),
            },
            Tag::Block => recv_block(c, &h, &mut buf)?,
            Tag::Confirm | Tag::ConfirmFile => {
                let (file, block) = check_header(c, &h)?;
                let cv = c.cv()?;
                let outcome = {
                    let mut g = c.work.lock();
                    let Run::Recv(run) = &mut *g else {
                        return Err(Halt::Stop);
                    };
                    let r = if h.tag == Tag::Confirm {
                        run.table.on_confirm(file, block, cv)
                    } else {
                        run.table.on_confirm_file(file, cv)
                    };
                    let fin = matches!(r, Received::Verified { complete: true })
                        .then(|| c.work.begin_finalize(run, file));
                    (r, fin)
                };
                if let (_, Some(fin)) = outcome {
                    c.work.finalize(fin).map_err(|f| c.fatal(f))?;
                }
                c.work.notify();
            }
        }
    }
}

fn check_header(c: &Ctx<'_>, h: &Header) -> Result<(u32, u64), Halt> {
    let g = c.work.lock();
    let Run::Recv(run) = &*g else {
        drop(g);
        return Err(c.fatal(violation("a block before the plan")));
    };
    let r = run.table.check(h);
    drop(g);
    r.map_err(|e| c.fatal(violation(e)))
}

fn recv_block(c: &mut Ctx<'_>, h: &Header, buf: &mut [u8]) -> Result<(), Halt> {
    let (file, block) = check_header(c, h)?;
    let (target, size) = {
        let mut g = c.work.lock();
        let Run::Recv(run) = &mut *g else {
            return Err(Halt::Stop);
        };
        let size = run.entries[file as usize].size;
        if run.table.wants_data(file) {
            match c.work.open_for_write(run, file) {
                Ok(f) => (Some(f), size),
                Err(f) => {
                    drop(g);
                    return Err(c.fatal(f));
                }
            }
        } else {
            (None, size)
        }
    };
    let len = u64::from(h.len);
    let mut hasher = BlockHasher::new(size, BLOCK_SIZE, h.offset);
    let mut at = 0u64;
    while at < len {
        let n = ((len - at) as usize).min(buf.len());
        c.read_exact(&mut buf[..n]).map_err(closed_in_record)?;
        let now = Instant::now();
        c.io_mark(n as u64, now);
        hasher.update(&buf[..n]);
        if let Some(f) = &target {
            if let Err(e) = f.write_all_at(&buf[..n], h.offset + at) {
                let path = {
                    let g = c.work.lock();
                    match &*g {
                        Run::Recv(run) => run.entries[file as usize].path.clone(),
                        _ => String::new(),
                    }
                };
                return Err(c.fatal(FileFailure::io(format_args!("write {path}"), &e)));
            }
        }
        at += n as u64;
    }
    let sent = c.cv()?;
    let computed = hasher.finish();
    let fin = {
        let mut g = c.work.lock();
        let Run::Recv(run) = &mut *g else {
            return Err(Halt::Stop);
        };
        let r = run.table.on_block(file, block, sent, computed, len);
        matches!(r, Received::Verified { complete: true }).then(|| c.work.begin_finalize(run, file))
    };
    drop(target);
    if let Some(fin) = fin {
        c.work.finalize(fin).map_err(|f| c.fatal(f))?;
    }
    c.work.notify();
    Ok(())
}

/// The sender ended a round after `records` records: once they are all in, ask for what
/// failed, or finish.
fn end_round(c: &mut Ctx<'_>, records: u64) -> Result<(), Halt> {
    let mut alive = Instant::now();
    let (resend, entries, targets, created) = loop {
        let g = c.work.lock();
        let Run::Recv(run) = &*g else {
            return Err(Halt::Stop);
        };
        if run.table.records > records {
            drop(g);
            return Err(c.fatal(violation("more records than the sender counted")));
        }
        if run.table.records == records && run.finalizing == 0 {
            break (
                run.table.resend_list(),
                run.entries.clone(),
                run.targets.clone(),
                run.created_dirs.clone(),
            );
        }
        let g = c.work.wait(g, Duration::from_millis(200));
        drop(g);
        if c.stopping() {
            return Err(Halt::Stop);
        }
        if alive.elapsed() >= KEEPALIVE {
            alive = Instant::now();
            c.send_frame(&ToSender::Planning { checked_bytes: 0 })?;
        }
    };
    if resend.is_empty() {
        c.work
            .finish_dirs(&entries, &targets, &created)
            .map_err(|f| c.fatal(f))?;
        let (files, digest) = {
            let mut g = c.work.lock();
            let Run::Recv(run) = &mut *g else {
                return Err(Halt::Stop);
            };
            run.tree_digest = run.table.tree_digest();
            (run.table.files_done, run.tree_digest.clone())
        };
        let Some(tree_digest) = digest else {
            return Err(c.fatal(FileFailure::new(FailKind::Integrity, "files incomplete")));
        };
        return c.send_frame(&ToSender::Done { files, tree_digest });
    }
    {
        let mut g = c.work.lock();
        if let Run::Recv(run) = &mut *g {
            run.round += 1;
            if run.round >= MAX_ROUNDS {
                drop(g);
                return Err(c.fatal(FileFailure::new(
                    FailKind::Integrity,
                    format!(
                        "{} block(s) still failed their checksum after {MAX_ROUNDS} rounds",
                        resend.len()
                    ),
                )));
            }
        }
    }
    let n = resend.chunks(ITEMS_PER_RECORD).count();
    for (i, blocks) in resend.chunks(ITEMS_PER_RECORD).enumerate() {
        c.send_frame(&ToSender::Resend {
            blocks: blocks.to_vec(),
            last: i + 1 == n,
        })?;
    }
    Ok(())
}
