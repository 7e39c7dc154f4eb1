//! The data threads of a copy (see [`crate::files`] for the protocol): stream 0's thread
//! exchanges the manifest and the plan and ends each round; every stream's thread moves
//! blocks, reading the file with `pread` and hashing it as it goes out, or verifying and
//! writing it with `pwrite` at its offset as it comes in. The decisions are the state
//! machines' of `tcptune_proto::copy` ([`Sender`], [`Receiver`]: stream 0's conversation,
//! the queue and the table every stream shares); this is the I/O around them: read a
//! record, feed it, carry out what the machine says.
//!
//! A thread never waits without looking at the engine's abort flag and the copy's failure,
//! and never gives up on a peer that is busy with local work (walking, hashing an earlier
//! run's files): that work is counted as progress, and a stream that hashes for long sends
//! keep-alive records.

use super::stream::{is_timeout, ReadWake, ThreadOut};
use super::{nanos_since, Counters, EngineConfig, Event, Shared};
use crate::files::digest::{self, BlockHasher, Cv};
use crate::files::queue::Item;
use crate::files::table::Received;
use crate::files::violation;
use crate::files::walk::{self, Manifest};
use crate::files::wire::{
    Header, Tag, ToReceiver, ToSender, Trailer, HEADER_LEN, MAX_JSON, TRAILER_LEN,
};
use crate::files::work::{FileWork, Run, Source, Spec};
use crate::files::FileFailureExt;
use crate::files::{plan, FailKind, FileFailure, BLOCK_SIZE};
use crate::seal::AEAD_TAG_LEN;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tcptune_proto::copy::receiver::{Body, Receiver, ReceiverOutput, KEEPALIVE};
use tcptune_proto::copy::sender::{Sender, SenderOutput};
use tcptune_sys::fs::{self as sysfs, OpenMode};
use tcptune_sys::os::thread_cpu;
use tcptune_sys::view::FileView;

/// Bytes per read, hash and write.
const PIECE: usize = 1 << 20;

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
    /// The time of this thread's last turn: read by [`Ctx::tick`] when a blocking call
    /// returns (a socket read or write, a file read, a wait on the copy's condition), and
    /// only there; everything between two turns uses it.
    now: Instant,
    /// When this stream's reads wake (off for a sending stream).
    wake: ReadWake,
}

impl Ctx<'_> {
    /// A new turn: the one place this thread reads the clock.
    fn tick(&mut self) -> Instant {
        self.now = Instant::now();
        self.now
    }

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
        let at = nanos_since(now, self.cfg.epoch);
        self.counters.last_io_ns.store(at, Ordering::Relaxed);
        self.wake.feed(self.stream.as_fd(), now, at, self.out.bytes);
    }

    /// Read exactly `buf`. A close before the first byte is `Closed`.
    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), Halt> {
        let mut got = 0;
        let mut last = (self.now, self.work.activity());
        let mut r = self.stream;
        while got < buf.len() {
            // A read waits for at most what the record still owes.
            self.wake.before_read(self.stream.as_fd(), buf.len() - got);
            match r.read(&mut buf[got..]) {
                Ok(0) if got == 0 => return Err(Halt::Closed),
                Ok(0) => {
                    return Err(Halt::Stream(
                        "the peer closed the stream in a record".into(),
                    ))
                }
                Ok(n) => {
                    got += n;
                    last.0 = self.tick();
                }
                Err(e) if is_timeout(&e) => {
                    if self.stopping() {
                        return Err(Halt::Stop);
                    }
                    let now = self.tick();
                    let a = self.work.activity();
                    if a != last.1 {
                        last = (now, a);
                    } else if now.duration_since(last.0) > self.cfg.idle_timeout {
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

    /// A send that timed out: fine while TCP still moves bytes (`last` is when it last did,
    /// and its byte count then), a stall past the idle timeout otherwise.
    fn send_timed_out(&mut self, last: &mut (Instant, u64)) -> Result<(), Halt> {
        let now = self.tick();
        let t = self.counters.tcp_bytes.load(Ordering::Relaxed);
        if t != last.1 {
            *last = (now, t);
        } else if now.duration_since(last.0) > self.cfg.idle_timeout {
            return Err(Halt::Stream(format!(
                "no progress for {:.0} s: the receiver stopped reading",
                self.cfg.idle_timeout.as_secs_f64()
            )));
        }
        Ok(())
    }

    fn write_all(&mut self, mut buf: &[u8]) -> Result<(), Halt> {
        let mut w = self.stream;
        let mut last = (self.now, self.counters.tcp_bytes.load(Ordering::Relaxed));
        while !buf.is_empty() {
            if self.stopping() {
                return Err(Halt::Stop);
            }
            match w.write(buf) {
                Ok(0) => return Err(Halt::Stream("the connection accepted no more data".into())),
                Ok(n) => {
                    buf = &buf[n..];
                    last.0 = self.tick();
                }
                Err(e) if is_timeout(&e) => self.send_timed_out(&mut last)?,
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

    /// Send `data`, which is `f`'s bytes at `offset` as just read and hashed, with
    /// `sendfile` (the kernel moves the page cache's pages, saving the copy from user
    /// space); where `sendfile` cannot (a file system without it) or the file changed
    /// length meanwhile, the rest goes from `data` with `write`. A file rewritten between
    /// the read and the send is caught by the receiver's check of the block against the
    /// trailer's checksum, and the block is sent again.
    fn send_range(&mut self, f: &File, offset: u64, data: &[u8]) -> Result<(), Halt> {
        let mut sent = 0usize;
        let mut last = (self.now, self.counters.tcp_bytes.load(Ordering::Relaxed));
        while sent < data.len() {
            if self.stopping() {
                return Err(Halt::Stop);
            }
            match tcptune_sys::net::sendfile(
                self.stream,
                f,
                offset + sent as u64,
                data.len() - sent,
            ) {
                Ok(0) => break,
                Ok(n) => {
                    sent += n;
                    last.0 = self.tick();
                }
                Err(e) if is_timeout(&e) => self.send_timed_out(&mut last)?,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
                    ) =>
                {
                    break
                }
                Err(e) => {
                    if self.stopping() {
                        return Err(Halt::Stop);
                    }
                    return Err(Halt::Stream(format!("sendfile: {e}")));
                }
            }
        }
        self.write_all(&data[sent..])
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

    /// A block's or confirmation's trailer (checksum and tag).
    fn trailer(&mut self) -> Result<Trailer, Halt> {
        let mut t = [0u8; TRAILER_LEN];
        self.read_exact(&mut t).map_err(closed_in_record)?;
        Ok(Trailer::decode(&t))
    }

    /// The trailer of the record with header `h` and checksum `cv`, tagged with the
    /// session's block key.
    fn seal(&mut self, h: &Header, cv: Cv) -> Result<[u8; TRAILER_LEN], Halt> {
        match self.work.block_key() {
            Some(k) => Ok(Trailer::sealed(k, h, cv).encode()),
            None => Err(self.fatal(FileFailure::protocol(
                "a copy block before the session's keys were agreed",
            ))),
        }
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

    /// A frame's body from the receiver (its length checked before it is read).
    fn recv_frame(&mut self) -> Result<Vec<u8>, Halt> {
        let mut len = [0u8; 4];
        self.read_exact(&mut len).map_err(|h| match h {
            Halt::Closed => Halt::Stream("the receiver closed the stream".into()),
            h => h,
        })?;
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_JSON {
            return Err(self.fatal(violation(format!("a record of {len} bytes"))));
        }
        self.body(len)
    }

    /// The end of a stream: FIN, then wait for the peer's.
    fn close(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Write);
        let mut b = [0u8; 64];
        let mut r = self.stream;
        let waited = self.tick();
        loop {
            match r.read(&mut b) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if is_timeout(&e) => {
                    if self.shared.abort.load(Ordering::Relaxed)
                        || self.tick().duration_since(waited) > self.cfg.idle_timeout
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
        now: Instant::now(),
        wake: ReadWake::off(),
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
    c.tick();
    send_items(c, false)
}

/// What carrying out the sender's outputs led to.
#[derive(PartialEq)]
enum Flow {
    More,
    StartBlocks,
    Done,
}

/// Carry out the sender's outputs (stopping at `StartBlocks`: the machine moves then).
fn carry_send(c: &mut Ctx<'_>, outs: Vec<SenderOutput>) -> Result<Flow, Halt> {
    for o in outs {
        match o {
            SenderOutput::Record(r) => c.send_record(&r)?,
            SenderOutput::StartBlocks => return Ok(Flow::StartBlocks),
            SenderOutput::Done => return Ok(Flow::Done),
            SenderOutput::Failed(f) => return Err(c.fatal(f)),
        }
    }
    Ok(Flow::More)
}

/// The sender's outputs up to and with the first `StartBlocks`.
fn drain_send(s: &mut Sender) -> Vec<SenderOutput> {
    let mut outs = Vec::new();
    while let Some(o) = s.poll_output() {
        let start = o == SenderOutput::StartBlocks;
        outs.push(o);
        if start {
            break;
        }
    }
    outs
}

/// Feed the shared sender (once blocks go) and take its outputs.
fn with_sender<T>(c: &Ctx<'_>, f: impl FnOnce(&mut Sender) -> T) -> Result<T, Halt> {
    match &mut *c.work.lock() {
        Run::Send(s) => Ok(f(&mut s.sender)),
        _ => Err(Halt::Stop),
    }
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
    c.tick();
    c.work.add_warnings(&manifest.warnings);
    // The manifest out and the plan in: this thread owns the machine until blocks go.
    let idle = Duration::MAX;
    let mut sender = Sender::new(manifest.entries.clone(), manifest.warnings.clone(), idle);
    loop {
        match carry_send(c, drain_send(&mut sender))? {
            Flow::StartBlocks => break,
            Flow::Done => return Ok(()),
            Flow::More => {}
        }
        let body = c.recv_frame()?;
        c.work.touch(1);
        sender.handle_frame_bytes(c.now, &body);
    }
    c.work.start_sending(manifest, sender);
    // Rounds: the queue's items, then `End`, then the receiver's answer.
    loop {
        send_items(c, true)?;
        let outs = with_sender(c, drain_send)?;
        if carry_send(c, outs)? == Flow::Done {
            return Ok(());
        }
        loop {
            let body = c.recv_frame()?;
            c.work.touch(1);
            let now = c.now;
            let (outs, blocks) = with_sender(c, |s| {
                s.handle_frame_bytes(now, &body);
                (drain_send(s), !s.round_idle())
            })?;
            if carry_send(c, outs)? == Flow::Done {
                return Ok(());
            }
            if blocks {
                break;
            }
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
                // A stream the engine retires (one the in-band measurement opened beyond
                // the plan) takes no more blocks: the others take the rest of the queue.
                if !lead && c.counters.retire.load(Ordering::Acquire) {
                    return Ok(());
                }
                let Run::Send(s) = &mut *g else {
                    return Err(Halt::Stop);
                };
                if let Some(it) = s.sender.take() {
                    break (it, s.manifest.clone());
                }
                if !lead || s.sender.round_idle() {
                    return Ok(());
                }
                g = c.work.wait(g, Duration::from_millis(200));
            }
        };
        // A new turn: the item may have come after waits on the queue.
        c.tick();
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
                s.sender.abandon();
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
    c: &mut Ctx<'_>,
    f: &File,
    buf: &mut [u8],
    at: u64,
    shown: &dyn Fn() -> String,
) -> Result<(), Halt> {
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], at + got as u64) {
            Ok(0) => return Err(shrank(c, shown)),
            Ok(n) => {
                got += n;
                c.tick();
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(c.fatal(FileFailure::io(format_args!("read {}", shown()), &e))),
        }
    }
    Ok(())
}

/// The file being sent became shorter than its manifest entry while it was read.
fn shrank(c: &mut Ctx<'_>, shown: &dyn Fn() -> String) -> Halt {
    c.fatal(FileFailure::new(
        FailKind::Io,
        format!("{}: the file shrank during the copy", shown()),
    ))
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
        Run::Send(s) => s.sender.round(),
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
        // Hash first: only what differs goes over the network. The block is hashed from a
        // mapped view of the file where it maps (no copy), else read into `buf`.
        let view = FileView::map(&f, offset, len as usize).ok();
        if view.is_none() {
            if buf.len() < len as usize {
                buf.resize(len as usize, 0);
            }
            read_piece(c, &f, &mut buf[..len as usize], offset, &shown)?;
        }
        c.work.touch(len);
        let cv = match &view {
            Some(v) => {
                let cv = digest::block_cv(size, BLOCK_SIZE, offset, v.bytes());
                if !v.intact() {
                    return Err(shrank(c, &shown));
                }
                cv
            }
            None => digest::block_cv(size, BLOCK_SIZE, offset, &buf[..len as usize]),
        };
        if cv == theirs {
            let h = header(Tag::Confirm);
            let trailer = c.seal(&h, cv)?;
            c.write_all(&h.encode())?;
            c.write_all(&trailer)?;
            return block_done(c, file, block, cv, 0, len);
        }
        if c.work.sealing().is_some() {
            if let Some(v) = &view {
                if buf.len() < len as usize {
                    buf.resize(len as usize, 0);
                }
                buf[..len as usize].copy_from_slice(v.bytes());
            }
            return send_sealed(c, header(Tag::Block), &mut buf[..len as usize], cv, false);
        }
        let h = header(Tag::Block);
        let trailer = c.seal(&h, cv)?;
        c.write_all(&h.encode())?;
        let data = match &view {
            Some(v) => v.bytes(),
            None => &buf[..len as usize],
        };
        // Sent from the bytes that were hashed: a file truncated since reads as zeros here,
        // which the receiver's check refuses, and the next round reports the shrink.
        for piece in data.chunks(PIECE) {
            c.write_all(piece)?;
            let now = c.now;
            c.io_mark(piece.len() as u64, now);
        }
        c.write_all(&trailer)?;
        return block_done(c, file, block, cv, len, 0);
    }
    let seq = if round == 0 {
        c.work.block_seq.fetch_add(1, Ordering::Relaxed)
    } else {
        u64::MAX
    };
    let corrupt = c.cfg.corrupt == Some(seq);
    if c.work.sealing().is_some() {
        // Sealed: the whole block is read, hashed and sealed before its first byte goes.
        if buf.len() < len as usize {
            buf.resize(len as usize, 0);
        }
        read_piece(c, &f, &mut buf[..len as usize], offset, &shown)?;
        let cv = digest::block_cv(size, BLOCK_SIZE, offset, &buf[..len as usize]);
        return send_sealed(c, header(Tag::Block), &mut buf[..len as usize], cv, corrupt);
    }
    c.write_all(&header(Tag::Block).encode())?;
    let mut h = BlockHasher::new(size, BLOCK_SIZE, offset);
    // The block is hashed from a mapped view of the file (no copy into user memory) and
    // sent with sendfile from the page cache; where the file does not map, it is read into
    // `buf` piece by piece. `--inject-corruption` takes the read path: it alters the copy.
    let view = if corrupt {
        None
    } else {
        FileView::map(&f, offset, len as usize).ok()
    };
    let mut at = 0u64;
    while at < len {
        let n = ((len - at) as usize).min(PIECE);
        let called;
        if let Some(v) = &view {
            let piece = &v.bytes()[at as usize..at as usize + n];
            h.update(piece);
            if !v.intact() {
                return Err(shrank(c, &shown));
            }
            called = c.now;
            c.send_range(&f, offset + at, piece)?;
        } else {
            read_piece(c, &f, &mut buf[..n], offset + at, &shown)?;
            h.update(&buf[..n]);
            if corrupt && at == 0 {
                buf[n / 2] ^= 1;
            }
            called = c.now;
            if corrupt && at == 0 {
                c.write_all(&buf[..n])?;
            } else {
                c.send_range(&f, offset + at, &buf[..n])?;
            }
        }
        c.out.first.get_or_insert(called);
        let now = c.now;
        c.io_mark(n as u64, now);
        at += n as u64;
    }
    let cv = h.finish();
    let trailer = c.seal(&header(Tag::Block), cv)?;
    c.write_all(&trailer)?;
    block_done(c, file, block, cv, len, 0)
}

/// Send block record `h` (its plaintext `body`, checksum `cv`) sealed (`cp --encrypt`):
/// the header, the ciphertext, its Poly1305 tag, then the trailer over the plaintext's
/// checksum. `corrupt` (`--inject-corruption`) flips a ciphertext byte after sealing, as
/// the network might: the receiver cannot open it and asks for the block again.
fn send_sealed(
    c: &mut Ctx<'_>,
    h: Header,
    body: &mut [u8],
    cv: Cv,
    corrupt: bool,
) -> Result<(), Halt> {
    let trailer = c.seal(&h, cv)?;
    let sealed = match c.work.sealing() {
        Some(s) => s.seal(&h, body),
        None => return Err(Halt::Stop),
    };
    let tag = sealed.map_err(|e| c.fatal(FileFailure::new(FailKind::Usage, e.to_string())))?;
    if corrupt && !body.is_empty() {
        let mid = body.len() / 2;
        body[mid] ^= 1;
    }
    c.write_all(&h.encode())?;
    for piece in body.chunks(PIECE) {
        let called = c.now;
        c.write_all(piece)?;
        c.out.first.get_or_insert(called);
        let now = c.now;
        c.io_mark(piece.len() as u64, now);
    }
    c.write_all(&tag)?;
    c.write_all(&trailer)?;
    let len = u64::from(h.len);
    block_done(c, h.file, h.offset / BLOCK_SIZE, cv, len, 0)
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
        Run::Send(s) => s.sender.block_done(file, block, cv, carried, present),
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
    let mut alive = c.now;
    for b in 0..e.blocks() {
        let off = b * BLOCK_SIZE;
        let len = e.block_len(b);
        let mut h = BlockHasher::new(e.size, BLOCK_SIZE, off);
        if let Ok(v) = FileView::map(&f, off, len as usize) {
            h.update(v.bytes());
            if !v.intact() {
                return Err(shrank(c, &shown));
            }
            c.work.touch(len);
        } else {
            let mut at = 0;
            while at < len {
                let n = ((len - at) as usize).min(buf.len());
                read_piece(c, &f, &mut buf[..n], off + at, &shown)?;
                h.update(&buf[..n]);
                at += n as u64;
                c.work.touch(n as u64);
            }
        }
        cvs.push(h.finish());
        if c.now.duration_since(alive) >= KEEPALIVE {
            alive = c.now;
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
        let trailer = c.seal(&h, theirs)?;
        c.write_all(&h.encode())?;
        c.write_all(&trailer)?;
    }
    if let Run::Send(s) = &mut *c.work.lock() {
        s.sender.check_done(file, cvs, confirmed);
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
        now: Instant::now(),
        wake: ReadWake::on(),
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
    // The manifest: every record and entry admitted before it is read or kept. The stalls
    // of a stream are found where its bytes are read (`read_exact`), not by the machine.
    let Some(key) = c.work.block_key().cloned() else {
        return Err(c.fatal(FileFailure::protocol(
            "a copy before the session's keys were agreed",
        )));
    };
    let mut r = Receiver::new(limits, Duration::MAX, key);
    loop {
        let Some(h) = c.header()? else {
            return Err(Halt::Stream(
                "the sender closed the stream before its manifest".into(),
            ));
        };
        let now = c.now;
        let len = match r.handle_header(now, 0, &h) {
            Ok(Body::Json(len)) => len,
            Ok(_) => return Err(c.fatal(violation("a block before the plan"))),
            Err(f) => return Err(c.fatal(f)),
        };
        let body = c.body(len)?;
        r.handle_json(now, 0, &body).map_err(|f| c.fatal(f))?;
        c.work.touch(1);
        if let Some(ReceiverOutput::Plan { warnings }) = r.poll_output() {
            c.work.add_warnings(&warnings);
            break;
        }
    }
    let planned = plan_with_keepalives(c, &dest, r.entries(), resume);
    let planned = match planned {
        Ok(p) => p,
        Err(_) if c.stopping() => return Err(Halt::Stop),
        Err(f) => return Err(c.fatal(f)),
    };
    let plan::Planned {
        table,
        targets,
        plan,
        need_bytes,
        created_dirs,
    } = planned;
    r.handle_planned(c.tick(), Ok((table, plan)));
    c.work.start_receiving(r, targets, created_dirs, need_bytes);
    answer(c)?;
    records(c)
}

/// Plan `entries` with the file system, with keep-alives while earlier runs' files are
/// hashed.
fn plan_with_keepalives(
    c: &mut Ctx<'_>,
    dest: &plan::DestSpec,
    entries: &[crate::files::Entry],
    resume: bool,
) -> Result<plan::Planned, FileFailure> {
    let mut last = c.now;
    let mut checked = 0u64;
    let work = c.work;
    let mut keepalive = |n: u64| -> Result<(), FileFailure> {
        work.touch(n);
        checked += n;
        if c.stopping() {
            return Err(FileFailure::new(FailKind::Io, "stopped"));
        }
        let now = c.tick();
        if now.duration_since(last) >= KEEPALIVE {
            last = now;
            let alive = ToSender::Planning {
                checked_bytes: checked,
            };
            if c.send_frame(&alive).is_err() {
                return Err(FileFailure::new(FailKind::Io, "the sender went away"));
            }
        }
        Ok(())
    };
    plan::plan(dest, entries, resume, &mut keepalive)
}

/// Feed the shared receiver and take its outputs.
fn with_receiver<T>(c: &Ctx<'_>, f: impl FnOnce(&mut Receiver) -> T) -> Result<T, Halt> {
    match &mut *c.work.lock() {
        Run::Recv(run) => Ok(f(&mut run.receiver)),
        _ => Err(Halt::Stop),
    }
}

/// Stream 0 carries out the receiver's outputs (the plan, the answer to a round) until it
/// has none and awaits no round's records, with keep-alives while it waits.
fn answer(c: &mut Ctx<'_>) -> Result<(), Halt> {
    loop {
        let now = c.tick();
        let (outs, pending) = with_receiver(c, |r| {
            r.handle_timeout(now);
            let outs: Vec<ReceiverOutput> = std::iter::from_fn(|| r.poll_output()).collect();
            (outs, r.round_pending())
        })?;
        let idle = outs.is_empty();
        for o in outs {
            match o {
                ReceiverOutput::Frame(f) => c.send_frame(&f)?,
                ReceiverOutput::FinishDirs => {
                    let (entries, targets, created) = match &*c.work.lock() {
                        Run::Recv(run) => (
                            run.receiver.entries().clone(),
                            run.targets.clone(),
                            run.created_dirs.clone(),
                        ),
                        _ => return Err(Halt::Stop),
                    };
                    let r = c.work.finish_dirs(&entries, &targets, &created);
                    with_receiver(c, |rx| rx.handle_dirs_finished(now, r))?;
                }
                ReceiverOutput::Failed(f) => return Err(c.fatal(f)),
                ReceiverOutput::Plan { .. } | ReceiverOutput::Done => {}
            }
        }
        if idle && !pending {
            return Ok(());
        }
        if idle {
            let g = c.work.lock();
            drop(c.work.wait(g, Duration::from_millis(200)));
            if c.stopping() {
                return Err(Halt::Stop);
            }
        }
    }
}

/// Take records until the sender closes the stream.
fn records(c: &mut Ctx<'_>) -> Result<(), Halt> {
    let mut buf = vec![0u8; PIECE];
    loop {
        let Some(h) = c.header()? else {
            return Ok(());
        };
        let now = c.now;
        let body = match &mut *c.work.lock() {
            Run::Recv(run) => run.receiver.handle_header(now, c.index, &h),
            _ => Err(violation("a block before the plan")),
        };
        match body.map_err(|f| c.fatal(f))? {
            Body::Json(len) => {
                let body = c.body(len)?;
                with_receiver(c, |r| r.handle_json(now, c.index, &body))?
                    .map_err(|f| c.fatal(f))?;
                // A sender busy hashing says it is alive.
                c.work.touch(1);
                if c.index == 0 {
                    answer(c)?;
                }
            }
            Body::Block {
                file,
                block,
                size,
                write,
            } => recv_block(c, &h, file, block, size, write, &mut buf)?,
            Body::Confirm { file, block } => {
                let t = c.trailer()?;
                received(c, file, now, |r| r.handle_confirm(now, &h, block, t))?;
            }
            Body::ConfirmFile { file } => {
                let t = c.trailer()?;
                received(c, file, now, |r| r.handle_confirm_file(now, &h, t))?;
            }
        }
    }
}

/// Give the receiver what a record did; a file it completes is put into place.
fn received(
    c: &Ctx<'_>,
    file: u32,
    now: Instant,
    f: impl FnOnce(&mut Receiver) -> Received,
) -> Result<(), Halt> {
    let fin = {
        let mut g = c.work.lock();
        let Run::Recv(run) = &mut *g else {
            return Err(Halt::Stop);
        };
        let r = f(&mut run.receiver);
        matches!(r, Received::Verified { complete: true }).then(|| c.work.begin_finalize(run, file))
    };
    if let Some(fin) = fin {
        let r = c.work.finalize(fin);
        with_receiver(c, |rx| rx.handle_finalized(now, r.clone()))?;
        r.map_err(|f| c.fatal(f))?;
    }
    c.work.notify();
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn recv_block(
    c: &mut Ctx<'_>,
    h: &Header,
    file: u32,
    block: u64,
    size: u64,
    write: bool,
    buf: &mut Vec<u8>,
) -> Result<(), Halt> {
    let target = if write {
        let mut g = c.work.lock();
        let Run::Recv(run) = &mut *g else {
            return Err(Halt::Stop);
        };
        match c.work.open_for_write(run, file) {
            Ok(f) => Some(f),
            Err(f) => {
                drop(g);
                return Err(c.fatal(f));
            }
        }
    } else {
        None
    };
    if c.work.sealing().is_some() {
        return recv_sealed(c, h, (file, block, size), target, buf);
    }
    let len = u64::from(h.len);
    let mut hasher = BlockHasher::new(size, BLOCK_SIZE, h.offset);
    let mut at = 0u64;
    let mut now = c.now;
    while at < len {
        let n = ((len - at) as usize).min(buf.len());
        c.read_exact(&mut buf[..n]).map_err(closed_in_record)?;
        now = c.now;
        c.io_mark(n as u64, now);
        hasher.update(&buf[..n]);
        if let Some(f) = &target {
            if let Err(e) = f.write_all_at(&buf[..n], h.offset + at) {
                let path = with_receiver(c, |r| {
                    r.entries()
                        .get(file as usize)
                        .map(|e| e.path.clone())
                        .unwrap_or_default()
                })
                .unwrap_or_default();
                return Err(c.fatal(FileFailure::io(format_args!("write {path}"), &e)));
            }
        }
        at += n as u64;
    }
    let sent = c.trailer()?;
    let computed = hasher.finish();
    drop(target);
    received(c, file, now, |r| {
        r.handle_block(now, h, block, sent, computed)
    })
}

/// A sealed block (`cp --encrypt`): the whole ciphertext and its tag are read and opened
/// before anything is hashed or written; one that fails to open is never written and is
/// asked for again (as a block whose checksum fails).
fn recv_sealed(
    c: &mut Ctx<'_>,
    h: &Header,
    (file, block, size): (u32, u64, u64),
    target: Option<std::sync::Arc<File>>,
    buf: &mut Vec<u8>,
) -> Result<(), Halt> {
    let len = h.len as usize;
    if buf.len() < len {
        buf.resize(len, 0);
    }
    let mut at = 0;
    let mut now = c.now;
    while at < len {
        let n = (len - at).min(PIECE);
        c.read_exact(&mut buf[at..at + n])
            .map_err(closed_in_record)?;
        now = c.now;
        c.io_mark(n as u64, now);
        at += n;
    }
    let mut tag = [0u8; AEAD_TAG_LEN];
    c.read_exact(&mut tag).map_err(closed_in_record)?;
    let sent = c.trailer()?;
    let opened = match c.work.sealing() {
        Some(s) => s.open(h, &mut buf[..len], &tag).is_ok(),
        None => false,
    };
    if !opened {
        drop(target);
        return received(c, file, now, |r| r.handle_unopened(now, h, block));
    }
    let computed = digest::block_cv(size, BLOCK_SIZE, h.offset, &buf[..len]);
    if let Some(f) = &target {
        if let Err(e) = f.write_all_at(&buf[..len], h.offset) {
            let path = with_receiver(c, |r| {
                r.entries()
                    .get(file as usize)
                    .map(|e| e.path.clone())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
            return Err(c.fatal(FileFailure::io(format_args!("write {path}"), &e)));
        }
    }
    drop(target);
    received(c, file, now, |r| {
        r.handle_block(now, h, block, sent, computed)
    })
}
