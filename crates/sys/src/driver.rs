//! The driver that runs a [`Tuner`] against one real socket: it reads snapshots, feeds the
//! tuner, applies its actions with `setsockopt` (reading back the effective value), and
//! records every sample and change with a timestamp.
//!
//! # Calling order
//!
//! The driver follows the tuner's documented order (see [`Tuner`]):
//!
//! 1. [`TunerDriver::new`] with the tuner built for this stream.
//! 2. [`TunerDriver::before_connect`] on the unconnected socket (client) or on the data
//!    listener before `listen()` (server; accepted sockets inherit the options).
//! 3. [`TunerDriver::established`] once the connection is up.
//! 4. [`TunerDriver::sample`] whenever `now >= next_due()` (the driver schedules about one
//!    RTT, or the tuner's `poll_interval`, clamped to 10 ms..200 ms).
//! 5. [`TunerDriver::close`] once, when the stream's data is done (it takes a last sample).
//!
//! `OpenStreams` actions are not socket options: the driver collects them and the transfer
//! engine takes them with [`TunerDriver::take_stream_requests`].

use crate::sockopt::{self, SockoptError};
use std::os::fd::BorrowedFd;
use std::time::Duration;
use tcptune_core::{Action, ConnEvent, TcpSnapshot, Time, Tuner};

/// The shortest interval between two samples of one socket.
pub const MIN_SAMPLE_INTERVAL: Duration = Duration::from_millis(10);
/// The longest interval between two samples of one socket.
pub const MAX_SAMPLE_INTERVAL: Duration = Duration::from_millis(200);

/// One change a tuner asked for and what happened to it.
#[derive(Clone, Debug, PartialEq)]
pub struct AppliedChange {
    /// When it was applied.
    pub at: Time,
    /// What the tuner asked for.
    pub action: Action,
    /// The value the kernel holds afterwards (read back), when it applied.
    pub effective: Option<u64>,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// A tuner's request for more parallel streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRequest {
    /// Streams the tuner knew of when it asked (its context's `streams`).
    pub known_streams: u32,
    /// How many more it wants.
    pub count: u32,
    /// Its reason.
    pub reason: String,
}

/// Running summaries of a socket's samples.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SampleStats {
    /// Snapshots taken.
    pub samples: u64,
    /// Smallest smoothed RTT (µs), over samples with an RTT.
    pub rtt_min_us: Option<u32>,
    /// Largest smoothed RTT (µs).
    pub rtt_max_us: Option<u32>,
    /// Sum of smoothed RTTs, for the mean.
    pub rtt_sum_us: u64,
    /// Samples with an RTT.
    pub rtt_count: u64,
    /// Largest congestion window (segments).
    pub cwnd_max_segs: u32,
    /// Largest congestion window (bytes).
    pub cwnd_max_bytes: u64,
    /// Largest peer window (bytes).
    pub snd_wnd_max_bytes: u64,
    /// `tcpi_total_retrans` at the last sample.
    pub retransmits: u64,
    /// Peak `sk_sndbuf`.
    pub peak_sndbuf_bytes: u64,
    /// Peak `sk_rcvbuf`.
    pub peak_rcvbuf_bytes: u64,
    /// Peak `sk_wmem_queued`.
    pub peak_wmem_queued_bytes: u64,
    /// Peak `sk_rmem_alloc`.
    pub peak_rmem_alloc_bytes: u64,
    /// `tcpi_rwnd_limited` at the last sample.
    pub rwnd_limited_us: u64,
    /// `tcpi_sndbuf_limited` at the last sample.
    pub sndbuf_limited_us: u64,
    /// `tcpi_busy_time` at the last sample.
    pub busy_time_us: u64,
}

impl SampleStats {
    /// Fold one snapshot in.
    pub fn add(&mut self, s: &TcpSnapshot) {
        self.samples += 1;
        if s.rtt_us > 0 {
            self.rtt_min_us = Some(self.rtt_min_us.map_or(s.rtt_us, |m| m.min(s.rtt_us)));
            self.rtt_max_us = Some(self.rtt_max_us.map_or(s.rtt_us, |m| m.max(s.rtt_us)));
            self.rtt_sum_us += u64::from(s.rtt_us);
            self.rtt_count += 1;
        }
        self.cwnd_max_segs = self.cwnd_max_segs.max(s.snd_cwnd_segs);
        self.cwnd_max_bytes = self.cwnd_max_bytes.max(s.cwnd_bytes());
        self.snd_wnd_max_bytes = self
            .snd_wnd_max_bytes
            .max(u64::from(s.snd_wnd_bytes.unwrap_or(0)));
        self.retransmits = self.retransmits.max(u64::from(s.total_retrans_segs));
        let peak = |p: &mut u64, v: Option<u32>| *p = (*p).max(u64::from(v.unwrap_or(0)));
        peak(&mut self.peak_sndbuf_bytes, s.sndbuf_bytes);
        peak(&mut self.peak_rcvbuf_bytes, s.rcvbuf_bytes);
        peak(&mut self.peak_wmem_queued_bytes, s.wmem_queued_bytes);
        peak(&mut self.peak_rmem_alloc_bytes, s.rmem_alloc_bytes);
        self.rwnd_limited_us = self.rwnd_limited_us.max(s.rwnd_limited_us.unwrap_or(0));
        self.sndbuf_limited_us = self.sndbuf_limited_us.max(s.sndbuf_limited_us.unwrap_or(0));
        self.busy_time_us = self.busy_time_us.max(s.busy_time_us.unwrap_or(0));
    }

    /// Mean smoothed RTT (µs).
    pub fn rtt_avg_us(&self) -> Option<u32> {
        (self.rtt_count > 0)
            .then(|| u32::try_from(self.rtt_sum_us / self.rtt_count).unwrap_or(u32::MAX))
    }
}

/// Drives one tuner on one socket. See the module documentation for the calling order.
pub struct TunerDriver {
    tuner: Box<dyn Tuner>,
    stream: u32,
    known_streams: u32,
    force: bool,
    record_series: bool,
    stats: SampleStats,
    samples: Vec<(Time, TcpSnapshot)>,
    changes: Vec<AppliedChange>,
    changes_made: u64,
    requests: Vec<StreamRequest>,
    last: Option<TcpSnapshot>,
    next_due: Time,
    closed: bool,
}

impl std::fmt::Debug for TunerDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunerDriver")
            .field("tuner", &self.tuner.name())
            .field("stream", &self.stream)
            .field("samples", &self.stats.samples)
            .finish()
    }
}

impl TunerDriver {
    /// A driver for stream number `stream` (1-based, used in error messages) of a transfer
    /// that had `known_streams` streams when the tuner was built. `force` selects
    /// `SO_*BUFFORCE`; `record_series` keeps every sample (not just the summaries).
    pub fn new(
        tuner: Box<dyn Tuner>,
        stream: u32,
        known_streams: u32,
        force: bool,
        record_series: bool,
    ) -> TunerDriver {
        TunerDriver {
            tuner,
            stream,
            known_streams,
            force,
            record_series,
            stats: SampleStats::default(),
            samples: Vec::new(),
            changes: Vec::new(),
            changes_made: 0,
            requests: Vec::new(),
            last: None,
            next_due: Time::ZERO,
            closed: false,
        }
    }

    /// The tuner's name.
    pub fn tuner_name(&self) -> &'static str {
        self.tuner.name()
    }

    /// Step 2: the socket is not connected yet (or is a listener before `listen()`).
    pub fn before_connect(&mut self, now: Time, fd: BorrowedFd<'_>) {
        self.tuner.handle_event(now, ConnEvent::BeforeConnect);
        self.drain(now, fd);
    }

    /// Step 3: the handshake completed.
    pub fn established(&mut self, now: Time, fd: BorrowedFd<'_>) {
        self.tuner.handle_event(now, ConnEvent::Established);
        self.drain(now, fd);
        self.next_due = now;
    }

    /// The application set a buffer itself.
    pub fn user_set_buffer(&mut self, now: Time, fd: BorrowedFd<'_>) {
        self.tuner.handle_event(now, ConnEvent::UserSetBuffer);
        self.drain(now, fd);
    }

    /// When the next sample is due.
    pub fn next_due(&self) -> Time {
        self.next_due
    }

    /// Step 4: take a snapshot, feed the tuner, apply its actions, schedule the next sample.
    pub fn sample(&mut self, now: Time, fd: BorrowedFd<'_>) -> Result<(), SockoptError> {
        if self.closed {
            return Ok(());
        }
        let snap = sockopt::snapshot(fd)?;
        self.stats.add(&snap);
        self.tuner.handle_snapshot(now, &snap);
        self.drain(now, fd);
        let rtt = snap.rtt().unwrap_or(Duration::from_millis(100));
        let interval = self
            .tuner
            .poll_interval()
            .unwrap_or(rtt)
            .clamp(MIN_SAMPLE_INTERVAL, MAX_SAMPLE_INTERVAL);
        self.next_due = now + interval;
        if self.record_series {
            self.samples.push((now, snap.clone()));
        }
        self.last = Some(snap);
        Ok(())
    }

    /// Step 5: a last sample (when the socket is still open) and `Closed`.
    pub fn close(&mut self, now: Time, fd: Option<BorrowedFd<'_>>) {
        if self.closed {
            return;
        }
        if let Some(fd) = fd {
            if let Ok(snap) = sockopt::snapshot(fd) {
                self.stats.add(&snap);
                if self.record_series {
                    self.samples.push((now, snap.clone()));
                }
                self.last = Some(snap);
            }
        }
        self.tuner.handle_event(now, ConnEvent::Closed);
        // Nothing can be applied any more; drop whatever the tuner still returns.
        while self.tuner.poll_action().is_some() {}
        self.closed = true;
    }

    fn drain(&mut self, now: Time, fd: BorrowedFd<'_>) {
        while let Some(action) = self.tuner.poll_action() {
            if let Action::OpenStreams { count, reason } = &action {
                self.requests.push(StreamRequest {
                    known_streams: self.known_streams,
                    count: *count,
                    reason: reason.clone(),
                });
                continue;
            }
            let (effective, error) = match sockopt::apply_action(fd, &action, self.force) {
                Ok(v) => (Some(v), None),
                Err(e) => (None, Some(format!("{e} on stream {}", self.stream))),
            };
            self.changes_made += 1;
            self.changes.push(AppliedChange {
                at: now,
                action,
                effective,
                error,
            });
        }
    }

    /// Requests for more streams collected since the last call.
    pub fn take_stream_requests(&mut self) -> Vec<StreamRequest> {
        std::mem::take(&mut self.requests)
    }

    /// The summaries.
    pub fn stats(&self) -> &SampleStats {
        &self.stats
    }

    /// The last snapshot taken.
    pub fn last_snapshot(&self) -> Option<&TcpSnapshot> {
        self.last.as_ref()
    }

    /// Every sample (empty unless `record_series`).
    pub fn samples(&self) -> &[(Time, TcpSnapshot)] {
        &self.samples
    }

    /// Every change the tuner made, applied or failed.
    pub fn changes(&self) -> &[AppliedChange] {
        &self.changes
    }

    /// Changes made (applied or failed).
    pub fn changes_made(&self) -> u64 {
        self.changes_made
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;
    use tcptune_core::{Bytes, Role, TuneMode, TunerContext, TunerFactory};

    /// Asks for a buffer change on every snapshot and for two more streams once.
    struct Greedy {
        n: u64,
        out: Vec<Action>,
    }
    impl Tuner for Greedy {
        fn name(&self) -> &'static str {
            "greedy"
        }
        fn handle_event(&mut self, _now: Time, e: ConnEvent) {
            if e == ConnEvent::Established {
                self.out.push(Action::OpenStreams {
                    count: 2,
                    reason: "test".into(),
                });
            }
        }
        fn handle_snapshot(&mut self, _now: Time, _s: &TcpSnapshot) {
            self.n += 1;
            self.out.push(Action::SetSndBuf(Bytes::kib(64 * self.n)));
        }
        fn poll_action(&mut self) -> Option<Action> {
            self.out.pop()
        }
        fn poll_interval(&self) -> Option<Duration> {
            Some(Duration::from_millis(1))
        }
    }

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (s, _) = l.accept().expect("accept");
        (c, s)
    }

    #[test]
    fn applies_actions_reads_back_and_collects_stream_requests() {
        let (c, _s) = pair();
        let mut d = TunerDriver::new(Box::new(Greedy { n: 0, out: vec![] }), 1, 4, false, true);
        d.established(Time::from_millis(1), c.as_fd());
        d.sample(Time::from_millis(2), c.as_fd()).expect("sample");
        d.sample(Time::from_millis(20), c.as_fd()).expect("sample");
        assert_eq!(d.changes().len(), 2);
        assert_eq!(d.changes()[1].effective, Some(2 * 128 * 1024));
        assert_eq!(d.samples().len(), 2);
        // poll_interval 1 ms is clamped to 10 ms.
        assert_eq!(d.next_due(), Time::from_millis(30));
        let r = d.take_stream_requests();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].known_streams, r[0].count), (4, 2));
        assert!(d.take_stream_requests().is_empty());
        d.close(Time::from_millis(40), Some(c.as_fd()));
        assert_eq!(d.stats().samples, 3);
        assert!(d.stats().peak_sndbuf_bytes >= 2 * 128 * 1024);
    }

    #[test]
    fn fixed_tuner_sets_buffer_before_connect() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let f = TunerFactory::new(TuneMode::Fixed(Bytes::kib(200)));
        let mut d = TunerDriver::new(
            f.build(TunerContext::for_tests(Role::Receiver)),
            1,
            1,
            false,
            false,
        );
        d.before_connect(Time::ZERO, l.as_fd());
        assert_eq!(d.changes().len(), 1);
        assert_eq!(d.changes()[0].effective, Some(2 * 200 * 1024));
        assert!(d.changes()[0].error.is_none());
    }
}
