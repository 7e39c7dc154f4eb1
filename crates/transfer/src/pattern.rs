//! The verifiable data pattern and the message framing on data connections.
//!
//! Every message on a data connection is a 16-byte header followed by `message_size` bytes
//! of payload:
//!
//! ```text
//! 0      4            8                16
//! | TTm1 | check(u32) | index (u64 BE) | payload ...
//! ```
//!
//! `check` is a function of the index, so a corrupted header is caught too. The payload of
//! message `m` is a window of a random template (generated from the session's seed) that
//! starts at a rotation derived from `m`: byte `j` is `template[(rot(m) + j) % T]`. Sending
//! therefore costs nothing beyond the `write` (the window is a slice of a doubled template),
//! and the receiver checks every byte with a `memcmp` against the same slice, which is far
//! cheaper than the kernel's copy. Different messages have different rotations, so a
//! misplaced or repeated message is detected as well as a flipped bit, a lost or a
//! duplicated byte. The template's period is 16 KiB (so the comparison reads it from L1
//! cache): within one message, a block displaced by an exact multiple of 16 KiB would pass,
//! which TCP's in-order byte stream cannot produce and the engine's contiguous writes do not.

use std::sync::atomic::{AtomicU64, Ordering};

/// Length of the message header.
pub(crate) const HEADER_LEN: usize = 16;
const MAGIC: [u8; 4] = *b"TTm1";
/// Template period in bytes (the doubled template is twice this): small enough that the
/// receiver's comparison reads the template from L1 cache and only the received bytes from
/// L2. A write takes several slices of it (`writev`).
pub(crate) const TEMPLATE_LEN: usize = 16 * 1024;

/// SplitMix64: a fast, well-mixed 64-bit function.
pub(crate) fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The payload generator/checker shared by both ends of a session.
#[derive(Debug)]
pub(crate) struct Pattern {
    doubled: Vec<u8>,
    seed: u64,
    message_size: u64,
}

impl Pattern {
    /// The pattern of a session: template from `seed`, messages of `message_size` bytes.
    pub(crate) fn new(seed: u64, message_size: u64) -> Pattern {
        let mut doubled = Vec::with_capacity(2 * TEMPLATE_LEN);
        let mut state = seed;
        while doubled.len() < TEMPLATE_LEN {
            state = splitmix64(state);
            doubled.extend_from_slice(&state.to_le_bytes());
        }
        doubled.extend_from_within(..TEMPLATE_LEN);
        Pattern {
            doubled,
            seed,
            message_size,
        }
    }

    /// Payload bytes per message.
    pub(crate) fn message_size(&self) -> u64 {
        self.message_size
    }

    fn rotation(&self, msg: u64) -> usize {
        (splitmix64(self.seed ^ msg.wrapping_mul(0xD6E8_FEB8_6659_FD93)) % TEMPLATE_LEN as u64)
            as usize
    }

    /// Where payload byte `pos` of message `msg` sits in the template (`0..TEMPLATE_LEN`):
    /// the payload from there on is the template read cyclically from that offset.
    pub(crate) fn template_offset(&self, msg: u64, pos: u64) -> usize {
        (self.rotation(msg) + (pos % TEMPLATE_LEN as u64) as usize) % TEMPLATE_LEN
    }

    /// The template repeated to `len` bytes: its window `[template_offset(m, p), +n)` is
    /// `n` bytes of message `m`'s payload from `p`, for any `n <= len - TEMPLATE_LEN`.
    pub(crate) fn periodic(&self, len: usize) -> Vec<u8> {
        let template = &self.doubled[..TEMPLATE_LEN];
        template.iter().copied().cycle().take(len).collect()
    }

    /// The payload of message `msg` from offset `pos`, at most `max` bytes (and at most one
    /// template period): a slice that can be written as is.
    pub(crate) fn chunk(&self, msg: u64, pos: u64, max: usize) -> &[u8] {
        let start = self.template_offset(msg, pos);
        let left = usize::try_from(self.message_size.saturating_sub(pos)).unwrap_or(usize::MAX);
        let len = max.min(TEMPLATE_LEN).min(left);
        &self.doubled[start..start + len]
    }

    /// The header of message `msg`.
    pub(crate) fn header(msg: u64) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..4].copy_from_slice(&MAGIC);
        h[4..8].copy_from_slice(&header_check(msg).to_be_bytes());
        h[8..].copy_from_slice(&msg.to_be_bytes());
        h
    }
}

fn header_check(msg: u64) -> u32 {
    (splitmix64(msg ^ 0x7463_7074_756e_6531) >> 32) as u32
}

/// What was wrong with received data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Corruption {
    /// A header that is not one.
    #[error("bad message header at stream byte {at} (after {messages} complete messages)")]
    BadHeader {
        /// Bytes of the stream consumed before the header.
        at: u64,
        /// Complete messages before it.
        messages: u64,
    },
    /// A message index out of range, not increasing on its stream, or already received.
    #[error("message {msg} {why}")]
    BadIndex {
        /// The index.
        msg: u64,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A payload byte differs from the pattern.
    #[error("message {msg} byte {offset}: expected 0x{expected:02x}, got 0x{got:02x}")]
    Mismatch {
        /// Message index.
        msg: u64,
        /// Offset within the payload.
        offset: u64,
        /// Expected byte.
        expected: u8,
        /// Received byte.
        got: u8,
    },
}

/// Which message indexes were received, shared by the streams of one end (message workload).
#[derive(Debug)]
pub(crate) struct Seen {
    bits: Vec<AtomicU64>,
    total: u64,
}

impl Seen {
    /// Room for `total` messages.
    pub(crate) fn new(total: u64) -> Seen {
        let words = usize::try_from(total.div_ceil(64)).unwrap_or(0);
        Seen {
            bits: (0..words).map(|_| AtomicU64::new(0)).collect(),
            total,
        }
    }

    /// Mark `msg` seen; false if out of range or already seen.
    fn mark(&self, msg: u64) -> Result<(), &'static str> {
        if msg >= self.total {
            return Err("is out of range");
        }
        let Some(word) = usize::try_from(msg / 64)
            .ok()
            .and_then(|w| self.bits.get(w))
        else {
            return Err("is out of range");
        };
        let bit = 1u64 << (msg % 64);
        if word.fetch_or(bit, Ordering::Relaxed) & bit != 0 {
            return Err("arrived twice");
        }
        Ok(())
    }
}

#[derive(Debug)]
enum State {
    Header { got: usize, buf: [u8; HEADER_LEN] },
    Payload { msg: u64, pos: u64 },
}

/// Checks the byte stream of one data connection, message by message.
#[derive(Debug)]
pub(crate) struct Checker<'a> {
    pattern: &'a Pattern,
    seen: Option<&'a Seen>,
    state: State,
    last_msg: Option<u64>,
    consumed: u64,
    /// Complete, verified messages.
    pub(crate) messages: u64,
    /// Verified payload bytes (including a partial last message).
    pub(crate) payload_bytes: u64,
}

impl<'a> Checker<'a> {
    /// A checker for one stream. `seen` tracks indexes across streams (message workload).
    pub(crate) fn new(pattern: &'a Pattern, seen: Option<&'a Seen>) -> Checker<'a> {
        Checker {
            pattern,
            seen,
            state: State::Header {
                got: 0,
                buf: [0; HEADER_LEN],
            },
            last_msg: None,
            consumed: 0,
            messages: 0,
            payload_bytes: 0,
        }
    }

    /// Whether the stream ended between messages (true) or in the middle of one.
    pub(crate) fn at_boundary(&self) -> bool {
        matches!(self.state, State::Header { got: 0, .. })
    }

    /// Bytes of the message in progress (header and payload) at the end.
    pub(crate) fn partial_message_bytes(&self) -> u64 {
        match self.state {
            State::Header { got, .. } => got as u64,
            State::Payload { pos, .. } => HEADER_LEN as u64 + pos,
        }
    }

    /// Check the next bytes of the stream.
    pub(crate) fn feed(&mut self, mut data: &[u8]) -> Result<(), Corruption> {
        let size = self.pattern.message_size();
        while !data.is_empty() {
            match &mut self.state {
                State::Header { got, buf } => {
                    let n = (HEADER_LEN - *got).min(data.len());
                    buf[*got..*got + n].copy_from_slice(&data[..n]);
                    *got += n;
                    data = &data[n..];
                    if *got < HEADER_LEN {
                        break;
                    }
                    let h = *buf;
                    let mut idx = [0u8; 8];
                    idx.copy_from_slice(&h[8..]);
                    let msg = u64::from_be_bytes(idx);
                    if h[..4] != MAGIC || h[4..8] != header_check(msg).to_be_bytes() {
                        return Err(Corruption::BadHeader {
                            at: self.consumed,
                            messages: self.messages,
                        });
                    }
                    if self.last_msg.is_some_and(|l| msg <= l) {
                        return Err(Corruption::BadIndex {
                            msg,
                            why: "is not larger than the previous one on its stream",
                        });
                    }
                    if let Some(seen) = self.seen {
                        seen.mark(msg)
                            .map_err(|why| Corruption::BadIndex { msg, why })?;
                    }
                    self.last_msg = Some(msg);
                    self.consumed += HEADER_LEN as u64;
                    self.state = State::Payload { msg, pos: 0 };
                    if size == 0 {
                        self.finish_message();
                    }
                }
                State::Payload { msg, pos } => {
                    let (msg, start) = (*msg, *pos);
                    let want = usize::try_from(size - start).unwrap_or(usize::MAX);
                    let n = want.min(data.len());
                    let mut done = 0;
                    while done < n {
                        let p = start + done as u64;
                        let exp = self.pattern.chunk(msg, p, n - done);
                        let got = &data[done..done + exp.len()];
                        if got != exp {
                            let i = got.iter().zip(exp).position(|(a, b)| a != b).unwrap_or(0);
                            return Err(Corruption::Mismatch {
                                msg,
                                offset: p + i as u64,
                                expected: exp[i],
                                got: got[i],
                            });
                        }
                        done += exp.len();
                    }
                    data = &data[n..];
                    self.consumed += n as u64;
                    self.payload_bytes += n as u64;
                    let pos = start + n as u64;
                    if pos == size {
                        self.finish_message();
                    } else {
                        self.state = State::Payload { msg, pos };
                    }
                }
            }
        }
        Ok(())
    }

    fn finish_message(&mut self) {
        self.messages += 1;
        self.state = State::Header {
            got: 0,
            buf: [0; HEADER_LEN],
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(p: &Pattern, msg: u64) -> Vec<u8> {
        let mut v = Pattern::header(msg).to_vec();
        let mut pos = 0;
        while pos < p.message_size() {
            let c = p.chunk(msg, pos, usize::MAX);
            v.extend_from_slice(c);
            pos += c.len() as u64;
        }
        v
    }

    #[test]
    fn a_window_of_the_periodic_template_is_the_payload() {
        let p = Pattern::new(11, 100_000);
        let window = 3 * TEMPLATE_LEN + 123;
        let file = p.periodic(TEMPLATE_LEN + window);
        for (msg, pos) in [(0u64, 0u64), (5, 777), (9, 40_000), (2, 100_000 - 5)] {
            let n = window.min((100_000 - pos) as usize);
            let at = p.template_offset(msg, pos);
            let mut expected = Vec::new();
            while expected.len() < n {
                let q = pos + expected.len() as u64;
                expected.extend_from_slice(p.chunk(msg, q, n - expected.len()));
            }
            assert_eq!(&file[at..at + n], &expected[..], "message {msg} from {pos}");
        }
    }

    #[test]
    fn messages_split_at_any_point_verify() {
        let p = Pattern::new(42, 300_000);
        let seen = Seen::new(3);
        let mut c = Checker::new(&p, Some(&seen));
        let mut all = message(&p, 0);
        all.extend(message(&p, 2));
        for piece in all.chunks(7919) {
            c.feed(piece).expect("valid data");
        }
        assert_eq!(c.messages, 2);
        assert_eq!(c.payload_bytes, 600_000);
        assert!(c.at_boundary());
    }

    #[test]
    fn a_flipped_payload_byte_is_reported_with_its_offset() {
        let p = Pattern::new(7, 1 << 20);
        let mut m = message(&p, 5);
        m[HEADER_LEN + 777_777] ^= 0x40;
        let mut c = Checker::new(&p, None);
        let e = c.feed(&m).expect_err("corrupt");
        assert!(
            matches!(
                e,
                Corruption::Mismatch {
                    msg: 5,
                    offset: 777_777,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn repeated_or_swapped_messages_are_caught() {
        let p = Pattern::new(1, 1000);
        let seen = Seen::new(10);
        let mut c = Checker::new(&p, Some(&seen));
        c.feed(&message(&p, 3)).expect("ok");
        assert!(matches!(
            c.feed(&message(&p, 3)),
            Err(Corruption::BadIndex { msg: 3, .. })
        ));
        // Another stream delivering an index already seen.
        let mut c2 = Checker::new(&p, Some(&seen));
        assert!(c2.feed(&message(&p, 3)).is_err());
        // Header of 4 with the payload of 5.
        let mut m = Pattern::header(4).to_vec();
        m.extend_from_slice(&message(&p, 5)[HEADER_LEN..]);
        let mut c3 = Checker::new(&p, None);
        assert!(matches!(
            c3.feed(&m),
            Err(Corruption::Mismatch { msg: 4, .. })
        ));
        let mut c4 = Checker::new(&p, Some(&seen));
        assert!(c4.feed(&message(&p, 10)).is_err(), "out of range");
    }

    #[test]
    fn garbage_is_a_bad_header_and_partial_end_is_visible() {
        let p = Pattern::new(1, 1000);
        let mut c = Checker::new(&p, None);
        assert!(matches!(
            c.feed(&[0u8; 40]),
            Err(Corruption::BadHeader { at: 0, .. })
        ));
        let mut c = Checker::new(&p, None);
        c.feed(&message(&p, 0)[..500]).expect("prefix ok");
        assert!(!c.at_boundary());
        assert_eq!(c.partial_message_bytes(), 500);
        assert_eq!(c.payload_bytes, 500 - HEADER_LEN as u64);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(proptest::num::u8::ANY, 0..4096),
                                       size in 0u64..5000) {
            let p = Pattern::new(3, size);
            let seen = Seen::new(4);
            let mut c = Checker::new(&p, Some(&seen));
            let _ = c.feed(&data);
        }

        #[test]
        fn any_single_bit_flip_is_detected(pos in 0usize..(2 * (HEADER_LEN + 2000)), bit in 0u8..8) {
            let p = Pattern::new(9, 2000);
            let mut data = message(&p, 0);
            data.extend(message(&p, 1));
            data[pos] ^= 1 << bit;
            let seen = Seen::new(2);
            let mut c = Checker::new(&p, Some(&seen));
            proptest::prop_assert!(c.feed(&data).is_err());
        }
    }
}
