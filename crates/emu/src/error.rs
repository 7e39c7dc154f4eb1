//! Errors of the emulator driver.

use crate::config::ConfigError;

/// Why a topology could not be brought up, used or torn down.
#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// Root mode was asked for (`TCPTUNE_EMU_MODE=root`) without CAP_NET_ADMIN/CAP_SYS_ADMIN.
    #[error(
        "root mode (named network namespaces and TUN devices) needs root, or CAP_NET_ADMIN and \
         CAP_SYS_ADMIN; unset TCPTUNE_EMU_MODE=root to use the rootless mode instead"
    )]
    NotPermitted,
    /// Not privileged, and the rootless mode cannot run here.
    #[error(
        "the emulator needs root, or user namespaces for its rootless mode, and this process \
         may not create them: {0}"
    )]
    NoUserNamespaces(String),
    /// Something only root mode can do.
    #[error("{0} needs root mode (this topology is rootless)")]
    RootOnly(String),
    /// A namespace helper process misbehaved.
    #[error("namespace helper: {0}")]
    Helper(#[from] HelperError),
    /// /dev/net/tun is missing.
    #[error("{0} does not exist: load the tun module (modprobe tun) or run where TUN devices are available")]
    NoTun(String),
    /// A tool the driver runs is missing.
    #[error("'{0}' was not found: install iproute2 (apt-get install iproute2)")]
    MissingTool(String),
    /// The name is in use.
    #[error("topology name '{name}' is taken: {why}")]
    NameTaken {
        /// The name.
        name: String,
        /// By whom.
        why: String,
    },
    /// No topology of that name.
    #[error("no topology named '{0}' (see 'tcptune emu status')")]
    NotFound(String),
    /// A system call failed.
    #[error("{what}: {error}")]
    Sys {
        /// What was being attempted.
        what: String,
        /// The error (shown in the message, so not also chained as a source).
        error: std::io::Error,
    },
    /// A command (`ip ...`) failed.
    #[error("{what} failed: {detail}")]
    Command {
        /// The command line.
        what: String,
        /// Its error output or status.
        detail: String,
    },
    /// The path was set up but no probe crossed it.
    #[error("the emulated path did not come up: {0}")]
    NotReady(String),
    /// A state file could not be understood.
    #[error("state file {path}: {detail}")]
    State {
        /// The file.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// Another live process is changing the host's global sysctls.
    #[error(
        "the host's global sysctls are being changed by process {pid} (another tcptune lab?); \
         wait for it to finish"
    )]
    HostBusy {
        /// That process.
        pid: u32,
    },
    /// Starting, waiting for or stopping a process failed.
    #[error(transparent)]
    Process(#[from] tcptune_sys::process::ProcessError),
    /// The topology belongs to another program.
    #[error("topology '{name}' belongs to {owner}; stop that program to take it down")]
    NotOwned {
        /// The name.
        name: String,
        /// Who owns it.
        owner: String,
    },
}

/// How a namespace helper (the forked process that does the rootless mode's namespace
/// work, or the descriptors it hands back) misbehaved.
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    /// A step that opens a descriptor did not send one back.
    #[error("{step}: no descriptor came back")]
    NoDescriptor {
        /// The step.
        step: String,
    },
    /// The helper exited with a failure status without reporting which step failed.
    #[error(
        "the namespace helper for '{script}' exited with status {status:#x} without saying why"
    )]
    SilentExit {
        /// What its steps were for.
        script: String,
        /// Its wait status.
        status: i32,
    },
    /// A message on the helper's socket that is not one of its reports.
    #[error("a namespace helper sent an unexpected message ({len} bytes, step {step})")]
    BadMessage {
        /// The bytes received.
        len: isize,
        /// The step number it named.
        step: i32,
    },
    /// Fewer (or more) descriptors than the topology's two sides came back.
    #[error("expected two {what}")]
    NotTwo {
        /// What ("packet sockets").
        what: &'static str,
    },
    /// A thread panicked while it held the path's control lock.
    #[error("path control lock poisoned")]
    LockPoisoned,
}

impl EmuError {
    /// Whether this is a problem of the environment (privileges, devices, tools, a name
    /// already taken) rather than of the request or the run (the CLI exits with 5).
    pub fn is_environment(&self) -> bool {
        matches!(
            self,
            EmuError::NotPermitted
                | EmuError::NoUserNamespaces(_)
                | EmuError::NoTun(_)
                | EmuError::MissingTool(_)
                | EmuError::NameTaken { .. }
                | EmuError::HostBusy { .. }
        )
    }

    pub(crate) fn sys(what: impl Into<String>, source: std::io::Error) -> EmuError {
        EmuError::Sys {
            what: what.into(),
            error: source,
        }
    }

    pub(crate) fn last_os(what: impl Into<String>) -> EmuError {
        EmuError::sys(what, std::io::Error::last_os_error())
    }
}

impl From<tcptune_sys::net::NetError> for EmuError {
    fn from(e: tcptune_sys::net::NetError) -> EmuError {
        EmuError::sys(e.op, e.source)
    }
}
