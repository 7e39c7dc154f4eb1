//! The data threads: one per stream, writing or reading and verifying messages.

use super::{nanos_since, Counters, EngineConfig, Event, Shared};
use crate::pattern::{Checker, Pattern, HEADER_LEN};
use std::borrow::Cow;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tcptune_core::Bytes;
use tcptune_core::{Decimated, Time};
use tcptune_sys::os::{thread_cpu, CpuTimes};
use tcptune_sys::sockopt;

/// Write size from the template's slices (the message a test corrupts; iperf3's default block).
const IO_CHUNK: usize = 128 * 1024;
/// Read size of a receiver: larger reads mean fewer calls, fewer window updates and their
/// acknowledgment work per byte (measured on loopback: 0.93-1.23 CPU-s per 8 GiB at 512 KiB
/// against 1.20-1.44 at 128 KiB), and 512 KiB still stays in L2 cache for the check.
const RECV_CHUNK: usize = 512 * 1024;
/// Template slices per write (IO_CHUNK / TEMPLATE_LEN, plus one for a partial start).
const MAX_PIECES: usize = IO_CHUNK / crate::pattern::TEMPLATE_LEN + 1;
/// Progress marks a receiver keeps for its tail rate (decimated: bounded for any length).
const MARKS: usize = 1024;
/// Most payload bytes one write of the periodic pattern takes: the buffer is one template
/// period longer than this.
const SEND_WINDOW: usize = 256 * 1024;

/// The most a reader's low-water mark asks for ([`WakeMark`]).
const LOWAT_MAX: u64 = 256 * 1024;
/// Below this a low-water mark saves too few wake-ups to be worth a call: the reader keeps
/// the default (woken by every segment).
const LOWAT_MIN: u64 = 16 * 1024;
/// A low-water mark holds at most this share of the receive buffer unread, so the window
/// the sender sees stays within a sixteenth of what the buffer allows (the kernel itself
/// wakes the reader at seven eighths full or a one-segment window).
const LOWAT_BUF_SHARE: u64 = 16;
/// A low-water mark is at most what the stream delivers in this long: the verifier and the
/// progress counters see each byte at most this late.
const LOWAT_DELAY: Duration = Duration::from_millis(2);

/// When a pattern stream's reader is woken: `SO_RCVLOWAT` sized from the stream's rate and
/// receive buffer. By default a blocked reader is woken for every segment that arrives, and a
/// fast stream on a busy core spends its time switching threads (loopback, one core per
/// end, 4 streams: 25% of the receiver's samples in `finish_task_switch` under
/// `sk_wait_data`); waking once per 2 ms of data, at most 256 KiB, doubled the engine's
/// loopback throughput (25-27 to 50-52 Gbit/s, 1 and 4 streams pinned; 21 to 52 unpinned
/// with 1 stream).
/// The mark follows the rate measured between the reader's progress marks
/// (every 10 ms or more) and a sixteenth of the receive buffer. A pattern stream applies it
/// as it is: its sender never waits for the reader mid-stream (it ends with its FIN, which
/// wakes the reader whatever the mark). A file copy's streams also carry exchanges
/// (manifest, plan) whose last bytes must not wait for more: each read there asks for at
/// most what the record being read still owes ([`WakeMark::for_need`]), which its sender
/// writes without waiting. A pure state machine; [`ReadWake`] is its driver.
#[derive(Debug, Default)]
pub(super) struct WakeMark {
    /// The mark in force (0: the kernel's default of 1).
    current: u64,
    /// The previous progress mark: (nanoseconds, bytes read).
    last: Option<(u64, u64)>,
}

impl WakeMark {
    /// At a progress mark `at_ns` with `bytes` read so far and the socket's `sk_rcvbuf`:
    /// the low-water mark to set now, if it changes.
    pub(super) fn on_mark(&mut self, at_ns: u64, bytes: u64, rcvbuf: u64) -> Option<u64> {
        let last = self.last.replace((at_ns, bytes));
        let (t0, b0) = last?;
        let dt = at_ns.saturating_sub(t0);
        if dt == 0 {
            return None;
        }
        let delivered = bytes.saturating_sub(b0);
        let in_delay = u128::from(delivered) * LOWAT_DELAY.as_nanos() / u128::from(dt);
        let want = u64::try_from(in_delay)
            .unwrap_or(u64::MAX)
            .min(rcvbuf / LOWAT_BUF_SHARE)
            .min(LOWAT_MAX);
        // Powers of two: the mark changes only when the rate does by half or double.
        let want = if want < LOWAT_MIN {
            0
        } else {
            1u64 << (63 - want.leading_zeros())
        };
        (want != self.current).then(|| {
            self.current = want;
            want.max(1)
        })
    }

    /// The mark for a read of a record that still owes `need` bytes: the stream's mark, at
    /// most `need` (a wait for more than the record holds could last until the read's
    /// timeout), at least 1.
    pub(super) fn for_need(&self, need: usize) -> u64 {
        self.current
            .min(u64::try_from(need).unwrap_or(u64::MAX))
            .max(1)
    }
}

/// How often a reader feeds its [`WakeMark`] the rate.
const WAKE_FEED: Duration = Duration::from_millis(10);

/// The driver of a reader's [`WakeMark`], shared by pattern and file streams: feeds it the
/// bytes read and the socket's receive buffer at most every [`WAKE_FEED`], and before each
/// read sets the mark for what that read may wait for, when it changed. A call the kernel
/// refuses turns it off (the reads keep the kernel's default).
pub(super) struct ReadWake {
    mark: Option<WakeMark>,
    /// The `SO_RCVLOWAT` in force.
    lowat: u64,
    fed: Option<Instant>,
}

impl ReadWake {
    pub(super) fn on() -> ReadWake {
        ReadWake {
            mark: Some(WakeMark::default()),
            lowat: 1,
            fed: None,
        }
    }

    /// A stream that only sends: its few reads keep the kernel's default.
    pub(super) fn off() -> ReadWake {
        ReadWake {
            mark: None,
            lowat: 1,
            fed: None,
        }
    }

    /// `bytes` read so far at `now` (`at_ns` on the engine's clock).
    pub(super) fn feed(&mut self, fd: BorrowedFd<'_>, now: Instant, at_ns: u64, bytes: u64) {
        let Some(mark) = self.mark.as_mut() else {
            return;
        };
        if self.fed.is_some_and(|t| now.duration_since(t) < WAKE_FEED) {
            return;
        }
        self.fed = Some(now);
        mark.on_mark(at_ns, bytes, sockopt::rcvbuf(fd).unwrap_or(0));
    }

    /// Before a read that may wait for at most `need` bytes.
    pub(super) fn before_read(&mut self, fd: BorrowedFd<'_>, need: usize) {
        let Some(want) = self.mark.as_ref().map(|m| m.for_need(need)) else {
            return;
        };
        if want == self.lowat {
            return;
        }
        if sockopt::set_rcvlowat(fd, Bytes(want)).is_ok() {
            self.lowat = want;
        } else {
            self.mark = None;
            if self.lowat != 1 {
                let _ = sockopt::set_rcvlowat(fd, Bytes(1));
            }
        }
    }
}

/// The pattern's payload as one buffer: the template repeated, one period longer than
/// [`SEND_WINDOW`], so any window of a message's payload up to that length is one
/// contiguous slice of it, written with the message's header in one `writev` of at most
/// two pieces (256 KiB of payload per call, one copy from a buffer that stays in cache).
/// It replaced `sendfile` from a sealed memfd of the same bytes: on loopback (1 stream,
/// 8 GiB, Linux 6.18) the page references cost more than the copy they save (the
/// sender's CPU 1.17-1.22 s against 0.93-1.07 s, both processes 2.05 against 1.58
/// CPU-s), the page-cache release alone 17% of the sender's samples; and 16 KiB
/// template slices (nine pieces per 128 KiB `writev`) cost 1.49-1.65 s.
pub(super) struct PatternBuf {
    data: Vec<u8>,
}

impl PatternBuf {
    /// The buffer of `pattern` (one per engine, shared by its streams).
    pub(super) fn new(pattern: &Pattern) -> PatternBuf {
        PatternBuf {
            data: pattern.periodic(crate::pattern::TEMPLATE_LEN + SEND_WINDOW),
        }
    }

    /// Message `m`'s payload from `pos`: as much of it as one write takes, from the
    /// buffer.
    fn window(&self, pattern: &Pattern, m: u64, pos: u64) -> &[u8] {
        let left = usize::try_from(pattern.message_size() - pos).unwrap_or(usize::MAX);
        let offset = pattern.template_offset(m, pos);
        &self.data[offset..offset + left.min(SEND_WINDOW)]
    }
}

/// What a data thread reports when it ends.
#[derive(Default)]
pub(super) struct ThreadOut {
    pub(super) tail_bps: Option<f64>,
    pub(super) bytes: u64,
    pub(super) messages: u64,
    pub(super) partial_bytes: u64,
    pub(super) first: Option<Instant>,
    pub(super) last: Option<Instant>,
    pub(super) error: Option<String>,
    pub(super) cpu: CpuTimes,
}

pub(super) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// A sending stream's thread: write messages (numbers shared by all streams) until they
/// run out, the engine stops or retires the stream, or the connection fails; then shut
/// the write side and wait for the receiver to close.
pub(super) fn send_loop(
    stream: &TcpStream,
    shared: &Shared,
    pattern: &Pattern,
    periodic: Option<&PatternBuf>,
    counters: &Counters,
    cfg: &EngineConfig,
    index: u32,
) -> ThreadOut {
    let cpu0 = thread_cpu().unwrap_or_default();
    // The thread's start: the first turn's time.
    let start = Instant::now();
    let mut s = Sending {
        stream,
        shared,
        pattern,
        periodic,
        counters,
        cfg,
        out: ThreadOut::default(),
        now: start,
        last_progress: start,
        last_tcp: 0,
    };
    loop {
        if shared.stop.load(Ordering::Relaxed) || counters.retire.load(Ordering::Relaxed) {
            break;
        }
        let m = shared.next.fetch_add(1, Ordering::Relaxed);
        if cfg.messages.is_some_and(|total| m >= total) {
            break;
        }
        if !s.write_message(m) {
            break;
        }
        s.out.messages += 1;
    }
    let mut out = s.out;
    let _ = stream.shutdown(Shutdown::Write);
    // Wait for the receiver to close its side: then every byte was delivered and the last
    // TCP_INFO sample is final. The controller hears now that nothing more will be written
    // (a client then ends the phase a round trip sooner).
    if out.error.is_none() {
        shared.post(Event::StreamWritten(index));
        wait_for_close(stream, shared, cfg.idle_timeout);
    }
    out.cpu = thread_cpu().unwrap_or_default().since(&cpu0);
    out
}

/// A sending stream's state.
struct Sending<'a> {
    stream: &'a TcpStream,
    shared: &'a Shared,
    pattern: &'a Pattern,
    /// The payload goes out in windows of this buffer (`None`: in the template's slices).
    periodic: Option<&'a PatternBuf>,
    counters: &'a Counters,
    cfg: &'a EngineConfig,
    out: ThreadOut,
    /// The latest turn's time: one turn is one write, and the clock is read once, when the
    /// write returned (before the first write: when the thread started).
    now: Instant,
    /// The last time this stream wrote, or TCP saw its bytes acknowledged.
    last_progress: Instant,
    /// The stream's TCP byte count as last seen.
    last_tcp: u64,
}

impl Sending<'_> {
    /// Write message `m` whole: `false` when the stream must stop first (the engine
    /// stopped or aborted, or the connection failed: said in `out.error`). Each write is
    /// the header's rest (if any) and one window of the periodic buffer; the message to
    /// corrupt (a test's) goes out from the template's slices, with its byte flipped.
    fn write_message(&mut self, m: u64) -> bool {
        let size = self.pattern.message_size();
        let header = Pattern::header(m);
        let corrupt_at = (self.cfg.corrupt == Some(m)).then_some(size / 2);
        let periodic = self.periodic.filter(|_| corrupt_at.is_none());
        let total = HEADER_LEN as u64 + size;
        let mut pos = 0u64;
        while pos < total {
            if self.shared.stop.load(Ordering::Relaxed) {
                return false;
            }
            let payload_pos = pos.saturating_sub(HEADER_LEN as u64);
            // The first write counts from its call: a blocking write returns only once the
            // send buffer took it all, which on a new connection takes round trips. Nothing
            // blocked since the last turn's time.
            let called = self.now;
            let mut iov: [IoSlice<'_>; MAX_PIECES + 1] = [IoSlice::new(&[]); MAX_PIECES + 1];
            let mut niov = 0;
            if pos < HEADER_LEN as u64 {
                iov[0] = IoSlice::new(&header[pos as usize..]);
                niov = 1;
            }
            let (pieces, npieces) = match periodic {
                Some(_) => Default::default(),
                None => payload_pieces(self.pattern, m, payload_pos, corrupt_at),
            };
            if let Some(b) = periodic {
                iov[niov] = IoSlice::new(b.window(self.pattern, m, payload_pos));
                niov += 1;
            }
            for p in &pieces[..npieces] {
                iov[niov] = IoSlice::new(p);
                niov += 1;
            }
            let mut w = self.stream;
            let written = w.write_vectored(&iov[..niov]);
            // The turn's time: read once, when the write returned.
            self.now = Instant::now();
            match written {
                Ok(0) => {
                    self.out.error = Some("the connection accepted no more data".into());
                    return false;
                }
                Ok(n) => {
                    self.wrote(called, pos, n);
                    pos += n as u64;
                }
                Err(e) if is_timeout(&e) => {
                    if !self.still_progressing() {
                        return false;
                    }
                }
                Err(e) => {
                    if !self.shared.abort.load(Ordering::Relaxed) {
                        self.out.error = Some(format!("write: {e}"));
                    }
                    return false;
                }
            }
        }
        true
    }

    /// A write called at `called` took `n` bytes of a message from `pos`: count its payload
    /// (it returned at the turn's time).
    fn wrote(&mut self, called: Instant, pos: u64, n: usize) {
        let now = self.now;
        self.out.first.get_or_insert(called);
        self.out.last = Some(now);
        self.last_progress = now;
        let payload = (pos + n as u64).saturating_sub(HEADER_LEN as u64)
            - pos.saturating_sub(HEADER_LEN as u64);
        self.out.bytes += payload;
        self.counters.bytes.store(self.out.bytes, Ordering::Relaxed);
        self.counters
            .last_io_ns
            .store(nanos_since(now, self.cfg.epoch), Ordering::Relaxed);
    }

    /// A write timed out: whether to keep trying. Not after an abort, nor when neither a
    /// write nor TCP made progress for the idle timeout (the receiver stopped reading:
    /// said in `out.error`).
    fn still_progressing(&mut self) -> bool {
        if self.shared.abort.load(Ordering::Relaxed) {
            return false;
        }
        let tcp = self.counters.tcp_bytes.load(Ordering::Relaxed);
        if tcp != self.last_tcp {
            self.last_tcp = tcp;
            self.last_progress = self.now;
        }
        if self.now.saturating_duration_since(self.last_progress) > self.cfg.idle_timeout {
            self.out.error = Some(format!(
                "no progress for {:.0}s: the receiver stopped reading",
                self.cfg.idle_timeout.as_secs_f64()
            ));
            return false;
        }
        true
    }
}

/// The payload of one write of message `m` from `payload_pos`: up to [`IO_CHUNK`] bytes,
/// as slices of the pattern's template (its period is short, so it stays in the receiver's
/// L1 cache, and a write takes several slices of it), with the byte at `corrupt_at`
/// flipped. Returns the slices and how many there are.
fn payload_pieces(
    pattern: &Pattern,
    m: u64,
    payload_pos: u64,
    corrupt_at: Option<u64>,
) -> ([Cow<'_, [u8]>; MAX_PIECES], usize) {
    let mut pieces: [Cow<'_, [u8]>; MAX_PIECES] = Default::default();
    let mut npieces = 0;
    let mut at = payload_pos;
    let end = (payload_pos + IO_CHUNK as u64).min(pattern.message_size());
    while at < end && npieces < MAX_PIECES {
        let c = pattern.chunk(m, at, (end - at) as usize);
        if c.is_empty() {
            break;
        }
        pieces[npieces] = match corrupt_at {
            Some(x) if x >= at && x < at + c.len() as u64 => {
                let mut v = c.to_vec();
                v[(x - at) as usize] ^= 0x01;
                Cow::Owned(v)
            }
            _ => Cow::Borrowed(c),
        };
        at += c.len() as u64;
        npieces += 1;
    }
    (pieces, npieces)
}

/// After the write side is shut: read until the receiver closes its side, the engine
/// aborts or `idle_timeout` passes.
fn wait_for_close(stream: &TcpStream, shared: &Shared, idle_timeout: Duration) {
    let mut b = [0u8; 64];
    let mut r = stream;
    let waited = Instant::now();
    loop {
        match r.read(&mut b) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if is_timeout(&e) => {
                // A turn that timed out reads the clock once, after its read.
                let now = Instant::now();
                if shared.abort.load(Ordering::Relaxed)
                    || now.saturating_duration_since(waited) > idle_timeout
                {
                    break;
                }
            }
            Err(_) => break,
        }
    }
}

pub(super) fn recv_loop(
    stream: &TcpStream,
    shared: &Shared,
    pattern: &Pattern,
    counters: &Counters,
    cfg: &EngineConfig,
    index: u32,
) -> ThreadOut {
    let mut out = ThreadOut::default();
    let cpu0 = thread_cpu().unwrap_or_default();
    let mut checker = Checker::new(pattern, shared.seen.as_ref());
    let mut buf = vec![0u8; RECV_CHUNK];
    let mut r = stream;
    let mut last_progress = Instant::now();
    // (time, verified bytes) every >= 10 ms, for the tail rate; decimated when long.
    let mut marks: Decimated<u64> = Decimated::new(MARKS);
    let mut last_mark: Option<Instant> = None;
    let mut wake = ReadWake::on();
    loop {
        wake.before_read(stream.as_fd(), buf.len());
        let read = r.read(&mut buf);
        // The turn's time: read once, when the read returned.
        let now = Instant::now();
        match read {
            Ok(0) => break,
            Ok(n) => {
                out.first.get_or_insert(now);
                out.last = Some(now);
                last_progress = now;
                if last_mark.is_none_or(|t| now - t >= Duration::from_millis(10)) {
                    last_mark = Some(now);
                    let at = nanos_since(now, cfg.epoch);
                    marks.push(Time::from_nanos(at), checker.payload_bytes);
                    wake.feed(stream.as_fd(), now, at, checker.payload_bytes);
                }
                if let Err(c) = checker.feed(&buf[..n]) {
                    let msg = format!("stream {}: {c}", index + 1);
                    out.error = Some(msg.clone());
                    shared.post(Event::Integrity(msg));
                    let _ = stream.shutdown(Shutdown::Both);
                    break;
                }
                counters
                    .bytes
                    .store(checker.payload_bytes, Ordering::Relaxed);
                counters
                    .last_io_ns
                    .store(nanos_since(now, cfg.epoch), Ordering::Relaxed);
            }
            Err(e) if is_timeout(&e) => {
                if shared.abort.load(Ordering::Relaxed) {
                    break;
                }
                if now.saturating_duration_since(last_progress) > cfg.idle_timeout {
                    out.error = Some(format!(
                        "no data for {:.0}s: the sender stalled",
                        cfg.idle_timeout.as_secs_f64()
                    ));
                    break;
                }
            }
            Err(e) => {
                if !shared.abort.load(Ordering::Relaxed) {
                    out.error = Some(format!("read: {e}"));
                }
                break;
            }
        }
    }
    out.bytes = checker.payload_bytes;
    out.messages = checker.messages;
    out.tail_bps = out.last.and_then(|l| {
        tail_rate(
            &marks,
            Time::from_nanos(nanos_since(l, cfg.epoch)),
            out.bytes,
        )
    });
    if !checker.at_boundary() {
        out.partial_bytes = checker.partial_message_bytes();
    }
    let _ = stream.shutdown(Shutdown::Write);
    out.cpu = thread_cpu().unwrap_or_default().since(&cpu0);
    out
}

/// Throughput over the second half of the receive time, from the marks.
fn tail_rate(marks: &Decimated<u64>, last: Time, bytes: u64) -> Option<f64> {
    let &(first, _) = marks.points().first()?;
    let mid =
        Time::from_nanos(first.as_nanos() + last.saturating_since(first).as_nanos() as u64 / 2);
    let &(t, b) = marks.first_at_or_after(mid)?;
    let secs = last.saturating_since(t).as_secs_f64();
    (secs > 0.0).then(|| bytes.saturating_sub(b) as f64 * 8.0 / secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn wake_mark_follows_the_rate_and_the_buffer() {
        let mut w = WakeMark::default();
        // The first mark has no rate yet.
        assert_eq!(w.on_mark(0, 0, 32 << 20), None);
        // 10 MB in 10 ms (8 Gbit/s): 2 ms of it is 2 MB, capped at 256 KiB.
        assert_eq!(w.on_mark(10 * MS, 10_000_000, 32 << 20), Some(LOWAT_MAX));
        // The same rate again: no call.
        assert_eq!(w.on_mark(20 * MS, 20_000_000, 32 << 20), None);
        // A 1 MiB buffer holds at most a sixteenth unread: 64 KiB.
        assert_eq!(w.on_mark(30 * MS, 30_000_000, 1 << 20), Some(64 * 1024));
        // 1 Gbit/s: 2 ms is 250 kB, rounded down to 128 KiB.
        assert_eq!(
            w.on_mark(40 * MS, 30_000_000 + 1_250_000, 32 << 20),
            Some(128 * 1024)
        );
        // 10 Mbit/s: 2.5 kB in 2 ms, below the floor: back to the kernel's default (1).
        assert_eq!(w.on_mark(50 * MS, 31_262_500, 32 << 20), Some(1));
        assert_eq!(w.on_mark(60 * MS, 31_275_000, 32 << 20), None);
    }

    #[test]
    fn wake_mark_never_waits_for_more_than_a_record_owes() {
        let mut w = WakeMark::default();
        assert_eq!(w.for_need(1 << 20), 1);
        w.on_mark(0, 0, 32 << 20);
        w.on_mark(10 * MS, 10_000_000, 32 << 20);
        assert_eq!(w.for_need(1 << 20), LOWAT_MAX);
        assert_eq!(w.for_need(40), 40);
        assert_eq!(w.for_need(0), 1);
    }

    #[test]
    fn wake_mark_stays_off_for_small_buffers_and_stalls() {
        let mut w = WakeMark::default();
        assert_eq!(w.on_mark(0, 0, 128 * 1024), None);
        // Fast, but a 128 KiB buffer: a sixteenth is 8 KiB, below the floor.
        assert_eq!(w.on_mark(10 * MS, 50_000_000, 128 * 1024), None);
        // Two marks at one instant, and a stall: nothing to set.
        assert_eq!(w.on_mark(10 * MS, 50_000_000, 32 << 20), None);
        assert_eq!(w.on_mark(500 * MS, 50_000_000, 32 << 20), None);
    }

    #[test]
    fn tail_rate_is_measured_over_the_second_half() {
        let mut m = Decimated::new(8);
        // 1 MB per 100 ms for a second: 80 Mbit/s, with decimation along the way.
        for i in 0..=10u64 {
            m.push(Time::from_millis(100 * i), 1_000_000 * i);
        }
        let r = tail_rate(&m, Time::from_millis(1000), 10_000_000).expect("rate");
        assert!((r - 80e6).abs() < 1e6, "{r}");
        assert_eq!(tail_rate(&Decimated::new(8), Time::ZERO, 0), None);
    }

    #[test]
    fn the_periodic_buffer_holds_every_window_a_write_takes() {
        let size = 3 * SEND_WINDOW as u64 + 999;
        let p = Pattern::new(5, size);
        let b = PatternBuf::new(&p);
        for (m, pos) in [
            (0u64, 0u64),
            (7, 12_345),
            (3, SEND_WINDOW as u64),
            (1, size - 17),
        ] {
            let got = b.window(&p, m, pos);
            let len = got.len();
            assert_eq!(len as u64, (size - pos).min(SEND_WINDOW as u64));
            let mut expected = Vec::new();
            while expected.len() < len {
                let at = pos + expected.len() as u64;
                expected.extend_from_slice(p.chunk(m, at, len - expected.len()));
            }
            assert!(got == expected, "message {m} from {pos}");
        }
    }

    #[test]
    fn a_write_carries_up_to_a_chunk_of_the_pattern_with_the_corrupt_byte_flipped() {
        let size = 3 * IO_CHUNK as u64;
        let p = Pattern::new(7, size);
        let whole = |pieces: &[Cow<'_, [u8]>]| pieces.concat();
        let (pieces, n) = payload_pieces(&p, 3, 1000, None);
        let clean = whole(&pieces[..n]);
        assert_eq!(clean.len(), IO_CHUNK);
        let mut expected = Vec::new();
        while expected.len() < IO_CHUNK {
            let at = 1000 + expected.len() as u64;
            expected.extend_from_slice(p.chunk(3, at, IO_CHUNK - expected.len()));
        }
        assert_eq!(clean, expected);
        // The corrupt byte is flipped in place and nothing else changes.
        let (pieces, n) = payload_pieces(&p, 3, 1000, Some(1000 + 20_000));
        let bad = whole(&pieces[..n]);
        let diff: Vec<usize> = (0..bad.len()).filter(|&i| bad[i] != clean[i]).collect();
        assert_eq!(diff, vec![20_000]);
        assert_eq!(bad[20_000], clean[20_000] ^ 0x01);
        // The last write of a message stops at its end.
        let (pieces, n) = payload_pieces(&p, 3, size - 10, None);
        assert_eq!(whole(&pieces[..n]).len(), 10);
    }
}
