//! Pure encoding and decoding of `sock_diag` netlink messages (no sockets here).
//!
//! Layouts (`linux/netlink.h`, `linux/inet_diag.h`), all native-endian except ports and
//! addresses, which are network order:
//! * `nlmsghdr`: len u32, type u16, flags u16, seq u32, pid u32 (16 bytes);
//! * `inet_diag_req_v2`: family u8, protocol u8, ext u8, pad u8, states u32, sockid (56 bytes);
//! * `inet_diag_sockid`: sport be16, dport be16, src [be32; 4], dst [be32; 4], if u32,
//!   cookie [u32; 2] (48 bytes);
//! * `inet_diag_msg`: family u8, state u8, timer u8, retrans u8, sockid, expires u32,
//!   rqueue u32, wqueue u32, uid u32, inode u32 (72 bytes), then `rtattr`s
//!   (len u16, type u16, payload, padded to 4 bytes).

use super::DiagConn;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use tcptune_core::TcpState;
use tcptune_sys::tcp_info::{apply_meminfo, parse_tcp_info};

/// `NLMSG_ERROR`.
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`.
pub const NLMSG_DONE: u16 = 3;
/// `SOCK_DIAG_BY_FAMILY`.
pub const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLM_F_REQUEST`.
pub const NLM_F_REQUEST: u16 = 0x1;
/// `NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`).
pub const NLM_F_DUMP: u16 = 0x300;
/// `INET_DIAG_INFO`: `struct tcp_info`.
pub const INET_DIAG_INFO: u16 = 2;
/// `INET_DIAG_CONG`: congestion control name.
pub const INET_DIAG_CONG: u16 = 4;
/// `INET_DIAG_SKMEMINFO`: `SK_MEMINFO_*` array.
pub const INET_DIAG_SKMEMINFO: u16 = 7;

const NLMSGHDR_LEN: usize = 16;
const REQ_V2_LEN: usize = 56;
const DIAG_MSG_LEN: usize = 72;

/// Every TCP state except LISTEN, CLOSE, TIME_WAIT and SYN_RECV: what `ss -t` shows by
/// default (connections that carry or carried data).
pub const CONNECTED_STATES: u32 = {
    let all: u32 = (1 << 12) - 1;
    // TCP_LISTEN = 10, TCP_CLOSE = 7, TCP_TIME_WAIT = 6, TCP_SYN_RECV = 3
    all & !((1 << 10) | (1 << 7) | (1 << 6) | (1 << 3))
};

/// Extensions requested: tcp_info, congestion control, skmeminfo.
pub const DEFAULT_EXT: u8 =
    (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_CONG - 1)) | (1 << (INET_DIAG_SKMEMINFO - 1));

/// Why a netlink buffer could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiagParseError {
    /// A header's length field is impossible.
    #[error(
        "netlink message at offset {offset}: length {len} is invalid ({remaining} bytes left)"
    )]
    BadLength {
        /// Where the message starts.
        offset: usize,
        /// The length it claims.
        len: usize,
        /// The bytes left in the buffer.
        remaining: usize,
    },
    /// An `inet_diag_msg` is shorter than its fixed part.
    #[error(
        "inet_diag message at offset {offset} has {got} bytes of payload, need {DIAG_MSG_LEN}"
    )]
    ShortDiagMsg {
        /// Where the message starts.
        offset: usize,
        /// Payload bytes present.
        got: usize,
    },
    /// An attribute's length field is impossible.
    #[error("attribute of type {kind} in message at offset {offset} has invalid length {len}")]
    BadAttr {
        /// Where the message starts.
        offset: usize,
        /// Attribute type.
        kind: u16,
        /// Claimed length.
        len: usize,
    },
    /// The `INET_DIAG_INFO` attribute could not be decoded.
    #[error("tcp_info in message at offset {offset}: {reason}")]
    BadTcpInfo {
        /// Where the message starts.
        offset: usize,
        /// Why.
        reason: String,
    },
}

/// One decoded netlink message.
#[derive(Debug, Clone, PartialEq)]
pub enum NlItem {
    /// A socket.
    Conn(Box<DiagConn>),
    /// End of the dump.
    Done,
    /// The kernel reported an error (a negative errno; 0 is an acknowledgement).
    Error(i32),
    /// A message of another type (skipped).
    Other(u16),
}

/// Build a `SOCK_DIAG_BY_FAMILY` dump request for TCP sockets of `family` (`AF_INET` or
/// `AF_INET6`) in the states of the `states` bit mask, asking for the `ext` attributes.
pub fn build_request(family: u8, states: u32, ext: u8, seq: u32) -> Vec<u8> {
    let len = NLMSGHDR_LEN + REQ_V2_LEN;
    let mut b = Vec::with_capacity(len);
    b.extend_from_slice(&(len as u32).to_ne_bytes());
    b.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    b.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.push(family);
    b.push(libc::IPPROTO_TCP as u8);
    b.push(ext);
    b.push(0);
    b.extend_from_slice(&states.to_ne_bytes());
    b.extend_from_slice(&[0u8; 48]);
    b
}

fn u16_ne(b: &[u8], o: usize) -> u16 {
    u16::from_ne_bytes([b[o], b[o + 1]])
}

fn u32_ne(b: &[u8], o: usize) -> u32 {
    u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Decode every message in one buffer returned by `recv()` on a netlink socket. A message
/// that cannot be decoded makes the whole call fail with where and why; nothing panics on
/// any input.
pub fn parse_messages(buf: &[u8]) -> Result<Vec<NlItem>, DiagParseError> {
    let mut out = Vec::new();
    let mut off = 0;
    while buf.len() - off >= NLMSGHDR_LEN {
        let len = u32_ne(buf, off) as usize;
        let kind = u16_ne(buf, off + 4);
        let remaining = buf.len() - off;
        if len < NLMSGHDR_LEN || len > remaining {
            return Err(DiagParseError::BadLength {
                offset: off,
                len,
                remaining,
            });
        }
        let payload = &buf[off + NLMSGHDR_LEN..off + len];
        out.push(match kind {
            NLMSG_DONE => NlItem::Done,
            NLMSG_ERROR => {
                let errno = if payload.len() >= 4 {
                    i32::from_ne_bytes([payload[0], payload[1], payload[2], payload[3]])
                } else {
                    -libc::EBADMSG
                };
                NlItem::Error(errno)
            }
            SOCK_DIAG_BY_FAMILY => NlItem::Conn(Box::new(parse_diag_msg(payload, off)?)),
            other => NlItem::Other(other),
        });
        off += align4(len).min(remaining);
    }
    Ok(out)
}

fn addr(family: u8, raw: &[u8], port: u16) -> SocketAddr {
    let ip = if family == libc::AF_INET6 as u8 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&raw[..16]);
        let v6 = Ipv6Addr::from(a);
        // Show v4-mapped peers of dual-stack sockets as IPv4, as ss does.
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    } else {
        IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]))
    };
    SocketAddr::new(ip, port)
}

/// Decode one `inet_diag_msg` and its attributes (`offset` is only for error messages).
pub fn parse_diag_msg(p: &[u8], offset: usize) -> Result<DiagConn, DiagParseError> {
    if p.len() < DIAG_MSG_LEN {
        return Err(DiagParseError::ShortDiagMsg {
            offset,
            got: p.len(),
        });
    }
    let family = p[0];
    let sport = u16::from_be_bytes([p[4], p[5]]);
    let dport = u16::from_be_bytes([p[6], p[7]]);
    let cookie = u64::from(u32_ne(p, 44)) | (u64::from(u32_ne(p, 48)) << 32);
    let mut conn = DiagConn {
        family,
        state: TcpState::from_linux(p[1]),
        local: addr(family, &p[8..24], sport),
        remote: addr(family, &p[24..40], dport),
        ifindex: u32_ne(p, 40),
        cookie,
        rqueue: u32_ne(p, 56),
        wqueue: u32_ne(p, 60),
        uid: u32_ne(p, 64),
        inode: u32_ne(p, 68),
        timer: p[2],
        retrans: p[3],
        tcp: None,
        tcp_info_len: 0,
        congestion: None,
        skmeminfo: None,
    };
    let mut a = DIAG_MSG_LEN;
    while p.len() - a >= 4 {
        let len = u16_ne(p, a) as usize;
        let kind = u16_ne(p, a + 2) & 0x3fff; // strip NLA_F_NESTED / NLA_F_NET_BYTEORDER
        if len < 4 || len > p.len() - a {
            return Err(DiagParseError::BadAttr { offset, kind, len });
        }
        let data = &p[a + 4..a + len];
        match kind {
            INET_DIAG_INFO => {
                let snap = parse_tcp_info(data).map_err(|e| DiagParseError::BadTcpInfo {
                    offset,
                    reason: e.to_string(),
                })?;
                conn.tcp_info_len = data.len();
                conn.tcp = Some(snap);
            }
            INET_DIAG_CONG => {
                let name = data.split(|&c| c == 0).next().unwrap_or(&[]);
                conn.congestion = Some(String::from_utf8_lossy(name).into_owned());
            }
            INET_DIAG_SKMEMINFO => {
                conn.skmeminfo = Some(
                    data.chunks_exact(4)
                        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                );
            }
            _ => {}
        }
        a += align4(len).min(p.len() - a);
    }
    if let (Some(snap), Some(mem)) = (conn.tcp.as_mut(), conn.skmeminfo.as_ref()) {
        apply_meminfo(snap, mem);
    }
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic message: IPv4 127.0.0.1:5201 -> 127.0.0.2:40000, established, with
    /// tcp_info (rtt 1234 us), cong "cubic" and skmeminfo.
    pub(crate) fn synthetic(info_len: usize) -> Vec<u8> {
        let mut p = vec![0u8; DIAG_MSG_LEN];
        p[0] = libc::AF_INET as u8;
        p[1] = 1;
        p[4..6].copy_from_slice(&5201u16.to_be_bytes());
        p[6..8].copy_from_slice(&40000u16.to_be_bytes());
        p[8..12].copy_from_slice(&[127, 0, 0, 1]);
        p[24..28].copy_from_slice(&[127, 0, 0, 2]);
        p[44..48].copy_from_slice(&7u32.to_ne_bytes());
        p[48..52].copy_from_slice(&1u32.to_ne_bytes());
        p[68..72].copy_from_slice(&99u32.to_ne_bytes());
        let mut info = vec![0u8; info_len];
        info[0] = 1;
        if info_len >= 72 {
            info[68..72].copy_from_slice(&1234u32.to_ne_bytes());
        }
        push_attr(&mut p, INET_DIAG_INFO, &info);
        push_attr(&mut p, INET_DIAG_CONG, b"cubic\0");
        let mem: Vec<u8> = (0u32..9).flat_map(|v| (v * 100).to_ne_bytes()).collect();
        push_attr(&mut p, INET_DIAG_SKMEMINFO, &mem);
        let mut m = Vec::new();
        m.extend_from_slice(&((16 + p.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        m.extend_from_slice(&[0u8; 10]);
        m.extend_from_slice(&p);
        m
    }

    fn push_attr(p: &mut Vec<u8>, kind: u16, data: &[u8]) {
        p.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
        p.extend_from_slice(&kind.to_ne_bytes());
        p.extend_from_slice(data);
        while !p.len().is_multiple_of(4) {
            p.push(0);
        }
    }

    fn done() -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&20u32.to_ne_bytes());
        m.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        m.extend_from_slice(&[0u8; 14]);
        m
    }

    #[test]
    fn request_is_72_bytes_with_dump_flags() {
        let r = build_request(libc::AF_INET6 as u8, CONNECTED_STATES, DEFAULT_EXT, 9);
        assert_eq!(r.len(), 72);
        assert_eq!(u32_ne(&r, 0), 72);
        assert_eq!(u16_ne(&r, 4), SOCK_DIAG_BY_FAMILY);
        assert_eq!(u16_ne(&r, 6), 0x301);
        assert_eq!(r[16], libc::AF_INET6 as u8);
        assert_eq!(r[17], 6);
        assert_eq!(r[18], 0b0100_1010);
        // ESTABLISHED (1) in, LISTEN (10) out.
        assert_ne!(u32_ne(&r, 20) & (1 << 1), 0);
        assert_eq!(u32_ne(&r, 20) & (1 << 10), 0);
    }

    #[test]
    fn synthetic_socket_decodes_addresses_info_and_memory() {
        let mut buf = synthetic(280);
        buf.extend(done());
        let items = parse_messages(&buf).expect("valid");
        assert_eq!(items.len(), 2);
        let NlItem::Conn(c) = &items[0] else {
            panic!("{items:?}")
        };
        assert_eq!(c.local, "127.0.0.1:5201".parse().unwrap());
        assert_eq!(c.remote, "127.0.0.2:40000".parse().unwrap());
        assert_eq!(c.cookie, (1 << 32) | 7);
        assert_eq!(c.inode, 99);
        assert_eq!(c.congestion.as_deref(), Some("cubic"));
        let t = c.tcp.as_ref().expect("tcp_info");
        assert_eq!(t.rtt_us, 1234);
        assert_eq!(t.sndbuf_bytes, Some(300));
        assert_eq!(t.wmem_queued_bytes, Some(500));
        assert_eq!(c.tcp_info_len, 280);
        assert_eq!(items[1], NlItem::Done);
    }

    #[test]
    fn older_kernel_tcp_info_lengths_decode() {
        let items = parse_messages(&synthetic(232)).expect("valid");
        let NlItem::Conn(c) = &items[0] else { panic!() };
        assert_eq!(c.tcp.as_ref().unwrap().rcv_wnd_bytes, None);
    }

    #[test]
    fn every_truncation_of_a_valid_buffer_is_an_error_or_fewer_items_never_a_panic() {
        let mut buf = synthetic(280);
        buf.extend(done());
        for cut in 0..buf.len() {
            let _ = parse_messages(&buf[..cut]);
        }
        // Corrupt each byte in turn.
        for i in 0..buf.len() {
            let mut b = buf.clone();
            b[i] ^= 0xff;
            let _ = parse_messages(&b);
        }
    }

    #[test]
    fn bad_lengths_say_where() {
        let mut buf = synthetic(280);
        buf[0..4].copy_from_slice(&8u32.to_ne_bytes());
        assert!(matches!(
            parse_messages(&buf),
            Err(DiagParseError::BadLength {
                offset: 0,
                len: 8,
                ..
            })
        ));
        let mut buf = synthetic(280);
        // First attribute's length beyond the message.
        let a = 16 + DIAG_MSG_LEN;
        buf[a..a + 2].copy_from_slice(&60000u16.to_ne_bytes());
        assert!(matches!(
            parse_messages(&buf),
            Err(DiagParseError::BadAttr { .. })
        ));
        // tcp_info too short for the oldest layout.
        assert!(matches!(
            parse_messages(&synthetic(60)),
            Err(DiagParseError::BadTcpInfo { .. })
        ));
    }

    #[test]
    fn error_messages_carry_the_errno() {
        let mut m = Vec::new();
        m.extend_from_slice(&36u32.to_ne_bytes());
        m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&[0u8; 10]);
        m.extend_from_slice(&(-libc::EPERM).to_ne_bytes());
        m.extend_from_slice(&[0u8; 16]);
        assert_eq!(
            parse_messages(&m).unwrap(),
            vec![NlItem::Error(-libc::EPERM)]
        );
    }
}
