//! The two ends of one simulated TCP connection, as fluids of bytes.
//!
//! The sender is CUBIC-like (slow start without HyStart, multiplicative decrease by 0.7 once
//! per round of losses, cubic growth with a Reno floor, SACK recovery that retransmits only
//! what was dropped, congestion-window validation). The sockets follow [`crate::linux`]:
//! `SO_SNDBUF`/`SO_RCVBUF` double and lock, send and receive autotuning with their caps, the
//! writer's one-third wake-up rule and `TCP_NOTSENT_LOWAT`, the window scale and clamp chosen
//! at SYN time, and a window that never shrinks.

use crate::linux;
use crate::snapshot::{TcpSnapshot, TcpState};
use crate::time::Time;
use crate::tuner::HostLimits;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// A range of sequence space in flight.
#[derive(Clone, Copy, Debug)]
pub(super) struct Seg {
    pub(super) stream: usize,
    pub(super) start: u64,
    pub(super) end: u64,
    /// When the sender sent it (for RTT samples).
    pub(super) sent: Time,
}

impl Seg {
    pub(super) fn len(&self) -> u64 {
        self.end - self.start
    }
}

/// What the receiver tells the sender.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ack {
    pub(super) stream: usize,
    pub(super) cum: u64,
    /// Bytes this segment added to what the receiver holds (SACK information).
    pub(super) newly: u64,
    pub(super) edge: u64,
    /// Send time of the segment acknowledged (`None`: a pure window update).
    pub(super) sent: Option<Time>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Writer {
    Running,
    Blocked,
    Waking(Time),
}

/// Why the last transmission opportunity was not used fully.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Limit {
    None,
    Cwnd,
    Rwnd,
    Sndbuf,
    App,
}

const BETA: f64 = 0.7;
const CUBIC_C: f64 = 0.4;

pub(super) struct Sender {
    mss: u64,
    limits: HostLimits,
    /// Bytes the application must write on this stream.
    pub(super) target: u64,
    pub(super) written: u64,
    writer: Writer,
    pub(super) una: u64,
    pub(super) nxt: u64,
    pipe: u64,
    rtx: VecDeque<(u64, u64)>,
    cwnd: f64,
    ssthresh: f64,
    recovery_until: Time,
    w_max: f64,
    epoch: Option<Time>,
    srtt: Option<Duration>,
    rttvar: Duration,
    min_rtt: Option<Duration>,
    peer_edge: u64,
    pub(super) sk_sndbuf: u64,
    locked: bool,
    lowat: Option<u64>,
    delivered: u64,
    delivered_hist: VecDeque<(Time, u64)>,
    app_limited_until: Time,
    period_start: Time,
    pipe_max: [u64; 2],
    cwnd_limited: [bool; 2],
    pub(super) limit: Limit,
    busy_ns: u64,
    rwnd_limited_ns: u64,
    sndbuf_limited_ns: u64,
    pub(super) retrans_bytes: u64,
    lost_bytes: u64,
    in_recovery: bool,
}

impl Sender {
    pub(super) fn new(mss: u32, limits: &HostLimits) -> Sender {
        let mss = u64::from(mss);
        Sender {
            mss,
            limits: limits.clone(),
            target: 0,
            written: 0,
            writer: Writer::Running,
            una: 0,
            nxt: 0,
            pipe: 0,
            rtx: VecDeque::new(),
            cwnd: (10 * mss) as f64,
            ssthresh: f64::INFINITY,
            recovery_until: Time::ZERO,
            w_max: 0.0,
            epoch: None,
            srtt: None,
            rttvar: Duration::ZERO,
            min_rtt: None,
            peer_edge: 65_535,
            sk_sndbuf: limits.tcp_wmem[1].0,
            locked: false,
            lowat: None,
            delivered: 0,
            delivered_hist: VecDeque::new(),
            app_limited_until: Time::ZERO,
            period_start: Time::ZERO,
            pipe_max: [0; 2],
            cwnd_limited: [false; 2],
            limit: Limit::None,
            busy_ns: 0,
            rwnd_limited_ns: 0,
            sndbuf_limited_ns: 0,
            retrans_bytes: 0,
            lost_bytes: 0,
            in_recovery: false,
        }
    }

    /// The handshake completed: the kernel sizes the buffer for the initial window.
    pub(super) fn established(&mut self, now: Time, rtt: Duration) {
        self.srtt = Some(rtt);
        self.rttvar = rtt / 2;
        self.min_rtt = Some(rtt);
        self.period_start = now;
        self.autotune();
    }

    pub(super) fn set_sndbuf(&mut self, value: crate::units::Bytes) {
        self.sk_sndbuf = linux::sndbuf_after_setsockopt(value, &self.limits);
        self.locked = true;
    }

    pub(super) fn set_lowat(&mut self, lowat: u64) {
        self.lowat = Some(lowat);
    }

    fn srtt(&self) -> Duration {
        self.srtt.unwrap_or(Duration::from_millis(100))
    }

    pub(super) fn queued_mem(&self) -> u64 {
        ((self.written - self.una) as f64 / linux::SNDBUF_PAYLOAD_FRACTION) as u64
    }

    fn notsent(&self) -> u64 {
        self.written - self.nxt
    }

    fn memory_free(&self, wake: u32) -> bool {
        self.queued_mem() < self.sk_sndbuf && self.lowat.is_none_or(|l| self.notsent() << wake < l)
    }

    fn autotune(&mut self) {
        if !self.locked {
            let want = linux::autotune_sndbuf((self.cwnd / self.mss as f64) as u64)
                .min(self.limits.tcp_wmem[2].0);
            self.sk_sndbuf = self.sk_sndbuf.max(want);
        }
    }

    /// The application writes what the socket accepts. `jitter` is how long a blocked writer
    /// takes to run again once woken.
    pub(super) fn app_write(&mut self, now: Time, jitter: impl FnOnce() -> Duration) {
        if self.written >= self.target {
            return;
        }
        match self.writer {
            // sk_stream_write_space: a third of the buffer free and (with a low-water
            // mark) less than half of it unsent.
            Writer::Blocked
                if self.queued_mem() * 3 <= self.sk_sndbuf * 2 && self.memory_free(1) =>
            {
                let j = jitter();
                self.writer = if j.is_zero() {
                    Writer::Running
                } else {
                    Writer::Waking(now + j)
                };
            }
            Writer::Waking(at) if now >= at => self.writer = Writer::Running,
            _ => {}
        }
        if self.writer != Writer::Running {
            return;
        }
        if self.memory_free(0) {
            let room =
                linux::sndbuf_payload(self.sk_sndbuf).saturating_sub(self.written - self.una);
            let lowat_room = self
                .lowat
                .map_or(u64::MAX, |l| l.saturating_sub(self.notsent()));
            let n = (self.target - self.written).min(room).min(lowat_room);
            self.written += n;
            if n == 0 {
                self.writer = Writer::Blocked;
                return;
            }
        }
        if self.written < self.target && !self.memory_free(0) {
            self.writer = Writer::Blocked;
        }
    }

    fn writer_waiting(&self) -> bool {
        self.written < self.target && self.writer != Writer::Running
    }

    /// Send what cwnd, the peer's window and the data allow. Returns the segments.
    pub(super) fn transmit(&mut self, now: Time, stream: usize, out: &mut Vec<Seg>) {
        let mut budget = (self.cwnd as u64).saturating_sub(self.pipe);
        while budget > 0 {
            let Some((a, b)) = self.rtx.pop_front() else {
                break;
            };
            let take = (b - a).min(budget);
            if a + take < b {
                self.rtx.push_front((a + take, b));
            }
            out.push(Seg {
                stream,
                start: a,
                end: a + take,
                sent: now,
            });
            self.pipe += take;
            self.retrans_bytes += take;
            budget -= take;
        }
        let data = self.written - self.nxt;
        let rwnd = self.peer_edge.saturating_sub(self.nxt);
        let n = budget.min(data).min(rwnd);
        self.limit = if budget == 0 {
            Limit::Cwnd
        } else if rwnd < budget.min(data) {
            Limit::Rwnd
        } else if data < budget {
            if self.writer_waiting() {
                Limit::Sndbuf
            } else {
                Limit::App
            }
        } else {
            Limit::None
        };
        if matches!(self.limit, Limit::Sndbuf | Limit::App) {
            self.app_limited_until = now + self.srtt();
        }
        if n > 0 {
            out.push(Seg {
                stream,
                start: self.nxt,
                end: self.nxt + n,
                sent: now,
            });
            self.nxt += n;
            self.pipe += n;
        }
        let p = self.period_index(now);
        self.pipe_max[p] = self.pipe_max[p].max(self.pipe);
        if self.limit == Limit::Cwnd {
            self.cwnd_limited[p] = true;
        }
    }

    /// Index of the current measurement period (one smoothed RTT long) in the two-slot
    /// history used for congestion-window validation.
    fn period_index(&mut self, now: Time) -> usize {
        if now.saturating_since(self.period_start) >= self.srtt() {
            self.period_start = now;
            self.pipe_max = [0, self.pipe_max[0]];
            self.cwnd_limited = [false, self.cwnd_limited[0]];
        }
        // Slot 0 is the current period, slot 1 the previous one.
        0
    }

    pub(super) fn account(&mut self, dt: Duration) {
        let ns = dt.as_nanos() as u64;
        if self.una < self.written {
            self.busy_ns += ns;
        }
        match self.limit {
            Limit::Rwnd => self.rwnd_limited_ns += ns,
            Limit::Sndbuf => self.sndbuf_limited_ns += ns,
            _ => {}
        }
    }

    pub(super) fn on_ack(&mut self, now: Time, ack: &Ack) {
        self.pipe = self.pipe.saturating_sub(ack.newly);
        self.delivered += ack.newly;
        self.una = self.una.max(ack.cum);
        self.peer_edge = self.peer_edge.max(ack.edge);
        if let Some(sent) = ack.sent {
            let sample = now.saturating_since(sent);
            match self.srtt {
                None => {
                    self.srtt = Some(sample);
                    self.rttvar = sample / 2;
                }
                Some(s) => {
                    let diff = s.abs_diff(sample);
                    self.rttvar = (self.rttvar * 3 + diff) / 4;
                    self.srtt = Some((s * 7 + sample) / 8);
                }
            }
            self.min_rtt = Some(self.min_rtt.map_or(sample, |m| m.min(sample)));
        }
        if ack.newly == 0 {
            return;
        }
        if now < self.recovery_until {
            return;
        }
        self.in_recovery = false;
        let newly = ack.newly as f64;
        let mss = self.mss as f64;
        if self.cwnd < self.ssthresh {
            let recent_pipe = self.pipe_max[0].max(self.pipe_max[1]) as f64;
            if self.cwnd < 2.0 * recent_pipe + mss {
                self.cwnd += newly;
            }
        } else if self.cwnd_limited[0] || self.cwnd_limited[1] {
            let epoch = *self.epoch.get_or_insert(now);
            let t = now.saturating_since(epoch) + self.srtt();
            let w_max = self.w_max / mss;
            let k = (w_max * (1.0 - BETA) / CUBIC_C).cbrt();
            let x = t.as_secs_f64() - k;
            let target = (CUBIC_C * x * x * x + w_max) * mss;
            let cubic = if target > self.cwnd {
                (target - self.cwnd) * newly / self.cwnd
            } else {
                0.01 * mss * newly / self.cwnd
            };
            let reno = mss * newly / self.cwnd;
            self.cwnd += cubic.max(reno);
        }
        self.autotune();
    }

    pub(super) fn on_loss(&mut self, now: Time, start: u64, end: u64) {
        let len = end - start;
        self.pipe = self.pipe.saturating_sub(len);
        self.lost_bytes += len;
        self.rtx.push_back((start, end));
        if now >= self.recovery_until {
            self.w_max = self.cwnd;
            self.cwnd = (self.cwnd * BETA).max(2.0 * self.mss as f64);
            self.ssthresh = self.cwnd;
            self.epoch = None;
            self.recovery_until = now + self.srtt();
            self.in_recovery = true;
        }
    }

    pub(super) fn record_delivery(&mut self, now: Time) {
        self.delivered_hist.push_back((now, self.delivered));
        let horizon = self.srtt();
        while let Some(&(t, _)) = self.delivered_hist.front() {
            if now.saturating_since(t) > horizon && self.delivered_hist.len() > 2 {
                self.delivered_hist.pop_front();
            } else {
                break;
            }
        }
    }

    fn delivery_rate(&self, now: Time) -> u64 {
        match self.delivered_hist.front() {
            Some(&(t, d)) => {
                let dt = now.saturating_since(t).as_secs_f64();
                if dt <= 0.0 {
                    0
                } else {
                    ((self.delivered - d) as f64 / dt) as u64
                }
            }
            None => 0,
        }
    }

    pub(super) fn done(&self) -> bool {
        self.una >= self.target
    }

    pub(super) fn snapshot(&self, now: Time) -> TcpSnapshot {
        let mss = self.mss;
        let us = |d: Duration| u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
        TcpSnapshot {
            state: TcpState::Established,
            ca_state: if self.in_recovery { 3 } else { 0 },
            snd_mss_bytes: mss as u32,
            rcv_mss_bytes: mss as u32,
            advmss_bytes: mss as u32,
            pmtu_bytes: 1500,
            unacked_segs: (self.nxt - self.una).div_ceil(mss) as u32,
            lost_segs: (self.rtx.iter().map(|(a, b)| b - a).sum::<u64>() / mss) as u32,
            total_retrans_segs: (self.retrans_bytes / mss) as u32,
            rtt_us: us(self.srtt()),
            rttvar_us: us(self.rttvar),
            min_rtt_us: self.min_rtt.map(us),
            snd_ssthresh_segs: if self.ssthresh.is_finite() {
                (self.ssthresh / mss as f64) as u32
            } else {
                i32::MAX as u32
            },
            snd_cwnd_segs: (self.cwnd / mss as f64) as u32,
            bytes_acked: Some(self.una),
            bytes_received: Some(0),
            bytes_sent: Some(self.nxt + self.retrans_bytes),
            bytes_retrans: Some(self.retrans_bytes),
            notsent_bytes: Some(self.notsent() as u32),
            delivery_rate_bytes_per_sec: Some(self.delivery_rate(now)),
            delivery_rate_app_limited: self.app_limited_until > now,
            busy_time_us: Some(self.busy_ns / 1000),
            rwnd_limited_us: Some(self.rwnd_limited_ns / 1000),
            sndbuf_limited_us: Some(self.sndbuf_limited_ns / 1000),
            snd_wnd_bytes: Some(self.peer_edge.saturating_sub(self.una) as u32),
            sndbuf_bytes: Some(self.sk_sndbuf as u32),
            wmem_queued_bytes: Some(self.queued_mem() as u32),
            ..TcpSnapshot::empty()
        }
    }
}

pub(super) struct Receiver {
    limits: HostLimits,
    mss: u64,
    pub(super) rcv_nxt: u64,
    ooo: BTreeMap<u64, u64>,
    ooo_bytes: u64,
    pub(super) sk_rcvbuf: u64,
    locked: bool,
    clamp: u64,
    user_clamp_before_connect: Option<u64>,
    max_window: u64,
    rcv_ssthresh: u64,
    adv_edge: u64,
    space: u64,
    space_seq: u64,
    space_time: Time,
    rcv_rtt: Option<Duration>,
    handshake_rtt: Duration,
    pub(super) first_byte: Option<Time>,
}

impl Receiver {
    pub(super) fn new(mss: u32, limits: &HostLimits) -> Receiver {
        Receiver {
            limits: limits.clone(),
            mss: u64::from(mss),
            rcv_nxt: 0,
            ooo: BTreeMap::new(),
            ooo_bytes: 0,
            sk_rcvbuf: limits.tcp_rmem[1].0,
            locked: false,
            clamp: linux::max_window(linux::MAX_WSCALE),
            user_clamp_before_connect: None,
            max_window: linux::max_window(linux::MAX_WSCALE),
            rcv_ssthresh: 65_535,
            adv_edge: 65_535,
            space: 0,
            space_seq: 0,
            space_time: Time::ZERO,
            rcv_rtt: None,
            handshake_rtt: Duration::from_millis(100),
            first_byte: None,
        }
    }

    /// `SO_RCVBUF`: before connecting it also bounds the window scale and the clamp.
    pub(super) fn set_rcvbuf(&mut self, value: crate::units::Bytes) {
        self.sk_rcvbuf = linux::rcvbuf_after_setsockopt(value, &self.limits);
        self.locked = true;
    }

    /// `TCP_WINDOW_CLAMP`, before (`connected == false`) or after connecting.
    pub(super) fn set_clamp(&mut self, value: u64, connected: bool) {
        let v = value.max(linux::SOCK_MIN_RCVBUF / 2);
        if connected {
            self.clamp = v;
            self.rcv_ssthresh = self.rcv_ssthresh.max(v.min(self.adv_edge - self.rcv_nxt));
        } else {
            self.user_clamp_before_connect = Some(v);
        }
    }

    /// SYN time: choose the window scale and the clamp as `tcp_connect_init` does.
    pub(super) fn connect(&mut self, now: Time, rtt: Duration) {
        let full_space = linux::rcvbuf_window(self.sk_rcvbuf);
        let pre_clamp = match (self.user_clamp_before_connect, self.locked) {
            (Some(c), _) => c,
            (None, true) => full_space,
            (None, false) => linux::max_window(linux::MAX_WSCALE),
        };
        let space = full_space
            .max(self.limits.tcp_rmem[2].0)
            .max(self.limits.rmem_max.0)
            .min(pre_clamp);
        let wscale = linux::window_scale_for(space);
        self.max_window = linux::max_window(wscale);
        self.clamp = pre_clamp.min(self.max_window);
        self.rcv_ssthresh = full_space.min(65_535).min(self.clamp);
        self.adv_edge = self.rcv_ssthresh;
        self.space = self.rcv_ssthresh.min(10 * self.mss);
        self.space_time = now;
        self.handshake_rtt = rtt;
    }

    fn window(&self) -> u64 {
        let free = linux::rcvbuf_window(self.sk_rcvbuf).saturating_sub(self.ooo_bytes);
        free.min(self.rcv_ssthresh)
            .min(self.clamp)
            .min(self.max_window)
    }

    fn update_edge(&mut self) -> bool {
        let edge = self.rcv_nxt + self.window();
        if edge > self.adv_edge {
            self.adv_edge = edge;
            true
        } else {
            false
        }
    }

    /// Data arrived. Returns the ACK to send (the application reads in-order data at once).
    pub(super) fn on_data(&mut self, now: Time, seg: &Seg, reverse_delay: Duration) -> Ack {
        self.first_byte.get_or_insert(now);
        let sample = now.saturating_since(seg.sent) + reverse_delay;
        self.rcv_rtt = Some(match self.rcv_rtt {
            None => sample,
            Some(r) => (r * 7 + sample) / 8,
        });
        let before = self.rcv_nxt + self.ooo_bytes;
        let end = seg.end.min(self.adv_edge.max(self.rcv_nxt));
        if end > self.rcv_nxt && seg.start < end {
            self.insert(seg.start.max(self.rcv_nxt), end);
        }
        let newly = self.rcv_nxt + self.ooo_bytes - before;
        if newly > 0 {
            self.rcv_ssthresh = (self.rcv_ssthresh + 2 * newly).min(self.clamp);
        }
        self.update_edge();
        Ack {
            stream: seg.stream,
            cum: self.rcv_nxt,
            newly,
            edge: self.adv_edge,
            sent: Some(seg.sent),
        }
    }

    fn insert(&mut self, mut a: u64, mut b: u64) {
        // Merge with overlapping or adjacent out-of-order ranges.
        let overlapping: Vec<(u64, u64)> = self
            .ooo
            .range(..=b)
            .filter(|(_, &e)| e >= a)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in overlapping {
            self.ooo.remove(&s);
            self.ooo_bytes -= e - s;
            a = a.min(s);
            b = b.max(e);
        }
        if a <= self.rcv_nxt {
            self.rcv_nxt = self.rcv_nxt.max(b);
        } else {
            self.ooo.insert(a, b);
            self.ooo_bytes += b - a;
        }
    }

    /// Receive autotuning (`tcp_rcv_space_adjust`) once per receiver RTT. Returns whether
    /// the window edge moved (a window update is due).
    pub(super) fn tick(&mut self, now: Time) -> bool {
        let Some(rtt) = self.rcv_rtt else {
            return false;
        };
        if now.saturating_since(self.space_time) < rtt {
            return false;
        }
        let copied = self.rcv_nxt - self.space_seq;
        if copied > self.space {
            if !self.locked && self.limits.moderate_rcvbuf {
                let mut rcvwin = 2 * copied + 16 * self.mss;
                let grow = (rcvwin as u128 * u128::from(copied - self.space)
                    / u128::from(self.space.max(1))) as u64;
                rcvwin += 2 * grow;
                let rcvbuf = ((rcvwin as f64 / linux::RCVBUF_WINDOW_FRACTION) as u64)
                    .min(self.limits.tcp_rmem[2].0);
                if rcvbuf > self.sk_rcvbuf {
                    self.sk_rcvbuf = rcvbuf;
                    self.clamp = linux::rcvbuf_window(rcvbuf).min(self.max_window);
                }
            }
            self.space = copied;
        }
        self.space_seq = self.rcv_nxt;
        self.space_time = now;
        self.update_edge()
    }

    /// A pure window update carrying the current edge.
    pub(super) fn ack_now(&self, stream: usize) -> Ack {
        Ack {
            stream,
            cum: self.rcv_nxt,
            newly: 0,
            edge: self.adv_edge,
            sent: None,
        }
    }

    /// A window update after the tuner changed the buffer or clamp, if the edge moved.
    pub(super) fn window_update(&mut self, stream: usize) -> Option<Ack> {
        self.update_edge().then(|| self.ack_now(stream))
    }

    pub(super) fn rmem_alloc(&self) -> u64 {
        (self.ooo_bytes as f64 / linux::RCVBUF_WINDOW_FRACTION) as u64
    }

    pub(super) fn snapshot(&self) -> TcpSnapshot {
        let us = |d: Duration| u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
        TcpSnapshot {
            state: TcpState::Established,
            snd_mss_bytes: self.mss as u32,
            rcv_mss_bytes: self.mss as u32,
            advmss_bytes: self.mss as u32,
            pmtu_bytes: 1500,
            rtt_us: us(self.handshake_rtt),
            min_rtt_us: Some(us(self.handshake_rtt)),
            snd_cwnd_segs: 10,
            rcv_rtt_us: self.rcv_rtt.map_or(0, us),
            rcv_space_bytes: self.space as u32,
            rcv_ssthresh_bytes: self.rcv_ssthresh.min(u64::from(u32::MAX)) as u32,
            bytes_acked: Some(0),
            bytes_received: Some(self.rcv_nxt),
            delivery_rate_app_limited: true,
            rcv_wnd_bytes: Some((self.adv_edge - self.rcv_nxt).min(u64::from(u32::MAX)) as u32),
            rcvbuf_bytes: Some(self.sk_rcvbuf.min(u64::from(u32::MAX)) as u32),
            rmem_alloc_bytes: Some(self.rmem_alloc().min(u64::from(u32::MAX)) as u32),
            ..TcpSnapshot::empty()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Bytes;

    fn defaults() -> HostLimits {
        HostLimits::linux_defaults()
    }

    #[test]
    fn locked_receive_buffer_before_connect_fixes_a_small_window_scale() {
        let mut r = Receiver::new(1448, &defaults());
        r.set_rcvbuf(Bytes::kib(64));
        r.connect(Time::ZERO, Duration::from_millis(10));
        // 128 KiB of buffer, 64 KiB of window: scale 1, at most 128 KiB of window ever.
        assert_eq!(r.max_window, linux::max_window(1));
        // Growing the buffer after connecting does not raise the clamp...
        r.set_rcvbuf(Bytes::mib(4));
        assert_eq!(r.clamp, 65_536);
        // ... TCP_WINDOW_CLAMP does, up to what the scale can express.
        r.set_clamp(4 << 20, true);
        assert_eq!(r.window(), linux::max_window(1).min(65_535));
    }

    #[test]
    fn unlocked_receiver_scales_from_tcp_rmem_max_and_autotunes() {
        let mut r = Receiver::new(1448, &defaults());
        r.connect(Time::ZERO, Duration::from_millis(10));
        assert_eq!(r.max_window, linux::max_window(10));
        let mut now = Time::ZERO;
        let mut seq = 0;
        // The sender doubles per RTT; the receiver reads everything at once.
        for round in 0..8u64 {
            now += Duration::from_millis(10);
            let n = 14_480 << round;
            let seg = Seg {
                stream: 0,
                start: seq,
                end: seq + n.min(r.adv_edge - seq),
                sent: now - Duration::from_millis(5),
            };
            seq = seg.end;
            r.on_data(now, &seg, Duration::from_millis(5));
            r.tick(now);
        }
        assert!(r.sk_rcvbuf > 4 << 20, "autotuning grew it: {}", r.sk_rcvbuf);
        assert!(r.sk_rcvbuf <= 32 << 20);
    }

    #[test]
    fn out_of_order_data_waits_for_the_hole() {
        let mut r = Receiver::new(1448, &defaults());
        r.connect(Time::ZERO, Duration::from_millis(10));
        let seg = |start, end| Seg {
            stream: 0,
            start,
            end,
            sent: Time::ZERO,
        };
        let a = r.on_data(Time::from_millis(1), &seg(1000, 3000), Duration::ZERO);
        assert_eq!((a.cum, a.newly), (0, 2000));
        assert_eq!(r.rmem_alloc(), 4000, "out-of-order bytes cost truesize");
        let b = r.on_data(Time::from_millis(2), &seg(0, 1000), Duration::ZERO);
        assert_eq!((b.cum, b.newly), (3000, 1000));
        assert_eq!(r.rmem_alloc(), 0);
        let dup = r.on_data(Time::from_millis(3), &seg(0, 1000), Duration::ZERO);
        assert_eq!(dup.newly, 0);
    }

    #[test]
    fn blocked_writer_waits_until_a_third_of_the_buffer_is_free() {
        let mut s = Sender::new(1448, &defaults());
        s.set_sndbuf(Bytes(100_000)); // 200 KB of kernel memory, 180 KB of payload
        s.target = 10 << 20;
        s.app_write(Time::ZERO, || Duration::ZERO);
        assert_eq!(s.written, 180_000);
        // Half a third acknowledged: still asleep.
        s.una = 30_000;
        s.app_write(Time::from_millis(1), || Duration::ZERO);
        assert_eq!(s.written, 180_000);
        // A third free: it runs again and fills the buffer.
        s.una = 60_000;
        s.app_write(Time::from_millis(2), || Duration::ZERO);
        assert_eq!(s.written, 240_000);
    }

    #[test]
    fn notsent_lowat_bounds_unsent_data() {
        let mut s = Sender::new(1448, &defaults());
        s.set_sndbuf(Bytes::mib(4));
        s.set_lowat(100_000);
        s.target = 10 << 20;
        s.app_write(Time::ZERO, || Duration::ZERO);
        assert_eq!(s.written, 100_000);
        s.nxt = 60_000; // sent 60 KB: 40 KB unsent, less than half the mark
        s.app_write(Time::from_millis(1), || Duration::from_micros(500));
        assert_eq!(s.written, 100_000, "woken, but not running yet");
        s.app_write(Time::from_millis(2), || Duration::ZERO);
        assert_eq!(s.written, 160_000);
    }

    #[test]
    fn send_autotuning_follows_cwnd_up_to_tcp_wmem_max() {
        let mut s = Sender::new(1448, &defaults());
        s.established(Time::ZERO, Duration::from_millis(10));
        assert_eq!(s.sk_sndbuf, linux::autotune_sndbuf(10));
        s.cwnd = 100.0 * 1448.0;
        s.autotune();
        assert_eq!(s.sk_sndbuf, linux::autotune_sndbuf(100));
        s.cwnd = 100_000.0 * 1448.0;
        s.autotune();
        assert_eq!(s.sk_sndbuf, 4 << 20);
        s.set_sndbuf(Bytes::kib(64));
        s.cwnd *= 2.0;
        s.autotune();
        assert_eq!(s.sk_sndbuf, 128 << 10, "locked: autotuning is off");
    }
}
