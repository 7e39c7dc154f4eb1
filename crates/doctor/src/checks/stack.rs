//! TCP stack switches: window scaling, timestamps, SACK, autotuning, congestion control,
//! qdisc, MTU probing, cached metrics, slow start after idle.

use super::Ctx;
use crate::facts::{keys, Unusable};
use crate::finding::{Finding, Severity, SysctlSetting};
use crate::parse::kernel_version;
use crate::sizing::{human_bytes, human_duration, human_rate};
use tcptune_core::{Bytes, Rate};

/// A bandwidth-delay product from which a path counts as a long fat pipe for the advice
/// below (100 Mbit/s x 100 ms is 1.25 MB).
const LFN_BDP: u64 = Bytes::MIB;

fn is_lfn(ctx: &Ctx<'_>) -> bool {
    ctx.target.rate.bdp(ctx.target.rtt).0 >= LFN_BDP
}

fn target_words(ctx: &Ctx<'_>) -> String {
    format!(
        "{} at {}",
        human_rate(ctx.target.rate.bits_per_sec()),
        human_duration(ctx.target.rtt)
    )
}

fn switch_on(key: &str) -> Vec<SysctlSetting> {
    vec![SysctlSetting::new(key, "1")]
}

/// Window scaling off caps every window at 64 KiB.
pub(super) fn window_scaling(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    if ctx.facts.flag(keys::WINDOW_SCALING)? {
        return Ok(vec![]);
    }
    let ceiling = Rate::from_bytes_over(Bytes::kib(64), ctx.target.rtt).bits_per_sec();
    let bdp = ctx.target.rate.bdp(ctx.target.rtt).0;
    let severity = if bdp > Bytes::kib(64).0 {
        Severity::Error
    } else {
        Severity::Warning
    };
    Ok(vec![Finding::new(
        "window-scaling-off",
        severity,
        format!(
            "TCP window scaling is off: no connection can have more than 64 KiB in flight, \
             so one stream reaches at most {} at {} RTT, whatever the buffers. Your target, {}, \
             needs {} in flight.",
            human_rate(ceiling),
            human_duration(ctx.target.rtt),
            target_words(ctx),
            human_bytes(bdp)
        ),
    )
    .with_sysctls(switch_on(keys::WINDOW_SCALING))])
}

/// Timestamps off: coarser RTT estimates and no protection against wrapped sequence numbers.
pub(super) fn timestamps(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    if ctx.facts.flag(keys::TIMESTAMPS)? {
        return Ok(vec![]);
    }
    Ok(vec![Finding::new(
        "timestamps-off",
        Severity::Warning,
        "TCP timestamps are off: TCP measures the round-trip time only once per window and \
         loses its protection against wrapped sequence numbers, which fast long paths hit \
         within seconds. Tuning guides (and the paper's guidelines) require them on.",
    )
    .with_sysctls(switch_on(keys::TIMESTAMPS))])
}

/// SACK off: one loss costs a window of retransmissions.
pub(super) fn sack(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    if ctx.facts.flag(keys::SACK)? {
        return Ok(vec![]);
    }
    Ok(vec![Finding::new(
        "sack-off",
        Severity::Warning,
        "Selective acknowledgements (SACK) are off: after a loss the sender cannot tell which \
         packets arrived, so recovering from several losses in one window takes several round \
         trips, which on a long path stalls the transfer for a long time.",
    )
    .with_sysctls(switch_on(keys::SACK))])
}

/// Receive autotuning off pins receive buffers at the default.
pub(super) fn moderate_rcvbuf(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    if ctx.facts.flag(keys::MODERATE_RCVBUF)? {
        return Ok(vec![]);
    }
    let [_, def, _] = ctx.facts.triple(keys::TCP_RMEM)?;
    let ceiling = Rate::from_bytes_over(Bytes(def / 2), ctx.target.rtt).bits_per_sec();
    Ok(vec![Finding::new(
        "receive-autotuning-off",
        Severity::Warning,
        format!(
            "Receive buffer autotuning is off (tcp_moderate_rcvbuf = 0): every receive buffer \
             stays at the default of {} (tcp_rmem default), so a stream this host receives \
             reaches about {} at {} RTT unless the application sets SO_RCVBUF itself.",
            human_bytes(def),
            human_rate(ceiling),
            human_duration(ctx.target.rtt)
        ),
    )
    .with_sysctls(switch_on(keys::MODERATE_RCVBUF))])
}

/// Congestion controls worth recommending on long fat pipes, best first.
const LFN_CCS: &[&str] = &["bbr", "cubic", "htcp", "bic"];

/// Reno (or another loss-based control that grows one segment per RTT) on a long fat pipe;
/// BBR without pacing on kernels older than 4.13.
pub(super) fn congestion_control(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    let cc = ctx.facts.word(keys::CONGESTION_CONTROL)?;
    let available = ctx.facts.list(keys::AVAILABLE_CC)?;
    let mut out = Vec::new();
    let slow = matches!(cc.as_str(), "reno" | "vegas" | "veno" | "westwood" | "lp");
    if slow && is_lfn(ctx) {
        let better = LFN_CCS.iter().find(|c| available.iter().any(|a| a == *c));
        let mut f = Finding::new(
            "congestion-control",
            Severity::Warning,
            format!(
                "The default congestion control is {cc}, which after a loss regrows its window \
                 by one packet per round trip: on your target path ({}) recovering from a \
                 single loss takes minutes. Available here: {}.",
                target_words(ctx),
                available.join(", ")
            ),
        );
        if let Some(b) = better {
            f = f.with_sysctls(vec![SysctlSetting::new(keys::CONGESTION_CONTROL, *b)]);
        } else {
            f.message.push_str(
                " No better one is loaded; load tcp_bbr or tcp_cubic if the kernel has them.",
            );
            f = f.with_command("modprobe tcp_bbr");
        }
        out.push(f);
    }
    if cc == "bbr" {
        let old = ctx
            .facts
            .kernel_release
            .ok()
            .and_then(|r| kernel_version(r))
            .is_some_and(|v| v < (4, 13));
        let qdisc = ctx.facts.word(keys::DEFAULT_QDISC).unwrap_or_default();
        if old && qdisc != "fq" {
            let f = Finding::new(
                "congestion-control",
                Severity::Warning,
                "BBR is the default, but this kernel is older than 4.13 and BBR paces its \
                 packets only through the fq qdisc there; with another qdisc it sends in bursts \
                 and loses throughput.",
            );
            out.push(if fq_available(ctx) == Some(true) {
                f.with_sysctls(vec![SysctlSetting::new(keys::DEFAULT_QDISC, "fq")])
            } else {
                f.with_sysctls(vec![SysctlSetting::new(keys::CONGESTION_CONTROL, "cubic")])
            });
        }
    }
    Ok(out)
}

fn fq_available(ctx: &Ctx<'_>) -> Option<bool> {
    ctx.facts
        .qdiscs
        .available
        .as_ref()
        .map(|a| a.iter().any(|q| q == "fq"))
}

/// A default qdisc that cannot pace (pfifo_fast) while fq exists; a default qdisc that is not
/// in this kernel. Never recommends a qdisc this kernel does not have.
pub(super) fn default_qdisc(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    let q = ctx.facts.word(keys::DEFAULT_QDISC)?;
    let Some(available) = ctx.facts.qdiscs.available.as_ref() else {
        return Ok(vec![]);
    };
    let mut out = Vec::new();
    if !available.contains(&q) && q != "pfifo" && q != "bfifo" && q != "noqueue" {
        out.push(
            Finding::new(
                "default-qdisc",
                Severity::Warning,
                format!(
                    "net.core.default_qdisc is '{q}', but this kernel has no such qdisc ({}); \
                 new interfaces fall back to pfifo_fast.",
                    ctx.facts.qdiscs.source
                ),
            )
            .with_sysctls(vec![SysctlSetting::new(
                keys::DEFAULT_QDISC,
                if available.iter().any(|a| a == "fq") {
                    "fq"
                } else {
                    "pfifo_fast"
                },
            )]),
        );
        return Ok(out);
    }
    let fq = available.iter().any(|a| a == "fq");
    if fq && q != "fq" && q != "fq_codel" && q != "cake" && is_lfn(ctx) {
        let ifaces: Vec<&str> = ctx
            .facts
            .up_interfaces()
            .filter(|i| i.physical)
            .map(|i| i.name.as_str())
            .collect();
        let mut f = Finding::new(
            "default-qdisc",
            Severity::Info,
            format!(
                "The default qdisc is {q}, a single FIFO: a bulk stream's bursts queue in front \
                 of everything else. fq (available in this kernel) paces each flow and \
                 isolates them, which helps long fat pipes and is what BBR was designed with."
            ),
        )
        .with_sysctls(vec![SysctlSetting::new(keys::DEFAULT_QDISC, "fq")]);
        // default_qdisc only applies to interfaces created later.
        if let Some(fix) = f.fix.as_mut() {
            for i in ifaces {
                fix.push_str(&format!("\ntc qdisc replace dev {i} root fq"));
            }
        }
        out.push(f);
    }
    Ok(out)
}

/// Jumbo frames without MTU probing risk black holes.
pub(super) fn mtu_probing(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    let jumbo: Vec<String> = ctx
        .facts
        .up_interfaces()
        .filter(|i| i.physical && i.mtu.is_some_and(|m| m > 1500))
        .map(|i| format!("{} (MTU {})", i.name, i.mtu.unwrap_or(0)))
        .collect();
    if jumbo.is_empty() || ctx.facts.u64(keys::MTU_PROBING)? != 0 {
        return Ok(vec![]);
    }
    Ok(vec![Finding::new(
        "mtu-probing-off",
        Severity::Info,
        format!(
            "Jumbo frames on {} but TCP MTU probing is off: if a router on the path drops big \
             packets without telling (an ICMP black hole), connections hang after the \
             handshake. tcp_mtu_probing = 1 lets TCP recover by probing smaller sizes.",
            jumbo.join(", ")
        ),
    )
    .with_sysctls(vec![SysctlSetting::new(
        keys::MTU_PROBING,
        "1",
    )])])
}

/// Cached ssthresh carries one transfer's bad luck into the next.
pub(super) fn no_metrics_save(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    if ctx.facts.flag(keys::NO_METRICS_SAVE)? {
        return Ok(vec![]);
    }
    Ok(vec![Finding::new(
        "metrics-cached",
        Severity::Info,
        "Linux remembers the slow-start threshold of closed connections per destination \
         (tcp_no_metrics_save = 0): after one transfer hit a loss, the next one to the same host \
         leaves slow start early and ramps up slowly. Turn it off on hosts that do repeated bulk \
         transfers or benchmarks (the paper flushes these caches between runs).",
    )
    .with_sysctls(vec![SysctlSetting::new(
        keys::NO_METRICS_SAVE,
        "1",
    )])])
}

/// Idle connections restart from a small window.
pub(super) fn slow_start_after_idle(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    if !ctx.facts.flag(keys::SLOW_START_AFTER_IDLE)? || !is_lfn(ctx) {
        return Ok(vec![]);
    }
    Ok(vec![Finding::new(
        "slow-start-after-idle",
        Severity::Info,
        format!(
            "A connection that pauses for longer than its retransmission timeout shrinks its \
             window back to the start (tcp_slow_start_after_idle = 1): applications that send \
             in bursts (file by file, request by request) re-climb to the {} window of your \
             target path every time.",
            human_bytes(ctx.target.rate.bdp(ctx.target.rtt).0)
        ),
    )
    .with_sysctls(vec![SysctlSetting::new(
        keys::SLOW_START_AFTER_IDLE,
        "0",
    )])])
}
