use super::*;
use crate::diag::DiagConn;
use tcptune_core::{TcpSnapshot, TcpState};

fn conn(cookie: u64, peer: &str, f: impl FnOnce(&mut TcpSnapshot)) -> DiagConn {
    let mut t = TcpSnapshot::empty();
    t.rtt_us = 100_000;
    t.min_rtt_us = Some(100_000);
    t.snd_cwnd_segs = 100;
    t.snd_mss_bytes = 1448;
    t.busy_time_us = Some(0);
    t.rwnd_limited_us = Some(0);
    t.sndbuf_limited_us = Some(0);
    t.bytes_acked = Some(0);
    t.bytes_received = Some(0);
    t.snd_wnd_bytes = Some(1 << 20);
    t.sndbuf_bytes = Some(4 << 20);
    f(&mut t);
    DiagConn {
        family: libc::AF_INET as u8,
        state: TcpState::Established,
        local: "10.0.0.1:5201".parse().unwrap(),
        remote: peer.parse().unwrap(),
        ifindex: 0,
        cookie,
        rqueue: 0,
        wqueue: 0,
        uid: 0,
        inode: 1,
        timer: 0,
        retrans: 0,
        tcp: Some(t),
        tcp_info_len: 280,
        congestion: Some("cubic".into()),
        skmeminfo: None,
    }
}

fn ctx() -> HintContext {
    HintContext {
        limits: Some(HostLimits::linux_defaults()),
        target: None,
    }
}

#[test]
fn first_sight_uses_lifetime_shares_then_interval_deltas() {
    let mut tr = Tracker::new();
    let c0 = conn(1, "10.0.0.2:40000", |t| {
        t.busy_time_us = Some(1_000_000);
        t.rwnd_limited_us = Some(900_000);
    });
    let rows = tr.rows(Duration::from_secs(10), vec![c0], &ctx());
    assert_eq!(rows[0].share_basis, ShareBasis::Lifetime);
    assert_eq!(rows[0].rwnd_limited, Some(0.9));
    assert_eq!(
        rows[0].limit.as_ref().unwrap().kind,
        LimitKind::ReceiveWindow
    );
    // Over the next second it was busy 1 s and never limited: the interval share is 0.
    let c1 = conn(1, "10.0.0.2:40000", |t| {
        t.busy_time_us = Some(2_000_000);
        t.rwnd_limited_us = Some(900_000);
        t.bytes_acked = Some(125_000_000);
    });
    let rows = tr.rows(Duration::from_secs(11), vec![c1], &ctx());
    assert_eq!(rows[0].share_basis, ShareBasis::Interval);
    assert_eq!(rows[0].rwnd_limited, Some(0.0));
    assert!(rows[0].limit.is_none());
    assert_eq!(rows[0].send_rate_bps, Some(1_000_000_000));
}

#[test]
fn idle_connection_between_refreshes_has_no_share() {
    let mut tr = Tracker::new();
    let c = || conn(3, "10.0.0.2:1", |t| t.busy_time_us = Some(5));
    tr.rows(Duration::from_secs(1), vec![c()], &ctx());
    let rows = tr.rows(Duration::from_secs(2), vec![c()], &ctx());
    assert_eq!(rows[0].rwnd_limited, None);
    assert_eq!(rows[0].send_rate_bps, Some(0));
}

#[test]
fn counters_going_backwards_fall_back_to_lifetime() {
    // A reused cookie (or a reset counter) must not produce negative deltas.
    let mut tr = Tracker::new();
    tr.rows(
        Duration::from_secs(1),
        vec![conn(4, "10.0.0.2:1", |t| t.busy_time_us = Some(10_000_000))],
        &ctx(),
    );
    let rows = tr.rows(
        Duration::from_secs(2),
        vec![conn(4, "10.0.0.2:1", |t| {
            t.busy_time_us = Some(1000);
            t.sndbuf_limited_us = Some(500);
        })],
        &ctx(),
    );
    assert_eq!(rows[0].share_basis, ShareBasis::Lifetime);
    assert_eq!(rows[0].sndbuf_limited, Some(0.5));
}

#[test]
fn receive_window_hint_names_the_window_ceiling_and_target() {
    let mut tr = Tracker::new();
    let c = conn(1, "192.0.2.9:5201", |t| {
        t.busy_time_us = Some(1_000_000);
        t.rwnd_limited_us = Some(500_000);
        t.snd_wnd_bytes = Some(4 << 20);
    });
    let cx = HintContext {
        target: Some(Rate::gbit(1)),
        ..ctx()
    };
    let rows = tr.rows(Duration::from_secs(1), vec![c], &cx);
    let hint = &rows[0].limit.as_ref().unwrap().hint;
    // 4 MiB / 100 ms = 336 Mbit/s; 1 Gbit/s x 100 ms x 2 = 25 MB = 23.8 MiB.
    assert!(hint.contains("4 MiB"), "{hint}");
    assert!(hint.contains("336 Mbit/s"), "{hint}");
    assert!(hint.contains("the receiver's net.ipv4.tcp_rmem"), "{hint}");
    assert!(hint.contains("23.8 MiB for 1 Gbit/s"), "{hint}");
}

#[test]
fn receive_window_hint_blames_a_locked_receive_buffer_of_a_local_peer() {
    let sender = conn(1, "127.0.0.1:5201", |t| {
        t.busy_time_us = Some(1_000_000);
        t.rwnd_limited_us = Some(700_000);
        t.snd_wnd_bytes = Some(120 << 10);
    });
    // The receiving end, in the same dump, locked at 128 KiB (autotuning could go to 32 MiB).
    let mut receiver = conn(2, "10.0.0.1:5201", |t| t.rcvbuf_bytes = Some(128 << 10));
    receiver.local = "127.0.0.1:5201".parse().unwrap();
    receiver.remote = sender.local;
    let rows = Tracker::new().rows(
        Duration::from_secs(1),
        vec![sender.clone(), receiver.clone()],
        &ctx(),
    );
    let hint = &rows[0].limit.as_ref().unwrap().hint;
    assert!(hint.contains("fixed at 128 KiB"), "{hint}");
    assert!(hint.contains("SO_RCVBUF"), "{hint}");
    // The same receiver with its buffer full of unread data: the reader is the problem.
    if let Some(t) = receiver.tcp.as_mut() {
        t.rmem_alloc_bytes = Some(120 << 10);
    }
    let rows = Tracker::new().rows(Duration::from_secs(1), vec![sender, receiver], &ctx());
    let hint = &rows[0].limit.as_ref().unwrap().hint;
    assert!(hint.contains("reads too slowly"), "{hint}");
}

#[test]
fn receive_window_already_above_target_blames_the_reader() {
    let c = conn(1, "192.0.2.9:5201", |t| {
        t.busy_time_us = Some(1_000_000);
        t.rwnd_limited_us = Some(500_000);
        t.snd_wnd_bytes = Some(64 << 20);
    });
    let cx = HintContext {
        target: Some(Rate::mbit(100)),
        ..ctx()
    };
    let rows = Tracker::new().rows(Duration::from_secs(1), vec![c], &cx);
    let hint = &rows[0].limit.as_ref().unwrap().hint;
    assert!(hint.contains("reads too slowly"), "{hint}");
}

#[test]
fn send_buffer_hint_tells_locked_buffer_from_autotuning_cap() {
    let limited = |sndbuf: u32| {
        conn(1, "10.0.0.2:1", move |t| {
            t.busy_time_us = Some(1_000_000);
            t.sndbuf_limited_us = Some(300_000);
            t.sndbuf_bytes = Some(sndbuf);
        })
    };
    let rows = Tracker::new().rows(Duration::from_secs(1), vec![limited(4 << 20)], &ctx());
    let hint = &rows[0].limit.as_ref().unwrap().hint;
    assert!(hint.contains("autotuning's cap"), "{hint}");
    assert!(hint.contains("8 MiB to double"), "{hint}");
    // 416 KiB: an application asked for 208 KiB, well under the 4 MiB cap.
    let rows = Tracker::new().rows(Duration::from_secs(1), vec![limited(425_984)], &ctx());
    let hint = &rows[0].limit.as_ref().unwrap().hint;
    assert!(hint.contains("SO_SNDBUF"), "{hint}");
    assert!(
        hint.contains("have the application ask for at least 416 KiB"),
        "{hint}"
    );
    // 3.6 MiB, below autotuning's 4 MiB cap but at twice a 1.8 MiB wmem_max: capped.
    let mut cx = ctx();
    if let Some(l) = cx.limits.as_mut() {
        l.wmem_max = Bytes(1_887_436);
    }
    let rows = Tracker::new().rows(Duration::from_secs(1), vec![limited(3_774_872)], &cx);
    let hint = &rows[0].limit.as_ref().unwrap().hint;
    assert!(
        hint.contains("raise net.core.wmem_max (now 1.8 MiB)"),
        "{hint}"
    );
}

#[test]
fn sockets_without_tcp_info_are_skipped() {
    let mut c = conn(9, "10.0.0.2:1", |_| {});
    c.tcp = None;
    assert!(Tracker::new()
        .rows(Duration::ZERO, vec![c], &ctx())
        .is_empty());
}

#[test]
fn filters_match_either_end_and_cidr() {
    let rows = Tracker::new().rows(
        Duration::ZERO,
        vec![
            conn(1, "10.0.0.2:40000", |_| {}),
            conn(2, "192.168.1.5:443", |_| {}),
            conn(3, "[2001:db8::1]:22", |_| {}),
        ],
        &ctx(),
    );
    let f = |port: Option<u16>, addr: Option<&str>| Filter {
        port,
        addr: addr.map(|a| a.parse().unwrap()),
        ..Filter::default()
    };
    assert_eq!(filter_rows(rows.clone(), &f(Some(443), None)).len(), 1);
    assert_eq!(filter_rows(rows.clone(), &f(Some(5201), None)).len(), 3);
    assert_eq!(
        filter_rows(rows.clone(), &f(None, Some("192.168.0.0/16"))).len(),
        1
    );
    assert_eq!(
        filter_rows(rows.clone(), &f(None, Some("2001:db8::/32"))).len(),
        1
    );
    // Every row's local end is 10.0.0.1, so a /0 IPv4 network matches all three.
    assert_eq!(
        filter_rows(rows.clone(), &f(None, Some("0.0.0.0/0"))).len(),
        3
    );
    assert_eq!(filter_rows(rows.clone(), &f(None, Some("::/0"))).len(), 1);
    assert!("10.0.0.0/33".parse::<AddrMatch>().is_err());
    assert!("nonsense".parse::<AddrMatch>().is_err());
    // Process filters never match rows whose owner was not looked up.
    let pf = Filter {
        process: Some("iperf3".parse().unwrap()),
        ..Filter::default()
    };
    assert!(filter_rows(rows, &pf).is_empty());
}

#[test]
fn sorting_by_rtt_and_limited_puts_the_worst_first() {
    let mut rows = Tracker::new().rows(
        Duration::ZERO,
        vec![
            conn(1, "10.0.0.2:1", |t| t.rtt_us = 5),
            conn(2, "10.0.0.3:1", |t| {
                t.rtt_us = 50;
                t.busy_time_us = Some(10);
                t.sndbuf_limited_us = Some(9);
            }),
        ],
        &ctx(),
    );
    sort_rows(&mut rows, SortKey::Rtt);
    assert_eq!(rows[0].cookie, 2);
    sort_rows(&mut rows, SortKey::Peer);
    assert_eq!(rows[0].cookie, 1);
    sort_rows(&mut rows, SortKey::Limited);
    assert_eq!(rows[0].cookie, 2);
    assert!("bogus".parse::<SortKey>().is_err());
    for n in SortKey::NAMES {
        assert!(n.parse::<SortKey>().is_ok());
    }
}

#[test]
fn table_highlights_limited_rows_with_their_hint() {
    let rows = Tracker::new().rows(
        Duration::ZERO,
        vec![
            conn(1, "10.0.0.2:1", |_| {}),
            conn(2, "10.0.0.3:1", |t| {
                t.busy_time_us = Some(10);
                t.rwnd_limited_us = Some(9);
            }),
        ],
        &ctx(),
    );
    let report = WatchReport {
        schema_version: WATCH_SCHEMA_VERSION,
        refresh: 0,
        total: 2,
        limited_by_rwnd: 1,
        limited_by_sndbuf: 0,
        dump_us: 1500,
        connections: rows,
    };
    let plain = render_table(&report, TableStyle::default());
    assert!(plain.contains("  ^ receive window"), "{plain}");
    assert!(!plain.contains('\x1b'));
    let color = render_table(
        &report,
        TableStyle {
            color: true,
            ..TableStyle::default()
        },
    );
    assert!(color.contains("\x1b[1;33m"));
    let capped = render_table(
        &report,
        TableStyle {
            max_rows: 1,
            ..TableStyle::default()
        },
    );
    assert!(capped.contains("1 more"), "{capped}");
}

#[test]
fn send_buffer_time_behind_a_closed_window_blames_the_reader() {
    let c = conn(1, "10.0.0.2:1", |t| {
        t.busy_time_us = Some(1_000_000);
        t.sndbuf_limited_us = Some(900_000);
        t.rwnd_limited_us = Some(50_000);
        t.snd_wnd_bytes = Some(0);
    });
    let rows = Tracker::new().rows(Duration::from_secs(1), vec![c], &ctx());
    let l = rows[0].limit.as_ref().expect("limited");
    assert_eq!(l.kind, LimitKind::ReceiveWindow);
    assert_eq!(l.share, 0.9);
    assert!(l.hint.contains("reads too slowly"), "{}", l.hint);
}

/// Two refreshes one second apart; the second's row.
fn after_a_second(first: impl Fn(&mut TcpSnapshot), second: impl Fn(&mut TcpSnapshot)) -> Row {
    let mut tr = Tracker::new();
    tr.rows(
        Duration::from_secs(1),
        vec![conn(9, "10.0.0.2:1", first)],
        &ctx(),
    );
    let mut rows = tr.rows(
        Duration::from_secs(2),
        vec![conn(9, "10.0.0.2:1", second)],
        &ctx(),
    );
    rows.remove(0)
}

#[test]
fn a_connection_busy_all_the_time_and_not_window_limited_is_congestion_window_limited() {
    let r = after_a_second(
        |t| t.busy_time_us = Some(1_000_000),
        |t| {
            t.busy_time_us = Some(2_000_000);
            t.bytes_acked = Some(100_000_000);
        },
    );
    assert_eq!(r.busy_share, Some(1.0));
    assert_eq!(r.factor, LimitingFactor::CongestionWindow);
}

#[test]
fn window_and_buffer_limits_win_over_the_congestion_window() {
    let r = after_a_second(
        |t| t.busy_time_us = Some(1_000_000),
        |t| {
            t.busy_time_us = Some(2_000_000);
            t.rwnd_limited_us = Some(800_000);
        },
    );
    assert_eq!(r.factor, LimitingFactor::ReceiveWindow);
    let r = after_a_second(
        |t| t.busy_time_us = Some(1_000_000),
        |t| {
            t.busy_time_us = Some(2_000_000);
            t.sndbuf_limited_us = Some(600_000);
        },
    );
    assert_eq!(r.factor, LimitingFactor::SendBuffer);
}

#[test]
fn a_mostly_idle_sender_is_application_limited_and_a_receiver_is_receiving() {
    let r = after_a_second(
        |t| t.busy_time_us = Some(1_000_000),
        |t| {
            t.busy_time_us = Some(1_100_000);
            t.bytes_acked = Some(1_000);
        },
    );
    assert_eq!(r.busy_share, Some(0.1));
    assert_eq!(r.factor, LimitingFactor::Application);
    let r = after_a_second(
        |t| t.bytes_received = Some(0),
        |t| t.bytes_received = Some(50_000_000),
    );
    assert_eq!(r.factor, LimitingFactor::Receiving);
    // On first sight the kernel's application-limited flag decides.
    let mut tr = Tracker::new();
    let rows = tr.rows(
        Duration::from_secs(1),
        vec![conn(1, "10.0.0.2:1", |t| {
            t.delivery_rate_app_limited = true
        })],
        &ctx(),
    );
    assert_eq!(rows[0].factor, LimitingFactor::Application);
    let rows = tr.rows(
        Duration::from_secs(1),
        vec![conn(2, "10.0.0.2:2", |_| {})],
        &ctx(),
    );
    assert_eq!(rows[0].factor, LimitingFactor::CongestionWindow);
}
