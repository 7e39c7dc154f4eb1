//! The server's control plane without a socket: connections are numbers, bytes are
//! slices, time is an `Instant` the test moves.

use super::*;
use crate::events::ServerEvent;
use crate::keys::test_kx;
use crate::wire::PROTOCOL_VERSION;
use crate::wire::{encode, ClientAuth, Phase, TestParams};
use tcptune_core::PathHint;

const FIRST: Duration = Duration::from_secs(5);
const HANDSHAKE: Duration = Duration::from_secs(10);

fn limits() -> ServerLimits {
    ServerLimits {
        max_streams: 8,
        max_message_size: 16 << 20,
        max_messages: 1 << 24,
        max_total_bytes: 1 << 40,
        max_duration_ms: 3_600_000,
    }
}

fn config() -> EndpointConfig {
    EndpointConfig {
        limits: limits(),
        max_sessions: 4,
        max_sessions_per_addr: 2,
        max_pending: 16,
        max_pending_per_addr: 4,
        max_parked: 4096,
        max_parked_per_addr: 4096,
        first_frame_timeout: FIRST,
        handshake_timeout: HANDSHAKE,
        idle_timeout: Duration::from_secs(30),
        secret: None,
        fd_budget: 10_000,
        files: None,
        slots: crate::session::endpoint::SlotRules::default(),
    }
}

fn host() -> HostInfo {
    HostInfo {
        limits: HostLimits::linux_defaults(),
        congestion: "cubic".into(),
        available_cc: vec!["cubic".into(), "reno".into()],
    }
}

fn endpoint(cfg: EndpointConfig) -> Endpoint {
    Endpoint::new(
        Instant::now(),
        cfg,
        host(),
        Box::new(|| [42; 32]),
        Box::new(test_kx::Server(0)),
    )
}

fn peer(last: u8, port: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, last], port))
}

fn params() -> TestParams {
    TestParams {
        messages: 8,
        ..crate::pair::params(2)
    }
}

fn hello(token: u8, auth: Option<ClientAuth>) -> ClientMsg {
    ClientMsg::Hello {
        protocol: PROTOCOL_VERSION,
        version: "test".into(),
        token: Some(Token([token; 16])),
        auth,
        key_share: Some(wire::to_hex(&test_kx::pair(token).1)),
    }
}

fn frames(msgs: &[ClientMsg]) -> Vec<u8> {
    msgs.iter()
        .flat_map(|m| encode(m).expect("encode"))
        .collect()
}

fn events(e: &mut Endpoint) -> Vec<EndpointEvent> {
    std::iter::from_fn(|| e.poll_event()).collect()
}

/// Feed bytes the way the driver does: never more than the read limit at a time.
fn feed(e: &mut Endpoint, now: Instant, conn: ConnId, mut data: &[u8]) {
    while !data.is_empty() {
        let n = match e.read_limit(conn) {
            ReadLimit::None => return,
            ReadLimit::Exact(n) => n.min(data.len()),
            ReadLimit::Frames => data.len(),
        };
        e.on_bytes(now, 1_000_000, conn, &data[..n]);
        data = &data[n..];
    }
}

/// The server's messages in the events.
fn replies(evs: &[EndpointEvent]) -> Vec<ServerMsg> {
    evs.iter()
        .filter_map(|e| match e {
            EndpointEvent::Send { frame, .. } => wire::decode(&frame[4..]).ok(),
            _ => None,
        })
        .collect()
}

fn refused_kinds(evs: &[EndpointEvent]) -> Vec<&'static str> {
    evs.iter()
        .filter_map(|e| match e {
            EndpointEvent::Log(ServerEvent::Refused { kind, .. }) => Some(*kind),
            _ => None,
        })
        .collect()
}

/// The data hello of the session of `token` (its client's key pair from the same byte, no
/// shared secret), tagged with the session's keys.
fn data_hello(token: u8, seq: u32, stream: u32) -> Vec<u8> {
    let t = Token([token; 16]);
    let keys = test_kx::client_keys(token, 0, None, &t);
    DataHello::sealed(&keys, t, seq, stream).encode().to_vec()
}

fn start(seq: u32) -> ClientMsg {
    ClientMsg::StartPhase {
        seq,
        phase: Phase::Main,
        hint: PathHint::default(),
        streams: 2,
    }
}

/// A session admitted on connection 1 from 10.0.0.1 with token 7, phase 0 started.
fn admitted(now: Instant) -> Endpoint {
    let mut e = endpoint(config());
    e.on_accept(now, 1, peer(1, 1000));
    feed(
        &mut e,
        now,
        1,
        &frames(&[
            hello(7, None),
            ClientMsg::Setup { params: params() },
            start(0),
        ]),
    );
    e
}

#[test]
fn a_pipelined_first_flight_is_admitted_and_starts_the_phase() {
    let t0 = Instant::now();
    let mut e = admitted(t0);
    let evs = events(&mut e);
    let r = replies(&evs);
    assert!(
        matches!(&r[..], [ServerMsg::Accepted { limits, .. }] if limits.max_streams == 8),
        "{r:?}"
    );
    assert!(evs
        .iter()
        .any(|e| matches!(e, EndpointEvent::Log(ServerEvent::SessionStarted { .. }))));
    assert!(evs
        .iter()
        .any(|e| matches!(e, EndpointEvent::StartEngine { spec, .. } if spec.seq == 0)));
    assert_eq!(e.sessions(), 1);
    assert_eq!(e.stats().pending, 0);
}

#[test]
fn a_data_hello_is_read_exactly_and_never_past_its_end() {
    let t0 = Instant::now();
    let mut e = admitted(t0);
    events(&mut e);
    e.on_accept(t0, 2, peer(1, 1001));
    assert_eq!(e.read_limit(2), ReadLimit::Exact(8));
    e.on_bytes(t0, 0, 2, &data_hello(7, 0, 0)[..8]);
    // The rest of the hello: token, phase, stream and tag.
    assert_eq!(e.read_limit(2), ReadLimit::Exact(40));
    e.on_bytes(t0, 0, 2, &data_hello(7, 0, 0)[8..]);
    assert_eq!(e.read_limit(2), ReadLimit::None, "the rest is the engine's");
    assert_eq!(
        events(&mut e),
        vec![EndpointEvent::Attach {
            session: 1,
            conn: 2,
            index: 0
        }]
    );
}

#[test]
fn data_connections_that_arrive_before_their_session_wait_for_it() {
    let t0 = Instant::now();
    let mut e = endpoint(config());
    e.on_accept(t0, 2, peer(1, 1001));
    feed(&mut e, t0, 2, &data_hello(7, 0, 1));
    assert_eq!(
        events(&mut e),
        vec![EndpointEvent::Parked { conn: 2 }],
        "parked, and the driver told"
    );
    e.on_accept(t0, 1, peer(1, 1000));
    feed(
        &mut e,
        t0,
        1,
        &frames(&[hello(7, None), ClientMsg::Setup { params: params() }]),
    );
    assert!(
        !events(&mut e)
            .iter()
            .any(|e| matches!(e, EndpointEvent::Attach { .. })),
        "no phase yet"
    );
    feed(&mut e, t0, 1, &frames(&[start(0)]));
    let evs = events(&mut e);
    assert!(
        evs.contains(&EndpointEvent::Attach {
            session: 1,
            conn: 2,
            index: 1
        }),
        "{evs:?}"
    );
}

#[test]
fn a_data_connection_from_another_address_is_refused() {
    let t0 = Instant::now();
    let mut e = admitted(t0);
    events(&mut e);
    e.on_accept(t0, 2, peer(9, 1001));
    feed(&mut e, t0, 2, &data_hello(7, 0, 0));
    let evs = events(&mut e);
    assert!(evs.contains(&EndpointEvent::Close { conn: 2 }));
    assert_eq!(refused_kinds(&evs), vec!["data_address"]);
}

#[test]
fn a_data_connection_for_no_session_waits_then_goes() {
    let t0 = Instant::now();
    let mut e = endpoint(config());
    e.on_accept(t0, 2, peer(1, 1001));
    feed(&mut e, t0, 2, &data_hello(3, 0, 0));
    assert_eq!(events(&mut e), vec![EndpointEvent::Parked { conn: 2 }]);
    assert_eq!(e.poll_timeout(), Some(t0 + HANDSHAKE));
    e.on_timeout(t0 + HANDSHAKE, &|_| None);
    let evs = events(&mut e);
    assert!(evs.contains(&EndpointEvent::Close { conn: 2 }));
    assert_eq!(refused_kinds(&evs), vec!["data_unknown"]);
}

#[test]
fn silent_connections_go_at_the_first_frame_deadline_and_garbage_at_once() {
    let t0 = Instant::now();
    let mut e = endpoint(config());
    e.on_accept(t0, 1, peer(1, 1000));
    e.on_accept(t0, 2, peer(2, 1000));
    feed(&mut e, t0, 2, b"GET / HTTP/1.1\r\n");
    let evs = events(&mut e);
    assert!(evs.contains(&EndpointEvent::Close { conn: 2 }));
    assert_eq!(refused_kinds(&evs), vec!["garbage"]);
    assert_eq!(e.poll_timeout(), Some(t0 + FIRST));
    e.on_timeout(t0 + FIRST, &|_| None);
    let evs = events(&mut e);
    assert!(evs.contains(&EndpointEvent::Close { conn: 1 }));
    assert_eq!(refused_kinds(&evs), vec!["timeout"]);
    assert_eq!(e.stats().pending, 0);
}

#[test]
fn half_a_hello_is_told_what_timed_out() {
    let t0 = Instant::now();
    let mut e = endpoint(config());
    e.on_accept(t0, 1, peer(1, 1000));
    let f = frames(&[hello(7, None)]);
    feed(&mut e, t0, 1, &f[..f.len() / 2]);
    e.on_timeout(t0 + FIRST, &|_| None);
    let r = replies(&events(&mut e));
    assert!(
        matches!(&r[..], [ServerMsg::Rejected { reason, .. }] if reason.contains("rest of the client's hello")),
        "{r:?}"
    );
}

#[test]
fn a_full_address_gives_up_its_oldest_pending_connection_not_the_new_one() {
    let t0 = Instant::now();
    let mut e = endpoint(config());
    for c in 1..=4 {
        e.on_accept(t0, c, peer(1, 1000 + c as u16));
    }
    e.on_accept(t0, 50, peer(2, 1000));
    events(&mut e);
    e.on_accept(t0, 5, peer(1, 2000));
    let evs = events(&mut e);
    assert!(evs.contains(&EndpointEvent::Close { conn: 1 }), "{evs:?}");
    assert_eq!(refused_kinds(&evs), vec!["pending_limit"]);
    // The newest can complete its handshake.
    feed(
        &mut e,
        t0,
        5,
        &frames(&[hello(7, None), ClientMsg::Setup { params: params() }]),
    );
    assert!(matches!(
        replies(&events(&mut e))[..],
        [ServerMsg::Accepted { .. }]
    ));
    assert_eq!(
        e.stats().pending,
        4,
        "three of 10.0.0.1 and one of 10.0.0.2"
    );
}

#[test]
fn a_flood_from_many_addresses_evicts_the_oldest_and_lets_a_new_client_in() {
    let t0 = Instant::now();
    let mut e = endpoint(config());
    for c in 0..1000u64 {
        e.on_accept(t0, 100 + c, peer((c % 200) as u8, 1000 + c as u16));
    }
    assert_eq!(e.stats().pending, 16, "bounded");
    events(&mut e);
    e.on_accept(t0, 1, peer(250, 1000));
    feed(
        &mut e,
        t0,
        1,
        &frames(&[hello(7, None), ClientMsg::Setup { params: params() }]),
    );
    assert!(replies(&events(&mut e))
        .iter()
        .any(|m| matches!(m, ServerMsg::Accepted { .. })));
    let s = e.stats();
    assert!(s.dropped >= 984, "{s:?}");
    assert_eq!(s.refused_by.get("pending_limit"), Some(&s.dropped));
}

#[test]
fn sessions_are_bounded_per_address_and_in_all_and_a_refusal_says_when_to_retry() {
    let t0 = Instant::now();
    // No room to wait: refused (the queue's own tests are in `slots`).
    let mut cfg = config();
    cfg.slots.max_queue = 0;
    let mut e = endpoint(cfg);
    let open = |e: &mut Endpoint, conn: ConnId, who: u8, token: u8| {
        e.on_accept(t0, conn, peer(who, 1000 + conn as u16));
        feed(
            e,
            t0,
            conn,
            &frames(&[hello(token, None), ClientMsg::Setup { params: params() }]),
        );
        replies(&events(e))
    };
    assert!(matches!(
        open(&mut e, 1, 1, 1)[..],
        [ServerMsg::Accepted { .. }]
    ));
    assert!(matches!(
        open(&mut e, 2, 1, 2)[..],
        [ServerMsg::Accepted { .. }]
    ));
    let r = open(&mut e, 3, 1, 3);
    assert!(
        matches!(&r[..], [ServerMsg::Rejected { reason, retry_after_s: Some(30) }] if reason.contains("limit per address")),
        "{r:?}"
    );
    assert!(matches!(
        open(&mut e, 4, 2, 4)[..],
        [ServerMsg::Accepted { .. }]
    ));
    assert!(matches!(
        open(&mut e, 5, 3, 5)[..],
        [ServerMsg::Accepted { .. }]
    ));
    let r = open(&mut e, 6, 4, 6);
    assert!(
        matches!(&r[..], [ServerMsg::Rejected { reason, retry_after_s: Some(30) }] if reason.contains("busy") && reason.contains("30 s")),
        "{r:?}"
    );
    // Idle sessions end at the idle timeout and free their slots.
    e.on_timeout(t0 + Duration::from_secs(30), &|_| None);
    events(&mut e);
    assert_eq!(e.sessions(), 0);
    assert!(matches!(
        open(&mut e, 7, 4, 7)[..],
        [ServerMsg::Accepted { .. }]
    ));
}

fn proof(secret: &Secret, token: u8, nonce: u8, time: u64) -> ClientAuth {
    let mac = secret.prove(&[nonce; 32], time, &[token; 16], &test_kx::pair(token).1);
    ClientAuth {
        nonce: wire::to_hex(&[nonce; 32]),
        time_unix_s: time,
        mac: wire::to_hex(&mac),
    }
}

#[test]
fn a_shared_secret_is_proved_without_a_round_trip_and_checked_for_freshness() {
    let t0 = Instant::now();
    let secret = Secret::from_bytes(b"hunter2").expect("secret");
    let mut cfg = config();
    cfg.secret = Some(secret.clone());
    let mut e = endpoint(cfg);
    let now_unix = 1_000_000;
    // A fresh proof: admitted at once.
    e.on_accept(t0, 1, peer(1, 1000));
    feed(
        &mut e,
        t0,
        1,
        &frames(&[
            hello(7, Some(proof(&secret, 7, 1, now_unix))),
            ClientMsg::Setup { params: params() },
        ]),
    );
    assert!(matches!(
        replies(&events(&mut e))[..],
        [ServerMsg::Accepted {
            auth_required: true,
            ..
        }]
    ));
    // The same proof again (a replay, even with another token it would not verify): challenged.
    e.on_accept(t0, 2, peer(2, 1000));
    feed(
        &mut e,
        t0,
        2,
        &frames(&[
            hello(8, Some(proof(&secret, 8, 1, now_unix))),
            ClientMsg::Setup { params: params() },
        ]),
    );
    let r = replies(&events(&mut e));
    let [ServerMsg::Challenge { nonce, reason, .. }] = &r[..] else {
        panic!("{r:?}")
    };
    assert!(reason.contains("seen before"), "{reason}");
    // The setup sent before the challenge was dropped; the answer and the setup again admit.
    let n = wire::from_hex::<32>(nonce).expect("nonce");
    let answer = wire::to_hex(&secret.answer(&n, &[8; 16]));
    feed(
        &mut e,
        t0,
        2,
        &frames(&[
            ClientMsg::Auth { mac: answer },
            ClientMsg::Setup { params: params() },
        ]),
    );
    assert!(matches!(
        replies(&events(&mut e))[..],
        [ServerMsg::Accepted { .. }]
    ));
    // A clock far off: challenged too.
    e.on_accept(t0, 3, peer(3, 1000));
    feed(
        &mut e,
        t0,
        3,
        &frames(&[hello(9, Some(proof(&secret, 9, 2, now_unix - 3600)))]),
    );
    assert!(
        matches!(&replies(&events(&mut e))[..], [ServerMsg::Challenge { reason, .. }] if reason.contains("clock"))
    );
}

#[test]
fn a_wrong_or_missing_secret_is_refused_and_the_address_must_wait() {
    let t0 = Instant::now();
    let secret = Secret::from_bytes(b"hunter2").expect("secret");
    let wrong = Secret::from_bytes(b"hunter3").expect("secret");
    let mut cfg = config();
    cfg.secret = Some(secret.clone());
    let mut e = endpoint(cfg);
    e.on_accept(t0, 1, peer(1, 1000));
    feed(&mut e, t0, 1, &frames(&[hello(7, None)]));
    let evs = events(&mut e);
    assert!(
        matches!(&replies(&evs)[..], [ServerMsg::Rejected { reason, .. }] if reason.contains("--secret-file"))
    );
    e.on_accept(t0, 2, peer(1, 1001));
    feed(
        &mut e,
        t0,
        2,
        &frames(&[hello(7, Some(proof(&wrong, 7, 3, 1_000_000)))]),
    );
    let evs = events(&mut e);
    assert!(
        matches!(&replies(&evs)[..], [ServerMsg::Rejected { reason, .. }] if reason.contains("does not match"))
    );
    assert!(
        refused_kinds(&evs).is_empty(),
        "the second refusal of a kind is counted, not logged"
    );
    assert_eq!(e.stats().refused_by.get("auth"), Some(&2));
    // Even the right secret waits out the backoff.
    e.on_accept(t0, 3, peer(1, 1002));
    feed(
        &mut e,
        t0,
        3,
        &frames(&[hello(7, Some(proof(&secret, 7, 4, 1_000_000)))]),
    );
    let evs = events(&mut e);
    assert!(
        matches!(
            &replies(&evs)[..],
            [ServerMsg::Rejected {
                retry_after_s: Some(1),
                ..
            }]
        ),
        "{evs:?}"
    );
    // Another address is not affected.
    e.on_accept(t0, 4, peer(2, 1000));
    feed(
        &mut e,
        t0,
        4,
        &frames(&[
            hello(8, Some(proof(&secret, 8, 5, 1_000_000))),
            ClientMsg::Setup { params: params() },
        ]),
    );
    assert!(matches!(
        replies(&events(&mut e))[..],
        [ServerMsg::Accepted { .. }]
    ));
}

#[test]
fn another_protocol_version_is_told_which_one_the_server_speaks() {
    let t0 = Instant::now();
    let mut e = endpoint(config());
    e.on_accept(t0, 1, peer(1, 1000));
    // A version-1 hello: no token.
    feed(
        &mut e,
        t0,
        1,
        br#"{"type":"hello","protocol":1,"version":"0.1.0"}"#
            .len()
            .to_be_bytes()[4..]
            .iter()
            .copied()
            .chain(
                br#"{"type":"hello","protocol":1,"version":"0.1.0"}"#
                    .iter()
                    .copied(),
            )
            .collect::<Vec<u8>>()
            .as_slice(),
    );
    let r = replies(&events(&mut e));
    assert!(
        matches!(&r[..], [ServerMsg::Rejected { reason, .. }] if reason.contains("speaks 3")),
        "{r:?}"
    );
}

#[test]
fn file_descriptors_bound_each_sessions_stream_allowance() {
    let t0 = Instant::now();
    let mut cfg = config();
    cfg.fd_budget = 14;
    let mut e = endpoint(cfg);
    e.on_accept(t0, 1, peer(1, 1000));
    feed(
        &mut e,
        t0,
        1,
        &frames(&[hello(1, None), ClientMsg::Setup { params: params() }]),
    );
    // 14 descriptors: the control connection, the pattern's memfd and 8 streams.
    assert!(
        matches!(&replies(&events(&mut e))[..], [ServerMsg::Accepted { limits, .. }] if limits.max_streams == 8)
    );
    e.on_accept(t0, 2, peer(2, 1000));
    feed(
        &mut e,
        t0,
        2,
        &frames(&[hello(2, None), ClientMsg::Setup { params: params() }]),
    );
    // 4 left: a control connection, a memfd and 2 streams, just what it asks for.
    assert!(
        matches!(&replies(&events(&mut e))[..], [ServerMsg::Accepted { limits, .. }] if limits.max_streams == 2)
    );
    e.on_accept(t0, 3, peer(3, 1000));
    feed(
        &mut e,
        t0,
        3,
        &frames(&[hello(3, None), ClientMsg::Setup { params: params() }]),
    );
    let r = replies(&events(&mut e));
    assert!(
        matches!(&r[..], [ServerMsg::Rejected { reason, .. }] if reason.contains("file descriptors")),
        "{r:?}"
    );
}

#[test]
fn an_unavailable_congestion_control_is_refused_before_the_session_starts() {
    let t0 = Instant::now();
    let mut e = endpoint(config());
    e.on_accept(t0, 1, peer(1, 1000));
    let mut p = params();
    p.congestion = Some("bogus".into());
    feed(
        &mut e,
        t0,
        1,
        &frames(&[hello(1, None), ClientMsg::Setup { params: p }]),
    );
    let r = replies(&events(&mut e));
    assert!(
        matches!(&r[..], [ServerMsg::Rejected { reason, .. }] if reason.contains("'bogus'") && reason.contains("cubic, reno")),
        "{r:?}"
    );
}

#[test]
fn a_session_that_ends_frees_its_slot_token_and_waiting_connections() {
    let t0 = Instant::now();
    let mut e = admitted(t0);
    e.on_accept(t0, 2, peer(1, 1001));
    feed(&mut e, t0, 2, &data_hello(7, 5, 0)); // a future phase: parked
    events(&mut e);
    e.on_closed(t0, 1); // the client vanished
    let evs = events(&mut e);
    assert!(evs.contains(&EndpointEvent::AbortEngine { session: 1 }));
    assert!(evs.contains(&EndpointEvent::SessionGone { session: 1 }));
    assert!(evs.contains(&EndpointEvent::Close { conn: 2 }));
    assert!(evs.iter().any(|e| matches!(
        e,
        EndpointEvent::Log(ServerEvent::SessionEnded { error: Some(r), .. }) if r.contains("closed")
    )));
    assert_eq!(e.sessions(), 0);
    assert_eq!(e.stats().sessions_failed, 1);
    assert_eq!(e.stats().pending, 0);
    // The token can be used again.
    e.on_accept(t0, 3, peer(1, 1002));
    feed(
        &mut e,
        t0,
        3,
        &frames(&[hello(7, None), ClientMsg::Setup { params: params() }]),
    );
    assert!(matches!(
        replies(&events(&mut e))[..],
        [ServerMsg::Accepted { .. }]
    ));
}

#[test]
fn a_token_in_use_cannot_be_taken() {
    let t0 = Instant::now();
    let mut e = admitted(t0);
    events(&mut e);
    e.on_accept(t0, 2, peer(2, 1000));
    feed(&mut e, t0, 2, &frames(&[hello(7, None)]));
    assert!(
        matches!(&replies(&events(&mut e))[..], [ServerMsg::Rejected { reason, .. }] if reason.contains("token"))
    );
}

#[test]
fn refusals_are_counted_every_time_and_logged_once_then_summarized() {
    let t0 = Instant::now();
    let mut e = endpoint(config());
    for c in 0..100u64 {
        e.on_accept(t0, c + 1, peer(1, 1000 + c as u16));
        feed(&mut e, t0, c + 1, b"\xff\xff\xff\xffgarbage");
    }
    let evs = events(&mut e);
    assert_eq!(refused_kinds(&evs), vec!["garbage"]);
    assert_eq!(e.stats().refused_by.get("garbage"), Some(&100));
    e.on_timeout(t0 + LOG_PERIOD, &|_| None);
    let evs = events(&mut e);
    assert!(
        evs.contains(&EndpointEvent::Log(ServerEvent::Suppressed {
            kind: "garbage",
            count: 99,
            seconds: 10
        })),
        "{evs:?}"
    );
}

#[test]
fn a_result_too_large_to_send_goes_without_its_series() {
    use crate::result::StreamSide;
    use tcptune_core::SampleRecord;
    let t0 = Instant::now();
    let mut e = admitted(t0);
    e.on_accept(t0, 2, peer(1, 1001));
    e.on_accept(t0, 3, peer(1, 1002));
    feed(&mut e, t0, 2, &data_hello(7, 0, 0));
    feed(&mut e, t0, 3, &data_hello(7, 0, 1));
    feed(
        &mut e,
        t0,
        1,
        &frames(&[ClientMsg::EndPhase { streams: 2 }]),
    );
    e.on_engine(t0, 1, Event::StreamDone(0));
    e.on_engine(t0, 1, Event::StreamDone(1));
    assert!(events(&mut e).contains(&EndpointEvent::FinishEngine { session: 1, seq: 0 }));
    let sample = SampleRecord::of(&tcptune_core::TcpSnapshot::empty());
    let side = StreamSide {
        stream: 1,
        sender: false,
        bytes: 1,
        messages: 1,
        partial_bytes: 0,
        first_s: None,
        last_s: None,
        opened_at_s: 0.0,
        tail_bits_per_second: None,
        local: String::new(),
        remote: String::new(),
        detail: crate::result::SideDetail {
            samples: vec![sample; 200_000],
            ..Default::default()
        },
        error: None,
    };
    let r = SideResult {
        streams: vec![side],
        ..SideResult::default()
    };
    e.on_phase_result(t0, 1, 0, r);
    let sent = replies(&events(&mut e));
    let [ServerMsg::PhaseResult { result, .. }] = &sent[..] else {
        panic!("{}", sent.len())
    };
    assert!(result.streams[0].detail.samples.is_empty());
    assert_eq!(result.streams[0].detail.samples_dropped, 200_000);
}

mod fair;
mod slots;

#[test]
fn waiting_data_connections_are_bounded_per_address_and_in_all() {
    let t0 = Instant::now();
    let mut e = endpoint(EndpointConfig {
        max_parked: 3,
        max_parked_per_addr: 2,
        ..config()
    });
    // Three strangers' streams from one address (tokens nobody agreed): two wait.
    for (conn, token) in [(2, 3), (3, 4), (4, 5)] {
        e.on_accept(t0, conn, peer(1, 1000 + conn as u16));
        feed(&mut e, t0, conn, &data_hello(token, 0, 0));
    }
    let evs = events(&mut e);
    let parked = evs
        .iter()
        .filter(|ev| matches!(ev, EndpointEvent::Parked { .. }))
        .count();
    assert_eq!(parked, 2, "{evs:?}");
    assert!(evs.contains(&EndpointEvent::Close { conn: 4 }));
    assert_eq!(refused_kinds(&evs), vec!["data_refused"]);
    // Another address: one more waits, then the bound in all holds.
    for (conn, token) in [(5, 6), (6, 7)] {
        e.on_accept(t0, conn, peer(2, 1000 + conn as u16));
        feed(&mut e, t0, conn, &data_hello(token, 0, 0));
    }
    let evs = events(&mut e);
    assert!(evs.contains(&EndpointEvent::Parked { conn: 5 }), "{evs:?}");
    assert!(evs.contains(&EndpointEvent::Close { conn: 6 }), "{evs:?}");
}

#[test]
fn the_streams_of_a_session_being_set_up_are_not_held_to_the_strangers_budget() {
    let t0 = Instant::now();
    let mut e = endpoint(EndpointConfig {
        max_parked: 1,
        max_parked_per_addr: 1,
        ..config()
    });
    // A session admitted, its phase not started yet: its three streams wait for it.
    e.on_accept(t0, 1, peer(1, 1000));
    feed(
        &mut e,
        t0,
        1,
        &frames(&[hello(7, None), ClientMsg::Setup { params: params() }]),
    );
    events(&mut e);
    for (conn, stream) in [(2, 0), (3, 1), (4, 2)] {
        e.on_accept(t0, conn, peer(1, 1000 + conn as u16));
        feed(&mut e, t0, conn, &data_hello(7, 0, stream));
    }
    let evs = events(&mut e);
    let parked = evs
        .iter()
        .filter(|ev| matches!(ev, EndpointEvent::Parked { .. }))
        .count();
    assert_eq!(parked, 3, "{evs:?}");
    assert!(refused_kinds(&evs).is_empty(), "{evs:?}");
}
