//! The `doctor --json` document and its text rendering.

use crate::apply::Applied;
use crate::facts::{Fact, HostFacts, SCHEMA_VERSION};
use crate::finding::{Finding, Severity};
use crate::path::RttStats;
use crate::sizing::{human_bytes, human_duration, human_rate, Sizing, Target, TargetSource};
use serde::Serialize;

/// What `doctor` examined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// This host only.
    Host,
    /// This host and a path to another.
    Path,
}

/// A short bandwidth probe against a tcptune server.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProbeResult {
    /// The probe's steady rate (bit/s): over its second half, after slow start (the whole
    /// run's average when it was too short to tell).
    #[serde(rename = "rate_bps")]
    pub bits_per_second: u64,
    /// Probe duration in seconds.
    #[serde(rename = "duration_s")]
    pub seconds: f64,
    /// Parallel streams used.
    pub streams: u32,
}

/// The path part of a report (`doctor HOST[:PORT]`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PathReport {
    /// The host as given.
    pub host: String,
    /// The port.
    pub port: u16,
    /// Handshake times.
    pub rtt: RttStats,
    /// The bandwidth probe, if one ran.
    pub probe: Option<ProbeResult>,
    /// Why no probe ran, if none did.
    pub probe_skipped: Option<String>,
}

/// The whole `doctor --json` document.
#[derive(Clone, Debug, Serialize)]
pub struct DoctorReport {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `tcptune` version.
    pub tcptune_version: String,
    /// Host or path.
    pub mode: Mode,
    /// What the advice is sized for.
    pub target: Target,
    /// The buffer arithmetic for the target (absent if the limits were unreadable).
    pub sizing: Option<Sizing>,
    /// The path measurement.
    pub path: Option<PathReport>,
    /// Everything gathered.
    pub facts: HostFacts,
    /// What the checks found, in check order.
    pub findings: Vec<Finding>,
    /// Findings of severity warning or worse (exit status 1 when non-zero).
    pub problems: usize,
    /// Sysctls changed by `--apply` (empty otherwise).
    pub applied: Vec<Applied>,
    /// The file written by `--write-sysctl`.
    pub sysctl_file: Option<String>,
}

impl DoctorReport {
    /// Assemble a report (counts the problems).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        version: &str,
        mode: Mode,
        target: Target,
        sizing: Option<Sizing>,
        path: Option<PathReport>,
        facts: HostFacts,
        findings: Vec<Finding>,
    ) -> DoctorReport {
        let problems = findings.iter().filter(|f| f.is_problem()).count();
        DoctorReport {
            schema_version: SCHEMA_VERSION,
            tcptune_version: version.to_string(),
            mode,
            target,
            sizing,
            path,
            facts,
            findings,
            problems,
            applied: Vec::new(),
            sysctl_file: None,
        }
    }
}

fn indent(text: &str, prefix: &str) -> String {
    text.lines()
        .map(|l| format!("{prefix}{l}\n"))
        .collect::<String>()
}

/// The report for a terminal.
pub fn render_text(r: &DoctorReport) -> String {
    let mut s = String::new();
    let f = &r.facts;
    let kernel = match &f.kernel_release {
        Fact::Ok(k) => k.clone(),
        _ => "unknown kernel".into(),
    };
    let cc = f
        .word(crate::facts::keys::CONGESTION_CONTROL)
        .unwrap_or_else(|_| "?".into());
    let q = f
        .word(crate::facts::keys::DEFAULT_QDISC)
        .unwrap_or_else(|_| "?".into());
    s.push_str(&format!(
        "host: Linux {kernel}; congestion control {cc}; default qdisc {q}\n"
    ));
    let ifaces: Vec<String> = f
        .up_interfaces()
        .map(|i| {
            let speed = i
                .speed_mbps
                .map(|m| human_rate(m * 1_000_000))
                .unwrap_or_else(|| "speed n/a".into());
            format!(
                "{} (MTU {}, {speed})",
                i.name,
                i.mtu.map_or("?".into(), |m| m.to_string())
            )
        })
        .collect();
    if !ifaces.is_empty() {
        s.push_str(&format!("interfaces: {}\n", ifaces.join(", ")));
    }
    if let Some(p) = &r.path {
        s.push_str(&format!(
            "path: {}:{} ({}): TCP handshake RTT min {}, median {}, max {} over {} samples{}\n",
            p.host,
            p.port,
            p.rtt.addr,
            human_duration(p.rtt.min()),
            human_duration(p.rtt.median()),
            human_duration(std::time::Duration::from_micros(p.rtt.max_us)),
            p.rtt.samples_us.len(),
            if p.rtt.failed > 0 {
                format!(" ({} failed)", p.rtt.failed)
            } else {
                String::new()
            }
        ));
        match (&p.probe, &p.probe_skipped) {
            (Some(pr), _) => s.push_str(&format!(
                "bandwidth probe: {} (second half of {:.1} s, {} stream(s))\n",
                human_rate(pr.bits_per_second),
                pr.seconds,
                pr.streams
            )),
            (None, Some(why)) => s.push_str(&format!("bandwidth probe: not run ({why})\n")),
            (None, None) => {}
        }
    }
    let t = &r.target;
    let how = match t.source {
        TargetSource::User => "as given",
        TargetSource::Assumed => "assumed; pass --target RATE --rtt RTT for your path",
        TargetSource::Measured => "RTT measured",
    };
    s.push_str(&format!(
        "target: {} at {} RTT ({how})\n",
        human_rate(t.rate.bits_per_sec()),
        human_duration(t.rtt)
    ));
    if let Some(z) = &r.sizing {
        s.push_str(&format!(
            "  bandwidth-delay product {}; each end needs about {} of buffer for one stream\n",
            human_bytes(z.bdp_bytes),
            human_bytes(z.buffer_needed_bytes)
        ));
        s.push_str(&format!(
            "  one stream on this host reaches at most {} left to autotuning, {} if the \
             application sets its buffers\n",
            human_rate(z.send.autotune_rate_bps.min(z.recv.autotune_rate_bps)),
            human_rate(z.send.best_rate_bps.min(z.recv.best_rate_bps))
        ));
        s.push_str(&format!(
            "  parallel streams needed under the current limits: {} left to autotuning, {} if \
             the application sets its buffers\n",
            z.streams_needed_autotuned, z.streams_needed
        ));
    }
    s.push('\n');
    if r.findings.is_empty() {
        s.push_str("No findings: nothing on this host limits the target.\n");
    }
    for f in &r.findings {
        let tag = match f.severity {
            Severity::Error => "ERROR",
            Severity::Warning => "WARN ",
            Severity::Info => "info ",
        };
        s.push_str(&format!("[{tag}] {}\n", f.id));
        s.push_str(&indent(&wrap(&f.message, 92), "    "));
        if let Some(fix) = &f.fix {
            s.push_str("    fix:\n");
            s.push_str(&indent(fix, "      "));
        }
    }
    if !r.applied.is_empty() {
        s.push_str("\napplied:\n");
        for a in &r.applied {
            s.push_str(&format!(
                "  {}: {} -> {}{}\n",
                a.key,
                a.previous.as_deref().unwrap_or("?"),
                a.now.as_deref().unwrap_or("?"),
                a.error
                    .as_ref()
                    .map(|e| format!("  FAILED: {e}"))
                    .unwrap_or_default()
            ));
        }
        let undo: Vec<String> = r.applied.iter().filter_map(|a| a.undo_command()).collect();
        s.push_str("to undo:\n");
        s.push_str(&indent(&undo.join("\n"), "  "));
    }
    if let Some(file) = &r.sysctl_file {
        s.push_str(&format!(
            "\nwrote {file}: install it in /etc/sysctl.d/ and run 'sysctl --system'\n"
        ));
    }
    s.push_str(&format!(
        "\n{} problem(s) (warning or worse), {} note(s)\n",
        r.problems,
        r.findings.len() - r.problems
    ));
    s
}

/// Wrap text at `width` columns.
pub fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for w in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + w.len() > width {
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(w);
    }
    out.push_str(&line);
    out
}
