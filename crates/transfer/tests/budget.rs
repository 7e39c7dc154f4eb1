//! `serve --memory-budget`: the send buffers of every session's `psc` and `auto` streams
//! share one budget. On loopback, with the server sending (`--reverse`): a second session
//! arriving halves the first one's fair share within a second, its leaving gives it back
//! within a second, and the budget is never exceeded.

mod common;

use common::TestServer;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tcptune_core::TuneMode;
use tcptune_transfer::client::run;
use tcptune_transfer::report::Report;
use tcptune_transfer::server::{ServerConfig, ServerEvent};

const BUDGET: u64 = 1 << 20;

/// (seconds on the report's clock, fair share, held) of every sender sample of `r`.
fn shares(r: &Report) -> Vec<(f64, u64, u64)> {
    let mut v: Vec<(f64, u64, u64)> = r
        .end
        .tcptune
        .streams
        .iter()
        .flat_map(|s| s.sender.samples.iter())
        .filter_map(|p| Some((p.t_s, p.pool_fair_share_bytes?, p.pool_held_bytes?)))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

#[test]
fn sessions_arriving_and_leaving_reshare_the_budget_within_a_second() {
    let events: Arc<Mutex<Vec<ServerEvent>>> = Arc::default();
    let sink = events.clone();
    let server = TestServer::start(ServerConfig {
        memory_budget: Some(BUDGET),
        log: Some(Arc::new(move |e: &ServerEvent| {
            if let Ok(mut v) = sink.lock() {
                v.push(e.clone());
            }
        })),
        ..ServerConfig::default()
    });
    let client = |mode: TuneMode, secs: f64| {
        let mut c = server.client();
        c.tune = mode;
        c.streams = 2;
        c.reverse = true;
        c.samples = true;
        c.duration = Some(Duration::from_secs_f64(secs));
        c
    };
    let a_cfg = client(TuneMode::Psc, 5.0);
    let b_cfg = client(TuneMode::Auto, 2.0);
    let t0 = Instant::now();
    let (a, b_window) = std::thread::scope(|s| {
        let a = s.spawn(|| run(&a_cfg, None));
        std::thread::sleep(Duration::from_millis(1200));
        let b_start = t0.elapsed().as_secs_f64();
        let b = run(&b_cfg, None).expect("session b");
        let b_end = t0.elapsed().as_secs_f64();
        assert!(b.end.tcptune.complete || b.end.tcptune.streams_used > 0);
        (a.join().expect("thread a"), (b_start, b_end))
    });
    let a = a.expect("session a");
    let (b_start, b_end) = b_window;
    // The report's clock starts a little after t0 (setup on loopback: milliseconds), so a
    // sample at t_s happened no earlier than t0 + t_s on the wall clock: the windows below
    // leave that slack on the strict side.
    let s = shares(&a);
    assert!(!s.is_empty(), "no pool samples in the report");
    let during: Vec<_> = s
        .iter()
        .filter(|p| p.0 >= b_start + 1.0 && p.0 + 0.2 < b_end - 0.3)
        .collect();
    let after: Vec<_> = s.iter().filter(|p| p.0 >= b_end + 1.0).collect();
    assert!(!during.is_empty() && !after.is_empty(), "samples {s:?}");
    for p in &during {
        assert!(
            p.1 <= BUDGET / 4 + BUDGET / 40,
            "share {p:?} with 4 streams"
        );
    }
    for p in &after {
        assert!(
            p.1 >= BUDGET / 2 - BUDGET / 20,
            "share {p:?} back to 2 streams"
        );
    }
    assert!(s.iter().all(|p| p.2 <= BUDGET));
    // The log: every view of the budget within it, and both sessions seen at once.
    let ev = events.lock().expect("events").clone();
    let budgets: Vec<_> = ev
        .iter()
        .filter_map(|e| match e {
            ServerEvent::MemoryBudget {
                held_bytes,
                budget_bytes,
                streams,
                ..
            } => Some((*held_bytes, *budget_bytes, streams.clone())),
            _ => None,
        })
        .collect();
    assert!(!budgets.is_empty());
    for (held, budget, streams) in &budgets {
        assert_eq!(*budget, BUDGET);
        assert!(held <= budget, "{held} of {budget}");
        assert_eq!(streams.iter().map(|s| s.held_bytes).sum::<u64>(), *held);
    }
    assert!(
        budgets.iter().any(|(_, _, s)| {
            let mut sessions: Vec<&str> = s.iter().map(|x| x.session.as_str()).collect();
            sessions.dedup();
            s.len() == 4 && sessions.len() == 2
        }),
        "{budgets:?}"
    );
}
