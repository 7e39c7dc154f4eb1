//! [`transfer`]: resolve, connect, decide how to learn the path's rate, run the phases
//! through a [`Conversation`] with the main phase carrying a [`Workload`], record what was
//! measured, and assemble the report. [`run`] is `send`'s transfer (the pattern);
//! [`super::copy::copy`] is `cp`'s (files).

use super::conversation::{Conversation, MainResult};
use super::measure::{self, PathDbUse, Plan, Source};
use super::workload::{Transferred, Workload};
use super::{resolve, validate, ClientConfig, ClientError, ConfigError, ProgressFn};
use crate::engine::SideResult;
use crate::keys::Ephemeral;
use crate::proto::{self, TestParams, Token};
use crate::report::assemble::{assemble_at, Assembly, Verdict};
use crate::report::{InBandReport, MeasurementReport, ProbeReport, Report, ResumeReport};
use crate::session::client::{ClientPlan, InBand, ServerInfo};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::Instant;
use tcptune_core::{HostLimits, PathHint, TuneMode};
use tcptune_sys::os::unix_now;

/// Run a transfer of the verified pattern (`send`). `progress` is called about 5 times a
/// second.
pub fn run(cfg: &ClientConfig, progress: Option<ProgressFn<'_>>) -> Result<Report, ClientError> {
    transfer(cfg, Workload::Pattern, progress).map(|t| t.report)
}

/// Run a transfer whose main phase carries `workload`; `progress` is called about 5 times
/// a second.
///
/// The steps: the session's setup ([`open`]: this host's limits, the control connection
/// whose handshake gives the RTT, the session's parameters), how to learn the path's rate
/// and a probe if that is the way ([`learn_rate`]), the main phase ([`main_phase`]), and
/// what it measured into the path database and the report ([`finish`]).
pub fn transfer(
    cfg: &ClientConfig,
    workload: Workload<'_>,
    progress: Option<ProgressFn<'_>>,
) -> Result<Transferred, ClientError> {
    let session_start = Instant::now();
    let cfg = workload.session_config(cfg);
    let mut s = open(&cfg, workload)?;
    let learned = learn_rate(&mut s)?;
    if cfg.cancel.as_ref().is_some_and(super::Cancel::is_triggered) {
        return Err(ClientError::Interrupted);
    }
    let ran = main_phase(&mut s, &learned, progress)?;
    finish(s, learned, ran, session_start)
}

/// A session whose control connection is open and whose parameters are set.
struct Opened<'a> {
    cfg: &'a ClientConfig,
    addr: SocketAddr,
    params: TestParams,
    token: [u8; 16],
    hint: PathHint,
    db: PathDbUse,
    conv: Conversation<'a>,
}

/// Check the configuration, reach the server and set the session up for `workload`.
fn open<'a>(cfg: &'a ClientConfig, workload: Workload<'_>) -> Result<Opened<'a>, ClientError> {
    validate(cfg)?;
    let addr = resolve(cfg)?;
    let (local_limits, force) = local_limits(cfg)?;
    // The path database is opened and the peer's entries fetched on a thread beside the
    // handshake: never on the critical path of the first byte.
    let mut db = PathDbUse::new(cfg, addr.ip().to_string());
    let (ctrl, hint) = connect_control(cfg, &addr)?;
    if let Ok(local) = ctrl.local_addr() {
        db.set_local_addr(local.ip());
    }
    let (params, plan, token, ephemeral) = session_plan(cfg, workload.file_job())?;
    let mut conv = Conversation::new(cfg, addr, ctrl, (plan, ephemeral), local_limits, force)?;
    if let Some(work) = workload.engine_files() {
        let encrypt = workload.file_job().is_some_and(|j| j.encrypt);
        conv.set_files(work, encrypt);
    }
    Ok(Opened {
        cfg,
        addr,
        params,
        token,
        hint,
        db,
        conv,
    })
}

/// How the path's rate was learned before the main phase.
struct Learned {
    source: Source,
    in_band: InBand,
    /// Careful resume's rate and RTT, or why not.
    resume: Result<(tcptune_core::Rate, std::time::Duration), Option<String>>,
    probe_seconds: Option<f64>,
    measurement: MeasurementReport,
}

/// What the path's rate is: given, a fresh database entry, a probe, or nothing.
fn learn_rate(s: &mut Opened<'_>) -> Result<Learned, ClientError> {
    let measure_start = Instant::now();
    let decision = measure::decide(s.cfg, &mut s.db, &mut s.hint, unix_now());
    let (mut source, in_band) = rate_source(&decision, &s.hint);
    if in_band != InBand::Off {
        // A handshake well above the RTT this path was measured at before shows another
        // flow's queue even when the streams never see less (`AutoPlan::measured_beside_another_flow`).
        s.conv.set_path_base_rtt(s.db.base_rtt(unix_now()));
    }
    // Careful resume: a fresh full-pipe entry confirmed by the RTT now starts at its rate.
    let resume = resume_intent(s.cfg, &decision, &s.hint);
    let (mut probe_seconds, mut probe_report) = (None, None);
    if let Plan::Probe = decision {
        let (seconds, report) = probe(&mut s.conv, &mut s.hint, &mut s.db)?;
        source = Source::Probe;
        (probe_seconds, probe_report) = (Some(seconds), Some(report));
    }
    let measurement = MeasurementReport {
        source: source.name().to_string(),
        seconds: measure_start.elapsed().as_secs_f64(),
        lower_bound: s.hint.rate_is_lower_bound,
        probe: probe_report,
        path_db: None,
        in_band: None,
    };
    Ok(Learned {
        source,
        in_band,
        resume,
        probe_seconds,
        measurement,
    })
}

/// The main phase, with what it cost this process.
struct Ran {
    main: MainResult,
    host_cpu: tcptune_sys::os::CpuTimes,
    host_wall: std::time::Duration,
}

/// Run the main phase and say goodbye to the server.
fn main_phase(
    s: &mut Opened<'_>,
    learned: &Learned,
    progress: Option<ProgressFn<'_>>,
) -> Result<Ran, ClientError> {
    let cpu0 = tcptune_sys::os::process_cpu().unwrap_or_default();
    let wall0 = Instant::now();
    let resume = learned.resume.as_ref().ok().copied();
    let main = s.conv.main(&s.hint, learned.in_band, resume, progress)?;
    s.hint.resume = main.resume.as_ref().is_some_and(|r| r.used);
    let host_cpu = tcptune_sys::os::process_cpu()
        .unwrap_or_default()
        .since(&cpu0);
    let host_wall = wall0.elapsed();
    s.conv.bye();
    Ok(Ran {
        main,
        host_cpu,
        host_wall,
    })
}

/// Record what the transfer measured in the path database, and assemble and judge the
/// report.
fn finish(
    mut s: Opened<'_>,
    learned: Learned,
    ran: Ran,
    session_start: Instant,
) -> Result<Transferred, ClientError> {
    let Ran {
        main,
        host_cpu,
        host_wall,
    } = ran;
    let server = s.conv.server.clone();
    let remote = main.outcome.remote.as_deref().cloned().unwrap_or_default();
    // The main phase's threads were joined: the session's end, by both clocks.
    let end = Instant::now();
    let end_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    record_transfer(&mut s.db, &s.hint, &main, &remote, end_unix.as_secs_f64());
    let measurement = finish_measurement(learned.measurement, &mut s.db, &main, learned.source);
    let (sender_limits, receiver_limits) =
        end_limits(s.cfg.reverse, &s.conv.local_limits, server.as_ref());
    let round_trips = round_trips(
        session_start,
        end,
        s.hint.rtt,
        &main.local,
        &remote,
        !s.cfg.reverse,
    );
    let session_hex = proto::to_hex(&s.token);
    let (report, verdict) = assemble_at(
        Assembly {
            cfg: s.cfg,
            params: &s.params,
            addr: s.addr,
            session_hex: &session_hex,
            hint: &s.hint,
            probe_seconds: learned.probe_seconds,
            measurement: Some(measurement),
            setup_seconds: Some(main.outcome.setup.as_secs_f64()),
            session_seconds: Some(end.saturating_duration_since(session_start).as_secs_f64()),
            round_trips,
            delivery_rate_max_bps: main.outcome.delivery.rate.map(|r| r.0),
            sender_limits,
            receiver_limits,
            congestion: s
                .cfg
                .congestion
                .clone()
                .or_else(|| server.as_ref().map(|s| s.congestion.clone()))
                .unwrap_or_default(),
            local: &main.local,
            remote: &remote,
            intervals: main.intervals,
            host_cpu,
            host_wall,
            server_requires_secret: server.as_ref().map(|s| s.auth_required),
            resume: resume_report(learned.resume, &main.resume),
            queue: s.conv.queue_report(),
            share: main.share.clone(),
            capped: main.outcome.capped,
            interrupted: main.outcome.interrupted,
            streams_reason: main.outcome.streams_reason.clone(),
        },
        end_unix,
    );
    judged(report, verdict).map(|report| Transferred {
        report,
        remote_files: remote.files,
    })
}

/// The sender's and the receiver's buffer limits: this host's, and the server's as it said
/// them (Linux's defaults when it did not).
fn end_limits(
    reverse: bool,
    local: &HostLimits,
    server: Option<&ServerInfo>,
) -> (HostLimits, HostLimits) {
    let remote = server.map_or_else(HostLimits::linux_defaults, |s| s.host_limits.clone());
    if reverse {
        (remote, local.clone())
    } else {
        (local.clone(), remote)
    }
}

/// This host's buffer limits, and whether it may force buffers past them
/// (`--force-buffers` with `CAP_NET_ADMIN`).
fn local_limits(cfg: &ClientConfig) -> Result<(HostLimits, bool), ClientError> {
    let mut limits = tcptune_sys::sysctl::read_host_limits().map_err(|e| ClientError::Local {
        op: "reading this host's buffer limits".into(),
        source: io::Error::other(e),
    })?;
    let force = cfg.force_buffers && tcptune_sys::os::has_cap_net_admin();
    limits.can_force = force;
    Ok((limits, force))
}

/// The control connection: its handshake is the first round trip, and TCP_INFO then holds
/// the path's RTT, the first thing known of the path.
fn connect_control(
    cfg: &ClientConfig,
    addr: &SocketAddr,
) -> Result<(std::net::TcpStream, PathHint), ClientError> {
    let fd =
        tcptune_sys::net::tcp_socket(addr).map_err(|source| ClientError::Connect { source })?;
    if let Some(ip) = cfg.bind {
        tcptune_sys::net::bind(&fd, &SocketAddr::new(ip, 0))
            .map_err(|source| ClientError::Config(ConfigError::Bind { ip, source }))?;
    }
    let ctrl = tcptune_sys::net::connect(fd, addr, cfg.connect_timeout)
        .map_err(|source| ClientError::Connect { source })?;
    ctrl.set_nodelay(true)
        .map_err(|source| ClientError::Local {
            op: "TCP_NODELAY on the control connection".into(),
            source,
        })?;
    let rtt = tcptune_sys::sockopt::tcp_info(ctrl.as_fd())
        .ok()
        .and_then(|s| s.min_rtt().or(s.rtt()));
    let hint = PathHint {
        rtt,
        ..PathHint::default()
    };
    Ok((ctrl, hint))
}

/// The session's parameters and plan, with fresh random session token, data seed, X25519
/// key pair and (with a shared secret) authentication nonce; the token comes back for the
/// report.
fn session_plan(
    cfg: &ClientConfig,
    files: Option<crate::files::FileJob>,
) -> Result<(TestParams, ClientPlan, [u8; 16], Ephemeral), ClientError> {
    let random = |op: &str, buf: &mut [u8]| {
        tcptune_sys::os::random_bytes(buf).map_err(|source| ClientError::Local {
            op: op.to_string(),
            source,
        })
    };
    let mut token = [0u8; 16];
    random("getrandom (session token)", &mut token)?;
    let mut seed = [0u8; 8];
    random("getrandom (data seed)", &mut seed)?;
    let auth = match &cfg.secret {
        Some(secret) => {
            let mut nonce = [0u8; 32];
            random("getrandom (auth nonce)", &mut nonce)?;
            Some((secret.clone(), nonce, tcptune_sys::os::unix_now_secs()))
        }
        None => None,
    };
    let ephemeral = Ephemeral::new().map_err(|source| ClientError::Local {
        op: "getrandom (session key pair)".to_string(),
        source,
    })?;
    let params = test_params(cfg, u64::from_ne_bytes(seed), files);
    let plan = ClientPlan {
        params: params.clone(),
        token: Token(token),
        auth,
        key_share: ephemeral.public(),
        max_streams: cfg.max_streams,
        connect_timeout: cfg.connect_timeout,
        wait: cfg.wait,
        idle_timeout: cfg.idle_timeout,
        duration: cfg.duration,
        max_time: cfg.max_time,
        sender: !cfg.reverse,
    };
    Ok((params, plan, token, ephemeral))
}

/// The test the server is asked for. A copy moves files, not messages.
fn test_params(cfg: &ClientConfig, seed: u64, files: Option<crate::files::FileJob>) -> TestParams {
    TestParams {
        tune: cfg.tune.clone(),
        streams: cfg.streams,
        message_size: cfg.message_size,
        messages: if cfg.duration.is_some() || files.is_some() {
            0
        } else {
            cfg.messages
        },
        duration_ms: cfg.duration.map(|d| d.as_millis().max(1) as u64),
        max_time_ms: cfg.max_time.map(|d| d.as_millis().max(1) as u64),
        reverse: cfg.reverse,
        samples: cfg.samples,
        congestion: cfg.congestion.clone(),
        seed,
        corrupt_message: cfg.corrupt_message,
        files,
        // `auto` is the good neighbour (issue 22): it takes the server's fair share of the
        // path; the other modes are the techniques as published, compared as they are.
        share: cfg.tune == TuneMode::Auto,
    }
}

/// Where the path's rate comes from before any probe, and what the main phase measures in
/// band: a known rate is checked when asked, an unknown one measured.
fn rate_source(decision: &Plan, hint: &PathHint) -> (Source, InBand) {
    match decision {
        Plan::Known {
            source,
            check: true,
            ..
        } => (*source, hint.rate.map_or(InBand::Off, InBand::Check)),
        Plan::Known { source, .. } => (*source, InBand::Off),
        Plan::AtLeast { .. } => (Source::PathDb, InBand::Measure),
        Plan::InBand => (Source::InBand, InBand::Measure),
        _ => (Source::None, InBand::Off),
    }
}

/// Probe the path before the transfer: its rate goes into the hint and the path database.
/// Returns the probe's wall time, seconds, and its report.
fn probe(
    conv: &mut Conversation<'_>,
    hint: &mut PathHint,
    db: &mut PathDbUse,
) -> Result<(f64, ProbeReport), ClientError> {
    let result = conv.probe(hint)?;
    // The probe's blocking phase returned: its wall-clock time for the path database.
    let now_unix = unix_now();
    let report = ProbeReport {
        streams: result.plan.streams,
        round_seconds: result.plan.round.as_secs_f64(),
        rounds: result.outcome.rounds,
        sending_seconds: result.outcome.elapsed.as_secs_f64(),
        full_pipe: result.outcome.full_pipe,
        rate_bps: result.rate().map(|r| r.0),
    };
    if let Some(rate) = result.rate() {
        hint.rate = Some(rate);
        hint.rate_is_lower_bound = result.lower_bound();
        db.record(
            hint,
            crate::pathdb::Source::Probe,
            rate,
            !result.lower_bound(),
            now_unix,
        );
    }
    Ok((result.wall.as_secs_f64(), report))
}

/// What the report says of careful resume: what the main phase did, or why it did not.
fn resume_report(
    intent: Result<(tcptune_core::Rate, std::time::Duration), Option<String>>,
    done: &Option<ResumeReport>,
) -> Option<ResumeReport> {
    match intent {
        Ok(_) => done.clone(),
        Err(why_not) => why_not.map(|why| ResumeReport {
            used: false,
            initcwnd_segs: None,
            initrwnd_segs: None,
            pacing_bps: None,
            route: None,
            why_not: Some(why),
        }),
    }
}

/// Tell the path database what a clean transfer learned: what it measured in band is the
/// path's rate (a full pipe), unless it measured it beside another flow's queue; otherwise
/// what it delivered is a lower bound on it.
fn record_transfer(
    db: &mut PathDbUse,
    hint: &PathHint,
    main: &MainResult,
    remote: &SideResult,
    now_unix: f64,
) {
    let receiver_ok = |side: &SideResult| side.integrity_error.is_none();
    let clean = receiver_ok(&main.local) && receiver_ok(remote);
    match (&main.measured, main.outcome.delivery.rate) {
        (Some(m), _) if clean => {
            db.record(
                hint,
                crate::pathdb::Source::Transfer,
                m.rate,
                !m.lower_bound,
                now_unix,
            );
        }
        (None, Some(rate)) if clean => {
            db.record(hint, crate::pathdb::Source::Transfer, rate, false, now_unix);
        }
        _ => {}
    }
}

/// The measurement's report once the transfer is over: the path database's use and what
/// was measured in band (which costs no time of its own: it is part of the transfer).
fn finish_measurement(
    before: MeasurementReport,
    db: &mut PathDbUse,
    main: &MainResult,
    source: Source,
) -> MeasurementReport {
    MeasurementReport {
        path_db: db.report(),
        in_band: main.measured.as_ref().map(|m| InBandReport {
            rate_bps: m.rate.0,
            after_seconds: m.after.as_secs_f64(),
            rounds: m.rounds,
            corrects_bps: m.corrects.map(|r| r.0),
            lower_bound: m.lower_bound,
        }),
        seconds: if main.measured.is_some() && source == Source::InBand {
            0.0
        } else {
            before.seconds
        },
        ..before
    }
}

/// The report, or the error that carries it when the run was judged failed.
fn judged(report: Report, verdict: Result<(), Verdict>) -> Result<Report, ClientError> {
    match verdict {
        Ok(()) => Ok(report),
        Err(Verdict::Integrity(reason)) => Err(ClientError::Integrity {
            reason,
            report: Some(Box::new(report)),
        }),
        Err(Verdict::Failed(reason)) => Err(ClientError::Transfer {
            reason,
            report: Some(Box::new(report)),
        }),
    }
}

/// Round trips before the first data byte left the sender and after the last one arrived
/// (see [`crate::report::EndTcptune::setup_round_trips`]), from this end's timestamps and
/// the server's own first-to-last span.
fn round_trips(
    start: Instant,
    end: Instant,
    rtt: Option<std::time::Duration>,
    local: &SideResult,
    remote: &SideResult,
    sending: bool,
) -> (Option<f64>, Option<f64>) {
    let (Some(rtt), Some(t0)) = (rtt.filter(|r| !r.is_zero()), local.started) else {
        return (None, None);
    };
    let rtt = rtt.as_secs_f64();
    let span = |side: &SideResult| {
        let first = side
            .streams
            .iter()
            .filter_map(|s| s.first_s)
            .reduce(f64::min)?;
        let last = side
            .streams
            .iter()
            .filter_map(|s| s.last_s)
            .reduce(f64::max)?;
        Some((first, last))
    };
    let Some((first, last)) = span(local) else {
        return (None, None);
    };
    let since_start =
        |offset_s: f64| (t0.saturating_duration_since(start)).as_secs_f64() + offset_s;
    let total = end.saturating_duration_since(start).as_secs_f64();
    let round = |x: f64| (x.max(0.0) * 100.0).round() / 100.0;
    if sending {
        let setup = since_start(first);
        let arrived = span(remote).map(|(f, l)| setup + rtt / 2.0 + (l - f));
        (
            Some(round(setup / rtt)),
            arrived.map(|a| round((total - a) / rtt)),
        )
    } else {
        (
            Some(round(since_start(first) / rtt - 0.5)),
            Some(round((total - since_start(last)) / rtt)),
        )
    }
}

/// Whether the transfer may start at the path database's rate (careful resume): `Ok` with
/// the rate and RTT to resume at; `Err(Some(why))` when a known path cannot (said in the
/// report); `Err(None)` when there is nothing to resume.
fn resume_intent(
    cfg: &ClientConfig,
    decision: &Plan,
    hint: &PathHint,
) -> Result<(tcptune_core::Rate, std::time::Duration), Option<String>> {
    // A lower bound is a rate this path delivered to this peer at this RTT (a transfer that
    // ended before its pipe was full: a long path, a short transfer), so resuming at it is
    // as safe as resuming at a full-pipe rate; the transfer then measures in band on top.
    let k = match decision {
        Plan::Known {
            source: Source::PathDb,
            entry: Some(k),
            ..
        }
        | Plan::AtLeast { entry: k } => k,
        _ => return Err(None),
    };
    if cfg.tune != tcptune_core::TuneMode::Auto || cfg.custom_tuner.is_some() {
        return Err(None);
    }
    if !cfg.resume_rate {
        return Err(Some("off (--no-resume-rate)".into()));
    }
    let Some(rtt) = hint.rtt else {
        return Err(Some("no RTT was measured on the control connection".into()));
    };
    if !tcptune_core::tuners::auto::same_path_rtt(rtt, k.min_rtt) {
        return Err(Some(format!(
            "the RTT now ({}) is not the saved one ({}): the path may have changed",
            tcptune_core::format_duration(rtt),
            tcptune_core::format_duration(k.min_rtt)
        )));
    }
    Ok((k.rate, k.min_rtt))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tcptune_core::pathdb::Known;
    use tcptune_core::{Rate, TuneMode};

    fn entry(full_pipe: bool) -> Known {
        Known {
            rate: Rate::mbit(900),
            full_pipe,
            min_rtt: Duration::from_millis(200),
            age: Duration::from_secs(60),
            samples: 1,
        }
    }

    fn auto_config() -> ClientConfig {
        let mut cfg = ClientConfig::new("198.19.0.1");
        cfg.tune = TuneMode::Auto;
        cfg
    }

    fn hint(rtt_ms: u64) -> PathHint {
        PathHint {
            rtt: Some(Duration::from_millis(rtt_ms)),
            ..PathHint::default()
        }
    }

    #[test]
    fn a_lower_bound_entry_resumes_at_its_rate_when_the_rtt_matches() {
        let plan = Plan::AtLeast {
            entry: entry(false),
        };
        let got = resume_intent(&auto_config(), &plan, &hint(201));
        assert_eq!(got, Ok((Rate::mbit(900), Duration::from_millis(200))));
    }

    #[test]
    fn a_lower_bound_entry_on_a_changed_rtt_does_not_resume_and_says_why() {
        let plan = Plan::AtLeast {
            entry: entry(false),
        };
        let Err(Some(why)) = resume_intent(&auto_config(), &plan, &hint(300)) else {
            panic!("resumed on a path whose RTT changed");
        };
        assert!(why.contains("RTT"), "{why}");
    }

    #[test]
    fn a_full_pipe_entry_resumes_and_no_entry_has_nothing_to_resume() {
        let plan = Plan::Known {
            source: Source::PathDb,
            check: true,
            entry: Some(entry(true)),
        };
        assert!(resume_intent(&auto_config(), &plan, &hint(200)).is_ok());
        assert_eq!(
            resume_intent(&auto_config(), &Plan::InBand, &hint(200)),
            Err(None)
        );
        let mut off = auto_config();
        off.resume_rate = false;
        assert!(matches!(
            resume_intent(&off, &plan, &hint(200)),
            Err(Some(_))
        ));
    }

    /// One end whose streams span `first_s`..`last_s` after its start.
    fn side(started: Option<Instant>, first_s: f64, last_s: f64) -> SideResult {
        SideResult {
            streams: vec![crate::engine::StreamSide {
                stream: 1,
                sender: true,
                bytes: 1,
                messages: 1,
                partial_bytes: 0,
                first_s: Some(first_s),
                last_s: Some(last_s),
                opened_at_s: 0.0,
                tail_bits_per_second: None,
                local: String::new(),
                remote: String::new(),
                detail: Default::default(),
                error: None,
            }],
            started,
            ..SideResult::default()
        }
    }

    // The exact arithmetic behind the report's round trips (what the end-to-end test in
    // cli/tests/transfer_emu.rs no longer bounds: the counts on a real path are
    // bench/transfer_round_trips.sh's). RTT 100 ms; the first byte leaves 200 ms after the
    // command (two handshakes), the data takes 1 s, the command ends 100 ms after the last
    // byte arrived.
    #[test]
    fn two_handshakes_before_the_data_and_one_exchange_after_it_count_two_and_one() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let rtt = Some(Duration::from_millis(100));
        // Sending: first write at 200 ms; the server saw the data for 1 s, from half a
        // round trip later, so the last byte arrived at 1250 ms; the command ended at 1350.
        let local = side(Some(at(150)), 0.05, 1.05);
        let remote = side(None, 0.0, 1.0);
        let got = round_trips(start, at(1350), rtt, &local, &remote, true);
        assert_eq!(got, (Some(2.0), Some(1.0)));
        // Receiving: the first byte arrived at 250 ms (it left half a round trip earlier),
        // the last at 1250 ms; the command ended at 1350.
        let local = side(Some(at(150)), 0.1, 1.1);
        let got = round_trips(start, at(1350), rtt, &local, &side(None, 0.0, 1.0), false);
        assert_eq!(got, (Some(2.0), Some(1.0)));
        // Without an RTT or a start there is nothing to count in.
        assert_eq!(
            round_trips(start, at(1350), None, &local, &remote, false),
            (None, None)
        );
        let unstarted = side(None, 0.1, 1.1);
        assert_eq!(
            round_trips(start, at(1350), rtt, &unstarted, &remote, true),
            (None, None)
        );
    }
}
