//! A per-destination route that gives new connections to one peer a large initial
//! congestion window (`initcwnd`): the host side of careful resume (see
//! `tcptune_core::tuners::auto::ResumePacer` for the socket side).
//!
//! Linux reads a connection's initial window from the route to its peer when the
//! connection is established. [`InitialWindow::install`] replaces the host route to the peer
//! (`ip route replace PEER/32 ... initcwnd N`, keeping the route's gateway, device, source
//! and metrics) and puts the original back when dropped. It needs `CAP_NET_ADMIN` in the
//! network namespace. The `ip` program of iproute2 does the netlink work; its JSON output
//! (`ip -j -d route ...`) is parsed by the pure functions here.
//!
//! A crash must not leave the route behind: before changing anything, a journal entry
//! (owner process and start time, the network namespace, the original route) is written
//! under the runtime directory; [`cleanup_stale`] (run by every client before it installs
//! a route) restores routes whose owner is gone, in the namespace it runs in.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why the route could not be installed (the transfer then starts as usual).
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// Changing routes needs `CAP_NET_ADMIN` in this network namespace.
    #[error("changing routes needs CAP_NET_ADMIN in this network namespace (run as root, or in `tcptune emu`)")]
    NoCapability,
    /// `ip` failed or is missing.
    #[error("{op}: {message}")]
    Ip {
        /// What was attempted.
        op: String,
        /// What went wrong.
        message: String,
    },
    /// The route to the peer already sets an initial window (someone else's tuning).
    #[error("the route to {0} already sets {1}: left alone")]
    AlreadySet(IpAddr, &'static str),
    /// Another live tcptune process holds the route to this peer.
    #[error("another tcptune transfer (pid {0}) holds the route to this peer")]
    Busy(u32),
    /// The journal could not be written.
    #[error("journal {path}: {source}")]
    Journal {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A route as `ip -j -d route` shows it, reduced to what `ip route replace` takes back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteSpec {
    /// Destination with its prefix length (`198.19.0.1/32`).
    pub dst: String,
    /// Next hop, if any.
    pub gateway: Option<String>,
    /// Output device.
    pub dev: String,
    /// Preferred source address.
    pub prefsrc: Option<String>,
    /// Routing protocol (`kernel`, `static`, ...).
    pub protocol: Option<String>,
    /// Scope (`link`, `global`, ...).
    pub scope: Option<String>,
    /// Route priority (`metric`).
    pub metric: Option<u64>,
    /// Route metrics (`mtu`, `initcwnd`, ...), by name.
    pub metrics: Vec<(String, u64)>,
}

impl RouteSpec {
    /// Parse one route object of `ip -j -d route show|get`; `prefix` is the destination's
    /// prefix length when the object's `dst` has none.
    pub fn from_json(v: &serde_json::Value, prefix: u8) -> Option<RouteSpec> {
        let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
        let dst = s("dst")?;
        let dst = if dst.contains('/') || dst == "default" {
            dst
        } else {
            format!("{dst}/{prefix}")
        };
        let mut metrics = Vec::new();
        for m in v
            .get("metrics")
            .and_then(|m| m.as_array())
            .into_iter()
            .flatten()
        {
            for (k, x) in m.as_object().into_iter().flatten() {
                if let Some(n) = x.as_u64() {
                    metrics.push((k.clone(), n));
                }
            }
        }
        Some(RouteSpec {
            dst,
            gateway: s("gateway"),
            dev: s("dev")?,
            prefsrc: s("prefsrc"),
            protocol: s("protocol"),
            scope: s("scope"),
            metric: v.get("metric").and_then(|x| x.as_u64()),
            metrics,
        })
    }

    /// The host route to `peer` that `route get` chose, with the initial `window` set.
    pub fn with_initial(&self, peer: IpAddr, window: Window, segments: u32) -> RouteSpec {
        let key = window.metric();
        let mut metrics: Vec<(String, u64)> = self
            .metrics
            .iter()
            .filter(|(k, _)| k != key)
            .cloned()
            .collect();
        metrics.push((key.into(), u64::from(segments)));
        RouteSpec {
            dst: format!("{peer}/{}", host_prefix(peer)),
            gateway: self.gateway.clone(),
            dev: self.dev.clone(),
            prefsrc: self.prefsrc.clone(),
            protocol: Some("static".into()),
            scope: self.scope.clone(),
            // The same priority: `replace` then replaces this very route (priority is part of
            // a route's key), and putting the original back replaces ours.
            metric: self.metric,
            metrics,
        }
    }

    /// The initial `window` it sets, if any.
    pub fn initial(&self, window: Window) -> Option<u64> {
        self.metrics
            .iter()
            .find(|(k, _)| k == window.metric())
            .map(|&(_, v)| v)
    }

    /// Arguments of `ip route VERB ...` for this route.
    pub fn args(&self, verb: &str) -> Vec<String> {
        let mut a = vec!["route".to_string(), verb.to_string(), self.dst.clone()];
        if let Some(g) = &self.gateway {
            a.extend(["via".into(), g.clone()]);
        }
        a.extend(["dev".into(), self.dev.clone()]);
        if let Some(p) = &self.protocol {
            a.extend(["proto".into(), p.clone()]);
        }
        if let Some(sc) = &self.scope {
            a.extend(["scope".into(), sc.clone()]);
        }
        if let Some(src) = &self.prefsrc {
            a.extend(["src".into(), src.clone()]);
        }
        if let Some(m) = self.metric {
            a.extend(["metric".into(), m.to_string()]);
        }
        for (k, v) in &self.metrics {
            a.extend([k.clone(), v.to_string()]);
        }
        a
    }
}

impl fmt::Display for RouteSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.args("")[2..].join(" "))
    }
}

fn host_prefix(peer: IpAddr) -> u8 {
    if peer.is_ipv4() {
        32
    } else {
        128
    }
}

/// What the journal keeps about one installed route.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// The process that installed it.
    pub pid: u32,
    /// Its start time (clock ticks after boot), so that a reused pid is not taken for it.
    pub start: u64,
    /// The network namespace (`/proc/self/ns/net`'s inode).
    pub netns: u64,
    /// The peer.
    pub peer: IpAddr,
    /// The route installed.
    pub installed: RouteSpec,
    /// The exact route it replaced (`None`: there was none; the installed one is deleted).
    pub original: Option<RouteSpec>,
}

/// Which initial window a route gives new connections to its peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// `initcwnd`: what a sender may send before the first ACK (careful resume's burst).
    Congestion,
    /// `initrwnd`: the receive window a receiver offers from its SYN on, instead of 10
    /// segments grown about threefold per round trip (read when the connection is opened:
    /// before connect() for an active open).
    Receive,
}

impl Window {
    /// The route metric's name in `ip route`.
    pub fn metric(self) -> &'static str {
        match self {
            Window::Congestion => "initcwnd",
            Window::Receive => "initrwnd",
        }
    }
}

/// An installed route; dropping it puts the original back.
#[derive(Debug)]
pub struct InitialWindow {
    entry: JournalEntry,
    journal: PathBuf,
    restored: bool,
}

impl InitialWindow {
    /// Give new connections to `peer` an initial `window` of `segments` segments.
    pub fn install(
        peer: IpAddr,
        window: Window,
        segments: u32,
    ) -> Result<InitialWindow, RouteError> {
        if !crate::os::has_cap_net_admin() {
            return Err(RouteError::NoCapability);
        }
        let dir = journal_dir();
        let _ = cleanup_stale_in(&dir);
        let netns = netns_id();
        let journal = dir.join(format!("route-{netns}-{}.json", file_safe(peer)));
        if let Some(other) = read_entry(&journal) {
            // cleanup_stale_in just restored it if its owner was gone.
            if owner_alive(&other) {
                return Err(RouteError::Busy(other.pid));
            }
        }
        let chosen = route_get(peer)?;
        let exact = route_show_exact(peer)?;
        if exact
            .as_ref()
            .or(Some(&chosen))
            .and_then(|r| r.initial(window))
            .is_some()
        {
            return Err(RouteError::AlreadySet(peer, window.metric()));
        }
        let installed =
            exact
                .as_ref()
                .unwrap_or(&chosen)
                .with_initial(peer, window, segments.max(1));
        let (pid, start) = this_process();
        let entry = JournalEntry {
            pid,
            start,
            netns,
            peer,
            installed: installed.clone(),
            original: exact,
        };
        write_entry(&dir, &journal, &entry)?;
        if let Err(e) = ip(
            &installed.args("replace"),
            "install the initial-window route",
        ) {
            let _ = std::fs::remove_file(&journal);
            return Err(e);
        }
        Ok(InitialWindow {
            entry,
            journal,
            restored: false,
        })
    }

    /// The route installed.
    pub fn route(&self) -> &RouteSpec {
        &self.entry.installed
    }

    /// Put the original route back now (also done on drop); errors are returned here,
    /// ignored on drop.
    pub fn restore(mut self) -> Result<(), RouteError> {
        self.restored = true;
        restore_entry(&self.entry, &self.journal)
    }
}

impl Drop for InitialWindow {
    fn drop(&mut self) {
        if !self.restored {
            let _ = restore_entry(&self.entry, &self.journal);
        }
    }
}

fn restore_entry(e: &JournalEntry, journal: &Path) -> Result<(), RouteError> {
    let r = match &e.original {
        Some(orig) => ip(&orig.args("replace"), "restore the route to the peer"),
        None => {
            // Delete exactly what was installed (not a route someone added since).
            let mut del = RouteSpec {
                metrics: Vec::new(),
                ..e.installed.clone()
            };
            del.scope = None;
            ip(&del.args("del"), "remove the initial-window route")
        }
    };
    let _ = std::fs::remove_file(journal);
    r.map(|_| ())
}

/// Restore every route of this network namespace whose owner is gone (a crashed transfer);
/// returns what was restored, as text.
pub fn cleanup_stale() -> Vec<String> {
    cleanup_stale_in(&journal_dir())
}

fn cleanup_stale_in(dir: &Path) -> Vec<String> {
    let netns = netns_id();
    let mut done = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return done;
    };
    for f in rd.flatten() {
        let path = f.path();
        let name = f.file_name().to_string_lossy().into_owned();
        if !name.starts_with(&format!("route-{netns}-")) {
            continue;
        }
        let Some(e) = read_entry(&path) else {
            continue;
        };
        if e.netns != netns || owner_alive(&e) {
            continue;
        }
        if restore_entry(&e, &path).is_ok() {
            done.push(format!(
                "restored the route to {} left by pid {} ({})",
                e.peer,
                e.pid,
                e.original
                    .as_ref()
                    .map_or("deleted".to_string(), |o| o.to_string())
            ));
        }
    }
    done
}

/// Where journal entries live: `/run/tcptune` when writable (root), else
/// `$XDG_RUNTIME_DIR/tcptune`, else the temporary directory.
pub fn journal_dir() -> PathBuf {
    let run = PathBuf::from("/run/tcptune");
    if std::fs::create_dir_all(&run).is_ok() && writable(&run) {
        return run;
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        let p = PathBuf::from(x).join("tcptune");
        if std::fs::create_dir_all(&p).is_ok() {
            return p;
        }
    }
    // SAFETY: getuid has no failure mode.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("tcptune-{uid}"))
}

fn writable(p: &Path) -> bool {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap_or_default();
    // SAFETY: a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

fn file_safe(peer: IpAddr) -> String {
    peer.to_string().replace([':', '.'], "_")
}

fn read_entry(path: &Path) -> Option<JournalEntry> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn write_entry(dir: &Path, path: &Path, e: &JournalEntry) -> Result<(), RouteError> {
    let io = |source| RouteError::Journal {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let tmp = path.with_extension("tmp");
    let text = serde_json::to_vec_pretty(e).map_err(|e| io(std::io::Error::other(e)))?;
    std::fs::write(&tmp, text).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

fn netns_id() -> u64 {
    use std::os::unix::fs::MetadataExt;
    // The calling thread's namespace (a thread may have entered another one).
    std::fs::metadata("/proc/thread-self/ns/net").map_or(0, |m| m.ino())
}

fn this_process() -> (u32, u64) {
    let pid = std::process::id();
    (pid, crate::os::process_start_time(pid).unwrap_or(0))
}

fn owner_alive(e: &JournalEntry) -> bool {
    crate::os::process_start_time(e.pid).is_some_and(|s| s == e.start)
}

fn ip(args: &[String], op: &str) -> Result<String, RouteError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| RouteError::Ip {
            op: op.to_string(),
            message: format!("running `ip` (iproute2): {e}"),
        })?;
    if !out.status.success() {
        return Err(RouteError::Ip {
            op: op.to_string(),
            message: format!(
                "`ip {}`: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn route_get(peer: IpAddr) -> Result<RouteSpec, RouteError> {
    let text = ip(
        &[
            "-j".into(),
            "-d".into(),
            "route".into(),
            "get".into(),
            peer.to_string(),
        ],
        "look up the route to the peer",
    )?;
    parse_routes(&text, host_prefix(peer))
        .into_iter()
        .next()
        .ok_or_else(|| RouteError::Ip {
            op: "look up the route to the peer".into(),
            message: format!("no route to {peer} in `ip route get`'s answer"),
        })
}

fn route_show_exact(peer: IpAddr) -> Result<Option<RouteSpec>, RouteError> {
    let text = ip(
        &[
            "-j".into(),
            "-d".into(),
            "route".into(),
            "show".into(),
            "table".into(),
            "main".into(),
            "exact".into(),
            format!("{peer}/{}", host_prefix(peer)),
        ],
        "read the host route to the peer",
    )?;
    Ok(parse_routes(&text, host_prefix(peer)).into_iter().next())
}

/// Parse `ip -j route` output (a JSON array of routes).
pub fn parse_routes(text: &str, prefix: u8) -> Vec<RouteSpec> {
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_default();
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| RouteSpec::from_json(r, prefix))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_route_of_the_emulator_round_trips_through_ip_arguments() {
        let text = r#"[{"type":"unicast","dst":"198.19.0.1","dev":"tt0","protocol":"kernel","scope":"link","prefsrc":"198.18.0.1","flags":[]}]"#;
        let r = &parse_routes(text, 32)[0];
        assert_eq!(
            r.args("replace").join(" "),
            "route replace 198.19.0.1/32 dev tt0 proto kernel scope link src 198.18.0.1"
        );
        let peer: IpAddr = "198.19.0.1".parse().expect("addr");
        let w = r.with_initial(peer, Window::Congestion, 2000);
        assert_eq!(
            w.args("replace").join(" "),
            "route replace 198.19.0.1/32 dev tt0 proto static scope link src 198.18.0.1 initcwnd 2000"
        );
        assert_eq!(w.initial(Window::Congestion), Some(2000));
        assert_eq!(r.initial(Window::Congestion), None);
        // A receiver's: the initial receive window, beside whatever else the route sets.
        let both = w.with_initial(peer, Window::Receive, 700);
        assert_eq!(
            both.args("replace").join(" "),
            "route replace 198.19.0.1/32 dev tt0 proto static scope link src 198.18.0.1 initcwnd 2000 initrwnd 700"
        );
        assert_eq!(both.initial(Window::Receive), Some(700));
        assert_eq!(both.initial(Window::Congestion), Some(2000));
    }

    #[test]
    fn a_route_through_a_gateway_keeps_its_next_hop_and_metrics() {
        let text = r#"[{"dst":"203.0.113.9","gateway":"192.0.2.1","dev":"eth0","prefsrc":"192.0.2.2","flags":[],"uid":0,"cache":[],"metrics":[{"mtu":1400,"initcwnd":10}]}]"#;
        let r = &parse_routes(text, 32)[0];
        assert_eq!(r.initial(Window::Congestion), Some(10));
        let w = r.with_initial(
            "203.0.113.9".parse().expect("addr"),
            Window::Congestion,
            500,
        );
        assert_eq!(
            w.args("replace").join(" "),
            "route replace 203.0.113.9/32 via 192.0.2.1 dev eth0 proto static src 192.0.2.2 mtu 1400 initcwnd 500"
        );
        assert_eq!(w.to_string(), "203.0.113.9/32 via 192.0.2.1 dev eth0 proto static src 192.0.2.2 mtu 1400 initcwnd 500");
    }

    #[test]
    fn garbage_from_ip_is_no_route() {
        assert!(parse_routes("not json", 32).is_empty());
        assert!(parse_routes(r#"[{"dev":"eth0"}]"#, 32).is_empty());
    }

    #[test]
    fn ipv6_peers_get_a_128_bit_host_route() {
        let text = r#"[{"dst":"2001:db8::1","dev":"tt0","flags":[]}]"#;
        let r = &parse_routes(text, 128)[0];
        assert_eq!(r.dst, "2001:db8::1/128");
    }
}
