//! Process supervision for everything that runs programs (`tcptune emu`, `send`, the lab,
//! the emulator's namespaces, the test kit): the one implementation of
//!
//! * **stopping processes** ([`terminate()`], decided by the pure [`Termination`]): SIGTERM,
//!   a grace period, SIGKILL, reaping; for a child, a process named by pid and start time
//!   ([`ProcessId`]), or whatever a namespace holds;
//! * **supervised children** ([`spawn`] → [`Supervised`]): they get SIGKILL when their parent
//!   dies, even by SIGKILL (PR_SET_PDEATHSIG), and are terminated when their guard drops;
//! * **stop signals** ([`signals`]): SIGINT/SIGTERM/SIGHUP caught into a flag for a clean
//!   teardown, or blocked and waited for by a daemon;
//! * **daemons** ([`daemon`]): started in a session of their own, reporting readiness with a
//!   typed message ([`daemon::Readiness`]) on a pipe;
//! * **prefixed output** ([`output`]): a child's output on our stderr, line by line, marked;
//! * **nothing outlives a supervisor** ([`Descendants`]): this process adopts its orphaned
//!   descendants (PR_SET_CHILD_SUBREAPER) and terminates and reaps every child left before it
//!   exits.
//!
//! # A supervised run, in order
//!
//! ```no_run
//! use std::process::Command;
//! use std::time::{Duration, Instant};
//! use tcptune_sys::process::{self, signals, Waited};
//!
//! signals::catch_stop_signals()?;                   // 1. before starting anything
//! let mut server = process::spawn(Command::new("sleep").arg("60"), "the server")?
//!     .grace(Duration::from_secs(1));               // 2. children die with us
//! let mut client = process::spawn(&mut Command::new("true"), "the client")?;
//! let deadline = Instant::now() + Duration::from_secs(30);
//! match client.wait_until(Some(deadline), || signals::stop_requested().is_some())? {
//!     Waited::Exited(status) => println!("client: {status}"),
//!     Waited::Deadline | Waited::Interrupted => { client.terminate()?; }
//! }
//! server.terminate()?;                              // 3. SIGTERM, grace, SIGKILL, reap
//! # Ok::<(), tcptune_sys::process::ProcessError>(())
//! ```

mod child;
pub mod daemon;
pub mod output;
mod reaper;
pub mod signals;
mod terminate;

pub use child::{exit_code, spawn, Supervised, Waited, DEFAULT_GRACE};
pub use reaper::{children_of, Descendants};
pub use terminate::{
    send_signal, start_time, terminate, Action, Ended, ProcessId, Signal, Termination, KILL_WAIT,
};

/// Why starting, waiting for or stopping a process failed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The program could not be started.
    #[error("starting {what}: {error}")]
    Spawn {
        /// What was being started.
        what: String,
        /// Why not.
        error: std::io::Error,
    },
    /// A system call failed ("kill SIGTERM pid 123", "waitpid 123 (tcptune serve)").
    #[error("{what}: {error}")]
    Sys {
        /// What was being attempted.
        what: String,
        /// The error.
        error: std::io::Error,
    },
    /// Processes were still there after SIGKILL.
    #[error("{what}: pid(s) {pids:?} still alive after SIGKILL")]
    Survived {
        /// What was being stopped.
        what: String,
        /// The survivors.
        pids: Vec<i32>,
    },
    /// A daemon reported that its setup failed.
    #[error("{message}")]
    DaemonFailed {
        /// The daemon.
        what: String,
        /// The exit code it asks its starter to exit with.
        exit_code: u8,
        /// Its message.
        message: String,
    },
    /// A daemon exited without reporting anything.
    #[error("{what} exited before it was ready ({status})")]
    DaemonExited {
        /// The daemon.
        what: String,
        /// Its exit status.
        status: String,
    },
    /// A daemon's readiness message could not be understood.
    #[error("{what} sent an unreadable readiness message: {detail}")]
    Readiness {
        /// The daemon.
        what: String,
        /// What is wrong with it.
        detail: String,
    },
}
