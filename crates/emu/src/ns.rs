//! Namespace mechanics shared by both modes: which namespace a descriptor or path is
//! ([`NsId`]), a namespace to run things in ([`NsRef`]), and commands that enter one
//! between fork and exec.
//!
//! The bottom of the emulator's OS layers: [`sys`](crate::sys), the rootless helpers and
//! the records all build on it; it imports nothing of theirs.

use crate::error::EmuError;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Arc;

/// Identifies a namespace: the device and inode of its nsfs file (what `/proc/PID/ns/net`
/// of every process inside resolves to).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NsId {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

impl NsId {
    /// The namespace a descriptor refers to.
    pub(crate) fn of_fd(fd: &OwnedFd, label: &str) -> Result<NsId, EmuError> {
        // SAFETY: fstat into a zeroed stat struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above, on a descriptor we hold.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(EmuError::last_os(format!(
                "fstat network namespace {label}"
            )));
        }
        Ok(NsId {
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }

    /// The namespace a path (`/run/netns/NAME`, `/proc/PID/ns/net`) refers to.
    pub(crate) fn of_path(path: &std::path::Path) -> Option<NsId> {
        std::fs::metadata(path).ok().map(|m| NsId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// A network namespace to run things in, and the user namespace that owns it when that is
/// not the host's (rootless mode).
#[derive(Clone, Debug)]
pub(crate) struct NsRef {
    pub(crate) user: Option<Arc<OwnedFd>>,
    pub(crate) net: Arc<OwnedFd>,
    /// For messages: `tt-NAME-a`.
    pub(crate) label: String,
}

impl NsRef {
    /// The namespace this refers to.
    pub(crate) fn id(&self) -> Result<NsId, EmuError> {
        NsId::of_fd(&self.net, &self.label)
    }

    /// Make `cmd` enter this namespace (its user namespace first, if it has one) between
    /// fork and exec; `pass` are descriptors it may name as `/proc/self/fd/N` (they stay
    /// open across exec).
    pub(crate) fn enter_on_exec(&self, cmd: &mut Command, pass: &[RawFd]) {
        let (user, net) = (self.user.clone(), self.net.clone());
        let pass = pass.to_vec();
        // SAFETY: the hook only calls setns(2) and fcntl(2), which are async-signal-safe, on
        // descriptors kept open by the Arcs the closure owns.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(u) = &user {
                    if libc::setns(u.as_raw_fd(), libc::CLONE_NEWUSER) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if libc::setns(net.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                for &fd in &pass {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
}

/// A command that enters the namespace `ns` between fork and exec (its user namespace
/// first, if it has one).
pub(crate) fn command_in(
    ns: &NsRef,
    me: IpAddr,
    peer: IpAddr,
    program: impl AsRef<std::ffi::OsStr>,
) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("TCPTUNE_SELF", me.to_string())
        .env("TCPTUNE_PEER", peer.to_string());
    ns.enter_on_exec(&mut cmd, &[]);
    cmd
}
