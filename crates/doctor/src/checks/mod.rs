//! The pure checks: [`HostFacts`] and a [`Target`] in, [`Finding`]s out. No I/O, no clock.
//!
//! Each check is a function in one of the submodules, registered in [`CHECKS`] with its id.
//! A check that cannot read a fact it needs returns [`Unusable`]; [`run`] turns that into a
//! finding `unchecked-<id>` that says which fact was missing (a warning for the buffer checks,
//! whose silence would otherwise read as "your buffers are fine").

mod buffers;
mod host;
mod stack;

use crate::facts::{keys, HostFacts, Unusable};
use crate::finding::{Finding, Severity};
use crate::sizing::{Sizing, Target};
use tcptune_core::{Bytes, HostLimits};

/// What a check sees.
pub struct Ctx<'a> {
    /// The host.
    pub facts: &'a HostFacts,
    /// The path the advice is sized for.
    pub target: &'a Target,
}

impl Ctx<'_> {
    /// The host's buffer limits, if all the sysctls behind them are readable.
    pub fn limits(&self) -> Result<HostLimits, Unusable> {
        let f = self.facts;
        Ok(HostLimits {
            rmem_max: Bytes(f.u64(keys::RMEM_MAX)?),
            wmem_max: Bytes(f.u64(keys::WMEM_MAX)?),
            tcp_rmem: f.byte_triple(keys::TCP_RMEM)?,
            tcp_wmem: f.byte_triple(keys::TCP_WMEM)?,
            moderate_rcvbuf: f.flag(keys::MODERATE_RCVBUF).unwrap_or(true),
            can_force: false,
        })
    }

    /// The sizing of the target on this host.
    pub fn sizing(&self) -> Result<Sizing, Unusable> {
        Ok(Sizing::compute(self.target, &self.limits()?))
    }
}

/// A check: facts in, findings out (or the fact it could not use).
pub type CheckFn = fn(&Ctx<'_>) -> Result<Vec<Finding>, Unusable>;

/// A registered check.
pub struct Check {
    /// The id of the check (findings carry this id or a more specific one).
    pub id: &'static str,
    /// What it looks at, for `--help` and docs.
    pub about: &'static str,
    /// Severity of `unchecked-<id>` when a fact is missing.
    pub unknown_severity: Severity,
    /// The check.
    pub run: CheckFn,
}

/// Every check, in report order.
pub const CHECKS: &[Check] = &[
    Check {
        id: "window-scaling-off",
        about: "RFC 7323 window scaling (without it no window exceeds 64 KiB)",
        unknown_severity: Severity::Warning,
        run: stack::window_scaling,
    },
    Check {
        id: "timestamps-off",
        about: "RFC 7323 timestamps",
        unknown_severity: Severity::Info,
        run: stack::timestamps,
    },
    Check {
        id: "sack-off",
        about: "selective acknowledgements",
        unknown_severity: Severity::Info,
        run: stack::sack,
    },
    Check {
        id: "receive-autotuning-off",
        about: "receive buffer autotuning (tcp_moderate_rcvbuf)",
        unknown_severity: Severity::Info,
        run: stack::moderate_rcvbuf,
    },
    Check {
        id: "tcp-wmem-max-small",
        about: "send autotuning maximum against the target's bandwidth-delay product",
        unknown_severity: Severity::Warning,
        run: buffers::tcp_wmem_max,
    },
    Check {
        id: "tcp-rmem-max-small",
        about: "receive autotuning maximum against the target's bandwidth-delay product",
        unknown_severity: Severity::Warning,
        run: buffers::tcp_rmem_max,
    },
    Check {
        id: "wmem-max-small",
        about: "net.core.wmem_max: what applications that set SO_SNDBUF get",
        unknown_severity: Severity::Warning,
        run: buffers::wmem_max,
    },
    Check {
        id: "rmem-max-small",
        about: "net.core.rmem_max: what applications that set SO_RCVBUF get",
        unknown_severity: Severity::Warning,
        run: buffers::rmem_max,
    },
    Check {
        id: "tcp-mem-small",
        about: "memory of all TCP sockets together (tcp_mem) against one target stream",
        unknown_severity: Severity::Info,
        run: buffers::tcp_mem,
    },
    Check {
        id: "congestion-control",
        about: "default congestion control on long fat pipes",
        unknown_severity: Severity::Info,
        run: stack::congestion_control,
    },
    Check {
        id: "default-qdisc",
        about: "default queueing discipline (pacing with fq, when this kernel has it)",
        unknown_severity: Severity::Info,
        run: stack::default_qdisc,
    },
    Check {
        id: "mtu-probing-off",
        about: "PMTU black-hole recovery on jumbo-frame interfaces",
        unknown_severity: Severity::Info,
        run: stack::mtu_probing,
    },
    Check {
        id: "metrics-cached",
        about: "ssthresh cached from earlier connections (tcp_no_metrics_save)",
        unknown_severity: Severity::Info,
        run: stack::no_metrics_save,
    },
    Check {
        id: "slow-start-after-idle",
        about: "congestion window collapse after idle periods",
        unknown_severity: Severity::Info,
        run: stack::slow_start_after_idle,
    },
    Check {
        id: "half-duplex",
        about: "interfaces running half duplex",
        unknown_severity: Severity::Info,
        run: host::half_duplex,
    },
    Check {
        id: "nic-slower-than-target",
        about: "the fastest interface against the target rate",
        unknown_severity: Severity::Info,
        run: host::nic_speed,
    },
    Check {
        id: "retransmissions-high",
        about: "TCP retransmissions since boot (netstat -s)",
        unknown_severity: Severity::Info,
        run: host::retransmissions,
    },
    Check {
        id: "segment-errors",
        about: "TCP segments received with bad checksums or errors",
        unknown_severity: Severity::Info,
        run: host::segment_errors,
    },
    Check {
        id: "memory-pressure",
        about: "TCP memory pressure and pruned receive queues since boot",
        unknown_severity: Severity::Info,
        run: host::memory_pressure,
    },
];

/// Run every check. Findings come out in [`CHECKS`] order.
pub fn run(facts: &HostFacts, target: &Target) -> Vec<Finding> {
    let ctx = Ctx { facts, target };
    let mut out = Vec::new();
    for check in CHECKS {
        match (check.run)(&ctx) {
            Ok(findings) => out.extend(findings),
            Err(u) => out.push(Finding::new(
                &format!("unchecked-{}", check.id),
                check.unknown_severity,
                format!("Could not check {}: {} {}.", check.about, u.key, u.why),
            )),
        }
    }
    out
}

/// Whether any finding is a warning or worse (exit status 1).
pub fn any_problem(findings: &[Finding]) -> bool {
    findings.iter().any(Finding::is_problem)
}
