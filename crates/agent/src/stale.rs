//! At start, find the programs a dead agent left attached, by name, and detach them.
//!
//! The agent attaches by a link that dies with it, so a crashed agent normally leaves
//! nothing. What can be left is a program of ours attached the legacy way (by an older
//! agent or by hand with bpftool): attached, but held by no link. A program held by a link
//! belongs to a live agent (or was pinned by someone on purpose) and is left alone.

use crate::loader::PROGRAM_NAME;

/// A loaded program as the kernel lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedProgram {
    /// Its ID.
    pub id: u32,
    /// Its name (the kernel keeps 15 bytes).
    pub name: String,
    /// Whether it is a sock_ops program.
    pub sock_ops: bool,
}

/// The programs to detach: ours by name, sock_ops, held by no link (`linked`: the program
/// IDs the kernel's links refer to).
pub fn stale(programs: &[LoadedProgram], linked: &[u32]) -> Vec<u32> {
    programs
        .iter()
        .filter(|p| p.sock_ops && p.name == PROGRAM_NAME && !linked.contains(&p.id))
        .map(|p| p.id)
        .collect()
}

/// `BPF_PROG_TYPE_SOCK_OPS`.
const PROG_TYPE_SOCK_OPS: u32 = 13;
/// `BPF_PROG_DETACH`.
const BPF_PROG_DETACH: libc::c_long = 9;
/// `BPF_CGROUP_SOCK_OPS`.
const BPF_CGROUP_SOCK_OPS: u32 = 3;

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
            sock_ops: info.program_type() as u32 == PROG_TYPE_SOCK_OPS,
        });
        infos.push(info);
    }
    let linked: Vec<u32> = aya::programs::loaded_links()
        .flatten()
        .map(|l| l.program_id())
        .collect();
    let ids = stale(&programs, &linked);
    if ids.is_empty() {
        return Ok(ids);
    }
    let target = std::fs::File::open(cgroup)
        .map_err(|e| format!("opening cgroup {}: {e}", cgroup.display()))?;
    let mut detached = Vec::new();
    for info in infos.iter().filter(|i| ids.contains(&i.id())) {
        let Ok(fd) = info.fd() else { continue };
        let attr = DetachAttr {
            target_fd: target.as_raw_fd() as u32,
            attach_bpf_fd: fd.as_fd().as_raw_fd() as u32,
            attach_type: BPF_CGROUP_SOCK_OPS,
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

    fn prog(id: u32, name: &str, sock_ops: bool) -> LoadedProgram {
        LoadedProgram {
            id,
            name: name.into(),
            sock_ops,
        }
    }

    #[test]
    fn detaches_only_our_unlinked_sock_ops_programs() {
        let programs = [
            prog(1, PROGRAM_NAME, true), // left by a dead agent
            prog(2, PROGRAM_NAME, true), // a live agent's, held by its link
            prog(3, "bpftune_sockops", true),
            prog(4, PROGRAM_NAME, false), // same name, another type
        ];
        assert_eq!(stale(&programs, &[2, 9]), vec![1]);
        assert!(stale(&[], &[]).is_empty());
    }
}
