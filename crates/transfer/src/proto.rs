//! The control protocol between `tcptune send` and `tcptune serve`.
//!
//! # Framing
//!
//! Every control message is a frame: a 4-byte big-endian length followed by that many bytes
//! of JSON (one [`ClientMsg`] or [`ServerMsg`], tagged by `"type"`). A receiver refuses a
//! frame longer than its limit before reading it ([`MAX_CLIENT_FRAME`] at the server), so a
//! hostile peer cannot make it allocate; malformed JSON is an error, never a panic.
//!
//! # Conversation
//!
//! ```text
//! client                                   server
//!   Hello{protocol, version}          ->
//!                                     <-   Welcome{protocol, version, challenge?}
//!   Setup{auth?, params}              ->
//!                                     <-   Accepted{session, limits, host limits} | Rejected
//!   Ping{seq} (x4, RTT measurement)   ->
//!                                     <-   Pong{seq}
//!   StartPhase{phase, hint}           ->   (probe phase first when the mode needs one)
//!   OpenStream{stream}                ->
//!                                     <-   StreamPort{stream, port}  (per-stream listener,
//!                                          tuner's options applied before listen())
//!   (client connects, sends the 32-byte stream hello, see data hello)
//!   Go                                ->   senders start
//!                                     <-   WantStreams{..} (server tuner asks for streams)
//!   Stop                              ->   (duration elapsed / time cap: senders stop)
//!   EndPhase                          ->
//!                                     <-   PhaseResult{server side of every stream}
//!   ... main phase the same way ...
//!   Bye                               ->
//! ```
//!
//! Either side may send an error (`Rejected` / `Abort`) at any time and close.
//!
//! # Data hello
//!
//! The first 32 bytes a client writes on a data connection: `b"tcptune\x01"`, the 16-byte
//! session id and the 4-byte big-endian stream index, then 4 zero bytes. The server drops a
//! connection whose hello does not match the stream it listens for.

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use tcptune_core::{HostLimits, PathHint, TuneMode};

/// Version of this protocol; both ends must speak the same.
pub const PROTOCOL_VERSION: u32 = 1;
/// Largest frame the server accepts from a client.
pub const MAX_CLIENT_FRAME: usize = 64 * 1024;
/// Largest frame the client accepts from the server (a phase result with `--samples`).
pub const MAX_SERVER_FRAME: usize = 256 * 1024 * 1024;
/// Length of the data-connection hello.
pub const DATA_HELLO_LEN: usize = 32;
const DATA_MAGIC: &[u8; 8] = b"tcptune\x01";

/// A control-protocol failure.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// Reading or writing the connection failed.
    #[error("control connection: {0}")]
    Io(#[from] io::Error),
    /// The peer closed the connection.
    #[error("the peer closed the control connection")]
    Closed,
    /// A frame longer than allowed.
    #[error("control frame of {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// Announced length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// A frame that is not a valid message.
    #[error("malformed control message: {0}")]
    Malformed(String),
    /// A valid message that is not expected now.
    #[error("unexpected control message: expected {expected}, got {got}")]
    Unexpected {
        /// What was expected.
        expected: &'static str,
        /// What came.
        got: String,
    },
    /// No message within the allowed time.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
}

/// What the client asks for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TestParams {
    /// Tuning mode for both ends.
    pub tune: TuneMode,
    /// Parallel streams to start with.
    pub streams: u32,
    /// Payload bytes per message.
    pub message_size: u64,
    /// Messages to move (message workload); 0 with `duration_ms` set.
    pub messages: u64,
    /// Duration workload: send for this long.
    pub duration_ms: Option<u64>,
    /// Cap on the message workload.
    pub max_time_ms: Option<u64>,
    /// The server sends.
    pub reverse: bool,
    /// Keep every sample and change (large results).
    pub samples: bool,
    /// Congestion control for the data connections.
    pub congestion: Option<String>,
    /// Seed of the data pattern.
    pub seed: u64,
    /// Testing aid: the sender flips one byte of this message (the run must fail with an
    /// integrity error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrupt_message: Option<u64>,
}

/// What the server allows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerLimits {
    /// Streams per session, including streams added mid-transfer.
    pub max_streams: u32,
    /// Largest message.
    pub max_message_size: u64,
    /// Largest message count.
    pub max_messages: u64,
    /// Largest total bytes of a message workload.
    pub max_total_bytes: u64,
    /// Longest duration workload or cap, milliseconds.
    pub max_duration_ms: u64,
}

/// Which phase of a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Phase {
    /// The pre-transfer bandwidth probe: one stream, duration workload.
    Probe {
        /// How long the sender sends.
        duration_ms: u64,
    },
    /// The transfer itself.
    Main,
}

/// Messages from client to server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMsg {
    /// Opening.
    Hello {
        /// [`PROTOCOL_VERSION`].
        protocol: u32,
        /// Client software version.
        version: String,
    },
    /// The test, with the authentication tag when the server asked for one.
    Setup {
        /// Hex HMAC-SHA256 of the challenge (see [`crate::auth`]).
        auth: Option<String>,
        /// What to run.
        params: TestParams,
    },
    /// RTT measurement.
    Ping {
        /// Echoed back.
        seq: u64,
    },
    /// Start a phase.
    StartPhase {
        /// Which.
        phase: Phase,
        /// What was measured about the path (RTT, probe rate) for the server's tuners.
        hint: PathHint,
    },
    /// Open data stream `stream` (0-based) of the current phase.
    OpenStream {
        /// Index.
        stream: u32,
    },
    /// Start sending (all initial streams are connected).
    Go,
    /// Senders stop now (duration over, the time cap hit, or the probe's time is up).
    Stop {
        /// End at once, discarding queued data (the `--max-time` cap or the end of the
        /// probe), rather than letting written data arrive (end of a duration workload).
        capped: bool,
    },
    /// The client's side of the phase is done; send the result.
    EndPhase,
    /// End of session.
    Bye,
}

/// Messages from server to client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMsg {
    /// Answer to `Hello`.
    Welcome {
        /// [`PROTOCOL_VERSION`].
        protocol: u32,
        /// Server software version.
        version: String,
        /// Hex nonce to authenticate with, when the server requires a shared secret.
        challenge: Option<String>,
    },
    /// The test is accepted.
    Accepted {
        /// Hex session id (also in every data hello).
        session: String,
        /// The server's bounds.
        limits: ServerLimits,
        /// Buffer limits of the server's network namespace.
        host_limits: HostLimits,
        /// Congestion control the server's data sockets use.
        congestion: String,
        /// Whether the server can use `SO_*BUFFORCE`.
        can_force: bool,
    },
    /// Refused, with the reason.
    Rejected {
        /// Why.
        reason: String,
    },
    /// Answer to `Ping`.
    Pong {
        /// Echo.
        seq: u64,
    },
    /// The phase is set up on the server.
    PhaseReady,
    /// Where to connect for a stream.
    StreamPort {
        /// Index.
        stream: u32,
        /// Port of the stream's listener.
        port: u16,
    },
    /// A server-side tuner asks for more streams.
    WantStreams {
        /// Streams the tuner knew of.
        known_streams: u32,
        /// How many more.
        count: u32,
        /// Why.
        reason: String,
    },
    /// The server's side of the finished phase.
    PhaseResult(Box<crate::engine::SideResult>),
    /// The server gives up on the session (integrity failure, error, timeout).
    Abort {
        /// The data did not check out.
        integrity: bool,
        /// Why.
        reason: String,
    },
}

impl ClientMsg {
    /// The message's type name, for errors.
    pub fn kind(&self) -> &'static str {
        match self {
            ClientMsg::Hello { .. } => "hello",
            ClientMsg::Setup { .. } => "setup",
            ClientMsg::Ping { .. } => "ping",
            ClientMsg::StartPhase { .. } => "start_phase",
            ClientMsg::OpenStream { .. } => "open_stream",
            ClientMsg::Go => "go",
            ClientMsg::Stop { .. } => "stop",
            ClientMsg::EndPhase => "end_phase",
            ClientMsg::Bye => "bye",
        }
    }
}

impl ServerMsg {
    /// The message's type name, for errors.
    pub fn kind(&self) -> &'static str {
        match self {
            ServerMsg::Welcome { .. } => "welcome",
            ServerMsg::Accepted { .. } => "accepted",
            ServerMsg::Rejected { .. } => "rejected",
            ServerMsg::Pong { .. } => "pong",
            ServerMsg::PhaseReady => "phase_ready",
            ServerMsg::StreamPort { .. } => "stream_port",
            ServerMsg::WantStreams { .. } => "want_streams",
            ServerMsg::PhaseResult(_) => "phase_result",
            ServerMsg::Abort { .. } => "abort",
        }
    }
}

/// Encode a message as one frame.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, ProtoError> {
    let body = serde_json::to_vec(msg).map_err(|e| ProtoError::Malformed(e.to_string()))?;
    let len = u32::try_from(body.len()).map_err(|_| ProtoError::TooLong {
        len: body.len(),
        max: u32::MAX as usize,
    })?;
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Write one message.
pub fn write_msg<T: Serialize>(w: &mut impl Write, msg: &T) -> Result<(), ProtoError> {
    w.write_all(&encode(msg)?)?;
    Ok(())
}

/// Decode the body of a frame.
pub fn decode<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, ProtoError> {
    serde_json::from_slice(body).map_err(|e| ProtoError::Malformed(e.to_string()))
}

/// Reassembles frames from a socket that may time out between bytes (`SO_RCVTIMEO`), so a
/// caller can poll for messages while doing other work.
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

    /// Take one complete frame body out of the buffer, if there is one.
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

    /// Read what is available (one `read`, which may time out) and return a complete frame
    /// if there is one. `Ok(None)`: no complete frame yet (timeout or partial frame).
    pub fn poll(&mut self, r: &mut impl Read) -> Result<Option<Vec<u8>>, ProtoError> {
        if let Some(f) = self.take_frame()? {
            return Ok(Some(f));
        }
        let mut chunk = [0u8; 16 * 1024];
        match r.read(&mut chunk) {
            Ok(0) => Err(ProtoError::Closed),
            Ok(n) => {
                self.push(&chunk[..n]);
                self.take_frame()
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(ProtoError::Io(e)),
        }
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

    /// Wait for one message until `deadline`, polling (the socket needs a read timeout).
    pub fn recv_until<T: for<'de> Deserialize<'de>>(
        &mut self,
        r: &mut impl Read,
        deadline: std::time::Instant,
        what: &'static str,
    ) -> Result<T, ProtoError> {
        loop {
            if let Some(m) = self.poll_msg(r)? {
                return Ok(m);
            }
            if std::time::Instant::now() >= deadline {
                return Err(ProtoError::Timeout(what));
            }
        }
    }
}

/// The hello a client writes first on a data connection.
pub fn data_hello(session: &[u8; 16], stream: u32) -> [u8; DATA_HELLO_LEN] {
    let mut h = [0u8; DATA_HELLO_LEN];
    h[..8].copy_from_slice(DATA_MAGIC);
    h[8..24].copy_from_slice(session);
    h[24..28].copy_from_slice(&stream.to_be_bytes());
    h
}

/// Whether `h` is the hello of `stream` in `session`.
pub fn check_data_hello(h: &[u8], session: &[u8; 16], stream: u32) -> bool {
    h.len() == DATA_HELLO_LEN && h == data_hello(session, stream)
}

/// Lower-case hex.
pub fn to_hex(b: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &c in b {
        s.push(D[(c >> 4) as usize] as char);
        s.push(D[(c & 15) as usize] as char);
    }
    s
}

/// Parse hex of an exact length.
pub fn from_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let b = s.as_bytes();
    if b.len() != 2 * N {
        return None;
    }
    let val = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = (val(b[2 * i])? << 4) | val(b[2 * i + 1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn params() -> TestParams {
        TestParams {
            tune: TuneMode::Fixed(tcptune_core::Bytes::mib(4)),
            streams: 4,
            message_size: 1 << 20,
            messages: 128,
            duration_ms: None,
            max_time_ms: Some(60_000),
            reverse: false,
            samples: true,
            congestion: Some("cubic".into()),
            seed: 99,
            corrupt_message: None,
        }
    }

    #[test]
    fn messages_round_trip_through_frames_split_anywhere() {
        let msgs = vec![
            ClientMsg::Hello {
                protocol: PROTOCOL_VERSION,
                version: "x".into(),
            },
            ClientMsg::Setup {
                auth: Some("ab".into()),
                params: params(),
            },
            ClientMsg::StartPhase {
                phase: Phase::Probe { duration_ms: 500 },
                hint: PathHint::default(),
            },
            ClientMsg::Stop { capped: true },
            ClientMsg::Bye,
        ];
        let mut wire = Vec::new();
        for m in &msgs {
            write_msg(&mut wire, m).expect("encode");
        }
        let mut r = FrameReader::new(MAX_CLIENT_FRAME);
        let mut out = Vec::new();
        for piece in wire.chunks(3) {
            r.push(piece);
            while let Some(body) = r.take_frame().expect("frame") {
                out.push(decode::<ClientMsg>(&body).expect("decode"));
            }
        }
        assert_eq!(out, msgs);
    }

    #[test]
    fn oversized_frames_are_refused_before_reading_them() {
        let mut r = FrameReader::new(MAX_CLIENT_FRAME);
        let mut c = Cursor::new(vec![0xff, 0xff, 0xff, 0xff, b'{']);
        assert!(matches!(r.poll(&mut c), Err(ProtoError::TooLong { .. })));
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
        // A valid frame of an unknown mode.
        let body = br#"{"type":"setup","auth":null,"params":{"tune":"bogus"}}"#;
        assert!(decode::<ClientMsg>(body).is_err());
    }

    #[test]
    fn data_hello_and_hex_round_trip() {
        let s = [7u8; 16];
        let h = data_hello(&s, 3);
        assert!(check_data_hello(&h, &s, 3));
        assert!(!check_data_hello(&h, &s, 4));
        assert!(!check_data_hello(&h[..31], &s, 3));
        assert_eq!(from_hex::<16>(&to_hex(&s)), Some(s));
        assert_eq!(from_hex::<2>("zz00"), None);
        assert_eq!(from_hex::<2>("abc"), None);
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
            let _ = check_data_hello(&data, &[0; 16], 0);
        }

        #[test]
        fn arbitrary_json_bodies_never_panic(s in "\\{\"type\":\"(setup|hello|open_stream|start_phase)\".{0,200}\\}") {
            let _ = decode::<ClientMsg>(s.as_bytes());
        }
    }
}
