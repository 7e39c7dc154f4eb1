//! Which process owns which socket: walk `/proc/*/fd`, read each link (`socket:[12345]`), and
//! map the inode to the pid and command name. Expensive (one `readlink` per open file on the
//! host), so `watch` does it only when asked (`--process`, `--show-process`).

use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

/// A process that holds a socket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Owner {
    /// Process id.
    pub pid: u32,
    /// `/proc/PID/comm`.
    pub comm: String,
}

/// The inode of a socket fd link target (`socket:[12345]` -> 12345).
pub fn socket_inode(link: &str) -> Option<u32> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Map socket inodes to their owners, reading below `proc_root` (`/proc`). Processes that
/// vanish or deny access while being read are skipped. The first owner found wins (a socket
/// shared across a fork belongs to several processes).
pub fn socket_owners(proc_root: &Path) -> HashMap<u32, Owner> {
    let mut map = HashMap::new();
    let Ok(procs) = std::fs::read_dir(proc_root) else {
        return map;
    };
    for p in procs.filter_map(|e| e.ok()) {
        let name = p.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        let mut comm: Option<String> = None;
        for fd in fds.filter_map(|e| e.ok()) {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let Some(inode) = target.to_str().and_then(socket_inode) else {
                continue;
            };
            let comm = comm
                .get_or_insert_with(|| {
                    std::fs::read_to_string(p.path().join("comm"))
                        .map(|s| s.trim_end().to_string())
                        .unwrap_or_default()
                })
                .clone();
            map.entry(inode).or_insert(Owner { pid, comm });
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn socket_links_parse_and_others_do_not() {
        assert_eq!(socket_inode("socket:[12345]"), Some(12345));
        assert_eq!(socket_inode("pipe:[12345]"), None);
        assert_eq!(socket_inode("socket:[x]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
    }

    #[test]
    fn finds_this_process_as_owner_of_its_listener() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let link = std::fs::read_link(format!("/proc/self/fd/{}", l.as_raw_fd())).expect("link");
        let inode = socket_inode(link.to_str().unwrap()).expect("socket link");
        let owners = socket_owners(Path::new("/proc"));
        let o = owners.get(&inode).expect("owner found");
        assert_eq!(o.pid, std::process::id());
    }
}
