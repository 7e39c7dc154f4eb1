//! Linux glue for tcptune: the only crate (with the emulator's TUN/netns driver) that makes
//! socket and sysctl syscalls. Every error says what was being attempted.
//!
//! * [`tcp_info`]: decoding `struct tcp_info` and `SO_MEMINFO` into a `TcpSnapshot`.
//! * [`sockopt`]: reading snapshots and setting buffer sizes, window clamp, not-sent low
//!   water mark and congestion control on a socket.
//! * [`driver`]: running a tuner on one socket (sample, feed, apply, record).
//! * [`sysctl`]: sysctls and buffer limits of the current network namespace.
//! * [`net`]: sockets configured before `connect()`/`listen()`.
//! * [`os`]: CPU time, random bytes, the wall clock, waiting on a socket, host description.
//! * [`process`]: supervising child processes and daemons, stopping processes, stop signals.
//! * [`fs`]: files beneath a directory handle (`openat2` with `RESOLVE_BENEATH`) and the
//!   metadata, modes, times and free space a file copy needs.
//! * [`view`]: a read-only mapped view of a file's range, guarded against `SIGBUS` when the
//!   file shrinks underneath it (the copy's sender hashes blocks without copying them).
//! * [`route`]: a per-destination route with a large initial window (careful resume).

pub mod driver;
pub mod fs;
pub mod net;
pub mod os;
pub mod process;
pub mod route;
pub mod sockopt;
pub mod sysctl;
pub mod tcp_info;
pub mod view;
