//! At start, find the programs a dead agent left attached, by name, and detach them.
//!
//! The agent attaches by a link that dies with it, so a crashed agent normally leaves
//! nothing. What can be left is a program of ours attached the legacy way (by an older
//! agent or by hand with bpftool): attached, but held by no link. A program held by a link
//! belongs to a live agent (or was pinned by someone on purpose) and is left alone.

use crate::loader::{PROGRAM_NAME, SETSOCKOPT_NAME};

/// A loaded program as the kernel lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedProgram {
    /// Its ID.
    pub id: u32,
    /// Its name (the kernel keeps 15 bytes).
    pub name: String,
    /// Its type (`BPF_PROG_TYPE_*`).
    pub prog_type: u32,
}

/// `BPF_PROG_TYPE_SOCK_OPS`.
pub const PROG_TYPE_SOCK_OPS: u32 = 13;
/// `BPF_PROG_TYPE_CGROUP_SOCKOPT`.
pub const PROG_TYPE_CGROUP_SOCKOPT: u32 = 25;
/// `BPF_CGROUP_SOCK_OPS`.
pub const BPF_CGROUP_SOCK_OPS: u32 = 3;
/// `BPF_CGROUP_SETSOCKOPT`.
pub const BPF_CGROUP_SETSOCKOPT: u32 = 22;

/// The programs to detach, with the attach type to detach them from: ours by name and type,
/// held by no link (`linked`: the program IDs the kernel's links refer to).
pub fn stale(programs: &[LoadedProgram], linked: &[u32]) -> Vec<(u32, u32)> {
    programs
        .iter()
        .filter(|p| !linked.contains(&p.id))
        .filter_map(|p| match (p.prog_type, p.name.as_str()) {
            (PROG_TYPE_SOCK_OPS, PROGRAM_NAME) => Some((p.id, BPF_CGROUP_SOCK_OPS)),
            (PROG_TYPE_CGROUP_SOCKOPT, SETSOCKOPT_NAME) => Some((p.id, BPF_CGROUP_SETSOCKOPT)),
            _ => None,
        })
        .collect()
}

/// `BPF_PROG_DETACH`.
const BPF_PROG_DETACH: libc::c_long = 9;

/// The leading fields of `union bpf_attr` for `BPF_PROG_DETACH`.
#[repr(C)]
#[derive(Default)]
struct DetachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
    pad: [u32; 11],
}

/// Find our stale programs and detach them from `cgroup` (the driver around [`stale`]).
/// Returns the IDs detached; a program that turns out not to be attached there is skipped.
pub fn detach_stale(cgroup: &std::path::Path) -> Result<Vec<u32>, String> {
    use std::os::fd::{AsFd, AsRawFd};
    let mut programs = Vec::new();
    let mut infos = Vec::new();
    for info in aya::programs::loaded_programs().flatten() {
        programs.push(LoadedProgram {
            id: info.id(),
            name: info.name_as_str().unwrap_or("").to_string(),
            prog_type: info.program_type() as u32,
        });
        infos.push(info);
    }
    let linked: Vec<u32> = aya::programs::loaded_links()
        .flatten()
        .map(|l| l.program_id())
        .collect();
    let found = stale(&programs, &linked);
    if found.is_empty() {
        return Ok(Vec::new());
    }
    let target = std::fs::File::open(cgroup)
        .map_err(|e| format!("opening cgroup {}: {e}", cgroup.display()))?;
    let mut detached = Vec::new();
    for (info, attach_type) in infos.iter().filter_map(|i| {
        found
            .iter()
            .find(|(id, _)| *id == i.id())
            .map(|(_, t)| (i, *t))
    }) {
        let Ok(fd) = info.fd() else { continue };
        let attr = DetachAttr {
            target_fd: target.as_raw_fd() as u32,
            attach_bpf_fd: fd.as_fd().as_raw_fd() as u32,
            attach_type,
            ..DetachAttr::default()
        };
        // SAFETY: bpf(2) with a zero-padded attr of the size passed.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_DETACH,
                &attr as *const DetachAttr,
                std::mem::size_of::<DetachAttr>(),
            )
        };
        if r == 0 {
            detached.push(info.id());
        }
    }
    Ok(detached)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prog(id: u32, name: &str, prog_type: u32) -> LoadedProgram {
        LoadedProgram {
            id,
            name: name.into(),
            prog_type,
        }
    }

    #[test]
    fn detaches_only_our_unlinked_programs() {
        let programs = [
            prog(1, PROGRAM_NAME, PROG_TYPE_SOCK_OPS), // left by a dead agent
            prog(2, PROGRAM_NAME, PROG_TYPE_SOCK_OPS), // a live agent's, held by its link
            prog(3, "bpftune_sockops", PROG_TYPE_SOCK_OPS),
            prog(4, PROGRAM_NAME, 1), // same name, another type
            prog(5, SETSOCKOPT_NAME, PROG_TYPE_CGROUP_SOCKOPT),
        ];
        assert_eq!(
            stale(&programs, &[2, 9]),
            vec![(1, BPF_CGROUP_SOCK_OPS), (5, BPF_CGROUP_SETSOCKOPT)]
        );
        assert!(stale(&[], &[]).is_empty());
    }
}
