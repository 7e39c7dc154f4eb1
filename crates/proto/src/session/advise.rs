//! The client's side of an advice (`tcptune advise`) as a state machine: server messages,
//! stream failures and time in; messages, the measurement's streams and the answer out.
//!
//! # Calling order
//!
//! 1. [`AdviseClient::new`]: the first flight (`Hello`, `Advise`) is queued at once.
//! 2. Drain [`AdviseClient::poll_output`] after every call and carry the outputs out in
//!    order: messages to send, [`AdviseOutput::Measure`] (open the streams the server asks
//!    for and move data on them until the answer), then [`AdviseOutput::Done`] or
//!    [`AdviseOutput::Failed`] (stop the measurement's engine either way).
//! 3. Feed [`AdviseClient::handle_msg`] (server messages),
//!    [`AdviseClient::handle_stream_failed`] (a measurement stream could not be opened),
//!    [`AdviseClient::handle_closed`] (the server closed the control connection), and
//!    [`AdviseClient::handle_timeout`] at [`AdviseClient::poll_timeout`].
//!
//! # Rules
//!
//! * A challenge is answered once (with the proof over the server's nonce), then the
//!   request is sent again.
//! * The server must answer within the connect timeout; once it asked for a measurement,
//!   within the measurement's bound plus [`ANSWER_GRACE`].
//! * What the server asks for is bounded before anything is opened: at most
//!   [`MAX_MEASURE_STREAMS`] streams, [`MAX_MEASURE`] of measurement, messages of at most
//!   16 MiB; a second `Measure`, or any message of a transfer, is a protocol error.

use super::client::{Failure, StreamFailed, Violation};
use crate::advice::Advice;
use crate::auth::Secret;
use crate::keys::KeyShare;
use crate::wire::{self, AdviseRequest, ClientAuth, ClientMsg, ServerMsg, Token, PROTOCOL_VERSION};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Most streams a server may ask a measurement to open.
pub(crate) const MAX_MEASURE_STREAMS: u32 = 16;
/// The longest measurement a server may ask for.
pub(crate) const MAX_MEASURE: Duration = Duration::from_secs(10);
/// Time the server has to answer after the measurement's bound.
pub(crate) const ANSWER_GRACE: Duration = Duration::from_secs(10);
/// The largest message of a measurement.
const MAX_MESSAGE: u64 = 16 << 20;

/// What the client needs to know.
#[derive(Clone, Debug)]
pub struct AdvisePlan {
    /// The session's token.
    pub token: Token,
    /// The shared secret, a fresh nonce and this host's clock (Unix seconds).
    pub auth: Option<(Secret, [u8; 32], u64)>,
    /// This end's ephemeral X25519 public key (see [`crate::keys`]).
    pub key_share: KeyShare,
    /// What the client asks for.
    pub request: AdviseRequest,
    /// Time for the server to answer (or to ask for a measurement).
    pub connect_timeout: Duration,
    /// Longest time to wait in the server's queue for a session slot.
    pub wait: Duration,
}

/// The measurement the server asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeasureSpec {
    /// The measurement's phase number.
    pub seq: u32,
    /// Streams to open.
    pub streams: u32,
    /// This end sends on them (else it receives).
    pub send: bool,
    /// How long the measurement runs.
    pub duration: Duration,
    /// Bytes per message of the pattern.
    pub message_size: u64,
    /// The pattern's seed.
    pub seed: u64,
    /// The server's ephemeral X25519 public key: with this end's secret key, the session's
    /// keys, which tag the streams' hellos (see [`crate::keys`]).
    pub key_share: KeyShare,
}

/// What the session asks of its driver.
#[derive(Debug, PartialEq)]
pub enum AdviseOutput {
    /// Send this message.
    Send(ClientMsg),
    /// Open the measurement's streams and move data on them.
    Measure(MeasureSpec),
    /// The answer (stop the measurement, say `Bye`: it is queued).
    Done(Box<Advice>),
    /// The advice failed.
    Failed(Failure),
    /// The server has no slot yet: the request waits in its queue at this place.
    Queued {
        /// Place in the queue, from 1.
        place: u32,
        /// When a slot is expected to free, seconds, if the server said.
        expected_wait_s: Option<u64>,
    },
}

/// The client's advice session. See the module documentation for the calling order.
#[derive(Debug)]
pub struct AdviseClient {
    plan: AdvisePlan,
    deadline: Option<Instant>,
    /// Since when, and at which place, the request waits in the server's queue.
    queued: Option<(Instant, u32, Option<u64>)>,
    challenged: bool,
    measuring: bool,
    /// The server said something tcptune's (for telling a foreign peer apart).
    heard: bool,
    over: bool,
    out: VecDeque<AdviseOutput>,
}

impl AdviseClient {
    /// A session at `now`; its first flight is queued.
    pub fn new(now: Instant, plan: AdvisePlan) -> AdviseClient {
        let auth = plan.auth.as_ref().map(|(secret, nonce, time)| ClientAuth {
            nonce: wire::to_hex(nonce),
            time_unix_s: *time,
            mac: wire::to_hex(&secret.prove(nonce, *time, &plan.token.0, &plan.key_share)),
        });
        let mut s = AdviseClient {
            deadline: Some(now + plan.connect_timeout),
            queued: None,
            challenged: false,
            measuring: false,
            heard: false,
            over: false,
            out: VecDeque::new(),
            plan,
        };
        s.out.push_back(AdviseOutput::Send(ClientMsg::Hello {
            protocol: PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION").to_string(),
            token: Some(s.plan.token),
            auth,
            key_share: Some(wire::to_hex(&s.plan.key_share)),
        }));
        s.out.push_back(AdviseOutput::Send(s.request()));
        s
    }

    fn request(&self) -> ClientMsg {
        ClientMsg::Advise {
            request: self.plan.request.clone(),
        }
    }

    /// Whether the server has said anything a tcptune server says.
    pub fn heard(&self) -> bool {
        self.heard
    }

    /// The next thing to do.
    pub fn poll_output(&mut self) -> Option<AdviseOutput> {
        self.out.pop_front()
    }

    /// When [`AdviseClient::handle_timeout`] is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline.filter(|_| !self.over)
    }

    fn fail(&mut self, f: Failure) {
        if !self.over {
            self.over = true;
            self.out.push_back(AdviseOutput::Failed(f));
        }
    }

    /// A message from the server.
    pub fn handle_msg(&mut self, now: Instant, msg: ServerMsg) {
        if self.over {
            return;
        }
        match msg {
            ServerMsg::Challenge { nonce, .. } => {
                self.heard = true;
                let answer = super::challenge_answer(
                    &self.plan.auth,
                    self.challenged,
                    &nonce,
                    &self.plan.token.0,
                );
                let Some(mac) = answer else {
                    return self.fail(Failure::Protocol(Violation::UnexpectedChallenge));
                };
                self.challenged = true;
                self.out.push_back(AdviseOutput::Send(ClientMsg::Auth {
                    mac: wire::to_hex(&mac),
                }));
                self.out.push_back(AdviseOutput::Send(self.request()));
            }
            ServerMsg::Rejected {
                reason,
                retry_after_s,
            } => {
                self.heard = true;
                self.fail(Failure::Rejected {
                    reason,
                    retry_after_s,
                });
            }
            ServerMsg::Abort { reason, .. } => {
                self.heard = true;
                self.fail(Failure::Transfer(format!("the server gave up: {reason}")));
            }
            ServerMsg::Queued {
                place,
                expected_wait_s,
            } => {
                self.heard = true;
                if self.measuring {
                    return self.fail(Failure::Protocol(Violation::Unexpected {
                        kind: "queued",
                        during: "an advice",
                    }));
                }
                let since = self.queued.map_or(now, |(t, _, _)| t);
                self.queued = Some((since, place, expected_wait_s));
                // Waiting for a slot, then the connect timeout for the answer.
                self.deadline = Some(since + self.plan.wait + self.plan.connect_timeout);
                self.out.push_back(AdviseOutput::Queued {
                    place,
                    expected_wait_s,
                });
            }
            ServerMsg::Measure {
                seq,
                streams,
                duration_ms,
                message_size,
                seed,
                key_share,
            } => {
                self.heard = true;
                if self.measuring {
                    return self.fail(Failure::Protocol(Violation::MeasureTwice));
                }
                let Some(key_share) = wire::from_hex::<32>(&key_share) else {
                    return self.fail(Failure::Protocol(Violation::BadKeyShare));
                };
                let duration = Duration::from_millis(duration_ms);
                if streams == 0
                    || streams > MAX_MEASURE_STREAMS
                    || duration.is_zero()
                    || duration > MAX_MEASURE
                    || message_size == 0
                    || message_size > MAX_MESSAGE
                {
                    return self.fail(Failure::Protocol(Violation::MeasurementOutOfBounds {
                        streams,
                        duration_ms,
                        message_size,
                    }));
                }
                self.measuring = true;
                self.deadline = Some(now + duration + ANSWER_GRACE);
                self.out.push_back(AdviseOutput::Measure(MeasureSpec {
                    seq,
                    streams,
                    send: self.plan.request.direction == tcptune_core::pathdb::Direction::Send,
                    duration,
                    message_size,
                    seed,
                    key_share,
                }));
            }
            ServerMsg::Advice { advice } => {
                self.heard = true;
                self.over = true;
                self.out.push_back(AdviseOutput::Done(advice));
                self.out.push_back(AdviseOutput::Send(ClientMsg::Bye));
            }
            other @ (ServerMsg::Accepted { .. }
            | ServerMsg::WantStreams { .. }
            | ServerMsg::PhaseResult { .. }
            | ServerMsg::FileFailed { .. }
            | ServerMsg::Share { .. }) => self.fail(Failure::Protocol(Violation::Unexpected {
                kind: other.kind(),
                during: "an advice",
            })),
        }
    }

    /// A measurement stream could not be opened: the measurement cannot be trusted.
    pub fn handle_stream_failed(&mut self, _now: Instant, index: u32, why: String) {
        if self.measuring {
            self.fail(Failure::Connect(StreamFailed {
                index,
                measurement: true,
                reason: why,
            }));
        }
    }

    /// The server closed the control connection.
    pub fn handle_closed(&mut self, _now: Instant) {
        self.fail(Failure::Closed);
    }

    /// Time passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.is_some_and(|d| now >= d) {
            if let (Some((_, place, expected)), false) = (self.queued, self.measuring) {
                return self.fail(Failure::Rejected {
                    reason: format!(
                        "no session slot at the server within {:.0} s of waiting in its queue (place {place}); wait longer with --wait SECONDS",
                        self.plan.wait.as_secs_f64()
                    ),
                    retry_after_s: expected,
                });
            }
            let what = if self.measuring {
                "the server did not answer after its measurement"
            } else {
                "the server did not answer the advice request"
            };
            self.fail(Failure::NoAnswer(what.into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advice::{advise, FactsSource, PathFacts};
    use tcptune_core::pathdb::Direction;
    use tcptune_core::HostLimits;

    const CONNECT: Duration = Duration::from_secs(10);

    fn plan(secret: Option<Secret>) -> AdvisePlan {
        AdvisePlan {
            token: Token([5; 16]),
            auth: secret.map(|s| (s, [9; 32], 1_000)),
            key_share: [4; 32],
            wait: Duration::from_secs(60),
            request: AdviseRequest {
                direction: Direction::Send,
                limits: Some(HostLimits::linux_defaults()),
                max_streams: 8,
                fresh: false,
            },
            connect_timeout: CONNECT,
        }
    }

    fn drain(s: &mut AdviseClient) -> Vec<AdviseOutput> {
        std::iter::from_fn(|| s.poll_output()).collect()
    }

    fn advice() -> Box<Advice> {
        let l = HostLimits::linux_defaults();
        Box::new(advise(
            Direction::Send,
            PathFacts {
                rtt_us: 50_000,
                rate_bps: 200_000_000,
                full_pipe: true,
                measured_at_unix_s: 1.7e9,
                samples: 3,
                source: FactsSource::PathDb,
                measure_seconds: None,
                measure_streams: None,
                measure_rounds: None,
                note: None,
            },
            &l,
            &l,
            8,
        ))
    }

    fn measure(streams: u32, duration_ms: u64) -> ServerMsg {
        ServerMsg::Measure {
            seq: 0,
            streams,
            duration_ms,
            message_size: 128 * 1024,
            seed: 3,
            key_share: crate::wire::to_hex(&[6; 32]),
        }
    }

    #[test]
    fn the_first_flight_asks_at_once_and_an_answer_ends_with_bye() {
        let t0 = Instant::now();
        let mut s = AdviseClient::new(t0, plan(None));
        let out = drain(&mut s);
        assert!(matches!(
            &out[0],
            AdviseOutput::Send(ClientMsg::Hello { auth: None, .. })
        ));
        assert!(matches!(
            &out[1],
            AdviseOutput::Send(ClientMsg::Advise { .. })
        ));
        assert_eq!(s.poll_timeout(), Some(t0 + CONNECT));
        s.handle_msg(t0, ServerMsg::Advice { advice: advice() });
        let out = drain(&mut s);
        assert!(matches!(&out[0], AdviseOutput::Done(a) if a.sizing.streams == 1));
        assert_eq!(out[1], AdviseOutput::Send(ClientMsg::Bye));
        assert_eq!(s.poll_timeout(), None);
        s.handle_closed(t0);
        assert!(drain(&mut s).is_empty(), "closing after the answer is fine");
    }

    #[test]
    fn a_measurement_opens_its_streams_and_the_answer_must_follow_within_its_bound() {
        let t0 = Instant::now();
        let mut s = AdviseClient::new(t0, plan(None));
        drain(&mut s);
        s.handle_msg(t0, measure(4, 2000));
        assert_eq!(
            drain(&mut s),
            [AdviseOutput::Measure(MeasureSpec {
                seq: 0,
                streams: 4,
                send: true,
                duration: Duration::from_secs(2),
                message_size: 128 * 1024,
                seed: 3,
                key_share: [6; 32],
            })]
        );
        let due = t0 + Duration::from_secs(2) + ANSWER_GRACE;
        assert_eq!(s.poll_timeout(), Some(due));
        s.handle_msg(t0, measure(4, 2000));
        assert!(matches!(
            drain(&mut s).as_slice(),
            [AdviseOutput::Failed(Failure::Protocol(
                Violation::MeasureTwice
            ))]
        ));
    }

    #[test]
    fn a_server_that_never_answers_times_out_with_a_reason() {
        let t0 = Instant::now();
        let mut s = AdviseClient::new(t0, plan(None));
        drain(&mut s);
        s.handle_timeout(t0 + CONNECT);
        assert!(matches!(
            drain(&mut s).as_slice(),
            [AdviseOutput::Failed(Failure::NoAnswer(m))] if m.contains("did not answer")
        ));
    }

    #[test]
    fn measurements_out_of_bounds_and_transfer_messages_are_refused() {
        for bad in [
            measure(0, 1000),
            measure(MAX_MEASURE_STREAMS + 1, 1000),
            measure(4, 0),
            measure(4, u64::MAX),
            ServerMsg::Measure {
                seq: 0,
                streams: 2,
                duration_ms: 1000,
                message_size: u64::MAX,
                seed: 0,
                key_share: crate::wire::to_hex(&[6; 32]),
            },
            ServerMsg::Measure {
                seq: 0,
                streams: 2,
                duration_ms: 1000,
                message_size: 128 * 1024,
                seed: 0,
                key_share: "not hex".into(),
            },
            ServerMsg::WantStreams {
                known_streams: 1,
                count: 1000,
                reason: "x".into(),
            },
        ] {
            let t0 = Instant::now();
            let mut s = AdviseClient::new(t0, plan(None));
            drain(&mut s);
            s.handle_msg(t0, bad.clone());
            let out = drain(&mut s);
            assert!(
                matches!(out.as_slice(), [AdviseOutput::Failed(Failure::Protocol(_))]),
                "{bad:?}: {out:?}"
            );
        }
    }

    #[test]
    fn a_challenge_is_answered_once_and_the_request_sent_again() {
        let secret = Secret::from_bytes(b"s3cret").expect("secret");
        let t0 = Instant::now();
        let mut s = AdviseClient::new(t0, plan(Some(secret)));
        assert!(matches!(
            &drain(&mut s)[0],
            AdviseOutput::Send(ClientMsg::Hello { auth: Some(_), .. })
        ));
        let challenge = || ServerMsg::Challenge {
            nonce: wire::to_hex(&[1; 32]),
            reason: "clock".into(),
            key_share: None,
        };
        s.handle_msg(t0, challenge());
        let out = drain(&mut s);
        assert!(matches!(
            &out[0],
            AdviseOutput::Send(ClientMsg::Auth { .. })
        ));
        assert!(matches!(
            &out[1],
            AdviseOutput::Send(ClientMsg::Advise { .. })
        ));
        s.handle_msg(t0, challenge());
        assert!(matches!(
            drain(&mut s).as_slice(),
            [AdviseOutput::Failed(Failure::Protocol(_))]
        ));
        // Without a secret a challenge is a refusal to understand.
        let mut s = AdviseClient::new(t0, plan(None));
        drain(&mut s);
        s.handle_msg(t0, challenge());
        assert!(matches!(
            drain(&mut s).as_slice(),
            [AdviseOutput::Failed(Failure::Protocol(_))]
        ));
    }

    #[test]
    fn a_refusal_says_when_to_retry_and_a_failed_stream_fails_the_measurement() {
        let t0 = Instant::now();
        let mut s = AdviseClient::new(t0, plan(None));
        drain(&mut s);
        s.handle_msg(
            t0,
            ServerMsg::Rejected {
                reason: "busy".into(),
                retry_after_s: Some(7),
            },
        );
        assert_eq!(
            drain(&mut s),
            [AdviseOutput::Failed(Failure::Rejected {
                reason: "busy".into(),
                retry_after_s: Some(7)
            })]
        );
        let mut s = AdviseClient::new(t0, plan(None));
        drain(&mut s);
        s.handle_stream_failed(t0, 0, "before any measurement".into());
        assert!(drain(&mut s).is_empty());
        s.handle_msg(t0, measure(2, 1000));
        drain(&mut s);
        s.handle_stream_failed(t0, 1, "refused".into());
        assert!(matches!(
            drain(&mut s).as_slice(),
            [AdviseOutput::Failed(Failure::Connect(f))] if f.index == 1 && f.to_string().contains("stream 2")
        ));
    }

    #[test]
    fn a_queued_advice_waits_up_to_its_wait_then_fails_saying_so() {
        let t0 = Instant::now();
        let mut s = AdviseClient::new(t0, plan(None));
        drain(&mut s);
        let queued = ServerMsg::Queued {
            place: 2,
            expected_wait_s: Some(5),
        };
        s.handle_msg(t0, queued);
        assert_eq!(
            drain(&mut s),
            [AdviseOutput::Queued {
                place: 2,
                expected_wait_s: Some(5)
            }]
        );
        // Past the connect timeout it still waits: the wait and then the connect timeout.
        s.handle_timeout(t0 + CONNECT);
        assert!(drain(&mut s).is_empty());
        assert_eq!(
            s.poll_timeout(),
            Some(t0 + Duration::from_secs(60) + CONNECT)
        );
        s.handle_timeout(t0 + Duration::from_secs(60) + CONNECT);
        assert!(matches!(
            drain(&mut s).as_slice(),
            [AdviseOutput::Failed(Failure::Rejected { reason, retry_after_s: Some(5) })] if reason.contains("--wait")
        ));
    }
}
