//! Length-prefixed JSON frames: encoding with a size check that happens while encoding (a
//! frame over the limit is refused before it is built, not after), and a reassembler that
//! refuses an over-long frame as soon as its length is known.

use super::ProtoError;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

/// Encode a message as one frame (no size limit beyond `u32`).
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, ProtoError> {
    encode_limited(msg, u32::MAX as usize)
}

/// Encode a message as one frame of at most `max` body bytes. The JSON is written into a
/// buffer that refuses to grow past the limit, so a message too large to send never costs
/// more than `max` bytes of memory.
pub fn encode_limited<T: Serialize>(msg: &T, max: usize) -> Result<Vec<u8>, ProtoError> {
    let mut w = Limited {
        out: vec![0u8; 4],
        max: max.saturating_add(4),
    };
    if let Err(e) = serde_json::to_writer(&mut w, msg) {
        if w.out.len() >= w.max || e.is_io() {
            return Err(ProtoError::TooLong {
                len: w.out.len().saturating_sub(4),
                max,
            });
        }
        return Err(ProtoError::Malformed(e.to_string()));
    }
    let len = u32::try_from(w.out.len() - 4).map_err(|_| ProtoError::TooLong {
        len: w.out.len() - 4,
        max,
    })?;
    w.out[..4].copy_from_slice(&len.to_be_bytes());
    Ok(w.out)
}

struct Limited {
    out: Vec<u8>,
    max: usize,
}

impl Write for Limited {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.out.len() + buf.len() > self.max {
            self.out.truncate(self.max);
            return Err(io::Error::other("frame limit"));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Write one message (blocking writers; tests and simple tools).
pub fn write_msg<T: Serialize>(w: &mut impl Write, msg: &T) -> Result<(), ProtoError> {
    w.write_all(&encode(msg)?)?;
    Ok(())
}

/// Decode the body of a frame.
pub fn decode<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, ProtoError> {
    serde_json::from_slice(body).map_err(|e| ProtoError::Malformed(truncate(&e.to_string())))
}

/// At most 200 characters of a peer-influenced message (serde echoes unknown names).
fn truncate(s: &str) -> String {
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// Reassembles frames from bytes as they arrive (non-blocking sockets, or sockets with a
/// read timeout).
#[derive(Debug)]
pub struct FrameReader {
    buf: Vec<u8>,
    max: usize,
}

impl FrameReader {
    /// A reader refusing frames longer than `max`.
    pub fn new(max: usize) -> FrameReader {
        FrameReader {
            buf: Vec::new(),
            max,
        }
    }

    /// Bytes received and not yet taken as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Whether a frame has started and is not complete (for slow-sender detection).
    pub fn partial(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Take one complete frame body out of the buffer, if there is one. An announced length
    /// over the limit is an error at once.
    pub fn take_frame(&mut self) -> Result<Option<Vec<u8>>, ProtoError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > self.max {
            return Err(ProtoError::TooLong { len, max: self.max });
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let body = self.buf[4..4 + len].to_vec();
        self.buf.drain(..4 + len);
        Ok(Some(body))
    }

    /// Add received bytes.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Read what is available (one `read`) into the buffer. `Ok(false)`: nothing now (would
    /// block or timed out). The peer closing is [`ProtoError::Closed`]. Reads at most what
    /// the largest frame needs, so a peer cannot make the buffer grow past the limit.
    pub fn fill(&mut self, r: &mut impl Read) -> Result<bool, ProtoError> {
        let room = (self.max + 4)
            .saturating_sub(self.buf.len())
            .clamp(1, 64 * 1024);
        let mut chunk = vec![0u8; room];
        match r.read(&mut chunk) {
            Ok(0) => Err(ProtoError::Closed),
            Ok(n) => {
                self.push(&chunk[..n]);
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(ProtoError::Io(e)),
        }
    }

    /// Read what is available and return a complete frame if there is one.
    pub fn poll(&mut self, r: &mut impl Read) -> Result<Option<Vec<u8>>, ProtoError> {
        if let Some(f) = self.take_frame()? {
            return Ok(Some(f));
        }
        self.fill(r)?;
        self.take_frame()
    }

    /// Poll for a decoded message.
    pub fn poll_msg<T: for<'de> Deserialize<'de>>(
        &mut self,
        r: &mut impl Read,
    ) -> Result<Option<T>, ProtoError> {
        match self.poll(r)? {
            Some(body) => decode(&body).map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ClientMsg, ServerMsg, MAX_CLIENT_FRAME};
    use std::io::Cursor;

    #[test]
    fn oversized_frames_are_refused_before_reading_them() {
        let mut r = FrameReader::new(MAX_CLIENT_FRAME);
        let mut c = Cursor::new(vec![0xff, 0xff, 0xff, 0xff, b'{']);
        assert!(matches!(r.poll(&mut c), Err(ProtoError::TooLong { .. })));
    }

    #[test]
    fn encoding_over_the_limit_fails_without_building_the_frame() {
        let big = ServerMsg::Rejected {
            reason: "x".repeat(10_000),
            retry_after_s: None,
        };
        match encode_limited(&big, 1000) {
            Err(ProtoError::TooLong { len, max }) => {
                assert_eq!(max, 1000);
                assert!(len <= 1000, "{len}");
            }
            other => panic!("{other:?}"),
        }
        let f = encode_limited(&big, 20_000).expect("fits");
        assert_eq!(
            u32::from_be_bytes([f[0], f[1], f[2], f[3]]) as usize,
            f.len() - 4
        );
    }

    #[test]
    fn eof_and_garbage_are_errors() {
        let mut r = FrameReader::new(MAX_CLIENT_FRAME);
        assert!(matches!(
            r.poll(&mut Cursor::new(Vec::<u8>::new())),
            Err(ProtoError::Closed)
        ));
        let mut wire = 5u32.to_be_bytes().to_vec();
        wire.extend_from_slice(b"hello");
        let mut r = FrameReader::new(MAX_CLIENT_FRAME);
        assert!(matches!(
            r.poll_msg::<ClientMsg>(&mut Cursor::new(wire)),
            Err(ProtoError::Malformed(_))
        ));
        let body = br#"{"type":"setup","params":{"tune":"bogus"}}"#;
        assert!(decode::<ClientMsg>(body).is_err());
    }

    #[test]
    fn decode_errors_are_short_even_for_long_garbage() {
        let name = "x".repeat(5000);
        let body = format!(r#"{{"type":"{name}"}}"#);
        match decode::<ClientMsg>(body.as_bytes()) {
            Err(ProtoError::Malformed(m)) => assert!(m.len() < 260, "{}", m.len()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_buffer_never_grows_past_one_frame() {
        let mut r = FrameReader::new(100);
        let mut wire = 100u32.to_be_bytes().to_vec();
        wire.extend_from_slice(&[b' '; 5000]);
        let mut c = Cursor::new(wire);
        let _ = r.fill(&mut c);
        assert!(r.buffered() <= 104);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_the_decoder(data in proptest::collection::vec(proptest::num::u8::ANY, 0..2048)) {
            let mut r = FrameReader::new(MAX_CLIENT_FRAME);
            r.push(&data);
            while let Ok(Some(body)) = r.take_frame() {
                let _ = decode::<ClientMsg>(&body);
                let _ = decode::<ServerMsg>(&body);
            }
            let _ = decode::<ClientMsg>(&data);
        }

        #[test]
        fn arbitrary_json_bodies_never_panic(s in "\\{\"type\":\"(setup|hello|start_phase|end_phase|auth)\".{0,200}\\}") {
            let _ = decode::<ClientMsg>(s.as_bytes());
        }
    }
}
