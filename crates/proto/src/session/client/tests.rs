//! The client session's rules without a socket.

use super::*;
use tcptune_core::StreamRequest;
use tcptune_core::{Bytes, Rate};

const IDLE: Duration = Duration::from_secs(30);
const CONNECT: Duration = Duration::from_secs(10);

fn params() -> TestParams {
    crate::pair::params(2)
}

fn plan() -> ClientPlan {
    ClientPlan {
        params: params(),
        token: Token([7; 16]),
        auth: None,
        key_share: [4; 32],
        max_streams: 8,
        connect_timeout: CONNECT,
        wait: Duration::from_secs(60),
        idle_timeout: IDLE,
        duration: None,
        max_time: None,
        sender: true,
    }
}

fn drain(s: &mut ClientSession) -> Vec<ClientOutput> {
    std::iter::from_fn(|| s.poll_output()).collect()
}

fn sent(out: &[ClientOutput]) -> Vec<&'static str> {
    out.iter()
        .filter_map(|o| match o {
            ClientOutput::Send(m) => Some(m.kind()),
            _ => None,
        })
        .collect()
}

fn accepted(max_streams: u32) -> ServerMsg {
    ServerMsg::Accepted {
        limits: ServerLimits {
            max_streams,
            max_message_size: 1 << 24,
            max_messages: 1 << 24,
            max_total_bytes: 1 << 40,
            max_duration_ms: 3_600_000,
        },
        host_limits: HostLimits::linux_defaults(),
        congestion: "cubic".into(),
        can_force: false,
        auth_required: false,
        key_share: wire::to_hex(&[6; 32]),
        encrypt: false,
        retires: true,
    }
}

/// [`accepted`] from a server that predates `Hint.retire`.
fn accepted_by_an_older_server(max_streams: u32) -> ServerMsg {
    let mut m = accepted(max_streams);
    if let ServerMsg::Accepted { retires, .. } = &mut m {
        *retires = false;
    }
    m
}

fn main_phase(streams: u32) -> PhaseRequest {
    PhaseRequest {
        goal: Goal::Main,
        in_band: InBand::Off,
        hint: PathHint {
            rtt: Some(Duration::from_millis(20)),
            ..PathHint::default()
        },
        streams,
        reason: None,
    }
}

/// An engine whose counters the test sets.
struct Fake {
    progress: u64,
    delivered: u64,
    /// Packets its streams got out of order, when it says (a receiving engine).
    out_of_order: Option<u64>,
}

impl Observe for Fake {
    fn progress(&mut self) -> u64 {
        self.progress
    }
    fn delivered(&mut self) -> u64 {
        self.delivered
    }
    fn out_of_order(&mut self) -> Option<u64> {
        self.out_of_order
    }
}

/// An engine that delivers at a steady rate, whose streams' own lowest RTT is `own_min`.
struct Steady {
    delivered: u64,
    own_min: Option<Duration>,
}

impl Observe for Steady {
    fn progress(&mut self) -> u64 {
        self.delivered
    }
    fn delivered(&mut self) -> u64 {
        self.delivered
    }
    fn own_min_rtt(&mut self) -> Option<Duration> {
        self.own_min
    }
}

/// What the in-band measurement of a main phase reports when the control connection's
/// handshake took 25 ms and the phase's streams have seen `own_min` at the lowest, while
/// they deliver a steady 250 Mbit/s.
fn measured_with(own_min: Option<Duration>) -> Measured {
    measured_in(InBand::Measure, own_min)
}

/// [`measured_with`] for a phase whose in-band measurement is `in_band`.
fn measured_in(in_band: InBand, own_min: Option<Duration>) -> Measured {
    measured_known(in_band, own_min, None)
}

/// A session of `plan` in its main phase (`in_band`, a 25 ms handshake, the path database's
/// base RTT `base`) with both streams open and the server's answer in.
fn measuring(
    t0: Instant,
    plan: ClientPlan,
    in_band: InBand,
    base: Option<Duration>,
) -> ClientSession {
    let mut s = ClientSession::new(t0, plan);
    s.set_path_base_rtt(base);
    let mut req = main_phase(2);
    req.in_band = in_band;
    req.hint.rtt = Some(Duration::from_millis(25));
    s.start_phase(t0, req);
    s.handle_msg(t0, accepted(8));
    s.handle_stream_open(t0, 0);
    s.handle_stream_open(t0, 1);
    drain(&mut s);
    s
}

/// [`measured_in`] by a session told the path database's base RTT, `base`.
fn measured_known(in_band: InBand, own_min: Option<Duration>, base: Option<Duration>) -> Measured {
    let t0 = Instant::now();
    let mut s = measuring(t0, plan(), in_band, base);
    let mut obs = Steady {
        delivered: 0,
        own_min,
    };
    let step = Duration::from_millis(5);
    for k in 1..2_000u32 {
        let now = t0 + step * k;
        // 250 Mbit/s: 156,250 bytes every 5 ms.
        obs.delivered += 156_250;
        s.handle_timeout(now, &mut obs);
        for o in drain(&mut s) {
            if let ClientOutput::Measured(m) = o {
                return m;
            }
        }
    }
    panic!("no measurement in 10 s of a steady rate");
}

#[test]
fn a_rate_measured_beside_another_flows_queue_is_a_lower_bound() {
    // The streams' own lowest RTT matches the handshake's: the path's own rate.
    let alone = measured_with(Some(Duration::from_micros(25_300)));
    assert!(!alone.lower_bound, "{alone:?}");
    // The handshake (25 ms) waited behind a queue the streams, from their first rounds
    // (20 ms), never saw at its length: another flow's, so the rate is what they got beside
    // it.
    let beside = measured_with(Some(Duration::from_millis(20)));
    assert!(beside.lower_bound, "{beside:?}");
    assert_eq!(beside.rate, alone.rate);
    // An engine that cannot tell: the path's rate, as before.
    assert!(!measured_with(None).lower_bound);
}

#[test]
fn a_known_rate_checked_beside_another_flows_queue_is_not_corrected_as_the_paths() {
    // The database said 1 Gbit/s; the streams deliver 250 Mbit/s.
    let known = InBand::Check(Rate::gbit(1));
    // Their own lowest RTT matches the handshake's: the path changed, the entry is corrected.
    let changed = measured_in(known, Some(Duration::from_micros(25_300)));
    assert_eq!(changed.corrects, Some(Rate::gbit(1)));
    assert!(!changed.lower_bound, "{changed:?}");
    // The handshake waited behind a queue they never saw: another flow shares the path now,
    // and what they got beside it is a lower bound (the database's entry stays).
    let beside = measured_in(known, Some(Duration::from_millis(20)));
    assert_eq!(beside.corrects, Some(Rate::gbit(1)));
    assert!(beside.lower_bound, "{beside:?}");
    // Or the streams never saw less either, but the database knows the path at 20 ms.
    let own = Some(Duration::from_micros(25_300));
    let known_base = measured_known(known, own, Some(Duration::from_millis(20)));
    assert!(known_base.lower_bound, "{known_base:?}");
}

#[test]
fn a_handshake_above_the_rtt_the_database_knows_shows_another_flows_queue() {
    // The handshake took 25 ms and the streams, which started behind the same queue, never
    // saw less: alone, that is the path's own rate.
    let own = Some(Duration::from_micros(25_300));
    assert!(!measured_known(InBand::Measure, own, None).lower_bound);
    // The database measured this path at 20 ms before: the 5 ms are another flow's queue.
    let beside = measured_known(InBand::Measure, own, Some(Duration::from_millis(20)));
    assert!(beside.lower_bound, "{beside:?}");
    // At the RTT the database knows: the path's rate.
    let alone = measured_known(InBand::Measure, own, Some(Duration::from_micros(24_900)));
    assert!(!alone.lower_bound, "{alone:?}");
}

#[test]
fn a_receiving_clients_measurement_counts_no_round_with_holes() {
    let t0 = Instant::now();
    let receiving = ClientPlan {
        sender: false,
        ..plan()
    };
    let mut s = measuring(t0, receiving, InBand::Measure, None);
    // Rounds of 25 ms (Mbit/s read in order, packets out of order), sampled four times a
    // round: slow start to a 200 Mbit/s path, then the overshoot's holes, in which the
    // reads fall to 120 but for a round a filled hole inflates to 245 (a sender's plateau
    // rule, the median of the plateau and its growth round, takes 160; the best round,
    // 245), then the path's rate.
    let mut rounds = vec![(25.0, 0), (50.0, 0), (100.0, 0), (200.0, 0)];
    rounds.extend([(120.0, 40), (245.0, 40), (118.0, 40), (119.0, 40)]);
    rounds.extend([(200.0, 0); 12]);
    let mut obs = Fake {
        progress: 0,
        delivered: 0,
        out_of_order: Some(0),
    };
    let step = Duration::from_micros(6_250);
    // The estimator's rounds start at its first sample.
    s.handle_timeout(t0 + step, &mut obs);
    let mut k = 1u32;
    for (mbit, holes) in rounds {
        for i in 0..4 {
            k += 1;
            obs.delivered += (mbit * 1e6 / 8.0 * 0.006_25) as u64;
            obs.progress = obs.delivered;
            if i == 0 {
                obs.out_of_order = obs.out_of_order.map(|n| n + holes);
            }
            s.handle_timeout(t0 + step * k, &mut obs);
            for o in drain(&mut s) {
                if let ClientOutput::Measured(m) = o {
                    let mbit = m.rate.0 as f64 / 1e6;
                    assert!((190.0..=201.0).contains(&mbit), "{m:?}");
                    return;
                }
            }
        }
    }
    panic!("no measurement");
}

/// A session in its main phase with both streams open and the server's answer in.
fn running(t0: Instant, p: ClientPlan) -> ClientSession {
    let mut s = ClientSession::new(t0, p);
    s.start_phase(t0, main_phase(2));
    s.handle_msg(t0, accepted(8));
    s.handle_stream_open(t0, 0);
    s.handle_stream_open(t0, 1);
    drain(&mut s);
    s
}

#[test]
fn the_first_flight_pipelines_hello_setup_and_the_phase_start() {
    let t0 = Instant::now();
    let mut s = ClientSession::new(t0, plan());
    s.start_phase(t0, main_phase(2));
    let out = drain(&mut s);
    assert_eq!(sent(&out), vec!["hello", "setup", "start_phase"]);
    assert!(out.contains(&ClientOutput::OpenStreams {
        seq: 0,
        from: 0,
        to: 2,
        total: 2
    }));
    let ClientOutput::Send(ClientMsg::Hello { auth, token, .. }) = &out[0] else {
        panic!()
    };
    assert!(auth.is_none());
    assert_eq!(*token, Some(Token([7; 16])));
}

#[test]
fn a_secret_is_proved_in_hello_and_a_challenge_gets_an_answer_and_a_resend() {
    let t0 = Instant::now();
    let secret = Secret::from_bytes(b"s3cret").expect("secret");
    let mut p = plan();
    p.auth = Some((secret.clone(), [1; 32], 1000));
    let mut s = ClientSession::new(t0, p);
    s.start_phase(t0, main_phase(2));
    let out = drain(&mut s);
    let ClientOutput::Send(ClientMsg::Hello { auth: Some(a), .. }) = &out[0] else {
        panic!("{out:?}")
    };
    let mac = wire::from_hex::<32>(&a.mac).expect("hex");
    assert!(secret.verify_proof(&[1; 32], 1000, &[7; 16], &[4; 32], &mac));
    assert!(
        !secret.verify_proof(&[1; 32], 1000, &[7; 16], &[5; 32], &mac),
        "the proof covers the key share"
    );
    s.handle_msg(
        t0,
        ServerMsg::Challenge {
            nonce: wire::to_hex(&[9; 32]),
            reason: "clock".into(),
            key_share: None,
        },
    );
    let out = drain(&mut s);
    assert_eq!(sent(&out), vec!["auth", "setup", "start_phase"]);
    let ClientOutput::Send(ClientMsg::Auth { mac }) = &out[0] else {
        panic!()
    };
    let mac = wire::from_hex::<32>(mac).expect("hex");
    assert!(secret.verify_answer(&[9; 32], &[7; 16], &mac));
    // A second challenge is not answered.
    s.handle_msg(
        t0,
        ServerMsg::Challenge {
            nonce: wire::to_hex(&[8; 32]),
            reason: "again".into(),
            key_share: None,
        },
    );
    assert!(drain(&mut s)
        .iter()
        .any(|o| matches!(o, ClientOutput::Failed(Failure::Protocol(_)))));
}

fn encrypted_copy() -> ClientPlan {
    let mut p = plan();
    p.params.files = Some(crate::files::FileJob {
        sources: Vec::new(),
        dest: Some("in".into()),
        recursive: true,
        resume: true,
        fsync: false,
        encrypt: true,
    });
    p
}

fn accepted_sealing(encrypt: bool) -> ServerMsg {
    let mut m = accepted(8);
    if let ServerMsg::Accepted { encrypt: e, .. } = &mut m {
        *e = encrypt;
    }
    m
}

#[test]
fn an_encrypted_copys_streams_open_only_once_the_server_confirms_it_seals() {
    let t0 = Instant::now();
    let mut s = ClientSession::new(t0, encrypted_copy());
    s.start_phase(t0, main_phase(2));
    let out = drain(&mut s);
    assert_eq!(sent(&out), vec!["hello", "setup", "start_phase"]);
    assert!(
        !out.iter()
            .any(|o| matches!(o, ClientOutput::OpenStreams { .. })),
        "{out:?}"
    );
    s.handle_msg(t0, accepted_sealing(true));
    let out = drain(&mut s);
    assert!(out.contains(&ClientOutput::OpenStreams {
        seq: 0,
        from: 0,
        to: 2,
        total: 2
    }));
}

#[test]
fn a_server_that_does_not_confirm_sealing_fails_an_encrypted_copy_before_any_stream() {
    let t0 = Instant::now();
    let mut s = ClientSession::new(t0, encrypted_copy());
    s.start_phase(t0, main_phase(2));
    drain(&mut s);
    // An older server: its `Accepted` has no `encrypt` (it ignored the job's field).
    s.handle_msg(t0, accepted_sealing(false));
    let out = drain(&mut s);
    assert!(
        !out.iter()
            .any(|o| matches!(o, ClientOutput::OpenStreams { .. })),
        "{out:?}"
    );
    let Some(ClientOutput::Failed(Failure::File(f))) = out.last() else {
        panic!("{out:?}");
    };
    assert_eq!(f.kind, crate::files::FailKind::Refused);
    assert!(f.message.contains("--encrypt"), "{}", f.message);
    assert!(!f.message.contains('\n'));
    // A copy in clear takes the same answer.
    let mut clear = ClientSession::new(t0, plan());
    clear.start_phase(t0, main_phase(2));
    clear.handle_msg(t0, accepted_sealing(false));
    assert!(!drain(&mut clear)
        .iter()
        .any(|o| matches!(o, ClientOutput::Failed(_))));
}

#[test]
fn a_challenge_without_a_secret_is_a_protocol_error() {
    let t0 = Instant::now();
    let mut s = ClientSession::new(t0, plan());
    s.handle_msg(
        t0,
        ServerMsg::Challenge {
            nonce: wire::to_hex(&[9; 32]),
            reason: "x".into(),
            key_share: None,
        },
    );
    assert!(matches!(
        drain(&mut s).last(),
        Some(ClientOutput::Failed(Failure::Protocol(_)))
    ));
}

#[test]
fn more_streams_open_only_after_admission_and_within_both_limits() {
    let t0 = Instant::now();
    let mut s = ClientSession::new(t0, plan());
    s.start_phase(t0, main_phase(2));
    drain(&mut s);
    s.handle_engine(
        t0,
        Event::MoreStreams(StreamRequest {
            known_streams: 2,
            count: 10,
            reason: "bdp".into(),
        }),
    );
    assert!(
        drain(&mut s).is_empty(),
        "the server's allowance is not known yet"
    );
    s.handle_msg(t0, accepted(5));
    assert_eq!(
        drain(&mut s),
        vec![ClientOutput::OpenStreams {
            seq: 0,
            from: 2,
            to: 5,
            total: 5
        }]
    );
    s.handle_msg(
        t0,
        ServerMsg::WantStreams {
            known_streams: 2,
            count: 1,
            reason: "less".into(),
        },
    );
    assert!(drain(&mut s).is_empty(), "already more than that");
    assert_eq!(s.streams_requested(), 5);
}

#[test]
fn a_phase_ends_when_every_opened_stream_ended_and_the_server_answered() {
    let t0 = Instant::now();
    let mut s = running(t0, plan());
    s.handle_engine(t0, Event::StreamDone(0));
    assert!(drain(&mut s).is_empty());
    s.handle_engine(t0, Event::StreamDone(1));
    let out = drain(&mut s);
    assert_eq!(
        out,
        vec![ClientOutput::Send(ClientMsg::EndPhase { streams: 2 })]
    );
    assert!(s
        .poll_timeout()
        .is_some_and(|t| t <= t0 + IDLE + Duration::from_secs(5)));
    s.handle_msg(
        t0,
        ServerMsg::PhaseResult {
            seq: 0,
            result: Box::default(),
        },
    );
    let out = drain(&mut s);
    assert!(
        matches!(&out[..], [ClientOutput::PhaseDone { seq: 0, outcome }] if outcome.remote.is_some() && !outcome.capped),
        "{out:?}"
    );
    s.finish();
    assert_eq!(drain(&mut s), vec![ClientOutput::Send(ClientMsg::Bye)]);
}

#[test]
fn the_phase_ends_when_the_senders_wrote_their_last_byte_and_waits_for_delivery() {
    let t0 = Instant::now();
    let mut s = running(t0, plan());
    // Written, not yet delivered: the server hears the phase end a round trip sooner...
    s.handle_engine(t0, Event::StreamWritten(0));
    s.handle_engine(t0, Event::StreamWritten(1));
    assert_eq!(
        drain(&mut s),
        vec![ClientOutput::Send(ClientMsg::EndPhase { streams: 2 })]
    );
    // ... and no deadline runs for its result while the written data is still arriving
    // (the sender's buffer may hold most of the transfer).
    let mut f = Fake {
        progress: 0,
        delivered: 0,
        out_of_order: None,
    };
    let mut now = t0;
    for _ in 0..12 {
        now += IDLE / 2;
        f.progress += 1 << 20;
        f.delivered += 1 << 20;
        s.handle_timeout(now, &mut f);
        assert!(drain(&mut s)
            .iter()
            .all(|o| !matches!(o, ClientOutput::Failed(_))));
    }
    let late = now;
    s.handle_engine(late, Event::StreamDone(0));
    s.handle_engine(late, Event::StreamDone(1));
    assert!(drain(&mut s).is_empty(), "EndPhase only once");
    assert!(s
        .poll_timeout()
        .is_some_and(|t| t <= late + IDLE + Duration::from_secs(5)));
    s.handle_msg(
        late,
        ServerMsg::PhaseResult {
            seq: 0,
            result: Box::default(),
        },
    );
    assert!(matches!(
        &drain(&mut s)[..],
        [ClientOutput::PhaseDone { seq: 0, .. }]
    ));
}

#[test]
fn the_probe_stops_on_a_full_pipe_and_does_not_wait_for_the_servers_side() {
    let t0 = Instant::now();
    let mut s = ClientSession::new(t0, plan());
    let plan = ProbePlan::new(
        Some(Duration::from_millis(20)),
        &HostLimits::linux_defaults(),
        8,
    );
    let streams = plan.streams;
    s.start_phase(
        t0,
        PhaseRequest {
            goal: Goal::Probe(plan),
            in_band: InBand::Off,
            hint: PathHint::default(),
            streams,
            reason: None,
        },
    );
    s.handle_msg(t0, accepted(8));
    for i in 0..streams {
        s.handle_stream_open(t0, i);
    }
    drain(&mut s);
    // 100 Mbit/s, flat from the start: a plateau after a few rounds.
    let mut fake = Fake {
        progress: 0,
        delivered: 0,
        out_of_order: None,
    };
    let mut t = t0;
    let mut stopped = false;
    for _ in 0..2000 {
        t += Duration::from_millis(2);
        fake.delivered += 25_000;
        fake.progress += 25_000;
        s.handle_timeout(t, &mut fake);
        let out = drain(&mut s);
        if out.contains(&ClientOutput::AbortEngine) {
            assert_eq!(sent(&out), vec!["stop"]);
            stopped = true;
            break;
        }
    }
    assert!(stopped, "the probe stops by itself");
    for i in 0..streams {
        s.handle_engine(t, Event::StreamDone(i));
    }
    let out = drain(&mut s);
    assert_eq!(sent(&out), vec!["end_phase"]);
    let Some(ClientOutput::PhaseDone { outcome, .. }) = out.last() else {
        panic!("{out:?}")
    };
    assert!(outcome.remote.is_none());
    assert!(outcome.delivery.full_pipe);
    let r = outcome.delivery.rate.expect("rate");
    assert!((r.0 as f64 - 100e6).abs() < 10e6, "{r:?}");
    // Its result arrives later and is ignored; the main phase follows.
    s.start_phase(t, main_phase(2));
    s.handle_msg(
        t,
        ServerMsg::PhaseResult {
            seq: 0,
            result: Box::default(),
        },
    );
    let out = drain(&mut s);
    assert!(out
        .iter()
        .any(|o| matches!(o, ClientOutput::Send(ClientMsg::StartPhase { seq: 1, .. }))));
    assert!(!out.iter().any(|o| matches!(o, ClientOutput::Failed(_))));
}

#[test]
fn a_duration_workload_stops_the_senders_here_or_tells_the_server() {
    let t0 = Instant::now();
    for sender in [true, false] {
        let mut p = plan();
        p.duration = Some(Duration::from_secs(1));
        p.sender = sender;
        let mut s = running(t0, p);
        let mut fake = Fake {
            progress: 1,
            delivered: 1,
            out_of_order: None,
        };
        s.handle_timeout(t0 + Duration::from_secs(1), &mut fake);
        let out = drain(&mut s);
        if sender {
            assert!(out.contains(&ClientOutput::StopSenders), "{out:?}");
            assert!(sent(&out).is_empty());
        } else {
            assert_eq!(
                out,
                vec![ClientOutput::Send(ClientMsg::Stop { capped: false })]
            );
        }
    }
}

/// Both streams deliver all they wrote and the server answers with its side.
fn deliver_and_answer(s: &mut ClientSession, t0: Instant) -> Vec<ClientOutput> {
    s.handle_engine(t0, Event::StreamDone(0));
    s.handle_engine(t0, Event::StreamDone(1));
    s.handle_msg(
        t0,
        ServerMsg::PhaseResult {
            seq: 0,
            result: Box::default(),
        },
    );
    drain(s)
}

#[test]
fn the_cap_stops_both_ends_at_once_and_is_reported() {
    let t0 = Instant::now();
    let mut p = plan();
    p.max_time = Some(Duration::from_millis(600));
    let mut s = running(t0, p);
    let mut fake = Fake {
        progress: 1,
        delivered: 1,
        out_of_order: None,
    };
    s.handle_timeout(t0 + Duration::from_millis(600), &mut fake);
    let out = drain(&mut s);
    assert!(out.contains(&ClientOutput::Send(ClientMsg::Stop { capped: true })));
    assert!(out.contains(&ClientOutput::AbortEngine));
    let out = deliver_and_answer(&mut s, t0);
    assert!(matches!(out.last(), Some(ClientOutput::PhaseDone { outcome, .. }) if outcome.capped));
}

#[test]
fn the_cap_holds_while_written_data_is_still_on_its_way() {
    let t0 = Instant::now();
    let mut p = plan();
    p.max_time = Some(Duration::from_millis(600));
    let mut s = running(t0, p);
    let mut fake = Fake {
        progress: 1,
        delivered: 1,
        out_of_order: None,
    };
    // Every stream wrote its last message early; none has delivered it all.
    s.handle_engine(t0, Event::StreamWritten(0));
    s.handle_engine(t0, Event::StreamWritten(1));
    let out = drain(&mut s);
    assert!(out.contains(&ClientOutput::Send(ClientMsg::EndPhase { streams: 2 })));
    assert!(s
        .poll_timeout()
        .is_some_and(|t| t <= t0 + Duration::from_millis(600)));
    s.handle_timeout(t0 + Duration::from_millis(600), &mut fake);
    let out = drain(&mut s);
    assert!(
        out.contains(&ClientOutput::Send(ClientMsg::Stop { capped: true })),
        "{out:?}"
    );
    assert!(out.contains(&ClientOutput::AbortEngine));
    let out = deliver_and_answer(&mut s, t0);
    assert!(matches!(out.last(), Some(ClientOutput::PhaseDone { outcome, .. }) if outcome.capped));
}

#[test]
fn written_and_delivered_before_the_cap_is_not_capped() {
    let t0 = Instant::now();
    let mut p = plan();
    p.max_time = Some(Duration::from_millis(600));
    let mut s = running(t0, p);
    let mut fake = Fake {
        progress: 1,
        delivered: 1,
        out_of_order: None,
    };
    s.handle_engine(t0, Event::StreamDone(0));
    s.handle_engine(t0, Event::StreamDone(1));
    drain(&mut s);
    s.handle_timeout(t0 + Duration::from_millis(600), &mut fake);
    let out = drain(&mut s);
    assert!(!out.contains(&ClientOutput::AbortEngine), "{out:?}");
}

#[test]
fn no_progress_for_the_idle_timeout_fails_the_transfer() {
    let t0 = Instant::now();
    let mut s = running(t0, plan());
    let mut fake = Fake {
        progress: 5,
        delivered: 5,
        out_of_order: None,
    };
    s.handle_timeout(t0 + Duration::from_secs(1), &mut fake);
    drain(&mut s);
    let stall = IDLE + Duration::from_secs(5);
    s.handle_timeout(t0 + Duration::from_secs(1) + stall, &mut fake);
    let out = drain(&mut s);
    assert!(matches!(
        out.last(),
        Some(ClientOutput::Failed(Failure::Transfer(m))) if m.contains("no progress")
    ));
    assert!(out.contains(&ClientOutput::AbortEngine));
}

#[test]
fn a_server_that_never_admits_or_never_answers_is_a_failure() {
    let t0 = Instant::now();
    let mut s = ClientSession::new(t0, plan());
    assert_eq!(s.poll_timeout(), Some(t0 + CONNECT));
    let mut fake = Fake {
        progress: 0,
        delivered: 0,
        out_of_order: None,
    };
    s.handle_timeout(t0 + CONNECT, &mut fake);
    assert!(matches!(
        drain(&mut s).last(),
        Some(ClientOutput::Failed(Failure::NoAnswer(_)))
    ));

    let mut s = running(t0, plan());
    s.handle_engine(t0, Event::StreamDone(0));
    s.handle_engine(t0, Event::StreamDone(1));
    drain(&mut s);
    let late = t0 + IDLE + Duration::from_secs(5);
    s.handle_timeout(late, &mut fake);
    assert!(matches!(
        drain(&mut s).last(),
        Some(ClientOutput::Failed(Failure::NoAnswer(m))) if m.contains("its side")
    ));
}

#[test]
fn refusals_and_aborts_from_the_server_fail_with_their_reason() {
    let t0 = Instant::now();
    let mut s = ClientSession::new(t0, plan());
    s.handle_msg(
        t0,
        ServerMsg::Rejected {
            reason: "server busy".into(),
            retry_after_s: Some(7),
        },
    );
    assert_eq!(
        drain(&mut s).last(),
        Some(&ClientOutput::Failed(Failure::Rejected {
            reason: "server busy".into(),
            retry_after_s: Some(7)
        }))
    );
    let mut s = running(t0, plan());
    s.handle_msg(
        t0,
        ServerMsg::Abort {
            integrity: true,
            reason: "message 5".into(),
        },
    );
    let out = drain(&mut s);
    assert!(out.contains(&ClientOutput::AbortEngine));
    assert!(
        matches!(out.last(), Some(ClientOutput::Failed(Failure::Integrity(m))) if m.contains("message 5"))
    );
}

#[test]
fn bad_data_found_here_stops_both_ends_and_still_collects_the_results() {
    let t0 = Instant::now();
    let mut p = plan();
    p.sender = false;
    let mut s = running(t0, p);
    s.handle_engine(t0, Event::Integrity("stream 1: message 5".into()));
    let out = drain(&mut s);
    assert_eq!(
        out,
        vec![
            ClientOutput::Send(ClientMsg::Stop { capped: true }),
            ClientOutput::AbortEngine
        ]
    );
    s.handle_engine(t0, Event::StreamDone(0));
    s.handle_engine(t0, Event::StreamDone(1));
    s.handle_msg(
        t0,
        ServerMsg::PhaseResult {
            seq: 0,
            result: Box::default(),
        },
    );
    assert!(matches!(
        drain(&mut s).last(),
        Some(ClientOutput::PhaseDone { .. })
    ));
}

#[test]
fn a_stream_that_cannot_connect_fails_the_session() {
    let t0 = Instant::now();
    let mut s = ClientSession::new(t0, plan());
    s.start_phase(t0, main_phase(2));
    drain(&mut s);
    s.handle_stream_failed(t0, 1, "connection refused".into());
    // Before the server said anything its answer decides what the failure was.
    assert!(drain(&mut s).is_empty(), "waits for the server's answer");
    s.handle_msg(t0, accepted(8));
    let out = drain(&mut s);
    assert!(out.contains(&ClientOutput::AbortEngine));
    assert!(
        matches!(out.last(), Some(ClientOutput::Failed(Failure::Connect(f))) if f.index == 1 && f.to_string().contains("stream 2"))
    );
}

#[test]
fn a_stream_reset_before_any_answer_yields_to_what_the_control_connection_says() {
    let t0 = Instant::now();
    // Something that is not a tcptune server answers, then closes: the streams it reset
    // are not the story.
    let mut s = ClientSession::new(t0, plan());
    s.start_phase(t0, main_phase(2));
    drain(&mut s);
    s.handle_stream_failed(t0, 0, "connection reset by peer".into());
    s.handle_closed(t0);
    assert!(matches!(
        drain(&mut s).last(),
        Some(ClientOutput::Failed(Failure::Closed))
    ));
    // After an admission a failed stream fails the session at once.
    let mut s = running(t0, plan());
    s.handle_stream_failed(t0, 1, "connection refused".into());
    assert!(matches!(
        drain(&mut s).last(),
        Some(ClientOutput::Failed(Failure::Connect(f))) if f.index == 1
    ));
}

#[test]
fn a_result_before_the_phase_ended_is_a_protocol_error() {
    let t0 = Instant::now();
    let mut s = running(t0, plan());
    s.handle_msg(
        t0,
        ServerMsg::PhaseResult {
            seq: 0,
            result: Box::default(),
        },
    );
    assert!(matches!(
        drain(&mut s).last(),
        Some(ClientOutput::Failed(Failure::Protocol(_)))
    ));
}

#[test]
fn setup_time_runs_until_the_first_streams_are_all_connected() {
    let t0 = Instant::now();
    let mut s = ClientSession::new(t0, plan());
    s.start_phase(t0, main_phase(2));
    s.handle_msg(t0, accepted(8));
    s.handle_stream_open(t0 + Duration::from_millis(5), 0);
    s.handle_stream_open(t0 + Duration::from_millis(9), 1);
    s.handle_engine(t0, Event::StreamDone(0));
    s.handle_engine(t0, Event::StreamDone(1));
    s.handle_msg(
        t0,
        ServerMsg::PhaseResult {
            seq: 0,
            result: Box::default(),
        },
    );
    let out = drain(&mut s);
    let Some(ClientOutput::PhaseDone { outcome, .. }) = out.last() else {
        panic!("{out:?}")
    };
    assert_eq!(outcome.setup, Duration::from_millis(9));
    let _ = (Bytes(0), Rate(0));
}

#[test]
fn an_interrupt_stops_both_ends_and_still_collects_the_results() {
    let t0 = Instant::now();
    let mut s = running(t0, plan());
    s.handle_interrupt(t0);
    let out = drain(&mut s);
    assert_eq!(
        out,
        vec![
            ClientOutput::Send(ClientMsg::Stop { capped: true }),
            ClientOutput::AbortEngine
        ]
    );
    s.handle_engine(t0, Event::StreamDone(0));
    s.handle_engine(t0, Event::StreamDone(1));
    s.handle_msg(
        t0,
        ServerMsg::PhaseResult {
            seq: 0,
            result: Box::default(),
        },
    );
    assert!(matches!(
        drain(&mut s).last(),
        Some(ClientOutput::PhaseDone { outcome, .. }) if outcome.interrupted
    ));
    // Before any phase there is nothing to collect.
    let mut s = ClientSession::new(t0, plan());
    drain(&mut s);
    s.handle_interrupt(t0);
    assert_eq!(
        drain(&mut s),
        vec![ClientOutput::Failed(Failure::Interrupted)]
    );
}

#[test]
fn an_ended_phase_waking_for_nothing_does_not_ask_to_be_woken_in_the_past() {
    // Found by the pair harness: once every stream wrote its last byte, the sample and
    // stall timers stood still in the past and the driver spun until the server's result.
    let t0 = Instant::now();
    let mut s = running(t0, plan());
    s.handle_engine(t0, Event::StreamWritten(0));
    s.handle_engine(t0, Event::StreamWritten(1));
    drain(&mut s);
    let later = t0 + Duration::from_secs(1);
    assert_eq!(
        s.poll_timeout(),
        None,
        "no deadline runs while written data arrives"
    );
    s.handle_engine(later, Event::StreamDone(0));
    s.handle_engine(later, Event::StreamDone(1));
    assert_eq!(
        s.poll_timeout(),
        Some(later + IDLE + Duration::from_secs(5)),
        "only the result's deadline"
    );
}

#[test]
fn a_queued_session_waits_without_stalling_and_its_clocks_start_at_admission() {
    let t0 = Instant::now();
    let s60 = Duration::from_secs(60);
    let mut s = ClientSession::new(t0, plan());
    s.start_phase(t0, main_phase(2));
    drain(&mut s);
    s.handle_msg(
        t0,
        ServerMsg::Queued {
            place: 3,
            expected_wait_s: Some(40),
        },
    );
    assert_eq!(
        drain(&mut s),
        vec![ClientOutput::Queued {
            place: 3,
            expected_wait_s: Some(40)
        }]
    );
    // Only the wait's end is a deadline: no stall (nothing moves while it waits), no answer
    // timeout at the connect timeout.
    assert_eq!(s.poll_timeout(), Some(t0 + s60));
    let mut still = Fake {
        progress: 0,
        delivered: 0,
        out_of_order: None,
    };
    s.handle_timeout(t0 + Duration::from_secs(50), &mut still);
    assert!(drain(&mut s).is_empty());
    // A new place does not extend the wait.
    s.handle_msg(
        t0 + Duration::from_secs(50),
        ServerMsg::Queued {
            place: 1,
            expected_wait_s: None,
        },
    );
    drain(&mut s);
    assert_eq!(s.poll_timeout(), Some(t0 + s60));
    // Admitted at 55 s: the stall limit counts from now.
    let t1 = t0 + Duration::from_secs(55);
    s.handle_msg(t1, accepted(8));
    drain(&mut s);
    s.handle_timeout(t1 + IDLE, &mut still);
    assert!(
        drain(&mut s).is_empty(),
        "within the stall limit of admission"
    );
    s.handle_timeout(t1 + IDLE + Duration::from_secs(5), &mut still);
    assert!(matches!(
        &drain(&mut s)[..],
        [
            ClientOutput::AbortEngine,
            ClientOutput::Failed(Failure::Transfer(_))
        ]
    ));
}

#[test]
fn a_session_that_waits_too_long_fails_in_one_line_saying_how_to_wait_longer() {
    let t0 = Instant::now();
    let mut s = ClientSession::new(t0, plan());
    s.start_phase(t0, main_phase(1));
    drain(&mut s);
    s.handle_msg(
        t0,
        ServerMsg::Queued {
            place: 2,
            expected_wait_s: Some(90),
        },
    );
    drain(&mut s);
    let mut still = Fake {
        progress: 0,
        delivered: 0,
        out_of_order: None,
    };
    s.handle_timeout(t0 + Duration::from_secs(60), &mut still);
    let out = drain(&mut s);
    let Some(ClientOutput::Failed(Failure::Rejected {
        reason,
        retry_after_s,
    })) = out.last()
    else {
        panic!("{out:?}")
    };
    assert!(
        reason.contains("--wait") && !reason.contains('\n'),
        "{reason}"
    );
    assert_eq!(*retry_after_s, Some(90));
    // Queued after admission breaks the protocol.
    let mut s = ClientSession::new(t0, plan());
    s.handle_msg(t0, accepted(8));
    s.handle_msg(
        t0,
        ServerMsg::Queued {
            place: 1,
            expected_wait_s: None,
        },
    );
    assert!(matches!(
        drain(&mut s).last(),
        Some(ClientOutput::Failed(Failure::Protocol(_)))
    ));
}

/// A client that holds a secret refuses a server that admits it without checking it (an
/// impersonator would otherwise get keys that do not depend on the secret).
#[test]
fn a_client_with_a_secret_refuses_a_server_that_does_not_check_it() {
    let t0 = Instant::now();
    let with_secret = || {
        let mut p = plan();
        p.auth = Some((
            Secret::from_bytes(b"s3cret").expect("secret"),
            [1; 32],
            1000,
        ));
        let mut s = ClientSession::new(t0, p);
        s.start_phase(t0, main_phase(2));
        drain(&mut s);
        s
    };
    let mut s = with_secret();
    s.handle_msg(t0, accepted(4));
    assert_eq!(
        drain(&mut s).last(),
        Some(&ClientOutput::Failed(Failure::Protocol(
            Violation::SecretUnchecked
        )))
    );
    assert!(s.server().is_none());
    // A server that says it checks the secret is taken (its keys then depend on it).
    let mut s = with_secret();
    let mut checked = accepted(4);
    if let ServerMsg::Accepted { auth_required, .. } = &mut checked {
        *auth_required = true;
    }
    s.handle_msg(t0, checked);
    assert!(!drain(&mut s)
        .iter()
        .any(|o| matches!(o, ClientOutput::Failed(_))));
    assert!(s.server().is_some());
    // Without a secret, an open server is taken as before.
    let mut s = ClientSession::new(t0, plan());
    s.start_phase(t0, main_phase(2));
    drain(&mut s);
    s.handle_msg(t0, accepted(4));
    assert!(s.server().is_some());
}

fn share(rate_bps: Option<u64>) -> ServerMsg {
    ServerMsg::Share {
        rate_bps,
        sessions: 2,
        path_bps: Some(800_000_000),
    }
}

#[test]
fn a_share_paces_the_main_phase_within_its_budget_and_only_when_asked_for() {
    let t0 = Instant::now();
    let mut p = plan();
    p.params.share = true;
    let mut s = running(t0, p);
    s.handle_msg(t0, share(Some(400_000_000)));
    s.handle_msg(t0, share(None));
    // A hostile server's crawl is raised to the budget's floor.
    s.handle_msg(t0, share(Some(1)));
    let out = drain(&mut s);
    let paced: Vec<Option<Rate>> = out
        .iter()
        .filter_map(|o| match o {
            ClientOutput::Pace { rate, sessions, .. } => {
                assert_eq!(*sessions, 2);
                Some(*rate)
            }
            _ => None,
        })
        .collect();
    assert_eq!(paced, vec![Some(Rate::mbit(400)), None, Some(MIN_SHARE)]);
    assert!(sent(&out).is_empty(), "nothing to answer");
    // A client that did not ask for shares ignores them (a server that sends them anyway
    // breaks nothing).
    let mut s = running(t0, plan());
    s.handle_msg(t0, share(Some(400_000_000)));
    assert!(drain(&mut s).is_empty());
    // Outside a main phase there is nothing to pace.
    let mut p = plan();
    p.params.share = true;
    let mut s = ClientSession::new(t0, p);
    s.handle_msg(t0, share(Some(400_000_000)));
    assert!(!drain(&mut s)
        .iter()
        .any(|o| matches!(o, ClientOutput::Pace { .. })));
}

/// A main phase with 5 streams open and the hint of the rate they measured, 1 Gbit/s.
fn five_open_measured(t0: Instant) -> (ClientSession, PathHint) {
    let mut s = ClientSession::new(t0, plan());
    s.start_phase(t0, main_phase(5));
    s.handle_msg(t0, accepted(8));
    for i in 0..5 {
        s.handle_stream_open(t0, i);
    }
    drain(&mut s);
    let hint = PathHint {
        rtt: Some(Duration::from_millis(20)),
        rate: Some(Rate::gbit(1)),
        ..PathHint::default()
    };
    (s, hint)
}

#[test]
fn streams_the_plan_does_not_need_close_and_the_phase_still_ends_with_all_of_them() {
    let t0 = Instant::now();
    let (mut s, hint) = five_open_measured(t0);
    assert_eq!(s.retire_to(t0, hint.clone(), 1), 4);
    let out = drain(&mut s);
    assert_eq!(
        out,
        vec![
            ClientOutput::Send(ClientMsg::Hint {
                seq: 0,
                hint: hint.clone(),
                streams: 1,
                retire: false,
            }),
            ClientOutput::LocalHint {
                hint: hint.clone(),
                streams: 1
            },
            ClientOutput::RetireStreams {
                seq: 0,
                from: 1,
                to: 5,
                local: true,
            },
        ]
    );
    // A tuner asking for more later opens nothing: the phase keeps the plan's streams.
    s.handle_engine(
        t0,
        Event::MoreStreams(StreamRequest {
            known_streams: 1,
            count: 3,
            reason: "bdp".into(),
        }),
    );
    assert!(drain(&mut s).is_empty());
    // The closed streams end first; the phase ends with the last of all five.
    for i in 1..5 {
        s.handle_engine(t0, Event::StreamDone(i));
    }
    assert!(drain(&mut s).is_empty());
    s.handle_engine(t0, Event::StreamDone(0));
    assert_eq!(
        drain(&mut s),
        vec![ClientOutput::Send(ClientMsg::EndPhase { streams: 5 })]
    );
}

#[test]
fn streams_close_only_with_every_stream_open_and_a_receiver_only_at_a_server_that_retires() {
    let t0 = Instant::now();
    let hint = PathHint {
        rtt: Some(Duration::from_millis(20)),
        rate: Some(Rate::gbit(1)),
        ..PathHint::default()
    };
    let receiving = || ClientPlan {
        sender: false,
        ..plan()
    };
    // A receiving client asks the server's writers to close; its own streams stay open
    // (they end when the server's close).
    let mut s = running(t0, receiving());
    assert_eq!(s.retire_to(t0, hint.clone(), 1), 1);
    let out = drain(&mut s);
    assert!(
        out.contains(&ClientOutput::Send(ClientMsg::Hint {
            seq: 0,
            hint: hint.clone(),
            streams: 1,
            retire: true,
        })),
        "{out:?}"
    );
    assert!(
        out.contains(&ClientOutput::RetireStreams {
            seq: 0,
            from: 1,
            to: 2,
            local: false,
        }),
        "{out:?}"
    );
    // A server that predates Hint.retire would keep its writers: it settles as before.
    let mut s = ClientSession::new(t0, receiving());
    s.start_phase(t0, main_phase(2));
    s.handle_msg(t0, accepted_by_an_older_server(8));
    s.handle_stream_open(t0, 0);
    s.handle_stream_open(t0, 1);
    drain(&mut s);
    assert_eq!(s.retire_to(t0, hint.clone(), 1), 0);
    let out = drain(&mut s);
    assert!(
        out.iter()
            .all(|o| !matches!(o, ClientOutput::RetireStreams { .. })),
        "{out:?}"
    );
    assert!(out.iter().any(|o| matches!(
        o,
        ClientOutput::Send(ClientMsg::Hint {
            streams: 2,
            retire: false,
            ..
        })
    )));
    assert!(out
        .iter()
        .any(|o| matches!(o, ClientOutput::LocalHint { streams: 2, .. })));
    // A stream still connecting: nothing closes.
    let mut s = ClientSession::new(t0, plan());
    s.start_phase(t0, main_phase(3));
    s.handle_msg(t0, accepted(8));
    s.handle_stream_open(t0, 0);
    s.handle_stream_open(t0, 1);
    drain(&mut s);
    assert_eq!(s.retire_to(t0, hint.clone(), 1), 0);
    // Nothing beyond what is kept.
    let mut s = running(t0, plan());
    assert_eq!(s.retire_to(t0, hint, 2), 0);
}

/// A main phase of 5 open streams that measured 1 Gbit/s and waits to keep 1, fed
/// `rate_at(t)` bytes per second for `secs`: when the streams closed (`None`: never).
fn retire_after(rate_at: impl Fn(f64) -> f64, secs: f64, until: Option<Duration>) -> Option<f64> {
    let t0 = Instant::now();
    let (mut s, hint) = five_open_measured(t0);
    let window = Duration::from_millis(500);
    s.retire_when_steady(t0, hint, 1, window, until.map(|u| t0 + u));
    let out = drain(&mut s);
    assert!(
        out.iter()
            .any(|o| matches!(o, ClientOutput::LocalHint { streams: 5, .. })),
        "settled on the open streams first: {out:?}"
    );
    let mut f = Fake {
        progress: 0,
        delivered: 0,
        out_of_order: None,
    };
    let step = Duration::from_millis(10);
    let mut now = t0;
    while now.saturating_duration_since(t0).as_secs_f64() < secs {
        now += step;
        let t = now.saturating_duration_since(t0).as_secs_f64();
        f.delivered += (rate_at(t) * step.as_secs_f64()) as u64;
        f.progress = f.delivered;
        s.handle_timeout(now, &mut f);
        for o in drain(&mut s) {
            if let ClientOutput::RetireStreams { from: 1, to: 5, .. } = o {
                return Some(t);
            }
        }
    }
    None
}

#[test]
fn the_streams_the_plan_does_not_need_close_once_delivery_holds_steady() {
    let gbit = 125_000_000.0;
    // A path alone delivers the measured rate: they close after the first window.
    let alone = retire_after(|_| gbit * 0.97, 3.0, None);
    assert!(alone.is_some_and(|t| (0.5..0.6).contains(&t)), "{alone:?}");
    // Still growing by a fifth per window (a plateau the measurement took too early
    // beside another flow): they stay while it grows, and close when it stops.
    let growing = |t: f64| gbit * 0.1 * 1.2f64.powf((t / 0.5).floor().min(6.0));
    let late = retire_after(growing, 6.0, None);
    assert!(late.is_some_and(|t| t > 3.0), "{late:?}");
    // Not after the last moment it pays.
    assert_eq!(
        retire_after(growing, 6.0, Some(Duration::from_secs(2))),
        None
    );
}

#[test]
fn the_streams_that_stay_are_planned_for_the_steady_delivery_when_the_measurement_found_less() {
    let t0 = Instant::now();
    // Measured 1 Gbit/s on the way up, 1 stream planned for it; the five streams then hold
    // 1.5 Gbit/s: two stay, sized for it.
    let (mut s, hint) = five_open_measured(t0);
    s.retire_when_steady(t0, hint, 1, Duration::from_millis(500), None);
    drain(&mut s);
    let mut f = Fake {
        progress: 0,
        delivered: 0,
        out_of_order: None,
    };
    let mut now = t0;
    let mut told = None;
    while told.is_none() && now.saturating_duration_since(t0) < Duration::from_secs(3) {
        now += Duration::from_millis(10);
        f.delivered += 1_875_000; // 1.5 Gbit/s in 10 ms
        f.progress = f.delivered;
        s.handle_timeout(now, &mut f);
        let out = drain(&mut s);
        if out
            .iter()
            .any(|o| matches!(o, ClientOutput::RetireStreams { from: 2, to: 5, .. }))
        {
            told = out.into_iter().find_map(|o| match o {
                ClientOutput::LocalHint { hint, streams: 2 } => hint.rate,
                _ => None,
            });
            assert!(told.is_some(), "the tuners hear the two streams' plan");
        }
    }
    let rate = told.expect("the streams closed").0 as f64;
    assert!((rate / 1.5e9 - 1.0).abs() < 0.05, "{rate}");
    // Delivering what was measured (or less): the plan stands.
    let h = PathHint {
        rate: Some(Rate::gbit(1)),
        ..PathHint::default()
    };
    assert_eq!(
        steady_plan(h.clone(), 3, 8, Rate::mbit(990)),
        (h.clone(), 3)
    );
    // Never more than are open, never fewer than planned.
    assert_eq!(steady_plan(h.clone(), 3, 4, Rate::gbit(5)).1, 4);
    assert_eq!(steady_plan(h, 3, 8, Rate::mbit(1100)).1, 3);
}
