//! An admitted session at the server, as a state machine: control messages, data
//! connections, engine events and time in; messages to send and engine commands out. No
//! sockets, no threads, no clock: every rule of a session lives here and is unit-tested.
//!
//! # Calling order
//!
//! The [`super::endpoint::Endpoint`] creates a session once the client's handshake is
//! admitted and then, for as long as the session lives:
//!
//! * feeds every control message to [`ServerSession::handle_msg`];
//! * offers every data connection that names this session to [`ServerSession::attach`];
//! * forwards the engine's events to [`ServerSession::handle_engine`] and the phase's result
//!   (after [`SessionOutput::FinishEngine`]) to [`ServerSession::handle_phase_result`];
//! * calls [`ServerSession::handle_timeout`] at [`ServerSession::poll_timeout`], with the
//!   engine's progress counter when a phase runs;
//! * after each call, drains [`ServerSession::poll_output`] and carries the outputs out in
//!   order. After [`SessionOutput::Close`] the session takes no more calls.
//!
//! # Rules
//!
//! * Phases run one at a time, numbered from 0; a data connection joins only the running
//!   phase, from the control connection's address (the endpoint checks the address), with a
//!   stream index below the session's stream allowance, once.
//! * The phase ends when the client said `EndPhase{n}`, streams `0..n` have all joined and
//!   every one of them has ended: then the engine is finished and its result sent.
//! * Time: a phase with no control message and no data progress for the idle timeout ends
//!   the session; so does the idle timeout between phases, missing streams a handshake
//!   timeout after `EndPhase`, and the session's lifetime (nothing a client sends extends
//!   it). The server stops its own senders at the workload's duration plus 5 s even if the
//!   client never says `Stop`.
//! * Every phase is watched from the server's side ([`watch`]): at its end the session
//!   reports what it measured of the client's path ([`SessionOutput::Measured`]) for the
//!   server's path database.
//! * An advice session ([`ServerSession::advise`], see [`advise`]) asks the driver for the
//!   path database's entry ([`SessionOutput::Lookup`]), then answers from it or measures
//!   the path itself first: a phase the server leads and ends once it has seen the pipe
//!   full.

use super::ConnId;
use crate::result::SideResult;
use crate::session::Event;
use crate::wire::{ClientMsg, Phase, ServerLimits, ServerMsg, TestParams};
use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};
use tcptune_core::pathdb::Direction;
use tcptune_core::{PathHint, Rate};

pub mod advise;
pub(crate) mod watch;

use advise::AdviseCtx;
use watch::PathWatch;
pub use watch::{Observation, PathMeasurement};

/// The longest bandwidth probe a client may ask for.
pub const MAX_PROBE: Duration = Duration::from_secs(10);
/// Messages a session keeps while it finishes a phase (the client pipelines the next start).
const MAX_QUEUED: usize = 8;
/// The server stops its senders this long after the workload's duration if the client did
/// not say `Stop`.
const SENDER_GRACE: Duration = Duration::from_secs(5);

/// The bounds of one session.
#[derive(Clone, Debug)]
pub(crate) struct SessionPolicy {
    /// The server's limits, with `max_streams` set to this session's stream allowance.
    pub(crate) limits: ServerLimits,
    /// Time to connect a stream the client announced.
    pub(crate) handshake_timeout: Duration,
    /// Longest time without progress.
    pub(crate) idle_timeout: Duration,
    /// Longest life of the session from admission.
    pub(crate) lifetime: Duration,
}

/// What the driver must start for a phase.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineSpec {
    /// The phase's number.
    pub(crate) seq: u32,
    /// Probe or transfer.
    pub kind: Phase,
    /// The test (role, workload, series, congestion control, seed).
    pub params: TestParams,
    /// What the client knows of the path, bounded.
    pub hint: PathHint,
    /// Streams the client opens at first (the tuners' stream count).
    pub streams: u32,
}

impl EngineSpec {
    /// Messages this end moves in the phase (`None`: until stopped).
    pub fn messages(&self) -> Option<u64> {
        match self.kind {
            Phase::Probe { .. } => None,
            Phase::Main => self
                .params
                .duration_ms
                .is_none()
                .then_some(self.params.messages),
        }
    }
}

/// How a session ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SessionEnd {
    /// The client said `Bye` after its phases.
    Completed,
    /// It failed; the client was told why when it could still hear it.
    Failed {
        /// Why.
        reason: String,
        /// The data did not check out.
        integrity: bool,
    },
}

/// What the session asks of its driver, in order.
#[derive(Debug, PartialEq)]
pub(crate) enum SessionOutput {
    /// Send this message on the control connection.
    Send(ServerMsg),
    /// Start an engine for a new phase.
    StartEngine(EngineSpec),
    /// Hand this data connection to the engine as stream `index`.
    AttachStream {
        /// The connection.
        conn: ConnId,
        /// Its stream index.
        index: u32,
    },
    /// The path's rate became known (or changed): tell every stream's tuner.
    Hint {
        /// The path, bounded.
        hint: PathHint,
        /// Streams in the transfer.
        streams: u32,
    },
    /// The senders of streams `keep..` finish the message or block they are sending and
    /// close (the client settled a reversed phase on fewer streams).
    RetireSenders {
        /// Streams that stay.
        keep: u32,
    },
    /// Senders stop (end of a duration workload).
    StopSenders,
    /// Tear the engine down at once.
    AbortEngine,
    /// Join the engine and report its result with [`ServerSession::handle_phase_result`].
    FinishEngine {
        /// The phase.
        seq: u32,
    },
    /// What the server measured of the client's path in the phase that just ended.
    Measured(PathMeasurement),
    /// Look the client's path up in the path database and call
    /// [`ServerSession::handle_lookup`] (an advice session).
    Lookup {
        /// Direction of the data, seen from the server.
        direction: Direction,
    },
    /// The session is over (after flushing what was sent).
    Close(SessionEnd),
}

#[derive(Debug)]
struct PhaseState {
    seq: u32,
    kind: Phase,
    attached: BTreeSet<u32>,
    done: BTreeSet<u32>,
    expected: Option<u32>,
    end_deadline: Option<Instant>,
    sender_deadline: Option<Instant>,
    last_progress: Option<u64>,
    last_activity: Instant,
    stopped: bool,
    /// Largest stream target announced with `WantStreams` (asked once per target).
    want_sent: u32,
    /// The server's own measurement of the path.
    watch: Box<PathWatch>,
    /// The server ends the phase itself once the watch has seen the pipe full (an advice's
    /// measurement).
    lead: bool,
}

#[derive(Debug)]
enum State {
    Ready {
        idle_deadline: Instant,
    },
    /// An advice session waits for the path database.
    Lookup {
        deadline: Instant,
    },
    Phase(PhaseState),
    Finishing {
        seq: u32,
        main: bool,
    },
    Closed,
}

/// One admitted session. See the module documentation for the calling order.
#[derive(Debug)]
pub(crate) struct ServerSession {
    params: TestParams,
    policy: SessionPolicy,
    state: State,
    next_seq: u32,
    expires: Instant,
    out: VecDeque<SessionOutput>,
    queued: VecDeque<ClientMsg>,
    /// The watch of the phase that is finishing.
    finished_watch: Option<Box<PathWatch>>,
    main_bytes: u64,
    /// The main phase's throughput at this end, bit/s, once it ended.
    main_rate: Option<f64>,
    /// What an advice session was asked, and its progress.
    advise: Option<Box<AdviseCtx>>,
}

impl ServerSession {
    /// A session admitted at `now` for `params` (already validated against the limits).
    pub(crate) fn new(now: Instant, params: TestParams, policy: SessionPolicy) -> ServerSession {
        ServerSession {
            expires: now + policy.lifetime,
            state: State::Ready {
                idle_deadline: now + policy.idle_timeout,
            },
            params,
            policy,
            next_seq: 0,
            out: VecDeque::new(),
            queued: VecDeque::new(),
            finished_watch: None,
            main_bytes: 0,
            main_rate: None,
            advise: None,
        }
    }

    /// The tuning mode, for monitoring (`advise` for an advice session).
    pub(crate) fn mode(&self) -> &'static str {
        if self.advise.is_some() {
            "advise"
        } else {
            self.params.tune.name()
        }
    }

    /// The main phase's throughput at this end (bit/s), once it ended.
    pub(crate) fn main_rate(&self) -> Option<f64> {
        self.main_rate
    }

    /// Payload bytes of the main phase, once it ended (for the log).
    pub(crate) fn main_bytes(&self) -> u64 {
        self.main_bytes
    }

    /// Whether the session is over.
    pub(crate) fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// The running phase's number, if one runs (data connections of other phases are
    /// refused).
    #[cfg(test)]
    pub(crate) fn running_phase(&self) -> Option<u32> {
        match &self.state {
            State::Phase(p) => Some(p.seq),
            _ => None,
        }
    }

    /// The latest time at which this session is certain to be gone if its client does
    /// nothing more (for "retry after" in a busy server's refusal).
    pub(crate) fn gone_by(&self) -> Instant {
        match &self.state {
            State::Ready { idle_deadline } => (*idle_deadline).min(self.expires),
            _ => self.expires,
        }
    }

    /// Whether phase `seq` has not started yet (a data connection for it may wait).
    pub(crate) fn phase_is_future(&self, seq: u32) -> bool {
        seq >= self.next_seq
    }

    /// The control connection broke the protocol (a malformed frame) or closed: the session
    /// ends with this reason.
    pub(crate) fn protocol_error(&mut self, reason: String) {
        if self.advised() {
            // An advice's client may close once it has its answer.
            return self.complete();
        }
        self.fail(reason, false);
    }

    /// The endpoint gives this session's slot to another client (it moved too little
    /// data): the session ends with `reason`, which the client is told.
    pub(crate) fn shed(&mut self, reason: String) {
        self.fail(reason, false);
    }

    /// Payload bytes the session moves in all, when its workload says (a message
    /// workload; not a duration, a copy or an advice).
    pub(crate) fn workload_bytes(&self) -> Option<u64> {
        let p = &self.params;
        (self.advise.is_none() && p.duration_ms.is_none() && p.files.is_none())
            .then(|| p.messages.saturating_mul(p.message_size))
    }

    /// The next thing to do.
    pub(crate) fn poll_output(&mut self) -> Option<SessionOutput> {
        self.out.pop_front()
    }

    /// When [`ServerSession::handle_timeout`] is due (a deadline, or the watch's next
    /// observation).
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.next_timeout(true)
    }

    /// The next deadline, without the watch's observations.
    #[cfg(test)]
    pub(crate) fn poll_deadline(&self) -> Option<Instant> {
        self.next_timeout(false)
    }

    fn next_timeout(&self, watch: bool) -> Option<Instant> {
        let own = match &self.state {
            State::Closed => return None,
            State::Ready { idle_deadline } => Some(*idle_deadline),
            State::Lookup { deadline } => Some(*deadline),
            State::Phase(p) => [
                Some(p.last_activity + self.policy.idle_timeout),
                p.end_deadline,
                p.sender_deadline.filter(|_| !p.stopped),
                Some(p.watch.next_sample()).filter(|_| watch && !p.stopped),
            ]
            .into_iter()
            .flatten()
            .min(),
            State::Finishing { .. } => None,
        };
        Some(own.map_or(self.expires, |t| t.min(self.expires)))
    }

    fn send(&mut self, m: ServerMsg) {
        self.out.push_back(SessionOutput::Send(m));
    }

    /// End the session with an error the client is told.
    fn fail(&mut self, reason: String, integrity: bool) {
        if self.is_closed() {
            return;
        }
        if matches!(self.state, State::Phase(_) | State::Finishing { .. }) {
            self.out.push_back(SessionOutput::AbortEngine);
        }
        self.send(ServerMsg::Abort {
            integrity,
            reason: reason.clone(),
        });
        self.out.push_back(SessionOutput::Close(SessionEnd::Failed {
            reason,
            integrity,
        }));
        self.state = State::Closed;
    }

    /// A control message from the client.
    pub(crate) fn handle_msg(&mut self, now: Instant, msg: ClientMsg) {
        if self.advise.is_some() {
            return self.advise_msg(now, msg);
        }
        let ending = match &mut self.state {
            State::Closed => return,
            State::Lookup { .. } | State::Finishing { .. } => true,
            State::Phase(p) => {
                p.last_activity = now;
                // After `EndPhase` the client may pipeline its next phase: it waits.
                p.expected.is_some()
            }
            State::Ready { .. } => false,
        };
        if ending {
            if self.queued.len() >= MAX_QUEUED {
                return self.fail("too many messages while a phase ends".into(), false);
            }
            self.queued.push_back(msg);
            return;
        }
        match msg {
            ClientMsg::StartPhase {
                seq,
                phase,
                hint,
                streams,
            } => self.start_phase(now, seq, phase, hint, streams),
            ClientMsg::Stop { capped } => {
                if let State::Phase(p) = &mut self.state {
                    if !p.stopped {
                        p.stopped = true;
                        self.out.push_back(if capped {
                            SessionOutput::AbortEngine
                        } else {
                            SessionOutput::StopSenders
                        });
                    }
                }
                // Outside a phase: a Stop that crossed the phase's end. Nothing to do.
            }
            ClientMsg::Hint {
                seq,
                hint,
                streams,
                retire,
            } => {
                let max = self.policy.limits.max_streams;
                let sends = self.params.reverse;
                if let State::Phase(p) = &mut self.state {
                    if p.seq == seq && !p.stopped {
                        // The client measured the rate in band: the buffers follow it now
                        // (a plateau is the path's unless the client found it a lower
                        // bound, beside another flow).
                        p.watch.hinted(hint.rate_is_lower_bound);
                        let keep = streams.clamp(1, max);
                        // Asked to close streams, this end asks for no more of them.
                        p.want_sent = if retire {
                            max
                        } else {
                            p.want_sent.max(streams.min(max))
                        };
                        self.out.push_back(SessionOutput::Hint {
                            hint: sanitize_hint(hint),
                            streams: keep,
                        });
                        // Only this end's own senders close; a client that sends closes
                        // its own (a retire for them is ignored).
                        if retire && sends {
                            self.out.push_back(SessionOutput::RetireSenders { keep });
                        }
                    }
                }
                // Another phase's hint, or one that crossed the phase's end: nothing to do.
            }
            ClientMsg::EndPhase { streams } => self.end_phase(now, streams),
            ClientMsg::Bye => match self.state {
                State::Ready { .. } => {
                    self.out
                        .push_back(SessionOutput::Close(SessionEnd::Completed));
                    self.state = State::Closed;
                }
                _ => self.fail("the client left during a phase".into(), false),
            },
            other @ (ClientMsg::Hello { .. }
            | ClientMsg::Auth { .. }
            | ClientMsg::Setup { .. }
            | ClientMsg::Advise { .. }) => self.fail(
                format!("unexpected {} in a running session", other.kind()),
                false,
            ),
        }
    }

    fn start_phase(&mut self, now: Instant, seq: u32, kind: Phase, hint: PathHint, streams: u32) {
        if !matches!(self.state, State::Ready { .. }) {
            return self.fail("start_phase while a phase runs".into(), false);
        }
        if seq != self.next_seq {
            return self.fail(
                format!("start_phase {seq}: expected phase {}", self.next_seq),
                false,
            );
        }
        if let Err(e) = check_phase(kind) {
            return self.fail(e, false);
        }
        let max = self.policy.limits.max_streams;
        if streams == 0 || streams > max {
            return self.fail(
                format!("{streams} streams in a phase; this session allows 1 to {max}"),
                false,
            );
        }
        self.next_seq += 1;
        let limit_ms = match kind {
            Phase::Probe { duration_ms } => Some(duration_ms),
            Phase::Main => self.params.duration_ms.or(self.params.max_time_ms),
        };
        let sender_deadline =
            limit_ms.map(|ms| now + Duration::from_millis(ms).saturating_add(SENDER_GRACE));
        let hint = sanitize_hint(hint);
        let measuring = matches!(kind, Phase::Probe { .. }) || hint.rate_in_band;
        let watch = PathWatch::new(
            now,
            hint.rtt,
            server_direction(&self.params),
            measuring,
            Duration::MAX,
            4,
            Duration::from_millis(10),
        );
        self.out.push_back(SessionOutput::StartEngine(EngineSpec {
            seq,
            kind,
            params: self.params.clone(),
            hint,
            streams,
        }));
        self.state = State::Phase(PhaseState {
            seq,
            kind,
            attached: BTreeSet::new(),
            done: BTreeSet::new(),
            expected: None,
            end_deadline: None,
            sender_deadline,
            last_progress: None,
            last_activity: now,
            stopped: false,
            want_sent: streams,
            watch: Box::new(watch),
            lead: false,
        });
    }

    fn end_phase(&mut self, now: Instant, streams: u32) {
        let handshake = self.policy.handshake_timeout;
        let max = self.policy.limits.max_streams;
        let State::Phase(p) = &mut self.state else {
            return self.fail("end_phase outside a phase".into(), false);
        };
        if p.expected.is_some() {
            return self.fail("end_phase twice".into(), false);
        }
        let highest = p.attached.iter().next_back().map_or(0, |i| i + 1);
        if streams > max || streams < highest {
            return self.fail(
                format!("end_phase with {streams} streams, but stream {highest} joined"),
                false,
            );
        }
        p.expected = Some(streams);
        p.end_deadline = Some(now + handshake);
        self.check_complete();
    }

    /// Whether a data connection for phase `seq`, stream `index` may join. `Err` says why
    /// not (the endpoint closes the connection and counts it).
    pub(crate) fn accepts(&self, seq: u32, index: u32) -> Result<(), String> {
        let State::Phase(p) = &self.state else {
            return Err("no phase is running".into());
        };
        if seq != p.seq {
            return Err(format!("phase {seq} is not running (phase {} is)", p.seq));
        }
        if index >= self.policy.limits.max_streams {
            return Err(format!(
                "stream {} exceeds this session's limit of {} streams",
                index + 1,
                self.policy.limits.max_streams
            ));
        }
        if p.expected.is_some_and(|n| index >= n) {
            return Err(format!("stream {} was not announced", index + 1));
        }
        if p.attached.contains(&index) {
            return Err(format!("stream {} joined already", index + 1));
        }
        if p.stopped {
            return Err("the phase is stopping".into());
        }
        Ok(())
    }

    /// A data connection joins as stream `index` (after [`ServerSession::accepts`] said yes).
    pub(crate) fn attach(&mut self, now: Instant, conn: ConnId, seq: u32, index: u32) {
        if self.accepts(seq, index).is_err() {
            return;
        }
        if let State::Phase(p) = &mut self.state {
            p.attached.insert(index);
            p.last_activity = now;
            self.out
                .push_back(SessionOutput::AttachStream { conn, index });
        }
    }

    /// An event of the running phase's engine.
    pub(crate) fn handle_engine(&mut self, now: Instant, ev: Event) {
        let max = self.policy.limits.max_streams;
        match ev {
            Event::FileFailed(f) => {
                if matches!(self.state, State::Phase(_) | State::Finishing { .. }) {
                    let reason = f.message.clone();
                    self.send(ServerMsg::FileFailed { failure: f });
                    self.fail(reason, false);
                }
            }
            Event::Integrity(e) => {
                if matches!(self.state, State::Phase(_)) {
                    self.fail(format!("integrity: {e}"), true);
                }
            }
            // The server's result waits for its streams' final samples.
            Event::StreamWritten(_) => {}
            Event::StreamDone(i) => {
                if let State::Phase(p) = &mut self.state {
                    p.done.insert(i);
                    p.last_activity = now;
                    self.check_complete();
                }
            }
            Event::MoreStreams(r) => {
                let State::Phase(p) = &mut self.state else {
                    return;
                };
                let target = r.known_streams.saturating_add(r.count).min(max);
                if p.stopped || p.expected.is_some() || target <= p.want_sent {
                    return;
                }
                p.want_sent = target;
                self.send(ServerMsg::WantStreams {
                    known_streams: r.known_streams,
                    count: r.count,
                    reason: r.reason,
                });
            }
        }
    }

    fn check_complete(&mut self) {
        let State::Phase(p) = &self.state else {
            return;
        };
        let Some(n) = p.expected else { return };
        if p.attached.len() as u32 == n && p.done.len() as u32 >= n {
            let (seq, main) = (p.seq, p.kind == Phase::Main);
            self.out.push_back(SessionOutput::FinishEngine { seq });
            if let State::Phase(p) =
                std::mem::replace(&mut self.state, State::Finishing { seq, main })
            {
                self.finished_watch = Some(p.watch);
            }
        }
    }

    /// The finished engine's result for phase `seq`.
    pub(crate) fn handle_phase_result(&mut self, now: Instant, seq: u32, result: SideResult) {
        let State::Finishing { seq: s, main } = self.state else {
            return;
        };
        if s != seq {
            return;
        }
        let measured = self
            .finished_watch
            .take()
            .and_then(|w| w.measurement(&result));
        if self.advise.is_some() {
            return self.advise_measured(now, measured);
        }
        if let Some(m) = measured {
            if result.integrity_error.is_none() {
                self.out.push_back(SessionOutput::Measured(m));
            }
        }
        if main {
            self.main_bytes = result.streams.iter().map(|s| s.bytes).sum();
            self.main_rate = throughput(&result);
        }
        let integrity = result.integrity_error.clone();
        self.send(ServerMsg::PhaseResult {
            seq,
            result: Box::new(result),
        });
        self.state = State::Ready {
            idle_deadline: now + self.policy.idle_timeout,
        };
        if let Some(e) = integrity {
            return self.fail(format!("integrity: {e}"), true);
        }
        while let Some(m) = self.queued.pop_front() {
            self.handle_msg(now, m);
            if !matches!(self.state, State::Ready { .. } | State::Phase(_)) {
                // Finishing again or closed: keep the rest for later (or drop it).
                break;
            }
        }
    }

    /// Time passed; `obs` is what the driver read of the running phase's engine.
    pub(crate) fn handle_timeout(&mut self, now: Instant, obs: Option<Observation>) {
        if self.is_closed() {
            return;
        }
        if now >= self.expires {
            return self.fail(
                format!(
                    "the session exceeded this server's time limit of {} s",
                    self.policy.lifetime.as_secs()
                ),
                false,
            );
        }
        let idle = self.policy.idle_timeout;
        match &mut self.state {
            State::Ready { idle_deadline } => {
                if now >= *idle_deadline {
                    self.fail(
                        format!("idle: no phase started for {:.0} s", idle.as_secs_f64()),
                        false,
                    );
                }
            }
            State::Lookup { deadline } => {
                if now >= *deadline {
                    self.fail("the path database did not answer in time".into(), false);
                }
            }
            State::Phase(p) => {
                let mut lead_done = false;
                if let Some(o) = obs {
                    let b = o.progress;
                    if p.last_progress != Some(b) {
                        p.last_progress = Some(b);
                        p.last_activity = now;
                    }
                    lead_done = p.watch.observe(now, &o).is_some() && p.lead;
                }
                let deadline = p.sender_deadline.is_some_and(|d| now >= d);
                if (deadline || lead_done) && !p.stopped {
                    p.stopped = true;
                    if p.lead {
                        // The server has what it came for: the streams that joined end now.
                        p.expected = Some(p.attached.len() as u32);
                        p.end_deadline = Some(now + self.policy.handshake_timeout);
                        self.out.push_back(SessionOutput::AbortEngine);
                        self.check_complete();
                        return;
                    }
                    self.out.push_back(SessionOutput::StopSenders);
                }
                // The deadline is for announced streams to connect. Streams that are
                // connected may still be delivering what the client wrote before it ended
                // the phase (a sender's buffer can hold the whole transfer): the idle
                // timeout (no progress) watches them.
                let missing = p
                    .expected
                    .map_or(0, |n| n.saturating_sub(p.attached.len() as u32));
                if p.end_deadline.is_some_and(|d| now >= d) {
                    if missing > 0 {
                        return self.fail(
                            format!("{missing} announced stream(s) did not connect in time"),
                            false,
                        );
                    }
                    p.end_deadline = None;
                }
                if now >= p.last_activity + idle {
                    self.fail(
                        format!(
                            "idle for {:.0} s: no control message and no data",
                            idle.as_secs_f64()
                        ),
                        false,
                    );
                }
            }
            State::Finishing { .. } | State::Closed => {}
        }
    }
}

/// Direction of a session's data, seen from the server.
fn server_direction(p: &TestParams) -> Direction {
    if p.reverse {
        Direction::Send
    } else {
        Direction::Receive
    }
}

/// Bit/s this end moved from its first byte to its last, over every stream.
fn throughput(r: &SideResult) -> Option<f64> {
    let bytes: u64 = r.streams.iter().map(|s| s.bytes).sum();
    let first = r
        .streams
        .iter()
        .filter_map(|s| s.first_s)
        .reduce(f64::min)?;
    let last = r.streams.iter().filter_map(|s| s.last_s).reduce(f64::max)?;
    let secs = last - first;
    (secs > 0.0 && bytes > 0).then(|| bytes as f64 * 8.0 / secs)
}

/// Check a client's request against the server's bounds.
pub fn validate(p: &TestParams, l: &ServerLimits) -> Result<(), String> {
    if p.streams == 0 || p.streams > l.max_streams {
        return Err(format!(
            "{} streams requested; this server allows 1 to {}",
            p.streams, l.max_streams
        ));
    }
    if p.message_size == 0 || p.message_size > l.max_message_size {
        return Err(format!(
            "message size {} bytes; this server allows 1 to {}",
            p.message_size, l.max_message_size
        ));
    }
    match p.duration_ms {
        // A copy's size is the files': bounded when the manifest comes.
        _ if p.files.is_some() => {}
        Some(d) => {
            if d == 0 || d > l.max_duration_ms {
                return Err(format!(
                    "duration {d} ms; this server allows up to {} ms",
                    l.max_duration_ms
                ));
            }
        }
        None => {
            if p.messages == 0 || p.messages > l.max_messages {
                return Err(format!(
                    "{} messages; this server allows 1 to {}",
                    p.messages, l.max_messages
                ));
            }
            let total = p.messages.saturating_mul(p.message_size);
            if total > l.max_total_bytes {
                return Err(format!(
                    "{total} bytes in total; this server allows up to {}",
                    l.max_total_bytes
                ));
            }
        }
    }
    if p.max_time_ms
        .is_some_and(|m| m == 0 || m > l.max_duration_ms)
    {
        return Err(format!(
            "time cap out of range; this server allows up to {} ms",
            l.max_duration_ms
        ));
    }
    if let Some(cc) = &p.congestion {
        let ok = !cc.is_empty()
            && cc.len() < 16
            && cc.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(format!(
                "'{}' is not a congestion control name",
                super::guard::escape(cc, 32)
            ));
        }
    }
    Ok(())
}

fn check_phase(kind: Phase) -> Result<(), String> {
    match kind {
        Phase::Probe { duration_ms }
            if duration_ms == 0 || duration_ms > MAX_PROBE.as_millis() as u64 =>
        {
            Err(format!(
                "a probe of {duration_ms} ms; this server allows 1 to {} ms",
                MAX_PROBE.as_millis()
            ))
        }
        _ => Ok(()),
    }
}

/// The most streams a client's hint may say it asked for (a hint is advice: more is clamped).
const MAX_STREAMS_ASKED: u32 = 1024;

/// A client's path hint, bounded so that no tuner arithmetic can overflow on it: RTT at
/// most 60 s, rate at most 10 Tbit/s.
pub(crate) fn sanitize_hint(h: PathHint) -> PathHint {
    PathHint {
        rtt: h.rtt.map(|r| r.min(Duration::from_secs(60))),
        rate: h.rate.map(|r| Rate(r.0.min(10_000_000_000_000))),
        rate_is_lower_bound: h.rate_is_lower_bound,
        rate_in_band: h.rate_in_band,
        resume: h.resume,
        streams_asked: h.streams_asked.map(|n| n.clamp(1, MAX_STREAMS_ASKED)),
    }
}

#[cfg(test)]
mod tests;
