//! The thin Linux layer: TUN devices, network namespaces, `ip`, processes.

use crate::error::EmuError;
use crate::ns::{NsId, NsRef};
use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use tcptune_sys::process;
use tcptune_sys::sysctl::SysctlError;

/// Where `ip netns` keeps named namespaces.
pub(crate) const NETNS_DIR: &str = "/run/netns";
/// The TUN control device.
pub(crate) const TUN_PATH: &str = "/dev/net/tun";

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const TUN_F_CSUM: libc::c_ulong = 0x01;
const TUN_F_TSO4: libc::c_ulong = 0x02;
const TUN_F_TSO6: libc::c_ulong = 0x04;
const TUN_F_TSO_ECN: libc::c_ulong = 0x08;

/// An open TUN device (removed by the kernel when the descriptor closes).
pub(crate) fn open_tun(name: &str, vnet: bool) -> Result<OwnedFd, EmuError> {
    let path = CString::new(TUN_PATH).map_err(|_| EmuError::NoTun(TUN_PATH.into()))?;
    // SAFETY: plain open(2) of a NUL-terminated path.
    let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(EmuError::last_os(format!("open {TUN_PATH}")));
    }
    // SAFETY: raw is a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut ifr = [0u8; 40];
    let bytes = name.as_bytes();
    if bytes.len() >= 16 {
        return Err(EmuError::sys(
            format!("ioctl TUNSETIFF {name}"),
            std::io::Error::from_raw_os_error(libc::ENAMETOOLONG),
        ));
    }
    ifr[..bytes.len()].copy_from_slice(bytes);
    let mut flags = IFF_TUN | IFF_NO_PI;
    if vnet {
        flags |= IFF_VNET_HDR;
    }
    ifr[16..18].copy_from_slice(&flags.to_ne_bytes());
    // SAFETY: TUNSETIFF reads and writes a 40-byte struct ifreq, which ifr is.
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, ifr.as_mut_ptr()) } < 0 {
        return Err(EmuError::last_os(format!("ioctl TUNSETIFF {name}")));
    }
    // The offload setting survives on a device: always set it, to nothing without vnet.
    let offload = if vnet {
        TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN
    } else {
        0
    };
    // SAFETY: TUNSETOFFLOAD takes an integer argument.
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETOFFLOAD, offload) } < 0 {
        return Err(EmuError::last_os(format!(
            "ioctl TUNSETOFFLOAD {offload:#x} on {name}"
        )));
    }
    set_nonblocking(fd.as_raw_fd(), name)?;
    Ok(fd)
}

pub(crate) fn set_nonblocking(fd: RawFd, what: &str) -> Result<(), EmuError> {
    // SAFETY: fcntl on a descriptor we own.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if fl < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
        return Err(EmuError::last_os(format!("fcntl O_NONBLOCK on {what}")));
    }
    Ok(())
}

/// The bind-mount file of a named namespace.
pub(crate) fn netns_path(name: &str) -> PathBuf {
    PathBuf::from(NETNS_DIR).join(name)
}

/// Run `ip ARGS...`, with `stdin` fed to it (for `-batch -`).
pub(crate) fn ip(args: &[&str], stdin: Option<&str>) -> Result<(), EmuError> {
    run_ip(Command::new("ip").args(args), args, stdin)
}

/// Run `ip ARGS...` inside the namespace `ns` (joining its user namespace first, if any);
/// `pass` are descriptors `ip` may name as `/proc/self/fd/N` (they stay open across exec).
pub(crate) fn ip_in(
    ns: &NsRef,
    args: &[&str],
    stdin: Option<&str>,
    pass: &[RawFd],
) -> Result<(), EmuError> {
    let mut cmd = Command::new("ip");
    cmd.args(args);
    ns.enter_on_exec(&mut cmd, pass);
    run_ip(&mut cmd, args, stdin).map_err(|e| match e {
        EmuError::Command { what, detail } => EmuError::Command {
            what: format!("{what} (in {})", ns.label),
            detail,
        },
        e => e,
    })
}

fn run_ip(cmd: &mut Command, args: &[&str], stdin: Option<&str>) -> Result<(), EmuError> {
    let what = format!("ip {}", args.join(" "));
    let mut child = cmd
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                EmuError::MissingTool("ip".into())
            } else {
                EmuError::sys(format!("starting {what}"), e)
            }
        })?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .map_err(|e| EmuError::sys(format!("writing commands to {what}"), e))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| EmuError::sys(format!("waiting for {what}"), e))?;
    if !out.status.success() {
        let detail = String::from_utf8_lossy(&out.stderr).trim().to_string();
        let detail = match stdin {
            Some(cmds) => format!("{detail} (commands: {})", cmds.trim().replace('\n', "; ")),
            None => detail,
        };
        return Err(EmuError::Command { what, detail });
    }
    Ok(())
}

/// Create a named network namespace (`ip netns add`).
pub(crate) fn create_netns(name: &str) -> Result<(), EmuError> {
    ip(&["netns", "add", name], None)
}

/// Open a named namespace.
pub(crate) fn open_netns(name: &str) -> Result<OwnedFd, EmuError> {
    let path = netns_path(name);
    fs::File::open(&path)
        .map(OwnedFd::from)
        .map_err(|e| EmuError::sys(format!("opening network namespace {}", path.display()), e))
}

/// Move the calling thread into the namespace `fd`.
pub(crate) fn enter_netns(fd: RawFd, name: &str) -> Result<(), EmuError> {
    // SAFETY: setns on a namespace descriptor; affects only the calling thread.
    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
        return Err(EmuError::last_os(format!(
            "setns into network namespace {name}"
        )));
    }
    Ok(())
}

/// Remove a named namespace (what `ip netns del` does): detach the bind mount, delete the
/// file. The namespace itself goes away when nothing uses it any more.
pub(crate) fn delete_netns(name: &str) -> Result<(), EmuError> {
    let path = netns_path(name);
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| EmuError::NotFound(name.to_string()))?;
    // SAFETY: umount2 of a NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) && e.raw_os_error() != Some(libc::ENOENT) {
            return Err(EmuError::sys(format!("umount {}", path.display()), e));
        }
    }
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(EmuError::sys(format!("removing {}", path.display()), e)),
    }
}

/// Processes whose network namespace is `id` (never this process).
pub(crate) fn pids_in_ns(id: NsId) -> Vec<i32> {
    let me = std::process::id() as i32;
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|&pid| pid != me)
        .filter(|&pid| NsId::of_path(&PathBuf::from(format!("/proc/{pid}/ns/net"))) == Some(id))
        .collect()
}

/// Processes whose network namespace is the named one (never this process).
pub(crate) fn pids_in_netns(name: &str) -> Vec<i32> {
    match NsId::of_path(&netns_path(name)) {
        Some(id) => pids_in_ns(id),
        None => Vec::new(),
    }
}

/// Stop every process inside the named namespace: SIGTERM, then SIGKILL after `grace`.
pub(crate) fn kill_netns_processes(name: &str, grace: Duration) -> Result<(), EmuError> {
    let what = format!("processes in network namespace {name}");
    process::terminate(&what, grace, || pids_in_netns(name))?;
    Ok(())
}

/// Stop every process inside the namespace `id` (`label` names it in errors).
pub(crate) fn kill_ns_processes(id: NsId, label: &str, grace: Duration) -> Result<(), EmuError> {
    let what = format!("processes in network namespace {label}");
    process::terminate(&what, grace, || pids_in_ns(id))?;
    Ok(())
}

/// Read a sysctl of the calling thread's network namespace (global ones from anywhere),
/// without the trailing newline.
pub(crate) fn read_sysctl(key: &str) -> Result<String, EmuError> {
    tcptune_sys::sysctl::read_sysctl(key).map_err(sysctl_error)
}

/// Write a sysctl of the calling thread's network namespace.
pub(crate) fn write_sysctl(key: &str, value: &str) -> Result<(), EmuError> {
    tcptune_sys::sysctl::write_sysctl(key, value).map_err(sysctl_error)
}

/// The emulator's error for a sysctl that could not be read or written ("writing sysctl
/// KEY=VALUE: ...", with [`sysctl_hint`] added to an EPERM).
fn sysctl_error(e: SysctlError) -> EmuError {
    match e {
        SysctlError::Read { key, source, .. } => {
            EmuError::sys(format!("reading sysctl {key}"), source)
        }
        SysctlError::Write {
            key, value, source, ..
        } => {
            let hint = if source.raw_os_error() == Some(libc::EPERM) {
                sysctl_hint(&key)
            } else {
                ""
            };
            EmuError::sys(format!("writing sysctl {key}={value}{hint}"), source)
        }
        e @ (SysctlError::BadKey(_) | SysctlError::Parse { .. }) => EmuError::sys(
            e.to_string(),
            std::io::Error::from(std::io::ErrorKind::InvalidInput),
        ),
    }
}

/// What to add to an EPERM from writing sysctl `key` in a namespace.
pub(crate) fn sysctl_hint(key: &str) -> &'static str {
    if key == "net.ipv4.tcp_congestion_control" {
        " (outside the host's own namespace the default algorithm must be listed in the \
         host's net.ipv4.tcp_allowed_congestion_control, a global sysctl the emulator \
         does not change: add it there, e.g. sysctl -w \
         net.ipv4.tcp_allowed_congestion_control='reno bbr cubic')"
    } else {
        ""
    }
}

/// Lower the calling thread's timer slack to 1 ns (the default 50 us would add to every
/// wake-up).
pub(crate) fn set_timer_slack_min() {
    // SAFETY: prctl(PR_SET_TIMERSLACK) affects only the calling thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// Make the calling thread SCHED_FIFO at `prio`; false if not permitted.
pub(crate) fn set_realtime(prio: i32) -> bool {
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: sets the scheduling policy of the calling thread.
    unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) == 0 }
}
