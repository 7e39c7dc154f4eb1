//! The runner of `tcptune lab --psc` (the I/O; the arrangement is explained in
//! [`crate::psc`]).
//!
//! Order of work: check privileges and the binary, take the lab lock, clean up after a dead
//! lab, write `psc_plan.json` and `meta.json`, bring up ONE topology with two paths (path 0
//! remote, the extra path local), start `tcptune serve --memory-budget` in side A, then for
//! each repetition run every cell in a seeded random order: start the cell's clients in
//! side B at once (`tcptune send --reverse -P 1 --bind <its path's address>`), sample the
//! server's sockets with `ss -tmi` every 500 ms until every client ended, and append the
//! run's record to `psc_results.jsonl`. At the end (also after an error or Ctrl-C) the
//! clients and the server are stopped, the topology is torn down (every process left in its
//! namespaces is killed with it), `meta.json` is completed and the report is built.
//! Nothing global is changed: no host sysctl is touched (the namespaces' own defaults hold
//! 400 kB buffers), so there is nothing to restore; every child is supervised and dies
//! with the lab even on SIGKILL, and the next lab removes a dead lab's namespaces.

use super::bed::{listening, tail};
use super::{
    base_sysctls, env, interrupted, lock, report_cleanup, shuffle, unique_name, Unavailable,
};
use crate::psc::plan::{tune_of, PscCell, PscPlan, LOCAL, REMOTE};
use crate::psc::record::{
    parse_ss, ConnResult, MemSample, PathRunStats, PscRecord, PSC_RECORD_SCHEMA_VERSION,
};
use crate::psc::report::{self, PscBuilt, PSC_PLAN_FILE, PSC_RESULTS_FILE};
use crate::record::LabMeta;
use crate::results::{self, write_json};
use crate::runner::progress::{fmt_secs, Progress};
use anyhow::{bail, Context as _};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tcptune_core::Rate;
use tcptune_emu::mode::{self as emu_mode, Mode, ModeChoice};
use tcptune_emu::{path_addr, PathConfig, QueueLimit, Side, Topology, TopologyConfig};
use tcptune_sys::process::{self, signals, Descendants, Supervised};
use tcptune_transfer::report::Report;

/// How to run PSC's experiments.
#[derive(Clone, Debug)]
pub struct PscRunnerConfig {
    /// The `tcptune` binary.
    pub tcptune: PathBuf,
    /// Results folder (created; must not already hold PSC results).
    pub out: PathBuf,
    /// The plan.
    pub plan: PscPlan,
    /// Show progress.
    pub progress: bool,
    /// The server's port in side A.
    pub port: u16,
}

/// What a finished (or interrupted) PSC lab produced.
#[derive(Debug)]
pub struct PscOutcome {
    /// The results folder.
    pub dir: PathBuf,
    /// Every output.
    pub built: PscBuilt,
    /// Ctrl-C stopped it; the results are partial.
    pub interrupted: bool,
}

/// How long to wait for the server to listen.
const SERVER_READY: Duration = Duration::from_secs(15);
/// Slack over a transfer's length before its clients are killed.
const RUN_SLACK: Duration = Duration::from_secs(40);
/// SIGTERM to SIGKILL.
const GRACE: Duration = Duration::from_secs(2);
/// How often the server's sockets are sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);
/// Pause between runs, for the last run's connections to close.
const BETWEEN_RUNS: Duration = Duration::from_millis(700);

/// Run PSC's experiments from start to end.
pub fn run_psc(cfg: &PscRunnerConfig) -> anyhow::Result<PscOutcome> {
    cfg.plan.validate()?;
    let (mode, facts) = emu_mode::detect(ModeChoice::from_env());
    let mode =
        mode.map_err(|e| Unavailable(format!("tcptune lab --psc cannot build its paths: {e}")))?;
    if !cfg.tcptune.exists() {
        bail!(Unavailable(format!(
            "the tcptune binary {} does not exist",
            cfg.tcptune.display()
        )));
    }
    let _lock = match mode {
        Mode::Root => lock::LabLock::acquire()?,
        Mode::Rootless => lock::LabLock::acquire_rootless()?,
    };
    // As in `run_lab`: Ctrl-C from here on stops the lab cleanly, and it exits only after
    // every process it started (and what those started) is gone.
    signals::catch_stop_signals()?;
    let mut descendants = Descendants::adopt("the lab's processes", super::DESCENDANTS_GRACE)?;
    let cleaned = tcptune_emu::state::cleanup_stale()
        .context("cleaning up after an earlier lab or emulator that died")?;
    report_cleanup(&cleaned, cfg.progress);
    let summary = mode.summary(&facts);
    eprintln!("tcptune lab --psc: mode {summary}");
    let dir = cfg.out.clone();
    if dir.join(PSC_RESULTS_FILE).exists() {
        bail!(
            "{} already holds PSC results: choose another --out, or rebuild its report with `tcptune lab report {}`",
            dir.display(),
            dir.display()
        );
    }
    std::fs::create_dir_all(dir.join("logs"))
        .with_context(|| format!("creating the results folder {}", dir.display()))?;
    write_json(&dir.join(PSC_PLAN_FILE), &cfg.plan)?;
    let mut meta = LabMeta {
        schema_version: crate::record::RECORD_SCHEMA_VERSION,
        tcptune_version: env::binary_version(&cfg.tcptune),
        kernel: env::kernel_release(),
        cpus: env::cpus(),
        seed: cfg.plan.seed,
        started_unix_s: env::unix_now(),
        mode: Some(mode.to_string()),
        mode_summary: Some(summary),
        ..LabMeta::default()
    };
    write_json(&dir.join(results::META_FILE), &meta)?;

    let result = if interrupted() {
        Ok(())
    } else {
        run_all(cfg, &dir, &mut meta)
    };
    if let Err(e) = descendants.stop() {
        eprintln!("tcptune lab --psc: {e}");
    }
    meta.duration_s = env::unix_now() - meta.started_unix_s;
    let stopped = interrupted();
    meta.finished = result.is_ok() && !stopped;
    write_json(&dir.join(results::META_FILE), &meta)?;
    let records = report::read_records(&dir)?;
    let built = report::build(&cfg.plan, &records, &meta);
    report::write_outputs(&dir, &built)?;
    result?;
    Ok(PscOutcome {
        dir,
        built,
        interrupted: stopped,
    })
}

/// One running client and where its output goes.
struct Client {
    child: Supervised,
    out: PathBuf,
    err: PathBuf,
}

/// The testbed: one topology, two paths, the server in side A.
struct Testbed {
    topo: Option<Topology>,
    server: Option<Supervised>,
    tcptune: PathBuf,
    port: u16,
    budget: u64,
    log_dir: PathBuf,
}

fn path_config(plan: &PscPlan, p: usize) -> PathConfig {
    let path = plan.path(p);
    PathConfig {
        delay: Duration::from_nanos(path.rtt_us * 500),
        rate: Some(Rate(path.rate_bps)),
        queue: QueueLimit::Bytes(tcptune_core::Bytes(
            path.queue_bytes(plan.queue_bdp, plan.mtu),
        )),
        mtu: plan.mtu,
        seed: plan.seed.wrapping_add(p as u64),
        ..PathConfig::default()
    }
}

impl Testbed {
    fn up(cfg: &PscRunnerConfig, log_dir: &Path) -> anyhow::Result<Testbed> {
        let mut tc = TopologyConfig::new(unique_name("psc"), path_config(&cfg.plan, REMOTE))
            .extra_path(path_config(&cfg.plan, LOCAL));
        tc.sysctls = base_sysctls();
        let topo = Topology::up(&tc).with_context(|| format!("emulator topology {}", tc.name))?;
        let mut bed = Testbed {
            topo: Some(topo),
            server: None,
            tcptune: cfg.tcptune.clone(),
            port: cfg.port,
            budget: cfg.plan.budget,
            log_dir: log_dir.to_path_buf(),
        };
        bed.ensure_server()?;
        Ok(bed)
    }

    fn topo(&self) -> anyhow::Result<&Topology> {
        self.topo.as_ref().context("the testbed is already down")
    }

    /// Start `tcptune serve --memory-budget` in side A unless it runs.
    fn ensure_server(&mut self) -> anyhow::Result<()> {
        if let Some(s) = self.server.as_mut() {
            if s.try_wait()?.is_none() {
                return Ok(());
            }
            self.server = None;
        }
        let log_path = self.log_dir.join("serve.log");
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        let log2 = log
            .try_clone()
            .context("duplicating the server log handle")?;
        let mut cmd = self.topo()?.command(Side::A, self.tcptune.as_os_str());
        cmd.args([
            "serve",
            "--port",
            &self.port.to_string(),
            "--memory-budget",
            &self.budget.to_string(),
            "--max-sessions",
            "256",
            "--max-sessions-per-addr",
            "256",
            "--no-path-db",
            "--json",
        ])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
        let server = self.server.insert(
            process::spawn(&mut cmd, "tcptune serve --memory-budget on side A")?.grace(GRACE),
        );
        let pid = server.id();
        let deadline = Instant::now() + SERVER_READY;
        while !listening(pid, self.port) {
            if let Some(s) = server.try_wait()? {
                bail!(
                    "tcptune serve exited ({s}) before listening; see {}",
                    log_path.display()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "tcptune serve did not listen on port {} within {} s; see {}",
                    self.port,
                    SERVER_READY.as_secs(),
                    log_path.display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The server's sockets now (empty when `ss` fails: a gap in the samples, not an error).
    fn sample(&self, t0: Instant) -> Option<MemSample> {
        let mut cmd = self.topo.as_ref()?.command(Side::A, "ss");
        cmd.args(["-tmniH", "state", "established"])
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        let out = cmd.output().ok()?;
        out.status.success().then(|| MemSample {
            t_s: t0.elapsed().as_secs_f64(),
            sockets: parse_ss(&String::from_utf8_lossy(&out.stdout), self.port),
        })
    }

    /// Run one cell once (never fails: a failed run is a record with an error).
    fn run(&mut self, plan: &PscPlan, cell: &PscCell, rep: u32) -> PscRecord {
        let started = env::unix_now();
        let t0 = Instant::now();
        match self.try_run(plan, cell, rep) {
            Ok(r) => r,
            Err(e) => PscRecord::failed(
                cell.clone(),
                rep,
                started,
                t0.elapsed().as_secs_f64(),
                format!("{e:#}"),
            ),
        }
    }

    fn try_run(&mut self, plan: &PscPlan, cell: &PscCell, rep: u32) -> anyhow::Result<PscRecord> {
        self.ensure_server()?;
        let started = env::unix_now();
        // Count this run alone (the counters restart within 100 ms).
        self.topo()?.reset_stats();
        let t0 = Instant::now();
        let mut clients = Vec::new();
        let spawned = self.spawn_clients(plan, cell, &mut clients);
        let deadline = t0 + Duration::from_secs_f64(plan.seconds) + RUN_SLACK;
        let mut failure: Option<String> = spawned.err().map(|e| format!("{e:#}"));
        let (status, memory) = self.supervise(&mut clients, t0, deadline, &mut failure)?;
        let connections: Vec<ConnResult> = clients
            .iter()
            .zip(&status)
            .enumerate()
            .map(|(i, (c, st))| conn_result(i as u32, cell.path_of(i as u32), &c.out, &c.err, *st))
            .collect();
        let error = failure.or_else(|| {
            connections.iter().find(|c| !c.ok).map(|c| {
                format!(
                    "connection {}: {}",
                    c.index,
                    c.error.as_deref().unwrap_or("failed")
                )
            })
        });
        if error.is_some() {
            self.keep_failures(cell, rep, &clients);
        }
        Ok(PscRecord {
            schema_version: PSC_RECORD_SCHEMA_VERSION,
            cell: cell.clone(),
            repetition: rep,
            started_unix_s: started,
            wall_s: t0.elapsed().as_secs_f64(),
            ok: error.is_none() && connections.len() as u32 == cell.total(),
            error,
            connections,
            memory,
            paths: self.path_counters()?,
        })
    }

    /// Start the cell's clients at once, each bound to its path's side-B address.
    fn spawn_clients(
        &self,
        plan: &PscPlan,
        cell: &PscCell,
        clients: &mut Vec<Client>,
    ) -> anyhow::Result<()> {
        let tune = tune_of(&cell.mode).context("unknown PSC mode")?;
        let server = match self.topo()?.addr(Side::A) {
            std::net::IpAddr::V4(a) => format!("{a}:{}", self.port),
            std::net::IpAddr::V6(a) => format!("[{a}]:{}", self.port),
        };
        for i in 0..cell.total() {
            let path = cell.path_of(i);
            let out = self.log_dir.join(format!("client-{i}.out"));
            let err = self.log_dir.join(format!("client-{i}.err"));
            let mut cmd = self.topo()?.command(Side::B, self.tcptune.as_os_str());
            cmd.args([
                "send",
                &server,
                "--reverse",
                "-P",
                "1",
                "-t",
                &format!("{}", plan.seconds),
                "--tune",
                tune,
                "--bind",
                &path_addr(path).to_string(),
                "--json",
                "--no-path-db",
                "--no-progress",
                "-i",
                "0",
                "--connect-timeout",
                "20s",
            ]);
            if let Some(cc) = plan.congestion_arg() {
                cmd.args(["-C", cc]);
            }
            cmd.stdin(Stdio::null())
                .stdout(File::create(&out).with_context(|| format!("creating {}", out.display()))?)
                .stderr(File::create(&err).with_context(|| format!("creating {}", err.display()))?);
            let what = format!("tcptune send --reverse (connection {i}) on side B");
            let child = process::spawn(&mut cmd, what)?.grace(GRACE);
            clients.push(Client { child, out, err });
        }
        Ok(())
    }

    /// Wait for every client, sampling the server's sockets; stop them all on a failure
    /// (set in `failure`), the deadline or Ctrl-C. Returns each client's exit status (`None`:
    /// stopped) and the samples.
    fn supervise(
        &self,
        clients: &mut [Client],
        t0: Instant,
        deadline: Instant,
        failure: &mut Option<String>,
    ) -> anyhow::Result<(Vec<Option<ExitStatus>>, Vec<MemSample>)> {
        let mut memory = Vec::new();
        let mut status: Vec<Option<ExitStatus>> = vec![None; clients.len()];
        let mut next_sample = Instant::now();
        while failure.is_none() && status.iter().any(Option::is_none) {
            if interrupted() {
                *failure = Some("interrupted".into());
                break;
            }
            if Instant::now() > deadline {
                *failure = Some(format!(
                    "clients still running {} s after the transfer's length; killed",
                    RUN_SLACK.as_secs()
                ));
                break;
            }
            if Instant::now() >= next_sample {
                next_sample += SAMPLE_EVERY;
                if let Some(s) = self.sample(t0) {
                    memory.push(s);
                }
            }
            for (c, st) in clients.iter_mut().zip(status.iter_mut()) {
                if st.is_none() {
                    *st = c.child.try_wait()?;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        for c in clients.iter_mut() {
            if c.child.try_wait()?.is_none() {
                c.child.terminate()?;
            }
        }
        Ok((status, memory))
    }

    /// Keep a failed run's client output in `logs/failed-*`.
    fn keep_failures(&self, cell: &PscCell, rep: u32, clients: &[Client]) {
        for (i, c) in clients.iter().enumerate() {
            let keep = self.log_dir.join(format!(
                "failed-{}-rep{rep}-client{i}.txt",
                cell.id().replace(['/', '+'], "_")
            ));
            let text = format!(
                "== stdout ==\n{}\n== stderr ==\n{}\n",
                std::fs::read_to_string(&c.out).unwrap_or_default(),
                std::fs::read_to_string(&c.err).unwrap_or_default()
            );
            let _ = std::fs::write(keep, text);
        }
    }

    /// Both paths' counters, sender to receiver.
    fn path_counters(&self) -> anyhow::Result<Vec<PathRunStats>> {
        // The counters are refreshed every 100 ms.
        std::thread::sleep(Duration::from_millis(120));
        let st = self.topo()?.stats();
        Ok(std::iter::once(&st.a_to_b)
            .chain(st.extra.iter().map(|p| &p.a_to_b))
            .map(|d| PathRunStats {
                packets: d.packets_out,
                drops: d.drops.total(),
                queue_peak_bytes: d.queue_peak_bytes,
            })
            .collect())
    }

    /// Stop the server and tear the topology down (killing whatever still runs in it).
    fn down(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(mut s) = self.server.take() {
            if let Err(e) = s.terminate() {
                eprintln!("tcptune lab --psc: {e}");
            }
        }
        if let Some(t) = self.topo.take() {
            let name = t.config().name.clone();
            if let Err(e) = t.down() {
                eprintln!("tcptune lab --psc: tearing down {name}: {e}");
            }
        }
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One client's result from its JSON report and exit status.
fn conn_result(
    index: u32,
    path: usize,
    out: &Path,
    err: &Path,
    status: Option<ExitStatus>,
) -> ConnResult {
    let stdout = std::fs::read_to_string(out).unwrap_or_default();
    let stderr = std::fs::read_to_string(err).unwrap_or_default();
    let mut c = ConnResult {
        index,
        path,
        local: None,
        ok: false,
        error: None,
        bytes: 0,
        seconds: 0.0,
        throughput_bps: 0.0,
    };
    match serde_json::from_str::<Report>(&stdout) {
        Ok(r) => {
            let s = &r.end.sum_received;
            c.bytes = s.bytes;
            c.seconds = s.seconds;
            c.throughput_bps = s.bits_per_second;
            c.error = r.error.clone().or_else(|| match status {
                Some(st) if st.success() => (s.bytes == 0).then(|| "no bytes received".into()),
                Some(st) => Some(format!("exit {st}: {}", tail(&stderr))),
                None => Some("did not end".into()),
            });
        }
        Err(e) => {
            c.error = Some(format!(
                "no JSON report ({e}); exit {}; stderr: {}",
                status.map_or("none".into(), |s| s.to_string()),
                tail(&stderr)
            ));
        }
    }
    c.ok = c.error.is_none();
    c
}

fn run_all(cfg: &PscRunnerConfig, dir: &Path, meta: &mut LabMeta) -> anyhow::Result<()> {
    let plan = &cfg.plan;
    let cells = plan.cells();
    let total = cells.len() * plan.repetitions as usize;
    let mut progress = Progress::new(total, plan.expected_seconds(), cfg.progress);
    progress.note(&format!(
        "tcptune lab --psc: {} cells x {} repetition(s) = {total} runs, expected about {} (results in {})",
        cells.len(),
        plan.repetitions,
        fmt_secs(Duration::from_secs_f64(plan.expected_seconds())),
        dir.display()
    ));
    let mut bed =
        Testbed::up(cfg, &dir.join("logs")).context("bringing up the two-path testbed")?;
    if let Ok(t) = bed.topo() {
        meta.namespace_sysctls = vec![(
            crate::plan::HostConfig::Untuned,
            [
                "net.core.rmem_max",
                "net.core.wmem_max",
                "net.ipv4.tcp_rmem",
                "net.ipv4.tcp_wmem",
                "net.ipv4.tcp_congestion_control",
                "net.ipv4.tcp_no_metrics_save",
            ]
            .iter()
            .map(|k| {
                let v = t
                    .read_sysctl(Side::A, k)
                    .unwrap_or_else(|e| format!("unreadable ({e})"));
                (k.to_string(), v.replace('\t', " "))
            })
            .collect(),
        )];
        write_json(&dir.join(results::META_FILE), meta)?;
    }
    let mut rng = plan.seed ^ 0x9e37_79b9_7f4a_7c15;
    'reps: for rep in 1..=plan.repetitions {
        let mut order: Vec<&PscCell> = cells.iter().collect();
        shuffle(&mut order, &mut rng);
        for cell in order {
            if interrupted() {
                break 'reps;
            }
            let what = format!("{} rep {rep}", cell.id());
            progress.starting(&what);
            let rec = bed.run(plan, cell, rep);
            if interrupted() {
                break 'reps;
            }
            let result = if rec.ok {
                let agg: f64 = rec.connections.iter().map(|c| c.throughput_bps).sum();
                format!("{:.1} Mbit/s in all", agg / 1e6)
            } else {
                format!("FAILED: {}", rec.error.as_deref().unwrap_or("?"))
            };
            report::append_record(dir, &rec)?;
            progress.finished(plan.run_seconds(cell), &what, &result);
            std::thread::sleep(BETWEEN_RUNS);
        }
    }
    bed.down();
    progress.done();
    if interrupted() {
        progress.note("tcptune lab --psc: interrupted; writing the partial report");
    }
    Ok(())
}
