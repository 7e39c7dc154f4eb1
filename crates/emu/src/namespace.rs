//! [`Namespace`]: a network namespace of the caller's own without an emulator, made the
//! rootless way (inside a new user namespace, held by a file descriptor) so that anyone can
//! have one; for tests and tools that need a clean network stack (`doctor --apply`, socket
//! dumps) and may not be root.

use crate::error::EmuError;
use crate::ns::{command_in, NsId, NsRef};
use crate::rootless::Rootless;
use crate::sys;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Command;
use std::time::Duration;

/// A network namespace inside a user namespace of its own (where the caller is root), with
/// loopback up. Dropping it stops every process still inside; the namespace goes away with
/// the last of them.
///
/// # Use
///
/// [`Namespace::new`] (or [`Namespace::pair`]), then [`command`](Self::command) to run
/// programs inside (they are root there), [`socket`](Self::socket) to make sockets inside,
/// [`read_sysctl`](Self::read_sysctl)/[`write_sysctl`](Self::write_sysctl); drop it.
#[derive(Debug)]
pub struct Namespace {
    ns: NsRef,
}

impl Namespace {
    /// A fresh namespace (`label` names it in messages).
    pub fn new(label: &str) -> Result<Namespace, EmuError> {
        let (a, _b) = Namespace::create(label)?;
        a.ns.ip_batch("link set lo up\n", &[])?;
        Ok(a)
    }

    /// Two namespaces in one user namespace joined by a veth pair (`veth0` in the first,
    /// `veth1` in the second), addressed `a` and `b` with prefix length `prefix`, up.
    pub fn pair(
        label: &str,
        a: IpAddr,
        b: IpAddr,
        prefix: u8,
    ) -> Result<(Namespace, Namespace), EmuError> {
        let (na, nb) = Namespace::create(label)?;
        na.ns.ip_batch(
            &format!(
                "link set lo up\n\
                 link add veth0 type veth peer name veth1 netns /proc/self/fd/{}\n\
                 addr add {a}/{prefix} dev veth0\n\
                 link set veth0 up\n",
                nb.ns.net.as_raw_fd()
            ),
            &[nb.ns.net.as_raw_fd()],
        )?;
        nb.ns.ip_batch(
            &format!(
                "link set lo up\n\
                 addr add {b}/{prefix} dev veth1\n\
                 link set veth1 up\n"
            ),
            &[],
        )?;
        Ok((na, nb))
    }

    fn create(label: &str) -> Result<(Namespace, Namespace), EmuError> {
        let labels = [format!("{label}-a"), format!("{label}-b")];
        let rl = Rootless::create(&labels)?;
        let [a, b] = rl.sides;
        Ok((Namespace { ns: a }, Namespace { ns: b }))
    }

    /// The label given at creation.
    pub fn label(&self) -> &str {
        &self.ns.label
    }

    /// A command that runs `program` inside (as root of the user namespace).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = command_in(
            &self.ns,
            IpAddr::from([0, 0, 0, 0]),
            IpAddr::from([0, 0, 0, 0]),
            program,
        );
        cmd.env_remove("TCPTUNE_SELF").env_remove("TCPTUNE_PEER");
        cmd
    }

    /// A socket created inside (`SOCK_CLOEXEC` is added).
    pub fn socket(
        &self,
        domain: libc::c_int,
        ty: libc::c_int,
        protocol: libc::c_int,
    ) -> Result<OwnedFd, EmuError> {
        self.ns.socket(domain, ty, protocol)
    }

    /// A sysctl as seen inside (trimmed).
    pub fn read_sysctl(&self, key: &str) -> Result<String, EmuError> {
        use std::io::Read as _;
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let mut text = String::new();
        self.ns
            .open(&path)?
            .read_to_string(&mut text)
            .map_err(|e| EmuError::sys(format!("reading {path} of {}", self.ns.label), e))?;
        Ok(text.trim().to_string())
    }

    /// Set a sysctl inside.
    pub fn write_sysctl(&self, key: &str, value: &str) -> Result<(), EmuError> {
        crate::config::check_namespaced_sysctl(key)?;
        self.ns
            .write_sysctls(&[(key.to_string(), value.to_string())])
    }

    /// Which namespace it is.
    pub fn id(&self) -> Result<NsId, EmuError> {
        self.ns.id()
    }

    /// The processes inside now.
    pub fn processes(&self) -> Vec<i32> {
        self.ns.id().map(sys::pids_in_ns).unwrap_or_default()
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        if let Ok(id) = self.ns.id() {
            if let Err(e) = sys::kill_ns_processes(id, &self.ns.label, Duration::from_secs(1)) {
                eprintln!("tcptune emu: {e}");
            }
        }
    }
}
