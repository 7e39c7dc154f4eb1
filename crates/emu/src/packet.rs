//! IP packets as read from a TUN device, with the virtio-net header that carries GSO/TSO
//! information, and splitting a TCP super-packet into smaller ones.
//!
//! With `IFF_VNET_HDR` and `TUNSETOFFLOAD(TSO)` the kernel hands the emulator TCP
//! "super-packets" of up to 64 KiB: one IP/TCP header followed by the payload of many
//! MSS-sized segments. On a real link those are many packets, so the path model counts a
//! super-packet as [`Packet::segments`] packets of [`Packet::wire_bytes`] IP bytes in total,
//! and [`Packet::split`] cuts it into smaller super-packets (or single segments) with correct
//! headers when only part of it may go on (a partial drop, a burst bound).
//!
//! Everything here is pure: no file descriptors, no clock.

use std::time::Duration;
use tcptune_core::Time;

/// Size of `struct virtio_net_hdr` (the legacy header TUN uses by default).
pub const VNET_HDR_LEN: usize = 10;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the L4 checksum is partial (to be completed).
const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_NONE`.
const GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_TCPV4`.
const GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_TCPV6`.
const GSO_TCPV6: u8 = 4;
/// `VIRTIO_NET_HDR_GSO_ECN` flag bit of `gso_type`.
const GSO_ECN: u8 = 0x80;

const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// Why a packet could not be understood or split.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// Shorter than the headers it claims.
    #[error("packet too short ({len} bytes) for its headers")]
    Truncated {
        /// Length of the IP packet.
        len: usize,
    },
    /// Not IPv4 or IPv6.
    #[error("not an IPv4/IPv6 packet (version {0})")]
    BadVersion(u8),
    /// The virtio header asks for a kind of segmentation the emulator does not do.
    #[error("unsupported GSO type {0:#x}")]
    UnsupportedGso(u8),
    /// A GSO packet with a zero segment size.
    #[error("GSO packet with gso_size 0")]
    ZeroGsoSize,
}

/// The legacy `struct virtio_net_hdr` (native endian, as TUN uses it by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// `VIRTIO_NET_HDR_F_*`.
    pub flags: u8,
    /// `VIRTIO_NET_HDR_GSO_*`, possibly with the ECN bit.
    pub gso_type: u8,
    /// Length of the headers (a hint for the kernel).
    pub hdr_len: u16,
    /// Payload bytes per segment (the MSS).
    pub gso_size: u16,
    /// Where checksumming starts (the L4 header).
    pub csum_start: u16,
    /// Where the checksum is stored, relative to `csum_start`.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Parse the first [`VNET_HDR_LEN`] bytes.
    pub fn parse(b: &[u8; VNET_HDR_LEN]) -> VnetHdr {
        let u16_at = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        }
    }

    /// Serialize into [`VNET_HDR_LEN`] bytes.
    pub fn write(&self, b: &mut [u8; VNET_HDR_LEN]) {
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
    }

    fn is_gso(&self) -> bool {
        self.gso_type & !GSO_ECN != GSO_NONE
    }

    /// The same header for a frame with `n` more bytes in front of the IP packet (`n` > 0:
    /// an Ethernet header, as packet sockets count) or fewer (`n` < 0): the checksum start and
    /// the header length move with it. `None` if the checksum would start before the frame.
    pub fn shifted(self, n: i32) -> Option<VnetHdr> {
        let mv = |v: u16| u16::try_from(i32::from(v) + n).ok();
        let mut h = self;
        if h.flags & F_NEEDS_CSUM != 0 {
            h.csum_start = mv(h.csum_start)?;
        }
        if h.hdr_len != 0 {
            h.hdr_len = mv(h.hdr_len).unwrap_or(0);
        }
        Some(h)
    }
}

/// Where the TCP headers of a super-packet are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TcpGso {
    v6: bool,
    /// Offset of the TCP header in the IP packet.
    l4_off: usize,
    /// Length of IP + TCP headers.
    hdrs: usize,
    /// Payload bytes per segment.
    mss: usize,
}

/// One IP packet (possibly a GSO super-packet) travelling through the emulated path.
///
/// The buffer keeps [`VNET_HDR_LEN`] bytes of room before the IP packet so that the driver
/// can read and write it with or without a virtio header and no copy.
#[derive(Clone, Debug)]
pub struct Packet {
    buf: Vec<u8>,
    len: usize,
    vnet: VnetHdr,
    gso: Option<TcpGso>,
    segs: u32,
    wire: u64,
    /// When the last segment is due to leave the emulator (set by the path).
    pub(crate) due: Time,
    /// Time between the due times of consecutive segments (serialization of one segment).
    pub(crate) seg_spacing: Duration,
}

impl Packet {
    /// A packet from a buffer whose first [`VNET_HDR_LEN`] bytes are the virtio header (if
    /// `vnet`) or unused room, followed by `len` bytes of IP packet (the buffer may be
    /// longer; the rest is ignored and kept for reuse).
    ///
    /// A packet without a virtio header (or with `GSO_NONE`) is one segment.
    pub fn from_buf(buf: Vec<u8>, len: usize, vnet: bool) -> Result<Packet, PacketError> {
        if buf.len() < VNET_HDR_LEN + len {
            return Err(PacketError::Truncated { len });
        }
        let hdr = if vnet {
            let mut h = [0u8; VNET_HDR_LEN];
            h.copy_from_slice(&buf[..VNET_HDR_LEN]);
            VnetHdr::parse(&h)
        } else {
            VnetHdr::default()
        };
        Packet::with_hdr(buf, len, hdr)
    }

    /// A plain (single-segment) packet holding `ip` as its IP bytes.
    pub fn from_ip(ip: &[u8]) -> Packet {
        let mut buf = vec![0u8; VNET_HDR_LEN + ip.len()];
        buf[VNET_HDR_LEN..].copy_from_slice(ip);
        Packet {
            buf,
            len: ip.len(),
            vnet: VnetHdr::default(),
            gso: None,
            segs: 1,
            wire: ip.len() as u64,
            due: Time::ZERO,
            seg_spacing: Duration::ZERO,
        }
    }

    /// A packet with IP bytes `ip` and virtio header `hdr` (validated like a TUN read).
    pub fn with_vnet(ip: &[u8], hdr: VnetHdr) -> Result<Packet, PacketError> {
        let mut buf = vec![0u8; VNET_HDR_LEN + ip.len()];
        buf[VNET_HDR_LEN..].copy_from_slice(ip);
        Packet::with_hdr(buf, ip.len(), hdr)
    }

    fn with_hdr(buf: Vec<u8>, len: usize, hdr: VnetHdr) -> Result<Packet, PacketError> {
        let mut p = Packet {
            buf,
            len,
            vnet: hdr,
            gso: None,
            segs: 1,
            wire: len as u64,
            due: Time::ZERO,
            seg_spacing: Duration::ZERO,
        };
        if hdr.is_gso() {
            let g = p.parse_tcp_gso()?;
            let payload = len.saturating_sub(g.hdrs);
            let segs = payload.div_ceil(g.mss).max(1);
            p.segs = u32::try_from(segs).unwrap_or(u32::MAX);
            p.wire = len as u64 + (segs as u64 - 1) * g.hdrs as u64;
            p.gso = Some(g);
        }
        Ok(p)
    }

    fn parse_tcp_gso(&self) -> Result<TcpGso, PacketError> {
        let ip = self.ip();
        let kind = self.vnet.gso_type & !GSO_ECN;
        if kind != GSO_TCPV4 && kind != GSO_TCPV6 {
            return Err(PacketError::UnsupportedGso(self.vnet.gso_type));
        }
        if self.vnet.gso_size == 0 {
            return Err(PacketError::ZeroGsoSize);
        }
        let truncated = PacketError::Truncated { len: ip.len() };
        let first = *ip.first().ok_or(truncated.clone())?;
        let v6 = match first >> 4 {
            4 => false,
            6 => true,
            v => return Err(PacketError::BadVersion(v)),
        };
        let l4_off = if self.vnet.flags & F_NEEDS_CSUM != 0 {
            usize::from(self.vnet.csum_start)
        } else if v6 {
            40
        } else {
            usize::from(first & 0x0f) * 4
        };
        let min_l3 = if v6 { 40 } else { 20 };
        if l4_off < min_l3 || ip.len() < l4_off + 20 {
            return Err(truncated);
        }
        let thlen = usize::from(ip[l4_off + 12] >> 4) * 4;
        if thlen < 20 || ip.len() < l4_off + thlen {
            return Err(truncated);
        }
        Ok(TcpGso {
            v6,
            l4_off,
            hdrs: l4_off + thlen,
            mss: usize::from(self.vnet.gso_size),
        })
    }

    /// The IP packet.
    pub fn ip(&self) -> &[u8] {
        &self.buf[VNET_HDR_LEN..VNET_HDR_LEN + self.len]
    }

    /// Length of the IP packet as it is (a super-packet counts once).
    pub fn ip_len(&self) -> usize {
        self.len
    }

    /// How many packets this is on the wire (1 unless it is a GSO super-packet).
    pub fn segments(&self) -> u32 {
        self.segs
    }

    /// IP bytes of all its segments on the wire (headers repeated per segment).
    pub fn wire_bytes(&self) -> u64 {
        self.wire
    }

    /// IP bytes of segment `i` (`i < segments()`).
    pub fn segment_bytes(&self, i: u32) -> u64 {
        match self.gso {
            None => self.len as u64,
            Some(g) => {
                let payload = self.len.saturating_sub(g.hdrs);
                let start = i as usize * g.mss;
                (g.hdrs + payload.saturating_sub(start).min(g.mss)) as u64
            }
        }
    }

    /// When the last segment is due to leave the current stage (set by the stages; before
    /// the first stage, when the packet arrived).
    pub fn due(&self) -> Time {
        self.due
    }

    /// Set when the packet arrived (for feeding a [`crate::stage::Stage`] directly; a
    /// [`crate::Path`] sets it itself).
    pub fn set_due(&mut self, t: Time) {
        self.due = t;
    }

    /// When segment `i` is due (earlier segments of a super-packet are due earlier).
    pub fn segment_due(&self, i: u32) -> Time {
        let behind = self.segs.saturating_sub(1).saturating_sub(i);
        self.due - self.seg_spacing * behind
    }

    /// The virtio header to write in front of the IP packet.
    pub fn vnet_hdr(&self) -> VnetHdr {
        self.vnet
    }

    /// The bytes to write to a TUN device: with the virtio header if `vnet`.
    pub fn wire_frame(&mut self, vnet: bool) -> &[u8] {
        if vnet {
            let mut h = [0u8; VNET_HDR_LEN];
            self.vnet.write(&mut h);
            self.buf[..VNET_HDR_LEN].copy_from_slice(&h);
            &self.buf[..VNET_HDR_LEN + self.len]
        } else {
            &self.buf[VNET_HDR_LEN..VNET_HDR_LEN + self.len]
        }
    }

    /// Give the buffer back (for reuse by the driver).
    pub fn into_buf(self) -> Vec<u8> {
        self.buf
    }

    /// Cut the packet into consecutive pieces of `counts[i]` segments each (the counts must
    /// add up to [`segments`](Self::segments)). Each piece gets its own IP and TCP headers
    /// (length, IPv4 id and checksum, sequence number, FIN/PSH only on the last piece, CWR
    /// only on the first) and a virtio header that asks the kernel to finish the checksum.
    /// A single-segment packet is returned as a copy.
    pub fn split(&self, counts: &[u32]) -> Result<Vec<Packet>, PacketError> {
        let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
        let g = match self.gso {
            Some(g) if counts.len() > 1 => g,
            _ => return Ok(vec![self.clone()]),
        };
        debug_assert_eq!(total, u64::from(self.segs));
        let ip = self.ip();
        let payload = &ip[g.hdrs..];
        let mut out = Vec::with_capacity(counts.len());
        let mut seg_index = 0usize;
        for (n, &count) in counts.iter().enumerate() {
            if count == 0 {
                continue;
            }
            let start = (seg_index * g.mss).min(payload.len());
            let end = ((seg_index + count as usize) * g.mss).min(payload.len());
            let chunk = &payload[start..end];
            let first = n == 0;
            let last = n + 1 == counts.len() || end == payload.len();
            out.push(self.piece(g, seg_index, chunk, count, first, last));
            seg_index += count as usize;
        }
        Ok(out)
    }

    /// Split into pieces of at most `max_segs` segments each.
    pub fn split_every(&self, max_segs: u32) -> Result<Vec<Packet>, PacketError> {
        let max = max_segs.max(1);
        if self.segs <= max {
            return Ok(vec![self.clone()]);
        }
        let mut counts = vec![max; (self.segs / max) as usize];
        if !self.segs.is_multiple_of(max) {
            counts.push(self.segs % max);
        }
        self.split(&counts)
    }

    fn piece(
        &self,
        g: TcpGso,
        seg_index: usize,
        chunk: &[u8],
        count: u32,
        first: bool,
        last: bool,
    ) -> Packet {
        let ip = self.ip();
        let len = g.hdrs + chunk.len();
        let mut buf = vec![0u8; VNET_HDR_LEN + len];
        let p = &mut buf[VNET_HDR_LEN..];
        p[..g.hdrs].copy_from_slice(&ip[..g.hdrs]);
        p[g.hdrs..].copy_from_slice(chunk);
        let l4_len = len - g.l4_off;
        if g.v6 {
            let plen = u16::try_from(len - 40).unwrap_or(u16::MAX);
            p[4..6].copy_from_slice(&plen.to_be_bytes());
        } else {
            let tot = u16::try_from(len).unwrap_or(u16::MAX);
            p[2..4].copy_from_slice(&tot.to_be_bytes());
            let id = u16::from_be_bytes([p[4], p[5]]).wrapping_add(seg_index as u16);
            p[4..6].copy_from_slice(&id.to_be_bytes());
            p[10..12].copy_from_slice(&[0, 0]);
            let ihl = usize::from(p[0] & 0x0f) * 4;
            let c = !fold(sum_be(&p[..ihl], 0));
            p[10..12].copy_from_slice(&c.to_be_bytes());
        }
        let t = g.l4_off;
        let seq = u32::from_be_bytes([p[t + 4], p[t + 5], p[t + 6], p[t + 7]])
            .wrapping_add((seg_index * g.mss) as u32);
        p[t + 4..t + 8].copy_from_slice(&seq.to_be_bytes());
        if !last {
            p[t + 13] &= !(TCP_FIN | TCP_PSH);
        }
        if !first {
            p[t + 13] &= !TCP_CWR;
        }
        // Partial checksum: the pseudo-header sum, completed by whoever needs it.
        let pseudo = if g.v6 {
            let s = sum_be(&p[8..40], 0);
            fold(s + (l4_len as u64) + 6)
        } else {
            let s = sum_be(&p[12..20], 0);
            fold(s + (l4_len as u64) + 6)
        };
        p[t + 16..t + 18].copy_from_slice(&pseudo.to_be_bytes());
        let gso_type = if count > 1 {
            self.vnet.gso_type
        } else {
            GSO_NONE
        };
        let vnet = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type,
            hdr_len: g.hdrs as u16,
            gso_size: if count > 1 { g.mss as u16 } else { 0 },
            csum_start: g.l4_off as u16,
            csum_offset: 16,
        };
        let segs = count.max(1);
        Packet {
            buf,
            len,
            vnet,
            gso: if count > 1 { Some(g) } else { None },
            segs,
            wire: len as u64 + u64::from(segs - 1) * g.hdrs as u64,
            due: self.due,
            seg_spacing: self.seg_spacing,
        }
    }
}

/// Ones'-complement sum of big-endian 16-bit words (odd length padded with zero).
fn sum_be(b: &[u8], init: u64) -> u64 {
    let mut s = init;
    let mut chunks = b.chunks_exact(2);
    for c in &mut chunks {
        s += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [x] = chunks.remainder() {
        s += u64::from(*x) << 8;
    }
    s
}

fn fold(mut s: u64) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Test helpers: build IPv4/TCP packets and super-packets.
#[doc(hidden)]
pub mod testing {
    use super::*;

    /// An IPv4/TCP packet from 198.18.0.1 to 198.19.0.1 with `payload` bytes of payload
    /// (byte `k` of the payload is `k as u8`), sequence number `seq` and `flags`.
    pub fn tcp4(seq: u32, payload: usize, flags: u8) -> Vec<u8> {
        let len = 20 + 32 + payload;
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
        p[6] = 0x40; // DF
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[198, 18, 0, 1]);
        p[16..20].copy_from_slice(&[198, 19, 0, 1]);
        let c = !fold(sum_be(&p[..20], 0));
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p[20..22].copy_from_slice(&5201u16.to_be_bytes());
        p[22..24].copy_from_slice(&40000u16.to_be_bytes());
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[32] = 8 << 4; // 32-byte header (timestamps)
        p[33] = flags;
        for (k, b) in p[52..].iter_mut().enumerate() {
            *b = k as u8;
        }
        p
    }

    /// A TSO super-packet of `payload` bytes cut into `mss`-byte segments.
    pub fn tso4(seq: u32, payload: usize, mss: u16, flags: u8) -> Packet {
        let ip = tcp4(seq, payload, flags);
        let hdr = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: 52,
            gso_size: mss,
            csum_start: 20,
            csum_offset: 16,
        };
        match Packet::with_vnet(&ip, hdr) {
            Ok(p) => p,
            Err(e) => panic!("test packet is valid: {e}"),
        }
    }

    /// The TCP sequence number of an IPv4 packet built by [`tcp4`].
    pub fn seq_of(ip: &[u8]) -> u32 {
        u32::from_be_bytes([ip[24], ip[25], ip[26], ip[27]])
    }

    /// IPv4 header checksum is valid.
    pub fn ipv4_csum_ok(ip: &[u8]) -> bool {
        fold(sum_be(&ip[..20], 0)) == 0xffff
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn a_shifted_header_moves_the_checksum_start_and_back() {
        let h = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: 52,
            gso_size: 1448,
            csum_start: 20,
            csum_offset: 16,
        };
        let eth = h.shifted(14);
        assert_eq!(eth.map(|e| (e.csum_start, e.hdr_len)), Some((34, 66)));
        assert_eq!(eth.and_then(|e| e.shifted(-14)), Some(h));
        // No partial checksum: nothing to move but the header length.
        let plain = VnetHdr::default();
        assert_eq!(plain.shifted(14), Some(plain));
        // A checksum that would start before the IP packet.
        assert_eq!(h.shifted(-21), None);
    }

    #[test]
    fn super_packet_counts_segments_and_wire_bytes() {
        let p = tso4(1000, 10 * 1448 + 100, 1448, TCP_PSH);
        assert_eq!(p.segments(), 11);
        assert_eq!(p.wire_bytes(), (10 * 1500 + 152) as u64);
        assert_eq!(p.segment_bytes(0), 1500);
        assert_eq!(p.segment_bytes(10), 152);
    }

    #[test]
    fn splitting_into_singles_rewrites_headers_of_every_segment() {
        let p = tso4(1000, 3 * 1448, 1448, TCP_PSH | TCP_FIN | TCP_CWR | 0x10);
        let parts = match p.split_every(1) {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(parts.len(), 3);
        for (i, s) in parts.iter().enumerate() {
            let ip = s.ip();
            assert_eq!(s.segments(), 1);
            assert_eq!(ip.len(), 1500);
            assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), 1500);
            assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), 0x1234 + i as u16);
            assert!(ipv4_csum_ok(ip));
            assert_eq!(seq_of(ip), 1000 + 1448 * i as u32);
            let flags = ip[33];
            assert_eq!(flags & TCP_CWR != 0, i == 0);
            assert_eq!(flags & (TCP_FIN | TCP_PSH) != 0, i == 2);
            assert_eq!(flags & 0x10, 0x10, "ACK kept");
            // Payload continues where the previous segment stopped.
            assert_eq!(ip[52], ((i * 1448) % 256) as u8);
            assert_eq!(s.vnet_hdr().gso_type, GSO_NONE);
            assert_eq!(s.vnet_hdr().flags, F_NEEDS_CSUM);
        }
    }

    #[test]
    fn splitting_into_chunks_keeps_gso_for_multi_segment_pieces() {
        let p = tso4(7, 10 * 1000, 1000, 0x10);
        let parts = match p.split(&[4, 4, 2]) {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        };
        let segs: Vec<u32> = parts.iter().map(|p| p.segments()).collect();
        assert_eq!(segs, vec![4, 4, 2]);
        assert_eq!(parts[1].vnet_hdr().gso_type, GSO_TCPV4);
        assert_eq!(parts[1].vnet_hdr().gso_size, 1000);
        assert_eq!(seq_of(parts[2].ip()), 7 + 8000);
        let wire: u64 = parts.iter().map(|p| p.wire_bytes()).sum();
        assert_eq!(wire, 10 * 1052);
    }

    #[test]
    fn garbage_with_gso_header_is_an_error_not_a_panic() {
        let hdr = VnetHdr {
            gso_type: GSO_TCPV4,
            gso_size: 1000,
            flags: F_NEEDS_CSUM,
            csum_start: 60000,
            ..VnetHdr::default()
        };
        assert!(Packet::with_vnet(&[0x45; 30], hdr).is_err());
        assert!(Packet::with_vnet(&[], hdr).is_err());
        let udp = VnetHdr {
            gso_type: 5,
            gso_size: 1000,
            ..VnetHdr::default()
        };
        assert_eq!(
            Packet::with_vnet(&tcp4(0, 100, 0), udp).err(),
            Some(PacketError::UnsupportedGso(5))
        );
    }

    #[test]
    fn vnet_header_round_trips() {
        let h = VnetHdr {
            flags: 1,
            gso_type: 4,
            hdr_len: 74,
            gso_size: 1428,
            csum_start: 40,
            csum_offset: 16,
        };
        let mut b = [0u8; VNET_HDR_LEN];
        h.write(&mut b);
        assert_eq!(VnetHdr::parse(&b), h);
    }
}
