//! A hostile server: every field of every message the server sends, replaced by hostile
//! values, against the client's session. The client finishes (completes, or fails with one
//! error), never panics and never hangs.

use super::{leaves, Pair, PairConfig};
use std::time::{Duration, Instant};

/// Values a hostile server puts in a field.
fn hostile() -> Vec<serde_json::Value> {
    super::hostile_values(serde_json::json!({"type": "abort", "reason": "x"}))
}

fn configs() -> Vec<PairConfig> {
    vec![
        PairConfig::default(),
        // The challenge path: the server's challenge is on the wire too.
        PairConfig {
            client_unix_s: super::UNIX_S + 3600,
            ..PairConfig::with_secret(b"hostile server")
        },
    ]
}

#[test]
fn a_hostile_server_mutating_every_field_of_every_message_gets_one_error_and_no_hang() {
    let mut runs = 0;
    for cfg in configs() {
        let mut honest = Pair::new(Instant::now(), cfg.clone());
        assert!(honest.run(Duration::from_secs(600)));
        assert!(honest.trace.failure.is_none(), "{:?}", honest.trace);
        let msgs = honest.trace.server_msgs.clone();
        assert!(msgs.len() >= 2, "{msgs:?}");
        for (n, m) in msgs.iter().enumerate() {
            for path in leaves(m) {
                for to in hostile() {
                    let mut p = Pair::new(Instant::now(), cfg.clone());
                    p.mutate_server = Some((n, path.clone(), to.clone()));
                    let ok = p.run(Duration::from_secs(600));
                    runs += 1;
                    let what = format!("server message {n} field {path:?} = {to:.40}");
                    let t = &p.trace;
                    assert!(ok, "{what}: a side hangs: {t:?}");
                    assert!(t.failures <= 1, "{what}: {} failures", t.failures);
                    assert!(
                        t.failure.is_some() != t.returned.is_some(),
                        "{what}: the client neither completed nor failed once: {t:?}"
                    );
                }
            }
        }
    }
    println!("{runs} hostile server runs");
    assert!(runs > 300, "every field was tried: {runs}");
}

#[test]
fn a_server_that_sends_garbage_or_a_frame_past_the_limit_is_one_error() {
    for frame in [
        b"\x00\x00\x00\x03abc".to_vec(),
        // A length past the client's frame limit.
        vec![0xff, 0xff, 0xff, 0xff, b'{'],
        b"\x00\x00\x00\x02{}".to_vec(),
    ] {
        let mut p = Pair::new(Instant::now(), PairConfig::default());
        // Deliver the garbage as the server's first message, in place of its answer.
        let at = p.now + p.half();
        p.at(at, super::Ev::ToClient(frame.clone()));
        let ok = p.run(Duration::from_secs(600));
        let t = &p.trace;
        assert!(ok, "{frame:?}: a side hangs: {t:?}");
        assert_eq!(t.failures, 1, "{frame:?}: {t:?}");
        assert!(t.returned.is_none());
    }
}
