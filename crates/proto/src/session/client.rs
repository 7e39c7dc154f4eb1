//! The client's session as a state machine: server messages, stream and engine events,
//! observations of the engine and time in; messages, stream openings, engine commands and
//! the end of each phase out. No sockets, no clock: [`crate::client`] drives it.
//!
//! # Calling order
//!
//! 1. [`ClientSession::new`]: the first flight (`Hello`, `Setup`) is queued at once.
//! 2. [`ClientSession::start_phase`] as soon as the phase is decided (before the server has
//!    answered: the start is pipelined with the handshake).
//! 3. Drain [`ClientSession::poll_output`] after every call and carry the outputs out in
//!    order: messages to send, streams to open ([`ClientOutput::OpenStreams`]), engine
//!    commands, and [`ClientOutput::PhaseDone`] / [`ClientOutput::Failed`].
//! 4. Feed [`ClientSession::handle_msg`] (server messages),
//!    [`ClientSession::handle_stream_open`] / [`ClientSession::handle_stream_failed`] (each
//!    stream it asked for), [`ClientSession::handle_engine`] (engine events), and
//!    [`ClientSession::handle_timeout`] at [`ClientSession::poll_timeout`] with an
//!    [`Observe`] of the engine (progress, delivered bytes).
//! 5. After `PhaseDone`, start the next phase or [`ClientSession::finish`] (`Bye`).
//!
//! # Rules
//!
//! * More streams are opened when a tuner at either end asks, up to the smaller of this
//!   client's maximum and the server's allowance, and only after the server admitted the
//!   session (its allowance is known then), never after the phase began to stop.
//! * A duration workload is stopped at its duration (`Stop`, and the local senders), the
//!   cap (`--max-time`) and the end of the probe stop both ends at once (`Stop{capped}`).
//! * The probe ends as soon as the full-pipe estimator sees the delivery rate plateau.
//! * A phase ends when every stream this end opened has ended: `EndPhase{n}`; the server's
//!   side of it follows (the probe's is not waited for).
//! * No progress for the idle timeout plus 5 s fails the transfer, as does no answer to
//!   the handshake within the connect timeout or to `EndPhase` within the idle timeout.

use crate::auth::Secret;
use crate::files::{FailKind, FileFailure};
use crate::keys::KeyShare;
use crate::result::SideResult;
use crate::session::Event;
use crate::wire::{
    self, ClientAuth, ClientMsg, Phase, ServerLimits, ServerMsg, TestParams, Token,
    PROTOCOL_VERSION,
};
use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};
use tcptune_core::fullpipe::{FullPipe, ProbeOutcome, ProbePlan, MIN_ROUND};
use tcptune_core::tuners::auto::AutoPlan;
use tcptune_core::{HostLimits, PathHint, Rate, Time};

/// The budget of a server's fair share ([`ServerMsg::Share`]): a cap below this is raised to
/// it (a server, or whoever speaks for it, cannot slow a transfer to a crawl this way; it
/// could still read slowly).
pub const MIN_SHARE: Rate = Rate(1_000_000);

/// What the client's session needs to know.
#[derive(Clone, Debug)]
pub struct ClientPlan {
    /// What the client asks for (sent in `Setup`).
    pub params: TestParams,
    /// The session's token (random bytes chosen by the driver).
    pub token: Token,
    /// The shared secret, a fresh nonce and this host's clock (Unix seconds) for the proof.
    pub auth: Option<(Secret, [u8; 32], u64)>,
    /// This end's ephemeral X25519 public key (see [`crate::keys`]).
    pub key_share: KeyShare,
    /// Most streams this client opens.
    pub max_streams: u32,
    /// Time for the server to admit the session.
    pub connect_timeout: Duration,
    /// Longest time to wait in the server's queue for a session slot.
    pub wait: Duration,
    /// Longest time without progress (plus 5 s).
    pub idle_timeout: Duration,
    /// Duration workload.
    pub duration: Option<Duration>,
    /// Cap of the message workload.
    pub max_time: Option<Duration>,
    /// This client sends.
    pub sender: bool,
}

/// What a phase is for.
#[derive(Clone, Debug, PartialEq)]
pub enum Goal {
    /// The transfer: the estimator only observes.
    Main,
    /// The bandwidth probe: stop once the pipe is full.
    Probe(ProbePlan),
}

/// What the transfer learns about the path's rate while it runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InBand {
    /// Nothing: the rate is given, or not wanted.
    Off,
    /// The rate is not known: measure it (the full-pipe estimator on the transfer itself).
    Measure,
    /// The path database gave this rate: check it against what the transfer delivers and
    /// correct it when it delivers much less.
    Check(Rate),
}

/// What the in-band measurement found.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The path's rate: the plateau the transfer's delivery reached.
    pub rate: Rate,
    /// The rate the path database gave, when this one corrects it.
    pub corrects: Option<Rate>,
    /// From the phase's start.
    pub after: Duration,
    /// Rounds of one RTT it took.
    pub rounds: u32,
    /// The rate is only what the streams got beside another flow, whose queue the handshake
    /// and the streams' own lowest RTT show
    /// ([`AutoPlan::measured_beside_another_flow`]): a lower bound on the path's.
    pub lower_bound: bool,
}

/// A phase to start.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseRequest {
    /// What the phase is for.
    pub goal: Goal,
    /// What the phase learns of the path's rate.
    pub in_band: InBand,
    /// What is known of the path when the phase starts.
    pub hint: PathHint,
    /// Streams to open now.
    pub streams: u32,
    /// Why more than the user asked for, if so.
    pub reason: Option<String>,
}

/// What the server told about itself when it admitted the session.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerInfo {
    /// What the server allows.
    pub limits: ServerLimits,
    /// The server host's buffer limits.
    pub host_limits: HostLimits,
    /// The server's congestion control for the data sockets.
    pub congestion: String,
    /// The server asks for authentication.
    pub auth_required: bool,
    /// The server's ephemeral X25519 public key: with this end's secret key, the session's
    /// keys (see [`crate::keys`]).
    pub key_share: KeyShare,
    /// The server's senders close streams the client retires (`Accepted.retires`).
    pub retires: bool,
}

/// How a phase ended, for the report.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseOutcome {
    /// The phase was stopped by the time cap.
    pub capped: bool,
    /// The user interrupted the transfer (the report then holds what moved until then).
    pub interrupted: bool,
    /// Why more streams were opened than asked for, if so.
    pub streams_reason: Option<String>,
    /// From the phase's start to its first streams all connected.
    pub setup: Duration,
    /// The aggregate delivery this end saw in rounds of one RTT.
    pub delivery: ProbeOutcome,
    /// The server's side (`None` for the probe, whose result is not waited for).
    pub remote: Option<Box<SideResult>>,
}

/// How a server's message broke the session's rules: which message, and why it could not
/// be taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// A challenge without a secret to answer it, or a second one.
    #[error("an unexpected challenge")]
    UnexpectedChallenge,
    /// `Accepted` after the session was accepted.
    #[error("accepted twice")]
    AcceptedTwice,
    /// `Accepted`, without a challenge and saying it checks no secret, by a server this
    /// client holds a shared secret for: the keys would then not depend on the secret, and
    /// whoever answers on the path could read and write the copy.
    #[error("the server admitted this client without checking its shared secret, so it cannot be told from an impersonator on the path (the session's keys would not depend on the secret): refusing; give the server the same --secret-file, or drop it here to reach a server that checks none")]
    SecretUnchecked,
    /// A phase's result when no phase runs.
    #[error("a result for phase {seq}")]
    ResultWithoutPhase {
        /// The phase the result was for.
        seq: u32,
    },
    /// A phase's result for another phase, or before this end's side of it ended.
    #[error("a result for phase {seq} before it ended")]
    EarlyResult {
        /// The phase the result was for.
        seq: u32,
    },
    /// A message of a kind the session does not take (`kind` as [`ServerMsg::kind`] names
    /// it) in `during` ("a transfer", "an advice").
    #[error("an unexpected {kind} in {during}")]
    Unexpected {
        /// The message's kind.
        kind: &'static str,
        /// The kind of session.
        during: &'static str,
    },
    /// A key share that is not 32 bytes of hex, or another than the server sent before.
    #[error("a malformed or changed key share")]
    BadKeyShare,
    /// A key share whose X25519 result is all zeros (a low-order key: see [`crate::keys`]).
    #[error("a key share that does not contribute (a low-order X25519 key)")]
    WeakKeyShare,
    /// A second measurement request in an advice session.
    #[error("asked to measure twice")]
    MeasureTwice,
    /// A measurement request beyond the client's bounds.
    #[error(
        "a measurement out of bounds ({streams} streams, {duration_ms} ms, messages of {message_size} bytes)"
    )]
    MeasurementOutOfBounds {
        /// Streams asked for.
        streams: u32,
        /// Duration asked for, milliseconds.
        duration_ms: u64,
        /// Message size asked for, bytes.
        message_size: u64,
    },
}

/// A stream that could not be opened: which one, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}stream {}: {reason}", if *.measurement { "measurement " } else { "" }, .index + 1)]
pub struct StreamFailed {
    /// The stream's index (shown from 1).
    pub index: u32,
    /// One of an advice's measurement streams (not a transfer's).
    pub measurement: bool,
    /// Why (the failed system call).
    pub reason: String,
}

/// Why the session failed.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// The server refused (handshake, limits, busy).
    Rejected {
        /// Why.
        reason: String,
        /// When to try again, seconds, if the server said.
        retry_after_s: Option<u64>,
    },
    /// The server did not answer in time.
    NoAnswer(String),
    /// The server broke the protocol.
    Protocol(Violation),
    /// The server reports bad data.
    Integrity(String),
    /// The transfer failed (a stream, a stall, the server gave up).
    Transfer(String),
    /// A stream could not be opened.
    Connect(StreamFailed),
    /// The server closed the control connection without a word.
    Closed,
    /// The user interrupted before the transfer began.
    Interrupted,
    /// A copy failed (at either end).
    File(crate::files::FileFailure),
}

/// What the session asks of its driver.
#[derive(Debug, PartialEq)]
pub enum ClientOutput {
    /// Send this message.
    Send(ClientMsg),
    /// Open streams `from..to` of phase `seq` (their tuners are built for `total` streams).
    OpenStreams {
        /// The phase.
        seq: u32,
        /// The first stream number to open.
        from: u32,
        /// One past the last stream number to open.
        to: u32,
        /// Streams of the phase in all.
        total: u32,
    },
    /// The in-band measurement found the path's rate (or that the database's was wrong):
    /// decide the streams and call [`ClientSession::settle`].
    Measured(Measured),
    /// Tell the local engine's tuners what is now known of the path.
    LocalHint {
        /// What is known of the path.
        hint: PathHint,
        /// Streams of the phase.
        streams: u32,
    },
    /// Senders `from..to` of phase `seq` finish the message they are writing and close;
    /// the streams that stay take the remaining messages (see
    /// [`ClientSession::retire_to`]).
    RetireStreams {
        /// The phase.
        seq: u32,
        /// The first stream number to close.
        from: u32,
        /// One past the last stream number to close.
        to: u32,
        /// The senders are this end's (else the server's, which was asked to close them).
        local: bool,
    },
    /// Local senders stop.
    StopSenders,
    /// Tear the local engine down.
    AbortEngine,
    /// The phase is over: finish the local engine.
    PhaseDone {
        /// The phase.
        seq: u32,
        /// How it ended.
        outcome: PhaseOutcome,
    },
    /// The session failed.
    Failed(Failure),
    /// The server's fair share for this session (see [`crate::session::fair`]): local
    /// senders pace the phase's streams together at most at `rate` (`None`: no cap); a
    /// receiving client only reports it (the server paces its own senders).
    Pace {
        /// The cap, payload (`None`: no cap), at least [`MIN_SHARE`].
        rate: Option<Rate>,
        /// Bulk sessions sharing the server, this one included.
        sessions: u32,
        /// What the path delivers in all, as far as the server knows.
        path: Option<Rate>,
    },
    /// The server has no slot yet: the session waits in its queue at this place (the
    /// driver tells the user; nothing else to do).
    Queued {
        /// Place in the queue, from 1.
        place: u32,
        /// When a slot is expected to free, seconds, if the server said.
        expected_wait_s: Option<u64>,
    },
}

/// The engine, as the session needs to see it when its timer fires.
pub trait Observe {
    /// A counter that grows while data moves.
    fn progress(&mut self) -> u64;
    /// Bytes delivered to the other end.
    fn delivered(&mut self) -> u64;
    /// The lowest RTT the phase's own streams have seen (the kernel's `tcpi_min_rtt`), if
    /// known: with the handshake's, it tells a rate measured beside another flow
    /// ([`Measured::lower_bound`]). Read once, when the in-band measurement ends.
    fn own_min_rtt(&mut self) -> Option<Duration> {
        None
    }
    /// When this end receives: the packets its streams got out of order so far (the sum of
    /// their `tcpi_rcv_ooopack`), if known. A round in which it grew had a hole open, and
    /// what arrived in order in it is not the path's rate
    /// ([`FullPipe::on_sample_ordered`]).
    fn out_of_order(&mut self) -> Option<u64> {
        None
    }
}

#[derive(Debug)]
struct PhaseState {
    seq: u32,
    kind: Phase,
    goal: Goal,
    in_band: InBand,
    epoch: Instant,
    estimator: FullPipe,
    sample_every: Duration,
    next_sample: Instant,
    target: u32,
    requested: u32,
    initial: u32,
    open: BTreeSet<u32>,
    /// Streams that write no more (their data may still be in flight).
    done: BTreeSet<u32>,
    /// Streams whose thread finished (every byte delivered).
    finished: BTreeSet<u32>,
    reason: Option<String>,
    setup: Option<Duration>,
    stop_at: Option<(Instant, bool)>,
    stopped: bool,
    capped: bool,
    interrupted: bool,
    ended: bool,
    result_deadline: Option<Instant>,
    last_progress: (u64, Instant),
    /// Streams closed early because the plan did not need them ([`ClientSession::retire_to`]):
    /// none opens again in this phase.
    retired: u32,
    /// Streams that close once delivery holds steady ([`ClientSession::retire_when_steady`]).
    pending_retire: Option<PendingRetire>,
    /// The RTT the control connection's handshake took, before the phase sent anything.
    handshake_rtt: Option<Duration>,
}

/// A retirement waiting for the transfer's delivery to hold steady.
#[derive(Debug)]
struct PendingRetire {
    hint: PathHint,
    keep: u32,
    window: Duration,
    /// The latest time it still pays (`None`: any time).
    until: Option<Instant>,
    /// The window's start and the delivered bytes then (`None`: at the next sample).
    since: Option<(Instant, u64)>,
    /// The rate the window is compared with (the measured one, then the last window's).
    before: Rate,
}

/// The client's session. See the module documentation for the calling order.
#[derive(Debug)]
pub struct ClientSession {
    plan: ClientPlan,
    /// Everything sent after `Hello`, to send again after a challenge.
    sent: Vec<ClientMsg>,
    server: Option<ServerInfo>,
    handshake_deadline: Option<Instant>,
    /// Since when the session waits in the server's queue (until `Accepted`).
    queued: Option<(Instant, u32, Option<u64>)>,
    challenged: bool,
    /// The server's key share, from a challenge or `Accepted`.
    server_share: Option<KeyShare>,
    phase: Option<PhaseState>,
    /// The path's RTT with nothing queued, as the path database knows it
    /// ([`ClientSession::set_path_base_rtt`]).
    path_base_rtt: Option<Duration>,
    next_seq: u32,
    /// Results still to come that nobody waits for (the probe's).
    ignored_results: BTreeSet<u32>,
    out: VecDeque<ClientOutput>,
    failed: bool,
    /// A data connection that failed before the server said anything: its failure waits
    /// for the control connection's verdict (something that is not a tcptune server, or one
    /// that refuses, resets the early connections too and says why on the control one).
    early_stream_failure: Option<StreamFailed>,
}

impl ClientSession {
    /// A session; its first flight is queued.
    pub fn new(now: Instant, plan: ClientPlan) -> ClientSession {
        let auth = plan.auth.as_ref().map(|(secret, nonce, time)| ClientAuth {
            nonce: wire::to_hex(nonce),
            time_unix_s: *time,
            mac: wire::to_hex(&secret.prove(nonce, *time, &plan.token.0, &plan.key_share)),
        });
        let mut s = ClientSession {
            handshake_deadline: Some(now + plan.connect_timeout),
            queued: None,
            sent: Vec::new(),
            server: None,
            challenged: false,
            server_share: None,
            phase: None,
            path_base_rtt: None,
            next_seq: 0,
            ignored_results: BTreeSet::new(),
            out: VecDeque::new(),
            failed: false,
            early_stream_failure: None,
            plan,
        };
        s.out.push_back(ClientOutput::Send(ClientMsg::Hello {
            protocol: PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION").to_string(),
            token: Some(s.plan.token),
            auth,
            key_share: Some(wire::to_hex(&s.plan.key_share)),
        }));
        s.send(ClientMsg::Setup {
            params: s.plan.params.clone(),
        });
        s
    }

    fn send(&mut self, m: ClientMsg) {
        self.sent.push(m.clone());
        self.out.push_back(ClientOutput::Send(m));
    }

    fn fail(&mut self, f: Failure) {
        if self.failed {
            return;
        }
        self.failed = true;
        if self.phase.is_some() {
            self.out.push_back(ClientOutput::AbortEngine);
        }
        self.out.push_back(ClientOutput::Failed(f));
    }

    /// What the server said about itself, once it admitted the session.
    pub fn server(&self) -> Option<&ServerInfo> {
        self.server.as_ref()
    }

    /// What the session's keys are derived from, once the server sent its key share (in a
    /// challenge or `Accepted`): its key share, and whether the shared secret goes into the
    /// keys (the client has one and the server checks one: it challenged, or says so in
    /// `Accepted`). See [`crate::keys`].
    pub fn key_agreement(&self) -> Option<(KeyShare, Option<&Secret>)> {
        let share = self.server_share?;
        let checks = self.challenged || self.server.as_ref().is_some_and(|s| s.auth_required);
        let secret = self.plan.auth.as_ref().map(|a| &a.0).filter(|_| checks);
        Some((share, secret))
    }

    /// The server's key share `hex`: `false` (the session failed) when it is malformed or
    /// not the one the server sent before.
    fn take_share(&mut self, hex: &str) -> bool {
        match (wire::from_hex::<32>(hex), self.server_share) {
            (Some(k), None) => {
                self.server_share = Some(k);
                true
            }
            (Some(k), Some(before)) if k == before => true,
            _ => {
                self.fail(Failure::Protocol(Violation::BadKeyShare));
                false
            }
        }
    }

    /// The next thing to do.
    pub fn poll_output(&mut self) -> Option<ClientOutput> {
        self.out.pop_front()
    }

    /// Streams the running phase has asked for so far.
    pub fn streams_requested(&self) -> u32 {
        self.phase.as_ref().map_or(0, |p| p.requested)
    }

    /// When [`ClientSession::handle_timeout`] is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.failed {
            return None;
        }
        if self.waiting() {
            // In the server's queue nothing runs yet: only the wait's end.
            return self.handshake_deadline;
        }
        let p = self.phase.as_ref();
        // Once the phase ended (every stream wrote its last byte) it takes no more samples
        // and looks for no stall: those timers stay where they were, in the past, and would
        // wake the driver at once until the server's result comes.
        let running = p.filter(|p| !p.ended);
        [
            self.handshake_deadline,
            running.map(|p| p.next_sample),
            p.and_then(|p| p.stop_at.filter(|_| !p.stopped).map(|(t, _)| t)),
            running.map(|p| p.last_progress.1 + self.stall_limit()),
            p.and_then(|p| p.result_deadline),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether the session waits in the server's queue.
    fn waiting(&self) -> bool {
        self.queued.is_some() && self.server.is_none()
    }

    /// The server queued the session: wait up to the plan's wait from the first `Queued`.
    fn on_queued(&mut self, now: Instant, place: u32, expected_wait_s: Option<u64>) {
        if self.server.is_some() {
            return self.fail(Failure::Protocol(Violation::Unexpected {
                kind: "queued",
                during: "a transfer",
            }));
        }
        let since = self.queued.map_or(now, |(t, _, _)| t);
        self.queued = Some((since, place, expected_wait_s));
        self.handshake_deadline = Some(since + self.plan.wait);
        self.out.push_back(ClientOutput::Queued {
            place,
            expected_wait_s,
        });
    }

    /// Admitted after waiting since `since`: the phase's clocks start now (its probe bound,
    /// its stop, its stall detection), as if it had started now.
    fn leave_queue(&mut self, now: Instant) {
        let Some((since, _, _)) = self.queued else {
            return;
        };
        let waited = now.saturating_duration_since(since);
        if let Some(p) = &mut self.phase {
            p.epoch += waited;
            p.next_sample += waited;
            if let Some((t, cap)) = p.stop_at {
                p.stop_at = Some((t + waited, cap));
            }
            p.last_progress.1 = now;
        }
    }

    fn stall_limit(&self) -> Duration {
        self.plan
            .idle_timeout
            .saturating_add(Duration::from_secs(5))
    }

    /// The path's RTT with nothing queued on it, from the path database (the smallest any
    /// fresh entry of this peer was measured at, whatever its RTT now). An in-band
    /// measurement whose handshake waited well above it was made beside another flow's
    /// queue even when the streams, which started behind that queue, never saw less
    /// ([`Measured::lower_bound`]): beside `iperf3 -P 4` at 25 ms its four streams keep a
    /// 20-25 ms queue, which the database's entry from a transfer alone does not have.
    pub fn set_path_base_rtt(&mut self, rtt: Option<Duration>) {
        self.path_base_rtt = rtt.filter(|r| !r.is_zero());
    }

    /// Start the next phase now.
    pub fn start_phase(&mut self, now: Instant, req: PhaseRequest) {
        if self.failed || self.phase.is_some() {
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let (kind, estimator, round, sample_every, stop_at) = match &req.goal {
            Goal::Probe(plan) => {
                let bound = plan.max_duration + Duration::from_millis(100);
                (
                    Phase::Probe {
                        duration_ms: bound.as_millis() as u64,
                    },
                    FullPipe::for_plan(plan),
                    plan.round,
                    (plan.round / 8).max(Duration::from_millis(2)),
                    Some((now + bound, true)),
                )
            }
            Goal::Main => {
                let round = req
                    .hint
                    .rtt
                    .unwrap_or(Duration::from_millis(100))
                    .max(MIN_ROUND);
                let stop = self
                    .plan
                    .duration
                    .map(|d| (now + d, false))
                    .or(self.plan.max_time.map(|d| (now + d, true)));
                // Receiving, the rate is what arrives in order: the plateau's best round
                // without holes (slow start's overshoot leaves them in every stream as the
                // plateau is found; a pull across 50 ms x 200 Mbit/s measured 118 Mbit/s,
                // the median of its plateau, and 697 across 100 ms x 1 Gbit/s).
                let estimator = FullPipe::new(round, Duration::MAX);
                let estimator = if self.plan.sender {
                    estimator
                } else {
                    estimator.at_receiver().stop_at_plateau()
                };
                (Phase::Main, estimator, round, round / 4, stop)
            }
        };
        let _ = round;
        let streams = req.streams.clamp(1, self.max_streams());
        self.send(ClientMsg::StartPhase {
            seq,
            phase: kind,
            hint: req.hint.clone(),
            streams,
        });
        // An encrypted copy's streams wait for the server's `Accepted` to confirm that it
        // seals blocks too (an older server ignores the request): no block goes in clear.
        let hold = self.server.is_none()
            && matches!(req.goal, Goal::Main)
            && self.plan.params.files.as_ref().is_some_and(|f| f.encrypt);
        if !hold {
            self.out.push_back(ClientOutput::OpenStreams {
                seq,
                from: 0,
                to: streams,
                total: streams,
            });
        }
        self.phase = Some(PhaseState {
            seq,
            kind,
            goal: req.goal,
            in_band: req.in_band,
            epoch: now,
            estimator,
            sample_every,
            next_sample: now + sample_every,
            target: streams,
            requested: if hold { 0 } else { streams },
            initial: streams,
            open: BTreeSet::new(),
            done: BTreeSet::new(),
            finished: BTreeSet::new(),
            reason: req.reason,
            setup: None,
            stop_at,
            stopped: false,
            capped: false,
            interrupted: false,
            ended: false,
            result_deadline: None,
            last_progress: (0, now),
            retired: 0,
            pending_retire: None,
            handshake_rtt: req.hint.rtt,
        });
    }

    fn max_streams(&self) -> u32 {
        let server = self
            .server
            .as_ref()
            .map_or(u32::MAX, |s| s.limits.max_streams);
        self.plan.max_streams.min(server).max(1)
    }

    /// Why the phase has the streams it has (a plan made in band).
    pub fn note_reason(&mut self, reason: String) {
        if let Some(p) = &mut self.phase {
            p.reason = Some(reason);
        }
    }

    /// Settle the running phase on what the in-band measurement found: both ends' tuners
    /// hear `hint` for a transfer of `streams` streams, and streams open up to that count.
    pub fn settle(&mut self, _now: Instant, hint: PathHint, streams: u32) {
        if self.failed {
            return;
        }
        let max = self.max_streams();
        let Some(p) = &mut self.phase else { return };
        if p.stopped || p.ended {
            return;
        }
        let streams = streams.clamp(1, max).max(p.requested);
        p.target = p.target.max(streams);
        let seq = p.seq;
        self.send(ClientMsg::Hint {
            seq,
            hint: hint.clone(),
            streams,
            retire: false,
        });
        self.out
            .push_back(ClientOutput::LocalHint { hint, streams });
        self.open_wanted();
    }

    /// Settle the running phase on fewer streams than it has open (those the in-band
    /// measurement opened beyond what the plan needs): both ends' tuners hear `hint` for
    /// `streams` streams, and this end's senders `streams..` finish their message and close
    /// ([`ClientOutput::RetireStreams`]); no stream opens again in this phase, whatever a
    /// tuner asks. A receiving client asks the server's writers to close (`Hint.retire`),
    /// only of a server that says it does (`Accepted.retires`): an older one would keep
    /// them all. Only once every stream it asked for is open; otherwise, or when nothing
    /// would close, this is [`ClientSession::settle`]. Returns how many close.
    pub fn retire_to(&mut self, now: Instant, hint: PathHint, streams: u32) -> u32 {
        if self.failed {
            return 0;
        }
        let sender = self.plan.sender;
        let server_retires = self.server.as_ref().is_some_and(|s| s.retires);
        let Some(p) = &mut self.phase else { return 0 };
        let keep = streams.max(1);
        let all_open = p.open.len() as u32 == p.requested && p.done.is_empty();
        if !(sender || server_retires) || !all_open || p.stopped || p.ended || keep >= p.requested {
            self.settle(now, hint, streams);
            return 0;
        }
        let (seq, from, to) = (p.seq, keep, p.requested);
        p.target = keep;
        p.retired = to - from;
        self.send(ClientMsg::Hint {
            seq,
            hint: hint.clone(),
            streams: keep,
            retire: !sender,
        });
        self.out.push_back(ClientOutput::LocalHint {
            hint,
            streams: keep,
        });
        self.out.push_back(ClientOutput::RetireStreams {
            seq,
            from,
            to,
            local: sender,
        });
        to - from
    }

    /// Settle the running phase on the streams it has open now ([`ClientSession::settle`]),
    /// and close those beyond `keep` ([`ClientSession::retire_to`], with `hint`) once the
    /// transfer's delivery holds steady: a window of `window` that delivers within
    /// [`AutoPlan::steady`]'s band of the window before it (the first one: of `rate`, the
    /// rate measured). Not after `until`, when closing them would no longer pay.
    ///
    /// [`AutoPlan::steady`]: tcptune_core::tuners::auto::AutoPlan::steady
    pub fn retire_when_steady(
        &mut self,
        now: Instant,
        hint: PathHint,
        keep: u32,
        window: Duration,
        until: Option<Instant>,
    ) {
        let open = self.streams_requested();
        let before = hint.rate.unwrap_or(Rate(0));
        self.settle(now, hint.clone(), open);
        if let Some(p) = &mut self.phase {
            if !p.stopped && !p.ended && keep < p.requested {
                p.pending_retire = Some(PendingRetire {
                    hint,
                    keep,
                    window,
                    until,
                    since: None,
                    before,
                });
            }
        }
    }

    /// A sample of delivery for a pending retirement: the streams close when it is due.
    fn watch_retire(&mut self, now: Instant, delivered: u64) {
        let Some(p) = &mut self.phase else { return };
        let Some(r) = &mut p.pending_retire else {
            return;
        };
        if p.stopped || p.ended || r.until.is_some_and(|u| now > u) {
            p.pending_retire = None;
            return;
        }
        let Some((t0, d0)) = r.since else {
            r.since = Some((now, delivered));
            return;
        };
        let elapsed = now.saturating_duration_since(t0);
        if elapsed < r.window {
            return;
        }
        let rate =
            Rate::from_bytes_over(tcptune_core::Bytes(delivered.saturating_sub(d0)), elapsed);
        if !tcptune_core::tuners::auto::AutoPlan::steady(r.before, rate) {
            r.before = rate;
            r.since = Some((now, delivered));
            return;
        }
        if let Some(r) = p.pending_retire.take() {
            let open = p.requested;
            let (hint, keep) = steady_plan(r.hint, r.keep, open, rate);
            self.retire_to(now, hint, keep);
        }
    }

    /// End the session (after the last phase).
    pub fn finish(&mut self) {
        if !self.failed {
            self.out.push_back(ClientOutput::Send(ClientMsg::Bye));
        }
    }

    /// A message from the server.
    pub fn handle_msg(&mut self, now: Instant, msg: ServerMsg) {
        self.handle_answer(now, msg);
        // The server answered: a stream that failed meanwhile fails the session now.
        if let Some(f) = self.early_stream_failure.take() {
            self.fail(Failure::Connect(f));
        }
    }

    fn handle_answer(&mut self, now: Instant, msg: ServerMsg) {
        if self.failed {
            return;
        }
        match msg {
            ServerMsg::Challenge {
                nonce, key_share, ..
            } => {
                if let Some(k) = key_share {
                    if !self.take_share(&k) {
                        return;
                    }
                }
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
                // The server dropped what followed Hello: answer, then send it all again.
                self.out.push_back(ClientOutput::Send(ClientMsg::Auth {
                    mac: wire::to_hex(&mac),
                }));
                for m in self.sent.clone() {
                    self.out.push_back(ClientOutput::Send(m));
                }
            }
            ServerMsg::Accepted {
                limits,
                host_limits,
                congestion,
                auth_required,
                key_share,
                encrypt,
                retires,
                ..
            } => {
                if self.server.is_some() {
                    return self.fail(Failure::Protocol(Violation::AcceptedTwice));
                }
                // A client with a secret takes no server that skips it (no downgrade).
                if self.plan.auth.is_some() && !self.challenged && !auth_required {
                    return self.fail(Failure::Protocol(Violation::SecretUnchecked));
                }
                let asked = self.plan.params.files.as_ref().is_some_and(|f| f.encrypt);
                if asked && !encrypt {
                    // An older server ignores the field it does not know: never copy in
                    // clear what the user asked to be sealed.
                    return self.fail(Failure::File(FileFailure::new(
                        FailKind::Refused,
                        "the server does not encrypt copy blocks (its tcptune predates cp --encrypt): update tcptune there, or copy without --encrypt",
                    )));
                }
                if !self.take_share(&key_share) {
                    return;
                }
                let Some(key_share) = self.server_share else {
                    return;
                };
                self.handshake_deadline = None;
                self.leave_queue(now);
                self.server = Some(ServerInfo {
                    limits,
                    host_limits,
                    congestion,
                    auth_required,
                    key_share,
                    retires,
                });
                self.open_wanted();
            }
            ServerMsg::Rejected {
                reason,
                retry_after_s,
            } => self.fail(Failure::Rejected {
                reason,
                retry_after_s,
            }),
            ServerMsg::Queued {
                place,
                expected_wait_s,
            } => self.on_queued(now, place, expected_wait_s),
            ServerMsg::WantStreams {
                known_streams,
                count,
                reason,
            } => self.want(known_streams, count, reason),
            ServerMsg::PhaseResult { seq, result } => {
                if self.ignored_results.remove(&seq) {
                    return;
                }
                let Some(p) = &self.phase else {
                    return self.fail(Failure::Protocol(Violation::ResultWithoutPhase { seq }));
                };
                if p.seq != seq || !p.ended {
                    return self.fail(Failure::Protocol(Violation::EarlyResult { seq }));
                }
                self.complete(Some(result));
            }
            ServerMsg::Share {
                rate_bps,
                sessions,
                path_bps,
            } => {
                // Only a running main phase is paced; a share that crosses the phase's end
                // (or comes before it) is nothing to act on.
                let main = self
                    .phase
                    .as_ref()
                    .is_some_and(|p| p.kind == Phase::Main && !p.ended && !p.stopped);
                if main && self.plan.params.share {
                    self.out.push_back(ClientOutput::Pace {
                        rate: rate_bps.map(|r| Rate(r.max(MIN_SHARE.0))),
                        sessions,
                        path: path_bps.map(Rate),
                    });
                }
            }
            ServerMsg::FileFailed { mut failure } => {
                failure.message = format!("at the server: {}", failure.message);
                self.fail(Failure::File(failure))
            }
            other @ (ServerMsg::Measure { .. } | ServerMsg::Advice { .. }) => {
                self.fail(Failure::Protocol(Violation::Unexpected {
                    kind: other.kind(),
                    during: "a transfer",
                }))
            }
            ServerMsg::Abort { integrity, reason } => self.fail(if integrity {
                Failure::Integrity(format!("the server reports: {reason}"))
            } else {
                Failure::Transfer(format!("the server aborted: {reason}"))
            }),
        }
        let _ = now;
    }

    /// Open streams up to `total` in the running phase (the driver's plan, once the
    /// server's limits are known).
    pub fn raise_target(&mut self, total: u32, reason: String) {
        self.want(0, total, reason);
    }

    fn want(&mut self, known: u32, count: u32, reason: String) {
        let max = self.max_streams();
        let Some(p) = &mut self.phase else { return };
        if p.stopped || p.ended || p.kind != Phase::Main || p.retired > 0 {
            return;
        }
        let want = known.saturating_add(count).min(max);
        if want > p.target {
            p.target = want;
            p.reason = Some(reason);
        }
        self.open_wanted();
    }

    /// Open what the plan wants beyond what was asked for, once the server's allowance is
    /// known.
    fn open_wanted(&mut self) {
        if self.server.is_none() {
            return;
        }
        let max = self.max_streams();
        let Some(p) = &mut self.phase else { return };
        if p.stopped || p.ended {
            return;
        }
        let target = p.target.min(max);
        if target > p.requested {
            let from = p.requested;
            p.requested = target;
            self.out.push_back(ClientOutput::OpenStreams {
                seq: p.seq,
                from,
                to: target,
                total: target,
            });
        }
    }

    /// The user asks to stop: a running phase ends at once at both ends (as at the cap) and
    /// its results are still collected; before any phase the session fails.
    pub fn handle_interrupt(&mut self, _now: Instant) {
        if self.failed {
            return;
        }
        let Some(p) = &mut self.phase else {
            return self.fail(Failure::Interrupted);
        };
        if p.interrupted || p.ended {
            return;
        }
        p.interrupted = true;
        if !p.stopped {
            p.stopped = true;
            self.send(ClientMsg::Stop { capped: true });
            self.out.push_back(ClientOutput::AbortEngine);
        }
    }

    /// The server closed the control connection (after everything it sent was handled).
    pub fn handle_closed(&mut self, _now: Instant) {
        self.fail(Failure::Closed);
    }

    /// Stream `index` of the running phase is connected and carries data.
    pub fn handle_stream_open(&mut self, now: Instant, index: u32) {
        let Some(p) = &mut self.phase else { return };
        p.open.insert(index);
        p.last_progress.1 = now;
        if p.setup.is_none() && (0..p.initial).all(|i| p.open.contains(&i)) {
            p.setup = Some(now.saturating_duration_since(p.epoch));
        }
    }

    /// Stream `index` could not be opened.
    /// Before the server said anything (no challenge, no admission) the failure waits for
    /// its first message, its close or the answer's deadline, which say more.
    pub fn handle_stream_failed(&mut self, _now: Instant, index: u32, why: String) {
        let f = StreamFailed {
            index,
            measurement: false,
            reason: why,
        };
        if self.server.is_none() && self.server_share.is_none() && self.queued.is_none() {
            self.early_stream_failure.get_or_insert(f);
            return;
        }
        self.fail(Failure::Connect(f));
    }

    /// An event of the local engine.
    pub fn handle_engine(&mut self, now: Instant, ev: Event) {
        if self.failed {
            return;
        }
        match ev {
            // A sender that wrote its last byte opens nothing more: the phase may end for
            // the server while the bytes are still in flight (its result comes when they
            // have arrived), a round trip before this end's streams see the receiver close.
            Event::StreamDone(i) | Event::StreamWritten(i) => {
                if let Some(p) = &mut self.phase {
                    p.done.insert(i);
                    if matches!(ev, Event::StreamDone(_)) {
                        p.finished.insert(i);
                    }
                }
                self.check_ended(now);
            }
            Event::Integrity(_) => {
                // Our receiver found bad data: stop both ends at once, then collect both
                // sides' results so the error comes with a report (the engine keeps the
                // failure and the report judges it).
                let Some(p) = &mut self.phase else { return };
                if !p.stopped {
                    p.stopped = true;
                    p.capped = false;
                    self.send(ClientMsg::Stop { capped: true });
                }
                self.out.push_back(ClientOutput::AbortEngine);
            }
            Event::MoreStreams(r) => self.want(r.known_streams, r.count, r.reason),
            Event::FileFailed(f) => self.fail(Failure::File(f)),
        }
    }

    fn check_ended(&mut self, now: Instant) {
        let idle = self.plan.idle_timeout;
        let Some(p) = &mut self.phase else { return };
        let probe = matches!(p.goal, Goal::Probe(_));
        // The server's result is due once every stream delivered all it wrote (written
        // data may take long to arrive: the sender's buffer can hold the whole transfer).
        if p.ended && !probe && p.result_deadline.is_none() && p.finished.len() >= p.open.len() {
            p.result_deadline = Some(now + idle.saturating_add(Duration::from_secs(5)));
        }
        if p.ended || p.open.len() as u32 != p.requested || p.done.len() < p.open.len() {
            return;
        }
        p.ended = true;
        let (seq, n) = (p.seq, p.requested);
        if !probe && p.finished.len() >= p.open.len() {
            p.result_deadline = Some(now + idle.saturating_add(Duration::from_secs(5)));
        }
        self.send(ClientMsg::EndPhase { streams: n });
        if probe {
            // The probe's measurement is this end's; the server's side is not waited for.
            self.ignored_results.insert(seq);
            self.complete(None);
        }
    }

    fn complete(&mut self, remote: Option<Box<SideResult>>) {
        let Some(p) = self.phase.take() else { return };
        self.sent.clear();
        self.out.push_back(ClientOutput::PhaseDone {
            seq: p.seq,
            outcome: PhaseOutcome {
                capped: p.capped,
                interrupted: p.interrupted,
                streams_reason: p.reason,
                setup: p.setup.unwrap_or_default(),
                delivery: p.estimator.outcome(),
                remote,
            },
        });
    }

    /// Time passed; `obs` shows the engine.
    pub fn handle_timeout(&mut self, now: Instant, obs: &mut dyn Observe) {
        if self.failed {
            return;
        }
        if self.handshake_deadline.is_some_and(|d| now >= d) {
            if let Some((_, place, expected)) = self.queued {
                return self.fail(Failure::Rejected {
                    reason: format!(
                        "no session slot at the server within {:.0} s of waiting in its queue (place {place}); wait longer with --wait SECONDS",
                        self.plan.wait.as_secs_f64()
                    ),
                    retry_after_s: expected,
                });
            }
            return self.fail(Failure::NoAnswer(format!(
                "the server did not admit the session within {:.0} s",
                self.plan.connect_timeout.as_secs_f64()
            )));
        }
        if self.waiting() {
            return;
        }
        let stall = self.stall_limit();
        let sender = self.plan.sender;
        let base_rtt = self.path_base_rtt;
        let Some(p) = &mut self.phase else { return };
        if p.result_deadline.is_some_and(|d| now >= d) {
            return self.fail(Failure::NoAnswer(
                "the server did not send its side of the transfer".into(),
            ));
        }
        if now >= p.next_sample && !p.ended {
            p.next_sample = now + p.sample_every;
            let t = Time::from_nanos(
                u64::try_from(now.saturating_duration_since(p.epoch).as_nanos())
                    .unwrap_or(u64::MAX),
            );
            let delivered = obs.delivered();
            // Read (a TCP_INFO per stream) only while the plateau is still being looked for:
            // a receiving client's estimator does not settle, so nothing after it uses it.
            let ooo = if sender || p.estimator.is_full() {
                None
            } else {
                obs.out_of_order()
            };
            let full = p.estimator.on_sample_ordered(t, delivered, ooo).is_some();
            let probe_done = full && matches!(p.goal, Goal::Probe(_)) && !p.stopped;
            if probe_done {
                p.stopped = true;
            }
            let mut found = None;
            if full && !p.stopped && p.in_band != InBand::Off {
                let o = p.estimator.outcome();
                // The lowest RTT the path showed: the streams' own, or the database's.
                let lowest = match (obs.own_min_rtt(), base_rtt) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                found = match (p.in_band, o.rate) {
                    (InBand::Measure, Some(rate)) => {
                        let beside =
                            AutoPlan::measured_beside_another_flow(p.handshake_rtt, lowest);
                        Some((rate, None, o.rounds, beside))
                    }
                    // Much less than the database said: the path changed, or another flow
                    // shares it now. A queue the streams' handshake saw and they never did
                    // tells the second: the reading is then what they got beside that flow,
                    // a lower bound, as in a measurement (a latecomer beside `iperf3 -P 4`
                    // at 25 ms, settled on its share as the path's rate, held 273-344 Mbit/s
                    // against iperf3's 629-692).
                    (InBand::Check(known), Some(rate))
                        if rate.0.saturating_mul(4) < known.0.saturating_mul(3) =>
                    {
                        let beside =
                            AutoPlan::measured_beside_another_flow(p.handshake_rtt, lowest);
                        Some((rate, Some(known), o.rounds, beside))
                    }
                    _ => None,
                };
                p.in_band = InBand::Off;
            }
            let after = now.saturating_duration_since(p.epoch);
            if probe_done {
                self.send(ClientMsg::Stop { capped: true });
                self.out.push_back(ClientOutput::AbortEngine);
            }
            if let Some((rate, corrects, rounds, lower_bound)) = found {
                self.out.push_back(ClientOutput::Measured(Measured {
                    rate,
                    corrects,
                    after,
                    rounds,
                    lower_bound,
                }));
            }
            self.watch_retire(now, delivered);
        }
        let Some(p) = &mut self.phase else { return };
        if let Some((at, cap)) = p.stop_at {
            let probe = matches!(p.goal, Goal::Probe(_));
            // The cap holds until the data has arrived, not only until it was written: a
            // sender's buffer can hold much of the transfer, and a slow stream delivers it
            // long after every stream wrote its last message.
            let in_flight = p.ended && cap && !probe && p.finished.len() < p.open.len();
            if now >= at && !p.stopped && (!p.ended || in_flight) {
                p.stopped = true;
                // The cap and the end of the probe end both ends at once (queued data is
                // discarded); the end of a duration workload lets written data arrive.
                let hard = cap || probe;
                p.capped = cap && !probe;
                if hard || !sender {
                    self.send(ClientMsg::Stop { capped: hard });
                }
                if hard {
                    self.out.push_back(ClientOutput::AbortEngine);
                } else if sender {
                    self.out.push_back(ClientOutput::StopSenders);
                }
            }
        }
        let Some(p) = &mut self.phase else { return };
        if !p.ended {
            let moved = obs.progress();
            if moved != p.last_progress.0 {
                p.last_progress = (moved, now);
            } else if now.saturating_duration_since(p.last_progress.1) >= stall {
                let secs = now
                    .saturating_duration_since(p.last_progress.1)
                    .as_secs_f64();
                self.fail(Failure::Transfer(format!("no progress for {secs:.0} s")));
            }
        }
    }
}

/// What the streams that stay are planned for once delivery held steady at `steady`: the
/// measured rate and the `keep` planned from it, unless the transfer delivers more than
/// was measured (a receiver's measurement can end on the way up: 700 Mbit/s measured where
/// the 8 streams then held 965). Then the hint carries the steady rate and the streams
/// that stay grow in proportion (a plan's count is about the BDP over what one stream
/// holds), within the `open` ones: planned for 700 Mbit/s, three streams had to grow 2.7 x
/// each after the others closed, and BBR's bandwidth probing took about a second to do it
/// (a dip to 520-600 Mbit/s, 4 runs), where four streams planned for 962 dipped to 860.
fn steady_plan(mut hint: PathHint, keep: u32, open: u32, steady: Rate) -> (PathHint, u32) {
    let Some(measured) = hint.rate.filter(|m| steady > *m && m.0 > 0) else {
        return (hint, keep);
    };
    hint.rate = Some(steady);
    let scaled = (f64::from(keep) * steady.0 as f64 / measured.0 as f64).round();
    let keep = (scaled as u32).clamp(keep, open.max(keep));
    (hint, keep)
}

#[cfg(test)]
mod tests;
