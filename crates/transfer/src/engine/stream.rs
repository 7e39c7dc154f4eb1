//! The data threads: one per stream, writing or reading and verifying messages.

use super::{nanos_since, Counters, EngineConfig, Event, Shared};
use crate::pattern::{Checker, Pattern, HEADER_LEN};
use std::borrow::Cow;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tcptune_core::{Decimated, Time};
use tcptune_sys::os::{thread_cpu, CpuTimes};

/// Read and write size of the data loops (iperf3's default block).
const IO_CHUNK: usize = 128 * 1024;
/// Template slices per write (IO_CHUNK / TEMPLATE_LEN, plus one for a partial start).
const MAX_PIECES: usize = IO_CHUNK / crate::pattern::TEMPLATE_LEN + 1;
/// Progress marks a receiver keeps for its tail rate (decimated: bounded for any length).
const MARKS: usize = 1024;

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

pub(super) fn send_loop(
    stream: &TcpStream,
    shared: &Shared,
    pattern: &Pattern,
    counters: &Counters,
    cfg: &EngineConfig,
    index: u32,
) -> ThreadOut {
    let mut out = ThreadOut::default();
    let cpu0 = thread_cpu().unwrap_or_default();
    let size = pattern.message_size();
    let mut w = stream;
    let mut last_progress = Instant::now();
    let mut last_tcp = 0u64;
    'messages: loop {
        if shared.stop.load(Ordering::Relaxed) || counters.retire.load(Ordering::Relaxed) {
            break;
        }
        let m = shared.next.fetch_add(1, Ordering::Relaxed);
        if cfg.messages.is_some_and(|total| m >= total) {
            break;
        }
        let header = Pattern::header(m);
        let corrupt_at = (cfg.corrupt == Some(m)).then_some(size / 2);
        let total = HEADER_LEN as u64 + size;
        let mut pos = 0u64;
        while pos < total {
            if shared.stop.load(Ordering::Relaxed) {
                break 'messages;
            }
            let payload_pos = pos.saturating_sub(HEADER_LEN as u64);
            // Up to IO_CHUNK bytes of payload in one writev: the template period is short
            // (it stays in the receiver's L1 cache), so a write takes several slices of it.
            let mut pieces: [Cow<'_, [u8]>; MAX_PIECES] = Default::default();
            let mut npieces = 0;
            let mut at = payload_pos;
            let end = (payload_pos + IO_CHUNK as u64).min(size);
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
            let mut iov: [IoSlice<'_>; MAX_PIECES + 1] = [IoSlice::new(&[]); MAX_PIECES + 1];
            let mut niov = 0;
            if pos < HEADER_LEN as u64 {
                iov[0] = IoSlice::new(&header[pos as usize..]);
                niov = 1;
            }
            for p in &pieces[..npieces] {
                iov[niov] = IoSlice::new(p);
                niov += 1;
            }
            // The first write counts from its call: a blocking write returns only once the
            // send buffer took it all, which on a new connection takes round trips.
            let called = Instant::now();
            let r = w.write_vectored(&iov[..niov]);
            match r {
                Ok(0) => {
                    out.error = Some("the connection accepted no more data".into());
                    break 'messages;
                }
                Ok(n) => {
                    let now = Instant::now();
                    out.first.get_or_insert(called);
                    out.last = Some(now);
                    last_progress = now;
                    let before = pos;
                    pos += n as u64;
                    let payload = pos.saturating_sub(HEADER_LEN as u64)
                        - before.saturating_sub(HEADER_LEN as u64);
                    out.bytes += payload;
                    counters.bytes.store(out.bytes, Ordering::Relaxed);
                    counters
                        .last_io_ns
                        .store(nanos_since(now, cfg.epoch), Ordering::Relaxed);
                }
                Err(e) if is_timeout(&e) => {
                    if shared.abort.load(Ordering::Relaxed) {
                        break 'messages;
                    }
                    let tcp = counters.tcp_bytes.load(Ordering::Relaxed);
                    if tcp != last_tcp {
                        last_tcp = tcp;
                        last_progress = Instant::now();
                    }
                    if last_progress.elapsed() > cfg.idle_timeout {
                        out.error = Some(format!(
                            "no progress for {:.0}s: the receiver stopped reading",
                            cfg.idle_timeout.as_secs_f64()
                        ));
                        break 'messages;
                    }
                }
                Err(e) => {
                    if !shared.abort.load(Ordering::Relaxed) {
                        out.error = Some(format!("write: {e}"));
                    }
                    break 'messages;
                }
            }
        }
        if pos == total {
            out.messages += 1;
        }
    }
    let _ = stream.shutdown(Shutdown::Write);
    // Wait for the receiver to close its side: then every byte was delivered and the last
    // TCP_INFO sample is final. The controller hears now that nothing more will be written
    // (a client then ends the phase a round trip sooner).
    if out.error.is_none() {
        shared.post(Event::StreamWritten(index));
        let mut b = [0u8; 64];
        let mut r = stream;
        let waited = Instant::now();
        loop {
            match r.read(&mut b) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if is_timeout(&e) => {
                    if shared.abort.load(Ordering::Relaxed) || waited.elapsed() > cfg.idle_timeout {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    }
    out.cpu = thread_cpu().unwrap_or_default().since(&cpu0);
    out
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
    let mut buf = vec![0u8; IO_CHUNK];
    let mut r = stream;
    let mut last_progress = Instant::now();
    // (time, verified bytes) every >= 10 ms, for the tail rate; decimated when long.
    let mut marks: Decimated<u64> = Decimated::new(MARKS);
    let mut last_mark: Option<Instant> = None;
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let now = Instant::now();
                out.first.get_or_insert(now);
                out.last = Some(now);
                last_progress = now;
                if last_mark.is_none_or(|t| now - t >= Duration::from_millis(10)) {
                    last_mark = Some(now);
                    marks.push(
                        Time::from_nanos(nanos_since(now, cfg.epoch)),
                        checker.payload_bytes,
                    );
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
                if last_progress.elapsed() > cfg.idle_timeout {
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
}
