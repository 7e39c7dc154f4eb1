//! Buffer limit checks, sized for the target path.

use super::Ctx;
use crate::facts::{keys, Unusable};
use crate::finding::{Finding, Severity, SysctlSetting};
use crate::sizing::{human_bytes, human_duration, human_rate, Need, INT_MAX};

fn triple_value(min: u64, def: u64, max: u64) -> String {
    format!("{min} {def} {max}")
}

/// Why a single stream cannot reach the target even after the fix (past 2 GiB).
fn int_cap_note(s: &Need) -> String {
    if s.streams_at_recommended > 1 {
        format!(
            " No socket buffer can exceed 2 GiB, so even then use at least {} parallel streams.",
            s.streams_at_recommended
        )
    } else {
        String::new()
    }
}

fn autotune_max(ctx: &Ctx<'_>, send: bool) -> Result<Vec<Finding>, Unusable> {
    let (key, id, what) = if send {
        (keys::TCP_WMEM, "tcp-wmem-max-small", "send")
    } else {
        (keys::TCP_RMEM, "tcp-rmem-max-small", "receive")
    };
    let [min, def, max] = ctx.facts.triple(key)?;
    let s = Need::of(ctx.target);
    let t = ctx.target;
    // Buffer sizes are ints: anything above INT_MAX is never used.
    let effective = max.min(INT_MAX);
    let payload = if send {
        tcptune_core::linux::sndbuf_inflight(effective)
    } else {
        tcptune_core::linux::rcvbuf_inflight(effective)
    };
    if payload >= s.bdp_bytes {
        return Ok(vec![]);
    }
    let ceiling = rate_of(payload, t);
    let new_max = s.buffer_recommended_bytes.max(effective);
    let msg = format!(
        "Kernel autotuning lets one {what} buffer grow to {} ({key} max), and about {:.0}% \
         of that holds data in flight (measured): one stream can reach at most {} at {} RTT. Your target, \
         {} at {}, needs {} in flight (the bandwidth-delay product), so the {what} buffer \
         maximum should be {}.{} Until then {} parallel streams would be needed.",
        human_bytes(max),
        100.0 * payload as f64 / effective.max(1) as f64,
        human_rate(ceiling),
        human_duration(t.rtt),
        human_rate(t.rate.bits_per_sec()),
        human_duration(t.rtt),
        human_bytes(s.bdp_bytes),
        human_bytes(new_max),
        int_cap_note(&s),
        s.bdp_bytes.div_ceil(payload.max(1)),
    );
    Ok(vec![Finding::new(id, Severity::Warning, msg).with_sysctls(
        vec![SysctlSetting::new(key, triple_value(min, def, new_max))],
    )])
}

/// `tcp_wmem[2]` against the target.
pub(super) fn tcp_wmem_max(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    autotune_max(ctx, true)
}

/// `tcp_rmem[2]` against the target.
pub(super) fn tcp_rmem_max(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    autotune_max(ctx, false)
}

fn core_max(ctx: &Ctx<'_>, send: bool) -> Result<Vec<Finding>, Unusable> {
    let (key, tcp_key, id, opt, what) = if send {
        (
            keys::WMEM_MAX,
            keys::TCP_WMEM,
            "wmem-max-small",
            "SO_SNDBUF",
            "send",
        )
    } else {
        (
            keys::RMEM_MAX,
            keys::TCP_RMEM,
            "rmem-max-small",
            "SO_RCVBUF",
            "receive",
        )
    };
    let core = ctx.facts.u64(key)?;
    let [_, _, tcp_max] = ctx.facts.triple(tcp_key)?;
    let tcp_max = tcp_max.min(INT_MAX);
    let s = Need::of(ctx.target);
    let t = ctx.target;
    // SO_*BUF(v) stores 2 * min(v, core) (an int): an application gets at most twice the
    // cap, of which about 0.7 (send) or 0.65 (receive) holds data in flight.
    let app_buffer = core.saturating_mul(2).min(INT_MAX);
    let app_inflight = if send {
        tcptune_core::linux::sndbuf_inflight(app_buffer)
    } else {
        tcptune_core::linux::rcvbuf_inflight(app_buffer)
    };
    let below_autotuning = app_buffer < tcp_max;
    let below_target = app_inflight < s.bdp_bytes;
    if !below_autotuning && !below_target {
        return Ok(vec![]);
    }
    let mut new_core = tcp_max.max(core);
    if below_target {
        new_core = new_core.max(s.buffer_recommended_bytes);
    }
    let new_core = new_core.min(INT_MAX);
    let mut msg = format!(
        "Applications that size their own {what} buffer with {opt} (iperf3 -w, scp/rsync \
         wrappers, tcptune's fixed-buffer modes) get at most {} of buffer (the kernel doubles \
         the request and caps it at twice {key} = {}), so one such stream reaches at most {} \
         at {} RTT.",
        human_bytes(app_buffer),
        human_bytes(core),
        human_rate(rate_of(app_inflight, t)),
        human_duration(t.rtt),
    );
    if below_autotuning {
        msg.push_str(&format!(
            " A socket left to autotuning can grow to {} ({tcp_key} max): setting the buffer \
             makes such applications slower, not faster.",
            human_bytes(tcp_max)
        ));
    }
    if below_target {
        msg.push_str(&format!(
            " Your target, {} at {}, needs {} in flight.",
            human_rate(t.rate.bits_per_sec()),
            human_duration(t.rtt),
            human_bytes(s.bdp_bytes)
        ));
    }
    let severity = if below_target {
        Severity::Warning
    } else {
        Severity::Info
    };
    Ok(vec![Finding::new(id, severity, msg).with_sysctls(vec![
        SysctlSetting::new(key, new_core.to_string()),
    ])])
}

fn rate_of(payload: u64, t: &crate::sizing::Target) -> u64 {
    tcptune_core::Rate::from_bytes_over(tcptune_core::Bytes(payload), t.rtt).bits_per_sec()
}

/// `net.core.wmem_max` against autotuning and the target.
pub(super) fn wmem_max(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    core_max(ctx, true)
}

/// `net.core.rmem_max` against autotuning and the target.
pub(super) fn rmem_max(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    core_max(ctx, false)
}

/// `tcp_mem` (pages, all TCP sockets together) against one target stream.
pub(super) fn tcp_mem(ctx: &Ctx<'_>) -> Result<Vec<Finding>, Unusable> {
    let [low, pressure, high] = ctx.facts.triple(keys::TCP_MEM)?;
    let page = ctx.facts.page_size.max(1);
    let s = Need::of(ctx.target);
    let need = s.buffer_needed_bytes.min(INT_MAX);
    let pressure_bytes = pressure.saturating_mul(page);
    if pressure_bytes >= need {
        return Ok(vec![]);
    }
    // Room for one stream in each direction before pressure sets in.
    let new_pressure = (need.saturating_mul(2)).div_ceil(page).max(pressure);
    let new_high = new_pressure.saturating_add(new_pressure / 2).max(high);
    let msg = format!(
        "All TCP sockets together may use {} before the kernel starts shrinking buffers \
         (tcp_mem pressure threshold, {pressure} pages of {page} bytes), but one stream of \
         your target needs {} of buffer at each end. Raise tcp_mem if this host has the \
         memory (it is counted in pages).",
        human_bytes(pressure_bytes),
        human_bytes(need),
    );
    Ok(vec![Finding::new("tcp-mem-small", Severity::Warning, msg)
        .with_sysctls(vec![SysctlSetting::new(
            keys::TCP_MEM,
            triple_value(low, new_pressure, new_high),
        )])])
}
