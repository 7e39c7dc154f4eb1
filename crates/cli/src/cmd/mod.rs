//! One module per subcommand, each with an `Opts` struct and a `run` function.

pub(crate) mod advise;
pub(crate) mod agent;
pub(crate) mod agent_limits;
pub(crate) mod cp;
pub(crate) mod docs;
pub(crate) mod doctor;
pub(crate) mod emu;
pub(crate) mod hold_limits;
pub(crate) mod lab;
pub(crate) mod lab_raise;
pub(crate) mod lab_remote;
pub(crate) mod paths;
pub(crate) mod paths_import;
pub(crate) mod secret;
pub(crate) mod send;
pub(crate) mod serve;
pub(crate) mod ssh;
pub(crate) mod watch;
