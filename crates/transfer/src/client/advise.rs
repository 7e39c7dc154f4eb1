//! `tcptune advise`: ask a tcptune server which buffer sizes and how many streams to use on
//! the path between it and this host ([`crate::advice`]).
//!
//! The rules of the conversation are [`crate::session::advise`]'s state machine; this
//! module connects, carries its decisions out (the measurement's streams and engine, when
//! the server measures first) and derives the advice again from the facts the server
//! sent, with this host's real limits and the server's numbers bounded (a server is not
//! trusted blindly).
//!
//! ```no_run
//! use tcptune_transfer::client::advise::{advise, AdviseConfig};
//! let a = advise(&AdviseConfig::new("dtn.example.org")).expect("advice");
//! println!("SO_SNDBUF {} on {} stream(s)", a.advice.sizing.sndbuf_bytes, a.advice.sizing.streams);
//! ```

use super::{resolve_target, ClientError, ConfigError, ProtocolError};
use crate::advice::{advise as derive, bounded_limits, Advice};
use crate::auth::Secret;
use crate::engine::{Engine, EngineConfig};
use crate::keys::Ephemeral;
use crate::pattern::Pattern;
use crate::phase::{prepared_socket, DriverSpec, PhaseTuning};
use crate::proto::{
    self, AdviseRequest, DataHello, FrameReader, ServerMsg, Token, MAX_SERVER_FRAME,
};
use crate::session::advise::{AdviseClient, AdviseOutput, AdvisePlan, MeasureSpec};
use crate::session::client::Failure;
use mio::net::TcpStream as MioStream;
use mio::{Events, Interest, Poll, Token as MioToken};
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsFd, FromRawFd, IntoRawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tcptune_core::pathdb::Direction;
use tcptune_core::{HostLimits, PathHint, Role};
use tcptune_proto::keys::SessionKeys;
use tcptune_proto::session::client::Violation;

/// What to ask. Build with [`AdviseConfig::new`] and adjust the public fields.
#[derive(Clone, Debug)]
pub struct AdviseConfig {
    /// Server as `HOST`, `HOST:PORT` or `[V6]:PORT`.
    pub server: String,
    /// Port when `server` has none.
    pub port: u16,
    /// Local address to connect from.
    pub bind: Option<IpAddr>,
    /// Which way the application's data will flow (`Send`: this host sends).
    pub direction: Direction,
    /// Most streams the application will open.
    pub max_streams: u32,
    /// Ask the server to measure now even if its database knows the path.
    pub fresh: bool,
    /// Shared secret for servers that require one.
    pub secret: Option<Secret>,
    /// Give up connecting, and waiting for the server's first answer, after this long.
    pub connect_timeout: Duration,
    /// Wait this long in the server's queue when it has no session slot yet, then fail.
    pub wait: Duration,
    /// Told the client's place in the server's queue whenever it changes.
    pub on_queued: Option<super::OnQueued>,
    /// The application may use `SO_*BUFFORCE` (this process has `CAP_NET_ADMIN`): the
    /// advice is then not bounded by this host's `net.core.*mem_max`.
    pub force_buffers: bool,
}

impl AdviseConfig {
    /// Advice for sending to `server`'s host, at most 16 streams, from the database when
    /// it knows the path.
    pub fn new(server: impl Into<String>) -> AdviseConfig {
        AdviseConfig {
            server: server.into(),
            port: crate::server::DEFAULT_PORT,
            bind: None,
            direction: Direction::Send,
            max_streams: 16,
            fresh: false,
            secret: None,
            connect_timeout: Duration::from_secs(10),
            wait: super::DEFAULT_WAIT,
            on_queued: None,
            force_buffers: false,
        }
    }
}

/// What `advise` found.
#[derive(Clone, Debug)]
pub struct AdviceResult {
    /// The server asked.
    pub server: SocketAddr,
    /// The advice for this host, derived from the server's facts with this host's limits.
    pub advice: Advice,
    /// The advice as the server sent it.
    pub server_advice: Advice,
    /// The control connection's RTT as this host's `TCP_INFO` has it.
    pub control_rtt: Option<Duration>,
    /// From connecting to the answer.
    pub seconds: f64,
}

/// The measurement's local side (torn down when dropped).
struct Measuring {
    engine: Option<Engine>,
}

impl Drop for Measuring {
    fn drop(&mut self) {
        if let Some(e) = self.engine.take() {
            e.abort();
            // Joins the data threads: they end within their wake-up period.
            let _ = e.finish();
        }
    }
}

/// Ask `cfg.server` for advice: connect, carry the session's decisions out and feed it
/// the server's messages until the answer is in, then derive the advice again here.
pub fn advise(cfg: &AdviseConfig) -> Result<AdviceResult, ClientError> {
    // The whole command's wall time for the result: read here and at the end, around the
    // blocking connect, the conversation and the measurement's threads.
    let t0 = Instant::now();
    if cfg.max_streams == 0 {
        return Err(ClientError::Config(ConfigError::NoMaxStreams));
    }
    let addr = resolve_target(&cfg.server, cfg.port)?;
    let mut limits = tcptune_sys::sysctl::read_host_limits().map_err(|e| ClientError::Local {
        op: "reading this host's buffer limits".into(),
        source: io::Error::other(e),
    })?;
    limits.can_force = cfg.force_buffers && tcptune_sys::os::has_cap_net_admin();
    let (ctrl, control_rtt) = connect_control(cfg, addr)?;
    // The session starts now (its authentication's timestamp is the wall clock's).
    let (start, unix_s) = (Instant::now(), tcptune_sys::os::unix_now_secs());
    let ephemeral = Ephemeral::new().map_err(local("getrandom (session key pair)"))?;
    let plan = advise_plan(cfg, &limits, unix_s, ephemeral.public())?;
    let mut asking = Asking {
        ephemeral,
        answer: None,
        measuring: None,
        reader: FrameReader::new(MAX_SERVER_FRAME),
        token: plan.token,
        session: AdviseClient::new(start, plan),
        ctrl,
        cfg,
        addr,
        limits: &limits,
        control_rtt,
    };
    let server_advice = asking.run(start)?;
    let server_limits = bounded_limits(server_advice.server_limits.clone());
    let advice = derive(
        cfg.direction,
        server_advice.path.clone(),
        &limits,
        &server_limits,
        cfg.max_streams,
    );
    Ok(AdviceResult {
        server: addr,
        advice,
        server_advice: *server_advice,
        control_rtt,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// An error of this host's, saying what was being attempted.
fn local(op: &str) -> impl FnOnce(io::Error) -> ClientError {
    let op = op.to_string();
    move |source: io::Error| ClientError::Local { op, source }
}

/// The control connection, blocking with a write timeout, and its RTT.
fn connect_control(
    cfg: &AdviseConfig,
    addr: SocketAddr,
) -> Result<(TcpStream, Option<Duration>), ClientError> {
    let fd =
        tcptune_sys::net::tcp_socket(&addr).map_err(|source| ClientError::Connect { source })?;
    if let Some(ip) = cfg.bind {
        tcptune_sys::net::bind(&fd, &SocketAddr::new(ip, 0))
            .map_err(|source| ClientError::Config(ConfigError::Bind { ip, source }))?;
    }
    let ctrl = tcptune_sys::net::connect(fd, &addr, cfg.connect_timeout)
        .map_err(|source| ClientError::Connect { source })?;
    ctrl.set_nonblocking(false)
        .map_err(local("a blocking control connection"))?;
    ctrl.set_nodelay(true)
        .map_err(local("TCP_NODELAY on the control connection"))?;
    ctrl.set_write_timeout(Some(cfg.connect_timeout))
        .map_err(local("a write timeout on the control connection"))?;
    let control_rtt = tcptune_sys::sockopt::tcp_info(ctrl.as_fd())
        .ok()
        .and_then(|s| s.min_rtt().or(s.rtt()));
    Ok((ctrl, control_rtt))
}

/// The session's plan, with a fresh random token, this end's X25519 public key (and nonce
/// and the Unix time `unix_s`, with a shared secret).
fn advise_plan(
    cfg: &AdviseConfig,
    limits: &HostLimits,
    unix_s: u64,
    key_share: tcptune_proto::keys::KeyShare,
) -> Result<AdvisePlan, ClientError> {
    let mut token = [0u8; 16];
    tcptune_sys::os::random_bytes(&mut token).map_err(local("getrandom (session token)"))?;
    let auth = match &cfg.secret {
        Some(secret) => {
            let mut nonce = [0u8; 32];
            tcptune_sys::os::random_bytes(&mut nonce).map_err(local("getrandom (auth nonce)"))?;
            Some((secret.clone(), nonce, unix_s))
        }
        None => None,
    };
    Ok(AdvisePlan {
        token: Token(token),
        auth,
        key_share,
        request: AdviseRequest {
            direction: cfg.direction,
            limits: Some(limits.clone()),
            max_streams: cfg.max_streams,
            fresh: cfg.fresh,
        },
        connect_timeout: cfg.connect_timeout,
        wait: cfg.wait,
    })
}

/// How long to wait for the server at `now`: until the session's deadline, between 1 and
/// 100 ms (a read timeout of zero would block forever).
fn read_wait(now: Instant, deadline: Option<Instant>) -> Duration {
    deadline
        .map_or(Duration::from_millis(100), |t| {
            t.saturating_duration_since(now)
        })
        .clamp(Duration::from_millis(1), Duration::from_millis(100))
}

/// One advice session's driver: the [`AdviseClient`] decides, this does the I/O. Call
/// [`Asking::run`] once.
struct Asking<'a> {
    // (Fields drop in this order: the measurement ends before the control connection.)
    answer: Option<Box<Advice>>,
    measuring: Option<Measuring>,
    reader: FrameReader,
    session: AdviseClient,
    ctrl: TcpStream,
    cfg: &'a AdviseConfig,
    addr: SocketAddr,
    limits: &'a HostLimits,
    control_rtt: Option<Duration>,
    token: Token,
    /// This end's X25519 key pair (the server's key share comes with `Measure`).
    ephemeral: Ephemeral,
}

impl Asking<'_> {
    /// Until the answer is in: carry the session's outputs out, read the server, and give
    /// the session its timeouts. The first turn runs at `start`; each later one reads the
    /// clock once, when its read returned, and passes that `now` to everything it does.
    fn run(&mut self, start: Instant) -> Result<Box<Advice>, ClientError> {
        let mut now = start;
        loop {
            self.carry_out(now)?;
            if self.answer.is_some() {
                break;
            }
            // The read's timeout is computed right before the blocking read, from a read
            // of its own: `now` is stale by this turn's work (a measurement's connects).
            let wait = read_wait(Instant::now(), self.session.poll_timeout());
            let closed = self.fill(wait)?;
            // The turn's time: read once, after the wait.
            now = Instant::now();
            self.take_messages(now, closed)?;
            if self.session.poll_timeout().is_some_and(|t| t <= now) {
                self.session.handle_timeout(now);
            }
        }
        // The answer is in: the measurement ends here too (the server ended its side).
        drop(self.measuring.take());
        self.answer
            .take()
            .ok_or(ClientError::Protocol(ProtocolError::NoAnswer))
    }

    fn control(&self, source: proto::ProtoError) -> ClientError {
        ClientError::Control {
            addr: self.addr,
            source,
        }
    }

    /// What the server sent that is not tcptune's protocol, before it said anything that is,
    /// means it is not a tcptune server.
    fn garbled(&self, detail: String, otherwise: ClientError) -> ClientError {
        if self.session.heard() {
            otherwise
        } else {
            ClientError::NotTcptune {
                addr: self.addr,
                detail,
            }
        }
    }

    /// Carry the session's outputs out: messages, the measurement's streams, the answer.
    fn carry_out(&mut self, now: Instant) -> Result<(), ClientError> {
        while let Some(out) = self.session.poll_output() {
            match out {
                AdviseOutput::Send(m) => {
                    let frame = proto::encode(&m).map_err(|e| self.control(e))?;
                    if let Err(e) = self.ctrl.write_all(&frame) {
                        if self.answer.is_some() {
                            // Bye is a courtesy: the server ends the session on EOF too.
                            return Ok(());
                        }
                        return Err(self.control(e.into()));
                    }
                }
                AdviseOutput::Measure(spec) => {
                    let (cfg, addr, limits) = (self.cfg, self.addr, self.limits);
                    let rtt = self.control_rtt;
                    let keys = self
                        .ephemeral
                        .client_keys(&spec.key_share, cfg.secret.as_ref(), &self.token)
                        .map_err(|_| {
                            ClientError::Protocol(ProtocolError::Violation(Violation::WeakKeyShare))
                        })?;
                    let session = (self.token, &keys);
                    match start_measuring(now, cfg, addr, limits, rtt, session, &spec) {
                        Ok(m) => self.measuring = Some(m),
                        // Opening the streams waited for their connects: the failure is
                        // the session's at the time it was seen.
                        Err((index, why, seen)) => {
                            self.session.handle_stream_failed(seen, index, why)
                        }
                    }
                }
                AdviseOutput::Done(a) => self.answer = Some(a),
                AdviseOutput::Queued {
                    place,
                    expected_wait_s,
                } => {
                    if let Some(f) = &self.cfg.on_queued {
                        (f.0)(place, expected_wait_s);
                    }
                }
                AdviseOutput::Failed(f) => return Err(error(f, self.addr, self.session.heard())),
            }
        }
        Ok(())
    }

    /// Read what the server sent within `wait`: `true` when it closed the connection.
    fn fill(&mut self, wait: Duration) -> Result<bool, ClientError> {
        self.ctrl
            .set_read_timeout(Some(wait))
            .map_err(local("a read timeout on the control connection"))?;
        match self.reader.fill(&mut self.ctrl) {
            Ok(_) => Ok(false),
            Err(proto::ProtoError::Closed) => Ok(true),
            Err(e) => Err(self.garbled(e.to_string(), self.control(e))),
        }
    }

    /// Hand the session, at `now`, the server closing (when `closed`) and every whole
    /// message read.
    fn take_messages(&mut self, now: Instant, closed: bool) -> Result<(), ClientError> {
        if closed {
            self.session.handle_closed(now);
        }
        loop {
            let body = match self.reader.take_frame() {
                Ok(Some(b)) => b,
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.garbled(e.to_string(), self.control(e))),
            };
            match proto::decode::<ServerMsg>(&body) {
                Ok(m) => self.session.handle_msg(now, m),
                Err(e) => {
                    let detail = e.to_string();
                    let otherwise = ClientError::Protocol(ProtocolError::Undecodable(e));
                    return Err(self.garbled(detail, otherwise));
                }
            }
        }
    }
}

/// Open the measurement's streams (all at once: their slow starts overlap, as the server
/// expects) and start moving data on them. `Err((stream, why))` when one cannot be opened.
fn start_measuring(
    now: Instant,
    cfg: &AdviseConfig,
    addr: SocketAddr,
    limits: &HostLimits,
    rtt: Option<Duration>,
    session: (Token, &SessionKeys),
    spec: &MeasureSpec,
) -> Result<Measuring, (u32, String, Instant)> {
    let role = if spec.send {
        Role::Sender
    } else {
        Role::Receiver
    };
    let epoch = now;
    let mut engine = Engine::new(EngineConfig {
        role,
        pattern: Arc::new(Pattern::new(spec.seed, spec.message_size)),
        messages: None,
        corrupt: None,
        record_series: false,
        interval: None,
        epoch,
        idle_timeout: spec.duration + Duration::from_secs(10),
        notify: None,
        files: None,
    });
    let dspec = DriverSpec {
        role,
        limits: limits.clone(),
        hint: PathHint {
            rtt,
            ..PathHint::default()
        },
        force: limits.can_force,
        record_series: false,
        epoch,
    };
    let poll = Poll::new().map_err(|e| (0, format!("creating an event loop: {e}"), now))?;
    let mut opening = Vec::new();
    for index in 0..spec.streams {
        let fail = |e: String| (index, e, now);
        let mut driver = dspec.driver(&PhaseTuning::Probe, index, spec.streams);
        let fd = prepared_socket(now, &addr, &mut driver, &dspec, None)
            .map_err(|e| fail(e.to_string()))?;
        if let Some(ip) = cfg.bind {
            tcptune_sys::net::bind(&fd, &SocketAddr::new(ip, 0))
                .map_err(|e| fail(e.to_string()))?;
        }
        let stream = tcptune_sys::net::connect_start(fd, &addr).map_err(|e| fail(e.to_string()))?;
        let mut stream = MioStream::from_std(stream);
        poll.registry()
            .register(&mut stream, MioToken(index as usize), Interest::WRITABLE)
            .map_err(|e| fail(format!("registering it: {e}")))?;
        opening.push(Some((stream, driver)));
    }
    let deadline = now + cfg.connect_timeout;
    let mut events = Events::with_capacity(64);
    let mut left = spec.streams;
    let mut poll = poll;
    while left > 0 {
        // The wait is bounded by the deadline, from a read right before it.
        let before = Instant::now();
        if before >= deadline {
            let index = opening.iter().position(Option::is_some).unwrap_or(0) as u32;
            return Err((index, format!("connect {addr}: timed out"), before));
        }
        if let Err(e) = poll.poll(&mut events, Some(deadline - before)) {
            if e.kind() != io::ErrorKind::Interrupted {
                return Err((0, format!("waiting for connections: {e}"), before));
            }
        }
        // The turn's time: read once, after the wait.
        let now = Instant::now();
        for ev in events.iter() {
            let index = ev.token().0;
            let Some((mut stream, driver)) = opening.get_mut(index).and_then(Option::take) else {
                continue;
            };
            let _ = poll.registry().deregister(&mut stream);
            let stream = connected(stream, addr, cfg, session, spec.seq, index as u32)
                .map_err(|(i, why)| (i, why, now))?;
            engine
                .add_stream(now, index as u32, stream, driver)
                .map_err(|e| (index as u32, format!("starting its thread: {e}"), now))?;
            left -= 1;
        }
    }
    Ok(Measuring {
        engine: Some(engine),
    })
}

/// A measurement stream whose connect finished: unless it failed, a blocking stream that
/// has sent its hello.
fn connected(
    stream: MioStream,
    addr: SocketAddr,
    cfg: &AdviseConfig,
    (token, keys): (Token, &SessionKeys),
    seq: u32,
    index: u32,
) -> Result<TcpStream, (u32, String)> {
    let failed = match stream.take_error() {
        Ok(Some(e)) | Err(e) => Some(e.to_string()),
        Ok(None) => stream.peer_addr().err().map(|e| e.to_string()),
    };
    if let Some(why) = failed {
        return Err((index, format!("connect {addr}: {why}")));
    }
    // SAFETY: the descriptor moves from the mio stream to a std stream that owns it.
    let mut stream = unsafe { TcpStream::from_raw_fd(stream.into_raw_fd()) };
    let hello = DataHello::sealed(keys, token, seq, index).encode();
    stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_write_timeout(Some(cfg.connect_timeout)))
        .and_then(|()| stream.write_all(&hello))
        .map_err(|e| (index, format!("sending its hello: {e}")))?;
    Ok(stream)
}

fn error(f: Failure, addr: SocketAddr, heard: bool) -> ClientError {
    match f {
        Failure::Rejected {
            reason,
            retry_after_s,
        } => ClientError::Rejected {
            reason,
            retry_after_s,
        },
        Failure::NoAnswer(m) => ClientError::Timeout(m),
        Failure::Protocol(v) if !heard => ClientError::NotTcptune {
            addr,
            detail: v.to_string(),
        },
        Failure::Protocol(v) => ClientError::Protocol(ProtocolError::Violation(v)),
        Failure::Integrity(reason) | Failure::Transfer(reason) => ClientError::Transfer {
            reason,
            report: None,
        },
        Failure::Connect(f) => ClientError::Stream(f),
        Failure::File(f) => ClientError::File(f),
        Failure::Interrupted => ClientError::Interrupted,
        Failure::Closed if !heard => ClientError::NotTcptune {
            addr,
            detail: "it closed the connection without an answer".into(),
        },
        Failure::Closed => ClientError::Control {
            addr,
            source: proto::ProtoError::Closed,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_waits_until_the_deadline_between_1_and_100_ms() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(read_wait(now, Some(now + ms(30))), ms(30));
        assert_eq!(read_wait(now, Some(now + ms(5000))), ms(100));
        assert_eq!(read_wait(now, None), ms(100));
        // A deadline now or past still waits 1 ms: a zero read timeout would block.
        assert_eq!(read_wait(now + ms(10), Some(now)), ms(1));
    }
}
