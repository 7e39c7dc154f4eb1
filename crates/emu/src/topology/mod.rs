//! [`Topology`]: two namespaces joined by the emulated path, as a guard.

use crate::addr::{extra_addr_cmds, path_addr};
use crate::config::{PathConfig, Side, TopologyConfig};
use crate::error::EmuError;
use crate::mode::{self, Facts, Mode, ModeChoice};
use crate::ns::{command_in, NsRef};
use crate::path::DEFAULT_MAX_BURST;
use crate::paths::Paths;
use crate::rootless::{self, Rootless};
use crate::state::{self, OwnerKind, RootlessRecord, TopologyRecord, RECORD_SCHEMA_VERSION};
use crate::statedir::StateLock;
use crate::stats::{EmuStats, PathStats, STATS_SCHEMA_VERSION};
use crate::sys;
use crate::worker::{Framing, Shared, Worker};

mod control;
mod inside;
pub use control::PathControl;
use std::net::{IpAddr, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tcptune_core::Time;

pub use crate::addr::{ADDR_A, ADDR_B, TUN_NAME};

/// How the driver runs (the defaults are what the benchmarks measured best).
#[derive(Clone, Debug)]
pub struct UpOptions {
    /// Pass GSO/TSO super-packets through (`IFF_VNET_HDR` + `TUNSETOFFLOAD`). Without it
    /// every packet costs a read and a write, and rates above ~0.5 Gbit/s at MTU 1500 are
    /// not accurate.
    pub offload: bool,
    /// Spin (instead of sleeping) this long before a packet is due (50 us: with real-time
    /// priority a timer wake-up is 20-60 us late; longer spins only burn the core).
    pub spin: Duration,
    /// Run the emulator threads as SCHED_FIFO (real-time, priority 10) if permitted. On a
    /// host whose cores are busy this is what keeps packets on time (the 99th percentile of
    /// lateness drops from milliseconds to about 0.2 ms here).
    pub realtime: bool,
    /// Longest a segment of a super-packet waits for the rest of it on a rate-limited path.
    pub max_burst: Duration,
    /// Who owns the topology (shown by `emu status`; `emu down` only stops daemons).
    pub owner: OwnerKind,
    /// Root or rootless mode (see [`crate::mode`]); by default what `TCPTUNE_EMU_MODE` says,
    /// or `auto`.
    pub mode: ModeChoice,
}

impl Default for UpOptions {
    fn default() -> Self {
        UpOptions {
            offload: true,
            spin: Duration::from_micros(50),
            realtime: true,
            max_burst: DEFAULT_MAX_BURST,
            owner: OwnerKind::Library,
            mode: ModeChoice::from_env(),
        }
    }
}

/// A unique topology name for this process: `PREFIX-PID-N` (for tests and tools that make
/// topologies concurrently).
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}

/// A running emulated topology: namespaces `tt-NAME-a` and `tt-NAME-b`, a TUN device in
/// each, and two emulator threads in this process (A→B and B→A). In rootless mode (see
/// [`crate::mode`]) the namespaces are unnamed, inside a user namespace of their own, and
/// joined to the emulator by veth pairs and packet sockets instead of TUN devices.
///
/// # Use
///
/// 1. [`Topology::up`] builds everything and returns once a probe has crossed the path both
///    ways.
/// 2. Run programs with [`command`](Self::command) (another process in a namespace), make
///    sockets inside a namespace with [`socket`](Self::socket),
///    [`tcp_listener`](Self::tcp_listener), [`tcp_connect`](Self::tcp_connect) and
///    [`udp_socket`](Self::udp_socket) (both modes), or run code with
///    [`run_in`](Self::run_in) (a thread of this process in a namespace: root mode only);
///    read counters with [`stats`](Self::stats).
/// 3. [`down`](Self::down) (or drop) stops the threads, kills every process left in the two
///    namespaces, and removes the devices, namespaces and state files. Dropping during a
///    panic does the same.
pub struct Topology {
    cfg: TopologyConfig,
    mode: Mode,
    facts: Facts,
    netns: [String; 2],
    ns: Vec<NsRef>,
    ns_created: [bool; 2],
    /// Rootless mode: the user and emulator namespaces (the sides are in `ns`).
    rootless: Option<Rootless>,
    claimed: bool,
    /// The emulator's devices: TUN devices (root) or packet sockets (rootless), A then B.
    tuns: Vec<Arc<OwnedFd>>,
    workers: Vec<JoinHandle<()>>,
    housekeeper: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    started: Instant,
    final_stats: Option<EmuStats>,
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topology")
            .field("name", &self.cfg.name)
            .field("mode", &self.mode)
            .field("netns", &self.netns)
            .finish()
    }
}

impl Topology {
    /// Bring a topology up with the default [`UpOptions`].
    pub fn up(cfg: &TopologyConfig) -> Result<Topology, EmuError> {
        Topology::up_with(cfg, &UpOptions::default())
    }

    /// Bring a topology up.
    pub fn up_with(cfg: &TopologyConfig, opts: &UpOptions) -> Result<Topology, EmuError> {
        cfg.validate()?;
        let (mode, facts) = mode::detect(opts.mode);
        let mode = mode?;
        let name = cfg.name.clone();
        let netns = [format!("tt-{name}-a"), format!("tt-{name}-b")];
        let pid = std::process::id();
        let mut record = TopologyRecord {
            schema_version: RECORD_SCHEMA_VERSION,
            name: name.clone(),
            owner_kind: opts.owner,
            owner_pid: pid,
            owner_start: tcptune_sys::process::start_time(pid).unwrap_or(0),
            netns: netns.clone(),
            addrs: [IpAddr::V4(ADDR_A), IpAddr::V4(ADDR_B)],
            path: cfg.path.clone(),
            sysctls: cfg.sysctls.clone(),
            created_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            rootless: None,
        };
        let mut topo = Topology {
            cfg: cfg.clone(),
            mode,
            facts,
            netns,
            ns: Vec::new(),
            ns_created: [false; 2],
            rootless: None,
            claimed: false,
            tuns: Vec::new(),
            workers: Vec::new(),
            housekeeper: None,
            shared: Arc::new(Shared::default()),
            started: Instant::now(),
            final_stats: None,
        };
        {
            let _lock = StateLock::acquire()?;
            for e in state::cleanup_stale_locked().errors {
                eprintln!("tcptune emu: cleaning up after a dead owner: {e}");
            }
            state::claim(&record)?;
            topo.claimed = true;
        }
        // From here on, an error drops `topo`, which removes whatever was made.
        match mode {
            Mode::Root => topo.build_root(opts)?,
            Mode::Rootless => topo.build_rootless(opts, &mut record)?,
        }
        topo.start_workers(opts);
        topo.wait_ready()?;
        Ok(topo)
    }

    /// Root mode: named namespaces and a TUN device in each.
    fn build_root(&mut self, opts: &UpOptions) -> Result<(), EmuError> {
        for side in [Side::A, Side::B] {
            let ns = self.netns[side.index()].clone();
            sys::create_netns(&ns)?;
            self.ns_created[side.index()] = true;
            self.ns.push(NsRef {
                user: None,
                net: Arc::new(sys::open_netns(&ns)?),
                label: ns,
            });
        }
        for side in [Side::A, Side::B] {
            let (tun, netdev) = self.setup_side(side, opts.offload)?;
            self.tuns.push(Arc::new(tun));
            if let Ok(mut n) = self.shared.netdev.lock() {
                n.push(netdev);
            }
        }
        Ok(())
    }

    /// Rootless mode: a user namespace holding the emulator's namespace and the two sides,
    /// joined by veth pairs; the record learns where `emu exec` finds the namespaces.
    fn build_rootless(
        &mut self,
        opts: &UpOptions,
        record: &mut TopologyRecord,
    ) -> Result<(), EmuError> {
        if !opts.offload {
            self.shared.note(
                "rootless mode always passes GSO/TSO super-packets through (--no-offload is for \
                 TUN devices)"
                    .into(),
            );
        }
        let rl = Rootless::create(&self.netns)?;
        self.ns = rl.sides.to_vec();
        let ns_ids = [rl.sides[0].id()?, rl.sides[1].id()?];
        let wired = rl.wire(
            self.cfg.path.mtu,
            [self.addr(Side::A), self.addr(Side::B)],
            &self.extra_addrs(),
            &self.cfg.sysctls,
        )?;
        self.rootless = Some(rl);
        record.rootless = Some(RootlessRecord {
            ns_fds: [self.ns[0].net.as_raw_fd(), self.ns[1].net.as_raw_fd()],
            ns_ids,
        });
        state::rewrite(record)?;
        let [sa, sb] = wired.sockets;
        self.tuns = vec![Arc::new(sa), Arc::new(sb)];
        if let Ok(mut p) = self.shared.packet_inputs.lock() {
            *p = self.tuns.clone();
        }
        if let Ok(mut n) = self.shared.netdev.lock() {
            n.extend(wired.netdev);
        }
        Ok(())
    }

    /// The mode this topology runs in.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// One line: the mode and what it cannot do (see [`Mode::summary`]).
    pub fn mode_summary(&self) -> String {
        self.mode.summary(&self.facts)
    }

    /// Configure `side`'s namespace and create its TUN device; also opens that namespace's
    /// `/proc/net/dev` for the device drop counter.
    fn setup_side(&self, side: Side, offload: bool) -> Result<(OwnedFd, std::fs::File), EmuError> {
        let ns = self.netns(side).to_string();
        let (me, peer) = (self.addr(side), self.addr(side.peer()));
        let mtu = self.cfg.path.mtu;
        let sysctls = self.cfg.sysctls.clone();
        let (tun, netdev) = self.try_run_in(side, move || -> Result<_, EmuError> {
            // No IPv6 on the emulated link: no router solicitations or MLD crossing it.
            sys::write_sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
            sys::write_sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
            for (k, v) in &sysctls {
                sys::write_sysctl(k, v)?;
            }
            let tun = sys::open_tun(TUN_NAME, offload)?;
            let dev = "/proc/thread-self/net/dev";
            let netdev =
                std::fs::File::open(dev).map_err(|e| EmuError::sys(format!("opening {dev}"), e))?;
            Ok((tun, netdev))
        })??;
        let mut cmds = format!(
            "link set lo up\n\
             link set dev {TUN_NAME} mtu {mtu} txqueuelen 10000 up\n\
             addr add {me}/32 peer {peer}/32 dev {TUN_NAME}\n"
        );
        cmds.push_str(&extra_addr_cmds(
            side.index(),
            self.addr(Side::A),
            &self.extra_addrs(),
        ));
        sys::ip(&["-n", &ns, "-batch", "-"], Some(&cmds))?;
        Ok((tun, netdev))
    }

    fn start_workers(&mut self, opts: &UpOptions) {
        let epoch = Instant::now();
        for dir in 0..2 {
            let (input, output) = (self.tuns[dir].clone(), self.tuns[1 - dir].clone());
            let framing = match self.mode {
                Mode::Root => Framing::Tun,
                Mode::Rootless => {
                    // Out of the other side's veth end, to that side's tt0.
                    let mut dst_src = [0u8; 12];
                    dst_src[..6].copy_from_slice(&rootless::mac(1 - dir, true));
                    dst_src[6..].copy_from_slice(&rootless::mac(1 - dir, false));
                    Framing::Ethernet { dst_src }
                }
            };
            let worker = Worker {
                dir,
                name: format!(
                    "{} {}",
                    self.cfg.name,
                    if dir == 0 { "a->b" } else { "b->a" }
                ),
                input,
                output,
                vnet: opts.offload || self.mode == Mode::Rootless,
                framing,
                paths: Paths::new(self.cfg.paths(), dir, opts.max_burst),
                spin: opts.spin,
                realtime: opts.realtime,
                epoch,
                shared: self.shared.clone(),
                window_start: Time::ZERO,
            };
            let name = format!("tt-emu-{}", if dir == 0 { "ab" } else { "ba" });
            match std::thread::Builder::new()
                .name(name)
                .spawn(move || worker.run())
            {
                Ok(h) => self.workers.push(h),
                Err(e) => self
                    .shared
                    .failures
                    .lock()
                    .map(|mut f| f.push(format!("spawning the emulator thread: {e}")))
                    .unwrap_or(()),
            }
        }
        let shared = self.shared.clone();
        let name = self.cfg.name.clone();
        let path = self.cfg.describe_paths();
        let started = self.started;
        self.housekeeper = std::thread::Builder::new()
            .name("tt-emu-stats".into())
            .spawn(move || {
                let mut last = Instant::now() - Duration::from_secs(1);
                while !shared.stop.load(Ordering::Relaxed) {
                    if last.elapsed() >= Duration::from_millis(250) {
                        let s = snapshot(&shared, &name, &path, started);
                        state::write_stats(&name, &s);
                        last = Instant::now();
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
            .ok();
    }

    /// Send UDP probes A→B and back over every path until one makes the round trip on each.
    fn wait_ready(&self) -> Result<(), EmuError> {
        for (index, p) in self.cfg.paths().enumerate() {
            self.probe_path(index, p)?;
        }
        self.reset_stats();
        Ok(())
    }

    /// Probe path `index` (`p`) from side A to side B's address of that path and back.
    fn probe_path(&self, index: usize, p: &PathConfig) -> Result<(), EmuError> {
        let per_try = p.rtt() + p.jitter * 2 + Duration::from_millis(200);
        let (tries, required) = match p.loss {
            l if l <= 0.0 => (10, true),
            l if l <= 0.5 => (30, true),
            _ => (3, false),
        };
        let sock = |side: Side, addr: IpAddr| -> Result<UdpSocket, EmuError> {
            let fd = self.socket(side, libc::AF_INET, libc::SOCK_DGRAM, 0)?;
            tcptune_sys::net::bind(&fd, &std::net::SocketAddr::new(addr, 0))?;
            let s = UdpSocket::from(fd);
            s.set_read_timeout(Some(per_try))
                .map_err(|e| EmuError::sys("setting the probe timeout", e))?;
            Ok(s)
        };
        let target = IpAddr::V4(path_addr(index));
        let (a, b) = (sock(Side::A, self.addr(Side::A))?, sock(Side::B, target)?);
        let b_addr = b
            .local_addr()
            .map_err(|e| EmuError::sys("reading the probe address", e))?;
        let a_addr = a
            .local_addr()
            .map_err(|e| EmuError::sys("reading the probe address", e))?;
        let mut buf = [0u8; 64];
        // Any of this path's probes proves it, the one of an earlier try too: a first probe
        // that came back late (the forwarder starting on a loaded host) would otherwise be
        // what every later try reads and rejects, each try one probe behind.
        let prefix = format!("tcptune-probe {index} ");
        let ours = |n: usize, buf: &[u8]| buf[..n].starts_with(prefix.as_bytes());
        for i in 0..tries {
            if let Some(why) = self.failure() {
                return Err(EmuError::NotReady(why));
            }
            let msg = format!("{prefix}{i}");
            let _ = a.send_to(msg.as_bytes(), b_addr);
            let n = match b.recv_from(&mut buf) {
                Ok((n, from)) if from == a_addr && ours(n, &buf) => n,
                _ => continue,
            };
            let _ = b.send_to(&buf[..n], a_addr);
            if matches!(a.recv_from(&mut buf), Ok((n, _)) if ours(n, &buf)) {
                return Ok(());
            }
        }
        if required {
            Err(EmuError::NotReady(format!(
                "no probe made the round trip {ADDR_A} -> {target} -> {ADDR_A} over path {index} \
                 in {tries} tries"
            )))
        } else {
            Ok(())
        }
    }

    fn failure(&self) -> Option<String> {
        self.shared
            .failures
            .lock()
            .ok()
            .and_then(|f| f.first().cloned())
    }

    /// The configuration.
    pub fn config(&self) -> &TopologyConfig {
        &self.cfg
    }

    /// Side B's addresses of the extra paths (path 1 on).
    fn extra_addrs(&self) -> Vec<IpAddr> {
        (1..=self.cfg.extra_paths.len())
            .map(|i| IpAddr::V4(path_addr(i)))
            .collect()
    }

    /// A handle that changes the paths while they run (see [`PathControl`]).
    /// [`config`](Self::config) keeps saying what the topology came up with; the handle's
    /// [`PathControl::get`] says what a path runs with now.
    pub fn path_control(&self) -> PathControl {
        PathControl::new(self.shared.clone(), self.cfg.paths().cloned().collect())
    }

    /// The address of `side` (inside its namespace).
    pub fn addr(&self, side: Side) -> IpAddr {
        IpAddr::V4(match side {
            Side::A => ADDR_A,
            Side::B => ADDR_B,
        })
    }

    /// The network namespace of `side` (`tt-NAME-a` or `tt-NAME-b`).
    pub fn netns(&self, side: Side) -> &str {
        &self.netns[side.index()]
    }

    /// A command that runs `program` inside `side`'s namespace, with `TCPTUNE_SELF` set to
    /// that side's address and `TCPTUNE_PEER` to the other side's. Processes still running
    /// in the namespace when the topology goes down are killed. In rootless mode the command
    /// also joins the topology's user namespace, where it is root.
    pub fn command(
        &self,
        side: Side,
        program: impl AsRef<std::ffi::OsStr>,
    ) -> std::process::Command {
        command_in(
            &self.ns[side.index()],
            self.addr(side),
            self.addr(side.peer()),
            program,
        )
    }

    /// Run `f` on a thread that has entered `side`'s namespace (sockets it creates live in
    /// that namespace, also after `f` returns). Root mode only: in rootless mode this
    /// process cannot enter the namespaces; make sockets with [`socket`](Self::socket) and
    /// friends, or run a program with [`command`](Self::command).
    ///
    /// # Panics
    ///
    /// If the thread cannot enter the namespace (see [`try_run_in`](Self::try_run_in)), or
    /// if `f` panics.
    pub fn run_in<T: Send>(&self, side: Side, f: impl FnOnce() -> T + Send) -> T {
        match self.try_run_in(side, f) {
            Ok(v) => v,
            Err(e) => panic!("run_in {}: {e}", self.netns(side)),
        }
    }

    /// Like [`run_in`](Self::run_in), returning an error if the namespace cannot be entered
    /// (always in rootless mode: [`EmuError::RootOnly`]).
    pub fn try_run_in<T: Send>(
        &self,
        side: Side,
        f: impl FnOnce() -> T + Send,
    ) -> Result<T, EmuError> {
        if self.mode == Mode::Rootless {
            return Err(EmuError::RootOnly(format!(
                "running code of this process inside {}",
                self.netns(side)
            )));
        }
        let fd = self.ns[side.index()].net.as_raw_fd();
        let ns = self.netns(side).to_string();
        std::thread::scope(|s| {
            let h = s.spawn(move || -> Result<T, EmuError> {
                sys::enter_netns(fd, &ns)?;
                Ok(f())
            });
            match h.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Live counters of both directions (refreshed every 100 ms by the emulator threads).
    pub fn stats(&self) -> EmuStats {
        if let Some(s) = &self.final_stats {
            return s.clone();
        }
        snapshot(
            &self.shared,
            &self.cfg.name,
            &self.cfg.describe_paths(),
            self.started,
        )
    }

    /// Start counting from zero (counters, queue peaks, lateness) within 100 ms.
    pub fn reset_stats(&self) {
        for dir in 0..2 {
            let now = self.shared.device_drops(dir);
            self.shared.device_drop_base[dir].store(now, Ordering::SeqCst);
        }
        for r in &self.shared.reset {
            r.store(true, Ordering::SeqCst);
        }
        let deadline = Instant::now() + Duration::from_millis(500);
        while self.shared.reset.iter().any(|r| r.load(Ordering::SeqCst))
            && self.shared.running.iter().all(|r| r.load(Ordering::SeqCst))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Errors the emulator threads reported (empty when all is well).
    pub fn failures(&self) -> Vec<String> {
        self.shared
            .failures
            .lock()
            .map(|f| f.clone())
            .unwrap_or_default()
    }

    /// Warnings of the emulator threads (for example: real-time priority not permitted).
    pub fn notes(&self) -> Vec<String> {
        self.shared
            .notes
            .lock()
            .map(|f| f.clone())
            .unwrap_or_default()
    }

    /// Whether both emulator threads are running.
    pub fn is_running(&self) -> bool {
        self.shared.running.iter().all(|r| r.load(Ordering::SeqCst))
    }

    /// Tear everything down and return the final counters.
    pub fn down(mut self) -> Result<EmuStats, EmuError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<EmuStats, EmuError> {
        self.shared.stop.store(true, Ordering::SeqCst);
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
        if let Some(h) = self.housekeeper.take() {
            let _ = h.join();
        }
        let mut stats = self.stats();
        stats.running = false;
        self.final_stats = Some(stats.clone());
        let mut first_err = None;
        for (i, ns) in self.netns.iter().enumerate() {
            if self.ns_created[i] {
                if let Err(e) = sys::kill_netns_processes(ns, Duration::from_millis(500)) {
                    first_err.get_or_insert(e);
                }
            }
        }
        if self.rootless.is_some() {
            for ns in &self.ns {
                let killed = ns.id().and_then(|id| {
                    sys::kill_ns_processes(id, &ns.label, Duration::from_millis(500))
                });
                if let Err(e) = killed {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Ok(mut p) = self.shared.packet_inputs.lock() {
            p.clear();
        }
        self.tuns.clear();
        // Closing the last descriptors removes a rootless topology's namespaces, links and
        // sockets.
        self.ns.clear();
        self.rootless = None;
        for (i, ns) in self.netns.iter().enumerate() {
            if std::mem::take(&mut self.ns_created[i]) {
                if let Err(e) = sys::delete_netns(ns) {
                    first_err.get_or_insert(e);
                }
            }
        }
        if std::mem::take(&mut self.claimed) {
            state::remove_files(&self.cfg.name);
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(stats),
        }
    }
}

fn snapshot(shared: &Shared, name: &str, path: &str, started: Instant) -> EmuStats {
    let mut dirs = [0, 1].map(|i| {
        let mut paths = shared.snapshots[i]
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        if paths.is_empty() {
            paths.push(Default::default());
        }
        paths[0].drops.device = shared
            .device_drops(i)
            .saturating_sub(shared.device_drop_base[i].load(Ordering::SeqCst));
        paths.into_iter()
    });
    let a_to_b = dirs[0].next().unwrap_or_default();
    let b_to_a = dirs[1].next().unwrap_or_default();
    let [ab, ba] = dirs;
    let extra = ab
        .zip(ba)
        .map(|(a_to_b, b_to_a)| PathStats { a_to_b, b_to_a })
        .collect();
    EmuStats {
        schema_version: STATS_SCHEMA_VERSION,
        name: name.to_string(),
        path: path.to_string(),
        uptime_s: started.elapsed().as_secs_f64(),
        running: shared.running.iter().all(|r| r.load(Ordering::SeqCst)),
        a_to_b,
        b_to_a,
        extra,
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        if self.claimed
            || self.ns_created.iter().any(|&c| c)
            || self.rootless.is_some()
            || !self.workers.is_empty()
        {
            if let Err(e) = self.teardown() {
                eprintln!("tcptune emu: tearing down '{}': {e}", self.cfg.name);
            }
        }
    }
}
