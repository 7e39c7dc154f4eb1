//! The data plane: one thread per direction moves packets from one TUN device through the
//! [`Paths`] (one [`crate::Path`] per path of the topology) to the other device.
//!
//! A worker sleeps in `ppoll` (input readable, or a timeout) until `spin` before the next
//! packet is due, then spins, polling the input without blocking, until the due time;
//! spinning is capped at 30% of the time so that a real-time thread is never throttled.
//! With SCHED_FIFO a timer wake-up costs 20-60 us here (about 150 us without, on a busy
//! host). A worker exits when told to stop, and on hang-up or an error of its devices.

use crate::config::PathConfig;
use crate::packet::{Packet, VnetHdr, VNET_HDR_LEN};
use crate::paths::Paths;
use crate::stats::DirStats;
use crate::sys;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tcptune_core::Time;

/// Largest frame a TUN read returns: virtio header + a 64 KiB super-packet.
const BIG: usize = VNET_HDR_LEN + 65536;
/// Packets up to this size are copied out of the read buffer into a buffer of their size.
const SMALL: usize = 2048;
/// Longest sleep while idle (how quickly a stop is noticed).
const IDLE: Duration = Duration::from_millis(50);
/// Reads per round before due packets are served again.
const READ_BATCH: usize = 32;
/// How often counters are published.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);
/// Spinning may take at most this share of each [`SPIN_WINDOW`]: a real-time thread that
/// never sleeps is throttled by the kernel for 50 ms every second
/// (`kernel.sched_rt_runtime_us`), which would stall the path.
const SPIN_BUDGET: Duration = Duration::from_millis(30);
/// The window the spin budget applies to.
const SPIN_WINDOW: Duration = Duration::from_millis(100);

/// State shared between the workers and the [`crate::Topology`].
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub(crate) stop: AtomicBool,
    /// Per direction, the counters of each path (path 0 first).
    pub(crate) snapshots: [Mutex<Vec<DirStats>>; 2],
    /// Per direction, path changes not yet applied (path index, new configuration).
    pub(crate) changes: [Mutex<Vec<(usize, PathConfig)>>; 2],
    /// Per direction, whether `changes` holds something (checked on every round).
    pub(crate) changed: [AtomicBool; 2],
    pub(crate) reset: [AtomicBool; 2],
    pub(crate) running: [AtomicBool; 2],
    pub(crate) failures: Mutex<Vec<String>>,
    pub(crate) notes: Mutex<Vec<String>>,
    /// `/proc/net/dev` of side A and side B, opened inside each namespace.
    pub(crate) netdev: Mutex<Vec<std::fs::File>>,
    /// Device drops counted before the last reset, per direction.
    pub(crate) device_drop_base: [AtomicU64; 2],
    /// Rootless mode: the packet socket each direction reads (its drops add to the device's).
    pub(crate) packet_inputs: Mutex<Vec<Arc<OwnedFd>>>,
    /// Drops of those packet sockets so far (the kernel resets its counter on each read).
    pub(crate) packet_drops: [AtomicU64; 2],
}

impl Shared {
    /// `tx_dropped` of the TUN device that feeds direction `dir` (A's for A→B).
    pub(crate) fn device_drops(&self, dir: usize) -> u64 {
        use std::os::unix::fs::FileExt;
        let Ok(files) = self.netdev.lock() else {
            return 0;
        };
        let Some(f) = files.get(dir) else {
            return 0;
        };
        let mut buf = vec![0u8; 16 * 1024];
        let n = f.read_at(&mut buf, 0).unwrap_or(0);
        let device = parse_tx_dropped(&String::from_utf8_lossy(&buf[..n]), crate::addr::TUN_NAME)
            .unwrap_or(0);
        drop(files);
        device + self.packet_socket_drops(dir)
    }

    /// Drops of the packet socket direction `dir` reads (rootless mode; 0 otherwise).
    fn packet_socket_drops(&self, dir: usize) -> u64 {
        let Ok(socks) = self.packet_inputs.lock() else {
            return 0;
        };
        let Some(fd) = socks.get(dir) else {
            return 0;
        };
        let new = crate::rootless::packet_drops(fd.as_raw_fd());
        self.packet_drops[dir].fetch_add(new, Ordering::SeqCst) + new
    }
}

/// The `tx drop` column of `device` in `/proc/net/dev`.
pub(crate) fn parse_tx_dropped(text: &str, device: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{device}:")))?;
    let fields: Vec<&str> = line.split(':').nth(1)?.split_whitespace().collect();
    // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets errs drop
    fields.get(11)?.parse().ok()
}

impl Shared {
    pub(crate) fn fail(&self, msg: String) {
        if let Ok(mut f) = self.failures.lock() {
            f.push(msg);
        }
    }

    /// A warning (the path works, less well).
    pub(crate) fn note(&self, msg: String) {
        if let Ok(mut n) = self.notes.lock() {
            n.push(msg);
        }
    }
}

/// How frames look on a worker's descriptors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// A TUN device: the virtio-net header (with `vnet`), then the IP packet.
    Tun,
    /// A packet socket on a veth end (rootless mode): the virtio-net header, a 14-byte
    /// Ethernet header, then the IP packet; the header's checksum start counts from the
    /// Ethernet header. Frames written get `dst_src` (destination and source MAC).
    Ethernet {
        /// Destination then source MAC address of the frames written.
        dst_src: [u8; 12],
    },
}

/// Length of an Ethernet header.
const ETH_HLEN: usize = 14;

/// The Ethernet type of an IP packet by its version nibble (`None`: not IP).
fn ether_type(ip: &[u8]) -> Option<[u8; 2]> {
    match ip.first().map(|b| b >> 4) {
        Some(4) => Some([0x08, 0x00]),
        Some(6) => Some([0x86, 0xdd]),
        _ => None,
    }
}

/// What one worker needs.
pub(crate) struct Worker {
    pub(crate) dir: usize,
    pub(crate) name: String,
    pub(crate) input: Arc<OwnedFd>,
    pub(crate) output: Arc<OwnedFd>,
    pub(crate) vnet: bool,
    pub(crate) framing: Framing,
    pub(crate) paths: Paths,
    pub(crate) spin: Duration,
    pub(crate) realtime: bool,
    pub(crate) epoch: Instant,
    pub(crate) shared: Arc<Shared>,
    /// Start of the counters' window.
    pub(crate) window_start: Time,
}

enum Read {
    Packet(Packet),
    Malformed(usize),
    /// Not an IP packet (a frame the emulator's namespace carries but the path does not).
    Ignored,
    Empty,
    Closed(String),
}

impl Worker {
    fn now(&self) -> Time {
        Time::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// Run until stopped.
    pub(crate) fn run(mut self) {
        sys::set_timer_slack_min();
        if self.realtime && !sys::set_realtime(10) {
            self.shared.note(format!(
                "{}: SCHED_FIFO not permitted, running unprioritized",
                self.name
            ));
        }
        self.shared.running[self.dir].store(true, Ordering::SeqCst);
        let mut buf = vec![0u8; BIG];
        let mut pool: Vec<Vec<u8>> = Vec::new();
        let mut last_publish = Instant::now();
        let mut spin_window = Instant::now();
        let mut spun = Duration::ZERO;
        let mut write_error_reported = false;
        'outer: while !self.shared.stop.load(Ordering::Relaxed) {
            // 0. Path changes apply to what is read from now on.
            if self.shared.changed[self.dir].load(Ordering::Relaxed) {
                self.apply_changes();
            }
            // 1. Everything that is due leaves now.
            let now = self.now();
            while let Some(mut p) = self.paths.poll_out(now) {
                let n = self.write(&mut p);
                if n < 0 {
                    let e = std::io::Error::last_os_error();
                    if e.raw_os_error() == Some(libc::EBADFD) {
                        self.shared
                            .fail(format!("{}: output device gone: {e}", self.name));
                        break 'outer;
                    }
                    self.paths.write_failed(&p);
                    if !write_error_reported {
                        write_error_reported = true;
                        self.shared.fail(format!(
                            "{}: write of a {}-byte packet to the output device failed: {e}",
                            self.name,
                            p.ip_len()
                        ));
                    }
                }
                let b = p.into_buf();
                if b.len() >= BIG && pool.len() < 64 {
                    pool.push(b);
                }
            }
            // 2. Read what has arrived.
            let mut got = 0;
            while got < READ_BATCH {
                match self.read(&mut buf, &mut pool) {
                    Read::Packet(p) => {
                        let t = self.now();
                        self.paths.push(t, p);
                        got += 1;
                    }
                    Read::Malformed(len) => {
                        self.paths.malformed(len);
                        got += 1;
                    }
                    Read::Ignored => got += 1,
                    Read::Empty => break,
                    Read::Closed(why) => {
                        self.shared.fail(format!("{}: {why}", self.name));
                        break 'outer;
                    }
                }
            }
            if last_publish.elapsed() >= PUBLISH_EVERY {
                self.publish();
                last_publish = Instant::now();
            }
            if got > 0 {
                continue;
            }
            // 3. Wait for the next due packet or arrival.
            let now = self.now();
            let next = self.paths.poll_timeout();
            let wait = next.map(|t| t.saturating_since(now));
            if spin_window.elapsed() >= SPIN_WINDOW {
                spin_window = Instant::now();
                spun = Duration::ZERO;
            }
            let spin = if spun < SPIN_BUDGET {
                self.spin
            } else {
                Duration::ZERO
            };
            match wait {
                Some(w) if w.is_zero() => continue,
                Some(w) if w <= spin => {
                    let due = next.unwrap_or(now);
                    let t0 = Instant::now();
                    // Spin: poll the input without blocking until the due time.
                    while self.now() < due {
                        if self.readable(Duration::ZERO) {
                            break;
                        }
                        std::hint::spin_loop();
                    }
                    spun += t0.elapsed();
                }
                _ => {
                    let sleep = wait.map_or(IDLE, |w| (w - spin).min(IDLE));
                    if !self.readable(sleep) && self.hung_up() {
                        self.shared
                            .fail(format!("{}: input device hung up", self.name));
                        break 'outer;
                    }
                }
            }
        }
        self.publish();
        self.shared.running[self.dir].store(false, Ordering::SeqCst);
    }

    fn apply_changes(&mut self) {
        self.shared.changed[self.dir].store(false, Ordering::SeqCst);
        let changes = match self.shared.changes[self.dir].lock() {
            Ok(mut c) => std::mem::take(&mut *c),
            Err(_) => return,
        };
        for (index, cfg) in changes {
            if let Err(e) = self.paths.set(index, &cfg) {
                self.shared
                    .note(format!("{}: changing path {index}: {e}", self.name));
            }
        }
    }

    fn publish(&mut self) {
        let now = self.now();
        if self.shared.reset[self.dir].swap(false, Ordering::Relaxed) {
            self.paths.reset_counters();
            self.window_start = now;
        }
        let mut s = self.paths.stats();
        let window_s = now.saturating_since(self.window_start).as_secs_f64();
        for d in &mut s {
            d.window_s = window_s;
        }
        if let Ok(mut slot) = self.shared.snapshots[self.dir].lock() {
            *slot = s;
        }
    }

    /// ppoll the input for `timeout`; true if readable.
    fn readable(&self, timeout: Duration) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.input.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: ppoll on one pollfd we own, with a valid timespec.
        let n = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        n > 0 && pfd.revents & libc::POLLIN != 0
    }

    fn hung_up(&self) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.input.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: as in `readable`, zero timeout.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        n > 0 && pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
    }

    /// Write `p` to the output; what write(2) returned.
    fn write(&self, p: &mut Packet) -> isize {
        let Framing::Ethernet { dst_src } = self.framing else {
            let frame = p.wire_frame(self.vnet);
            // SAFETY: write(2) of an initialized slice to a descriptor we hold.
            return unsafe {
                libc::write(self.output.as_raw_fd(), frame.as_ptr().cast(), frame.len())
            };
        };
        let frame = p.wire_frame(true);
        let (hdr, ip) = frame.split_at(VNET_HDR_LEN);
        let mut h = [0u8; VNET_HDR_LEN];
        h.copy_from_slice(hdr);
        let Some(shifted) = VnetHdr::parse(&h).shifted(ETH_HLEN as i32) else {
            return -1;
        };
        shifted.write(&mut h);
        let mut eth = [0u8; ETH_HLEN];
        eth[..12].copy_from_slice(&dst_src);
        eth[12..].copy_from_slice(&ether_type(ip).unwrap_or([0x08, 0x00]));
        let iov = [
            libc::iovec {
                iov_base: h.as_mut_ptr().cast(),
                iov_len: h.len(),
            },
            libc::iovec {
                iov_base: eth.as_mut_ptr().cast(),
                iov_len: eth.len(),
            },
            libc::iovec {
                iov_base: ip.as_ptr() as *mut libc::c_void,
                iov_len: ip.len(),
            },
        ];
        // SAFETY: writev(2) of three initialized buffers that outlive the call (the kernel
        // only reads them).
        unsafe { libc::writev(self.output.as_raw_fd(), iov.as_ptr(), 3) }
    }

    fn read(&self, buf: &mut Vec<u8>, pool: &mut Vec<Vec<u8>>) -> Read {
        if let Framing::Ethernet { .. } = self.framing {
            return self.read_ethernet(buf, pool);
        }
        let off = if self.vnet { 0 } else { VNET_HDR_LEN };
        let n = loop {
            // SAFETY: read(2) into the writable tail of `buf`.
            let n = unsafe {
                libc::read(
                    self.input.as_raw_fd(),
                    buf[off..].as_mut_ptr().cast(),
                    buf.len() - off,
                )
            };
            if n >= 0 {
                break n as usize;
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => return Read::Empty,
                Some(libc::EINTR) => continue,
                _ => return Read::Closed(format!("reading the TUN device failed: {e}")),
            }
        };
        if n == 0 {
            return Read::Empty;
        }
        let ip_len = if self.vnet {
            if n < VNET_HDR_LEN {
                return Read::Malformed(n);
            }
            n - VNET_HDR_LEN
        } else {
            n
        };
        let owned = if ip_len <= SMALL {
            buf[..VNET_HDR_LEN + ip_len].to_vec()
        } else {
            let fresh = pool.pop().unwrap_or_else(|| vec![0u8; BIG]);
            std::mem::replace(buf, fresh)
        };
        match Packet::from_buf(owned, ip_len, self.vnet) {
            Ok(p) => Read::Packet(p),
            Err(_) => Read::Malformed(ip_len),
        }
    }

    /// Read a frame from a packet socket: the virtio header into the packet's room, the
    /// Ethernet header aside, the IP packet after the room (as from a TUN device).
    fn read_ethernet(&self, buf: &mut Vec<u8>, pool: &mut Vec<Vec<u8>>) -> Read {
        let mut eth = [0u8; ETH_HLEN];
        let n = loop {
            let (hdr, rest) = buf.split_at_mut(VNET_HDR_LEN);
            let mut iov = [
                libc::iovec {
                    iov_base: hdr.as_mut_ptr().cast(),
                    iov_len: hdr.len(),
                },
                libc::iovec {
                    iov_base: eth.as_mut_ptr().cast(),
                    iov_len: eth.len(),
                },
                libc::iovec {
                    iov_base: rest.as_mut_ptr().cast(),
                    iov_len: rest.len(),
                },
            ];
            // SAFETY: readv(2) into three writable buffers that outlive the call.
            let n = unsafe { libc::readv(self.input.as_raw_fd(), iov.as_mut_ptr(), 3) };
            if n >= 0 {
                break n as usize;
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => return Read::Empty,
                Some(libc::EINTR) => continue,
                _ => return Read::Closed(format!("reading the packet socket failed: {e}")),
            }
        };
        if n == 0 {
            return Read::Empty;
        }
        if n < VNET_HDR_LEN + ETH_HLEN {
            return Read::Malformed(n.saturating_sub(VNET_HDR_LEN));
        }
        let ip_len = n - VNET_HDR_LEN - ETH_HLEN;
        if ![[0x08, 0x00], [0x86, 0xdd]].contains(&[eth[12], eth[13]]) {
            return Read::Ignored;
        }
        let mut h = [0u8; VNET_HDR_LEN];
        h.copy_from_slice(&buf[..VNET_HDR_LEN]);
        let Some(shifted) = VnetHdr::parse(&h).shifted(-(ETH_HLEN as i32)) else {
            return Read::Malformed(ip_len);
        };
        shifted.write(&mut h);
        buf[..VNET_HDR_LEN].copy_from_slice(&h);
        let owned = if ip_len <= SMALL {
            buf[..VNET_HDR_LEN + ip_len].to_vec()
        } else {
            let fresh = pool.pop().unwrap_or_else(|| vec![0u8; BIG]);
            std::mem::replace(buf, fresh)
        };
        match Packet::from_buf(owned, ip_len, true) {
            Ok(p) => Read::Packet(p),
            Err(_) => Read::Malformed(ip_len),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tx_dropped_is_read_from_the_devices_line() {
        let text = "Inter-|   Receive                            |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
   tt0: 1000 10 0 1 0 0 0 0 5000 50 0 7 0 0 0 0
";
        assert_eq!(parse_tx_dropped(text, "tt0"), Some(7));
        assert_eq!(parse_tx_dropped(text, "eth0"), None);
    }
}
