//! Fair shares at the endpoint: which sessions are told their share, and when the server's
//! own senders are paced, in simulated time.

use super::*;
use crate::session::server::Observation;
use std::cell::RefCell;
use std::collections::BTreeMap;

/// A session from 10.0.0.`last` with token `token` on connection `conn`, its main phase
/// started; it takes shares, and the server sends when `reverse`.
fn admit(e: &mut Endpoint, now: Instant, conn: ConnId, last: u8, token: u8, reverse: bool) {
    e.on_accept(now, conn, peer(last, 1000));
    let params = TestParams {
        share: true,
        reverse,
        ..params()
    };
    feed(
        e,
        now,
        conn,
        &frames(&[hello(token, None), ClientMsg::Setup { params }, start(0)]),
    );
}

/// The shares sent, by connection.
fn shares(evs: &[EndpointEvent]) -> BTreeMap<ConnId, (Option<u64>, u32)> {
    evs.iter()
        .filter_map(|e| match e {
            EndpointEvent::Send { conn, frame } => match wire::decode(&frame[4..]) {
                Ok(ServerMsg::Share {
                    rate_bps, sessions, ..
                }) => Some((*conn, (rate_bps, sessions))),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

#[test]
fn a_latecomer_and_the_incumbent_are_told_half_and_the_server_paces_its_own_senders() {
    let t0 = Instant::now();
    let mut e = endpoint(config());
    admit(&mut e, t0, 1, 1, 7, false);
    let evs = events(&mut e);
    assert_eq!(shares(&evs)[&1], (None, 1), "alone: no cap");
    // Session 1 delivers 50 MB every half second (800 Mbit/s) for 4 s.
    let delivered = RefCell::new(BTreeMap::<SessionId, u64>::new());
    let observe = |sid: SessionId| {
        delivered.borrow().get(&sid).map(|&d| Observation {
            progress: d,
            delivered: d,
            min_rtt: None,
            out_of_order: None,
        })
    };
    let mut now = t0;
    for _ in 0..8 {
        now += Duration::from_millis(500);
        *delivered.borrow_mut().entry(1).or_insert(0) += 50_000_000;
        e.on_timeout(now, &observe);
    }
    assert!(
        shares(&events(&mut e)).is_empty(),
        "alone, told nothing new"
    );
    // A second session, whose server end sends: both are told their half at once, and the
    // server paces the second's engine.
    admit(&mut e, now, 2, 2, 8, true);
    let evs = events(&mut e);
    let told = shares(&evs);
    for conn in [1, 2] {
        let (rate, sessions) = told[&conn];
        assert_eq!(sessions, 2);
        let mbit = rate.expect("a cap") as f64 / 1e6;
        assert!((mbit - 420.0).abs() < 1.0, "conn {conn}: {mbit} Mbit/s");
    }
    let paced: Vec<_> = evs
        .iter()
        .filter_map(|ev| match ev {
            EndpointEvent::Pace { session, rate } => Some((*session, *rate)),
            _ => None,
        })
        .collect();
    assert_eq!(paced.len(), 1, "{paced:?}");
    assert_eq!(paced[0].0, 2, "only the session whose server end sends");
    assert!(evs.iter().any(|ev| matches!(
        ev,
        EndpointEvent::Log(ServerEvent::Share { sessions: 2, .. })
    )));
    // The latecomer leaves: the incumbent's cap is lifted.
    e.on_closed(now, 2);
    let told = shares(&events(&mut e));
    assert_eq!(told.get(&1), Some(&(None, 1)), "{told:?}");
}

#[test]
fn a_client_that_does_not_take_shares_is_never_sent_one() {
    let t0 = Instant::now();
    let mut e = admitted(t0);
    e.on_accept(t0, 2, peer(2, 1000));
    feed(
        &mut e,
        t0,
        2,
        &frames(&[
            hello(8, None),
            ClientMsg::Setup { params: params() },
            start(0),
        ]),
    );
    let evs = events(&mut e);
    assert!(shares(&evs).is_empty(), "{evs:?}");
    assert!(!evs
        .iter()
        .any(|ev| matches!(ev, EndpointEvent::Pace { .. })));
}

/// The session of the engine `evs` started on connection `conn`.
fn started(evs: &[EndpointEvent], conn: ConnId) -> SessionId {
    evs.iter()
        .find_map(|e| match e {
            EndpointEvent::StartEngine { session, ctrl, .. } if *ctrl == conn => Some(*session),
            _ => None,
        })
        .expect("an engine started")
}

#[test]
fn a_changed_route_repeats_the_last_share_and_only_to_a_session_that_takes_shares() {
    let t0 = Instant::now();
    let mut e = endpoint(config());
    admit(&mut e, t0, 1, 1, 7, true);
    let evs = events(&mut e);
    let sid = started(&evs, 1);
    assert_eq!(shares(&evs)[&1], (None, 1));
    e.on_route_changed(t0, sid);
    let evs = events(&mut e);
    assert_eq!(
        shares(&evs).get(&1),
        Some(&(None, 1)),
        "told again: {evs:?}"
    );
    assert_eq!(
        evs.len(),
        1,
        "one message, nothing logged or paced: {evs:?}"
    );
    // A client that takes no shares is sent nothing, nor is a session that is gone.
    e.on_accept(t0, 2, peer(2, 1000));
    let params = TestParams {
        reverse: true,
        ..params()
    };
    feed(
        &mut e,
        t0,
        2,
        &frames(&[hello(8, None), ClientMsg::Setup { params }, start(0)]),
    );
    let other = started(&events(&mut e), 2);
    e.on_route_changed(t0, other);
    assert!(events(&mut e).is_empty());
    e.on_closed(t0, 1);
    let _ = events(&mut e);
    e.on_route_changed(t0, sid);
    assert!(shares(&events(&mut e)).is_empty());
}
