//! Careful resume's route (root): installed with the initial window, the original put back
//! when dropped, and a crashed owner's route restored by the next run.

use std::net::IpAddr;
use std::process::Command;
use tcptune_sys::route::{
    cleanup_stale, journal_dir, parse_routes, InitialWindow, JournalEntry, Window,
};
use tcptune_testkit::{Need, Netns};

const PEER: &str = "10.231.0.2";

fn peer() -> IpAddr {
    PEER.parse().expect("address")
}

/// The host route to the peer as `ip` shows it (in the calling thread's namespace).
fn exact() -> Option<tcptune_sys::route::RouteSpec> {
    let o = Command::new("ip")
        .args(["-j", "-d", "route", "show", "table", "main", "exact"])
        .arg(format!("{PEER}/32"))
        .output()
        .expect("ip route show");
    parse_routes(&String::from_utf8_lossy(&o.stdout), 32)
        .into_iter()
        .next()
}

/// The initial window new connections to the peer get, from the route lookup.
fn initcwnd_of_lookup() -> Option<u64> {
    let o = Command::new("ip")
        .args(["-j", "-d", "route", "get", PEER])
        .output()
        .expect("ip route get");
    parse_routes(&String::from_utf8_lossy(&o.stdout), 32)
        .into_iter()
        .next()
        .and_then(|r| r.initial(Window::Congestion))
}

fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().expect("ip");
    assert!(st.success(), "ip {}", args.join(" "));
}

#[test]
fn the_route_gives_the_initial_window_and_goes_when_dropped() {
    if !tcptune_testkit::require(
        "the_route_gives_the_initial_window_and_goes_when_dropped",
        &[Need::Root, Need::Program("ip")],
    ) {
        return;
    }
    let (a, _b) = Netns::veth_pair("rt");
    a.run_in(|| {
        assert_eq!(exact(), None, "only the subnet's route to start with");
        let w = InitialWindow::install(peer(), Window::Congestion, 500).expect("install");
        assert_eq!(initcwnd_of_lookup(), Some(500));
        assert!(
            w.route().to_string().contains("initcwnd 500"),
            "{}",
            w.route()
        );
        // A second transfer to the same peer leaves it alone while this one runs.
        let busy = InitialWindow::install(peer(), Window::Congestion, 900).expect_err("busy");
        assert!(
            busy.to_string().contains("another tcptune transfer"),
            "{busy}"
        );
        drop(w);
        assert_eq!(exact(), None, "the route is gone");
        assert_eq!(initcwnd_of_lookup(), None);
    });
}

#[test]
fn an_existing_host_route_is_put_back_exactly() {
    if !tcptune_testkit::require(
        "an_existing_host_route_is_put_back_exactly",
        &[Need::Root, Need::Program("ip")],
    ) {
        return;
    }
    let (a, _b) = Netns::veth_pair("rx");
    a.run_in(|| {
        let dev = {
            let o = Command::new("ip")
                .args(["-j", "route", "get", PEER])
                .output()
                .expect("ip");
            parse_routes(&String::from_utf8_lossy(&o.stdout), 32)[0]
                .dev
                .clone()
        };
        ip(&[
            "route",
            "add",
            "10.231.0.2/32",
            "dev",
            &dev,
            "proto",
            "static",
            "metric",
            "7",
            "mtu",
            "1400",
        ]);
        let before = exact().expect("the host route");
        let w = InitialWindow::install(peer(), Window::Congestion, 64).expect("install");
        let during = exact().expect("still a host route");
        assert_eq!(during.initial(Window::Congestion), Some(64));
        assert!(during.metrics.contains(&("mtu".into(), 1400)), "{during}");
        assert_eq!(during.metric, Some(7));
        w.restore().expect("restore");
        assert_eq!(exact(), Some(before));
        // A route that already sets initcwnd is someone's tuning: left alone.
        ip(&[
            "route",
            "replace",
            "10.231.0.2/32",
            "dev",
            &dev,
            "metric",
            "7",
            "initcwnd",
            "20",
        ]);
        let e = InitialWindow::install(peer(), Window::Congestion, 64).expect_err("already set");
        assert!(e.to_string().contains("already sets initcwnd"), "{e}");
    });
}

#[test]
fn a_crashed_owners_route_is_restored_by_the_next_run() {
    if !tcptune_testkit::require(
        "a_crashed_owners_route_is_restored_by_the_next_run",
        &[Need::Root, Need::Program("ip")],
    ) {
        return;
    }
    let (a, _b) = Netns::veth_pair("rc");
    a.run_in(|| {
        let w = InitialWindow::install(peer(), Window::Congestion, 300).expect("install");
        // The owner "dies" without restoring: its journal entry names a process that is gone.
        std::mem::forget(w);
        let netns = std::fs::metadata("/proc/thread-self/ns/net")
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            .expect("netns");
        let path = journal_dir().join(format!("route-{netns}-10_231_0_2.json"));
        let mut e: JournalEntry =
            serde_json::from_slice(&std::fs::read(&path).expect("journal entry")).expect("json");
        let mut gone = Command::new("true").spawn().expect("spawn true");
        e.pid = gone.id();
        gone.wait().expect("wait");
        std::fs::write(&path, serde_json::to_vec(&e).expect("json")).expect("write");
        assert_eq!(initcwnd_of_lookup(), Some(300));
        let done = cleanup_stale();
        assert_eq!(done.len(), 1, "{done:?}");
        assert!(done[0].contains("10.231.0.2"), "{done:?}");
        assert_eq!(exact(), None);
        assert!(!path.exists());
    });
}
