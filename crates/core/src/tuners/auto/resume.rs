//! Careful resume at the sender: start a known path at its known rate.
//!
//! The idea is the IETF's Careful Resume (draft-ietf-tsvwg-careful-resume) and Enable's
//! database: when the path's rate was measured with a full pipe, recently, at the RTT the
//! control connection shows now ([`PathHint::resume`](crate::PathHint::resume)), slow start's
//! dozen round trips from ten segments are wasted. The transfer's driver gives new
//! connections to the peer a large initial window (a per-destination route's `initcwnd`,
//! which needs `CAP_NET_ADMIN`); this pacer caps each stream's sending rate at its share of
//! the saved rate with `SO_MAX_PACING_RATE` (Linux then paces in TCP itself), so that the
//! first window goes out at the path's rate instead of as one burst into the bottleneck's
//! queue.
//!
//! The retreat: the cap is lifted, and the connection is on its congestion control alone,
//! after the first two round trips (the initial window has been delivered), or at once when
//! a segment is retransmitted (the saved rate was too much: the congestion control's loss
//! response takes over from the window it had) or when the RTT exceeds the saved one by a
//! quarter (a queue builds or the path changed).

use crate::snapshot::TcpSnapshot;
use crate::time::Time;
use crate::tuner::Action;
use crate::units::Rate;
use std::time::Duration;

/// Where the pacer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResumeState {
    /// Before the handshake.
    Pending,
    /// Paced at the saved rate since the handshake.
    Pacing(Time),
    /// The cap was lifted: normal behaviour.
    Lifted(LiftReason),
}

/// Why the pacing cap was lifted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiftReason {
    /// Two round trips passed: the initial window went out at the saved rate.
    Resumed,
    /// A segment was retransmitted.
    Loss,
    /// The RTT grew past 1.25 x the saved one.
    RttGrew,
    /// The path's rate was learned anew while the transfer ran.
    NewHint,
    /// The connection closed first.
    Closed,
}

/// The pacing side of careful resume for one stream (see the module docs).
#[derive(Clone, Debug)]
pub struct ResumePacer {
    rate: Rate,
    rtt: Duration,
    state: ResumeState,
}

/// The RTT may exceed the saved one by this factor before the pacer retreats.
const RTT_SLACK: f64 = 1.25;

/// Whether an RTT measured now is the saved one's path: within 0.8-1.25 x of it (a rerouted
/// path, or a claim that does not match the path, is another path). Both ends of careful
/// resume decide with it: the client against its database's entry, the server against the
/// client's word.
pub fn same_path_rtt(now: Duration, saved: Duration) -> bool {
    let (now, saved) = (now.as_secs_f64(), saved.as_secs_f64());
    saved > 0.0 && now <= saved * RTT_SLACK && now >= saved / RTT_SLACK
}
/// Round trips paced at the saved rate.
const PACED_ROUNDS: u32 = 2;

impl ResumePacer {
    /// Pace a stream at `rate` (its share of the path's) on a path of `rtt`.
    pub fn new(rate: Rate, rtt: Duration) -> ResumePacer {
        ResumePacer {
            rate: Rate(rate.0.max(1)),
            rtt,
            state: ResumeState::Pending,
        }
    }

    /// The state.
    pub fn state(&self) -> ResumeState {
        self.state
    }

    /// The cap to set before connecting.
    pub fn before_connect(&self) -> Action {
        Action::SetMaxPacingRate(Some(self.rate))
    }

    /// The handshake completed: the paced rounds start.
    pub fn established(&mut self, now: Time) {
        if self.state == ResumeState::Pending {
            self.state = ResumeState::Pacing(now);
        }
    }

    /// A sample: the action that lifts the cap, when it is time.
    pub fn on_snapshot(&mut self, now: Time, s: &TcpSnapshot) -> Option<Action> {
        let ResumeState::Pacing(since) = self.state else {
            return None;
        };
        let reason = if s.total_retrans_segs > 0 || s.bytes_retrans.is_some_and(|b| b > 0) {
            LiftReason::Loss
        } else if s.rtt_us > 0 && f64::from(s.rtt_us) > self.rtt.as_secs_f64() * 1e6 * RTT_SLACK {
            LiftReason::RttGrew
        } else if now.saturating_since(since) >= self.rtt * PACED_ROUNDS {
            LiftReason::Resumed
        } else {
            return None;
        };
        self.lift(reason)
    }

    /// Lift the cap now (a new hint, the connection closing).
    pub fn lift(&mut self, reason: LiftReason) -> Option<Action> {
        match self.state {
            ResumeState::Lifted(_) => None,
            ResumeState::Pending => {
                self.state = ResumeState::Lifted(reason);
                // Nothing was sent yet, but the cap was set before connecting.
                Some(Action::SetMaxPacingRate(None))
            }
            ResumeState::Pacing(_) => {
                self.state = ResumeState::Lifted(reason);
                Some(Action::SetMaxPacingRate(None))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(rtt_ms: u32, retrans: u32) -> TcpSnapshot {
        TcpSnapshot {
            rtt_us: rtt_ms * 1000,
            total_retrans_segs: retrans,
            ..TcpSnapshot::empty()
        }
    }

    #[test]
    fn a_path_is_the_same_within_a_quarter_of_its_saved_rtt() {
        let ms = Duration::from_millis;
        assert!(same_path_rtt(ms(100), ms(100)));
        assert!(same_path_rtt(ms(125), ms(100)));
        assert!(same_path_rtt(ms(80), ms(100)));
        assert!(!same_path_rtt(ms(126), ms(100)));
        assert!(!same_path_rtt(ms(79), ms(100)));
        assert!(!same_path_rtt(ms(1), Duration::ZERO));
    }

    fn pacer() -> ResumePacer {
        ResumePacer::new(Rate::mbit(125), Duration::from_millis(100))
    }

    #[test]
    fn paces_two_round_trips_then_lifts() {
        let mut p = pacer();
        assert_eq!(
            p.before_connect(),
            Action::SetMaxPacingRate(Some(Rate::mbit(125)))
        );
        // No sample matters before the handshake.
        assert_eq!(p.on_snapshot(Time::from_millis(50), &snap(100, 0)), None);
        p.established(Time::from_millis(100));
        assert_eq!(p.on_snapshot(Time::from_millis(200), &snap(101, 0)), None);
        assert_eq!(p.on_snapshot(Time::from_millis(299), &snap(110, 0)), None);
        assert_eq!(
            p.on_snapshot(Time::from_millis(300), &snap(110, 0)),
            Some(Action::SetMaxPacingRate(None))
        );
        assert_eq!(p.state(), ResumeState::Lifted(LiftReason::Resumed));
        // Once.
        assert_eq!(p.on_snapshot(Time::from_millis(400), &snap(300, 5)), None);
    }

    #[test]
    fn retreats_at_once_on_a_loss_or_a_longer_rtt() {
        let mut p = pacer();
        p.established(Time::ZERO);
        assert!(p
            .on_snapshot(Time::from_millis(20), &snap(100, 1))
            .is_some());
        assert_eq!(p.state(), ResumeState::Lifted(LiftReason::Loss));

        let mut q = pacer();
        q.established(Time::ZERO);
        assert_eq!(q.on_snapshot(Time::from_millis(20), &snap(125, 0)), None);
        assert!(q
            .on_snapshot(Time::from_millis(30), &snap(126, 0))
            .is_some());
        assert_eq!(q.state(), ResumeState::Lifted(LiftReason::RttGrew));
    }

    #[test]
    fn a_new_hint_lifts_the_cap_even_before_the_handshake() {
        let mut p = pacer();
        assert_eq!(
            p.lift(LiftReason::NewHint),
            Some(Action::SetMaxPacingRate(None))
        );
        assert_eq!(p.lift(LiftReason::Closed), None);
    }
}
