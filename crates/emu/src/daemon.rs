//! The background emulator behind `tcptune emu up`: a process of its own that brings a
//! topology up, tells its starter with a typed [`UpReady`] message, and keeps the path up
//! until SIGINT/SIGTERM/SIGHUP (what `emu down` sends) or until the emulator stops.
//!
//! The starter builds a command that makes the program call [`serve`] with a
//! [`DaemonSpec`] and hands it to [`start`]; the daemon's later output goes to
//! [`state::log_path`].

use crate::config::{Side, TopologyConfig};
use crate::error::EmuError;
use crate::mode::Mode;
use crate::state::{self, OwnerKind};
use crate::topology::{Topology, UpOptions};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;
use tcptune_sys::process::daemon::{start_daemon, Daemon, Notifier};
use tcptune_sys::process::{signals, ProcessError};

/// What the starter hands to its daemon (as JSON on the command line).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DaemonSpec {
    /// The topology.
    pub topology: TopologyConfig,
    /// [`UpOptions::offload`].
    pub offload: bool,
    /// [`UpOptions::realtime`].
    pub realtime: bool,
    /// [`UpOptions::spin`], nanoseconds.
    pub spin_ns: u64,
}

impl DaemonSpec {
    /// The spec of `topology` brought up with `opts`.
    pub fn new(topology: TopologyConfig, opts: &UpOptions) -> DaemonSpec {
        DaemonSpec {
            topology,
            offload: opts.offload,
            realtime: opts.realtime,
            spin_ns: u64::try_from(opts.spin.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// The options the daemon brings the topology up with.
    pub fn up_options(&self) -> UpOptions {
        UpOptions {
            offload: self.offload,
            realtime: self.realtime,
            spin: Duration::from_nanos(self.spin_ns),
            owner: OwnerKind::Daemon,
            ..UpOptions::default()
        }
    }
}

/// The daemon's readiness message: what came up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpReady {
    /// Topology name.
    pub name: String,
    /// Namespaces, side A then side B.
    pub netns: [String; 2],
    /// Addresses, side A then side B.
    pub addrs: [IpAddr; 2],
    /// Warnings of the emulator threads (for example: no real-time priority).
    pub notes: Vec<String>,
    /// Root or rootless mode.
    pub mode: Mode,
    /// One line: the mode and what it cannot do.
    pub mode_summary: String,
}

/// Start the daemon (`cmd` must make the program call [`serve`]) and wait until the path is
/// up. A daemon that fails gives [`ProcessError::DaemonFailed`] with its exit code.
pub fn start(cmd: &mut Command) -> Result<Daemon<UpReady>, ProcessError> {
    start_daemon(cmd, "the emulator daemon")
}

/// The daemon's body: bring the topology up, report, and keep it up until a stop signal or
/// until the emulator stops; then take it down. `exit_code_of` maps a setup error to the
/// exit code the starter should exit with. Returns this process's exit code.
pub fn serve(spec: &DaemonSpec, exit_code_of: impl Fn(&EmuError) -> u8) -> u8 {
    let name = spec.topology.name.clone();
    let fail = |notifier: Option<Notifier>, e: &EmuError| -> u8 {
        let code = exit_code_of(e);
        match notifier.map(|n| n.failed(code, &e.to_string())) {
            Some(Ok(())) => {}
            Some(Err(n)) => {
                eprintln!("tcptune emu daemon {name}: {e} (and telling the starter: {n})")
            }
            None => eprintln!("tcptune emu daemon {name}: {e}"),
        }
        code
    };
    let notifier = match Notifier::take_stdout() {
        Ok(n) => n,
        Err(e) => return fail(None, &e.into()),
    };
    // Before any thread starts, so that only the wait below takes the stop signals.
    let blocked = match signals::block_stop_signals() {
        Ok(b) => b,
        Err(e) => return fail(Some(notifier), &e.into()),
    };
    let topo = match Topology::up_with(&spec.topology, &spec.up_options()) {
        Ok(t) => t,
        Err(e) => return fail(Some(notifier), &e),
    };
    let ready = UpReady {
        name: name.clone(),
        netns: [
            topo.netns(Side::A).to_string(),
            topo.netns(Side::B).to_string(),
        ],
        addrs: [topo.addr(Side::A), topo.addr(Side::B)],
        notes: topo.notes(),
        mode: topo.mode(),
        mode_summary: topo.mode_summary(),
    };
    if let Err(e) = notifier.ready(&ready, &state::log_path(&name)) {
        eprintln!("tcptune emu daemon {name}: {e}");
    }
    eprintln!(
        "tcptune emu daemon {name}: up: {}",
        spec.topology.path.describe()
    );
    loop {
        if let Some(sig) = blocked.wait(Duration::from_secs(1)) {
            eprintln!(
                "tcptune emu daemon {name}: {}: taking the path down",
                signals::signal_name(sig)
            );
            break;
        }
        if !topo.is_running() {
            eprintln!(
                "tcptune emu daemon {name}: emulator stopped: {:?}; taking the path down",
                topo.failures()
            );
            break;
        }
    }
    match topo.down() {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("tcptune emu daemon {name}: taking the path down: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PathConfig;

    #[test]
    fn spec_round_trips_the_options() {
        let opts = UpOptions {
            offload: false,
            realtime: false,
            spin: Duration::from_micros(7),
            ..UpOptions::default()
        };
        let spec = DaemonSpec::new(TopologyConfig::new("x", PathConfig::default()), &opts);
        let text = serde_json::to_string(&spec).unwrap_or_default();
        let back: Result<DaemonSpec, _> = serde_json::from_str(&text);
        let back = back.map(|b| b.up_options());
        assert!(back.as_ref().is_ok_and(|o| !o.offload && !o.realtime));
        assert_eq!(
            back.ok().map(|o| (o.spin, o.owner)),
            Some((Duration::from_micros(7), OwnerKind::Daemon))
        );
    }
}
