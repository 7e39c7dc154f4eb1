//! The namespaces and links of a rootless topology (see [`mode`](crate::mode)).
//!
//! A user namespace of the topology's own holds three network namespaces, each held by a
//! file descriptor of the owner process: the emulator's (`E`), side A's and side B's. A veth
//! pair joins each side to `E`: `tt0` in the side (the address, point-to-point to the other
//! side, no ARP) and `tta`/`ttb` in `E`, where a packet socket with virtio-net headers reads
//! what the side sends (GSO super-packets included) and writes what the path delivers to it.
//! The owner's emulator threads use those sockets exactly as they use TUN devices in root
//! mode; only the 14-byte Ethernet header differs (the worker's `Framing`).
//!
//! Everything that needs the namespaces' privileges runs in a forked helper
//! ([`nsexec`](crate::nsexec)) or in `ip` started inside them; the descriptors come back to
//! the owner. When it closes them (or dies), the namespaces, links and sockets go away with
//! the last process inside.

use crate::error::{EmuError, HelperError};
use crate::mode;
use crate::ns::NsRef;
use crate::nsexec::{Op, Script};
use crate::sys;
use std::fs::File;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// The veth ends in the emulator's namespace, for side A and side B.
pub(crate) const EMU_ENDS: [&str; 2] = ["tta", "ttb"];

const SOL_PACKET: libc::c_int = 263;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const SIOCGIFINDEX: libc::c_ulong = 0x8933;
/// Receive and send buffer asked for on the packet sockets (the kernel caps it at the host's
/// net.core.rmem_max/wmem_max).
const PACKET_SOCKET_BUFFER: libc::c_int = 64 << 20;

/// MAC address of side `side`'s `tt0` (`own = true`) or of its peer end in the emulator's
/// namespace: locally administered, fixed (every topology is its own set of namespaces).
pub(crate) fn mac(side: usize, own: bool) -> [u8; 6] {
    [
        0x02,
        0x74,
        0x74,
        0x00,
        0x0a + side as u8,
        if own { 1 } else { 2 },
    ]
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl NsRef {
    /// A helper script that starts by joining this namespace.
    pub(crate) fn script(&self) -> Script {
        let mut s = Script::new();
        s.enter(self.user.as_deref(), &self.net, &self.label);
        s
    }

    /// Open `path` inside the namespace (a `/proc/thread-self/net/...` file).
    pub(crate) fn open(&self, path: &str) -> Result<File, EmuError> {
        let mut s = self.script();
        let i = s.open(
            path,
            libc::O_RDONLY,
            format!("opening {path} in {}", self.label),
        );
        Ok(File::from(s.run()?.take(i)?))
    }

    /// A socket created inside the namespace.
    pub(crate) fn socket(
        &self,
        domain: libc::c_int,
        ty: libc::c_int,
        protocol: libc::c_int,
    ) -> Result<OwnedFd, EmuError> {
        let mut s = self.script();
        let i = s.push(
            Op::Socket {
                domain,
                ty: ty | libc::SOCK_CLOEXEC,
                protocol,
            },
            format!("socket({domain}, {ty}, {protocol}) in {}", self.label),
        );
        s.run()?.take(i)
    }

    /// Write sysctls inside the namespace.
    pub(crate) fn write_sysctls(&self, sysctls: &[(String, String)]) -> Result<(), EmuError> {
        let mut s = self.script();
        for (k, v) in sysctls {
            s.write_sysctl(k, v, &self.label);
        }
        s.run().map(drop)
    }

    /// Run `ip -batch -` inside the namespace with `cmds` on its stdin; `pass` are
    /// descriptors `ip` may name as `/proc/self/fd/N`.
    pub(crate) fn ip_batch(&self, cmds: &str, pass: &[RawFd]) -> Result<(), EmuError> {
        sys::ip_in(self, &["-batch", "-"], Some(cmds), pass)
    }
}

/// The namespaces of a rootless topology.
#[derive(Debug)]
pub(crate) struct Rootless {
    /// The emulator's namespace (`tta`, `ttb` and the packet sockets).
    pub(crate) emu: NsRef,
    /// Side A's and side B's.
    pub(crate) sides: [NsRef; 2],
}

/// What [`Rootless::wire`] made: per side, the packet socket on its veth end in the
/// emulator's namespace and the side's `/proc/net/dev` (for `tt0`'s drop counter).
pub(crate) struct Wired {
    pub(crate) sockets: [OwnedFd; 2],
    pub(crate) netdev: [File; 2],
}

impl Rootless {
    /// Create a user namespace and, in it, the emulator's network namespace and one per side
    /// (`labels`: side A's and side B's names, for messages).
    pub(crate) fn create(labels: &[String; 2]) -> Result<Rootless, EmuError> {
        let mut s = Script::new();
        mode::push_new_userns(&mut s);
        let user = s.open(
            "/proc/self/ns/user",
            libc::O_RDONLY,
            "opening the new user namespace".into(),
        );
        let emu = s.open(
            "/proc/self/ns/net",
            libc::O_RDONLY,
            "opening the emulator's network namespace".into(),
        );
        let mut sides = [0; 2];
        for (i, label) in labels.iter().enumerate() {
            s.push(
                Op::Unshare(libc::CLONE_NEWNET),
                format!("unshare(CLONE_NEWNET) for {label}"),
            );
            sides[i] = s.open(
                "/proc/self/ns/net",
                libc::O_RDONLY,
                format!("opening network namespace {label}"),
            );
        }
        let mut o = s.run()?;
        let user = Arc::new(o.take(user)?);
        let emu = NsRef {
            user: Some(user.clone()),
            net: Arc::new(o.take(emu)?),
            label: format!("{}'s emulator namespace", labels[0].trim_end_matches("-a")),
        };
        let side = |o: &mut crate::nsexec::Opened, i: usize| -> Result<NsRef, EmuError> {
            Ok(NsRef {
                user: Some(user.clone()),
                net: Arc::new(o.take(sides[i])?),
                label: labels[i].clone(),
            })
        };
        let a = side(&mut o, 0)?;
        let b = side(&mut o, 1)?;
        Ok(Rootless { emu, sides: [a, b] })
    }

    /// Configure the namespaces (`sysctls` in both sides), join each side to the emulator's
    /// namespace with a veth pair, address the sides (`addrs`, point to point; side B also
    /// gets `extra_b`, which side A routes to it), and open a packet socket on each veth
    /// end in the emulator's namespace.
    pub(crate) fn wire(
        &self,
        mtu: u32,
        addrs: [IpAddr; 2],
        extra_b: &[IpAddr],
        sysctls: &[(String, String)],
    ) -> Result<Wired, EmuError> {
        let no_ipv6 = [
            (
                "net.ipv6.conf.all.disable_ipv6".to_string(),
                "1".to_string(),
            ),
            (
                "net.ipv6.conf.default.disable_ipv6".to_string(),
                "1".to_string(),
            ),
        ];
        self.emu.write_sysctls(&no_ipv6)?;
        let mut netdev = Vec::new();
        for side in &self.sides {
            let mut s = side.script();
            for (k, v) in no_ipv6.iter().chain(sysctls) {
                s.write_sysctl(k, v, &side.label);
            }
            let dev = "/proc/thread-self/net/dev";
            let i = s.open(
                dev,
                libc::O_RDONLY,
                format!("opening {dev} in {}", side.label),
            );
            netdev.push(File::from(s.run()?.take(i)?));
        }
        let mut cmds = String::new();
        for (i, side) in self.sides.iter().enumerate() {
            let end = EMU_ENDS[i];
            cmds.push_str(&format!(
                "link add {end} address {} mtu {mtu} type veth peer name {} address {} mtu {mtu} netns /proc/self/fd/{}\n\
                 link set dev {end} arp off up\n",
                mac_text(mac(i, false)),
                crate::addr::TUN_NAME,
                mac_text(mac(i, true)),
                side.net.as_raw_fd(),
            ));
        }
        let pass: Vec<RawFd> = self.sides.iter().map(|s| s.net.as_raw_fd()).collect();
        self.emu.ip_batch(&cmds, &pass)?;
        for (i, side) in self.sides.iter().enumerate() {
            let (me, peer) = (addrs[i], addrs[1 - i]);
            let dev = crate::addr::TUN_NAME;
            let mut cmds = format!(
                "link set lo up\n\
                 link set dev {dev} arp off up\n\
                 addr add {me}/32 peer {peer}/32 dev {dev}\n"
            );
            cmds.push_str(&crate::addr::extra_addr_cmds(i, addrs[0], extra_b));
            side.ip_batch(&cmds, &[])?;
        }
        let mut sockets = Vec::new();
        for end in EMU_ENDS {
            let fd = self.emu.socket(libc::AF_PACKET, libc::SOCK_RAW, 0)?;
            bind_packet_socket(&fd, end, &self.emu.label)?;
            sockets.push(fd);
        }
        let [sa, sb]: [OwnedFd; 2] = sockets.try_into().map_err(|_| HelperError::NotTwo {
            what: "packet sockets",
        })?;
        let [na, nb]: [File; 2] = netdev.try_into().map_err(|_| HelperError::NotTwo {
            what: "/proc/net/dev files",
        })?;
        Ok(Wired {
            sockets: [sa, sb],
            netdev: [na, nb],
        })
    }
}

fn setsockopt_int(
    fd: &OwnedFd,
    level: libc::c_int,
    opt: libc::c_int,
    value: libc::c_int,
    what: &str,
) -> Result<(), EmuError> {
    // SAFETY: setsockopt with a pointer to an int and its size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(EmuError::last_os(what.to_string()));
    }
    Ok(())
}

/// Make a packet socket (created in the emulator's namespace) carry virtio-net headers,
/// ignore what the namespace itself sends, and bind it to `dev`; non-blocking.
fn bind_packet_socket(fd: &OwnedFd, dev: &str, label: &str) -> Result<(), EmuError> {
    let on = |opt, name: &str| {
        setsockopt_int(
            fd,
            SOL_PACKET,
            opt,
            1,
            &format!("setsockopt {name} on the packet socket of {dev} in {label}"),
        )
    };
    on(PACKET_VNET_HDR, "PACKET_VNET_HDR")?;
    on(PACKET_IGNORE_OUTGOING, "PACKET_IGNORE_OUTGOING")?;
    for (opt, name) in [
        (libc::SO_RCVBUF, "SO_RCVBUF"),
        (libc::SO_SNDBUF, "SO_SNDBUF"),
    ] {
        setsockopt_int(
            fd,
            libc::SOL_SOCKET,
            opt,
            PACKET_SOCKET_BUFFER,
            &format!("setsockopt {name}={PACKET_SOCKET_BUFFER} on the packet socket of {dev}"),
        )?;
    }
    let mut ifr = [0u8; 40];
    ifr[..dev.len().min(15)].copy_from_slice(&dev.as_bytes()[..dev.len().min(15)]);
    // SAFETY: SIOCGIFINDEX reads the name and writes the index into a 40-byte ifreq.
    if unsafe { libc::ioctl(fd.as_raw_fd(), SIOCGIFINDEX, ifr.as_mut_ptr()) } != 0 {
        return Err(EmuError::last_os(format!(
            "ioctl SIOCGIFINDEX {dev} in {label}"
        )));
    }
    let ifindex = i32::from_ne_bytes([ifr[16], ifr[17], ifr[18], ifr[19]]);
    // SAFETY: sockaddr_ll is plain data; zeroed is valid, filled in below.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = ifindex;
    // SAFETY: bind with a sockaddr_ll and its size.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(EmuError::last_os(format!(
            "bind the packet socket to {dev} (ifindex {ifindex}) in {label}"
        )));
    }
    sys::set_nonblocking(fd.as_raw_fd(), dev)
}

/// Packets a packet socket dropped since the last call (its receive queue was full); the
/// kernel resets the counter on each read.
pub(crate) fn packet_drops(fd: RawFd) -> u64 {
    // struct tpacket_stats { unsigned int tp_packets, tp_drops; }
    let mut stats = [0u32; 2];
    let mut len = std::mem::size_of_val(&stats) as libc::socklen_t;
    // SAFETY: getsockopt into an 8-byte buffer whose size is passed.
    let r = unsafe {
        libc::getsockopt(
            fd,
            SOL_PACKET,
            PACKET_STATISTICS,
            stats.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r == 0 {
        u64::from(stats[1])
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_are_local_unicast_and_distinct_per_end() {
        let all = [mac(0, true), mac(0, false), mac(1, true), mac(1, false)];
        for m in all {
            assert_eq!(m[0] & 0x03, 0x02, "locally administered unicast: {m:?}");
        }
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(mac_text(mac(1, true)), "02:74:74:00:0b:01");
    }
}
