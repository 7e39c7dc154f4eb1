//! `drs`: Dynamic Right-Sizing (Fisk & Feng; Weigle & Feng), receiver side.
//!
//! The receiver estimates the sender's congestion window as the bytes it received during one
//! receiver RTT, and advertises twice the largest estimate so that the window never limits
//! the sender (twice: one window for the round of a loss, one to keep the ACK clock going,
//! and room for slow start to double). The sender keeps Linux's own send autotuning.
//!
//! # The Linux mapping, and what it costs
//!
//! Three kernel facts shape it: the window scale is fixed at SYN time; a `SO_RCVBUF` set
//! before `connect()`/`listen()` both locks the buffer (receive autotuning off) and bounds
//! the window scale and the window clamp; `TCP_WINDOW_CLAMP` set before connecting shrinks
//! the scale, set afterwards it moves the clamp both ways (the advertised window itself never
//! shrinks).
//!
//! 1. Before connecting: `SO_RCVBUF` = the largest value allowed (`rmem_max`, or the
//!    autotuning maximum when `SO_RCVBUFFORCE` is available), so the window scale and the
//!    initial clamp cover the largest window DRS may ever advertise. This costs no memory:
//!    `sk_rcvbuf` is a limit on queued data, not an allocation.
//! 2. Once established: the window clamp drops to the initial window (64 KiB, Linux's initial
//!    window) and `SO_RCVBUF` to the value that supports it, so the kernel-held limit follows
//!    what DRS advertises.
//! 3. Every receiver RTT: estimate = bytes received in the interval, scaled to one RTT. When
//!    twice the largest estimate exceeds the window, raise `SO_RCVBUF` and the clamp
//!    together (a buffer grown after connecting does not raise the clamp by itself).
//!    They only grow: DRS advertises twice the *largest* estimate, and the kernel never
//!    shrinks an advertised window anyway, so data in flight is never cut off.
//!
//! Memory: the locked buffer holds about 2 x the window in kernel terms (received 1500-byte
//! frames cost about twice their payload), so a stream at full rate holds a limit of about
//! 4 x its share of the BDP (`SO_RCVBUF` = 2 x the largest per-RTT estimate, doubled by the
//! kernel). What is actually used (`sk_rmem_alloc`) is data waiting for the reader or for a
//! retransmission: close to zero with a fast reader and no loss, up to one window of frames
//! during recovery. Linux's own autotuning (itself DRS-derived) budgets the same 2 x, and
//! up to 4 x during slow start, but may grow to `tcp_rmem[2]` (32 MiB here) where this user-space
//! DRS stops at `rmem_max` (4 MiB by default): on a default host it advertises at most
//! about 4 MiB per stream.
//!
//! The receiver RTT is `tcpi_rcv_rtt` (measured with timestamps). Until it is measured (0),
//! the tuner uses the hint's RTT (the control connection's), then the socket's own RTT
//! estimate (from the handshake), then 100 ms.

use super::common::{interval_from_rtt, Outbox};
use crate::linux;
use crate::snapshot::TcpSnapshot;
use crate::time::Time;
use crate::tuner::{Action, ConnEvent, Role, Tuner, TunerContext};
use crate::units::Bytes;
use std::time::Duration;

/// Configuration of the [`DrsTuner`].
#[derive(Clone, Debug)]
pub struct DrsConfig {
    initial_window: Bytes,
    factor: f64,
    max_buffer: Option<Bytes>,
    default_rtt: Duration,
}

impl Default for DrsConfig {
    /// 64 KiB initial window, factor 2, maximum from the host limits, 100 ms default RTT.
    fn default() -> Self {
        DrsConfig {
            initial_window: Bytes::kib(64),
            factor: 2.0,
            max_buffer: None,
            default_rtt: Duration::from_millis(100),
        }
    }
}

impl DrsConfig {
    /// The window advertised before the first estimate.
    pub fn initial_window(mut self, w: Bytes) -> Self {
        self.initial_window = Bytes(w.0.max(linux::SOCK_MIN_RCVBUF));
        self
    }

    /// Advertise `factor` x the largest estimate (2 in DRS; values below 1 become 1).
    pub fn factor(mut self, f: f64) -> Self {
        self.factor = if f.is_finite() { f.max(1.0) } else { 2.0 };
        self
    }

    /// The `SO_RCVBUF` value set before connecting (bounds the window scale and the largest
    /// window). Default: `rmem_max`, or `tcp_rmem[2]` when forcing is allowed.
    pub fn max_buffer(mut self, b: Bytes) -> Self {
        self.max_buffer = Some(b);
        self
    }

    /// RTT used when neither `tcpi_rcv_rtt`, the hint nor the socket's RTT is known.
    pub fn default_rtt(mut self, rtt: Duration) -> Self {
        self.default_rtt = rtt;
        self
    }

    /// Build the tuner.
    pub fn build(&self, ctx: TunerContext) -> DrsTuner {
        let max_value = self.max_buffer.unwrap_or(if ctx.limits.can_force {
            ctx.limits.rmem_max.max(ctx.limits.tcp_rmem[2])
        } else {
            ctx.limits.rmem_max
        });
        let max_window =
            linux::rcvbuf_window(linux::rcvbuf_after_setsockopt(max_value, &ctx.limits));
        DrsTuner {
            limits: ctx.limits.clone(),
            role: ctx.role,
            factor: self.factor,
            max_value,
            max_window,
            initial_window: self.initial_window.0.min(max_window),
            window: 0,
            largest: 0,
            anchor: None,
            hint_rtt: ctx.hint.rtt,
            default_rtt: self.default_rtt,
            rtt: ctx.hint.rtt,
            stopped: false,
            out: Outbox::default(),
        }
    }
}

/// Dynamic Right-Sizing at the receiver; does nothing at the sender.
#[derive(Debug)]
pub struct DrsTuner {
    limits: crate::tuner::HostLimits,
    role: Role,
    factor: f64,
    max_value: Bytes,
    max_window: u64,
    initial_window: u64,
    /// The window (clamp) advertised now; 0 before `Established`.
    window: u64,
    /// Largest estimate of the sender's window, bytes per receiver RTT.
    largest: u64,
    /// Start of the current measurement interval: time and bytes received.
    anchor: Option<(Time, u64)>,
    hint_rtt: Option<Duration>,
    default_rtt: Duration,
    rtt: Option<Duration>,
    stopped: bool,
    out: Outbox,
}

impl DrsTuner {
    /// The window advertised now (0 before the connection is established).
    pub fn window(&self) -> Bytes {
        Bytes(self.window)
    }

    /// The largest estimate of the sender's window so far.
    pub fn largest_estimate(&self) -> Bytes {
        Bytes(self.largest)
    }

    /// Take over a connection whose window another tuner advertised (`window`): DRS grows
    /// it from there.
    pub fn adopt(&mut self, window: Bytes) {
        self.window = window.0;
    }

    /// Size the window anew while the connection runs (a plan made when the path's rate was
    /// measured): advertise `window` now if that is more than today's (the advertised window
    /// never shrinks), grow by `factor` x the largest estimate from now on, and never past
    /// what `max_buffer` gives.
    pub fn retarget(&mut self, window: Bytes, max_buffer: Bytes, factor: f64) {
        self.factor = if factor.is_finite() {
            factor.max(1.0)
        } else {
            2.0
        };
        self.max_value = max_buffer;
        self.max_window =
            linux::rcvbuf_window(linux::rcvbuf_after_setsockopt(max_buffer, &self.limits));
        self.initial_window = window
            .0
            .clamp(linux::SOCK_MIN_RCVBUF, self.max_window.max(1));
        if self.window > 0 && self.initial_window > self.window {
            self.advertise(self.initial_window);
        }
    }

    fn rcv_rtt(&self, s: &TcpSnapshot) -> Duration {
        if s.rcv_rtt_us > 0 {
            return Duration::from_micros(u64::from(s.rcv_rtt_us));
        }
        self.hint_rtt
            .or_else(|| s.rtt())
            .or_else(|| s.min_rtt())
            .unwrap_or(self.default_rtt)
    }

    fn advertise(&mut self, window: u64) {
        self.window = window;
        self.out
            .push(Action::SetRcvBuf(linux::rcvbuf_value_for_window(window)));
        self.out.push(Action::SetWindowClamp(Bytes(window)));
    }

    fn on_receiver_snapshot(&mut self, now: Time, s: &TcpSnapshot) {
        let rtt = self.rcv_rtt(s);
        self.rtt = Some(rtt);
        let received = match s.bytes_received {
            Some(b) => b,
            None => {
                // Old kernel: fall back on the kernel's own per-RTT estimate.
                self.largest = self.largest.max(u64::from(s.rcv_space_bytes));
                self.maybe_grow(s);
                return;
            }
        };
        let Some((t0, b0)) = self.anchor else {
            self.anchor = Some((now, received));
            return;
        };
        let dt = now.saturating_since(t0);
        if dt < rtt || dt.is_zero() {
            return;
        }
        let bytes = received.saturating_sub(b0);
        let est = (u128::from(bytes) * rtt.as_nanos() / dt.as_nanos()) as u64;
        self.largest = self.largest.max(est);
        self.anchor = Some((now, received));
        self.maybe_grow(s);
    }

    fn maybe_grow(&mut self, s: &TcpSnapshot) {
        let mut target = super::common::scale(self.largest, self.factor);
        // Never below what the kernel already advertised (data may be in flight up to it).
        target = target.max(u64::from(s.rcv_wnd_bytes.unwrap_or(0)));
        let target = target.clamp(self.initial_window, self.max_window);
        // Grow in steps of at least 1/16 to spare syscalls.
        if target > self.window + self.window / 16 {
            self.advertise(target);
        }
    }
}

impl Tuner for DrsTuner {
    fn name(&self) -> &'static str {
        "drs"
    }

    fn handle_event(&mut self, _now: Time, event: ConnEvent) {
        if self.stopped || self.role == Role::Sender {
            return;
        }
        match event {
            ConnEvent::BeforeConnect => self.out.push(Action::SetRcvBuf(self.max_value)),
            ConnEvent::Established => self.advertise(self.initial_window),
            ConnEvent::UserSetBuffer | ConnEvent::Closed => self.stopped = true,
        }
    }

    fn handle_snapshot(&mut self, now: Time, snapshot: &TcpSnapshot) {
        if self.stopped || self.role == Role::Sender || self.window == 0 {
            return;
        }
        self.on_receiver_snapshot(now, snapshot);
    }

    fn poll_action(&mut self) -> Option<Action> {
        self.out.pop()
    }

    fn poll_interval(&self) -> Option<Duration> {
        (!self.stopped && self.role == Role::Receiver).then(|| interval_from_rtt(self.rtt, 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuner::PathHint;

    fn receiver(rtt_hint_ms: Option<u64>) -> DrsTuner {
        let ctx = TunerContext {
            hint: PathHint {
                rtt: rtt_hint_ms.map(Duration::from_millis),
                rate: None,
                ..Default::default()
            },
            ..TunerContext::for_tests(Role::Receiver)
        };
        let mut t = DrsConfig::default().build(ctx);
        t.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        assert_eq!(t.poll_action(), Some(Action::SetRcvBuf(Bytes::mib(4))));
        assert_eq!(t.poll_action(), None);
        t.handle_event(Time::ZERO, ConnEvent::Established);
        assert_eq!(t.poll_action(), Some(Action::SetRcvBuf(Bytes::kib(64))));
        assert_eq!(
            t.poll_action(),
            Some(Action::SetWindowClamp(Bytes::kib(64)))
        );
        t
    }

    fn rx(received: u64, rcv_rtt_ms: u32) -> TcpSnapshot {
        TcpSnapshot {
            bytes_received: Some(received),
            rcv_rtt_us: rcv_rtt_ms * 1000,
            ..TcpSnapshot::empty()
        }
    }

    fn clamp_of(t: &mut DrsTuner) -> Option<Bytes> {
        let mut clamp = None;
        while let Some(a) = t.poll_action() {
            if let Action::SetWindowClamp(b) = a {
                clamp = Some(b);
            }
        }
        clamp
    }

    #[test]
    fn locks_the_maximum_before_connect_then_advertises_the_initial_window() {
        let t = receiver(None);
        assert_eq!(t.window(), Bytes::kib(64));
        assert_eq!(t.poll_interval(), Some(Duration::from_millis(100)));
    }

    #[test]
    fn grows_window_to_twice_the_bytes_received_per_rtt_in_slow_start() {
        let mut t = receiver(None);
        let mut now = Time::ZERO;
        let mut total = 0;
        t.handle_snapshot(now, &rx(total, 50));
        let mut flight = 64 * 1024;
        for _ in 0..5 {
            now += Duration::from_millis(50);
            total += flight;
            t.handle_snapshot(now, &rx(total, 50));
            assert_eq!(clamp_of(&mut t), Some(Bytes(2 * flight)));
            flight *= 2; // the sender doubles into the larger window
        }
        assert_eq!(t.largest_estimate(), Bytes(1024 * 1024));
    }

    #[test]
    fn keeps_the_largest_estimate_when_the_rate_drops_after_a_loss() {
        let mut t = receiver(None);
        let mut now = Time::ZERO;
        t.handle_snapshot(now, &rx(0, 20));
        now += Duration::from_millis(20);
        t.handle_snapshot(now, &rx(1_000_000, 20));
        assert_eq!(clamp_of(&mut t), Some(Bytes(2_000_000)));
        now += Duration::from_millis(20);
        t.handle_snapshot(now, &rx(1_500_000, 20));
        assert_eq!(clamp_of(&mut t), None, "never shrinks");
        assert_eq!(t.window(), Bytes(2_000_000));
    }

    #[test]
    fn congestion_avoidance_sawtooth_leaves_the_window_alone() {
        let mut t = receiver(None);
        let mut now = Time::ZERO;
        let mut total = 0;
        t.handle_snapshot(now, &rx(total, 20));
        // Per-RTT deliveries between 1 and 1.9 MB (a sawtooth): the first peak sets the
        // window (twice it, give or take the 1/16 step that spares syscalls).
        let mut after_first_peak = Bytes::ZERO;
        for k in 0..30u64 {
            now += Duration::from_millis(20);
            total += 1_000_000 + (k % 10) * 100_000;
            t.handle_snapshot(now, &rx(total, 20));
            if k == 9 {
                after_first_peak = t.window();
                clamp_of(&mut t);
            }
        }
        assert_eq!(
            clamp_of(&mut t),
            None,
            "no change over two more sawtooth periods"
        );
        assert_eq!(t.window(), after_first_peak);
        assert_eq!(t.largest_estimate(), Bytes(1_900_000));
        assert!(t.window().0 * 16 >= 2 * 1_900_000 * 15);
    }

    #[test]
    fn measures_over_a_whole_rtt_when_sampled_faster() {
        let mut t = receiver(None);
        t.handle_snapshot(Time::ZERO, &rx(0, 100));
        t.handle_snapshot(Time::from_millis(50), &rx(500_000, 100));
        assert_eq!(clamp_of(&mut t), None, "half an RTT is not a measurement");
        t.handle_snapshot(Time::from_millis(100), &rx(1_000_000, 100));
        assert_eq!(clamp_of(&mut t), Some(Bytes(2_000_000)));
    }

    #[test]
    fn falls_back_to_the_hint_rtt_while_rcv_rtt_is_unmeasured() {
        let mut t = receiver(Some(10));
        t.handle_snapshot(Time::ZERO, &rx(0, 0));
        // 20 ms at 500 MB/s: 10 MB, i.e. 5 MB per 10 ms hint RTT.
        t.handle_snapshot(Time::from_millis(20), &rx(10_000_000, 0));
        assert_eq!(t.largest_estimate(), Bytes(5_000_000));
        // Capped at what rmem_max supports (4 MiB of SO_RCVBUF, about 4 MiB of window).
        assert_eq!(clamp_of(&mut t), Some(Bytes(4 << 20)));
    }

    #[test]
    fn slow_sender_keeps_a_small_window() {
        let mut t = receiver(None);
        let mut now = Time::ZERO;
        let mut total = 0;
        for _ in 0..20 {
            t.handle_snapshot(now, &rx(total, 50));
            now += Duration::from_millis(50);
            total += 10_000; // app-limited sender: 10 KB per RTT
        }
        assert_eq!(clamp_of(&mut t), None);
        assert_eq!(t.window(), Bytes::kib(64));
    }

    #[test]
    fn rtt_increase_raises_the_estimate_at_the_same_rate() {
        let mut t = receiver(None);
        t.handle_snapshot(Time::ZERO, &rx(0, 10));
        t.handle_snapshot(Time::from_millis(10), &rx(100_000, 10));
        assert_eq!(clamp_of(&mut t), Some(Bytes(200_000)));
        // Same 10 MB/s, but the path now takes 40 ms.
        t.handle_snapshot(Time::from_millis(50), &rx(500_000, 40));
        assert_eq!(clamp_of(&mut t), Some(Bytes(800_000)));
    }

    #[test]
    fn never_advertises_less_than_the_kernel_already_did() {
        let mut t = receiver(None);
        t.handle_snapshot(Time::ZERO, &rx(0, 10));
        let mut s = rx(1000, 10);
        s.rcv_wnd_bytes = Some(300_000);
        t.handle_snapshot(Time::from_millis(10), &s);
        assert_eq!(clamp_of(&mut t), Some(Bytes(300_000)));
    }

    #[test]
    fn sender_side_and_user_buffers_are_left_alone() {
        let mut s = DrsConfig::default().build(TunerContext::for_tests(Role::Sender));
        s.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        s.handle_event(Time::ZERO, ConnEvent::Established);
        s.handle_snapshot(Time::from_millis(10), &rx(1_000_000, 10));
        assert_eq!(s.poll_action(), None);
        assert_eq!(s.poll_interval(), None);

        let mut r = receiver(None);
        r.handle_event(Time::ZERO, ConnEvent::UserSetBuffer);
        r.handle_snapshot(Time::ZERO, &rx(0, 10));
        r.handle_snapshot(Time::from_millis(10), &rx(1_000_000, 10));
        assert_eq!(r.poll_action(), None);
        assert_eq!(r.poll_interval(), None);
    }

    #[test]
    fn old_kernel_without_byte_counters_uses_rcv_space() {
        let mut t = receiver(None);
        let s = TcpSnapshot {
            rcv_space_bytes: 500_000,
            ..TcpSnapshot::empty()
        };
        t.handle_snapshot(Time::from_millis(10), &s);
        assert_eq!(clamp_of(&mut t), Some(Bytes(1_000_000)));
    }
}
