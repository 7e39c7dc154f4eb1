//! Capture real inet_diag dumps as test fixtures.
//!
//! Run inside a fresh network namespace so only this program's sockets are in the dump:
//!
//! ```text
//! ip netns add ttcap && ip -n ttcap link set lo up
//! ip netns exec ttcap target/release/examples/capture_diag crates/doctor/tests/fixtures/diag
//! ip netns del ttcap
//! ```
//!
//! It opens a listener and one connection on 127.0.0.1:40001 and on [::1]:40002, moves 1 MiB
//! over each, and writes every `recv()` of a dump of all TCP states (`inet.bin`,
//! `inet6.bin`) as `u32` length (native endian) + bytes.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use tcptune_doctor::diag::DiagSocket;

fn pair(addr: &str) -> (TcpListener, TcpStream, TcpStream) {
    let l = TcpListener::bind(addr).expect("bind");
    let mut c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (mut s, _) = l.accept().expect("accept");
    let data = vec![0x5au8; 1 << 20];
    let t = std::thread::spawn(move || {
        let mut got = vec![0u8; 1 << 20];
        s.read_exact(&mut got).expect("read");
        s
    });
    c.write_all(&data).expect("write");
    let s = t.join().expect("reader");
    (l, c, s)
}

fn main() {
    let dir = std::env::args().nth(1).expect("usage: capture_diag OUTDIR");
    let _v4 = pair("127.0.0.1:40001");
    let _v6 = pair("[::1]:40002");
    let mut sock = DiagSocket::open().expect("netlink");
    for (fam, name) in [
        (libc::AF_INET as u8, "inet.bin"),
        (libc::AF_INET6 as u8, "inet6.bin"),
    ] {
        let chunks = sock.dump_raw(fam, u32::MAX >> 20).expect("dump");
        let mut out = Vec::new();
        for c in chunks {
            out.extend_from_slice(&(c.len() as u32).to_ne_bytes());
            out.extend_from_slice(&c);
        }
        std::fs::write(format!("{dir}/{name}"), out).expect("write fixture");
    }
}
