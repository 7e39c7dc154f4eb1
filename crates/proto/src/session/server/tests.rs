//! The session's rules, message by message and timeout by timeout, without a socket.

use super::*;
use crate::result::StreamSide;
use tcptune_core::StreamRequest;

const IDLE: Duration = Duration::from_secs(30);
const HANDSHAKE: Duration = Duration::from_secs(10);
const LIFE: Duration = Duration::from_secs(3600);

fn params() -> TestParams {
    crate::pair::params(2)
}

fn limits(max_streams: u32) -> ServerLimits {
    ServerLimits {
        max_streams,
        max_message_size: 16 << 20,
        max_messages: 1 << 24,
        max_total_bytes: 1 << 40,
        max_duration_ms: 3_600_000,
    }
}

fn session(t0: Instant) -> ServerSession {
    session_for(t0, params())
}

/// A session admitted for `p` under the tests' policy.
fn session_for(t0: Instant, p: TestParams) -> ServerSession {
    ServerSession::new(
        t0,
        p,
        SessionPolicy {
            limits: limits(4),
            handshake_timeout: HANDSHAKE,
            idle_timeout: IDLE,
            lifetime: LIFE,
        },
    )
}

/// What the driver reads of an engine that moved `bytes`.
fn progress(bytes: u64) -> Observation {
    Observation {
        progress: bytes,
        delivered: bytes,
        min_rtt: None,
        out_of_order: None,
    }
}

fn drain(s: &mut ServerSession) -> Vec<SessionOutput> {
    std::iter::from_fn(|| s.poll_output()).collect()
}

fn start(seq: u32, streams: u32) -> ClientMsg {
    start_hinted(seq, streams, PathHint::default())
}

/// A main phase's start with the client's `hint`.
fn start_hinted(seq: u32, streams: u32, hint: PathHint) -> ClientMsg {
    ClientMsg::StartPhase {
        seq,
        phase: Phase::Main,
        hint,
        streams,
    }
}

fn closed_with(out: &[SessionOutput], needle: &str) -> bool {
    out.iter().any(|o| {
        matches!(o, SessionOutput::Close(SessionEnd::Failed { reason, .. }) if reason.contains(needle))
    }) && out
        .iter()
        .any(|o| matches!(o, SessionOutput::Send(ServerMsg::Abort { .. })))
}

fn result(bytes: &[u64]) -> SideResult {
    SideResult {
        streams: bytes
            .iter()
            .enumerate()
            .map(|(i, &b)| StreamSide {
                stream: i as u32 + 1,
                sender: false,
                bytes: b,
                messages: 0,
                partial_bytes: 0,
                first_s: None,
                last_s: None,
                opened_at_s: 0.0,
                tail_bits_per_second: None,
                local: String::new(),
                remote: String::new(),
                detail: Default::default(),
                error: None,
            })
            .collect(),
        ..SideResult::default()
    }
}

/// A session in phase 0 with streams 0 and 1 attached.
fn running(t0: Instant) -> ServerSession {
    let mut s = session(t0);
    s.handle_msg(t0, start(0, 2));
    s.attach(t0, 10, 0, 0);
    s.attach(t0, 11, 0, 1);
    drain(&mut s);
    s
}

#[test]
fn start_phase_starts_an_engine_with_a_bounded_hint() {
    let t0 = Instant::now();
    let mut s = session(t0);
    s.handle_msg(
        t0,
        start_hinted(
            0,
            2,
            PathHint {
                rtt: Some(Duration::MAX),
                rate: Some(Rate(u64::MAX)),
                rate_is_lower_bound: false,
                rate_in_band: false,
                resume: false,
                streams_asked: Some(u32::MAX),
            },
        ),
    );
    let out = drain(&mut s);
    let [SessionOutput::StartEngine(spec)] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(spec.seq, 0);
    assert_eq!(spec.streams, 2);
    assert_eq!(spec.hint.rtt, Some(Duration::from_secs(60)));
    assert!(spec.hint.rate.is_some_and(|r| r.0 <= 10_000_000_000_000));
    assert_eq!(spec.hint.streams_asked, Some(1024));
    assert_eq!(spec.messages(), Some(16));
    assert_eq!(s.running_phase(), Some(0));
}

#[test]
fn phases_run_one_at_a_time_and_in_order() {
    let t0 = Instant::now();
    let mut s = session(t0);
    s.handle_msg(t0, start(1, 2));
    assert!(closed_with(&drain(&mut s), "expected phase 0"));

    let mut s = running(t0);
    s.handle_msg(t0, start(1, 2));
    assert!(closed_with(&drain(&mut s), "while a phase runs"));
}

#[test]
fn stream_counts_and_probe_lengths_are_bounded() {
    let t0 = Instant::now();
    for (msg, needle) in [
        (start(0, 0), "allows 1 to 4"),
        (start(0, 5), "allows 1 to 4"),
        (
            ClientMsg::StartPhase {
                seq: 0,
                phase: Phase::Probe {
                    duration_ms: u64::MAX,
                },
                hint: PathHint::default(),
                streams: 1,
            },
            "probe",
        ),
        (
            ClientMsg::StartPhase {
                seq: 0,
                phase: Phase::Probe { duration_ms: 0 },
                hint: PathHint::default(),
                streams: 1,
            },
            "probe",
        ),
    ] {
        let mut s = session(t0);
        s.handle_msg(t0, msg);
        assert!(closed_with(&drain(&mut s), needle), "{needle}");
    }
}

#[test]
fn data_connections_join_only_the_running_phase_once_within_the_allowance() {
    let t0 = Instant::now();
    let mut s = session(t0);
    assert!(s.accepts(0, 0).is_err(), "no phase yet");
    s.handle_msg(t0, start(0, 2));
    drain(&mut s);
    assert!(s.accepts(1, 0).unwrap_err().contains("phase 1"));
    assert!(s.accepts(0, 4).unwrap_err().contains("limit of 4"));
    assert!(
        s.accepts(0, 3).is_ok(),
        "more than announced is fine mid-phase"
    );
    s.attach(t0, 10, 0, 0);
    assert_eq!(
        drain(&mut s),
        vec![SessionOutput::AttachStream { conn: 10, index: 0 }]
    );
    assert!(s.accepts(0, 0).unwrap_err().contains("already"));
    s.attach(t0, 11, 0, 0); // refused again: no output
    assert!(drain(&mut s).is_empty());
    s.handle_msg(t0, ClientMsg::EndPhase { streams: 2 });
    assert!(s.accepts(0, 2).unwrap_err().contains("not announced"));
    assert!(s.accepts(0, 1).is_ok());
    let mut s = running(t0);
    s.handle_msg(t0, ClientMsg::Stop { capped: false });
    assert!(s.accepts(0, 2).unwrap_err().contains("stopping"));
}

#[test]
fn a_phase_ends_once_every_announced_stream_joined_and_ended() {
    let t0 = Instant::now();
    let mut s = running(t0);
    s.handle_engine(t0, Event::StreamDone(0));
    s.handle_engine(t0, Event::StreamDone(1));
    assert!(
        drain(&mut s).is_empty(),
        "no EndPhase yet: more streams may come"
    );
    s.handle_msg(t0, ClientMsg::EndPhase { streams: 2 });
    assert_eq!(drain(&mut s), vec![SessionOutput::FinishEngine { seq: 0 }]);
    assert_eq!(s.running_phase(), None);
    s.handle_phase_result(t0, 0, result(&[100, 200]));
    let out = drain(&mut s);
    assert!(
        matches!(
            &out[..],
            [SessionOutput::Send(ServerMsg::PhaseResult { seq: 0, .. })]
        ),
        "{out:?}"
    );
    assert_eq!(s.main_bytes(), 300);
    s.handle_msg(t0, ClientMsg::Bye);
    assert_eq!(
        drain(&mut s),
        vec![SessionOutput::Close(SessionEnd::Completed)]
    );
    assert!(s.is_closed());
}

#[test]
fn end_phase_waits_for_late_streams_and_fails_when_they_never_come() {
    let t0 = Instant::now();
    let mut s = session(t0);
    s.handle_msg(t0, start(0, 3));
    s.attach(t0, 10, 0, 0);
    s.handle_engine(t0, Event::StreamDone(0));
    s.handle_msg(t0, ClientMsg::EndPhase { streams: 3 });
    drain(&mut s);
    assert_eq!(s.poll_deadline(), Some(t0 + HANDSHAKE));
    s.handle_timeout(t0 + HANDSHAKE, Some(progress(5)));
    assert!(closed_with(&drain(&mut s), "2 announced stream(s)"));
}

#[test]
fn connected_streams_may_deliver_long_after_end_phase_while_they_progress() {
    // The client ends the phase once its senders wrote their last byte; a sender's buffer
    // may hold most of the transfer, which then takes far longer than a handshake.
    let t0 = Instant::now();
    let mut s = running(t0);
    s.handle_msg(t0, ClientMsg::EndPhase { streams: 2 });
    drain(&mut s);
    let mut now = t0;
    for k in 1..=8u64 {
        now += HANDSHAKE;
        s.handle_timeout(now, Some(progress(k * 1000)));
        assert!(
            drain(&mut s).is_empty(),
            "at {k} handshakes: still delivering"
        );
        assert!(
            s.poll_timeout().is_some_and(|t| t > now),
            "no deadline in the past"
        );
    }
    s.handle_engine(now, Event::StreamDone(0));
    s.handle_engine(now, Event::StreamDone(1));
    assert_eq!(drain(&mut s), vec![SessionOutput::FinishEngine { seq: 0 }]);
}

#[test]
fn end_phase_below_the_streams_that_joined_or_twice_is_an_error() {
    let t0 = Instant::now();
    let mut s = running(t0);
    s.handle_msg(t0, ClientMsg::EndPhase { streams: 1 });
    assert!(closed_with(&drain(&mut s), "stream 2 joined"));
    let mut s = running(t0);
    s.handle_msg(t0, ClientMsg::EndPhase { streams: 2 });
    s.handle_msg(t0, ClientMsg::EndPhase { streams: 2 });
    assert!(drain(&mut s).is_empty(), "queued for after the phase");
    s.handle_engine(t0, Event::StreamDone(0));
    s.handle_engine(t0, Event::StreamDone(1));
    s.handle_phase_result(t0, 0, result(&[1, 1]));
    assert!(closed_with(&drain(&mut s), "outside a phase"));
    let mut s = session(t0);
    s.handle_msg(t0, ClientMsg::EndPhase { streams: 2 });
    assert!(closed_with(&drain(&mut s), "outside a phase"));
}

#[test]
fn stop_ends_senders_or_aborts_at_the_cap_and_is_ignored_outside_a_phase() {
    let t0 = Instant::now();
    let mut s = running(t0);
    s.handle_msg(t0, ClientMsg::Stop { capped: false });
    assert_eq!(drain(&mut s), vec![SessionOutput::StopSenders]);
    s.handle_msg(t0, ClientMsg::Stop { capped: true });
    assert!(drain(&mut s).is_empty(), "once");
    let mut s = running(t0);
    s.handle_msg(t0, ClientMsg::Stop { capped: true });
    assert_eq!(drain(&mut s), vec![SessionOutput::AbortEngine]);
    let mut s = session(t0);
    s.handle_msg(t0, ClientMsg::Stop { capped: true });
    assert!(drain(&mut s).is_empty());
    assert!(!s.is_closed());
}

#[test]
fn a_phase_without_progress_for_the_idle_timeout_fails_but_progress_keeps_it() {
    let t0 = Instant::now();
    let mut s = running(t0);
    assert_eq!(s.poll_deadline(), Some(t0 + IDLE));
    s.handle_timeout(t0 + IDLE, Some(progress(1000)));
    assert!(drain(&mut s).is_empty(), "data moved");
    assert_eq!(s.poll_deadline(), Some(t0 + IDLE + IDLE));
    s.handle_timeout(t0 + IDLE + IDLE, Some(progress(1000)));
    assert!(closed_with(&drain(&mut s), "idle for 30 s"));
}

#[test]
fn between_phases_the_idle_timeout_ends_the_session() {
    let t0 = Instant::now();
    let mut s = session(t0);
    assert_eq!(s.poll_deadline(), Some(t0 + IDLE));
    assert_eq!(s.gone_by(), t0 + IDLE);
    s.handle_timeout(t0 + IDLE - Duration::from_millis(1), None);
    assert!(drain(&mut s).is_empty());
    s.handle_timeout(t0 + IDLE, None);
    assert!(closed_with(&drain(&mut s), "no phase started"));
}

#[test]
fn nothing_a_client_sends_extends_the_lifetime() {
    let t0 = Instant::now();
    let mut s = ServerSession::new(
        t0,
        params(),
        SessionPolicy {
            limits: limits(4),
            handshake_timeout: HANDSHAKE,
            idle_timeout: IDLE,
            lifetime: Duration::from_secs(40),
        },
    );
    s.handle_msg(t0, start(0, 2));
    let mut t = t0;
    let mut bytes = 0;
    while t + Duration::from_secs(5) < t0 + Duration::from_secs(40) {
        t += Duration::from_secs(5);
        bytes += 1;
        s.handle_msg(t, ClientMsg::Stop { capped: false });
        s.handle_timeout(t, Some(progress(bytes)));
    }
    drain(&mut s);
    assert!(s
        .poll_deadline()
        .is_some_and(|d| d <= t0 + Duration::from_secs(40)));
    s.handle_timeout(t0 + Duration::from_secs(40), Some(progress(bytes + 1)));
    assert!(closed_with(&drain(&mut s), "time limit of 40 s"));
}

#[test]
fn an_integrity_failure_aborts_the_engine_and_says_so() {
    let t0 = Instant::now();
    let mut s = running(t0);
    s.handle_engine(t0, Event::Integrity("stream 1: message 3".into()));
    let out = drain(&mut s);
    assert!(out.contains(&SessionOutput::AbortEngine));
    assert!(out.iter().any(|o| matches!(
        o,
        SessionOutput::Send(ServerMsg::Abort { integrity: true, reason }) if reason.contains("message 3")
    )));
    assert!(s.is_closed());
}

#[test]
fn a_result_with_an_integrity_error_is_sent_then_the_session_fails() {
    let t0 = Instant::now();
    let mut s = running(t0);
    s.handle_msg(t0, ClientMsg::EndPhase { streams: 2 });
    s.handle_engine(t0, Event::StreamDone(0));
    s.handle_engine(t0, Event::StreamDone(1));
    drain(&mut s);
    let mut r = result(&[1, 2]);
    r.integrity_error = Some("message 9".into());
    s.handle_phase_result(t0, 0, r);
    let out = drain(&mut s);
    assert!(matches!(
        out[0],
        SessionOutput::Send(ServerMsg::PhaseResult { .. })
    ));
    assert!(matches!(
        out.last(),
        Some(SessionOutput::Close(SessionEnd::Failed {
            integrity: true,
            ..
        }))
    ));
}

#[test]
fn tuners_asking_for_streams_are_forwarded_once_per_target_within_the_allowance() {
    let t0 = Instant::now();
    let mut s = running(t0);
    let ask = |known, count| {
        Event::MoreStreams(StreamRequest {
            known_streams: known,
            count,
            reason: "more".into(),
        })
    };
    s.handle_engine(t0, ask(2, 1));
    assert!(matches!(
        drain(&mut s)[..],
        [SessionOutput::Send(ServerMsg::WantStreams { count: 1, .. })]
    ));
    s.handle_engine(t0, ask(2, 1)); // the same target again (another stream's tuner)
    s.handle_engine(t0, ask(2, 100)); // beyond the allowance of 4: target 4
    let out = drain(&mut s);
    assert_eq!(out.len(), 1, "{out:?}");
    s.handle_engine(t0, ask(2, 50));
    assert!(drain(&mut s).is_empty(), "4 is the most");
    let mut s = running(t0);
    s.handle_msg(t0, ClientMsg::EndPhase { streams: 2 });
    s.handle_engine(t0, ask(2, 1));
    assert!(drain(&mut s).is_empty(), "no more streams after EndPhase");
}

#[test]
fn a_start_pipelined_after_end_phase_waits_for_the_streams_to_end() {
    let t0 = Instant::now();
    let mut s = running(t0);
    s.handle_msg(t0, ClientMsg::EndPhase { streams: 2 });
    s.handle_msg(t0, start(1, 2));
    assert!(drain(&mut s).is_empty());
    s.handle_engine(t0, Event::StreamDone(0));
    s.handle_engine(t0, Event::StreamDone(1));
    assert_eq!(drain(&mut s), vec![SessionOutput::FinishEngine { seq: 0 }]);
    s.handle_phase_result(t0, 0, result(&[1, 1]));
    let out = drain(&mut s);
    assert!(
        matches!(
            out[1],
            SessionOutput::StartEngine(EngineSpec { seq: 1, .. })
        ),
        "{out:?}"
    );
}

#[test]
fn messages_that_arrive_while_a_phase_finishes_are_handled_after_its_result() {
    let t0 = Instant::now();
    let mut s = running(t0);
    s.handle_engine(t0, Event::StreamDone(0));
    s.handle_engine(t0, Event::StreamDone(1));
    s.handle_msg(t0, ClientMsg::EndPhase { streams: 2 });
    drain(&mut s);
    s.handle_msg(t0, start(1, 1)); // pipelined by the client
    assert!(drain(&mut s).is_empty());
    s.handle_phase_result(t0, 0, result(&[1, 1]));
    let out = drain(&mut s);
    assert!(matches!(
        out[0],
        SessionOutput::Send(ServerMsg::PhaseResult { .. })
    ));
    assert!(matches!(
        out[1],
        SessionOutput::StartEngine(EngineSpec { seq: 1, .. })
    ));
    // A flood while finishing is refused.
    let mut s = running(t0);
    s.handle_msg(t0, ClientMsg::EndPhase { streams: 2 });
    s.handle_engine(t0, Event::StreamDone(0));
    s.handle_engine(t0, Event::StreamDone(1));
    for _ in 0..=MAX_QUEUED {
        s.handle_msg(t0, ClientMsg::Stop { capped: false });
    }
    assert!(closed_with(&drain(&mut s), "too many messages"));
}

#[test]
fn bye_completes_between_phases_and_fails_during_one() {
    let t0 = Instant::now();
    let mut s = session(t0);
    s.handle_msg(t0, ClientMsg::Bye);
    assert_eq!(
        drain(&mut s),
        vec![SessionOutput::Close(SessionEnd::Completed)]
    );
    let mut s = running(t0);
    s.handle_msg(t0, ClientMsg::Bye);
    let out = drain(&mut s);
    assert!(out.contains(&SessionOutput::AbortEngine));
    assert!(closed_with(&out, "left during a phase"));
}

#[test]
fn handshake_messages_inside_a_session_are_errors() {
    let t0 = Instant::now();
    for m in [
        ClientMsg::Setup { params: params() },
        ClientMsg::Auth { mac: "00".into() },
    ] {
        let mut s = session(t0);
        s.handle_msg(t0, m);
        assert!(closed_with(&drain(&mut s), "unexpected"));
    }
}

#[test]
fn the_server_stops_its_senders_after_the_duration_and_a_grace() {
    let t0 = Instant::now();
    let mut p = params();
    p.duration_ms = Some(2000);
    p.messages = 0;
    let mut s = session_for(t0, p);
    s.handle_msg(t0, start(0, 1));
    drain(&mut s);
    let due = t0 + Duration::from_millis(2000) + SENDER_GRACE;
    assert_eq!(s.poll_deadline(), Some(due));
    s.handle_timeout(due, Some(progress(1)));
    assert_eq!(drain(&mut s), vec![SessionOutput::StopSenders]);
    assert_eq!(s.poll_deadline(), Some(due + IDLE));
}

#[test]
fn validation_refuses_requests_past_the_bounds() {
    let l = limits(64);
    assert!(validate(&params(), &l).is_ok());
    let mut p = params();
    p.streams = 1000;
    assert!(validate(&p, &l).unwrap_err().contains("streams"));
    let mut p = params();
    p.message_size = 1 << 30;
    assert!(validate(&p, &l).unwrap_err().contains("message size"));
    let mut p = params();
    p.messages = u64::MAX;
    assert!(validate(&p, &l).is_err());
    let mut p = params();
    p.messages = 1 << 24;
    p.message_size = 16 << 20;
    let l2 = ServerLimits {
        max_total_bytes: 1 << 30,
        ..l.clone()
    };
    assert!(validate(&p, &l2).unwrap_err().contains("total"));
    let mut p = params();
    p.duration_ms = Some(0);
    assert!(validate(&p, &l).is_err());
    let mut p = params();
    p.congestion = Some("../x\n".into());
    let e = validate(&p, &l).unwrap_err();
    assert!(!e.contains('\n'), "{e}");
}

#[test]
fn a_retiring_hint_closes_only_this_ends_own_senders_of_the_running_phase() {
    let t0 = Instant::now();
    let hint = PathHint {
        rtt: Some(Duration::from_millis(20)),
        rate: Some(Rate::gbit(1)),
        ..PathHint::default()
    };
    let retire = |seq, streams| ClientMsg::Hint {
        seq,
        hint: hint.clone(),
        streams,
        retire: true,
    };
    let sending = || {
        let mut p = params();
        p.reverse = true;
        let mut s = session_for(t0, p);
        s.handle_msg(t0, start(0, 4));
        for i in 0..4 {
            s.attach(t0, 10 + u64::from(i), 0, i);
        }
        drain(&mut s);
        s
    };
    // The server sends: its writers beyond the count close, and no tuner asks for more.
    let mut s = sending();
    s.handle_msg(t0, retire(0, 1));
    let out = drain(&mut s);
    assert!(
        out.contains(&SessionOutput::RetireSenders { keep: 1 }),
        "{out:?}"
    );
    s.handle_engine(
        t0,
        Event::MoreStreams(StreamRequest {
            known_streams: 1,
            count: 3,
            reason: "bdp".into(),
        }),
    );
    assert!(
        !drain(&mut s)
            .iter()
            .any(|o| matches!(o, SessionOutput::Send(ServerMsg::WantStreams { .. }))),
        "no WantStreams after a retire"
    );
    // A hostile count is bounded: at least one stream stays.
    let mut s = sending();
    s.handle_msg(t0, retire(0, 0));
    assert!(drain(&mut s).contains(&SessionOutput::RetireSenders { keep: 1 }));
    // Another phase's, or a client that sends (it closes its own): nothing closes here.
    let mut s = sending();
    s.handle_msg(t0, retire(7, 1));
    assert!(!drain(&mut s)
        .iter()
        .any(|o| matches!(o, SessionOutput::RetireSenders { .. })));
    let mut s = running(t0);
    s.handle_msg(t0, retire(0, 1));
    let out = drain(&mut s);
    assert!(!out
        .iter()
        .any(|o| matches!(o, SessionOutput::RetireSenders { .. })));
    assert!(out
        .iter()
        .any(|o| matches!(o, SessionOutput::Hint { streams: 1, .. })));
}

/// What the server's watch records of a main phase measured in band (a path never seen)
/// whose delivery reached a plateau of 50 Mbit/s, after the client's hint said the rate it
/// measured was (`lower_bound`) or was not a lower bound.
fn measured_after_hint(
    lower_bound: bool,
) -> Option<crate::session::server::watch::PathMeasurement> {
    let t0 = Instant::now();
    let rtt = Some(Duration::from_millis(50));
    let mut s = session(t0);
    s.handle_msg(
        t0,
        start_hinted(
            0,
            2,
            PathHint {
                rtt,
                rate_in_band: true,
                ..PathHint::default()
            },
        ),
    );
    s.attach(t0, 10, 0, 0);
    s.attach(t0, 11, 0, 1);
    let mut delivered = 0f64;
    let mut now = t0;
    for k in 0..300u32 {
        now = t0 + Duration::from_millis(10) * k;
        s.handle_timeout(
            now,
            Some(Observation {
                progress: delivered as u64,
                delivered: delivered as u64,
                min_rtt: rtt,
                out_of_order: None,
            }),
        );
        // Doubling every 50 ms round up to 50 Mbit/s.
        delivered += (1e6 * 2f64.powi((k / 5) as i32)).min(50e6) / 8.0 * 0.010;
    }
    s.handle_msg(
        now,
        ClientMsg::Hint {
            seq: 0,
            hint: PathHint {
                rtt,
                rate: Some(Rate::mbit(50)),
                rate_is_lower_bound: lower_bound,
                ..PathHint::default()
            },
            streams: 2,
            retire: false,
        },
    );
    s.handle_engine(now, Event::StreamDone(0));
    s.handle_engine(now, Event::StreamDone(1));
    s.handle_msg(now, ClientMsg::EndPhase { streams: 2 });
    s.handle_phase_result(now, 0, result(&[1_000_000, 1_000_000]));
    drain(&mut s).into_iter().find_map(|o| match o {
        SessionOutput::Measured(m) => Some(m),
        _ => None,
    })
}

#[test]
fn a_rate_the_client_measured_beside_another_flow_is_recorded_as_a_lower_bound() {
    let path = measured_after_hint(false).expect("measured");
    assert!(path.full_pipe, "{path:?}");
    let beside = measured_after_hint(true).expect("measured");
    assert!(!beside.full_pipe, "{beside:?}");
    assert_eq!(beside.rate, path.rate);
}
