//! The shared secret through a whole pair: a fresh proof costs no round trip, a challenge
//! is answered, a wrong or missing secret is refused in one line, a replayed proof never
//! opens a session, and mutated authentication frames of either side are refused.

use super::{Pair, PairConfig, Trace, CTRL, UNIX_S};
use crate::auth::Secret;
use crate::events::ServerEvent;
use crate::session::client::Failure;
use crate::session::endpoint::EndpointEvent;
use crate::wire::{self, ServerMsg};
use std::time::{Duration, Instant};

const SECRET: &[u8] = b"the pair's secret";

fn run(cfg: PairConfig) -> (bool, Trace) {
    let mut p = Pair::new(Instant::now(), cfg);
    let ok = p.run(Duration::from_secs(600));
    (ok, p.trace)
}

fn started(t: &Trace) -> bool {
    t.log
        .iter()
        .any(|e| matches!(e, ServerEvent::SessionStarted { .. }))
}

fn refusal(t: &Trace) -> Option<(&'static str, String)> {
    t.log.iter().find_map(|e| match e {
        ServerEvent::Refused { kind, reason, .. } => Some((*kind, reason.clone())),
        _ => None,
    })
}

fn kind(v: &serde_json::Value) -> &str {
    v.get("type").and_then(|t| t.as_str()).unwrap_or("")
}

#[test]
fn a_client_with_the_right_secret_takes_exactly_the_round_trips_of_one_without() {
    for rtt_ms in [1, 40, 200] {
        let rtt = Duration::from_millis(rtt_ms);
        let plain = PairConfig {
            rtt,
            ..PairConfig::default()
        };
        let write = plain.write_time;
        let (ok, t) = run(PairConfig {
            rtt,
            ..PairConfig::with_secret(SECRET)
        });
        assert!(ok && t.failure.is_none(), "{t:?}");
        assert!(t.outcome.is_some() && started(&t));
        // The proof rides in the first flight: data after the two handshakes, the answer
        // one RTT after the last write, as without a secret.
        assert_eq!(t.first_data, Some(2 * rtt));
        assert_eq!(t.returned, Some(2 * rtt + write + rtt), "RTT {rtt_ms} ms");
        let (_, p) = run(plain);
        assert_eq!((t.first_data, t.returned), (p.first_data, p.returned));
        assert!(!t.server_msgs.iter().any(|m| kind(m) == "challenge"));
    }
}

#[test]
fn a_client_whose_clock_is_off_answers_the_challenge_and_succeeds() {
    let rtt = Duration::from_millis(40);
    // An hour off: the proof cannot be checked for freshness, so the server challenges.
    let cfg = PairConfig {
        client_unix_s: UNIX_S + 3600,
        ..PairConfig::with_secret(SECRET)
    };
    let write = cfg.write_time;
    let (ok, t) = run(cfg);
    assert!(ok && t.failure.is_none(), "{t:?}");
    assert_eq!(kind(&t.server_msgs[0]), "challenge", "{:?}", t.server_msgs);
    assert_eq!(
        t.client_msgs.iter().filter(|m| kind(m) == "auth").count(),
        1,
        "one answer: {:?}",
        t.client_msgs
    );
    // The challenge costs the control connection one round trip, which the data
    // connections' handshakes overlap: the streams still start 2 RTT after the command,
    // their hellos wait (parked) for the session the answer admits, and the command
    // returns when it would have without the challenge.
    assert_eq!(t.first_data, Some(2 * rtt));
    assert_eq!(t.returned, Some(2 * rtt + write + rtt));
    // Even with a write shorter than an RTT: the answer reaches the server 2.5 RTT after
    // the command started, exactly when the data connections' hellos do (one RTT of TCP
    // handshake and half an RTT for the hello after the first flight), so nothing waits.
    let short = Duration::from_millis(10);
    let (ok, s) = run(PairConfig {
        client_unix_s: UNIX_S + 3600,
        write_time: short,
        ..PairConfig::with_secret(SECRET)
    });
    assert!(ok && s.failure.is_none(), "{s:?}");
    assert_eq!(kind(&s.server_msgs[0]), "challenge");
    assert_eq!(s.returned, Some(2 * rtt + short + rtt));
}

#[test]
fn a_client_with_the_wrong_secret_is_refused_in_one_line() {
    let (ok, t) = run(PairConfig {
        client_secret: Some(b"not the server's secret"),
        ..PairConfig::with_secret(SECRET)
    });
    assert!(ok, "{t:?}");
    assert!(!started(&t), "{:?}", t.log);
    assert_eq!(t.error_lines(), 1, "{:?}", t.log);
    let (k, why) = refusal(&t).unwrap_or(("none", String::new()));
    assert_eq!(k, "auth");
    assert!(why.contains("does not match"), "{why}");
    assert_eq!(t.failures, 1);
    assert!(
        matches!(&t.failure, Some(Failure::Rejected { reason, .. }) if reason.contains("does not match")),
        "{:?}",
        t.failure
    );
}

#[test]
fn a_client_without_a_secret_is_refused_by_a_server_that_wants_one() {
    let (ok, t) = run(PairConfig {
        client_secret: None,
        ..PairConfig::with_secret(SECRET)
    });
    assert!(ok, "{t:?}");
    assert!(!started(&t));
    assert_eq!(t.error_lines(), 1, "{:?}", t.log);
    assert!(
        matches!(&t.failure, Some(Failure::Rejected { reason, .. }) if reason.contains("requires a shared secret")),
        "{:?}",
        t.failure
    );
}

/// A server without a secret ignores a client's proof, and the client, which holds a secret
/// for it, refuses a server that did not check it (it could be anyone on the path; issue 21:
/// no downgrade). Until then the proof was ignored and the copy went ahead with keys that did
/// not depend on the secret.
#[test]
fn a_client_with_a_secret_refuses_a_server_without_one() {
    let (ok, t) = run(PairConfig {
        secret: None,
        ..PairConfig::with_secret(SECRET)
    });
    assert!(ok, "{t:?}");
    assert!(
        matches!(
            &t.failure,
            Some(Failure::Protocol(
                crate::session::client::Violation::SecretUnchecked
            ))
        ),
        "{:?}",
        t.failure
    );
    assert!(t.returned.is_none(), "no result: {t:?}");
}

/// The frames the endpoint sent on `conn` (decoded) and whether it closed it.
fn answers(p: &mut Pair, conn: u64) -> (Vec<ServerMsg>, bool, bool) {
    let (mut msgs, mut closed, mut engine) = (Vec::new(), false, false);
    while let Some(e) = p.server.poll_event() {
        match e {
            EndpointEvent::Send { conn: c, frame } if c == conn => {
                if let Some(Ok(m)) = frame.get(4..).map(wire::decode::<ServerMsg>) {
                    msgs.push(m);
                }
            }
            EndpointEvent::Close { conn: c } if c == conn => closed = true,
            EndpointEvent::StartEngine { .. } => engine = true,
            EndpointEvent::Log(ev) => p.trace.log.push(ev),
            _ => {}
        }
    }
    (msgs, closed, engine)
}

#[test]
fn a_replayed_proof_gets_a_challenge_and_never_a_session() {
    let mut p = Pair::new(Instant::now(), PairConfig::with_secret(SECRET));
    assert!(p.run(Duration::from_secs(600)), "{:?}", p.trace);
    assert!(p.trace.failure.is_none());
    // An eavesdropper replays the first flight it saw (hello with the proof, setup, start)
    // on a connection of its own, once the honest session is over.
    let flight: Vec<u8> = p
        .trace
        .client_msgs
        .iter()
        .take(3)
        .filter_map(|m| wire::encode(m).ok())
        .flatten()
        .collect();
    assert_eq!(kind(&p.trace.client_msgs[0]), "hello");
    let sessions = p
        .trace
        .log
        .iter()
        .filter(|e| matches!(e, ServerEvent::SessionStarted { .. }))
        .count();
    let conn = CTRL + 100;
    let now = p.now + Duration::from_secs(1);
    p.server.on_accept(now, conn, super::peer(1001));
    p.server.on_bytes(now, UNIX_S + 1, conn, &flight);
    let (msgs, closed, engine) = answers(&mut p, conn);
    assert!(!engine && !closed, "{msgs:?}");
    match msgs.as_slice() {
        [ServerMsg::Challenge { reason, .. }] => {
            assert!(reason.contains("seen before"), "{reason}")
        }
        other => panic!("expected one challenge, got {other:?}"),
    }
    // It cannot answer: whatever it sends is refused, in one line, and no session starts.
    let wrong = Secret::from_bytes(b"a guess").map(|s| s.answer(&[0; 32], &[9; 16]));
    let auth = crate::wire::ClientMsg::Auth {
        mac: wire::to_hex(&wrong.unwrap_or([1; 32])),
    };
    let lines = p.trace.error_lines();
    p.server.on_bytes(
        now,
        UNIX_S + 1,
        conn,
        &wire::encode(&auth).unwrap_or_default(),
    );
    let (_, closed, engine) = answers(&mut p, conn);
    assert!(closed && !engine);
    assert_eq!(p.trace.error_lines(), lines + 1, "{:?}", p.trace.log);
    let after = p
        .trace
        .log
        .iter()
        .filter(|e| matches!(e, ServerEvent::SessionStarted { .. }))
        .count();
    assert_eq!(after, sessions);
    assert_eq!(p.server.sessions(), 0);
}

/// Values a hostile peer puts in a field of an authentication frame.
fn hostile() -> Vec<serde_json::Value> {
    use serde_json::json;
    vec![
        json!(u64::MAX),
        json!(0),
        json!(""),
        json!("00".repeat(32)),
        json!("zz".repeat(32)),
        json!("x".repeat(70_000)),
        json!(null),
        json!({"type": "bye"}),
    ]
}

#[test]
fn mutated_authentication_frames_of_either_side_are_refused_in_one_line() {
    // The challenge path, so that every authentication frame is on the wire: the client's
    // proof in its hello, the server's challenge, the client's answer.
    let cfg = PairConfig {
        client_unix_s: UNIX_S + 3600,
        ..PairConfig::with_secret(SECRET)
    };
    let (_, honest) = run(cfg.clone());
    let mut runs = 0;
    // The client's hello (its proof) and its answer.
    for (n, m) in honest.client_msgs.iter().enumerate() {
        if !matches!(kind(m), "hello" | "auth") {
            continue;
        }
        for path in super::leaves(m) {
            if !(path[0] == "auth" || kind(m) == "auth") {
                continue;
            }
            for to in hostile() {
                let mut p = Pair::new(Instant::now(), cfg.clone());
                p.mutate = Some((n, path.clone(), to.clone()));
                let ok = p.run(Duration::from_secs(600));
                runs += 1;
                let what = format!("client message {n} field {path:?} = {to:.40}");
                let t = &p.trace;
                assert!(ok, "{what}: a side hangs: {t:?}");
                assert!(!started(t), "{what}: a session started: {:?}", t.log);
                assert_eq!(t.error_lines(), 1, "{what}: {:?}", t.log);
                assert_eq!(t.failures, 1, "{what}");
            }
        }
    }
    // The server's challenge.
    let c = honest
        .server_msgs
        .iter()
        .position(|m| kind(m) == "challenge")
        .unwrap_or(usize::MAX);
    let m = &honest.server_msgs[c.min(honest.server_msgs.len() - 1)];
    assert_eq!(kind(m), "challenge");
    for path in super::leaves(m) {
        for to in hostile() {
            let mut p = Pair::new(Instant::now(), cfg.clone());
            p.mutate_server = Some((c, path.clone(), to.clone()));
            let ok = p.run(Duration::from_secs(600));
            runs += 1;
            let what = format!("challenge field {path:?} = {to:.40}");
            let t = &p.trace;
            assert!(ok, "{what}: a side hangs: {t:?}");
            assert!(t.failures <= 1 && t.error_lines() <= 1, "{what}: {t:?}");
            if path[0] == "nonce" {
                // An answer to another nonce does not prove anything.
                assert!(!started(t) && t.failures == 1, "{what}: {:?}", t.log);
            } else if path[0] == "reason" && to.is_string() {
                // The reason is only shown.
                assert!(t.failure.is_none(), "{what}: {t:?}");
            }
        }
    }
    println!("{runs} runs with a mutated authentication frame");
    assert!(runs >= 30, "{runs}");
}
