//! One end of one phase of a transfer: the data threads (one blocking thread per stream: it
//! measures faster than an event loop for bulk data), the sampler thread that runs every
//! stream's tuner, and the bookkeeping both ends report. The control plane around it is
//! event-driven (see [`crate::server`] and [`crate::client`]); the engine tells it about
//! events through a channel and a wake-up callback, never by being polled in a loop.
//!
//! # Calling order
//!
//! 1. [`Engine::new`] with an [`EngineConfig`] (its `notify` is called after every event).
//! 2. For each stream: build a [`TunerDriver`], apply its `before_connect` options to the
//!    socket before `connect()` (client) or right after `accept()` (server: the listener is
//!    shared by every session), then [`Engine::add_stream`]: it calls `established`, starts
//!    the stream's data thread at once (a sender writes, a receiver reads) and hands the
//!    driver to the sampler. The first stream added starts the phase's clock.
//! 3. Take [`Engine::poll_event`] whenever `notify` fires (a stream ended, an integrity
//!    failure, a tuner wants more streams). [`Engine::stop`] ends a duration workload,
//!    [`Engine::retire_beyond`] lets streams finish their message and close, [`Engine::abort`]
//!    tears everything down at once.
//! 4. [`Engine::finish`] once every stream ended (or after `abort`): joins the threads and
//!    returns this end's [`SideResult`].

mod files;
mod sampler;
mod stream;

use crate::pattern::{Pattern, Seen};
use crate::report::Interval;
use sampler::{sampler_main, side_detail, SamplerCmd, SamplerOut};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use stream::{recv_loop, send_loop, PatternBuf, ThreadOut};
use tcptune_core::{Role, Time};
use tcptune_sys::driver::TunerDriver;
use tcptune_sys::os::CpuTimes;

/// How often blocked data threads wake to look at the stop and abort flags.
const WAKE: Duration = Duration::from_millis(500);
/// Stack of a data or sampler thread: they keep their buffers on the heap.
const THREAD_STACK: usize = 256 * 1024;

pub(crate) use tcptune_proto::result::TotalPeaks;
pub use tcptune_proto::result::{SideResult, StreamSide};
pub(crate) use tcptune_proto::session::Event;

/// Called after every event: wakes the controller's event loop.
pub(crate) type Notify = Arc<dyn Fn() + Send + Sync>;

/// Fixed settings of one end of a phase.
#[derive(Clone)]
pub(crate) struct EngineConfig {
    pub(crate) role: Role,
    pub(crate) pattern: Arc<Pattern>,
    /// `None`: unbounded (duration workload).
    pub(crate) messages: Option<u64>,
    pub(crate) corrupt: Option<u64>,
    pub(crate) record_series: bool,
    pub(crate) interval: Option<Duration>,
    /// The phase's time origin for the tuners (`Time::ZERO`).
    pub(crate) epoch: Instant,
    pub(crate) idle_timeout: Duration,
    pub(crate) notify: Option<Notify>,
    /// A copy's files instead of the pattern (see [`crate::files`]).
    pub(crate) files: Option<Arc<crate::files::work::FileWork>>,
}

struct Counters {
    bytes: AtomicU64,
    /// Nanoseconds since the epoch of the last byte written or read (0: none yet).
    last_io_ns: AtomicU64,
    /// TCP-level progress from the last sample (`tcpi_bytes_acked` at a sender,
    /// `tcpi_bytes_received` at a receiver): moves even while the application is blocked.
    tcp_bytes: AtomicU64,
    /// Finish the current message and close (a sender), see [`Engine::retire_beyond`].
    retire: AtomicBool,
    done: AtomicBool,
}

/// What [`Engine::path_view`] reads of a phase's streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PathView {
    /// Bytes delivered (acknowledged or selectively acknowledged at a sender, received in
    /// order at a receiver), over every stream.
    pub(crate) delivered: u64,
    /// The smallest `tcpi_min_rtt` of the streams.
    pub(crate) min_rtt: Option<Duration>,
    /// At a receiver, packets that arrived out of order so far over every stream
    /// (`tcpi_rcv_ooopack`); `None` at a sender or on a kernel without the counter.
    pub(crate) out_of_order: Option<u64>,
}

struct Shared {
    next: AtomicU64,
    stop: AtomicBool,
    abort: AtomicBool,
    seen: Option<Seen>,
    integrity: Mutex<Option<String>>,
    events: Sender<Event>,
    notify: Option<Notify>,
}

impl Shared {
    fn post(&self, ev: Event) {
        if let Event::Integrity(msg) = &ev {
            if let Ok(mut i) = self.integrity.lock() {
                i.get_or_insert_with(|| msg.clone());
            }
        }
        let _ = self.events.send(ev);
        if let Some(n) = &self.notify {
            n();
        }
    }
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

/// One end of one phase. See the module documentation for the calling order.
pub(crate) struct Engine {
    cfg: EngineConfig,
    shared: Arc<Shared>,
    slots: Vec<Slot>,
    sampler_tx: Sender<SamplerCmd>,
    sampler: Option<JoinHandle<SamplerOut>>,
    /// A sender's pattern as one periodic buffer its streams write from (`None`: a receiver,
    /// or a copy of files).
    periodic: Option<Arc<PatternBuf>>,
    events_rx: Receiver<Event>,
    intervals_rx: Receiver<Interval>,
    congestion: String,
    start: Option<Instant>,
    /// The time origin of intervals, shared with the sampler.
    t0: Arc<Mutex<Option<Instant>>>,
    /// Streams from this index on close after their message ([`Engine::retire_beyond`]),
    /// also those that join later.
    retire_from: u32,
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
        let (events_tx, events_rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            next: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            seen: cfg
                .messages
                .filter(|_| cfg.role == Role::Receiver)
                .map(Seen::new),
            integrity: Mutex::new(None),
            events: events_tx,
            notify: cfg.notify.clone(),
        });
        let (sampler_tx, sampler_rx) = mpsc::channel();
        let (intervals_tx, intervals_rx) = mpsc::channel();
        let t0 = Arc::new(Mutex::new(None));
        let sampler = {
            let (shared, cfg, t0) = (shared.clone(), cfg.clone(), t0.clone());
            std::thread::Builder::new()
                .name("tcptune-sampler".into())
                .stack_size(THREAD_STACK)
                .spawn(move || sampler_main(sampler_rx, intervals_tx, &shared, &cfg, &t0))
                .ok()
        };
        let periodic = (cfg.role == Role::Sender && cfg.files.is_none())
            .then(|| Arc::new(PatternBuf::new(&cfg.pattern)));
        Engine {
            cfg,
            shared,
            slots: Vec::new(),
            sampler_tx,
            sampler,
            periodic,
            events_rx,
            intervals_rx,
            congestion: String::new(),
            start: None,
            t0,
            retire_from: u32::MAX,
        }
    }

    /// Streams added so far.
    pub(crate) fn streams(&self) -> u32 {
        self.slots.len() as u32
    }

    /// When the first stream was added (this end's start of the phase).
    pub(crate) fn started(&self) -> Option<Instant> {
        self.start
    }

    /// The tuners' clock for an instant.
    pub(crate) fn time(&self, t: Instant) -> Time {
        Time::from_nanos(nanos_since(t, self.cfg.epoch))
    }

    /// Add a connected stream (`index` is 0-based) with its driver, after its
    /// `before_connect` options were applied, at `now` (the calling loop's turn). Its data
    /// thread starts at once.
    pub(crate) fn add_stream(
        &mut self,
        now: Instant,
        index: u32,
        stream: TcpStream,
        mut driver: Box<TunerDriver>,
    ) -> std::io::Result<()> {
        if self.start.is_none() {
            self.start = Some(now);
            if let Ok(mut t) = self.t0.lock() {
                *t = Some(now);
            }
        }
        driver.established(self.time(now), stream.as_fd());
        if self.congestion.is_empty() {
            self.congestion = tcptune_sys::sockopt::congestion(stream.as_fd()).unwrap_or_default();
        }
        stream.set_nonblocking(false)?;
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
            retire: AtomicBool::new(index >= self.retire_from),
            done: AtomicBool::new(false),
        });
        let thread = {
            let (stream, counters, shared) =
                (stream.clone(), counters.clone(), self.shared.clone());
            let (pattern, cfg) = (self.cfg.pattern.clone(), self.cfg.clone());
            let periodic = self.periodic.clone();
            std::thread::Builder::new()
                .name(format!("tcptune-stream-{}", index + 1))
                .stack_size(THREAD_STACK)
                .spawn(move || {
                    let out = match (&cfg.files, cfg.role) {
                        (Some(w), Role::Sender) => {
                            files::send_loop(&stream, &shared, &counters, &cfg, w, index)
                        }
                        (Some(w), Role::Receiver) => {
                            files::recv_loop(&stream, &shared, &counters, &cfg, w, index)
                        }
                        (None, Role::Sender) => send_loop(
                            &stream,
                            &shared,
                            &pattern,
                            periodic.as_deref(),
                            &counters,
                            &cfg,
                            index,
                        ),
                        (None, Role::Receiver) => {
                            recv_loop(&stream, &shared, &pattern, &counters, &cfg, index)
                        }
                    };
                    counters.done.store(true, Ordering::Release);
                    shared.post(Event::StreamDone(index));
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

    /// The transfer learned something about the path while it runs (the rate measured in
    /// band, or a corrected one): every stream's tuner hears it, for a transfer of
    /// `streams` streams. Streams added later are built with it by the caller.
    pub(crate) fn hint(&self, hint: &tcptune_core::PathHint, streams: u32) {
        let _ = self.sampler_tx.send(SamplerCmd::Hint {
            hint: hint.clone(),
            streams,
        });
    }

    /// The session's fair share of the path (see `tcptune_proto::session::fair`): this
    /// end's streams are paced together at most at `rate` (`None`: no cap), split evenly
    /// over the open streams and re-split as they open and close. Only a sender's pacing
    /// matters.
    pub(crate) fn pace(&self, rate: Option<tcptune_core::Rate>) {
        let _ = self.sampler_tx.send(SamplerCmd::Pace(rate));
    }

    /// Senders stop at their next write (end of a duration workload).
    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
    }

    /// Every stream from index `keep` on finishes the message (or a copy's block) it is
    /// sending and closes, and so does one that joins later with such an index (a sender
    /// only; the other streams take the remaining messages or blocks).
    pub(crate) fn retire_beyond(&mut self, keep: u32) {
        self.retire_from = self.retire_from.min(keep);
        for s in self.slots.iter().filter(|s| s.index >= keep) {
            s.counters.retire.store(true, Ordering::Release);
        }
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

    /// Payload bytes moved so far over all streams.
    pub(crate) fn bytes(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.counters.bytes.load(Ordering::Relaxed))
            .sum()
    }

    /// Bytes delivered to the other end so far over all streams, read now: acknowledged
    /// bytes, cumulatively or selectively ([`tcptune_core::TcpSnapshot::delivered_bytes`]),
    /// at a sender; bytes read at a receiver. The bandwidth probe's full-pipe detection and
    /// the transfer's own rate estimate are fed from it.
    pub(crate) fn delivered(&self) -> u64 {
        let raw = self.delivered_raw();
        match &self.cfg.files {
            // A copy's measurement starts with its blocks, not with the manifest.
            Some(w) if !w.started() => 0,
            Some(w) => {
                let base = match w.delivered_base.compare_exchange(
                    u64::MAX,
                    raw,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => raw,
                    Err(b) => b,
                };
                raw.saturating_sub(base)
            }
            None => raw,
        }
    }

    fn delivered_raw(&self) -> u64 {
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

    /// What the server's watch over its clients' paths reads of the streams, in one pass:
    /// bytes delivered as [`Engine::delivered`] has them, except that a receiver counts what
    /// its kernel received in order (`tcpi_bytes_received`, else what it read); the smallest
    /// `tcpi_min_rtt`; and at a receiver the packets that arrived out of order. The kernel's
    /// count goes on while this process is descheduled; what the streams read would come in
    /// a burst after it (a round well above the path's rate).
    pub(crate) fn path_view(&self) -> PathView {
        let mut view = PathView {
            delivered: 0,
            min_rtt: None,
            out_of_order: (self.cfg.role == Role::Receiver).then_some(0),
        };
        for s in &self.slots {
            let info = tcptune_sys::sockopt::tcp_info(s.stream.as_fd()).ok();
            if let Some(r) = info.as_ref().and_then(|t| t.min_rtt()) {
                view.min_rtt = Some(view.min_rtt.map_or(r, |m| m.min(r)));
            }
            // Unknown on one stream (an old kernel): unknown for the phase.
            let ooo = info.as_ref().and_then(|t| t.rcv_ooopack);
            view.out_of_order = view
                .out_of_order
                .zip(ooo)
                .map(|(sum, n)| sum + u64::from(n));
            view.delivered += match self.cfg.role {
                Role::Sender => info
                    .and_then(|t| t.delivered_bytes())
                    .unwrap_or_else(|| s.counters.tcp_bytes.load(Ordering::Relaxed)),
                Role::Receiver => info
                    .and_then(|t| t.bytes_received)
                    .unwrap_or_else(|| s.counters.bytes.load(Ordering::Relaxed)),
            };
        }
        view
    }

    /// A number that grows while any data moves, at the application or in TCP (for idle
    /// detection: a sender blocked on a full buffer still makes TCP progress).
    pub(crate) fn progress(&self) -> u64 {
        let local = self.cfg.files.as_ref().map_or(0, |w| w.activity());
        self.slots
            .iter()
            .map(|s| {
                s.counters.bytes.load(Ordering::Relaxed)
                    + s.counters.tcp_bytes.load(Ordering::Relaxed)
            })
            .sum::<u64>()
            .wrapping_add(local)
    }

    /// Join everything and summarize this end. Returns the intervals recorded too.
    pub(crate) fn finish(mut self) -> (SideResult, Vec<Interval>) {
        let t0 = self.start.unwrap_or(self.cfg.epoch);
        let mut outs = Vec::new();
        for s in &mut self.slots {
            let out = s.thread.take().and_then(|t| t.join().ok());
            outs.push(out);
        }
        let _ = self.sampler_tx.send(SamplerCmd::Finish);
        let sampler = self.sampler.take().and_then(|t| t.join().ok());
        let (mut drivers, intervals, mut cpu, peaks) = match sampler {
            Some(s) => (s.drivers, s.intervals, s.cpu, s.peaks),
            None => (
                Vec::new(),
                Vec::new(),
                CpuTimes::default(),
                TotalPeaks::default(),
            ),
        };
        let t0_time = self.time(t0);
        let mut result = SideResult {
            congestion: self.congestion.clone(),
            peaks,
            started: Some(t0),
            ..SideResult::default()
        };
        let mut end = t0;
        for (slot, out) in self.slots.iter().zip(outs) {
            let out = out.unwrap_or_else(|| ThreadOut {
                bytes: slot.counters.bytes.load(Ordering::Relaxed),
                error: Some("the stream's thread panicked".into()),
                ..ThreadOut::default()
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
        result.streams.sort_by_key(|s| s.stream);
        result.integrity_error = self.shared.integrity.lock().ok().and_then(|i| i.clone());
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
