//! One emulated path with a `tcptune serve` on side B: the only code in the lab that touches
//! the emulator and child processes. Both children (`serve`, `send`) are supervised
//! (`tcptune_sys::process`): they die with the lab, even if it is killed with SIGKILL.
//! The scenario cells (a competing transfer, a path that changes) are run by [`scenario`].

mod scenario;

use crate::plan::{CellKey, Plan, Scenario};
use crate::record::{EmuRunStats, RunRecord};
use crate::runner::{env, interrupted};
use anyhow::{bail, Context as _};
use std::fs::File;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tcptune_core::Rate;
use tcptune_emu::{EmuStats, PathConfig, QueueLimit, Side, Topology, TopologyConfig};
use tcptune_sys::process::{self, Supervised, Waited};
use tcptune_transfer::report::Report;

/// What to bring up.
#[derive(Clone, Debug)]
pub(crate) struct BedSpec {
    /// Topology name (namespaces `tt-NAME-a`/`-b`).
    pub(crate) name: String,
    /// Round-trip time, microseconds.
    pub(crate) rtt_us: u64,
    /// Bottleneck rate.
    pub(crate) rate: Rate,
    /// MTU.
    pub(crate) mtu: u32,
    /// Queue in BDPs.
    pub(crate) queue_bdp: f64,
    /// Emulator seed.
    pub(crate) seed: u64,
    /// Namespace sysctls (both sides).
    pub(crate) sysctls: Vec<(String, String)>,
    /// The tcptune binary.
    pub(crate) tcptune: PathBuf,
    /// Server port inside the namespace.
    pub(crate) port: u16,
    /// Where logs go.
    pub(crate) log_dir: PathBuf,
    /// The server runs with `--careful-resume`.
    pub(crate) careful_resume: bool,
}

/// A running path and server.
pub(crate) struct Bed {
    spec: BedSpec,
    /// The path as brought up (what a path-change run puts back).
    path: PathConfig,
    topo: Option<Topology>,
    server: Option<Supervised>,
    peer: IpAddr,
}

/// A `tcptune send` running on side A ([`Bed::start_send`]).
struct Sending {
    child: Supervised,
    started: Instant,
    deadline: Instant,
    out_path: PathBuf,
    err_path: PathBuf,
}

impl Sending {
    /// Wait for the `send` to exit; killed at its deadline or when the lab is interrupted.
    fn wait(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        match self.child.wait_until(Some(self.deadline), interrupted)? {
            Waited::Exited(st) => Ok(st),
            Waited::Interrupted => {
                self.child.terminate()?;
                bail!("interrupted");
            }
            Waited::Deadline => {
                self.child.terminate()?;
                bail!(
                    "tcptune send still running {} s after its time limit; killed",
                    RUN_SLACK.as_secs()
                );
            }
        }
    }
}

/// How long to wait for the server to listen.
const SERVER_READY: Duration = Duration::from_secs(15);
/// Slack over the run's own time cap before the runner kills `send`.
const RUN_SLACK: Duration = Duration::from_secs(45);
/// SIGTERM to SIGKILL for `serve` and an interrupted `send`.
const GRACE: Duration = Duration::from_secs(2);

impl Bed {
    /// Bring the path up and start the server.
    pub(crate) fn up(spec: &BedSpec) -> anyhow::Result<Bed> {
        let path = PathConfig {
            delay: Duration::from_nanos(spec.rtt_us * 500),
            rate: Some(spec.rate),
            queue: QueueLimit::Bdp(spec.queue_bdp),
            mtu: spec.mtu,
            seed: spec.seed,
            ..PathConfig::default()
        };
        let mut tc = TopologyConfig::new(spec.name.clone(), path);
        tc.sysctls = spec.sysctls.clone();
        let topo = Topology::up(&tc).with_context(|| format!("emulator topology {}", spec.name))?;
        let peer = topo.addr(Side::B);
        let mut bed = Bed {
            spec: spec.clone(),
            path: tc.path.clone(),
            topo: Some(topo),
            server: None,
            peer,
        };
        bed.start_server()?;
        Ok(bed)
    }

    fn topo(&self) -> anyhow::Result<&Topology> {
        self.topo
            .as_ref()
            .context("the emulated path is already down")
    }

    fn start_server(&mut self) -> anyhow::Result<()> {
        let log_path = self
            .spec
            .log_dir
            .join(format!("serve-{}.log", self.spec.name));
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        let log2 = log
            .try_clone()
            .context("duplicating the server log handle")?;
        let mut cmd = self.topo()?.command(Side::B, self.spec.tcptune.as_os_str());
        cmd.args(["serve", "--port", &self.spec.port.to_string()]);
        if self.spec.careful_resume {
            cmd.arg("--careful-resume");
        }
        cmd.stdin(Stdio::null()).stdout(log).stderr(log2);
        let what = format!("{} serve on side B", self.spec.tcptune.display());
        let server = self
            .server
            .insert(process::spawn(&mut cmd, what)?.grace(GRACE));
        let pid = server.id();
        let deadline = Instant::now() + SERVER_READY;
        while !listening(pid, self.spec.port) {
            if let Some(s) = server.try_wait()? {
                bail!(
                    "tcptune serve exited ({s}) before listening; see {}",
                    log_path.display()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "tcptune serve did not listen on port {} within {} s; see {}",
                    self.spec.port,
                    SERVER_READY.as_secs(),
                    log_path.display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn ensure_server(&mut self) -> anyhow::Result<()> {
        let dead = match self.server.as_mut() {
            Some(c) => c.try_wait()?.is_some(),
            None => true,
        };
        if dead {
            self.server = None;
            self.start_server()?;
        }
        Ok(())
    }

    /// Set a sysctl in both namespaces.
    pub(crate) fn set_sysctl(&self, key: &str, value: &str) -> anyhow::Result<()> {
        let t = self.topo()?;
        for side in [Side::A, Side::B] {
            t.set_sysctl(side, key, value)
                .with_context(|| format!("in {}", t.netns(side)))?;
        }
        Ok(())
    }

    /// The emulator's counters.
    pub(crate) fn stats(&self) -> Option<EmuStats> {
        self.topo.as_ref().map(|t| t.stats())
    }

    /// Read sysctls inside side A's namespace (both sides get the same ones).
    pub(crate) fn read_sysctls(&self, keys: &[&str]) -> Vec<(String, String)> {
        let Some(t) = self.topo.as_ref() else {
            return Vec::new();
        };
        keys.iter()
            .map(|k| {
                let v = t
                    .read_sysctl(Side::A, k)
                    .unwrap_or_else(|e| format!("unreadable ({e})"));
                (k.to_string(), v.replace('\t', " "))
            })
            .collect()
    }

    /// Run one cell once and record it (never fails: a failed run is a record with an error).
    pub(crate) fn run(&mut self, key: &CellKey, rep: u32, plan: &Plan) -> RunRecord {
        let started = env::unix_now();
        let t0 = Instant::now();
        match self.try_run(key, rep, plan) {
            Ok(mut r) => {
                r.started_unix_s = started;
                r
            }
            Err(e) => RunRecord::failed(
                key.clone(),
                rep,
                started,
                t0.elapsed().as_secs_f64(),
                format!("{e:#}"),
            ),
        }
    }

    fn try_run(&mut self, key: &CellKey, rep: u32, plan: &Plan) -> anyhow::Result<RunRecord> {
        self.ensure_server()?;
        // Count this run alone (the counters restart within 100 ms).
        if let Some(t) = self.topo.as_ref() {
            t.reset_stats();
        }
        let max_time = Duration::from_millis(plan.max_time_ms);
        match key.scenario {
            Some(Scenario::Competing) => {
                let spec = plan
                    .extras
                    .competing
                    .as_ref()
                    .context("a competing cell without a [competing] section")?;
                let mut rec = self.run_competing(key, rep, plan, spec)?;
                self.record_emu(&mut rec);
                return Ok(rec);
            }
            Some(Scenario::PathChange) => {
                let spec = plan
                    .extras
                    .path_change
                    .iter()
                    .find(|p| p.rtt_us == key.rtt_us)
                    .context("a path-change cell without its [path_change] section")?;
                let mut rec = self.run_path_change(key, rep, plan, spec)?;
                self.record_emu(&mut rec);
                return Ok(rec);
            }
            None => {}
        }
        let mut args = self.send_args(key, plan);
        // A size sweep's cell moves its own size; every other cell the plan's messages.
        let messages = key.bytes.map_or(plan.messages, |b| {
            b.div_ceil(plan.message_size.0.max(1)).max(1)
        });
        args.extend([
            "-n".into(),
            messages.to_string(),
            "--max-time".into(),
            max_time_arg(max_time),
        ]);
        // Every run on a new path measures it afresh (a database shared by the runs would
        // make their order matter). A known path's run gets a database of its own that one
        // transfer of the same cell has just recorded the path in.
        if key.path.is_new() {
            args.push("--no-path-db".into());
        } else {
            let db = self.spec.log_dir.join("known-path.sqlite");
            for suffix in ["", "-wal", "-shm"] {
                let mut f = db.clone().into_os_string();
                f.push(suffix);
                let _ = std::fs::remove_file(f);
            }
            args.push("--path-db".into());
            args.push(db.display().to_string());
            self.warm_up(&args, max_time)?;
        }
        let sending = self.start_send(&args, "send", max_time)?;
        let (mut rec, _) = self.finish_send(sending, key, rep)?;
        self.record_emu(&mut rec);
        Ok(rec)
    }

    /// The arguments of `tcptune send` every run shares (target, streams, message size,
    /// mode, congestion control); the workload comes after.
    fn send_args(&self, key: &CellKey, plan: &Plan) -> Vec<String> {
        let target = match self.peer {
            IpAddr::V4(a) => format!("{a}:{}", self.spec.port),
            IpAddr::V6(a) => format!("[{a}]:{}", self.spec.port),
        };
        let mut args: Vec<String> = vec![
            "send".into(),
            target,
            "-P".into(),
            key.streams.to_string(),
            "-l".into(),
            plan.message_size.0.to_string(),
            "--tune".into(),
            tune_arg(key, plan),
            "--json".into(),
        ];
        // A congestion sweep's cell runs its own algorithm.
        if let Some(cc) = key.cc.as_ref().or(plan.congestion.as_ref()) {
            args.push("-C".into());
            args.push(cc.clone());
        }
        args
    }

    /// Start `tcptune send ARGS` on side A, its output in `logs/TAG.out` and `TAG.err`;
    /// it is killed if it runs `limit` plus [`RUN_SLACK`].
    fn start_send(&self, args: &[String], tag: &str, limit: Duration) -> anyhow::Result<Sending> {
        let out_path = self.spec.log_dir.join(format!("{tag}.out"));
        let err_path = self.spec.log_dir.join(format!("{tag}.err"));
        let out =
            File::create(&out_path).with_context(|| format!("creating {}", out_path.display()))?;
        let err =
            File::create(&err_path).with_context(|| format!("creating {}", err_path.display()))?;
        let started = Instant::now();
        let mut cmd = self.topo()?.command(Side::A, self.spec.tcptune.as_os_str());
        cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
        let child = process::spawn(&mut cmd, format!("tcptune send on side A ({tag})"))?;
        Ok(Sending {
            child: child.grace(GRACE),
            started,
            deadline: started + limit + RUN_SLACK,
            out_path,
            err_path,
        })
    }

    /// Wait for a `send` to end and make its record (and return its report, when it wrote
    /// one).
    fn finish_send(
        &self,
        mut s: Sending,
        key: &CellKey,
        rep: u32,
    ) -> anyhow::Result<(RunRecord, Report)> {
        let status = s.wait()?;
        let wall = s.started.elapsed().as_secs_f64();
        let stdout = std::fs::read_to_string(&s.out_path).unwrap_or_default();
        let stderr = std::fs::read_to_string(&s.err_path).unwrap_or_default();
        let report: Report = match serde_json::from_str(&stdout) {
            Ok(r) => r,
            Err(e) => {
                self.keep_failure(key, rep, &stdout, &stderr);
                bail!(
                    "tcptune send exited with {status} without a JSON report ({e}); stderr: {}",
                    tail(&stderr)
                );
            }
        };
        let mut rec = RunRecord::from_report(key.clone(), rep, 0.0, wall, &report);
        if !status.success() && rec.error.is_none() && !rec.complete && !rec.capped {
            rec.ok = false;
            rec.error = Some(format!("exit {status}: {}", tail(&stderr)));
        }
        if !rec.ok {
            self.keep_failure(key, rep, &stdout, &stderr);
        }
        Ok((rec, report))
    }

    /// Add the emulator's counters of the run (path 0, data direction) to `rec`.
    fn record_emu(&self, rec: &mut RunRecord) {
        // The counters are refreshed every 100 ms.
        std::thread::sleep(Duration::from_millis(120));
        if let Some(a) = self.stats() {
            rec.emu = Some(EmuRunStats {
                packets: a.a_to_b.packets_out,
                drops: a.a_to_b.drops.total(),
                queue_peak_bytes: a.a_to_b.queue_peak_bytes,
                lateness_p99_us: Some(a.a_to_b.lateness.p99_us),
            });
        }
    }

    /// The transfer that records the path for a known-path run: the same command, its
    /// output in `logs/warm-up.out` and `.err` (not a record); it must succeed.
    fn warm_up(&mut self, args: &[String], max_time: Duration) -> anyhow::Result<()> {
        let what = "the warm-up transfer that records the path";
        let status = self
            .start_send(args, "warm-up", max_time)?
            .wait()
            .context(what)?;
        if !status.success() {
            bail!("{what} exited with {status}");
        }
        Ok(())
    }

    fn keep_failure(&self, key: &CellKey, rep: u32, stdout: &str, stderr: &str) {
        let name = format!("failed-{}-rep{rep}.txt", key.id().replace(['/', ':'], "_"));
        let _ = std::fs::write(
            self.spec.log_dir.join(name),
            format!("== stdout ==\n{stdout}\n== stderr ==\n{stderr}\n"),
        );
    }

    /// Stop the server and tear the path down.
    pub(crate) fn down(mut self) {
        self.stop_server();
        if let Some(t) = self.topo.take() {
            if let Err(e) = t.down() {
                eprintln!("tcptune lab: tearing down {}: {e}", self.spec.name);
            }
        }
    }

    fn stop_server(&mut self) {
        if let Some(mut c) = self.server.take() {
            // SIGTERM first so it can close cleanly, then SIGKILL.
            if let Err(e) = c.terminate() {
                eprintln!("tcptune lab: {e}");
            }
        }
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.stop_server();
    }
}

/// The `--tune` value: `manual` gets the path's configured rate (the paper's manual tuning
/// measures bandwidth with pathchar; the lab knows it), everything else as planned.
fn tune_arg(key: &CellKey, plan: &Plan) -> String {
    if key.tune == "manual" {
        format!("manual:{}bit", plan.rate.0)
    } else {
        key.tune.clone()
    }
}

/// The `--max-time` value for `tcptune send`: seconds (`6`, `6.5`).
fn max_time_arg(d: Duration) -> String {
    format!("{}", d.as_secs_f64())
}

pub(crate) fn tail(s: &str) -> String {
    let t: Vec<&str> = s.lines().rev().take(5).collect();
    let mut t: Vec<&str> = t.into_iter().rev().collect();
    t.retain(|l| !l.trim().is_empty());
    if t.is_empty() {
        "(empty)".into()
    } else {
        t.join(" | ")
    }
}

/// Whether process `pid`'s network namespace has a TCP socket listening on `port`.
pub(crate) fn listening(pid: u32, port: u16) -> bool {
    ["tcp", "tcp6"].iter().any(|f| {
        let path = Path::new("/proc").join(pid.to_string()).join("net").join(f);
        std::fs::read_to_string(path)
            .map(|t| listens_on(&t, port))
            .unwrap_or(false)
    })
}

/// Parse `/proc/net/tcp` text: a line in state LISTEN (0A) on `port`.
fn listens_on(proc_net_tcp: &str, port: u16) -> bool {
    let want = format!(":{port:04X}");
    proc_net_tcp.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_tcp_listen_lines_are_recognized() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue\n   0: 00000000:14BE 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0\n   1: 0100007F:0016 0100007F:A000 01 0 0\n";
        assert!(listens_on(t, 5310));
        assert!(!listens_on(t, 22), "port 22 is established, not listening");
        assert!(!listens_on(t, 80));
        assert_eq!(tail("a\nb\n\nc\n"), "a | b | c");
    }
}
