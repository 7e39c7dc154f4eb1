//! Linux glue for tcptune: the only crate (with the emulator's TUN/netns driver) that makes
//! socket and sysctl syscalls. Every error says what was being attempted.

pub mod sysctl;
pub mod tcp_info;
