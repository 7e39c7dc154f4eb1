//! Property tests of the pure path: delay never early, order kept unless reordering is
//! asked for, serialization spacing, drop-tail drops exactly the overflow, seeded loss.

use proptest::prelude::*;
use std::time::Duration;
use tcptune_core::{Bytes, Rate, Time};
use tcptune_emu::packet::Packet;
use tcptune_emu::{Path, PathConfig, QueueLimit};

/// A packet of `len` bytes whose first 4 bytes are `id`.
fn packet(id: u32, len: usize) -> Packet {
    let mut b = vec![0x45u8; len.max(4)];
    b[..4].copy_from_slice(&id.to_be_bytes());
    Packet::from_ip(&b)
}

fn id_of(p: &Packet) -> u32 {
    let ip = p.ip();
    u32::from_be_bytes([ip[0], ip[1], ip[2], ip[3]])
}

/// Arrivals: (gap before this packet in us, length).
fn arrivals() -> impl Strategy<Value = Vec<(u64, usize)>> {
    prop::collection::vec((0u64..2_000, 40usize..1500), 1..200)
}

/// Feed `arr` into `path`, polling at arrivals and at random extra times; returns
/// (id, arrival, left_at, due) for every packet that came out.
fn drive(path: &mut Path, arr: &[(u64, usize)], polls: &[u64]) -> Vec<(u32, Time, Time, Time)> {
    let mut out = Vec::new();
    let mut arrival_of = Vec::new();
    let mut t = Time::ZERO;
    let mut poll_i = 0;
    let take = |path: &mut Path, now: Time, arrival_of: &[Time], out: &mut Vec<_>| {
        while let Some(p) = path.poll_out(now) {
            let id = id_of(&p);
            out.push((id, arrival_of[id as usize], now, p.due()));
        }
    };
    for (i, &(gap, len)) in arr.iter().enumerate() {
        t += Duration::from_micros(gap);
        // A late poll somewhere before this arrival.
        if let Some(&extra) = polls.get(poll_i) {
            poll_i += 1;
            let at = t - Duration::from_micros(extra % (gap + 1));
            take(path, at.max(Time::ZERO), &arrival_of, &mut out);
        }
        arrival_of.push(t);
        path.push(t, packet(i as u32, len));
        take(path, t, &arrival_of, &mut out);
    }
    // Drain, polling late on purpose.
    while let Some(next) = path.poll_timeout() {
        take(
            path,
            next + Duration::from_micros(37),
            &arrival_of,
            &mut out,
        );
    }
    out
}

proptest! {
    #[test]
    fn delay_is_never_early_and_order_is_kept(
        arr in arrivals(),
        polls in prop::collection::vec(0u64..5_000, 0..200),
        delay_us in 0u64..50_000,
        jitter_us in 0u64..10_000,
        seed in any::<u64>(),
    ) {
        let cfg = PathConfig {
            delay: Duration::from_micros(delay_us),
            jitter: Duration::from_micros(jitter_us),
            seed,
            ..PathConfig::default()
        };
        let mut path = Path::new(&cfg, 0);
        let out = drive(&mut path, &arr, &polls);
        prop_assert_eq!(out.len(), arr.len());
        for (k, &(id, arrival, left, due)) in out.iter().enumerate() {
            prop_assert_eq!(id as usize, k, "order kept");
            prop_assert!(left >= due, "left before due");
            let floor = Duration::from_micros(delay_us.saturating_sub(jitter_us));
            prop_assert!(due >= arrival + floor, "earlier than delay - jitter");
            if jitter_us == 0 {
                prop_assert_eq!(due, arrival + cfg.delay, "exact delay without jitter");
            }
        }
    }

    #[test]
    fn rate_limiter_spaces_packets_by_their_serialization_time(
        arr in arrivals(),
        mbit in 1u64..2_000,
        delay_us in 0u64..10_000,
    ) {
        let rate = Rate::mbit(mbit);
        let cfg = PathConfig {
            delay: Duration::from_micros(delay_us),
            rate: Some(rate),
            queue: QueueLimit::Bytes(Bytes(1 << 40)),
            ..PathConfig::default()
        };
        let mut path = Path::new(&cfg, 0);
        let out = drive(&mut path, &arr, &[]);
        prop_assert_eq!(out.len(), arr.len());
        let mut prev_finish = Time::ZERO;
        for &(id, arrival, _, due) in &out {
            let tx = rate.time_to_send(Bytes(arr[id as usize].1 as u64));
            let finish = arrival.max(prev_finish) + tx;
            prop_assert_eq!(due, finish + cfg.delay);
            prev_finish = finish;
        }
    }

    #[test]
    fn drop_tail_drops_exactly_what_overflows(
        arr in prop::collection::vec((0u64..3_000, 100usize..1500), 1..300),
        cap in 1500u64..20_000,
    ) {
        // 8 Mbit/s: one byte takes exactly 1 us, so the reference model is exact.
        let cfg = PathConfig {
            rate: Some(Rate::mbit(8)),
            queue: QueueLimit::Bytes(Bytes(cap)),
            ..PathConfig::default()
        };
        let mut path = Path::new(&cfg, 0);
        let out = drive(&mut path, &arr, &[]);
        // Reference: the queue at t is the unsent bytes of every accepted packet.
        let mut accepted: Vec<(u64, u64, u64)> = Vec::new(); // (start, finish, len) in us
        let mut expect = Vec::new();
        let mut t = 0u64;
        let mut free = 0u64;
        for (i, &(gap, len)) in arr.iter().enumerate() {
            t += gap;
            let len = len as u64;
            let backlog: u64 = accepted
                .iter()
                .filter(|a| a.1 > t)
                .map(|&(s, f, l)| if s >= t { l } else { f - t })
                .sum();
            if backlog + len <= cap {
                let start = t.max(free);
                free = start + len;
                accepted.push((start, free, len));
                expect.push(i as u32);
            }
        }
        let got: Vec<u32> = out.iter().map(|o| o.0).collect();
        prop_assert_eq!(&got, &expect);
        let s = path.stats();
        prop_assert_eq!(s.drops.queue as usize, arr.len() - expect.len());
        prop_assert!(s.queue_peak_bytes <= cap);
    }

    #[test]
    fn seeded_loss_is_reproducible_and_counts_add_up(
        n in 1usize..500,
        loss in 0.0f64..1.0,
        seed in any::<u64>(),
    ) {
        let cfg = PathConfig { loss, seed, ..PathConfig::default() };
        let run = || {
            let mut path = Path::new(&cfg, 0);
            let arr: Vec<(u64, usize)> = (0..n).map(|_| (10, 100)).collect();
            let ids: Vec<u32> = drive(&mut path, &arr, &[]).iter().map(|o| o.0).collect();
            (ids, path.stats())
        };
        let (a, sa) = run();
        let (b, _) = run();
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(sa.packets_in, n as u64);
        prop_assert_eq!(sa.packets_out + sa.drops.loss, n as u64);
        prop_assert_eq!(sa.in_flight_packets, 0);
    }

    #[test]
    fn jitter_with_reordering_still_never_delivers_before_due(
        arr in arrivals(),
        jitter_us in 1u64..10_000,
        seed in any::<u64>(),
    ) {
        let cfg = PathConfig {
            delay: Duration::from_millis(5),
            jitter: Duration::from_micros(jitter_us),
            reorder: true,
            seed,
            ..PathConfig::default()
        };
        let mut path = Path::new(&cfg, 0);
        let out = drive(&mut path, &arr, &[]);
        prop_assert_eq!(out.len(), arr.len());
        for &(_, arrival, left, due) in &out {
            prop_assert!(left >= due);
            prop_assert!(due + Duration::from_micros(jitter_us) >= arrival + cfg.delay);
        }
    }
}

/// A path of `delay_ms` and, if `mbit` > 0, that rate with a large queue.
fn changed(delay_ms: u64, mbit: u64) -> PathConfig {
    PathConfig {
        delay: Duration::from_millis(delay_ms),
        rate: (mbit > 0).then(|| Rate::mbit(mbit)),
        queue: QueueLimit::Bytes(Bytes(64 << 20)),
        ..PathConfig::default()
    }
}

proptest! {
    #[test]
    fn changes_of_delay_and_rate_never_reorder_and_never_deliver_early(
        arr in arrivals(),
        changes in prop::collection::vec((0usize..200, 0u64..50, 0u64..200), 0..6),
        start in (0u64..50, 0u64..200),
    ) {
        let mut path = Path::new(&changed(start.0, start.1), 0);
        // Each packet must not leave before its arrival plus the delay in force when it
        // arrived (the rate only adds to that).
        let mut min_due = Vec::new();
        let mut current = start.0;
        let mut out = Vec::new();
        let mut t = Time::ZERO;
        for (i, &(gap, len)) in arr.iter().enumerate() {
            t += Duration::from_micros(gap);
            for &(at, d, r) in &changes {
                if at == i {
                    prop_assert!(path.set(&changed(d, r)).is_ok());
                    current = d;
                }
            }
            min_due.push(t + Duration::from_millis(current));
            path.push(t, packet(i as u32, len));
            while let Some(p) = path.poll_out(t) {
                out.push((id_of(&p), t));
            }
        }
        while let Some(next) = path.poll_timeout() {
            while let Some(p) = path.poll_out(next) {
                out.push((id_of(&p), next));
            }
        }
        let ids: Vec<u32> = out.iter().map(|o| o.0).collect();
        prop_assert_eq!(ids, (0..arr.len() as u32).collect::<Vec<_>>());
        for (id, left) in out {
            prop_assert!(left >= min_due[id as usize], "packet {} left early", id);
        }
    }
}
