//! Work inside namespaces this process may not enter itself, done by a forked child.
//!
//! A process without root cannot move its own threads into a network namespace that belongs
//! to a user namespace it created (`setns` also wants `CAP_SYS_ADMIN` in the caller's own user
//! namespace), and a multithreaded process cannot join a user namespace at all. A child forked
//! from it is single-threaded and may: it joins the user namespace (whose owner has every
//! capability there), then a network namespace, does the work, and hands back what it opened
//! (a namespace, a socket, a `/proc` file) as file descriptors over a socket pair
//! (`SCM_RIGHTS`). Sockets and `/proc/.../net` files keep the namespace they were created in,
//! so this process then uses them like its own.
//!
//! The child of a multithreaded process may only make async-signal-safe calls: everything it
//! needs (paths, data) is prepared before the fork as a [`Script`] of [`Op`]s, which the child
//! runs with plain system calls and no allocation before it `_exit`s. For each step that fails
//! it reports the step and `errno`, and the parent turns that into an error naming what was
//! attempted.
//!
//! # Use
//!
//! 1. [`Script::new`], then [`Script::push`] the steps in order (join namespaces first); each
//!    push returns the step's index and takes a description for errors.
//! 2. [`Script::run`] forks, runs the steps in the child until one fails, and returns the
//!    [`Opened`] descriptors (or the first failure).
//! 3. [`Opened::take`] the descriptor of each step that opens one.

use crate::error::{EmuError, HelperError};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// One step the child takes.
#[derive(Debug)]
pub(crate) enum Op {
    /// `unshare(flags)`: new namespaces for the child (and what it creates later).
    Unshare(libc::c_int),
    /// `setns(fd, nstype)`: join a namespace (the user namespace first, then the others).
    Enter {
        /// A namespace descriptor this process holds (inherited by the child).
        fd: RawFd,
        /// `CLONE_NEWUSER`, `CLONE_NEWNET`.
        nstype: libc::c_int,
    },
    /// Open `path` for writing and write `data` to it (a sysctl, a uid map).
    Write {
        /// The file.
        path: CString,
        /// What to write, in one `write`.
        data: Vec<u8>,
    },
    /// Open `path` (`O_CLOEXEC` is added) and hand the descriptor back.
    Open {
        /// The file.
        path: CString,
        /// `O_RDONLY`, ...
        flags: libc::c_int,
    },
    /// `socket(domain, ty, protocol)` and hand it back.
    Socket {
        /// `AF_INET`, `AF_PACKET`, ...
        domain: libc::c_int,
        /// `SOCK_STREAM | SOCK_CLOEXEC`, ...
        ty: libc::c_int,
        /// The protocol.
        protocol: libc::c_int,
    },
}

impl Op {
    fn opens(&self) -> bool {
        matches!(self, Op::Open { .. } | Op::Socket { .. })
    }
}

/// Steps for a forked child, each with what it attempts (for errors).
#[derive(Debug, Default)]
pub(crate) struct Script {
    ops: Vec<(Op, String)>,
}

/// The descriptors a script's steps opened, by step index.
#[derive(Debug)]
pub(crate) struct Opened {
    fds: Vec<Option<OwnedFd>>,
    what: Vec<String>,
}

impl Opened {
    /// The descriptor step `index` opened.
    pub(crate) fn take(&mut self, index: usize) -> Result<OwnedFd, EmuError> {
        let what = self.what.get(index).cloned().unwrap_or_default();
        self.fds
            .get_mut(index)
            .and_then(Option::take)
            .ok_or_else(|| HelperError::NoDescriptor { step: what }.into())
    }
}

/// Message from the child: step index and errno (0: done, with a descriptor if it opens one).
type Message = [i32; 2];
const MESSAGE_LEN: usize = std::mem::size_of::<Message>();

impl Script {
    pub(crate) fn new() -> Script {
        Script::default()
    }

    /// Add a step; returns its index (for [`Opened::take`]).
    pub(crate) fn push(&mut self, op: Op, what: impl Into<String>) -> usize {
        self.ops.push((op, what.into()));
        self.ops.len() - 1
    }

    /// Join the user namespace `user` (if any), then the network namespace `net`.
    pub(crate) fn enter(&mut self, user: Option<&OwnedFd>, net: &OwnedFd, label: &str) {
        if let Some(u) = user {
            self.push(
                Op::Enter {
                    fd: u.as_raw_fd(),
                    nstype: libc::CLONE_NEWUSER,
                },
                format!("setns into the user namespace of {label}"),
            );
        }
        self.push(
            Op::Enter {
                fd: net.as_raw_fd(),
                nstype: libc::CLONE_NEWNET,
            },
            format!("setns into network namespace {label}"),
        );
    }

    /// Write `value` to sysctl `key` (in the network namespace joined before).
    pub(crate) fn write_sysctl(&mut self, key: &str, value: &str, label: &str) {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        match CString::new(path) {
            Ok(path) => {
                self.push(
                    Op::Write {
                        path,
                        data: value.as_bytes().to_vec(),
                    },
                    format!(
                        "writing sysctl {key}={value} in {label}{}",
                        crate::sys::sysctl_hint(key)
                    ),
                );
            }
            // A NUL in a key: the parent reports it as a failed step of its own.
            Err(_) => {
                self.push(
                    Op::Unshare(-1),
                    format!("sysctl key {key:?} holds a NUL byte"),
                );
            }
        }
    }

    /// Open `path` (read-only unless `flags` say otherwise) and hand it back.
    pub(crate) fn open(&mut self, path: &str, flags: libc::c_int, what: String) -> usize {
        match CString::new(path) {
            Ok(path) => self.push(Op::Open { path, flags }, what),
            Err(_) => self.push(
                Op::Unshare(-1),
                format!("{what}: the path holds a NUL byte"),
            ),
        }
    }

    /// Fork, run the steps in the child until one fails, and collect what they opened.
    pub(crate) fn run(self) -> Result<Opened, EmuError> {
        let what_all = self
            .ops
            .first()
            .map_or_else(String::new, |(_, w)| w.clone());
        let mut pair = [0 as RawFd; 2];
        // SAFETY: socketpair(2) writes two descriptors into `pair`.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                pair.as_mut_ptr(),
            )
        };
        if r != 0 {
            return Err(EmuError::last_os(format!(
                "socketpair for a namespace helper ({what_all})"
            )));
        }
        // SAFETY: both descriptors are fresh and ours.
        let (ours, theirs) =
            unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
        let ops: Vec<&Op> = self.ops.iter().map(|(op, _)| op).collect();
        // SAFETY: fork(2). The child runs only `child_main`, which makes async-signal-safe
        // system calls on data prepared before the fork and never returns.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(EmuError::last_os(format!(
                "fork a namespace helper ({what_all})"
            )));
        }
        if pid == 0 {
            // SAFETY: in the child; see `child_main`.
            unsafe { child_main(&ops, theirs.as_raw_fd()) }
        }
        drop(theirs);
        let received = receive_all(&ours, self.ops.len());
        let status = wait_child(pid);
        let what: Vec<String> = self.ops.iter().map(|(_, w)| w.clone()).collect();
        let (fds, failure) = received?;
        if let Some((index, errno)) = failure {
            let step = what
                .get(index)
                .cloned()
                .unwrap_or_else(|| format!("step {index}"));
            return Err(EmuError::sys(
                step,
                std::io::Error::from_raw_os_error(errno),
            ));
        }
        match status {
            Ok(0) => {}
            Ok(code) => {
                return Err(HelperError::SilentExit {
                    script: what_all,
                    status: code,
                }
                .into())
            }
            Err(e) => return Err(e),
        }
        for (i, (op, w)) in self.ops.iter().enumerate() {
            if op.opens() && fds.get(i).is_none_or(Option::is_none) {
                return Err(HelperError::NoDescriptor { step: w.clone() }.into());
            }
        }
        Ok(Opened { fds, what })
    }
}

/// Read the child's messages until it closes its end.
#[allow(clippy::type_complexity)]
fn receive_all(
    sock: &OwnedFd,
    n_ops: usize,
) -> Result<(Vec<Option<OwnedFd>>, Option<(usize, i32)>), EmuError> {
    let mut fds: Vec<Option<OwnedFd>> = (0..n_ops).map(|_| None).collect();
    let mut failure = None;
    loop {
        let mut msg: Message = [0; 2];
        let mut cbuf = [0u64; 8];
        let mut iov = libc::iovec {
            iov_base: msg.as_mut_ptr().cast(),
            iov_len: MESSAGE_LEN,
        };
        // SAFETY: msghdr is plain data; zeroed is a valid empty value, filled in below.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = cbuf.as_mut_ptr().cast();
        hdr.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        // SAFETY: recvmsg into buffers that live for the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut hdr, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(EmuError::sys("reading from a namespace helper", e));
        }
        if n == 0 {
            break;
        }
        // SAFETY: walking the control messages recvmsg filled in; CMSG_* stay within
        // msg_controllen.
        let fd = unsafe {
            let mut fd = None;
            let mut c = libc::CMSG_FIRSTHDR(&hdr);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let raw = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>());
                    fd = Some(OwnedFd::from_raw_fd(raw));
                }
                c = libc::CMSG_NXTHDR(&hdr, c);
            }
            fd
        };
        let index = usize::try_from(msg[0]).unwrap_or(usize::MAX);
        if usize::try_from(n).ok() != Some(MESSAGE_LEN) || index >= n_ops {
            return Err(HelperError::BadMessage {
                len: n,
                step: msg[0],
            }
            .into());
        }
        if msg[1] != 0 {
            failure = Some((index, msg[1]));
        } else if let Some(fd) = fd {
            fds[index] = Some(fd);
        }
    }
    Ok((fds, failure))
}

/// Reap the child; its wait status.
fn wait_child(pid: libc::pid_t) -> Result<i32, EmuError> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ok(status);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(EmuError::sys(
                format!("waitpid {pid} (a namespace helper)"),
                e,
            ));
        }
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Send one message, with `fd` attached if given. Async-signal-safe.
unsafe fn send(sock: RawFd, index: usize, err: i32, fd: Option<RawFd>) -> bool {
    let msg: Message = [index as i32, err];
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: MESSAGE_LEN,
    };
    let mut cbuf = [0u64; 8];
    let mut hdr: libc::msghdr = std::mem::zeroed();
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    if let Some(fd) = fd {
        hdr.msg_control = cbuf.as_mut_ptr().cast();
        hdr.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as _;
        let c = libc::CMSG_FIRSTHDR(&hdr);
        if c.is_null() {
            return false;
        }
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
    }
    libc::sendmsg(sock, &hdr, libc::MSG_NOSIGNAL) == MESSAGE_LEN as isize
}

/// One step in the child: `Ok(Some(fd))` for a descriptor to hand back.
unsafe fn step(op: &Op) -> Result<Option<RawFd>, i32> {
    match op {
        Op::Unshare(flags) => {
            if *flags < 0 {
                return Err(libc::EINVAL);
            }
            if libc::unshare(*flags) != 0 {
                return Err(errno());
            }
            Ok(None)
        }
        Op::Enter { fd, nstype } => {
            if libc::setns(*fd, *nstype) != 0 {
                return Err(errno());
            }
            Ok(None)
        }
        Op::Write { path, data } => {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(errno());
            }
            let n = libc::write(fd, data.as_ptr().cast(), data.len());
            let result = if n < 0 {
                Err(errno())
            } else if n as usize != data.len() {
                Err(libc::EIO)
            } else {
                Ok(None)
            };
            libc::close(fd);
            result
        }
        Op::Open { path, flags } => {
            let fd = libc::open(path.as_ptr(), *flags | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(errno());
            }
            Ok(Some(fd))
        }
        Op::Socket {
            domain,
            ty,
            protocol,
        } => {
            let fd = libc::socket(*domain, *ty, *protocol);
            if fd < 0 {
                return Err(errno());
            }
            Ok(Some(fd))
        }
    }
}

/// The child: run the steps, report, exit. Only async-signal-safe calls, no allocation.
unsafe fn child_main(ops: &[&Op], sock: RawFd) -> ! {
    for (i, op) in ops.iter().enumerate() {
        match step(op) {
            Ok(None) => {}
            Ok(Some(fd)) => {
                let sent = send(sock, i, 0, Some(fd));
                libc::close(fd);
                if !sent {
                    libc::_exit(3);
                }
            }
            Err(e) => {
                send(sock, i, e, None);
                libc::_exit(1);
            }
        }
    }
    libc::_exit(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_file_opened_by_the_child_comes_back_readable() {
        // A network /proc file keeps its namespace after the child that opened it is gone.
        let mut s = Script::new();
        let i = s.open(
            "/proc/thread-self/net/dev",
            libc::O_RDONLY,
            "opening net/dev".into(),
        );
        let mut opened = s.run().unwrap_or_else(|e| panic!("{e}"));
        let fd = opened.take(i).unwrap_or_else(|e| panic!("{e}"));
        let mut text = String::new();
        let read = std::fs::File::from(fd).read_to_string(&mut text);
        assert!(read.is_ok(), "{read:?}");
        assert!(text.contains("lo:"), "{text}");
    }

    #[test]
    fn a_failed_step_is_named_with_its_errno_and_stops_the_script() {
        let mut s = Script::new();
        s.open(
            "/nonexistent/tcptune",
            libc::O_RDONLY,
            "opening the missing file".into(),
        );
        let later = s.open("/proc/self/stat", libc::O_RDONLY, "never reached".into());
        let e = s.run().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.starts_with("opening the missing file: "), "{e}");
        assert!(e.contains("No such file"), "{e}");
        assert!(later == 1);
    }

    #[test]
    fn a_socket_made_by_the_child_works_here() {
        let mut s = Script::new();
        let i = s.push(
            Op::Socket {
                domain: libc::AF_INET,
                ty: libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                protocol: 0,
            },
            "a UDP socket",
        );
        let fd = s.run().and_then(|mut o| o.take(i));
        let sock = fd.map(std::net::UdpSocket::from);
        let sock = sock.unwrap_or_else(|e| panic!("{e}"));
        assert!(sock.set_nonblocking(true).is_ok());
        assert!(sock.local_addr().is_ok());
    }

    #[test]
    fn a_key_with_a_nul_fails_in_the_parent_terms() {
        let mut s = Script::new();
        s.write_sysctl("net.ipv4\0x", "1", "test");
        let e = s.run().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("NUL"), "{e}");
    }
}
