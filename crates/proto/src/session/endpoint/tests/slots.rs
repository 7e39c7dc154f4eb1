//! Slots: address groups, the minimum rate and shedding, the wait queue, the backoff, and
//! authenticated clients, in simulated time.

use super::*;
use crate::session::server::Observation;
use std::net::Ipv6Addr;

const S: fn(u64) -> Duration = Duration::from_secs;

fn rules() -> SlotRules {
    SlotRules {
        min_rate: 10_000,
        grace: S(2),
        window: S(4),
        max_queue: 4,
        max_queue_per_addr: 2,
        queue_timeout: S(60),
    }
}

fn slot_config() -> EndpointConfig {
    EndpointConfig {
        slots: rules(),
        ..config()
    }
}

fn v6(host: u16, subnet: u16) -> SocketAddr {
    SocketAddr::new(
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, subnet, 0, 0, 0, host)),
        4000,
    )
}

/// Open a control connection from `from` with `token` and ask for a session: the server's
/// answers.
fn ask(
    e: &mut Endpoint,
    now: Instant,
    conn: ConnId,
    from: SocketAddr,
    token: u8,
) -> Vec<ServerMsg> {
    e.on_accept(now, conn, from);
    feed(
        e,
        now,
        conn,
        &frames(&[hello(token, None), ClientMsg::Setup { params: params() }]),
    );
    to(&events(e), conn)
}

/// The server's messages to `conn`.
fn to(evs: &[EndpointEvent], conn: ConnId) -> Vec<ServerMsg> {
    evs.iter()
        .filter_map(|ev| match ev {
            EndpointEvent::Send { conn: c, frame } if *c == conn => wire::decode(&frame[4..]).ok(),
            _ => None,
        })
        .collect()
}

fn accepted(r: &[ServerMsg]) -> bool {
    matches!(r, [ServerMsg::Accepted { .. }])
}

fn queued_at(r: &[ServerMsg]) -> Option<u32> {
    match r {
        [ServerMsg::Queued { place, .. }] => Some(*place),
        _ => None,
    }
}

/// Time passes in steps of `step` up to `until`; session `sid` has delivered
/// `rate(sid) x seconds since t0` bytes.
fn run(
    e: &mut Endpoint,
    t0: Instant,
    until: Duration,
    rate: &dyn Fn(SessionId) -> u64,
) -> Vec<EndpointEvent> {
    let mut out = Vec::new();
    let step = Duration::from_millis(250);
    let mut t = step;
    while t <= until {
        let secs = t.as_secs_f64();
        e.on_timeout(t0 + t, &|sid| {
            Some(Observation {
                progress: 0,
                delivered: (rate(sid) as f64 * secs) as u64,
                min_rtt: None,
                out_of_order: None,
            })
        });
        out.extend(events(e));
        t += step;
    }
    out
}

fn ended_with(evs: &[EndpointEvent], what: &str) -> Vec<SessionId> {
    // Sessions are numbered from 1 in order of admission; the log names them by label,
    // the SessionGone event by number.
    let shed = evs.iter().any(|e| {
        matches!(e, EndpointEvent::Log(ServerEvent::SessionEnded { error: Some(r), .. }) if r.contains(what))
    });
    if !shed {
        return Vec::new();
    }
    evs.iter()
        .filter_map(|e| match e {
            EndpointEvent::SessionGone { session } => Some(*session),
            _ => None,
        })
        .collect()
}

#[test]
fn sixty_four_addresses_of_one_ipv6_64_count_as_one_address() {
    let t0 = Instant::now();
    let mut cfg = slot_config();
    cfg.max_sessions = 100;
    let mut e = endpoint(cfg);
    let (mut admitted, mut waiting, mut refused) = (0, 0, 0);
    for i in 0..64u16 {
        let r = ask(&mut e, t0, ConnId::from(i) + 1, v6(i + 1, 7), i as u8 + 1);
        match &r[..] {
            r if accepted(r) => admitted += 1,
            r if queued_at(r).is_some() => waiting += 1,
            [ServerMsg::Rejected { reason, .. }] => {
                assert!(reason.contains("limit per address"), "{reason}");
                refused += 1
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((admitted, waiting, refused), (2, 2, 60));
    // Another /64 is another address; an IPv4-mapped address is its IPv4 address.
    assert!(accepted(&ask(&mut e, t0, 100, v6(1, 8), 100)));
    assert!(accepted(&ask(
        &mut e,
        t0,
        101,
        "[::ffff:10.0.0.9]:5".parse().expect("addr"),
        101
    )));
    assert!(accepted(&ask(&mut e, t0, 102, peer(9, 6), 102)));
    let r = ask(&mut e, t0, 103, peer(9, 7), 103);
    assert_eq!(queued_at(&r), Some(3), "{r:?}");
}

#[test]
fn the_slowest_session_below_the_minimum_rate_is_shed_for_a_new_client() {
    let t0 = Instant::now();
    let mut e = endpoint(slot_config());
    for i in 1..=4u8 {
        assert!(accepted(&ask(
            &mut e,
            t0,
            ConnId::from(i),
            peer(i, 1000),
            i
        )));
    }
    // Sessions 1 and 2 trickle (5 KB/s and 1 KB/s, under 10 KB/s), 3 and 4 move 1 MB/s.
    let rate = |sid: SessionId| match sid {
        1 => 5_000,
        2 => 1_000,
        _ => 1_000_000,
    };
    let evs = run(&mut e, t0, S(7), &rate);
    assert!(ended_with(&evs, "shed").is_empty(), "nobody needed a slot");
    assert_eq!(e.sessions(), 4);
    let r = ask(&mut e, t0 + S(7), 5, peer(5, 1000), 5);
    assert!(accepted(&r), "{r:?}");
    assert_eq!(e.sessions(), 4);
    // Session 2 went (told why), and only it.
    let evs = run(&mut e, t0 + S(7), S(1), &rate);
    let _ = evs;
    assert_eq!(e.stats().refused_by.get("shed"), Some(&1));
    let r = ask(&mut e, t0 + S(8), 6, peer(6, 1000), 6);
    assert!(accepted(&r), "session 1 is shed next: {r:?}");
    assert_eq!(e.stats().refused_by.get("shed"), Some(&2));
    // Now only sessions at the rate (and the new ones, within their grace) run: wait.
    let r = ask(&mut e, t0 + S(8), 7, peer(7, 1000), 7);
    assert_eq!(queued_at(&r), Some(1), "{r:?}");
}

#[test]
fn a_shed_session_is_told_why_in_one_line_and_logged() {
    let t0 = Instant::now();
    let mut cfg = slot_config();
    cfg.max_sessions = 1;
    let mut e = endpoint(cfg);
    assert!(accepted(&ask(&mut e, t0, 1, peer(1, 1000), 1)));
    run(&mut e, t0, S(6), &|_| 0);
    e.on_accept(t0 + S(6), 2, peer(2, 1000));
    feed(
        &mut e,
        t0 + S(6),
        2,
        &frames(&[hello(2, None), ClientMsg::Setup { params: params() }]),
    );
    let evs = events(&mut e);
    let to_victim: Vec<ServerMsg> = evs
        .iter()
        .filter_map(|ev| match ev {
            EndpointEvent::Send { conn: 1, frame } => wire::decode(&frame[4..]).ok(),
            _ => None,
        })
        .collect();
    let [ServerMsg::Abort { reason, .. }] = &to_victim[..] else {
        panic!("{to_victim:?}")
    };
    assert!(
        reason.starts_with("shed:") && !reason.contains('\n'),
        "{reason}"
    );
    assert!(reason.contains("minimum of 10000 B/s"), "{reason}");
    assert_eq!(ended_with(&evs, "shed:"), vec![1]);
    assert!(evs.iter().any(|ev| matches!(
        ev,
        EndpointEvent::Send { conn: 2, frame } if matches!(wire::decode(&frame[4..]), Ok(ServerMsg::Accepted { .. }))
    )));
}

#[test]
fn a_session_within_its_grace_or_above_the_rate_is_never_shed() {
    let t0 = Instant::now();
    let mut cfg = slot_config();
    cfg.max_sessions = 2;
    let mut e = endpoint(cfg);
    assert!(accepted(&ask(&mut e, t0, 1, peer(1, 1000), 1)));
    assert!(accepted(&ask(&mut e, t0, 2, peer(2, 1000), 2)));
    // Grace (2 s) plus a window (4 s) not over: stalled sessions keep their slots.
    run(&mut e, t0, S(5), &|_| 0);
    assert_eq!(
        queued_at(&ask(&mut e, t0 + S(5), 3, peer(3, 1000), 3)),
        Some(1)
    );
    assert_eq!(e.sessions(), 2);
    // Above the rate: never shed, however long it runs.
    let mut cfg = slot_config();
    cfg.max_sessions = 1;
    let mut e = endpoint(cfg);
    assert!(accepted(&ask(&mut e, t0, 1, peer(1, 1000), 1)));
    run(&mut e, t0, S(20), &|_| 10_001);
    let r = ask(&mut e, t0 + S(20), 2, peer(2, 1000), 2);
    assert_eq!(queued_at(&r), Some(1), "{r:?}");
    assert_eq!(e.stats().refused_by.get("shed"), None);
}

#[test]
fn waiting_clients_are_admitted_in_order_and_told_their_place() {
    let t0 = Instant::now();
    let mut cfg = slot_config();
    cfg.max_sessions = 1;
    cfg.slots.max_queue = 2;
    let mut e = endpoint(cfg);
    assert!(accepted(&ask(&mut e, t0, 1, peer(1, 1000), 1)));
    assert_eq!(queued_at(&ask(&mut e, t0, 2, peer(2, 1000), 2)), Some(1));
    assert_eq!(queued_at(&ask(&mut e, t0, 3, peer(3, 1000), 3)), Some(2));
    // The queue is full: refused, with when a slot is expected to free.
    let r = ask(&mut e, t0, 4, peer(4, 1000), 4);
    assert!(
        matches!(&r[..], [ServerMsg::Rejected { reason, retry_after_s: Some(_) }] if reason.contains("2 clients wait already")),
        "{r:?}"
    );
    // Client 2's data connection, pipelined before its answer, waits with it.
    e.on_accept(t0, 20, peer(2, 2000));
    feed(&mut e, t0, 20, &data_hello(2, 0, 0));
    // A flood of new connections from its address does not evict what waits.
    for c in 30..40 {
        e.on_accept(t0, c, peer(2, 3000 + c as u16));
    }
    let evs = events(&mut e);
    assert!(!evs.contains(&EndpointEvent::Close { conn: 2 }));
    assert!(!evs.contains(&EndpointEvent::Close { conn: 20 }));
    // The session ends: the first in line is admitted, its pipelined start runs and its
    // stream joins; the second is told its new place (a second after it was told the last).
    feed(&mut e, t0 + S(1), 1, &frames(&[ClientMsg::Bye]));
    let first = events(&mut e);
    assert!(accepted(&to(&first, 2)), "{first:?}");
    assert_eq!(e.sessions(), 1);
    feed(&mut e, t0 + S(1), 2, &frames(&[start(0)]));
    let mut evs = events(&mut e);
    assert!(
        evs.iter().any(|ev| matches!(
            ev,
            EndpointEvent::Attach {
                conn: 20,
                index: 0,
                ..
            }
        )),
        "{evs:?}"
    );
    evs.extend(first);
    assert_eq!(queued_at(&to(&evs, 3)), Some(1));
}

#[test]
fn a_client_that_waits_too_long_is_told_so() {
    let t0 = Instant::now();
    let mut cfg = slot_config();
    cfg.max_sessions = 1;
    cfg.idle_timeout = S(600);
    let mut e = endpoint(cfg);
    assert!(accepted(&ask(&mut e, t0, 1, peer(1, 1000), 1)));
    assert_eq!(queued_at(&ask(&mut e, t0, 2, peer(2, 1000), 2)), Some(1));
    e.on_timeout(t0 + S(60), &|_| None);
    let evs = events(&mut e);
    assert!(evs.iter().any(|ev| matches!(
        ev,
        EndpointEvent::Send { conn: 2, frame } if matches!(wire::decode(&frame[4..]), Ok(ServerMsg::Rejected { reason, .. }) if reason.contains("queue"))
    )));
    assert!(evs.contains(&EndpointEvent::Close { conn: 2 }));
    assert_eq!(e.stats().pending, 0);
}

#[test]
fn a_replayed_proof_does_not_reset_the_backoff_of_the_64() {
    let t0 = Instant::now();
    let secret = Secret::from_bytes(b"hunter2 hunter2 hunter2").expect("secret");
    let mut cfg = slot_config();
    cfg.secret = Some(secret.clone());
    let mut e = endpoint(cfg);
    let unix = 1_000_000;
    let good = |token: u8| hello(token, Some(proof(&secret, token, 1, unix)));
    // A client proves the secret (its proof is seen on the path).
    e.on_accept(t0, 1, v6(1, 1));
    feed(
        &mut e,
        t0,
        1,
        &frames(&[good(1), ClientMsg::Setup { params: params() }]),
    );
    assert!(accepted(&replies(&events(&mut e))));
    // A guess from another address of the same /64 fails: that /64 waits 1 s.
    e.on_accept(t0, 2, v6(2, 1));
    let wrong = Secret::from_bytes(b"guess guess guess guess").expect("secret");
    feed(
        &mut e,
        t0,
        2,
        &frames(&[hello(2, Some(proof(&wrong, 2, 2, unix)))]),
    );
    events(&mut e);
    e.on_accept(t0, 3, v6(3, 1));
    feed(
        &mut e,
        t0,
        3,
        &frames(&[hello(3, Some(proof(&wrong, 3, 3, unix)))]),
    );
    let r = replies(&events(&mut e));
    assert!(
        matches!(&r[..], [ServerMsg::Rejected { reason, .. }] if reason.contains("too many failed")),
        "{r:?}"
    );
    // The sniffed proof, replayed after the wait (its session over): challenged, and the
    // backoff stays.
    e.on_closed(t0, 1);
    events(&mut e);
    e.on_accept(t0 + S(1), 4, v6(4, 1));
    feed(&mut e, t0 + S(1), 4, &frames(&[good(1)]));
    let r = replies(&events(&mut e));
    assert!(matches!(&r[..], [ServerMsg::Challenge { .. }]), "{r:?}");
    e.on_accept(t0 + S(1), 5, v6(5, 1));
    feed(
        &mut e,
        t0 + S(1),
        5,
        &frames(&[hello(5, Some(proof(&wrong, 5, 5, unix)))]),
    );
    let r = replies(&events(&mut e));
    assert!(
        matches!(&r[..], [ServerMsg::Rejected { reason, .. }] if reason.contains("again in 2 s")),
        "the second failure in a row waits 2 s: {r:?}"
    );
}

#[test]
fn authenticated_clients_are_not_limited_per_address() {
    let t0 = Instant::now();
    let secret = Secret::from_bytes(b"hunter2 hunter2 hunter2").expect("secret");
    let mut cfg = slot_config();
    cfg.secret = Some(secret.clone());
    cfg.max_sessions = 4;
    let mut e = endpoint(cfg);
    for i in 1..=5u8 {
        e.on_accept(t0, ConnId::from(i), peer(1, 1000 + u16::from(i)));
        feed(
            &mut e,
            t0,
            ConnId::from(i),
            &frames(&[
                hello(i, Some(proof(&secret, i, i, 1_000_000))),
                ClientMsg::Setup { params: params() },
            ]),
        );
        let r = replies(&events(&mut e));
        if i <= 4 {
            assert!(accepted(&r), "{i}: {r:?}");
        } else {
            assert_eq!(queued_at(&r), Some(1), "the total still holds: {r:?}");
        }
    }
    assert_eq!(e.sessions(), 4);
}

#[test]
fn a_retry_hint_is_the_expected_end_of_a_running_session_from_its_progress() {
    let t0 = Instant::now();
    let mut cfg = slot_config();
    cfg.max_sessions = 1;
    cfg.slots.max_queue = 0;
    let mut e = endpoint(cfg);
    // 8 MiB to move (8 x 1 MiB), at 1 MiB/s: after 2 s, 6 s are left.
    assert!(accepted(&ask(&mut e, t0, 1, peer(1, 1000), 1)));
    run(&mut e, t0, S(2), &|_| 1 << 20);
    let r = ask(&mut e, t0 + S(2), 2, peer(2, 1000), 2);
    let [ServerMsg::Rejected {
        reason,
        retry_after_s: Some(s),
    }] = &r[..]
    else {
        panic!("{r:?}")
    };
    assert!((5..=7).contains(s), "{s} s: {reason}");
    assert!(reason.contains("expected to free"), "{reason}");
}

/// The `(session, place)` of each `Queued` line in the log.
fn queued_lines(evs: &[EndpointEvent]) -> Vec<(String, u32)> {
    evs.iter()
        .filter_map(|ev| match ev {
            EndpointEvent::Log(ServerEvent::Queued { session, place, .. }) => {
                Some((session.clone(), *place))
            }
            _ => None,
        })
        .collect()
}

/// The `(session, outcome)` of each `QueueLeft` line in the log.
fn left_lines(evs: &[EndpointEvent]) -> Vec<(String, QueueOutcome)> {
    evs.iter()
        .filter_map(|ev| match ev {
            EndpointEvent::Log(ServerEvent::QueueLeft {
                session, outcome, ..
            }) => Some((session.clone(), *outcome)),
            _ => None,
        })
        .collect()
}

#[test]
fn the_log_tells_who_waits_in_the_queue_and_how_each_left_it() {
    let t0 = Instant::now();
    let mut cfg = slot_config();
    cfg.max_sessions = 1;
    cfg.idle_timeout = S(600);
    let mut e = endpoint(cfg);
    assert!(accepted(&ask(&mut e, t0, 1, peer(1, 1000), 1)));
    // Asked in turn; answered with their places, and logged with them.
    let mut evs = Vec::new();
    for (conn, token) in [(2, 2), (3, 3)] {
        e.on_accept(t0, conn, peer(token, 1000));
        let hello = frames(&[hello(token, None), ClientMsg::Setup { params: params() }]);
        feed(&mut e, t0, conn, &hello);
        evs.extend(events(&mut e));
    }
    assert_eq!(
        queued_lines(&evs),
        [("02020202".into(), 1), ("03030303".into(), 2)]
    );
    assert!(left_lines(&evs).is_empty());
    // Client 3 gives up; session 1 ends and client 2 is admitted.
    e.on_closed(t0 + S(1), 3);
    feed(&mut e, t0 + S(2), 1, &frames(&[ClientMsg::Bye]));
    let evs = events(&mut e);
    assert_eq!(
        left_lines(&evs),
        [
            ("03030303".into(), QueueOutcome::Gone),
            ("02020202".into(), QueueOutcome::Admitted)
        ]
    );
    assert!(evs.iter().any(|ev| matches!(
        ev,
        EndpointEvent::Log(ServerEvent::QueueLeft { waited, outcome: QueueOutcome::Admitted, .. }) if *waited == S(2)
    )));
    // A client that waits past the queue's timeout: refused, and logged as timed out.
    assert_eq!(
        queued_at(&ask(&mut e, t0 + S(3), 5, peer(5, 1000), 5)),
        Some(1)
    );
    e.on_timeout(t0 + S(63), &|_| None);
    let evs = events(&mut e);
    assert_eq!(
        left_lines(&evs),
        [("05050505".into(), QueueOutcome::TimedOut)]
    );
    assert!(refused_kinds(&evs).contains(&"queue_timeout"));
    let stats = e.stats();
    assert_eq!(stats.refused_by.get("queued"), Some(&3));
    assert_eq!((stats.queue_admitted, stats.queue_gave_up), (1, 1));
}
