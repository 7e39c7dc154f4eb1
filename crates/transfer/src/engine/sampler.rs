//! The sampler thread: runs every stream's tuner on its schedule, cuts the intervals, and
//! summarizes each stream's end for the result.

use super::{secs_between, Counters, EngineConfig, Event, Shared, TotalPeaks};
use crate::report::{ChangeRecord, Interval, IntervalStream, IntervalSum, SideDetail};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tcptune_core::{Action, PathHint, Rate, Role, SampleRecord, Time};
use tcptune_sys::driver::TunerDriver;
use tcptune_sys::os::{thread_cpu, CpuTimes};

pub(super) enum SamplerCmd {
    Add {
        index: u32,
        stream: Arc<TcpStream>,
        driver: Box<TunerDriver>,
        counters: Arc<Counters>,
    },
    /// What is known of the path changed: every stream's tuner hears it.
    Hint {
        hint: PathHint,
        streams: u32,
    },
    /// The session's fair share: the open streams are paced together at most at this
    /// (`None`: no cap), split evenly.
    Pace(Option<Rate>),
    Finish,
}

pub(super) struct SamplerOut {
    pub(super) drivers: Vec<(u32, Box<TunerDriver>)>,
    pub(super) intervals: Vec<Interval>,
    pub(super) cpu: CpuTimes,
    pub(super) peaks: TotalPeaks,
}

/// One end of one stream for the report: the driver's statistics, and with `series` its
/// recorded samples and changes with times relative to `t0`.
pub(super) fn side_detail(d: &TunerDriver, t0: Time, series: bool) -> SideDetail {
    let rel = |t: Time| (t.as_nanos() as i128 - t0.as_nanos() as i128) as f64 / 1e9;
    let mut out = SideDetail {
        stats: d.stats().clone(),
        ..SideDetail::default()
    };
    if series {
        out.samples = d
            .samples()
            .points()
            .iter()
            .map(|(t, s)| SampleRecord {
                t_s: rel(*t),
                ..s.clone()
            })
            .collect();
        out.samples_dropped = d.samples().dropped();
    }
    // Without series only failed changes are kept (the driver keeps a few).
    out.changes = d
        .changes()
        .iter()
        .filter(|c| series || c.error.is_some() || c.note.is_some())
        .map(|c| ChangeRecord {
            t_s: rel(c.at),
            action: c.action.clone(),
            // A pacing cap reads back in bytes per second (u64::MAX: none).
            effective: match c.action {
                Action::SetMaxPacingRate(_) => None,
                _ => c.effective,
            },
            effective_bps: match c.action {
                Action::SetMaxPacingRate(_) => c
                    .effective
                    .filter(|&v| v != u64::MAX)
                    .map(|v| v.saturating_mul(8)),
                _ => None,
            },
            error: c.error.clone(),
            note: c.note.clone(),
        })
        .collect();
    out
}

struct SamplerEntry {
    index: u32,
    stream: Option<Arc<TcpStream>>,
    driver: Box<TunerDriver>,
    counters: Arc<Counters>,
    last_bytes: u64,
    last_retrans: u64,
}

/// The sampler thread: each turn samples every stream whose tuner is due, folds the
/// streams' buffers into the peaks, cuts an interval when one is due, and waits for the
/// next due time or a command. `Finish` (or the engine going away) ends it after one last
/// turn that closes every stream.
pub(super) fn sampler_main(
    rx: Receiver<SamplerCmd>,
    intervals_tx: Sender<Interval>,
    shared: &Shared,
    cfg: &EngineConfig,
    t0: &Mutex<Option<Instant>>,
) -> SamplerOut {
    let cpu0 = thread_cpu().unwrap_or_default();
    let to_time = |t: Instant| {
        Time::from_nanos(
            u64::try_from(t.saturating_duration_since(cfg.epoch).as_nanos()).unwrap_or(u64::MAX),
        )
    };
    let sender = cfg.role == Role::Sender;
    let mut entries: Vec<SamplerEntry> = Vec::new();
    let mut cutter = Cutter::new(cfg);
    let mut finishing = false;
    let mut peaks = TotalPeaks::default();
    let mut pacer = SharePacer::default();
    // What the last turn's wait brought, handled at the top of the next turn.
    let mut received: Option<Result<SamplerCmd, RecvTimeoutError>> = None;
    loop {
        // The turn's time: read once, after the wait, and used by everything below.
        let now = Instant::now();
        let t = to_time(now);
        match received.take() {
            Some(Ok(SamplerCmd::Add {
                index,
                stream,
                driver,
                counters,
            })) => entries.push(SamplerEntry {
                index,
                stream: Some(stream),
                driver,
                counters,
                last_bytes: 0,
                last_retrans: 0,
            }),
            Some(Ok(SamplerCmd::Hint { hint, streams })) => {
                for e in &mut entries {
                    if let Some(s) = &e.stream {
                        e.driver.hint(t, s.as_fd(), &hint, streams);
                    }
                }
            }
            Some(Ok(SamplerCmd::Pace(rate))) => pacer.wanted = Some(rate),
            Some(Ok(SamplerCmd::Finish) | Err(RecvTimeoutError::Disconnected)) => finishing = true,
            Some(Err(RecvTimeoutError::Timeout)) | None => {}
        }
        sample_due(&mut entries, t, sender, shared);
        pacer.apply(&mut entries, t);
        peaks.fold(&open_total(&entries));
        // Intervals, once the transfer started.
        let started = t0.lock().ok().and_then(|g| *g);
        if let Some(iv) = cutter.cut(&mut entries, now, started, finishing) {
            let _ = intervals_tx.send(iv.clone());
            cutter.intervals.push(iv);
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
        if let Some(due) = cutter.next {
            wait = wait.min(due.saturating_duration_since(now));
        }
        received = Some(rx.recv_timeout(wait.max(Duration::from_millis(1))));
    }
    SamplerOut {
        drivers: entries.into_iter().map(|e| (e.index, e.driver)).collect(),
        intervals: cutter.intervals,
        cpu: thread_cpu().unwrap_or_default().since(&cpu0),
        peaks,
    }
}

/// Sample every open stream whose tuner is due at `t` (closing the ones whose data thread
/// is done or whose socket fails), tell its data thread the TCP byte count, and post the
/// tuners' requests for more streams.
fn sample_due(entries: &mut [SamplerEntry], t: Time, sender: bool, shared: &Shared) {
    for e in entries {
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
            shared.post(Event::MoreStreams(req));
        }
    }
}

/// The session's fair share split over its open streams: re-split when the share or the
/// number of open streams changes.
#[derive(Default)]
struct SharePacer {
    /// The session's cap, once one was asked for (`Some(None)`: no cap).
    wanted: Option<Option<Rate>>,
    /// What was applied: the cap and over how many streams.
    applied: Option<(Option<Rate>, usize)>,
}

impl SharePacer {
    fn apply(&mut self, entries: &mut [SamplerEntry], t: Time) {
        let Some(cap) = self.wanted else { return };
        let open = entries.iter().filter(|e| e.stream.is_some()).count();
        if open == 0 || self.applied == Some((cap, open)) {
            return;
        }
        self.applied = Some((cap, open));
        let each = per_stream(cap, open);
        for e in entries.iter_mut() {
            if let Some(s) = &e.stream {
                e.driver.share_cap(t, s.as_fd(), each);
            }
        }
    }
}

/// One stream's part of a session's cap over `open` streams (at least 1 byte/s).
fn per_stream(cap: Option<Rate>, open: usize) -> Option<Rate> {
    cap.map(|c| Rate((c.0 / open.max(1) as u64).max(8)))
}

/// What all open streams hold together, each as last sampled (at most one sampling
/// interval old): the memory the host had to provide at once.
fn open_total(entries: &[SamplerEntry]) -> TotalPeaks {
    let open = entries.iter().filter(|e| e.stream.is_some());
    let mut total = TotalPeaks::default();
    for snap in open.filter_map(|e| e.driver.last_snapshot()) {
        let v = |x: Option<u32>| u64::from(x.unwrap_or(0));
        total.sndbuf_bytes += v(snap.sndbuf_bytes);
        total.rcvbuf_bytes += v(snap.rcvbuf_bytes);
        total.wmem_queued_bytes += v(snap.wmem_queued_bytes);
        total.rmem_alloc_bytes += v(snap.rmem_alloc_bytes);
    }
    total
}

/// Where the intervals are cut: every `every` from when the transfer started.
struct Cutter {
    /// `--interval`, if intervals are wanted.
    every: Option<Duration>,
    /// The engine's epoch, that the data threads' last-I/O times count from.
    epoch: Instant,
    sender: bool,
    /// When the next one is due.
    next: Option<Instant>,
    /// Where the running one started.
    start: Option<Instant>,
    /// The intervals cut so far.
    intervals: Vec<Interval>,
}

impl Cutter {
    fn new(cfg: &EngineConfig) -> Cutter {
        Cutter {
            every: cfg.interval,
            epoch: cfg.epoch,
            sender: cfg.role == Role::Sender,
            next: None,
            start: None,
            intervals: Vec::new(),
        }
    }

    /// The interval that ends now, if one does, once the transfer started at `t0`; when
    /// `finishing`, the last one, which ends with the last byte, not when the phase is
    /// wrapped up.
    fn cut(
        &mut self,
        entries: &mut [SamplerEntry],
        now: Instant,
        t0: Option<Instant>,
        finishing: bool,
    ) -> Option<Interval> {
        let (every, t0) = (self.every?, t0?);
        let start = *self.start.get_or_insert(t0);
        let due = *self.next.get_or_insert(t0 + every);
        let last_io = entries
            .iter()
            .map(|e| e.counters.last_io_ns.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        let last_io = self.epoch + Duration::from_nanos(last_io);
        if now >= due || (finishing && last_io > start + Duration::from_millis(1)) {
            let end = if finishing { last_io.min(due) } else { due };
            let iv = make_interval(entries, start, end, t0, self.sender);
            self.start = Some(end);
            self.next = Some(end + every);
            Some(iv)
        } else {
            None
        }
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

#[cfg(test)]
mod tests {
    use super::per_stream;
    use tcptune_core::Rate;

    #[test]
    fn a_share_is_split_evenly_over_the_open_streams() {
        assert_eq!(per_stream(None, 4), None);
        assert_eq!(per_stream(Some(Rate::mbit(400)), 4), Some(Rate::mbit(100)));
        assert_eq!(per_stream(Some(Rate::mbit(400)), 0), Some(Rate::mbit(400)));
        assert_eq!(per_stream(Some(Rate(3)), 2), Some(Rate(8)));
    }
}
