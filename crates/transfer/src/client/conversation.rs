//! One session with the server on one [`mio::Poll`]: the control connection, the data
//! connections being opened and the engine's wake-ups. The [`ClientSession`] decides; this
//! carries its decisions out, one phase at a time.

use super::{Cancel, ClientConfig, ClientError, Progress, ProgressFn, ProtocolError};
use crate::engine::{Engine, EngineConfig, Notify, SideResult};
use crate::keys::Ephemeral;
use crate::pattern::Pattern;
use crate::phase::{prepared_socket, DriverSpec, PhaseTuning};
use crate::probe::ProbeResult;
use crate::proto::{self, DataHello, FrameReader, Phase, ServerMsg, Token, MAX_SERVER_FRAME};
use crate::report::{Interval, QueueReport};
use crate::session::client::Violation;
use crate::session::client::{
    ClientOutput, ClientPlan, ClientSession, Failure, Goal, InBand, Measured, Observe,
    PhaseOutcome, PhaseRequest, ServerInfo,
};
use mio::net::TcpStream as MioStream;
use mio::{Events, Interest, Poll, Token as MioToken, Waker};
use std::collections::HashMap;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, FromRawFd, IntoRawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tcptune_core::fullpipe::ProbePlan;
use tcptune_core::tuners::auto::AutoPlan;
use tcptune_core::{
    Action, ConnEvent, HostLimits, PathHint, Rate, Role, Time, Tuner, TunerContext, TunerFactory,
};
use tcptune_proto::keys::SessionKeys;
use tcptune_sys::driver::TunerDriver;

const CTRL: MioToken = MioToken(0);
const WAKER: MioToken = MioToken(1);
const STREAM_BASE: usize = 16;
/// How often the live display is updated.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);
/// How often the loop looks at [`ClientConfig::cancel`].
const CANCEL_EVERY: Duration = Duration::from_millis(50);

/// What the main phase produced.
pub(super) struct MainResult {
    pub(super) local: SideResult,
    pub(super) intervals: Vec<Interval>,
    pub(super) outcome: PhaseOutcome,
    /// What the in-band measurement found, if it ran and found something.
    pub(super) measured: Option<Measured>,
    /// What careful resume did, when it was asked for.
    pub(super) resume: Option<crate::report::ResumeReport>,
    /// The server's fair shares, if it told any.
    pub(super) share: Option<crate::report::ShareReport>,
}

/// A data connection being opened.
struct Opening {
    index: u32,
    stream: MioStream,
    driver: Box<TunerDriver>,
}

/// The running phase's local side.
struct LocalPhase {
    seq: u32,
    engine: Engine,
    tuning: PhaseTuning,
    spec: DriverSpec,
    main: bool,
    /// Bytes the phase moves in all, when known (a number of messages, not a duration or
    /// a copy's files).
    total_bytes: Option<u64>,
}

/// What the progress callback has been shown of the running phase.
struct Shown {
    /// When it was last called.
    last: Instant,
    /// Intervals it has been given.
    intervals: usize,
    /// Bytes the phase moves in all, for the message workload.
    total_bytes: Option<u64>,
}

/// How long the loop may wait for events at `now`: until the session's deadline (100 ms
/// without one), and no longer than the progress display or a look at the cancel flag
/// (which a signal handler cannot wake the loop for) allow.
fn poll_wait(now: Instant, deadline: Option<Instant>, progress: bool, cancel: bool) -> Duration {
    let mut wait = deadline.map_or(Duration::from_millis(100), |t| {
        t.saturating_duration_since(now)
    });
    if progress {
        wait = wait.min(PROGRESS_EVERY);
    }
    if cancel {
        wait = wait.min(CANCEL_EVERY);
    }
    wait
}

/// The engine, as the session sees it.
struct EngineObs<'a>(&'a Engine);

impl Observe for EngineObs<'_> {
    fn progress(&mut self) -> u64 {
        self.0.progress()
    }
    fn delivered(&mut self) -> u64 {
        self.0.delivered()
    }
    fn own_min_rtt(&mut self) -> Option<Duration> {
        self.0.path_view().min_rtt
    }
    fn out_of_order(&mut self) -> Option<u64> {
        self.0.path_view().out_of_order
    }
}

/// One session with the server: the control connection and the running phase.
pub(super) struct Conversation<'a> {
    cfg: &'a ClientConfig,
    addr: SocketAddr,
    poll: Poll,
    events: Events,
    waker: Arc<Waker>,
    ctrl: MioStream,
    reader: FrameReader,
    out: Vec<u8>,
    session: ClientSession,
    pub(super) server: Option<ServerInfo>,
    pub(super) local_limits: HostLimits,
    force: bool,
    token: Token,
    seed: u64,
    phase: Option<LocalPhase>,
    opening: HashMap<usize, Opening>,
    next_stream_token: usize,
    seen_server: bool,
    /// The running main phase's in-band measurement, once it found the rate.
    measured: Option<Measured>,
    /// Streams the measurement opened and the rate it measured, while the streams beyond
    /// the plan's wait to close ([`ClientSession::retire_when_steady`]).
    retiring: Option<(u32, Rate)>,
    /// A copy's files (the main phase carries them instead of the pattern).
    files: Option<Arc<crate::files::work::FileWork>>,
    /// The copy's block bodies are sealed (`cp --encrypt`).
    encrypt: bool,
    /// Careful resume's route (a large initial window to the server), until every stream
    /// of the phase is connected.
    route: Option<tcptune_sys::route::InitialWindow>,
    /// This end's X25519 key pair, until the server's answer gives the session's keys.
    ephemeral: Option<Ephemeral>,
    /// The session's keys (once the server admitted it).
    keys: Option<SessionKeys>,
    /// Data connections that are up and wait for the keys to send their hello.
    keyless: Vec<(u32, std::net::TcpStream, Box<TunerDriver>)>,
    /// The wait in the server's queue, if the server put this client in it.
    queue: Option<QueueWait>,
    /// The server's fair shares told during the main phase.
    share: Option<crate::report::ShareReport>,
}

/// A client's wait in the server's queue: from its first place to its admission.
#[derive(Clone, Copy, Debug)]
struct QueueWait {
    since: Instant,
    first_place: u32,
    places_told: u32,
    /// How long it waited, once admitted.
    waited: Option<Duration>,
}

impl<'a> Conversation<'a> {
    pub(super) fn new(
        cfg: &'a ClientConfig,
        addr: SocketAddr,
        ctrl: std::net::TcpStream,
        (plan, ephemeral): (ClientPlan, Ephemeral),
        local_limits: HostLimits,
        force: bool,
    ) -> Result<Conversation<'a>, ClientError> {
        let io = |op: &'static str| {
            move |source: io::Error| ClientError::Local {
                op: op.to_string(),
                source,
            }
        };
        ctrl.set_nonblocking(true)
            .map_err(io("non-blocking control connection"))?;
        let mut ctrl = MioStream::from_std(ctrl);
        let poll = Poll::new().map_err(io("create the event loop"))?;
        poll.registry()
            .register(&mut ctrl, CTRL, Interest::READABLE | Interest::WRITABLE)
            .map_err(io("register the control connection"))?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(io("create a waker"))?);
        let (token, seed) = (plan.token, plan.params.seed);
        let session = ClientSession::new(Instant::now(), plan);
        Ok(Conversation {
            cfg,
            addr,
            poll,
            events: Events::with_capacity(256),
            waker,
            ctrl,
            reader: FrameReader::new(MAX_SERVER_FRAME),
            out: Vec::new(),
            session,
            server: None,
            local_limits,
            force,
            token,
            seed,
            phase: None,
            opening: HashMap::new(),
            next_stream_token: STREAM_BASE,
            seen_server: false,
            measured: None,
            retiring: None,
            files: None,
            encrypt: false,
            route: None,
            ephemeral: Some(ephemeral),
            keys: None,
            keyless: Vec::new(),
            queue: None,
            share: None,
        })
    }

    /// Once the server sent its key share (admitting the session, or challenging its
    /// proof): derive its keys, and send the hellos of the data connections that waited.
    fn take_keys(&mut self, now: Instant) -> Result<(), ClientError> {
        if self.keys.is_some() {
            return Ok(());
        }
        let Some((server, secret)) = self.session.key_agreement() else {
            return Ok(());
        };
        let Some(e) = self.ephemeral.take() else {
            return Ok(());
        };
        let keys = e.client_keys(&server, secret, &self.token).map_err(|_| {
            ClientError::Protocol(ProtocolError::Violation(Violation::WeakKeyShare))
        })?;
        if let Some(work) = &self.files {
            work.set_block_key(keys.block_key());
            if self.encrypt {
                work.set_aead_key(&keys.aead_key(), self.cfg.reverse);
            }
        }
        self.keys = Some(keys);
        for (index, stream, driver) in std::mem::take(&mut self.keyless) {
            self.join(now, index, stream, driver);
        }
        Ok(())
    }

    /// The main phase copies these files (their bodies sealed when `encrypt`).
    pub(super) fn set_files(&mut self, work: Arc<crate::files::work::FileWork>, encrypt: bool) {
        self.files = Some(work);
        self.encrypt = encrypt;
    }

    /// Run the bandwidth probe (see [`crate::probe`]).
    pub(super) fn probe(&mut self, hint: &PathHint) -> Result<ProbeResult, ClientError> {
        let max = self.cfg.max_streams.min(
            self.server
                .as_ref()
                .map_or(u32::MAX, |s| s.limits.max_streams),
        );
        let sender_limits = if self.cfg.reverse {
            self.server
                .as_ref()
                .map_or_else(|| self.local_limits.clone(), |s| s.host_limits.clone())
        } else {
            self.local_limits.clone()
        };
        let plan = ProbePlan::new(hint.rtt, &sender_limits, max);
        let req = PhaseRequest {
            goal: Goal::Probe(plan.clone()),
            in_band: InBand::Off,
            hint: hint.clone(),
            streams: plan.streams.min(max).max(1),
            reason: None,
        };
        let (_, _, outcome, wall) = self.run_phase(req, None)?;
        Ok(ProbeResult {
            plan,
            outcome: outcome.delivery,
            wall,
        })
    }

    /// Run the transfer; `in_band` says whether it measures the path's rate itself, and
    /// `resume` (the path's saved rate and RTT) whether it starts at a known rate.
    pub(super) fn main(
        &mut self,
        hint: &PathHint,
        in_band: InBand,
        resume: Option<(tcptune_core::Rate, Duration)>,
        progress: Option<ProgressFn<'_>>,
    ) -> Result<MainResult, ClientError> {
        let initial = self.cfg.streams;
        let (total, reason) = if in_band == InBand::Measure {
            // The streams a full pipe needs to show itself (as the probe had): their slow
            // starts run in parallel; the plan made from the measured rate sizes them.
            let (sender, _) = self.sender_receiver_limits();
            let max = self.cfg.max_streams;
            let n = ProbePlan::new(hint.rtt, &sender, max).streams;
            (
                n.max(initial),
                Some(format!(
                    "measuring the path in band: {n} streams ramp up together until the pipe is full"
                )),
            )
        } else {
            self.planned_streams(hint, initial)
        };
        let total = total.min(self.cfg.max_streams).max(initial);
        let mut hint = hint.clone();
        hint.rate_in_band = in_band == InBand::Measure;
        hint.streams_asked = Some(initial.max(1));
        let resume = resume.map(|(rate, rtt)| {
            let r = self.careful_resume(rate, rtt, total);
            hint.resume = r.used;
            r
        });
        let req = PhaseRequest {
            goal: Goal::Main,
            in_band,
            hint,
            streams: total,
            reason: (total > initial).then_some(reason).flatten(),
        };
        self.measured = None;
        self.share = None;
        let (local, intervals, outcome, _) = self.run_phase(req, progress)?;
        // Never past the phase, whatever happened to its streams.
        self.route = None;
        Ok(MainResult {
            local,
            intervals,
            outcome,
            measured: self.measured.take(),
            resume,
            share: self.share.take(),
        })
    }

    /// Install the route that gives the streams about to open a large initial window: each
    /// stream's share of the BDP of the saved rate at the saved RTT, in segments. When this
    /// host sends, the congestion window (`initcwnd`); when the server sends (a pull), the
    /// receive window these streams offer from their SYN on (`initrwnd`), without which the
    /// server's initial burst would meet a window of 10 segments; the server's own initial
    /// window is its to give (`serve --careful-resume`), asked for with the phase's hint.
    fn careful_resume(
        &mut self,
        rate: tcptune_core::Rate,
        rtt: Duration,
        streams: u32,
    ) -> crate::report::ResumeReport {
        let mss = tcptune_sys::sockopt::tcp_info(self.ctrl.as_fd())
            .ok()
            .map(|s| u64::from(s.snd_mss_bytes))
            .filter(|&m| m > 0)
            .unwrap_or(1448);
        let share = rate.bdp(rtt).0 / u64::from(streams.max(1));
        let segments = share.div_ceil(mss).clamp(10, 1 << 20);
        let pacing = rate.0 / u64::from(streams.max(1));
        let window = if self.cfg.reverse {
            tcptune_sys::route::Window::Receive
        } else {
            tcptune_sys::route::Window::Congestion
        };
        match tcptune_sys::route::InitialWindow::install(self.addr.ip(), window, segments as u32) {
            Ok(route) => {
                let text = route.route().to_string();
                self.route = Some(route);
                let sending = window == tcptune_sys::route::Window::Congestion;
                crate::report::ResumeReport {
                    used: true,
                    initcwnd_segs: sending.then_some(segments),
                    initrwnd_segs: (!sending).then_some(segments),
                    pacing_bps: Some(pacing),
                    route: Some(text),
                    why_not: None,
                }
            }
            Err(e) => crate::report::ResumeReport {
                used: false,
                initcwnd_segs: None,
                initrwnd_segs: None,
                pacing_bps: None,
                route: None,
                why_not: Some(e.to_string()),
            },
        }
    }

    /// The limits of the end that sends and of the end that receives (the server's are
    /// this host's until it has answered).
    fn sender_receiver_limits(&self) -> (HostLimits, HostLimits) {
        let remote = self
            .server
            .as_ref()
            .map_or_else(|| self.local_limits.clone(), |s| s.host_limits.clone());
        if self.cfg.reverse {
            (remote, self.local_limits.clone())
        } else {
            (self.local_limits.clone(), remote)
        }
    }

    /// Streams the sender's tuner of stream 0 asks for before connecting (`auto` when one
    /// socket cannot hold the BDP), so that they all open before the first byte rather than
    /// one by one after it: a throwaway tuner with the sender's limits is asked.
    fn planned_streams(&self, hint: &PathHint, initial: u32) -> (u32, Option<String>) {
        let (sender_limits, receiver_limits) = self.sender_receiver_limits();
        let ctx = TunerContext {
            role: Role::Sender,
            limits: sender_limits,
            hint: hint.clone(),
            stream_index: 0,
            streams: initial,
        };
        let mut tuner: Box<dyn Tuner> = match (&self.cfg.custom_tuner, self.cfg.reverse) {
            (Some(c), false) => (c.0)(ctx),
            (Some(_), true) => return (initial, None),
            (None, _) => TunerFactory::new(self.cfg.tune.clone())
                .with_peer_limits(receiver_limits)
                .build(ctx),
        };
        tuner.handle_event(Time::ZERO, ConnEvent::BeforeConnect);
        let mut total = initial;
        let mut reason = None;
        while let Some(a) = tuner.poll_action() {
            if let Action::OpenStreams { count, reason: r } = a {
                total = total.max(initial.saturating_add(count));
                reason.get_or_insert(r);
            }
        }
        (total, reason)
    }

    pub(super) fn bye(&mut self) {
        self.session.finish();
        // The goodbye's own short loop: its start, then one read per turn.
        let start = Instant::now();
        let _ = self.carry_out(start, &mut None);
        // Best effort: the server ends the session on EOF as well.
        let _ = self.ctrl.set_nodelay(true);
        let deadline = start + Duration::from_millis(200);
        while !self.out.is_empty() && Instant::now() < deadline {
            if self.flush().is_err() {
                break;
            }
            if !self.out.is_empty() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Run one phase to its end: start the local side, then carry the session's outputs
    /// out, wait for events, feed them to the session and show progress until the session
    /// says the phase is done. Also returns how long the phase took, to the end of its
    /// threads.
    ///
    /// The clock is read once per turn, when the wait for events ended, and that `now` is
    /// passed to everything the turn does; the wait's deadline is computed from a read
    /// right before the wait, and the phase's end is read after its threads were joined.
    fn run_phase(
        &mut self,
        req: PhaseRequest,
        mut progress: Option<ProgressFn<'_>>,
    ) -> Result<(SideResult, Vec<Interval>, PhaseOutcome, Duration), ClientError> {
        let main = req.goal == Goal::Main;
        // The phase's start: the engine's epoch and the first turn's time.
        let epoch = Instant::now();
        let messages = (main && self.cfg.duration.is_none()).then_some(self.cfg.messages);
        self.phase = Some(self.local_phase(&req, epoch, messages));
        let hint = req.hint.clone();
        self.session.start_phase(epoch, req);
        let mut shown = Shown {
            last: epoch,
            intervals: 0,
            total_bytes: messages.map(|m| m.saturating_mul(self.cfg.message_size)),
        };
        let mut interrupted = false;
        let mut now = epoch;
        loop {
            if let Some(outcome) = self.carry_out(now, &mut Some(&hint))? {
                let (local, intervals) = self.finish_phase(main)?;
                // Joining the phase's threads blocked: its end is read after it.
                let took = Instant::now().saturating_duration_since(epoch);
                if let Some(cb) = progress.as_mut() {
                    // The last, partial interval is only known now.
                    let rest = intervals.get(shown.intervals..).unwrap_or_default();
                    if !rest.is_empty() {
                        cb(&Progress {
                            phase: if main { "transfer" } else { "probe" },
                            elapsed: took,
                            bytes: local.streams.iter().map(|s| s.bytes).sum(),
                            total_bytes: shown.total_bytes,
                            streams: local.streams.len() as u32,
                            intervals: rest.to_vec(),
                        });
                    }
                }
                return Ok((local, intervals, outcome, took));
            }
            if !interrupted && self.cfg.cancel.as_ref().is_some_and(Cancel::is_triggered) {
                interrupted = true;
                self.session.handle_interrupt(now);
                continue;
            }
            // The wait's deadline is computed right before the blocking wait, from a read
            // of its own: `now` is stale by this turn's work.
            let wait = poll_wait(
                Instant::now(),
                self.session.poll_timeout(),
                progress.is_some(),
                self.cfg.cancel.is_some(),
            );
            self.wait(wait)?;
            // The turn's time: read once, after the wait, and used by everything below.
            now = Instant::now();
            self.dispatch(now)?;
            self.feed_engine(now);
            if let Some(cb) = progress.as_mut() {
                self.show_progress(cb, &mut shown, now);
            }
        }
    }

    /// The local side of a phase: its engine, its tuning and how its streams are driven.
    fn local_phase(&self, req: &PhaseRequest, epoch: Instant, messages: Option<u64>) -> LocalPhase {
        let main = req.goal == Goal::Main;
        let cfg = self.cfg;
        let role = if cfg.reverse {
            Role::Receiver
        } else {
            Role::Sender
        };
        let waker = self.waker.clone();
        let notify: Notify = Arc::new(move || {
            let _ = waker.wake();
        });
        let engine = Engine::new(EngineConfig {
            files: if main { self.files.clone() } else { None },
            role,
            pattern: Arc::new(Pattern::new(self.seed, cfg.message_size)),
            messages,
            corrupt: if main { cfg.corrupt_message } else { None },
            record_series: main && cfg.samples,
            interval: if main { cfg.interval } else { None },
            epoch,
            // Streams pipelined before the server's answer wait with the session when it is
            // queued (the server holds them unread): their own stall limit allows for the
            // wait; the session's stall detection starts at admission.
            idle_timeout: cfg.idle_timeout.saturating_add(cfg.wait),
            notify: Some(notify),
        });
        let tuning = match (&cfg.custom_tuner, main) {
            (Some(c), true) => PhaseTuning::Custom(c.0.clone()),
            _ => PhaseTuning::for_phase(
                if main {
                    Phase::Main
                } else {
                    Phase::Probe { duration_ms: 1 }
                },
                &cfg.tune,
            ),
        };
        let spec = DriverSpec {
            role,
            limits: self.local_limits.clone(),
            hint: req.hint.clone(),
            force: self.force,
            record_series: main && cfg.samples,
            epoch,
        };
        LocalPhase {
            seq: 0,
            engine,
            tuning,
            spec,
            main,
            total_bytes: messages
                .filter(|_| self.files.is_none())
                .map(|m| m.saturating_mul(cfg.message_size)),
        }
    }

    /// The phase is over: this end's results and intervals (and a copy's file summary).
    fn finish_phase(&mut self, main: bool) -> Result<(SideResult, Vec<Interval>), ClientError> {
        let Some(p) = self.phase.take() else {
            return Err(ClientError::Protocol(ProtocolError::PhaseEndedTwice));
        };
        let (mut local, intervals) = p.engine.finish();
        if let (true, Some(w)) = (main, &self.files) {
            local.files = Some(w.summary());
        }
        Ok((local, intervals))
    }

    /// Wait up to `wait` for events.
    fn wait(&mut self, wait: Duration) -> Result<(), ClientError> {
        if let Err(e) = self.poll.poll(&mut self.events, Some(wait)) {
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(ClientError::Local {
                    op: "wait for events".into(),
                    source: e,
                });
            }
        }
        Ok(())
    }

    /// Handle the events the wait returned, at `now`: the control connection's reads and
    /// writes, and data connections that finished opening.
    fn dispatch(&mut self, now: Instant) -> Result<(), ClientError> {
        let ready: Vec<(usize, bool, bool)> = self
            .events
            .iter()
            .map(|e| {
                (
                    e.token().0,
                    e.is_readable() || e.is_read_closed() || e.is_error(),
                    e.is_writable() || e.is_error(),
                )
            })
            .collect();
        for (token, readable, writable) in ready {
            match MioToken(token) {
                CTRL => {
                    if readable {
                        self.read_ctrl(now)?;
                    }
                    if writable {
                        self.flush()?;
                    }
                }
                WAKER => {}
                _ if writable => self.stream_ready(token, now),
                _ => {}
            }
        }
        Ok(())
    }

    /// Give the session the engine's events, and its timeout when it is due.
    fn feed_engine(&mut self, now: Instant) {
        if let Some(p) = &self.phase {
            let mut evs = Vec::new();
            while let Some(ev) = p.engine.poll_event() {
                evs.push(ev);
            }
            for ev in evs {
                self.session.handle_engine(now, ev);
            }
        }
        if self.session.poll_timeout().is_some_and(|t| t <= now) {
            if let Some(p) = &self.phase {
                let mut obs = EngineObs(&p.engine);
                self.session.handle_timeout(now, &mut obs);
            }
        }
    }

    /// Call the progress callback with fresh intervals, or every [`PROGRESS_EVERY`].
    fn show_progress(&self, cb: &mut ProgressFn<'_>, shown: &mut Shown, now: Instant) {
        let Some(p) = &self.phase else { return };
        let mut fresh = Vec::new();
        while let Some(iv) = p.engine.poll_interval() {
            fresh.push(iv);
        }
        if !fresh.is_empty() || now.saturating_duration_since(shown.last) >= PROGRESS_EVERY {
            shown.last = now;
            shown.intervals += fresh.len();
            cb(&Progress {
                phase: if p.main { "transfer" } else { "probe" },
                elapsed: p
                    .engine
                    .started()
                    .map_or(Duration::ZERO, |s| now.saturating_duration_since(s)),
                bytes: p.engine.bytes(),
                total_bytes: shown.total_bytes,
                streams: p.engine.streams(),
                intervals: fresh,
            });
        }
    }

    /// Carry the session's outputs out at `now`; `Some` when the phase is done.
    fn carry_out(
        &mut self,
        now: Instant,
        hint: &mut Option<&PathHint>,
    ) -> Result<Option<PhaseOutcome>, ClientError> {
        while let Some(out) = self.session.poll_output() {
            match out {
                ClientOutput::Send(m) => {
                    let frame = proto::encode(&m).map_err(|source| ClientError::Control {
                        addr: self.addr,
                        source,
                    })?;
                    self.out.extend_from_slice(&frame);
                    self.flush()?;
                }
                ClientOutput::OpenStreams {
                    seq,
                    from,
                    to,
                    total,
                } => {
                    if let Some(p) = &mut self.phase {
                        p.seq = seq;
                    }
                    for index in from..to {
                        if let Err(e) = self.open_stream(now, seq, index, total) {
                            self.session.handle_stream_failed(now, index, e.to_string());
                        }
                    }
                }
                ClientOutput::Measured(m) => self.on_measured(now, m),
                ClientOutput::LocalHint { hint, streams } => {
                    if let Some(p) = &mut self.phase {
                        p.engine.hint(&hint, streams);
                        // Streams opened from now on are built with it.
                        p.spec.hint = hint;
                    }
                }
                // `to` is one past the phase's last stream: every stream from `from` on closes.
                ClientOutput::RetireStreams {
                    seq, from, local, ..
                } => {
                    if let Some(p) = self.phase.as_mut().filter(|p| p.seq == seq && local) {
                        p.engine.retire_beyond(from);
                    }
                    if let Some((open, rate)) = self.retiring.take() {
                        // The plan's count, or more when delivery held steady above the rate
                        // measured (`steady_plan` in the session).
                        let keep = from;
                        let unit = if self.files.is_some() {
                            "block"
                        } else {
                            "message"
                        };
                        self.session.note_reason(format!(
                            "{open} streams measured the path at {}; once delivery held steady the rest of the transfer ran with the {keep} the plan needs (the others closed after their {unit})",
                            rate.human()
                        ));
                    }
                }
                ClientOutput::StopSenders => {
                    if let Some(p) = &self.phase {
                        p.engine.stop();
                    }
                }
                ClientOutput::AbortEngine => {
                    if let Some(p) = &self.phase {
                        p.engine.abort();
                    }
                }
                ClientOutput::Pace {
                    rate,
                    sessions,
                    path,
                } => {
                    if let Some(p) = self.phase.as_ref().filter(|p| p.main) {
                        // The sender paces; a receiving client only reports it (the server
                        // paces its own senders).
                        if !self.cfg.reverse {
                            p.engine.pace(rate);
                        }
                        let t_s = p
                            .engine
                            .started()
                            .map_or(0.0, |s| now.saturating_duration_since(s).as_secs_f64());
                        self.share.get_or_insert_with(Default::default).push(
                            crate::report::ShareChange {
                                t_s,
                                rate_bps: rate.map(|r| r.0),
                                sessions,
                                path_bps: path.map(|r| r.0),
                            },
                        );
                    }
                }
                ClientOutput::PhaseDone { outcome, .. } => return Ok(Some(outcome)),
                ClientOutput::Queued {
                    place,
                    expected_wait_s,
                } => {
                    let wait = self.queue.get_or_insert(QueueWait {
                        since: now,
                        first_place: place,
                        places_told: 0,
                        waited: None,
                    });
                    wait.places_told += 1;
                    if let Some(f) = &self.cfg.on_queued {
                        (f.0)(place, expected_wait_s);
                    }
                }
                ClientOutput::Failed(f) => {
                    if let Some(p) = self.phase.take() {
                        p.engine.abort();
                    }
                    return Err(self.error(f));
                }
            }
            self.on_server_known(now, *hint);
        }
        Ok(None)
    }

    /// The client's wait in the server's queue, if it waited.
    pub(super) fn queue_report(&self) -> Option<QueueReport> {
        self.queue.map(|q| QueueReport {
            waited_s: q.waited.unwrap_or_default().as_secs_f64(),
            first_place: q.first_place,
            places_told: q.places_told,
        })
    }

    /// The path's RTT with nothing queued, from the path database, for the in-band
    /// measurement's judgement ([`ClientSession::set_path_base_rtt`]).
    pub(crate) fn set_path_base_rtt(&mut self, rtt: Option<Duration>) {
        self.session.set_path_base_rtt(rtt);
    }

    /// The main phase measured the path's rate in band: plan again with it (the streams it
    /// needs: the ones open are kept, their windows carry the pipe), and every tuner
    /// settles.
    fn on_measured(&mut self, now: Instant, m: Measured) {
        let rtt = self.phase.as_ref().and_then(|p| p.spec.hint.rtt);
        let hint = PathHint {
            rtt,
            rate: Some(m.rate),
            // What the streams got beside another flow: both ends settle as kernel-tuned
            // streams would (`AutoPlan::measured_beside_another_flow`).
            rate_is_lower_bound: m.lower_bound,
            rate_in_band: false,
            resume: false,
            streams_asked: Some(self.cfg.streams.max(1)),
        };
        let (total, reason) = self.planned_streams(&hint, self.cfg.streams);
        let open = self.session.streams_requested();
        // More streams only if the rest of the transfer outlasts their slow
        // start (MSS of a 1500-byte MTU: it only counts the doublings).
        let remaining = self.phase.as_ref().and_then(|p| {
            p.total_bytes
                .map(|t| t.saturating_sub(p.engine.delivered()))
        });
        let share = rtt.map_or(0, |r| m.rate.bdp(r).0 / u64::from(total.max(1)));
        let help =
            AutoPlan::late_streams_help(remaining, m.rate, rtt.unwrap_or_default(), share, 1448);
        let wanted = total.min(self.cfg.max_streams).max(self.cfg.streams.max(1));
        if wanted < open {
            if let Some(until) = self.retire_until(now, &m, rtt, open, wanted) {
                let window = AutoPlan::steady_window(rtt.unwrap_or_default());
                self.session
                    .retire_when_steady(now, hint.clone(), wanted, window, until);
                self.retiring = Some((open, m.rate));
                self.measured = Some(m);
                return;
            }
        }
        let total = if help { total } else { open };
        let total = total.min(self.cfg.max_streams).max(open);
        if let Some(r) = reason.filter(|_| total > self.session.streams_requested()) {
            self.session.note_reason(r);
        }
        self.session.settle(now, hint, total);
        self.measured = Some(m);
    }

    /// Whether the streams the in-band measurement opened beyond the `keep` the plan needs
    /// may close (see [`AutoPlan::retiring_pays`]): where this end writes, or where the
    /// server does and says it closes streams it is asked to (a copy's closing streams
    /// take no more blocks from the shared queue, the others take the rest; a custom
    /// tuner's streams are its own), only when the rest of the
    /// transfer (its bytes, or a copy's bytes still to carry, at the measured rate, or its
    /// duration) pays for the streams that stay taking the path back, and not when the
    /// handshake's RTT and the streams' lowest show another flow's queue.
    ///
    /// `Some` when they may close: with the latest time it still pays (`None`: any time;
    /// they close once delivery holds steady, [`AutoPlan::steady_window`]).
    fn retire_until(
        &self,
        now: Instant,
        m: &Measured,
        rtt: Option<Duration>,
        open: u32,
        keep: u32,
    ) -> Option<Option<Instant>> {
        let server_retires = self.session.server().is_some_and(|s| s.retires);
        if (self.cfg.reverse && !server_retires) || self.cfg.custom_tuner.is_some() {
            return None;
        }
        let p = self.phase.as_ref().filter(|p| p.main)?;
        // A copy's end is the bytes its plan carries (its phase has no message count).
        let total = p.total_bytes.or_else(|| {
            self.files
                .as_ref()
                .map(|w| w.to_carry.load(std::sync::atomic::Ordering::Relaxed))
        });
        let left = match (total, self.cfg.duration) {
            (Some(total), _) => {
                let bytes = total.saturating_sub(p.engine.delivered());
                Some(Duration::from_secs_f64(
                    bytes as f64 / m.rate.bytes_per_sec().max(1) as f64,
                ))
            }
            (None, Some(d)) => Some(d.saturating_sub(m.after)),
            (None, None) => None,
        };
        let rtt = rtt.unwrap_or_default();
        if !AutoPlan::retiring_pays(left, rtt, m.lower_bound, open, keep) {
            return None;
        }
        let needs = AutoPlan::retiring_needs(rtt, open, keep);
        Some(left.map(|l| now + l.saturating_sub(needs)))
    }

    /// The first time the server's answer is known: with its limits known, the plan may
    /// want more streams.
    fn on_server_known(&mut self, now: Instant, hint: Option<&PathHint>) {
        if !self.seen_server {
            if let Some(info) = self.session.server().cloned() {
                self.seen_server = true;
                if let Some(q) = &mut self.queue {
                    q.waited = Some(now.saturating_duration_since(q.since));
                }
                self.server = Some(info);
                if let (Some(h), Some(p)) = (hint, &self.phase) {
                    if p.main {
                        let initial = self.cfg.streams;
                        let (total, reason) = self.planned_streams(h, initial);
                        if total > self.session.streams_requested() {
                            self.session.raise_target(
                                total.min(self.cfg.max_streams),
                                reason.unwrap_or_default(),
                            );
                        }
                    }
                }
            }
        }
    }

    fn error(&self, f: Failure) -> ClientError {
        match f {
            Failure::Rejected {
                reason,
                retry_after_s,
            } => ClientError::Rejected {
                reason,
                retry_after_s,
            },
            Failure::NoAnswer(m) => ClientError::Timeout(m),
            Failure::Protocol(Violation::SecretUnchecked) => {
                ClientError::SecretUnchecked { addr: self.addr }
            }
            Failure::Protocol(v) if !self.seen_server => ClientError::NotTcptune {
                addr: self.addr,
                detail: v.to_string(),
            },
            Failure::Protocol(v) => ClientError::Protocol(ProtocolError::Violation(v)),
            Failure::Integrity(reason) => ClientError::Integrity {
                reason,
                report: None,
            },
            Failure::Transfer(reason) => ClientError::Transfer {
                reason,
                report: None,
            },
            Failure::Connect(f) => ClientError::Stream(f),
            Failure::Interrupted => ClientError::Interrupted,
            Failure::File(f) => ClientError::File(f),
            Failure::Closed if self.session.server().is_none() => ClientError::NotTcptune {
                addr: self.addr,
                detail: "it closed the connection without an answer".into(),
            },
            Failure::Closed => ClientError::Control {
                addr: self.addr,
                source: crate::proto::ProtoError::Closed,
            },
        }
    }

    fn open_stream(
        &mut self,
        now: Instant,
        seq: u32,
        index: u32,
        total: u32,
    ) -> Result<(), String> {
        let Some(p) = &self.phase else {
            return Err("no phase".into());
        };
        let mut driver = p.spec.driver(&p.tuning, index, total.max(index + 1));
        let fd = prepared_socket(
            now,
            &self.addr,
            &mut driver,
            &p.spec,
            self.cfg.congestion.as_deref(),
        )
        .map_err(|e| e.to_string())?;
        if let Some(ip) = self.cfg.bind {
            tcptune_sys::net::bind(&fd, &SocketAddr::new(ip, 0)).map_err(|e| e.to_string())?;
        }
        let stream = tcptune_sys::net::connect_start(fd, &self.addr).map_err(|e| e.to_string())?;
        let mut stream = MioStream::from_std(stream);
        let token = self.next_stream_token;
        self.next_stream_token += 1;
        self.poll
            .registry()
            .register(&mut stream, MioToken(token), Interest::WRITABLE)
            .map_err(|e| format!("registering stream {}: {e}", index + 1))?;
        self.opening.insert(
            token,
            Opening {
                index,
                stream,
                driver,
            },
        );
        let _ = seq;
        Ok(())
    }

    /// A data connection finished its handshake (or failed), seen at `now`.
    fn stream_ready(&mut self, token: usize, now: Instant) {
        let Some(mut o) = self.opening.remove(&token) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut o.stream);
        let failed = match o.stream.take_error() {
            Ok(Some(e)) | Err(e) => Some(e.to_string()),
            Ok(None) => o.stream.peer_addr().err().map(|e| e.to_string()),
        };
        if let Some(why) = failed {
            return self.session.handle_stream_failed(
                now,
                o.index,
                format!("connect {}: {why}", self.addr),
            );
        }
        // SAFETY: the descriptor moves from the mio stream to a std stream that owns it.
        let stream = unsafe { std::net::TcpStream::from_raw_fd(o.stream.into_raw_fd()) };
        if self.keys.is_none() {
            // The hello is tagged with the session's keys: it waits for the server's answer
            // (which comes back in about the time the TCP handshake took).
            self.keyless.push((o.index, stream, o.driver));
            return;
        }
        self.join(now, o.index, stream, o.driver);
    }

    /// A connected data connection sends its hello (the keys are known) and joins the
    /// phase's engine.
    fn join(
        &mut self,
        now: Instant,
        index: u32,
        mut stream: std::net::TcpStream,
        driver: Box<TunerDriver>,
    ) {
        let Some(keys) = &self.keys else { return };
        let Some(p) = &mut self.phase else { return };
        let hello = DataHello::sealed(keys, self.token, p.seq, index).encode();
        // Without TCP_NODELAY, Nagle held the first small message after the hello (cp's
        // request for its first file) until the hello's ACK came back: one RTT before any
        // data. Bulk data goes in large writes, which Nagle never delays; the server's data
        // connections have it too.
        let _ = stream.set_nodelay(true);
        // A new connection's send buffer is empty: 48 bytes go at once.
        if let Err(e) = stream.write_all(&hello) {
            return self.session.handle_stream_failed(
                now,
                index,
                format!("sending its hello: {e}"),
            );
        }
        let added = p.engine.add_stream(now, index, stream, driver);
        // Every stream asked for is connected: the initial window was taken from the route,
        // which goes at once (other connections to the peer must not inherit it).
        if self.opening.is_empty() {
            self.route = None;
        }
        match added {
            Ok(()) => self.session.handle_stream_open(now, index),
            Err(e) => {
                self.session
                    .handle_stream_failed(now, index, format!("starting its thread: {e}"))
            }
        }
    }

    /// Read what the server sent and hand every complete message to the session. The server
    /// closing is the session's to judge (after the messages before it, such as a refusal).
    fn read_ctrl(&mut self, now: Instant) -> Result<(), ClientError> {
        loop {
            let closed = match self.reader.fill(&mut self.ctrl) {
                Ok(true) => false,
                Ok(false) => return Ok(()),
                Err(crate::proto::ProtoError::Closed) => true,
                Err(e) if self.session.server().is_none() => {
                    return Err(ClientError::NotTcptune {
                        addr: self.addr,
                        detail: e.to_string(),
                    })
                }
                Err(source) => {
                    return Err(ClientError::Control {
                        addr: self.addr,
                        source,
                    })
                }
            };
            loop {
                let body = match self.reader.take_frame() {
                    Ok(Some(b)) => b,
                    Ok(None) => break,
                    Err(e) if self.session.server().is_none() => {
                        return Err(ClientError::NotTcptune {
                            addr: self.addr,
                            detail: e.to_string(),
                        })
                    }
                    Err(source) => {
                        return Err(ClientError::Control {
                            addr: self.addr,
                            source,
                        })
                    }
                };
                match proto::decode::<ServerMsg>(&body) {
                    Ok(m) => {
                        self.session.handle_msg(now, m);
                        self.take_keys(now)?;
                    }
                    Err(e) if self.session.server().is_none() => {
                        return Err(ClientError::NotTcptune {
                            addr: self.addr,
                            detail: e.to_string(),
                        })
                    }
                    Err(e) => return Err(ClientError::Protocol(ProtocolError::Undecodable(e))),
                }
            }
            if closed {
                self.session.handle_closed(now);
                return Ok(());
            }
        }
    }

    fn flush(&mut self) -> Result<(), ClientError> {
        while !self.out.is_empty() {
            match self.ctrl.write(&self.out) {
                Ok(0) => break,
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if self.session.server().is_none() => {
                    return Err(ClientError::NotTcptune {
                        addr: self.addr,
                        detail: e.to_string(),
                    })
                }
                Err(e) => {
                    return Err(ClientError::Control {
                        addr: self.addr,
                        source: e.into(),
                    })
                }
            }
        }
        Ok(())
    }
}

impl Drop for Conversation<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.phase.take() {
            p.engine.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_waits_until_the_deadline_or_100_ms_without_one() {
        let now = Instant::now();
        let soon = now + Duration::from_millis(30);
        assert_eq!(
            poll_wait(now, Some(soon), false, false),
            Duration::from_millis(30)
        );
        assert_eq!(
            poll_wait(now, None, false, false),
            Duration::from_millis(100)
        );
        // A deadline already passed means no wait at all.
        assert_eq!(poll_wait(soon, Some(now), true, true), Duration::ZERO);
    }

    #[test]
    fn progress_and_a_cancel_flag_shorten_the_wait() {
        let now = Instant::now();
        let late = now + Duration::from_secs(5);
        assert_eq!(poll_wait(now, Some(late), true, false), PROGRESS_EVERY);
        assert_eq!(poll_wait(now, Some(late), false, true), CANCEL_EVERY);
        assert_eq!(poll_wait(now, None, true, true), CANCEL_EVERY);
    }
}
