//! Interface and counter checks: duplex, NIC speed, retransmissions, errors, memory pressure.

use super::Ctx;
use crate::facts::{Duplex, Fact, Unusable};
use crate::finding::{Finding, Severity};
use crate::sizing::{human_rate, TargetSource};

/// An interface negotiated half duplex (often a duplex mismatch with the switch).
pub(super) fn half_duplex(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    Ok(ctx
        .facts
        .up_interfaces()
        .filter(|i| i.duplex == Some(Duplex::Half))
        .map(|i| {
            let speed = i.speed_mbps.unwrap_or(100);
            Finding::new(
                "half-duplex",
                Severity::Error,
                format!(
                    "{} runs at half duplex ({speed} Mbit/s): it cannot send and receive at \
                     the same time, and if the switch port is at full duplex (a duplex \
                     mismatch) the link works but crawls at 1-2 Mbit/s with many errors. Set \
                     both ends to autonegotiate, or both to full duplex.",
                    i.name
                ),
            )
            .with_command(format!(
                "ethtool -s {} autoneg on   # or: ethtool -s {} speed {speed} duplex full autoneg off",
                i.name, i.name
            ))
        })
        .collect())
}

/// The fastest interface is slower than the target.
pub(super) fn nic_speed(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    if ctx.target.source == TargetSource::Assumed {
        return Ok(vec![]);
    }
    let fastest = ctx
        .facts
        .up_interfaces()
        .filter(|i| i.physical)
        .filter_map(|i| i.speed_mbps.map(|s| (s, i.name.as_str())))
        .max();
    let Some((mbps, name)) = fastest else {
        return Ok(vec![]);
    };
    let nic = mbps.saturating_mul(1_000_000);
    if nic >= ctx.target.rate.bits_per_sec() {
        return Ok(vec![]);
    }
    Ok(vec![Finding::new(
        "nic-slower-than-target",
        Severity::Warning,
        format!(
            "The fastest interface, {name}, runs at {}: no tuning takes this host to your \
             target of {}.",
            human_rate(nic),
            human_rate(ctx.target.rate.bits_per_sec())
        ),
    )])
}

fn counter(ctx: &Ctx<'_>, group: &str, name: &str) -> Result<i64, Unusable> {
    if let Fact::Unreadable(e) = &ctx.facts.counters {
        return Err(Unusable {
            key: "/proc/net/snmp".into(),
            why: format!("is unreadable: {e}"),
        });
    }
    ctx.facts.counter(group, name).ok_or_else(|| Unusable {
        key: format!("{group}:{name}"),
        why: "is not present in /proc/net/snmp or /proc/net/netstat".into(),
    })
}

/// Segments sent before a retransmission rate means anything.
const MIN_SEGMENTS: i64 = 10_000;

/// Retransmitted segments as a share of all segments sent since boot.
pub(super) fn retransmissions(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    let out = counter(ctx, "Tcp", "OutSegs")?;
    let re = counter(ctx, "Tcp", "RetransSegs")?;
    if out < MIN_SEGMENTS || re <= 0 {
        return Ok(vec![]);
    }
    let pct = re as f64 * 100.0 / out as f64;
    let severity = if pct >= 1.0 {
        Severity::Warning
    } else if pct >= 0.1 {
        Severity::Info
    } else {
        return Ok(vec![]);
    };
    Ok(vec![Finding::new(
        "retransmissions-high",
        severity,
        format!(
            "{pct:.2}% of the TCP segments sent since boot were retransmissions ({re} of \
             {out}). Every loss halves (Reno/CUBIC) a long path's window; above ~0.1% a single \
             stream cannot fill a long fat pipe. Usually congestion; also faulty cables, NICs or \
             a duplex mismatch. Find the connections that retransmit, and read the counters."
        ),
    )
    .with_command(
        "tcptune watch --sort retrans   # or: ss -ti; netstat -s | grep -i retrans",
    )])
}

/// Segments arriving corrupted.
pub(super) fn segment_errors(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    let ins = counter(ctx, "Tcp", "InSegs")?;
    let errs = counter(ctx, "Tcp", "InErrs")?;
    let csum = ctx.facts.counter("Tcp", "InCsumErrors").unwrap_or(0);
    if ins < MIN_SEGMENTS || errs.max(csum) <= 0 {
        return Ok(vec![]);
    }
    let pct = errs.max(csum) as f64 * 100.0 / ins as f64;
    if pct < 0.01 {
        return Ok(vec![]);
    }
    Ok(vec![Finding::new(
        "segment-errors",
        Severity::Warning,
        format!(
            "{pct:.3}% of received TCP segments were bad ({errs} errors, {csum} with bad \
             checksums, of {ins}): corrupted packets are dropped and resent, and TCP takes each \
             as congestion. Check cables, NIC firmware and the interface's error counters."
        ),
    )
    .with_command(
        "ip -s link   # and: ethtool -S <interface> | grep -i err",
    )])
}

/// The kernel had to shrink TCP memory, or pruned receive queues.
pub(super) fn memory_pressure(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    // TcpExt counters only exist when /proc/net/netstat was readable.
    let pressures = counter(ctx, "TcpExt", "TCPMemoryPressures")?;
    let pruned = ctx.facts.counter("TcpExt", "PruneCalled").unwrap_or(0);
    let rcv_pruned = ctx.facts.counter("TcpExt", "RcvPruned").unwrap_or(0);
    let mut out = Vec::new();
    if pressures > 0 {
        out.push(
            Finding::new(
                "memory-pressure",
                Severity::Warning,
                format!(
                    "TCP ran out of its memory allowance {pressures} times since boot \
                     (TCPMemoryPressures): under pressure the kernel shrinks every socket's \
                     buffer, and long paths slow down for everybody. Raise net.ipv4.tcp_mem \
                     (see tcp-mem-small) or find what holds the memory."
                ),
            )
            .with_command("ss -tm   # per-socket memory; cat /proc/net/sockstat"),
        );
    }
    if pruned > 0 || rcv_pruned > 0 {
        out.push(Finding::new(
            "memory-pressure",
            Severity::Info,
            format!(
                "Receive queues were pruned {pruned} times and packets dropped from them \
                 {rcv_pruned} times since boot: data arrived faster than applications read it \
                 and used more memory than the receive buffer allowed (small packets cost more \
                 memory than the data they carry)."
            ),
        ));
    }
    Ok(out)
}
