//! Which cells a way of running the lab can reproduce faithfully (pure).
//!
//! The raised-limit host configurations (`kernel_only`, `user_kernel`) raise the namespaces'
//! `tcp_rmem`/`tcp_wmem` maxima, which any mode can, and the host's global
//! `net.core.rmem_max`/`wmem_max`, which only root can: in the rootless mode (a user
//! namespace) they stay at the host's values, and `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE`, which
//! would get past them per socket, are refused too (they want `CAP_NET_ADMIN` in the host's
//! user namespace). A cell is still faithful there when nothing in it asks `setsockopt` for
//! more than the host's maxima:
//!
//! * `kernel` (Linux autotuning) never calls `setsockopt`; its ceiling is the namespace's
//!   `tcp_rmem`/`tcp_wmem` maximum, which is raised;
//! * `fixed:SIZE` (and `ideal`'s sweep) asks for SIZE per stream; `none` for 64 KiB;
//! * `manual` asks for 2 x BDP per stream (of the RTT it measures, a little above the
//!   path's: a quarter is added);
//! * `psc`, `drs`, `probe` and `auto` adapt up to whatever the maxima allow, so only the
//!   raised value itself is enough.
//!
//! Cells that fail the test are marked "not run" with the reason (in `results.jsonl`,
//! `summary.json` and the report), never silently dropped.

use crate::plan::{CellKey, Plan};
use tcptune_core::{Bytes, TuneMode};

/// What the lab may do to the host's global buffer limits, and what they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostLimits {
    /// Whether the lab may raise `net.core.rmem_max`/`wmem_max` (root mode).
    pub can_raise: bool,
    /// The host's `net.core.rmem_max`.
    pub rmem_max: u64,
    /// The host's `net.core.wmem_max`.
    pub wmem_max: u64,
}

/// The largest per-stream `setsockopt` value `key` asks for under a raised-limit host
/// configuration (`None`: it never calls `setsockopt` for a buffer).
pub fn setsockopt_need(plan: &Plan, key: &CellKey) -> Option<Bytes> {
    let Ok(mode) = key.tune.parse::<TuneMode>() else {
        return Some(plan.raised_limit());
    };
    match mode {
        TuneMode::Kernel => None,
        TuneMode::None => Some(TuneMode::UNTUNED_BUFFER),
        TuneMode::Fixed(size) => Some(size),
        TuneMode::Manual(_) => {
            let two_bdp = plan.bdp(key.rtt_us).0.saturating_mul(2);
            Some(Bytes(two_bdp.saturating_add(two_bdp / 4)))
        }
        TuneMode::Psc | TuneMode::Drs | TuneMode::Probe | TuneMode::Auto => {
            Some(plan.raised_limit())
        }
    }
}

/// Why `key` cannot be run faithfully with `limits`, if it cannot.
pub fn not_runnable(plan: &Plan, key: &CellKey, limits: &HostLimits) -> Option<String> {
    if limits.can_raise || !key.host.raises_limits() {
        return None;
    }
    let need = setsockopt_need(plan, key)?;
    let cap = limits.rmem_max.min(limits.wmem_max);
    if need.0 <= cap {
        return None;
    }
    Some(format!(
        "rootless mode: {} asks setsockopt for up to {} per stream, above the host's \
         net.core.rmem_max/wmem_max ({}/{}), which only root can raise (and SO_*BUFFORCE is \
         refused in a user namespace)",
        key.tune,
        need,
        Bytes(limits.rmem_max),
        Bytes(limits.wmem_max)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::HostConfig;

    fn key(host: HostConfig, tune: &str, rtt_ms: u64) -> CellKey {
        CellKey::new(rtt_ms * 1000, host, 1, tune)
    }

    const ROOTLESS_4M: HostLimits = HostLimits {
        can_raise: false,
        rmem_max: 4 << 20,
        wmem_max: 4 << 20,
    };

    #[test]
    fn root_mode_and_untuned_cells_always_run() {
        let plan = Plan::quick();
        let root = HostLimits {
            can_raise: true,
            ..ROOTLESS_4M
        };
        assert_eq!(
            not_runnable(&plan, &key(HostConfig::KernelOnly, "auto", 100), &root),
            None
        );
        assert_eq!(
            not_runnable(&plan, &key(HostConfig::Untuned, "auto", 100), &ROOTLESS_4M),
            None
        );
    }

    #[test]
    fn scenario_cells_run_like_any_other_cell() {
        let plan = Plan::quick();
        let root = HostLimits {
            can_raise: true,
            ..ROOTLESS_4M
        };
        for s in [
            crate::plan::Scenario::Competing,
            crate::plan::Scenario::PathChange,
        ] {
            let mut k = key(HostConfig::Untuned, "auto", 100);
            k.scenario = Some(s);
            assert_eq!(not_runnable(&plan, &k, &root), None, "{s:?}");
            assert_eq!(not_runnable(&plan, &k, &ROOTLESS_4M), None, "{s:?}");
            // Under raised limits they need what any cell of their mode needs.
            k.host = HostConfig::KernelOnly;
            assert!(not_runnable(&plan, &k, &ROOTLESS_4M).is_some(), "{s:?}");
        }
    }

    #[test]
    fn kernel_autotuning_runs_rootless_under_raised_limits() {
        let plan = Plan::quick();
        let k = key(HostConfig::KernelOnly, "kernel", 100);
        assert_eq!(not_runnable(&plan, &k, &ROOTLESS_4M), None);
    }

    #[test]
    fn adaptive_tuners_need_the_raised_maximum_itself() {
        let plan = Plan::quick();
        for tune in ["auto", "drs", "psc", "probe"] {
            let k = key(HostConfig::KernelOnly, tune, 1);
            let why = not_runnable(&plan, &k, &ROOTLESS_4M).unwrap_or_default();
            assert!(why.starts_with("rootless mode: "), "{tune}: {why}");
            assert!(why.contains("(4MiB/4MiB)"), "{why}");
        }
        // A host whose maxima are already that high runs them.
        let big = HostLimits {
            rmem_max: plan.raised_limit().0,
            wmem_max: plan.raised_limit().0,
            ..ROOTLESS_4M
        };
        assert_eq!(
            not_runnable(&plan, &key(HostConfig::KernelOnly, "auto", 100), &big),
            None
        );
    }

    #[test]
    fn fixed_and_manual_run_when_their_size_fits_under_the_host_maximum() {
        let plan = Plan::quick(); // 1 Gbit/s
        let fits = key(HostConfig::UserKernel, "fixed:1048576", 100);
        assert_eq!(not_runnable(&plan, &fits, &ROOTLESS_4M), None);
        let big = key(HostConfig::UserKernel, "fixed:16777216", 100);
        assert!(not_runnable(&plan, &big, &ROOTLESS_4M).is_some());
        // 2 x BDP at 0.5 ms is 125 KB: fits; at 100 ms it is 25 MB: does not.
        let short = CellKey {
            rtt_us: 500,
            ..key(HostConfig::UserKernel, "manual", 0)
        };
        assert_eq!(not_runnable(&plan, &short, &ROOTLESS_4M), None);
        let long = key(HostConfig::UserKernel, "manual", 100);
        assert!(not_runnable(&plan, &long, &ROOTLESS_4M).is_some());
    }
}
