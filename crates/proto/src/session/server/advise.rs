//! An advice session (`tcptune advise`): the client asks which buffers and how many streams
//! to use on the path between it and the server ([`crate::advice`]).
//!
//! # Calling order (on top of the session's)
//!
//! [`ServerSession::advise`] queues [`SessionOutput::Lookup`]; the endpoint asks the driver
//! for the path database's entry and calls [`ServerSession::handle_lookup`] with it and
//! with whether this address may have a measurement now (the endpoint's rate limit,
//! consulted only when [`ServerSession::wants_measurement`] says one is needed).
//!
//! # Rules
//!
//! * A fresh full-pipe entry answers at once (unless the client asked for a fresh
//!   measurement).
//! * Otherwise the server measures: it sends `Measure` (streams enough for a fast path at
//!   this RTT, as the client's probe opens, [`ProbePlan`]) and starts a probe phase it
//!   leads: it ends the phase itself as soon as its own watch sees the pipe full and the
//!   rate settled after it ([`tcptune_core::fullpipe::FullPipe::settling`]), or at the
//!   probe's bound, and answers from what it measured ([`SessionOutput::Measured`] records
//!   it).
//! * A measurement this address may not have now (one was made recently) falls back on the
//!   entry the database has, with a note, or is refused with when to retry.
//! * After the answer the client says `Bye` (or closes): the session completed. Anything
//!   but `Bye` from the client is a protocol error.

use super::{
    server_direction, PathMeasurement, PathWatch, PhaseState, ServerSession, SessionEnd,
    SessionOutput, SessionPolicy, State,
};
use crate::advice::{advise, bounded_limits, FactsSource, PathFacts, MAX_STREAMS};
use crate::session::server::EngineSpec;
use crate::wire::{AdviseRequest, ClientMsg, Phase, ServerMsg, TestParams};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use tcptune_core::fullpipe::ProbePlan;
use tcptune_core::pathdb::Direction;
use tcptune_core::{HostLimits, PathHint, Rate, TuneMode};

/// Payload bytes per message of a measurement.
pub(crate) const MEASURE_MESSAGE: u64 = 128 * 1024;
/// The server ends a measurement this long after its bound even without observations.
const MEASURE_GRACE: Duration = Duration::from_secs(2);

/// What the path database holds of the path.
#[derive(Clone, Debug, PartialEq)]
pub struct KnownPath {
    /// The path's rate.
    pub rate: Rate,
    /// The rate is the path's (else a lower bound).
    pub full_pipe: bool,
    /// The path's smallest RTT.
    pub min_rtt: Duration,
    /// When it was last updated, seconds since the Unix epoch.
    pub measured_at_unix_s: f64,
    /// Measurements it was built from.
    pub samples: u32,
}

/// The driver's answer to [`SessionOutput::Lookup`].
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LookupAnswer {
    /// The control connection's RTT as the server's `TCP_INFO` has it.
    pub(crate) rtt: Option<Duration>,
    /// The fresh entry of the path, if any.
    pub(crate) known: Option<KnownPath>,
    /// The wall clock when the answer was made, seconds since the Unix epoch.
    pub(crate) now_unix_s: f64,
}

/// What an advice session was asked, and how far it got.
#[derive(Debug)]
pub(crate) struct AdviseCtx {
    request: AdviseRequest,
    client_limits: HostLimits,
    server_limits: HostLimits,
    seed: u64,
    /// The server's X25519 public key for the session (sent in `Measure`).
    key_share: crate::keys::KeyShare,
    known: Option<KnownPath>,
    note: Option<String>,
    /// The wall clock at an instant (for the time of a measurement).
    clock: Option<(Instant, f64)>,
    streams: u32,
    answered: bool,
}

impl ServerSession {
    /// An advice session admitted at `now` for `request`; `server_limits` are this host's,
    /// `seed` the data pattern's should it measure, `key_share` the server's X25519 public
    /// key for the session. Queues [`SessionOutput::Lookup`].
    pub(crate) fn advise(
        now: Instant,
        request: AdviseRequest,
        policy: SessionPolicy,
        server_limits: HostLimits,
        seed: u64,
        key_share: crate::keys::KeyShare,
    ) -> ServerSession {
        let client_limits = request
            .limits
            .clone()
            .map_or_else(|| server_limits.clone(), bounded_limits);
        let request = AdviseRequest {
            max_streams: request.max_streams.clamp(1, MAX_STREAMS),
            limits: None,
            ..request
        };
        let params = TestParams {
            tune: TuneMode::Kernel,
            streams: 1,
            message_size: MEASURE_MESSAGE,
            messages: 0,
            duration_ms: None,
            max_time_ms: None,
            // The server sends when the client asked about receiving.
            reverse: request.direction == Direction::Receive,
            samples: false,
            congestion: None,
            seed,
            corrupt_message: None,
            files: None,
            share: false,
        };
        let deadline = now + policy.handshake_timeout;
        let mut s = ServerSession::new(now, params, policy);
        s.state = State::Lookup { deadline };
        s.out.push_back(SessionOutput::Lookup {
            direction: server_direction(&s.params),
        });
        s.advise = Some(Box::new(AdviseCtx {
            request,
            client_limits,
            server_limits,
            seed,
            key_share,
            known: None,
            note: None,
            clock: None,
            streams: 0,
            answered: false,
        }));
        s
    }

    /// Whether answering needs a measurement: no fresh full-pipe entry, or the client asked
    /// for a fresh measurement.
    pub(crate) fn wants_measurement(&self, known: Option<&KnownPath>) -> bool {
        let fresh = self.advise.as_ref().is_some_and(|a| a.request.fresh);
        fresh || !known.is_some_and(|k| k.full_pipe)
    }

    /// The path database's answer; `may_measure` is `Err(retry_after)` when this address
    /// may not have a measurement now.
    pub(crate) fn handle_lookup(
        &mut self,
        now: Instant,
        answer: LookupAnswer,
        may_measure: Result<(), Duration>,
    ) {
        if !matches!(self.state, State::Lookup { .. }) {
            return;
        }
        let wants = self.wants_measurement(answer.known.as_ref());
        let Some(a) = self.advise.as_mut() else {
            return;
        };
        a.clock = Some((now, answer.now_unix_s));
        a.known = answer.known.clone();
        if !wants {
            if let Some(k) = answer.known {
                return self.answer_from(now, k);
            }
        }
        match (may_measure, answer.known) {
            (Ok(()), _) => self.measure(now, answer.rtt),
            (Err(wait), Some(k)) => {
                if let Some(a) = self.advise.as_mut() {
                    a.note = Some(format!(
                        "not measured again: this address had a measurement recently (the next one may start in {} s)",
                        wait.as_secs().max(1)
                    ));
                }
                self.answer_from(now, k)
            }
            (Err(wait), None) => self.refuse(
                format!(
                    "this server has no measurement of the path yet, and this address had one recently: retry in {} s",
                    wait.as_secs().max(1)
                ),
                Some(wait),
            ),
        }
    }

    fn answer_from(&mut self, now: Instant, k: KnownPath) {
        let note = self.advise.as_mut().and_then(|a| a.note.take());
        let facts = PathFacts {
            rtt_us: u64::try_from(k.min_rtt.as_micros()).unwrap_or(u64::MAX),
            rate_bps: k.rate.0,
            full_pipe: k.full_pipe,
            measured_at_unix_s: k.measured_at_unix_s,
            samples: k.samples,
            source: FactsSource::PathDb,
            measure_seconds: None,
            measure_streams: None,
            measure_rounds: None,
            note,
        };
        self.answer(now, facts);
    }

    fn answer(&mut self, now: Instant, facts: PathFacts) {
        let Some(a) = self.advise.as_mut() else {
            return;
        };
        let advice = advise(
            a.request.direction,
            facts,
            &a.client_limits,
            &a.server_limits,
            a.request.max_streams,
        );
        a.answered = true;
        self.send(ServerMsg::Advice {
            advice: Box::new(advice),
        });
        // The client says Bye (or closes) once it has read the answer.
        self.state = State::Ready {
            idle_deadline: now + self.policy.handshake_timeout,
        };
    }

    /// Refuse the advice, saying why (and when to retry).
    fn refuse(&mut self, reason: String, retry: Option<Duration>) {
        self.send(ServerMsg::Rejected {
            reason: reason.clone(),
            retry_after_s: retry.map(|d| d.as_secs().max(1)),
        });
        self.out.push_back(SessionOutput::Close(SessionEnd::Failed {
            reason,
            integrity: false,
        }));
        self.state = State::Closed;
    }

    /// Start the measurement the server leads.
    fn measure(&mut self, now: Instant, rtt: Option<Duration>) {
        let Some(a) = self.advise.as_mut() else {
            return;
        };
        let sender_limits = match a.request.direction {
            Direction::Send => &a.client_limits,
            Direction::Receive => &a.server_limits,
        };
        let plan = ProbePlan::new(rtt, sender_limits, self.policy.limits.max_streams);
        let streams = plan.streams.max(1);
        a.streams = streams;
        let duration_ms = u64::try_from(plan.max_duration.as_millis()).unwrap_or(u64::MAX);
        let seed = a.seed;
        let key_share = crate::wire::to_hex(&a.key_share);
        self.params.streams = streams;
        self.params.duration_ms = Some(duration_ms);
        self.send(ServerMsg::Measure {
            seq: 0,
            streams,
            duration_ms,
            message_size: MEASURE_MESSAGE,
            seed,
            key_share,
        });
        self.next_seq = 1;
        let kind = Phase::Probe { duration_ms };
        self.out.push_back(SessionOutput::StartEngine(EngineSpec {
            seq: 0,
            kind,
            params: self.params.clone(),
            hint: PathHint {
                rtt,
                ..PathHint::default()
            },
            streams,
        }));
        let mut watch = PathWatch::new(
            now,
            rtt,
            server_direction(&self.params),
            true,
            plan.max_duration,
            8,
            Duration::from_millis(2),
        )
        .settling();
        // The control connection's RTT, as this server's TCP_INFO has it.
        watch.seed_min_rtt(rtt);
        self.state = State::Phase(PhaseState {
            seq: 0,
            kind,
            attached: BTreeSet::new(),
            done: BTreeSet::new(),
            expected: Some(streams),
            end_deadline: None,
            sender_deadline: Some(now + plan.max_duration + MEASURE_GRACE),
            last_progress: None,
            last_activity: now,
            stopped: false,
            want_sent: streams,
            watch: Box::new(watch),
            lead: true,
        });
    }

    /// The measurement's phase ended with `measured`.
    pub(super) fn advise_measured(&mut self, now: Instant, measured: Option<PathMeasurement>) {
        let Some(m) = measured else {
            return self.refuse(
                "the measurement found no rate: no data moved on the measurement's streams".into(),
                None,
            );
        };
        self.out.push_back(SessionOutput::Measured(m.clone()));
        let Some(a) = self.advise.as_mut() else {
            return;
        };
        let at = a.clock.map_or(0.0, |(t, unix)| {
            unix + now.saturating_duration_since(t).as_secs_f64()
        });
        let facts = PathFacts {
            rtt_us: u64::try_from(m.min_rtt.as_micros()).unwrap_or(u64::MAX),
            rate_bps: m.rate.0,
            full_pipe: m.full_pipe,
            measured_at_unix_s: at,
            samples: 1,
            source: FactsSource::Measured,
            measure_seconds: Some(m.elapsed.as_secs_f64()),
            measure_streams: Some(a.streams),
            measure_rounds: Some(m.rounds),
            note: a.note.take(),
        };
        self.answer(now, facts);
    }

    /// A control message in an advice session: only `Bye`, once answered.
    pub(super) fn advise_msg(&mut self, now: Instant, msg: ClientMsg) {
        let _ = now;
        match (&self.state, msg) {
            (State::Closed, _) => {}
            (State::Ready { .. }, ClientMsg::Bye) => self.complete(),
            (_, ClientMsg::Bye) => self.fail("the client left before the answer".into(), false),
            (_, other) => self.fail(
                format!("unexpected {} in an advice session", other.kind()),
                false,
            ),
        }
    }

    /// Whether the client has its answer (it may then just close).
    pub(super) fn advised(&self) -> bool {
        self.advise.as_ref().is_some_and(|a| a.answered)
            && matches!(self.state, State::Ready { .. })
    }

    pub(super) fn complete(&mut self) {
        self.out
            .push_back(SessionOutput::Close(SessionEnd::Completed));
        self.state = State::Closed;
    }
}
