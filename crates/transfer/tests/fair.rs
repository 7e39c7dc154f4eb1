//! Fair shares between two `auto` transfers at one in-process server on loopback (issue 22,
//! item 3): the decisions, never a rate or a time. Both sessions are told they share the
//! server, and a cap told to the sending end is applied to its streams' pacing.

mod common;

use common::TestServer;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tcptune_core::{Action, TuneMode};
use tcptune_transfer::client::{run, Cancel};
use tcptune_transfer::report::Report;
use tcptune_transfer::server::{ServerConfig, ServerEvent};

/// `(session, cap, sessions)` of every share the server logged.
type Shares = Arc<Mutex<Vec<(String, Option<u64>, u32)>>>;

fn logged(shares: &Shares) -> Vec<(String, Option<u64>, u32)> {
    shares.lock().map(|v| v.clone()).unwrap_or_default()
}

/// Whether the sending streams of `r` (this end sends when `local_sends`) had their
/// pacing held at the fair share.
fn paced_at_the_share(r: &Report) -> bool {
    r.end.tcptune.streams.iter().any(|s| {
        s.sender.changes.iter().any(|c| {
            matches!(c.action, Action::SetMaxPacingRate(Some(_)))
                && c.note.as_deref().is_some_and(|n| n.contains("fair share"))
        })
    })
}

#[test]
fn two_auto_transfers_at_one_server_are_both_told_they_share_it() {
    let shares: Shares = Arc::new(Mutex::new(Vec::new()));
    let sink = shares.clone();
    let cfg = ServerConfig {
        log: Some(Arc::new(move |ev: &ServerEvent| {
            if let ServerEvent::Share {
                session,
                rate_bps,
                sessions,
                ..
            } = ev
            {
                if let Ok(mut v) = sink.lock() {
                    v.push((session.clone(), *rate_bps, *sessions));
                }
            }
        })),
        ..ServerConfig::default()
    };
    let server = TestServer::start(cfg);
    // The incumbent pushes until it is interrupted.
    let mut first = server.client();
    first.tune = TuneMode::Auto;
    first.streams = 2;
    first.duration = Some(Duration::from_secs(120));
    first.path_db = None;
    let cancel = Cancel::new();
    first.cancel = Some(cancel.clone());
    let incumbent = std::thread::spawn(move || run(&first, None));
    // Its main phase runs once the server told it it is alone (only a hang reaches the
    // bound).
    let deadline = Instant::now() + Duration::from_secs(60);
    while !logged(&shares).iter().any(|s| s.2 == 1) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    // Some time alone, for the server to see the pipe full (a likelihood, not a
    // requirement: see below).
    std::thread::sleep(Duration::from_millis(2500));
    // The latecomer pulls (the server sends, and paces its own senders).
    let mut second = server.client();
    second.tune = TuneMode::Auto;
    second.duration = Some(Duration::from_millis(1500));
    second.reverse = true;
    second.path_db = None;
    let late = run(&second, None).expect("the latecomer's transfer");
    cancel.trigger();
    let first = incumbent
        .join()
        .expect("incumbent thread")
        .expect("an interrupted transfer still reports");

    let log = logged(&shares);
    let both: std::collections::BTreeSet<&str> = log
        .iter()
        .filter(|s| s.2 == 2)
        .map(|s| s.0.as_str())
        .collect();
    assert_eq!(
        both.len(),
        2,
        "each session told it shares the server: {log:?}"
    );
    for (who, r) in [("incumbent", &first), ("latecomer", &late)] {
        let share = r
            .end
            .tcptune
            .share
            .as_ref()
            .unwrap_or_else(|| panic!("the {who}'s report has its shares"));
        assert!(
            share.changes.iter().any(|c| c.sessions == 2),
            "{who}: {share:?}"
        );
        assert!(share.changes.iter().all(|c| c.t_s >= 0.0));
    }
    // A cap comes once the pipe was seen full (on loopback it may not plateau in a debug
    // build on a busy machine: then nobody was capped, and nothing is to check). Whoever
    // sends applies the cap told: the incumbent's own streams; the server's for the
    // latecomer (its side of the streams is in the latecomer's report).
    let capped = |r: &Report| {
        r.end
            .tcptune
            .share
            .as_ref()
            .is_some_and(|s| s.changes.iter().any(|c| c.rate_bps.is_some()))
    };
    if capped(&first) {
        assert!(paced_at_the_share(&first), "the incumbent's pacing was set");
    }
    if capped(&late) {
        assert!(paced_at_the_share(&late), "the server paced its senders");
    }
    println!(
        "shares logged: {log:?}; incumbent capped: {}, latecomer capped: {}",
        capped(&first),
        capped(&late)
    );
}
