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
//!
//! A pacing cap from outside the tuner (the session's fair share of a path shared with
//! other transfers, see [`TunerDriver::share_cap`]) may come at any time after step 3: the
//! socket is then paced at the lower of it and the tuner's own cap ([`lower_cap`]).

use crate::sockopt::{self, SockoptError};
use std::os::fd::BorrowedFd;
use std::time::Duration;
use tcptune_core::{
    Action, ConnEvent, Decimated, PathHint, Rate, SampleRecord, StreamStats, TcpSnapshot, Time,
    Tuner,
};

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
    /// Why the driver applied something else than asked, if it did.
    pub note: Option<String>,
}

/// A tuner's request for more parallel streams (plain data, defined in core so that the
/// sessions can carry it without this crate).
pub use tcptune_core::tuner::StreamRequest;

/// Whether the kernel holds less than the doubled size asked for (a `*mem_max` cap).
fn capped(action: &Action, effective: Option<u64>) -> bool {
    match (action, effective) {
        (Action::SetSndBuf(b) | Action::SetRcvBuf(b), Some(v)) => v < b.0.saturating_mul(2),
        _ => false,
    }
}

/// Points a recorded time series keeps per socket (`record_series`): older points are
/// decimated (see [`tcptune_core::Decimated`]), so a stream of any length costs at most this
/// many records (about 120 bytes each).
pub const SERIES_CAPACITY: usize = 512;
/// Changes kept per socket with `record_series` (all are counted).
pub const CHANGES_CAPACITY: usize = 512;

/// Drives one tuner on one socket. See the module documentation for the calling order.
pub struct TunerDriver {
    tuner: Box<dyn Tuner>,
    stream: u32,
    known_streams: u32,
    force: bool,
    record_series: bool,
    stats: StreamStats,
    samples: Decimated<SampleRecord>,
    changes: Vec<AppliedChange>,
    requests: Vec<StreamRequest>,
    last: Option<TcpSnapshot>,
    next_due: Time,
    closed: bool,
    /// Smallest `SO_RCVBUF` applied (see [`TunerDriver::accepted`]).
    rcvbuf_floor: Option<tcptune_core::Bytes>,
    /// The tuner's own pacing cap, as it last asked.
    tuner_pacing: Option<Rate>,
    /// The stream's part of the session's fair share (see [`TunerDriver::share_cap`]).
    share: Option<Rate>,
}

/// The lower of two pacing caps (`None`: no cap).
pub fn lower_cap(a: Option<Rate>, b: Option<Rate>) -> Option<Rate> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

impl std::fmt::Debug for TunerDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunerDriver")
            .field("tuner", &self.tuner.name())
            .field("stream", &self.stream)
            .field("samples", &self.stats.samples_taken)
            .finish()
    }
}

/// What one [`TunerDriver::drain`] applied that [`TunerDriver::accepted`] needs to know.
#[derive(Default)]
struct Drained {
    /// The receive buffer read back after a `SetRcvBuf`.
    rcvbuf: Option<u64>,
    /// The tuner set a window clamp itself.
    clamp: bool,
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
            stats: StreamStats::default(),
            samples: Decimated::new(SERIES_CAPACITY),
            changes: Vec::new(),
            requests: Vec::new(),
            last: None,
            next_due: Time::ZERO,
            closed: false,
            rcvbuf_floor: None,
            tuner_pacing: None,
            share: None,
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

    /// Step 2 for a socket that a server accepted on a listener shared by every session (its
    /// options could not be set before the handshake): the tuner's `BeforeConnect` options
    /// are applied now, before the socket carries data this end sends.
    ///
    /// One rule differs: a receive buffer is never set below one segment (`tcpi_advmss`).
    /// The handshake already advertised a window of about ten segments, and a sender that
    /// has seen a window never sends a segment into a smaller one: with a buffer below about
    /// a segment it waits for its persist timer, and a transfer crawls (8 KiB on loopback,
    /// where a segment is 64 KiB, took 38 s for 4 MiB). On an Ethernet path a segment is
    /// 1448 bytes and the rule never binds.
    ///
    /// And one more is added: the peer may have sent data before this end could set its
    /// receive buffer (a sender that streams as soon as it connects). The first data fixes
    /// the window clamp from the default buffer (about 87 KB here), and a buffer set later
    /// and locked never raises it: such a stream stayed at an 87 KB window for the whole
    /// transfer (40 x slower at 100 ms). So after a receive buffer is set here the clamp is
    /// raised to the buffer read back, unless the tuner chose a clamp itself; the window stays
    /// bounded by the buffer's free space, as it always is.
    pub fn accepted(&mut self, now: Time, fd: BorrowedFd<'_>) {
        if let Ok(s) = sockopt::tcp_info(fd) {
            if s.advmss_bytes > 0 {
                self.rcvbuf_floor = Some(tcptune_core::Bytes(u64::from(s.advmss_bytes)));
            }
        }
        self.tuner.handle_event(now, ConnEvent::BeforeConnect);
        let applied = self.drain(now, fd);
        if let (Some(rcvbuf), false) = (applied.rcvbuf, applied.clamp) {
            let clamp = Action::SetWindowClamp(tcptune_core::Bytes(rcvbuf));
            if let Err(e) = sockopt::apply_action(fd, &clamp, false) {
                if self.changes.len() < CHANGES_CAPACITY {
                    self.changes.push(AppliedChange {
                        at: now,
                        action: clamp,
                        effective: None,
                        error: Some(format!("{e} on stream {}", self.stream)),
                        note: Some(
                            "the window clamp follows a receive buffer set after the handshake"
                                .into(),
                        ),
                    });
                }
            }
        }
    }

    /// Step 3: the handshake completed.
    pub fn established(&mut self, now: Time, fd: BorrowedFd<'_>) {
        // What the kernel runs on this socket, for the record (a failure leaves it unknown).
        self.stats.congestion = sockopt::congestion(fd).ok();
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
        let share = self.tuner.pool_share();
        if let Some(p) = share {
            let peak = self.stats.pool_held_peak_bytes.unwrap_or(0).max(p.held.0);
            self.stats.pool_held_peak_bytes = Some(peak);
        }
        let rtt = snap.rtt().unwrap_or(Duration::from_millis(100));
        let interval = self
            .tuner
            .poll_interval()
            .unwrap_or(rtt)
            .clamp(MIN_SAMPLE_INTERVAL, MAX_SAMPLE_INTERVAL);
        self.next_due = now + interval;
        if self.record_series {
            self.samples
                .push(now, SampleRecord::of(&snap).with_pool(share));
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
                    self.samples.push(now, SampleRecord::of(&snap));
                }
                self.last = Some(snap);
            }
        }
        self.tuner.handle_event(now, ConnEvent::Closed);
        // Nothing can be applied any more; drop whatever the tuner still returns.
        while self.tuner.poll_action().is_some() {}
        self.closed = true;
    }

    fn drain(&mut self, now: Time, fd: BorrowedFd<'_>) -> Drained {
        let mut drained = Drained::default();
        while let Some(action) = self.tuner.poll_action() {
            if let Action::OpenStreams { count, reason } = &action {
                self.requests.push(StreamRequest {
                    known_streams: self.known_streams,
                    count: *count,
                    reason: reason.clone(),
                });
                continue;
            }
            let (applied, note) = match (&action, self.rcvbuf_floor) {
                (Action::SetRcvBuf(b), Some(floor)) if *b < floor => (
                    Action::SetRcvBuf(floor),
                    Some(format!(
                        "raised to {floor}, one segment: a smaller receive buffer set after the handshake stalls the sender"
                    )),
                ),
                (Action::SetMaxPacingRate(r), _) => {
                    self.tuner_pacing = *r;
                    let cap = lower_cap(*r, self.share);
                    let note = (cap != *r).then(|| {
                        format!(
                            "held at the session's fair share of the path, {}",
                            cap.map_or_else(|| "no cap".to_string(), |c| c.to_string())
                        )
                    });
                    (Action::SetMaxPacingRate(cap), note)
                }
                _ => (action.clone(), None),
            };
            let (effective, error) = match sockopt::apply_action(fd, &applied, self.force) {
                Ok(v) => (Some(v), None),
                Err(e) => (None, Some(format!("{e} on stream {}", self.stream))),
            };
            match (&applied, effective) {
                (Action::SetRcvBuf(_), Some(v)) => drained.rcvbuf = Some(v),
                (Action::SetWindowClamp(_), _) => drained.clamp = true,
                _ => {}
            }
            self.stats.add_change();
            if self.record_series && self.changes.len() < CHANGES_CAPACITY {
                self.changes.push(AppliedChange {
                    at: now,
                    action,
                    effective,
                    error,
                    note,
                });
            } else if (error.is_some() || note.is_some() || capped(&applied, effective))
                && self.changes.len() < 8
            {
                // Without a series, failures and adjustments (the driver's, or a system
                // maximum's) are still worth keeping (a few): the report explains them.
                self.changes.push(AppliedChange {
                    at: now,
                    action,
                    effective,
                    error,
                    note,
                });
            }
        }
        drained
    }

    /// The transfer learned something about the path while it runs (see
    /// [`Tuner::handle_hint`]): tell the tuner and apply what it changes.
    pub fn hint(&mut self, now: Time, fd: BorrowedFd<'_>, hint: &PathHint, streams: u32) {
        if self.closed {
            return;
        }
        self.known_streams = streams;
        self.tuner.handle_hint(now, hint, streams);
        self.drain(now, fd);
    }

    /// The stream's part of its session's fair share of the path (`None`: no share cap):
    /// the socket is paced at the lower of it and the tuner's own cap from now on. Applied
    /// and recorded (as a `set_max_pacing_rate` change with a note) when it changes.
    pub fn share_cap(&mut self, now: Time, fd: BorrowedFd<'_>, cap: Option<Rate>) {
        if self.closed || cap == self.share {
            return;
        }
        self.share = cap;
        let action = Action::SetMaxPacingRate(lower_cap(self.tuner_pacing, cap));
        let (effective, error) = match sockopt::apply_action(fd, &action, self.force) {
            Ok(v) => (Some(v), None),
            Err(e) => (None, Some(format!("{e} on stream {}", self.stream))),
        };
        self.stats.add_change();
        let note = Some(match cap {
            Some(c) => format!("the session's fair share of the path: {c} for this stream"),
            None => "the session's fair share lifted (alone on the path)".to_string(),
        });
        let keep = if self.record_series {
            CHANGES_CAPACITY
        } else {
            8
        };
        if self.changes.len() < keep {
            self.changes.push(AppliedChange {
                at: now,
                action,
                effective,
                error,
                note,
            });
        }
    }

    /// The share cap in force (see [`TunerDriver::share_cap`]).
    pub fn share(&self) -> Option<Rate> {
        self.share
    }

    /// Requests for more streams collected since the last call.
    pub fn take_stream_requests(&mut self) -> Vec<StreamRequest> {
        std::mem::take(&mut self.requests)
    }

    /// The summaries.
    pub fn stats(&self) -> &StreamStats {
        &self.stats
    }

    /// The last snapshot taken.
    pub fn last_snapshot(&self) -> Option<&TcpSnapshot> {
        self.last.as_ref()
    }

    /// The recorded series (empty unless `record_series`; at most [`SERIES_CAPACITY`]
    /// points, decimated evenly over the connection's life).
    pub fn samples(&self) -> &Decimated<SampleRecord> {
        &self.samples
    }

    /// The changes kept: with `record_series` the first [`CHANGES_CAPACITY`] changes the
    /// tuner made, applied or failed; without, the first few that failed, were adjusted or were capped.
    pub fn changes(&self) -> &[AppliedChange] {
        &self.changes
    }

    /// Changes made (applied or failed).
    pub fn changes_made(&self) -> u64 {
        self.stats.changes_made
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

    /// A receiving stream's driver for `mode`, recording its series.
    fn receiver(mode: TuneMode) -> TunerDriver {
        let f = TunerFactory::new(mode);
        TunerDriver::new(
            f.build(TunerContext::for_tests(Role::Receiver)),
            1,
            1,
            false,
            true,
        )
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
        assert_eq!(d.samples().points().len(), 2);
        // poll_interval 1 ms is clamped to 10 ms.
        assert_eq!(d.next_due(), Time::from_millis(30));
        let r = d.take_stream_requests();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].known_streams, r[0].count), (4, 2));
        assert!(d.take_stream_requests().is_empty());
        d.close(Time::from_millis(40), Some(c.as_fd()));
        assert_eq!(d.stats().samples_taken, 3);
        assert!(d.stats().peak_sndbuf_bytes >= 2 * 128 * 1024);
    }

    #[test]
    fn an_accepted_socket_never_gets_a_receive_buffer_below_one_segment() {
        let (_c, s) = pair();
        let mut d = receiver(TuneMode::Fixed(Bytes::kib(4)));
        d.accepted(Time::ZERO, s.as_fd());
        let ch = &d.changes()[0];
        assert_eq!(
            ch.action,
            Action::SetRcvBuf(Bytes::kib(4)),
            "what was asked"
        );
        let advmss = sockopt::tcp_info(s.as_fd()).expect("info").advmss_bytes;
        assert!(ch.effective.unwrap_or(0) >= 2 * u64::from(advmss), "{ch:?}");
        assert!(ch
            .note
            .as_deref()
            .is_some_and(|n| n.contains("one segment")));
        // A buffer above a segment is applied as asked.
        let mut d = receiver(TuneMode::Fixed(Bytes::kib(256)));
        d.accepted(Time::ZERO, s.as_fd());
        assert_eq!(d.changes()[0].effective, Some(2 * 256 * 1024));
        assert!(d.changes()[0].note.is_none());
    }

    #[test]
    fn a_receive_buffer_set_after_data_arrived_raises_the_window_clamp() {
        use std::io::{Read, Write};
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        // The peer streams before this end could set its buffer: the first data fixes the
        // clamp from the default buffer.
        c.write_all(&[7u8; 100_000]).expect("write");
        let (mut s, _) = l.accept().expect("accept");
        std::thread::sleep(Duration::from_millis(20));
        let mut buf = vec![0u8; 1 << 20];
        let _ = s.read(&mut buf).expect("read");
        let mut d = receiver(TuneMode::Fixed(Bytes::mib(2)));
        d.accepted(Time::ZERO, s.as_fd());
        let effective = d.changes()[0].effective.expect("SO_RCVBUF applied");
        let clamp = sockopt::window_clamp(s.as_fd()).expect("clamp");
        assert!(
            clamp >= effective / 2,
            "clamp {clamp} stayed below the buffer {effective} set after the data"
        );
    }

    #[test]
    fn a_share_cap_holds_the_tuners_pacing_at_the_lower_and_lifts_back_to_it() {
        /// Asks for a 100 Mbit/s pacing cap on every snapshot.
        struct Pacer;
        impl Tuner for Pacer {
            fn name(&self) -> &'static str {
                "pacer"
            }
            fn handle_event(&mut self, _now: Time, _e: ConnEvent) {}
            fn handle_snapshot(&mut self, _now: Time, _s: &TcpSnapshot) {}
            fn poll_action(&mut self) -> Option<Action> {
                None
            }
            fn poll_interval(&self) -> Option<Duration> {
                None
            }
        }
        assert_eq!(lower_cap(None, None), None);
        assert_eq!(lower_cap(Some(Rate::mbit(5)), None), Some(Rate::mbit(5)));
        assert_eq!(
            lower_cap(Some(Rate::mbit(5)), Some(Rate::mbit(3))),
            Some(Rate::mbit(3))
        );
        let (c, _s) = pair();
        let mut d = TunerDriver::new(Box::new(Pacer), 1, 1, false, true);
        d.established(Time::ZERO, c.as_fd());
        d.share_cap(Time::from_millis(1), c.as_fd(), Some(Rate::mbit(80)));
        // The same cap again is nothing to do.
        d.share_cap(Time::from_millis(2), c.as_fd(), Some(Rate::mbit(80)));
        assert_eq!(d.changes().len(), 1);
        let ch = &d.changes()[0];
        assert_eq!(ch.action, Action::SetMaxPacingRate(Some(Rate::mbit(80))));
        // Read back in bytes per second.
        assert_eq!(ch.effective, Some(10_000_000));
        assert!(ch.note.as_deref().is_some_and(|n| n.contains("fair share")));
        assert_eq!(d.share(), Some(Rate::mbit(80)));
        d.share_cap(Time::from_millis(3), c.as_fd(), None);
        assert_eq!(d.changes()[1].action, Action::SetMaxPacingRate(None));
        assert_eq!(d.changes()[1].effective, Some(u64::MAX));
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
            true,
        );
        d.before_connect(Time::ZERO, l.as_fd());
        assert_eq!(d.changes().len(), 1);
        assert_eq!(d.changes()[0].effective, Some(2 * 200 * 1024));
        assert!(d.changes()[0].error.is_none());
    }
}
