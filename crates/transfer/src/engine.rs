//! One end of one phase of a transfer: the data threads (one per stream), the sampler thread
//! that runs every stream's tuner, and the bookkeeping both ends report.
//!
//! # Calling order
//!
//! 1. [`Engine::new`].
//! 2. For each stream: build a [`TunerDriver`], call its `before_connect` on the unconnected
//!    socket (or the listener), connect/accept, then [`Engine::add_stream`] (which calls
//!    `established`, starts the stream's data thread and hands the driver to the sampler).
//! 3. [`Engine::go`] when the initial streams are connected: senders start writing
//!    (receivers read from the start). Streams added later start at once.
//! 4. Poll [`Engine::poll_event`] (stream done, integrity failure, more streams wanted) and
//!    call [`Engine::stop`] to end a duration workload or hit the cap, [`Engine::abort`] to
//!    tear everything down.
//! 5. [`Engine::finish`] once [`Engine::all_done`] (or after `abort`): joins the threads and
//!    returns this end's [`SideResult`].

use crate::pattern::{Checker, Pattern, Seen, HEADER_LEN};
use crate::report::{
    ChangeRecord, Interval, IntervalStream, IntervalSum, SampleRecord, SideDetail,
};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tcptune_core::{Role, Time};
use tcptune_sys::driver::{StreamRequest, TunerDriver};
use tcptune_sys::os::{thread_cpu, CpuTimes};

/// Read and write size of the data loops (iperf3's default block).
const IO_CHUNK: usize = 128 * 1024;
/// Template slices per write (IO_CHUNK / TEMPLATE_LEN, plus one for a partial start).
const MAX_PIECES: usize = IO_CHUNK / crate::pattern::TEMPLATE_LEN + 1;
/// How often blocked data threads wake to look at the abort flag.
const WAKE: Duration = Duration::from_millis(500);

/// What one end saw of one stream, sent by the server to the client at the end of a phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamSide {
    /// Stream number (1-based).
    pub stream: u32,
    /// Whether this end sent on it.
    pub sender: bool,
    /// Payload bytes written (sender) or received and verified (receiver).
    pub bytes: u64,
    /// Complete messages written or verified.
    pub messages: u64,
    /// Receiver: bytes of a message cut short at the end (duration workload or cap).
    pub partial_bytes: u64,
    /// Seconds after this end's start (`Go`) of the first write / first byte's arrival.
    pub first_s: Option<f64>,
    /// Seconds after this end's start of the last write / last byte's arrival.
    pub last_s: Option<f64>,
    /// Seconds after this end's start at which the stream was added (negative: before `Go`).
    pub opened_at_s: f64,
    /// Receiver: throughput over the second half of this stream's receive time (bit/s),
    /// past slow start; the bandwidth probe's measurement.
    pub tail_bits_per_second: Option<f64>,
    /// Local address.
    pub local: String,
    /// Peer address.
    pub remote: String,
    /// Tuner summaries (and series with `--samples`).
    pub detail: SideDetail,
    /// What went wrong on this stream, if anything.
    pub error: Option<String>,
}

/// One end's result of a phase.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SideResult {
    /// Per stream, ordered by stream number.
    pub streams: Vec<StreamSide>,
    /// CPU of the phase's threads, user seconds.
    pub cpu_user_s: f64,
    /// CPU of the phase's threads, system seconds.
    pub cpu_system_s: f64,
    /// Seconds from `Go` to the end of the last stream.
    pub wall_s: f64,
    /// The data did not check out (receiver).
    pub integrity_error: Option<String>,
    /// Congestion control of the data sockets.
    pub congestion: String,
}

/// Something the controller must look at.
#[derive(Debug)]
pub(crate) enum Event {
    /// A stream's data thread finished.
    StreamDone,
    /// Received data did not verify.
    Integrity(String),
    /// A tuner asks for more streams.
    MoreStreams(StreamRequest),
}

/// Fixed settings of one end of a phase.
#[derive(Debug, Clone)]
pub(crate) struct EngineConfig {
    pub(crate) role: Role,
    pub(crate) pattern: Arc<Pattern>,
    /// `None`: unbounded (duration workload).
    pub(crate) messages: Option<u64>,
    pub(crate) corrupt: Option<u64>,
    pub(crate) record_series: bool,
    pub(crate) interval: Option<Duration>,
    pub(crate) epoch: Instant,
    pub(crate) idle_timeout: Duration,
}

struct Counters {
    bytes: AtomicU64,
    /// Nanoseconds since the epoch of the last byte written or read (0: none yet).
    last_io_ns: AtomicU64,
    /// TCP-level progress from the last sample (`tcpi_bytes_acked` at a sender,
    /// `tcpi_bytes_received` at a receiver): moves even while the application is blocked.
    tcp_bytes: AtomicU64,
    done: AtomicBool,
}

struct Shared {
    next: AtomicU64,
    stop: AtomicBool,
    abort: AtomicBool,
    go: Mutex<Option<Instant>>,
    go_cv: Condvar,
    seen: Option<Seen>,
}

struct ThreadOut {
    tail_bps: Option<f64>,
    bytes: u64,
    messages: u64,
    partial_bytes: u64,
    first: Option<Instant>,
    last: Option<Instant>,
    error: Option<String>,
    cpu: CpuTimes,
}

struct Slot {
    index: u32,
    stream: Arc<TcpStream>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<ThreadOut>>,
    opened: Instant,
    local: String,
    remote: String,
}

enum SamplerCmd {
    Add {
        index: u32,
        stream: Arc<TcpStream>,
        driver: Box<TunerDriver>,
        counters: Arc<Counters>,
    },
    Finish,
}

struct SamplerOut {
    drivers: Vec<(u32, Box<TunerDriver>)>,
    intervals: Vec<Interval>,
    cpu: CpuTimes,
}

/// One end of one phase. See the module documentation for the calling order.
pub(crate) struct Engine {
    cfg: EngineConfig,
    shared: Arc<Shared>,
    slots: Vec<Slot>,
    sampler_tx: Sender<SamplerCmd>,
    sampler: Option<JoinHandle<SamplerOut>>,
    events_rx: Receiver<Event>,
    events_tx: Sender<Event>,
    intervals_rx: Receiver<Interval>,
    congestion: String,
}

fn nanos_since(t: Instant, epoch: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

fn secs_between(t: Instant, t0: Instant) -> f64 {
    if t >= t0 {
        (t - t0).as_secs_f64()
    } else {
        -(t0 - t).as_secs_f64()
    }
}

impl Engine {
    pub(crate) fn new(cfg: EngineConfig) -> Engine {
        let shared = Arc::new(Shared {
            next: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            go: Mutex::new(None),
            go_cv: Condvar::new(),
            seen: cfg
                .messages
                .filter(|_| cfg.role == Role::Receiver)
                .map(Seen::new),
        });
        let (sampler_tx, sampler_rx) = mpsc::channel();
        let (events_tx, events_rx) = mpsc::channel();
        let (intervals_tx, intervals_rx) = mpsc::channel();
        let sampler = {
            let shared = shared.clone();
            let events = events_tx.clone();
            let cfg = cfg.clone();
            std::thread::Builder::new()
                .name("tcptune-sampler".into())
                .spawn(move || sampler_main(sampler_rx, events, intervals_tx, shared, cfg))
                .ok()
        };
        Engine {
            cfg,
            shared,
            slots: Vec::new(),
            sampler_tx,
            sampler,
            events_rx,
            events_tx,
            intervals_rx,
            congestion: String::new(),
        }
    }

    /// Streams added so far.
    pub(crate) fn streams(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Whether `Go` happened.
    pub(crate) fn started(&self) -> Option<Instant> {
        self.shared.go.lock().ok().and_then(|g| *g)
    }

    /// Add a connected stream (`index` is 0-based) with its driver, after `before_connect`.
    pub(crate) fn add_stream(
        &mut self,
        index: u32,
        stream: TcpStream,
        mut driver: Box<TunerDriver>,
    ) -> Result<(), io::Error> {
        let now = Instant::now();
        driver.established(self.time(now), stream.as_fd());
        if self.congestion.is_empty() {
            self.congestion = tcptune_sys::sockopt::congestion(stream.as_fd()).unwrap_or_default();
        }
        stream.set_read_timeout(Some(WAKE))?;
        stream.set_write_timeout(Some(WAKE))?;
        let local = stream
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let remote = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let stream = Arc::new(stream);
        let counters = Arc::new(Counters {
            bytes: AtomicU64::new(0),
            last_io_ns: AtomicU64::new(0),
            tcp_bytes: AtomicU64::new(0),
            done: AtomicBool::new(false),
        });
        let thread = {
            let (stream, counters, shared) =
                (stream.clone(), counters.clone(), self.shared.clone());
            let (pattern, events, cfg) = (
                self.cfg.pattern.clone(),
                self.events_tx.clone(),
                self.cfg.clone(),
            );
            std::thread::Builder::new()
                .name(format!("tcptune-stream-{}", index + 1))
                .spawn(move || {
                    let out = match cfg.role {
                        Role::Sender => send_loop(&stream, &shared, &pattern, &counters, &cfg),
                        Role::Receiver => {
                            recv_loop(&stream, &shared, &pattern, &counters, &cfg, &events, index)
                        }
                    };
                    counters.done.store(true, Ordering::Release);
                    let _ = events.send(Event::StreamDone);
                    out
                })?
        };
        let _ = self.sampler_tx.send(SamplerCmd::Add {
            index,
            stream: stream.clone(),
            driver,
            counters: counters.clone(),
        });
        self.slots.push(Slot {
            index,
            stream,
            counters,
            thread: Some(thread),
            opened: now,
            local,
            remote,
        });
        Ok(())
    }

    fn time(&self, t: Instant) -> Time {
        Time::from_nanos(u64::try_from((t - self.cfg.epoch).as_nanos()).unwrap_or(u64::MAX))
    }

    /// Start the senders (receivers are already reading).
    pub(crate) fn go(&self) {
        if let Ok(mut g) = self.shared.go.lock() {
            if g.is_none() {
                *g = Some(Instant::now());
            }
        }
        self.shared.go_cv.notify_all();
    }

    /// Senders stop at their next write (end of a duration workload, or the cap).
    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.go();
    }

    /// Tear down: every data thread ends as soon as it can, and data still queued in the
    /// kernel is discarded when the sockets close (`SO_LINGER` 0: a reset instead of
    /// draining a full send buffer over a slow path). Used for errors and for the time cap.
    pub(crate) fn abort(&self) {
        self.shared.abort.store(true, Ordering::Release);
        self.stop();
        for s in &self.slots {
            let _ = tcptune_sys::sockopt::set_linger_zero(s.stream.as_fd());
            let _ = s.stream.shutdown(Shutdown::Both);
        }
    }

    /// The next event, if any.
    pub(crate) fn poll_event(&self) -> Option<Event> {
        self.events_rx.try_recv().ok()
    }

    /// The next completed interval, if any (they are also in [`Engine::finish`]'s result).
    pub(crate) fn poll_interval(&self) -> Option<Interval> {
        self.intervals_rx.try_recv().ok()
    }

    /// Wait up to `timeout` for the next event.
    pub(crate) fn wait_event(&self, timeout: Duration) -> Option<Event> {
        self.events_rx.recv_timeout(timeout).ok()
    }

    /// Whether every stream's data thread finished.
    pub(crate) fn all_done(&self) -> bool {
        self.slots
            .iter()
            .all(|s| s.counters.done.load(Ordering::Acquire))
    }

    /// Payload bytes moved so far over all streams.
    pub(crate) fn bytes(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.counters.bytes.load(Ordering::Relaxed))
            .sum()
    }

    /// Bytes delivered to the other end so far over all streams, read now: acknowledged
    /// bytes, cumulatively or selectively ([`tcptune_core::TcpSnapshot::delivered_bytes`]), at a sender;
    /// bytes read at a receiver. The bandwidth
    /// probe's full-pipe detection and the transfer's own rate estimate are fed from it.
    pub(crate) fn delivered(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| match self.cfg.role {
                Role::Sender => tcptune_sys::sockopt::tcp_info(s.stream.as_fd())
                    .ok()
                    .and_then(|t| t.delivered_bytes())
                    .unwrap_or_else(|| s.counters.tcp_bytes.load(Ordering::Relaxed)),
                Role::Receiver => s.counters.bytes.load(Ordering::Relaxed),
            })
            .sum()
    }

    /// A number that grows while any data moves, at the application or in TCP (for idle
    /// detection: a sender blocked on a full buffer still makes TCP progress).
    pub(crate) fn progress(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| {
                s.counters.bytes.load(Ordering::Relaxed)
                    + s.counters.tcp_bytes.load(Ordering::Relaxed)
            })
            .sum()
    }

    /// Join everything and summarize this end. Returns the intervals recorded too.
    pub(crate) fn finish(mut self) -> (SideResult, Vec<Interval>) {
        let t0 = self.started().unwrap_or(self.cfg.epoch);
        let mut outs = Vec::new();
        for s in &mut self.slots {
            let out = s.thread.take().and_then(|t| t.join().ok());
            outs.push(out);
        }
        let _ = self.sampler_tx.send(SamplerCmd::Finish);
        let sampler = self.sampler.take().and_then(|t| t.join().ok());
        let (mut drivers, intervals, mut cpu) = match sampler {
            Some(s) => (s.drivers, s.intervals, s.cpu),
            None => (Vec::new(), Vec::new(), CpuTimes::default()),
        };
        let t0_time = self.time(t0);
        let mut result = SideResult {
            congestion: self.congestion.clone(),
            ..SideResult::default()
        };
        let mut end = t0;
        for (slot, out) in self.slots.iter().zip(outs) {
            let out = out.unwrap_or(ThreadOut {
                tail_bps: None,
                bytes: slot.counters.bytes.load(Ordering::Relaxed),
                messages: 0,
                partial_bytes: 0,
                first: None,
                last: None,
                error: Some("the stream's thread panicked".into()),
                cpu: CpuTimes::default(),
            });
            cpu = cpu + out.cpu;
            if let Some(l) = out.last {
                end = end.max(l);
            }
            let detail = drivers
                .iter_mut()
                .find(|(i, _)| *i == slot.index)
                .map(|(_, d)| side_detail(d, t0_time, self.cfg.record_series))
                .unwrap_or_default();
            result.streams.push(StreamSide {
                stream: slot.index + 1,
                sender: self.cfg.role == Role::Sender,
                bytes: out.bytes,
                messages: out.messages,
                partial_bytes: out.partial_bytes,
                first_s: out.first.map(|t| secs_between(t, t0)),
                last_s: out.last.map(|t| secs_between(t, t0)),
                opened_at_s: secs_between(slot.opened, t0),
                tail_bits_per_second: out.tail_bps,
                local: slot.local.clone(),
                remote: slot.remote.clone(),
                detail,
                error: out.error,
            });
        }
        while let Ok(ev) = self.events_rx.try_recv() {
            if let Event::Integrity(msg) = ev {
                result.integrity_error.get_or_insert(msg);
            }
        }
        result.cpu_user_s = cpu.user.as_secs_f64();
        result.cpu_system_s = cpu.system.as_secs_f64();
        result.wall_s = secs_between(end, t0).max(0.0);
        (result, intervals)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if self.sampler.is_some() {
            // Dropped without finish(): make every thread end.
            self.abort();
            let _ = self.sampler_tx.send(SamplerCmd::Finish);
        }
    }
}

fn side_detail(d: &TunerDriver, t0: Time, series: bool) -> SideDetail {
    let s = d.stats();
    let rel = |t: Time| (t.as_nanos() as i128 - t0.as_nanos() as i128) as f64 / 1e9;
    let mut out = SideDetail {
        rtt_min_us: s.rtt_min_us,
        rtt_avg_us: s.rtt_avg_us(),
        rtt_max_us: s.rtt_max_us,
        cwnd_max_segs: s.cwnd_max_segs,
        cwnd_max_bytes: s.cwnd_max_bytes,
        snd_wnd_max_bytes: s.snd_wnd_max_bytes,
        retransmits: s.retransmits,
        peak_sndbuf_bytes: s.peak_sndbuf_bytes,
        peak_rcvbuf_bytes: s.peak_rcvbuf_bytes,
        peak_wmem_queued_bytes: s.peak_wmem_queued_bytes,
        peak_rmem_alloc_bytes: s.peak_rmem_alloc_bytes,
        rwnd_limited_us: s.rwnd_limited_us,
        sndbuf_limited_us: s.sndbuf_limited_us,
        busy_time_us: s.busy_time_us,
        samples_taken: s.samples,
        changes_made: d.changes_made(),
        samples: Vec::new(),
        changes: Vec::new(),
    };
    if series {
        out.samples = d
            .samples()
            .iter()
            .map(|(t, s)| SampleRecord {
                t_s: rel(*t),
                rtt_us: s.rtt_us,
                snd_cwnd_segs: s.snd_cwnd_segs,
                delivery_rate_bytes_per_sec: s.delivery_rate_bytes_per_sec,
                bytes_acked: s.bytes_acked,
                bytes_received: s.bytes_received,
                sndbuf_bytes: s.sndbuf_bytes,
                rcvbuf_bytes: s.rcvbuf_bytes,
                wmem_queued_bytes: s.wmem_queued_bytes,
                rmem_alloc_bytes: s.rmem_alloc_bytes,
                rcv_rtt_us: s.rcv_rtt_us,
                rcv_space_bytes: s.rcv_space_bytes,
                notsent_bytes: s.notsent_bytes,
                rwnd_limited_us: s.rwnd_limited_us,
                sndbuf_limited_us: s.sndbuf_limited_us,
            })
            .collect();
    }
    // Changes are few; keep them always when recording series, else only count them.
    if series {
        out.changes = d
            .changes()
            .iter()
            .map(|c| ChangeRecord {
                t_s: rel(c.at),
                action: c.action.clone(),
                effective: c.effective,
                error: c.error.clone(),
            })
            .collect();
    }
    out
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

fn send_loop(
    stream: &TcpStream,
    shared: &Shared,
    pattern: &Pattern,
    counters: &Counters,
    cfg: &EngineConfig,
) -> ThreadOut {
    let mut out = ThreadOut {
        tail_bps: None,
        bytes: 0,
        messages: 0,
        partial_bytes: 0,
        first: None,
        last: None,
        error: None,
        cpu: CpuTimes::default(),
    };
    // Wait for Go.
    {
        let Ok(mut g) = shared.go.lock() else {
            out.error = Some("internal lock poisoned".into());
            return out;
        };
        while g.is_none() && !shared.abort.load(Ordering::Acquire) {
            match shared.go_cv.wait_timeout(g, WAKE) {
                Ok((ng, _)) => g = ng,
                Err(_) => {
                    out.error = Some("internal lock poisoned".into());
                    return out;
                }
            }
        }
    }
    let cpu0 = thread_cpu().unwrap_or_default();
    let size = pattern.message_size();
    let mut w = stream;
    let mut last_progress = Instant::now();
    let mut last_tcp = 0u64;
    'messages: loop {
        if shared.stop.load(Ordering::Relaxed) {
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
            let r = w.write_vectored(&iov[..niov]);
            match r {
                Ok(0) => {
                    out.error = Some("the connection accepted no more data".into());
                    break 'messages;
                }
                Ok(n) => {
                    let now = Instant::now();
                    out.first.get_or_insert(now);
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
    // TCP_INFO sample is final.
    if out.error.is_none() {
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

fn recv_loop(
    stream: &TcpStream,
    shared: &Shared,
    pattern: &Pattern,
    counters: &Counters,
    cfg: &EngineConfig,
    events: &Sender<Event>,
    index: u32,
) -> ThreadOut {
    let mut out = ThreadOut {
        tail_bps: None,
        bytes: 0,
        messages: 0,
        partial_bytes: 0,
        first: None,
        last: None,
        error: None,
        cpu: CpuTimes::default(),
    };
    let cpu0 = thread_cpu().unwrap_or_default();
    let mut checker = Checker::new(pattern, shared.seen.as_ref());
    let mut buf = vec![0u8; IO_CHUNK];
    let mut r = stream;
    let mut last_progress = Instant::now();
    // (time, verified bytes) every >= 10 ms, for the tail rate.
    let mut marks: Vec<(Instant, u64)> = Vec::new();
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let now = Instant::now();
                out.first.get_or_insert(now);
                out.last = Some(now);
                last_progress = now;
                if marks
                    .last()
                    .is_none_or(|(t, _)| now - *t >= Duration::from_millis(10))
                {
                    marks.push((now, checker.payload_bytes));
                }
                if let Err(c) = checker.feed(&buf[..n]) {
                    let msg = format!("stream {}: {c}", index + 1);
                    out.error = Some(msg.clone());
                    let _ = events.send(Event::Integrity(msg));
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
    out.tail_bps = tail_rate(&marks, out.last, out.bytes);
    if !checker.at_boundary() {
        out.partial_bytes = checker.partial_message_bytes();
    }
    let _ = stream.shutdown(Shutdown::Write);
    out.cpu = thread_cpu().unwrap_or_default().since(&cpu0);
    out
}

/// Throughput over the second half of the receive time, from the marks.
fn tail_rate(marks: &[(Instant, u64)], last: Option<Instant>, bytes: u64) -> Option<f64> {
    let (first, _) = *marks.first()?;
    let last = last?;
    let mid = first + (last - first) / 2;
    let &(t, b) = marks.iter().find(|(t, _)| *t >= mid)?;
    let secs = (last - t).as_secs_f64();
    (secs > 0.0).then(|| (bytes - b) as f64 * 8.0 / secs)
}

struct SamplerEntry {
    index: u32,
    stream: Option<Arc<TcpStream>>,
    driver: Box<TunerDriver>,
    counters: Arc<Counters>,
    last_bytes: u64,
    last_retrans: u64,
}

fn sampler_main(
    rx: Receiver<SamplerCmd>,
    events: Sender<Event>,
    intervals_tx: Sender<Interval>,
    shared: Arc<Shared>,
    cfg: EngineConfig,
) -> SamplerOut {
    let cpu0 = thread_cpu().unwrap_or_default();
    let to_time = |t: Instant| {
        Time::from_nanos(
            u64::try_from(t.saturating_duration_since(cfg.epoch).as_nanos()).unwrap_or(u64::MAX),
        )
    };
    let sender = cfg.role == Role::Sender;
    let mut entries: Vec<SamplerEntry> = Vec::new();
    let mut intervals = Vec::new();
    let mut next_interval: Option<Instant> = None;
    let mut interval_start: Option<Instant> = None;
    let mut finishing = false;
    loop {
        let now = Instant::now();
        let t = to_time(now);
        for e in &mut entries {
            let Some(s) = &e.stream else { continue };
            if e.counters.done.load(Ordering::Acquire) {
                e.driver.close(t, Some(s.as_fd()));
                e.stream = None;
            } else if t >= e.driver.next_due() {
                if e.driver.sample(t, s.as_fd()).is_err() {
                    e.driver.close(t, None);
                    e.stream = None;
                } else if let Some(snap) = e.driver.last_snapshot() {
                    let v = if sender {
                        snap.bytes_acked
                    } else {
                        snap.bytes_received
                    };
                    e.counters
                        .tcp_bytes
                        .store(v.unwrap_or(0), Ordering::Relaxed);
                }
            }
            for req in e.driver.take_stream_requests() {
                let _ = events.send(Event::MoreStreams(req));
            }
        }
        // Intervals, once the transfer started.
        if let (Some(every), Some(t0)) = (cfg.interval, shared.go.lock().ok().and_then(|g| *g)) {
            let start = *interval_start.get_or_insert(t0);
            let due = *next_interval.get_or_insert(t0 + every);
            // The last interval ends with the last byte, not when the phase is wrapped up.
            let last_io = entries
                .iter()
                .map(|e| e.counters.last_io_ns.load(Ordering::Relaxed))
                .max()
                .unwrap_or(0);
            let last_io = cfg.epoch + Duration::from_nanos(last_io);
            if now >= due || (finishing && last_io > start + Duration::from_millis(1)) {
                let end = if finishing { last_io.min(due) } else { due };
                let iv = make_interval(&mut entries, start, end, t0, sender);
                let _ = intervals_tx.send(iv.clone());
                intervals.push(iv);
                interval_start = Some(end);
                next_interval = Some(end + every);
            }
        }
        if finishing {
            for e in &mut entries {
                if let Some(s) = e.stream.take() {
                    e.driver.close(t, Some(s.as_fd()));
                }
            }
            break;
        }
        let mut wait = Duration::from_millis(50);
        for e in entries.iter().filter(|e| e.stream.is_some()) {
            wait = wait.min(e.driver.next_due().saturating_since(t));
        }
        if let Some(due) = next_interval {
            wait = wait.min(due.saturating_duration_since(now));
        }
        match rx.recv_timeout(wait.max(Duration::from_millis(1))) {
            Ok(SamplerCmd::Add {
                index,
                stream,
                driver,
                counters,
            }) => entries.push(SamplerEntry {
                index,
                stream: Some(stream),
                driver,
                counters,
                last_bytes: 0,
                last_retrans: 0,
            }),
            Ok(SamplerCmd::Finish) | Err(RecvTimeoutError::Disconnected) => finishing = true,
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
    SamplerOut {
        drivers: entries.into_iter().map(|e| (e.index, e.driver)).collect(),
        intervals,
        cpu: thread_cpu().unwrap_or_default().since(&cpu0),
    }
}

fn make_interval(
    entries: &mut [SamplerEntry],
    start: Instant,
    end: Instant,
    t0: Instant,
    sender: bool,
) -> Interval {
    let (s, e) = (secs_between(start, t0), secs_between(end, t0));
    let secs = (e - s).max(1e-9);
    let mut streams = Vec::new();
    let (mut bytes_sum, mut retr_sum) = (0, 0);
    for en in entries.iter_mut() {
        let bytes = en.counters.bytes.load(Ordering::Relaxed);
        let delta = bytes.saturating_sub(en.last_bytes);
        en.last_bytes = bytes;
        let snap = en.driver.last_snapshot();
        let retr_total = snap.map_or(0, |s| u64::from(s.total_retrans_segs));
        let retr = if sender {
            retr_total.saturating_sub(en.last_retrans)
        } else {
            0
        };
        en.last_retrans = retr_total;
        bytes_sum += delta;
        retr_sum += retr;
        streams.push(IntervalStream {
            socket: en.index + 1,
            start: s,
            end: e,
            seconds: secs,
            bytes: delta,
            bits_per_second: delta as f64 * 8.0 / secs,
            retransmits: retr,
            snd_cwnd: if sender {
                snap.map_or(0, |s| s.cwnd_bytes())
            } else {
                0
            },
            rtt: snap.map_or(0, |s| u64::from(s.rtt_us)),
            rttvar: snap.map_or(0, |s| u64::from(s.rttvar_us)),
            pmtu: snap.map_or(0, |s| u64::from(s.pmtu_bytes)),
            omitted: false,
            sender,
        });
    }
    Interval {
        streams,
        sum: IntervalSum {
            start: s,
            end: e,
            seconds: secs,
            bytes: bytes_sum,
            bits_per_second: bytes_sum as f64 * 8.0 / secs,
            retransmits: retr_sum,
            omitted: false,
            sender,
        },
    }
}
