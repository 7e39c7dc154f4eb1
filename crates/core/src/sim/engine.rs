//! The simulation loop: the bottleneck, the delay lines, the streams and their tuners.

use super::tcp::{Ack, Receiver, Seg, Sender};
use super::{SimConfig, SimOutcome};
use crate::fullpipe::{FullPipe, ProbePlan};
use crate::mode::TunerFactory;
use crate::time::Time;
use crate::tuner::{Action, ConnEvent, PathHint, Role, Tuner, TunerContext};
use crate::units::{Bytes, Rate};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

/// SplitMix64: small, seedable, good enough for wake-up jitter.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn duration_up_to(&mut self, max: Duration) -> Duration {
        let n = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        if n == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.next_u64() % (n + 1))
    }
}

/// The bottleneck: a drop-tail FIFO drained at the link rate.
struct Bottleneck {
    bytes_per_ns: f64,
    cap: u64,
    q: VecDeque<Seg>,
    bytes: u64,
    credit: f64,
}

impl Bottleneck {
    /// Queue what fits; returns the dropped tail, if any.
    fn enqueue(&mut self, seg: Seg) -> Option<Seg> {
        let room = self.cap.saturating_sub(self.bytes);
        if room == 0 {
            return Some(seg);
        }
        let take = seg.len().min(room);
        let kept = Seg {
            end: seg.start + take,
            ..seg
        };
        self.q.push_back(kept);
        self.bytes += take;
        (take < seg.len()).then_some(Seg {
            start: seg.start + take,
            ..seg
        })
    }

    fn drain(&mut self, dt: Duration, mut out: impl FnMut(Seg)) {
        self.credit += dt.as_nanos() as f64 * self.bytes_per_ns;
        while let Some(front) = self.q.front_mut() {
            let avail = self.credit as u64;
            if avail == 0 {
                break;
            }
            let len = front.len();
            if len <= avail {
                let seg = *front;
                self.q.pop_front();
                self.bytes -= len;
                self.credit -= len as f64;
                out(seg);
            } else {
                let part = Seg {
                    end: front.start + avail,
                    ..*front
                };
                front.start += avail;
                self.bytes -= avail;
                self.credit -= avail as f64;
                out(part);
            }
        }
        if self.q.is_empty() {
            // An idle link does not save up credit.
            self.credit = self.credit.min(1.0);
        }
    }

    fn delay(&self) -> Duration {
        Duration::from_nanos((self.bytes as f64 / self.bytes_per_ns) as u64)
    }
}

struct Stream {
    snd: Sender,
    rcv: Receiver,
    snd_tuner: Box<dyn Tuner>,
    rcv_tuner: Box<dyn Tuner>,
    established_at: Time,
    established: bool,
    next_snd: Option<Time>,
    next_rcv: Option<Time>,
    closed: bool,
    done_at: Option<Time>,
    peak_sndbuf: u64,
    peak_wmem: u64,
    peak_rcvbuf: u64,
    peak_rmem: u64,
    /// Streams the transfer had when this stream's tuners were built (what their
    /// `OpenStreams` counts from, as in the transfer engine).
    known: u32,
}

type Loss = Reverse<(Time, u64, usize, u64, u64)>;

struct Engine<'a> {
    cfg: &'a SimConfig,
    now: Time,
    dt: Duration,
    half_rtt: Duration,
    snd_factory: TunerFactory,
    rcv_factory: TunerFactory,
    hint: PathHint,
    streams: Vec<Stream>,
    link: Bottleneck,
    fwd: VecDeque<(Time, Seg)>,
    rev: VecDeque<(Time, Ack)>,
    losses: BinaryHeap<Loss>,
    loss_seq: u64,
    rng: Rng,
    actions: u64,
    /// Streams in all that tuners asked for (the transfer engine's target).
    want_total: u32,
    reason: Option<String>,
    segs: Vec<Seg>,
    step_count: u64,
    /// The in-band measurement of the path's rate (a mode that needs a rate and got none,
    /// as the client does): its estimator and when it samples next.
    measuring: Option<(FullPipe, Time)>,
    /// When the in-band measurement found the rate.
    measured_at: Option<Time>,
}

/// Run one simulated transfer.
pub fn run(cfg: &SimConfig) -> SimOutcome {
    Engine::new(cfg).run()
}

fn clamp_interval(d: Duration) -> Duration {
    d.clamp(Duration::from_millis(10), Duration::from_millis(200))
}

impl<'a> Engine<'a> {
    fn new(cfg: &'a SimConfig) -> Engine<'a> {
        let rtt = cfg.path.rtt;
        let dt = (rtt / 20).clamp(Duration::from_micros(25), Duration::from_millis(1));
        let probe = (cfg.mode.needs_rate_probe() && cfg.probe_enabled).then(|| {
            let measured = cfg.path.rate.0 as f64 * cfg.probe_accuracy.clamp(0.01, 10.0);
            let one_socket = crate::linux::max_send_payload(&cfg.sender_limits)
                .filter(|_| cfg.probe_single_socket)
                .map_or(f64::INFINITY, |p| {
                    p as f64 * 2.0 / 3.0 * 8.0 / rtt.as_secs_f64()
                });
            // A probe limited by its socket knows it (it measured about its own capacity).
            (
                Rate(measured.min(one_socket) as u64),
                one_socket <= measured,
            )
        });
        Engine {
            cfg,
            now: Time::ZERO,
            dt,
            half_rtt: rtt / 2,
            snd_factory: TunerFactory::new(cfg.mode.clone())
                .with_peer_limits(cfg.receiver_limits.clone()),
            rcv_factory: TunerFactory::new(cfg.mode.clone())
                .with_peer_limits(cfg.sender_limits.clone()),
            hint: PathHint {
                rtt: Some(rtt),
                rate: probe.map(|(r, _)| r),
                rate_is_lower_bound: probe.is_some_and(|(_, lb)| lb),
                rate_in_band: false,
                resume: false,
                streams_asked: None,
            },
            streams: Vec::new(),
            link: Bottleneck {
                bytes_per_ns: cfg.path.rate.0 as f64 / 8e9,
                cap: cfg.path.queue.0,
                q: VecDeque::new(),
                bytes: 0,
                credit: 0.0,
            },
            fwd: VecDeque::new(),
            rev: VecDeque::new(),
            losses: BinaryHeap::new(),
            loss_seq: 0,
            rng: Rng(cfg.seed),
            actions: 0,
            want_total: 0,
            reason: None,
            segs: Vec::new(),
            step_count: 0,
            measuring: None,
            measured_at: None,
        }
    }

    fn run(mut self) -> SimOutcome {
        let mut initial = self.cfg.streams.clamp(1, self.cfg.max_streams.max(1));
        // A mode that needs the rate and has none measures it in band, as the client does:
        // it starts with the streams a full pipe needs to show, and the estimator watches
        // what the transfer delivers.
        if self.cfg.mode.needs_rate_probe()
            && self.hint.rate.is_none()
            && self.cfg.in_band
            && self.cfg.path.rtt >= crate::tuners::auto::MEASURE_MIN_RTT
        {
            let plan = ProbePlan::new(
                Some(self.cfg.path.rtt),
                &self.cfg.sender_limits,
                self.cfg.max_streams,
            );
            initial = initial.max(plan.streams).min(self.cfg.max_streams.max(1));
            self.hint.rate_in_band = true;
            let round = self.cfg.path.rtt.max(crate::fullpipe::MIN_ROUND);
            self.measuring = Some((FullPipe::new(round, Duration::MAX), Time::ZERO));
        }
        self.open(initial);
        let end = Time::ZERO + self.cfg.max_time;
        loop {
            self.now += self.dt;
            self.step();
            if self.streams.iter().all(|s| s.closed) || self.now >= end {
                break;
            }
        }
        self.outcome()
    }

    /// Open `count` streams now and spread the messages not yet started over all open ones.
    fn open(&mut self, count: u32) {
        let room = self
            .cfg
            .max_streams
            .saturating_sub(self.streams.len() as u32);
        let count = count.min(room);
        if count == 0 {
            return;
        }
        let msg = self.cfg.message_size.0.max(1);
        let mut unstarted = if self.streams.is_empty() {
            self.cfg.messages
        } else {
            0
        };
        for s in self.streams.iter_mut().filter(|s| !s.closed) {
            let started = s.snd.written.div_ceil(msg) * msg;
            let started = started.min(s.snd.target);
            unstarted += (s.snd.target - started) / msg;
            s.snd.target = started;
        }
        let total = self.streams.len() as u32 + count;
        let rtt = self.cfg.path.rtt;
        for _ in 0..count {
            let index = self.streams.len() as u32;
            let ctx = |role| TunerContext {
                role,
                limits: match role {
                    Role::Sender => self.cfg.sender_limits.clone(),
                    Role::Receiver => self.cfg.receiver_limits.clone(),
                },
                hint: self.hint.clone(),
                stream_index: index,
                streams: total,
            };
            let snd_tuner = self.snd_factory.build(ctx(Role::Sender));
            let rcv_tuner = self.rcv_factory.build(ctx(Role::Receiver));
            self.streams.push(Stream {
                snd: Sender::new(self.cfg.path.mss, &self.cfg.sender_limits),
                rcv: Receiver::new(self.cfg.path.mss, &self.cfg.receiver_limits),
                snd_tuner,
                rcv_tuner,
                established_at: self.now + rtt,
                established: false,
                next_snd: None,
                next_rcv: None,
                closed: false,
                done_at: None,
                peak_sndbuf: 0,
                peak_wmem: 0,
                peak_rcvbuf: 0,
                peak_rmem: 0,
                known: total,
            });
            let i = index as usize;
            let now = self.now;
            self.streams[i]
                .snd_tuner
                .handle_event(now, ConnEvent::BeforeConnect);
            self.streams[i]
                .rcv_tuner
                .handle_event(now, ConnEvent::BeforeConnect);
            self.drain(i, Role::Sender, false);
            self.drain(i, Role::Receiver, false);
            self.streams[i].rcv.connect(now, rtt);
        }
        let open: Vec<usize> = (0..self.streams.len())
            .filter(|&i| !self.streams[i].closed)
            .collect();
        let n = open.len() as u64;
        for (k, &i) in open.iter().enumerate() {
            let extra = unstarted / n + u64::from((k as u64) < unstarted % n);
            self.streams[i].snd.target += extra * msg;
        }
    }

    /// The client's in-band measurement: sample the delivered bytes a few times a round;
    /// once the pipe is full, hand every tuner the rate and the stream count (the plan's, or
    /// more when more are open), as the client does with its `Hint`.
    fn measure(&mut self) {
        let Some((est, next)) = self.measuring.as_mut() else {
            return;
        };
        if self.now < *next {
            return;
        }
        *next = self.now + (self.cfg.path.rtt / 8).max(Duration::from_millis(2));
        let delivered: u64 = self.streams.iter().map(|s| s.snd.una).sum();
        if est.on_sample(self.now, delivered).is_none() {
            return;
        }
        let Some(rate) = est.outcome().rate else {
            return;
        };
        self.measuring = None;
        self.measured_at = Some(self.now);
        self.hint.rate = Some(rate);
        self.hint.rate_in_band = false;
        let plan = crate::tuners::auto::AutoPlan::compute(
            &crate::tuners::auto::AutoConfig::default()
                .peer_limits(Some(self.cfg.receiver_limits.clone())),
            &TunerContext {
                role: Role::Sender,
                limits: self.cfg.sender_limits.clone(),
                hint: self.hint.clone(),
                stream_index: 0,
                streams: self.cfg.streams.max(1),
            },
        );
        let planned = plan
            .streams_total
            .max(self.cfg.streams)
            .min(self.cfg.max_streams.max(1));
        // Streams beyond the plan's are kept: their congestion windows carry the pipe, and
        // retiring them would leave the rest to grow theirs back in congestion avoidance.
        // More are opened only if the rest of the transfer outlasts their slow start.
        let open = self.streams.iter().filter(|s| !s.closed).count() as u32;
        let total = self.cfg.messages * self.cfg.message_size.0;
        let remaining = total.saturating_sub(delivered);
        let help = crate::tuners::auto::AutoPlan::late_streams_help(
            Some(remaining),
            rate,
            self.cfg.path.rtt,
            plan.share.map_or(0, |b| b.0),
            u64::from(self.cfg.path.mss),
        );
        let planned = if help { planned } else { planned.min(open) };
        if planned > open {
            self.open(planned - open);
        }
        let planned = planned.max(open);
        let now = self.now;
        let hint = self.hint.clone();
        for i in 0..self.streams.len() {
            if self.streams[i].closed {
                continue;
            }
            self.streams[i].snd_tuner.handle_hint(now, &hint, planned);
            self.streams[i].rcv_tuner.handle_hint(now, &hint, planned);
            let connected = self.streams[i].established;
            self.drain(i, Role::Sender, connected);
            self.drain(i, Role::Receiver, connected);
        }
    }

    fn drain(&mut self, i: usize, side: Role, connected: bool) {
        loop {
            let action = match side {
                Role::Sender => self.streams[i].snd_tuner.poll_action(),
                Role::Receiver => self.streams[i].rcv_tuner.poll_action(),
            };
            let Some(action) = action else {
                break;
            };
            self.actions += 1;
            let s = &mut self.streams[i];
            match (side, action) {
                (Role::Sender, Action::SetSndBuf(v)) => s.snd.set_sndbuf(v),
                (Role::Sender, Action::SetNotsentLowat(l)) => s.snd.set_lowat(l.0),
                (Role::Receiver, Action::SetRcvBuf(v)) => s.rcv.set_rcvbuf(v),
                (Role::Receiver, Action::SetWindowClamp(c)) => s.rcv.set_clamp(c.0, connected),
                (_, Action::OpenStreams { count, reason }) => {
                    let want = s.known.saturating_add(count);
                    self.want_total = self.want_total.max(want);
                    self.reason.get_or_insert(reason);
                }
                // The other direction's buffers are not modelled.
                _ => {}
            }
            if connected && side == Role::Receiver {
                if let Some(ack) = self.streams[i].rcv.window_update(i) {
                    self.rev.push_back((self.now + self.half_rtt, ack));
                }
            }
        }
    }

    fn step(&mut self) {
        let now = self.now;
        self.step_count += 1;
        while let Some(&(t, ack)) = self.rev.front() {
            if t > now {
                break;
            }
            self.rev.pop_front();
            self.streams[ack.stream].snd.on_ack(now, &ack);
        }
        while let Some(&Reverse((t, _, i, a, b))) = self.losses.peek() {
            if t > now {
                break;
            }
            self.losses.pop();
            self.streams[i].snd.on_loss(now, a, b);
        }
        while let Some(&(t, seg)) = self.fwd.front() {
            if t > now {
                break;
            }
            self.fwd.pop_front();
            let ack = self.streams[seg.stream]
                .rcv
                .on_data(now, &seg, self.half_rtt);
            self.rev.push_back((now + self.half_rtt, ack));
        }

        let n = self.streams.len();
        let first = (self.step_count as usize) % n.max(1);
        let rtt = self.cfg.path.rtt;
        let jitter = self.cfg.writer_jitter;
        self.segs.clear();
        for k in 0..n {
            let i = (first + k) % n;
            let s = &mut self.streams[i];
            if s.closed {
                continue;
            }
            if !s.established {
                if now < s.established_at {
                    continue;
                }
                s.established = true;
                s.snd.established(now, rtt);
                s.snd_tuner.handle_event(now, ConnEvent::Established);
                s.rcv_tuner.handle_event(now, ConnEvent::Established);
                s.next_snd = s.snd_tuner.poll_interval().map(|d| now + clamp_interval(d));
                s.next_rcv = s.rcv_tuner.poll_interval().map(|d| now + clamp_interval(d));
                self.drain(i, Role::Sender, true);
                self.drain(i, Role::Receiver, true);
            }
            let s = &mut self.streams[i];
            if s.rcv.tick(now) {
                // Autotuning moved the window edge: a window update goes out.
                self.rev.push_back((now + self.half_rtt, s.rcv.ack_now(i)));
            }
            let rng = &mut self.rng;
            s.snd.app_write(now, || rng.duration_up_to(jitter));
            s.snd.transmit(now, i, &mut self.segs);
            s.snd.account(self.dt);
            s.snd.record_delivery(now);
        }
        for seg in std::mem::take(&mut self.segs) {
            if let Some(lost) = self.link.enqueue(seg) {
                let at = now + rtt + self.link.delay();
                self.loss_seq += 1;
                self.losses.push(Reverse((
                    at,
                    self.loss_seq,
                    lost.stream,
                    lost.start,
                    lost.end,
                )));
            }
        }
        let arrive = now + self.half_rtt;
        let fwd = &mut self.fwd;
        self.link.drain(self.dt, |seg| fwd.push_back((arrive, seg)));

        self.measure();
        for i in 0..n {
            self.sample(i);
            let s = &mut self.streams[i];
            if !s.established {
                // Like the engine, which samples connected sockets: a limit set on the
                // listener and lowered at once after the handshake is not a peak.
                continue;
            }
            s.peak_sndbuf = s.peak_sndbuf.max(s.snd.sk_sndbuf);
            s.peak_wmem = s.peak_wmem.max(s.snd.queued_mem());
            s.peak_rcvbuf = s.peak_rcvbuf.max(s.rcv.sk_rcvbuf);
            s.peak_rmem = s.peak_rmem.max(s.rcv.rmem_alloc());
            if !s.closed && s.established && s.rcv.rcv_nxt >= s.snd.target && s.snd.done() {
                s.closed = true;
                s.done_at = Some(now);
                s.snd_tuner.handle_event(now, ConnEvent::Closed);
                s.rcv_tuner.handle_event(now, ConnEvent::Closed);
            }
        }
        let have = self.streams.len() as u32;
        if self.want_total > have {
            self.open(self.want_total - have);
        }
    }

    fn sample(&mut self, i: usize) {
        let now = self.now;
        let s = &mut self.streams[i];
        if s.closed || !s.established {
            return;
        }
        if s.next_snd.is_some_and(|t| t <= now) {
            let snap = s.snd.snapshot(now);
            s.snd_tuner.handle_snapshot(now, &snap);
            s.next_snd = s.snd_tuner.poll_interval().map(|d| now + clamp_interval(d));
            self.drain(i, Role::Sender, true);
        }
        let s = &mut self.streams[i];
        if s.next_rcv.is_some_and(|t| t <= now) {
            let snap = s.rcv.snapshot();
            s.rcv_tuner.handle_snapshot(now, &snap);
            s.next_rcv = s.rcv_tuner.poll_interval().map(|d| now + clamp_interval(d));
            self.drain(i, Role::Receiver, true);
        }
    }

    fn outcome(&self) -> SimOutcome {
        let first = self.streams.iter().filter_map(|s| s.rcv.first_byte).min();
        let bytes: u64 = self.streams.iter().map(|s| s.rcv.rcv_nxt).sum();
        let capped = !self.streams.iter().all(|s| s.closed);
        let last = if capped {
            Some(self.now)
        } else {
            self.streams.iter().filter_map(|s| s.done_at).max()
        };
        let seconds = match (first, last) {
            (Some(f), Some(l)) => l.saturating_since(f).as_secs_f64(),
            _ => 0.0,
        };
        let throughput = if seconds > 0.0 {
            Rate((bytes as f64 * 8.0 / seconds) as u64)
        } else {
            Rate(0)
        };
        let sum = |f: fn(&Stream) -> u64| Bytes(self.streams.iter().map(f).sum());
        SimOutcome {
            throughput,
            seconds,
            bytes,
            capped,
            streams_used: self.streams.len() as u32,
            streams_reason: self.reason.clone(),
            peak_sndbuf: sum(|s| s.peak_sndbuf),
            peak_wmem_queued: sum(|s| s.peak_wmem),
            peak_rcvbuf: sum(|s| s.peak_rcvbuf),
            peak_rmem_alloc: sum(|s| s.peak_rmem),
            retransmitted: sum(|s| s.snd.retrans_bytes),
            actions: self.actions,
            completion: last.map_or(Duration::ZERO, |l| l.saturating_since(Time::ZERO)),
            measured_in: self.measured_at.map(|t| t.saturating_since(Time::ZERO)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::TuneMode;
    use crate::sim::raised_limits;

    fn paper(mode: TuneMode, rtt_ms: u64, streams: u32) -> SimConfig {
        SimConfig::paper(mode, Duration::from_millis(rtt_ms), streams)
    }

    #[test]
    fn fixed_window_limits_throughput_to_window_over_rtt() {
        // SO_RCVBUF 1 MiB: a window of about 1 MiB; 1 MiB per 50 ms is 168 Mbit/s.
        let out = run(&paper(TuneMode::Fixed(Bytes::mib(1)), 50, 1));
        let want = 1_048_576.0 * 8.0 / 0.05;
        let got = out.throughput.0 as f64;
        assert!((got / want - 1.0).abs() < 0.05, "{got} vs {want}");
        assert_eq!(
            out.peak_sndbuf,
            Bytes::mib(2),
            "the kernel holds twice the value"
        );
        assert_eq!(out.retransmitted, Bytes::ZERO);
    }

    #[test]
    fn same_seed_gives_the_same_run() {
        let cfg = paper(TuneMode::Auto, 25, 2);
        assert_eq!(run(&cfg), run(&cfg));
        let mut other = cfg.clone();
        other.seed = 7;
        other.writer_jitter = Duration::from_millis(2);
        let (a, b) = (run(&cfg), run(&other));
        assert_eq!(a.bytes, b.bytes);
    }

    #[test]
    fn opened_streams_take_over_unstarted_messages_and_every_byte_arrives() {
        let out = run(&paper(TuneMode::Auto, 200, 1));
        assert!(out.streams_used > 1);
        assert!(!out.capped);
        assert_eq!(out.bytes, 128 << 20);
        assert!(out.streams_reason.is_some());
    }

    #[test]
    fn queue_overflow_is_recovered_by_retransmission() {
        let cfg = paper(TuneMode::Kernel, 25, 1).with_limits(raised_limits());
        let out = run(&cfg);
        assert!(out.retransmitted > Bytes::ZERO);
        assert!(!out.capped);
        assert_eq!(out.bytes, 128 << 20);
    }

    #[test]
    fn time_cap_reports_the_bytes_that_moved() {
        let mut cfg = paper(TuneMode::None, 200, 1);
        cfg.max_time = Duration::from_secs(2);
        let out = run(&cfg);
        assert!(out.capped);
        assert!(out.bytes < 128 << 20);
        let want = 65_536.0 * 8.0 / 0.2;
        assert!((out.throughput.0 as f64 / want - 1.0).abs() < 0.15);
    }

    #[test]
    fn bottleneck_drops_what_does_not_fit_and_drains_at_the_link_rate() {
        let mut b = Bottleneck {
            bytes_per_ns: 0.125, // 1 Gbit/s
            cap: 10_000,
            q: VecDeque::new(),
            bytes: 0,
            credit: 0.0,
        };
        let seg = |start, end| Seg {
            stream: 0,
            start,
            end,
            sent: Time::ZERO,
        };
        assert!(b.enqueue(seg(0, 6_000)).is_none());
        let dropped = b.enqueue(seg(6_000, 12_000)).expect("tail dropped");
        assert_eq!((dropped.start, dropped.end), (10_000, 12_000));
        let mut out = Vec::new();
        b.drain(Duration::from_micros(40), |s| out.push(s)); // 5000 bytes
        assert_eq!(out.iter().map(Seg::len).sum::<u64>(), 5_000);
        assert_eq!(b.delay(), Duration::from_micros(40));
    }
}
