//! The thin driver around the kernel (aya): load the program, attach it to a cgroup by a link
//! this process holds (it detaches when the process exits, even on `kill -9`; nothing is
//! pinned), fill the maps, read the ring buffer.
//!
//! Calling order: [`Loaded::load`], then [`Loaded::set_mode`] and the policies
//! ([`Loaded::set_policy`], [`Loaded::set_prefix`]), then [`Loaded::attach`]; then, in a
//! loop, [`Loaded::wait_readable`] and [`Loaded::drain`]; drop it to detach.

use crate::maps::{AddrKey, CfgValue, PolicyValue};
use crate::policy::ListenOffer;
use crate::Mode;
use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, HashMap, MapData, RingBuf};
use aya::programs::{CgroupAttachMode, CgroupSockopt, SockOps};
use aya::{Ebpf, EbpfLoader};
use std::collections::HashSet;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

/// The program's name in the kernel (what [`crate::stale`] looks for; 15 bytes at most).
pub const PROGRAM_NAME: &str = "tt_sockops";
/// The `cgroup/setsockopt` program of `--override-app-buffers`.
pub const SETSOCKOPT_NAME: &str = "tt_setsockopt";

/// The compiled program (empty when clang or libbpf-dev was missing at build time).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sockops.o"));

/// Whether this build carries its BPF program (clang and libbpf-dev were there at build
/// time).
pub fn program_built() -> bool {
    !OBJECT.is_empty()
}

/// What went wrong loading, attaching or feeding the program.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The build had no clang or libbpf-dev.
    #[error("this tcptune was built without its BPF program (clang or libbpf-dev was missing): install the Debian packages clang and libbpf-dev and rebuild")]
    NotBuilt,
    /// aya could not load the object.
    #[error("loading the BPF object: {0}")]
    Object(#[from] aya::EbpfError),
    /// The program or a map is missing or of another type.
    #[error("the BPF object lacks {0}")]
    Missing(&'static str),
    /// The kernel refused the program or an attach.
    #[error("{what}: {source}")]
    Program {
        /// What was attempted.
        what: String,
        /// The error.
        source: aya::programs::ProgramError,
    },
    /// A map operation failed.
    #[error("{what}: {source}")]
    Map {
        /// What was attempted.
        what: String,
        /// The error.
        source: aya::maps::MapError,
    },
    /// Opening the cgroup or polling failed.
    #[error("{what}: {source}")]
    Io {
        /// What was attempted.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

/// The loaded program and its maps.
pub struct Loaded {
    ebpf: Ebpf,
    events: RingBuf<MapData>,
    hosts: HashSet<AddrKey>,
    prefixes: HashSet<(AddrKey, u32)>,
    attached: bool,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("hosts", &self.hosts.len())
            .field("attached", &self.attached)
            .finish()
    }
}

fn map_err(what: impl Into<String>) -> impl FnOnce(aya::maps::MapError) -> LoadError {
    let what = what.into();
    move |source| LoadError::Map { what, source }
}

impl Loaded {
    /// Load the program and its maps into the kernel (the verifier runs here).
    pub fn load() -> Result<Loaded, LoadError> {
        if OBJECT.is_empty() {
            return Err(LoadError::NotBuilt);
        }
        // `EbpfLoader::new()` reads and parses the kernel's BTF (for the CO-RE relocation of
        // `sk_userlocks`) once; aya's `Ebpf::load` parses it a second time for nothing, which
        // was about half of `agent exec`'s start.
        let mut ebpf = EbpfLoader::new().load(OBJECT)?;
        let prog: &mut SockOps = ebpf
            .program_mut(PROGRAM_NAME)
            .ok_or(LoadError::Missing("the program tt_sockops"))?
            .try_into()
            .map_err(|source| LoadError::Program {
                what: "tt_sockops is not a sock_ops program".into(),
                source,
            })?;
        prog.load().map_err(|source| LoadError::Program {
            what: "loading tt_sockops (the verifier refused it?)".into(),
            source,
        })?;
        let sockopt: &mut CgroupSockopt = ebpf
            .program_mut(SETSOCKOPT_NAME)
            .ok_or(LoadError::Missing("the program tt_setsockopt"))?
            .try_into()
            .map_err(|source| LoadError::Program {
                what: "tt_setsockopt is not a cgroup/setsockopt program".into(),
                source,
            })?;
        sockopt.load().map_err(|source| LoadError::Program {
            what: "loading tt_setsockopt (the verifier refused it?)".into(),
            source,
        })?;
        let events = RingBuf::try_from(
            ebpf.take_map("tt_events")
                .ok_or(LoadError::Missing("the map tt_events"))?,
        )
        .map_err(map_err("tt_events as a ring buffer"))?;
        Ok(Loaded {
            ebpf,
            events,
            hosts: HashSet::new(),
            prefixes: HashSet::new(),
            attached: false,
        })
    }

    /// Attach to the cgroup v2 directory `cgroup`, by links this process holds; with
    /// `override_app_buffers`, the `cgroup/setsockopt` program too.
    pub fn attach(&mut self, cgroup: &Path, override_app_buffers: bool) -> Result<(), LoadError> {
        if override_app_buffers {
            let file = std::fs::File::open(cgroup).map_err(|source| LoadError::Io {
                what: format!("opening cgroup {}", cgroup.display()),
                source,
            })?;
            let prog: &mut CgroupSockopt = self
                .ebpf
                .program_mut(SETSOCKOPT_NAME)
                .ok_or(LoadError::Missing("the program tt_setsockopt"))?
                .try_into()
                .map_err(|source| LoadError::Program {
                    what: "tt_setsockopt is not a cgroup/setsockopt program".into(),
                    source,
                })?;
            prog.attach(file, CgroupAttachMode::Single)
                .map_err(|source| LoadError::Program {
                    what: format!("attaching tt_setsockopt to cgroup {}", cgroup.display()),
                    source,
                })?;
        }
        let file = std::fs::File::open(cgroup).map_err(|source| LoadError::Io {
            what: format!("opening cgroup {}", cgroup.display()),
            source,
        })?;
        let prog: &mut SockOps = self
            .ebpf
            .program_mut(PROGRAM_NAME)
            .ok_or(LoadError::Missing("the program tt_sockops"))?
            .try_into()
            .map_err(|source| LoadError::Program {
                what: "tt_sockops is not a sock_ops program".into(),
                source,
            })?;
        // With a link, `AllowMultiple` gives EINVAL on this kernel; `Single` still attaches
        // beside other programs (design notes, section 2).
        prog.attach(file, CgroupAttachMode::Single)
            .map_err(|source| LoadError::Program {
                what: format!("attaching tt_sockops to cgroup {}", cgroup.display()),
                source,
            })?;
        self.attached = true;
        Ok(())
    }

    /// Set the mode the program works in, `--override-app-buffers`' thresholds for sockets
    /// without a known peer ([`crate::policy::unconnected_needs`]; `None`: off), and what
    /// listeners opened from now on offer ([`crate::policy::listen_offer`]; the default:
    /// nothing, they are left alone).
    pub fn set_config(
        &mut self,
        mode: Mode,
        override_needs: Option<(u32, u32)>,
        listen: ListenOffer,
    ) -> Result<(), LoadError> {
        let mut cfg: Array<_, CfgValue> = Array::try_from(
            self.ebpf
                .map_mut("tt_cfg")
                .ok_or(LoadError::Missing("the map tt_cfg"))?,
        )
        .map_err(map_err("tt_cfg as an array"))?;
        cfg.set(
            0,
            CfgValue {
                mode: mode.code(),
                override_on: u32::from(override_needs.is_some()),
                override_snd: override_needs.map_or(0, |n| n.0),
                override_rcv: override_needs.map_or(0, |n| n.1),
                listen_offer: listen.window_bytes,
                stranger_rwnd: listen.stranger_segments,
            },
            0,
        )
        .map_err(map_err("writing the mode to tt_cfg"))
    }

    fn policies(&mut self) -> Result<HashMap<&mut MapData, AddrKey, PolicyValue>, LoadError> {
        HashMap::try_from(
            self.ebpf
                .map_mut("tt_policy")
                .ok_or(LoadError::Missing("the map tt_policy"))?,
        )
        .map_err(map_err("tt_policy as a hash map"))
    }

    /// Set (or replace) the policy of one destination.
    pub fn set_policy(&mut self, ip: IpAddr, value: &PolicyValue) -> Result<(), LoadError> {
        let key = AddrKey::of(ip);
        self.policies()?
            .insert(key, *value, 0)
            .map_err(map_err(format!("writing the policy of {ip} to tt_policy")))?;
        self.hosts.insert(key);
        Ok(())
    }

    /// Replace every host policy by `all` (removes the destinations no longer in it).
    pub fn replace_policies(&mut self, all: &[(IpAddr, PolicyValue)]) -> Result<(), LoadError> {
        let keep: HashSet<AddrKey> = all.iter().map(|(ip, _)| AddrKey::of(*ip)).collect();
        let gone: Vec<AddrKey> = self.hosts.difference(&keep).copied().collect();
        for (ip, v) in all {
            self.set_policy(*ip, v)?;
        }
        let mut map = self.policies()?;
        for k in gone {
            map.remove(&k)
                .map_err(map_err("removing a policy from tt_policy"))?;
        }
        self.hosts = keep;
        Ok(())
    }

    /// Set the policy of a prefix (an operator's site: `IP/len`).
    pub fn set_prefix(
        &mut self,
        ip: IpAddr,
        len: u8,
        value: &PolicyValue,
    ) -> Result<(), LoadError> {
        let bits = crate::maps::mapped_prefix_len(ip, len).ok_or(LoadError::Io {
            what: format!("prefix {ip}/{len}"),
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        })?;
        let mut trie: LpmTrie<_, [u8; 16], PolicyValue> = LpmTrie::try_from(
            self.ebpf
                .map_mut("tt_prefix")
                .ok_or(LoadError::Missing("the map tt_prefix"))?,
        )
        .map_err(map_err("tt_prefix as an LPM trie"))?;
        trie.insert(&Key::new(bits, AddrKey::of(ip).0), *value, 0)
            .map_err(map_err(format!(
                "writing the policy of {ip}/{len} to tt_prefix"
            )))
    }

    /// Replace every prefix policy by `all` (`((IP, len), policy)`).
    pub fn replace_prefixes(
        &mut self,
        all: &[((IpAddr, u8), PolicyValue)],
    ) -> Result<(), LoadError> {
        let mut keep = HashSet::new();
        for ((ip, len), v) in all {
            self.set_prefix(*ip, *len, v)?;
            if let Some(bits) = crate::maps::mapped_prefix_len(*ip, *len) {
                keep.insert((AddrKey::of(*ip), bits));
            }
        }
        let gone: Vec<(AddrKey, u32)> = self.prefixes.difference(&keep).copied().collect();
        if !gone.is_empty() {
            let mut trie: LpmTrie<_, [u8; 16], PolicyValue> = LpmTrie::try_from(
                self.ebpf
                    .map_mut("tt_prefix")
                    .ok_or(LoadError::Missing("the map tt_prefix"))?,
            )
            .map_err(map_err("tt_prefix as an LPM trie"))?;
            for (k, bits) in gone {
                trie.remove(&Key::new(bits, k.0))
                    .map_err(map_err("removing a prefix from tt_prefix"))?;
            }
        }
        self.prefixes = keep;
        Ok(())
    }

    /// A counter of the program (`crate::maps::STAT_*`).
    pub fn stat(&self, index: u32) -> Result<u64, LoadError> {
        let stats: Array<_, u64> = Array::try_from(
            self.ebpf
                .map("tt_stats")
                .ok_or(LoadError::Missing("the map tt_stats"))?,
        )
        .map_err(map_err("tt_stats as an array"))?;
        stats
            .get(&index, 0)
            .map_err(map_err(format!("reading tt_stats[{index}]")))
    }

    /// Wait until the ring buffer has records, or `timeout` passes (EINTR returns early).
    pub fn wait_readable(&self, timeout: Duration) -> Result<(), LoadError> {
        self.wait_readable_or(timeout, None)
    }

    /// [`wait_readable`](Self::wait_readable), also returning early when `also` becomes
    /// readable (a pidfd: the child it names exited).
    pub fn wait_readable_or(
        &self,
        timeout: Duration,
        also: Option<std::os::fd::BorrowedFd<'_>>,
    ) -> Result<(), LoadError> {
        let mut pfds = [
            libc::pollfd {
                fd: self.events.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: also.map_or(-1, |f| f.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: two valid pollfds (poll ignores a negative fd).
        let r = unsafe { libc::poll(pfds.as_mut_ptr(), 2, ms) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(LoadError::Io {
                    what: "polling the ring buffer tt_events".into(),
                    source: e,
                });
            }
        }
        Ok(())
    }

    /// Take every record waiting in the ring buffer (raw bytes: [`crate::record`] checks and
    /// parses them), at most `max`.
    pub fn drain(&mut self, max: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while out.len() < max {
            match self.events.next() {
                Some(item) => out.push(item.to_vec()),
                None => break,
            }
        }
        out
    }

    /// The kernel's ID of the sock_ops program (for logs, and to find it with bpftool).
    pub fn program_id(&self) -> Result<u32, LoadError> {
        let prog: &SockOps = self
            .ebpf
            .program(PROGRAM_NAME)
            .ok_or(LoadError::Missing("the program tt_sockops"))?
            .try_into()
            .map_err(|source| LoadError::Program {
                what: "tt_sockops is not a sock_ops program".into(),
                source,
            })?;
        prog.info()
            .map(|i| i.id())
            .map_err(|source| LoadError::Program {
                what: "reading tt_sockops' ID".into(),
                source,
            })
    }

    /// Whether the program is attached (by this process's link).
    pub fn is_attached(&self) -> bool {
        self.attached
    }
}
