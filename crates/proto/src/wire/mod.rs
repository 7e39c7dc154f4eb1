//! The wire protocol between `tcptune send` and `tcptune serve` (version 3).
//!
//! Everything arrives on the server's one listening port: a control connection per session
//! and the session's data connections, told apart by their first bytes (a data connection
//! starts with the [`DataHello`]'s magic, a control connection with a frame length).
//!
//! # Control frames
//!
//! Every control message is a frame: a 4-byte big-endian length followed by that many bytes
//! of JSON (one [`ClientMsg`] or [`ServerMsg`], tagged by `"type"`); see [`frame`]. A
//! receiver refuses a frame longer than its limit before reading it, and a sender checks
//! the size while encoding, so neither end ever allocates more than the limit.
//!
//! # Conversation
//!
//! The client pipelines its first flight: nothing in it waits for an answer.
//!
//! ```text
//! client                                       server
//!   [TCP handshake of the control connection: the client reads the RTT from TCP_INFO]
//!   Hello{protocol, version, token, auth?,
//!         key_share}                       ->
//!   Setup{params}                          ->
//!   StartPhase{seq 0, phase, hint}         ->
//!   [data connections: TCP handshakes start]
//!                                          <-  Accepted{limits, host limits, key_share}
//!                                              | Rejected
//!   [both ends derive the session keys; each data connection sends
//!    DataHello{token, seq, stream, tag}, then data at once when the client
//!    sends]                                ->  a data connection joins the session whose
//!                                              token it carries, from the control
//!                                              connection's address only, when its tag
//!                                              verifies under the session's keys
//!                                          <-  WantStreams{..}   (a server tuner asks)
//!   Hint{seq, hint, streams, retire?}      ->  (the rate, measured in band: both ends
//!                                              settle their buffers; with retire, the
//!                                              server's senders beyond streams close)
//!   Stop{capped}                           ->  (duration over, time cap, probe done)
//!   EndPhase{streams}                      ->  (the client opens no more streams)
//!                                          <-  PhaseResult{server side}  (once every
//!                                              stream of the phase has ended)
//!   StartPhase{seq 1, ..} ...                  (a next phase, e.g. after the probe)
//!   Bye                                    ->
//! ```
//!
//! # Advice
//!
//! `tcptune advise` asks for the buffer sizes and stream count of the path between it and
//! the server ([`crate::advice`]): `Advise` takes the place of `Setup`, under the same
//! admission, authentication and limits.
//!
//! ```text
//! client                                       server
//!   Hello{protocol, version, token, auth?,
//!         key_share}                       ->
//!   Advise{direction, limits, ..}          ->  (looks the path up in its path database)
//!                                          <-  Advice{advice}       (a fresh entry)
//!                                          <-  Measure{streams, key_share, ..} (none: it
//!                                              measures)
//!   [data connections DataHello{token, 0, i, tag} for i < streams; data flows in the
//!    direction asked until the server has seen the pipe full]  ->
//!                                          <-  Advice{advice}       (and it ends the data
//!                                              connections)
//!   Bye                                    ->
//! ```
//!
//! The token is chosen by the client (16 random bytes). The data connections' TCP
//! handshakes start with the first flight; each sends its hello once the client has the
//! server's key share (in `Accepted`, which comes back in about the time a TCP handshake
//! takes), so data still flows about one round trip after the control connection is up.
//! The server refuses a token already in use.
//!
//! # Keys
//!
//! Every session has keys (see [`crate::keys`]): an ephemeral X25519 exchange on the
//! control connection (`Hello.key_share`, `Accepted.key_share` or `Measure.key_share`),
//! mixed with the shared secret when there is one. Each data connection's hello is tagged
//! with them and so is each copy block ([`crate::copy::wire`]).
//!
//! # Authentication
//!
//! With a shared secret (see [`crate::auth`]) the client proves it in `Hello` without a
//! round trip: an HMAC over a fresh nonce, its clock and the token. The server accepts it
//! when the clock is within [`crate::auth::CLOCK_SKEW`] of its own and the nonce is new;
//! otherwise it answers with a [`ServerMsg::Challenge`], discards what the client sent after
//! `Hello`, and the client answers with [`ClientMsg::Auth`] and sends the rest again.
//!
//! Either side may end the session with an error (`Rejected`, `Abort`) at any time.

pub mod frame;
pub mod hello;

pub use frame::{decode, encode, encode_limited, write_msg, FrameReader};
pub use hello::{DataHello, DATA_HELLO_LEN, DATA_MAGIC};

use serde::{Deserialize, Serialize};
use std::fmt;
use tcptune_core::pathdb::Direction;
use tcptune_core::{HostLimits, PathHint, TuneMode};

/// Version of this protocol; both ends must speak the same.
pub const PROTOCOL_VERSION: u32 = 3;
/// Largest frame the server accepts from a client.
pub const MAX_CLIENT_FRAME: usize = 64 * 1024;
/// Largest frame the client accepts from the server (a phase result with `--samples`).
pub const MAX_SERVER_FRAME: usize = 16 * 1024 * 1024;

/// A control-protocol failure.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// Reading or writing the connection failed.
    #[error("control connection: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the connection.
    #[error("the peer closed the control connection")]
    Closed,
    /// A frame longer than allowed.
    #[error("control frame of {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// Announced (or, when encoding, reached) length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// A frame that is not a valid message.
    #[error("malformed control message: {0}")]
    Malformed(String),
}

/// A session's token: 16 random bytes chosen by the client, carried by every data connection
/// of the session. Written as 32 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(pub [u8; 16]);

impl Token {
    /// Constant-time comparison (a timing difference must not tell how much of a guess was
    /// right).
    pub fn ct_eq(&self, other: &Token) -> bool {
        let mut diff = 0u8;
        for (a, b) in self.0.iter().zip(other.0.iter()) {
            diff |= a ^ b;
        }
        std::hint::black_box(diff) == 0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only a prefix: logs must not hand out a live token.
        write!(f, "Token({}..)", &to_hex(&self.0)[..8])
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&to_hex(&self.0))
    }
}

impl Serialize for Token {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&to_hex(&self.0))
    }
}

impl<'de> Deserialize<'de> for Token {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Token, D::Error> {
        let s = String::deserialize(d)?;
        from_hex::<16>(&s)
            .map(Token)
            .ok_or_else(|| serde::de::Error::custom("a token is 32 hex digits"))
    }
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
    /// Keep every sample and change (bounded: see [`crate::result::SideDetail`]).
    pub samples: bool,
    /// Congestion control for the data connections.
    pub congestion: Option<String>,
    /// Seed of the data pattern.
    pub seed: u64,
    /// Testing aid: the sender flips one byte of this message (the run must fail with an
    /// integrity error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrupt_message: Option<u64>,
    /// A copy of files and directories (`tcptune cp`) instead of the pattern: the main
    /// phase's streams carry the files (see [`crate::files`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<crate::files::FileJob>,
    /// The client takes [`ServerMsg::Share`]: its session shares the path fairly with the
    /// server's other bulk sessions (the sending end paces at the share). A server that
    /// predates it ignores the field and never sends a share; one that knows it sends
    /// shares only to clients that set it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub share: bool,
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
    /// The pre-transfer bandwidth probe: a duration workload of any number of streams.
    Probe {
        /// How long the sender may send at most.
        duration_ms: u64,
    },
    /// The transfer itself.
    Main,
}

/// The client's proof of the shared secret, sent in `Hello` (see [`crate::auth`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientAuth {
    /// 32 random bytes, hex.
    pub nonce: String,
    /// The client's clock, seconds since the Unix epoch.
    pub time_unix_s: u64,
    /// HMAC-SHA256 over nonce, time and token, hex.
    pub mac: String,
}

/// What `tcptune advise` asks for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdviseRequest {
    /// Which way the application's data will flow, seen from the client (`send`: the
    /// client's host sends).
    pub direction: Direction,
    /// The client's host limits, for the advice to fit them (without them the server
    /// assumes its own).
    #[serde(default)]
    pub limits: Option<HostLimits>,
    /// Most streams the application will open.
    pub max_streams: u32,
    /// Measure the path now even if the server's database knows it.
    #[serde(default)]
    pub fresh: bool,
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
        /// The session's token (required; optional in the encoding so that a client of
        /// another protocol version is told about the version, not about a missing field).
        #[serde(default)]
        token: Option<Token>,
        /// Proof of the shared secret, when the client has one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        auth: Option<ClientAuth>,
        /// The client's ephemeral X25519 public key, hex (see [`crate::keys`]; required,
        /// optional in the encoding for the same reason as the token).
        #[serde(default)]
        key_share: Option<String>,
    },
    /// The answer to a [`ServerMsg::Challenge`]: HMAC-SHA256 over the server's nonce and
    /// the token, hex.
    Auth {
        /// The answer.
        mac: String,
    },
    /// The test.
    Setup {
        /// What to run.
        params: TestParams,
    },
    /// Instead of `Setup`: ask for advice on the path between client and server.
    Advise {
        /// What to advise on.
        request: AdviseRequest,
    },
    /// Start phase `seq` (0, 1, ...: one at a time, in order).
    StartPhase {
        /// Phase number; data connections carry it.
        seq: u32,
        /// Which.
        phase: Phase,
        /// What is known about the path (RTT, rate) for the server's tuners.
        hint: PathHint,
        /// Streams the client opens now (it may open more later, up to the limit).
        streams: u32,
    },
    /// What is known of the path changed while phase `seq` runs (its rate was measured in
    /// band, or the path database's was wrong): both ends' tuners settle to it, for a
    /// transfer of `streams` streams.
    Hint {
        /// The phase.
        seq: u32,
        /// The path as now known.
        hint: PathHint,
        /// Streams the transfer has (or is opening) in all.
        streams: u32,
        /// The transfer runs on with fewer streams than it has open (those the in-band
        /// measurement opened beyond what the plan needs): the server's senders of streams
        /// `streams..` finish the message or block they are sending and close. Only for a
        /// phase whose data the server sends, only sent to a server that says it
        /// retires (`Accepted.retires`); absent (false) from a client that predates it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        retire: bool,
    },
    /// Senders stop now (duration over, the time cap hit, or the probe's time is up).
    Stop {
        /// End at once, discarding queued data (the `--max-time` cap or the end of the
        /// probe), rather than letting written data arrive (end of a duration workload).
        capped: bool,
    },
    /// The client opened `streams` streams in this phase and opens no more; the server
    /// sends the phase's result once they have all ended.
    EndPhase {
        /// Streams the client opened in the phase.
        streams: u32,
    },
    /// End of session.
    Bye,
}

/// Messages from server to client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMsg {
    /// Prove the shared secret against this nonce (the client's own proof was refused or
    /// could not be checked: clock skew, a nonce already seen). Everything the client sent
    /// after `Hello` is discarded: send `Auth`, then the rest again.
    Challenge {
        /// 32 random bytes, hex.
        nonce: String,
        /// Why the client's own proof was not enough.
        reason: String,
        /// The server's ephemeral X25519 public key for the session, hex (sent this early
        /// so that the client's data connections need not wait for `Accepted`; `Accepted`
        /// repeats it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key_share: Option<String>,
    },
    /// The test is accepted.
    Accepted {
        /// The server's bounds for this session.
        limits: ServerLimits,
        /// Buffer limits of the server's network namespace.
        host_limits: HostLimits,
        /// Congestion control the server's data sockets use.
        congestion: String,
        /// Whether the server can use `SO_*BUFFORCE`.
        can_force: bool,
        /// Whether this server checks a shared secret (a client that sent a proof to a
        /// server without a secret should say so).
        auth_required: bool,
        /// The server's ephemeral X25519 public key for this session, hex (see
        /// [`crate::keys`]).
        key_share: String,
        /// The server seals the copy's blocks, as the job asked (`FileJob::encrypt`);
        /// absent (false) from a server that predates it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        encrypt: bool,
        /// The server's senders close on `Hint.retire` (a reversed transfer or a pulled
        /// copy runs on with the streams its plan needs); absent (false) from a server that
        /// predates it, whose senders keep every stream.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        retires: bool,
    },
    /// Refused, with the reason.
    Rejected {
        /// Why.
        reason: String,
        /// When trying again may succeed (a full server), seconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_s: Option<u64>,
    },
    /// No session slot is free yet: the client waits in the server's queue, at this place
    /// (from 1), and is told again when its place changes; `Accepted` (or `Rejected`)
    /// follows. Data connections it opened already wait with it.
    Queued {
        /// The client's place in the queue, from 1.
        place: u32,
        /// When a slot is expected to free, seconds, from the running sessions' progress.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expected_wait_s: Option<u64>,
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
    PhaseResult {
        /// The phase.
        seq: u32,
        /// What the server saw.
        result: Box<crate::result::SideResult>,
    },
    /// A copy failed at the server (a missing source, a full disk, a path outside its
    /// root, ...); an `Abort` follows.
    FileFailed {
        /// What and why.
        failure: crate::files::FileFailure,
    },
    /// The answer to `Advise` when the server must measure the path first: open `streams`
    /// data connections for phase `seq`; data flows in the direction asked (the client
    /// sends when it asked for `send`) until the server answers with `Advice`, at most
    /// `duration_ms`.
    Measure {
        /// The measurement's phase number (data connections carry it).
        seq: u32,
        /// Data connections to open.
        streams: u32,
        /// The longest the measurement lasts.
        duration_ms: u64,
        /// Payload bytes per message.
        message_size: u64,
        /// Seed of the data pattern.
        seed: u64,
        /// The server's ephemeral X25519 public key for this session, hex (the measurement's
        /// data connections are tagged with the keys, see [`crate::keys`]).
        key_share: String,
    },
    /// The answer to `Advise`.
    Advice {
        /// The path's facts and what to set.
        advice: Box<crate::advice::Advice>,
    },
    /// The session's fair share of the path it shares with the server's other bulk
    /// sessions (see [`crate::session::fair`]), sent only to a client that set
    /// [`TestParams::share`], when its main phase runs and whenever the share changes. The
    /// sending end (the client, or the server with `reverse`) paces the session's streams
    /// together at most at `rate_bps`; `null` lifts the cap (the session is alone).
    Share {
        /// The cap, payload bit/s (`None`: no cap).
        #[serde(default)]
        rate_bps: Option<u64>,
        /// Bulk sessions sharing the server, this one included.
        sessions: u32,
        /// What the path delivers in all, as far as the server knows, bit/s.
        #[serde(default)]
        path_bps: Option<u64>,
    },
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
            ClientMsg::Auth { .. } => "auth",
            ClientMsg::Setup { .. } => "setup",
            ClientMsg::Advise { .. } => "advise",
            ClientMsg::StartPhase { .. } => "start_phase",
            ClientMsg::Hint { .. } => "hint",
            ClientMsg::Stop { .. } => "stop",
            ClientMsg::EndPhase { .. } => "end_phase",
            ClientMsg::Bye => "bye",
        }
    }
}

impl ServerMsg {
    /// The message's type name, for errors.
    pub fn kind(&self) -> &'static str {
        match self {
            ServerMsg::Challenge { .. } => "challenge",
            ServerMsg::Accepted { .. } => "accepted",
            ServerMsg::Rejected { .. } => "rejected",
            ServerMsg::Queued { .. } => "queued",
            ServerMsg::WantStreams { .. } => "want_streams",
            ServerMsg::PhaseResult { .. } => "phase_result",
            ServerMsg::FileFailed { .. } => "file_failed",
            ServerMsg::Measure { .. } => "measure",
            ServerMsg::Advice { .. } => "advice",
            ServerMsg::Share { .. } => "share",
            ServerMsg::Abort { .. } => "abort",
        }
    }
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

    pub(crate) fn params() -> TestParams {
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
            files: None,
            share: false,
        }
    }

    #[test]
    fn messages_round_trip_through_frames_split_anywhere() {
        let msgs = vec![
            ClientMsg::Hello {
                protocol: PROTOCOL_VERSION,
                version: "x".into(),
                token: Some(Token([3; 16])),
                auth: Some(ClientAuth {
                    nonce: "ab".into(),
                    time_unix_s: 5,
                    mac: "cd".into(),
                }),
                key_share: Some("ef".repeat(32)),
            },
            ClientMsg::Setup { params: params() },
            ClientMsg::StartPhase {
                seq: 0,
                phase: Phase::Probe { duration_ms: 500 },
                hint: PathHint::default(),
                streams: 3,
            },
            ClientMsg::Stop { capped: true },
            ClientMsg::EndPhase { streams: 3 },
            ClientMsg::Advise {
                request: AdviseRequest {
                    direction: Direction::Receive,
                    limits: Some(HostLimits::linux_defaults()),
                    max_streams: 8,
                    fresh: true,
                },
            },
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
    fn tokens_are_hex_compare_in_constant_time_and_do_not_leak_in_debug() {
        let t = Token([0xab; 16]);
        let json = serde_json::to_string(&t).expect("serialize");
        assert_eq!(json, format!("\"{}\"", "ab".repeat(16)));
        assert_eq!(serde_json::from_str::<Token>(&json).expect("parse"), t);
        assert!(serde_json::from_str::<Token>("\"abc\"").is_err());
        assert!(t.ct_eq(&Token([0xab; 16])));
        let mut other = [0xab; 16];
        other[15] = 0;
        assert!(!t.ct_eq(&Token(other)));
        assert_eq!(format!("{t:?}"), "Token(abababab..)");
    }

    #[test]
    fn share_is_opt_in_both_ways_and_older_peers_ignore_it() {
        // A client that predates shares says nothing; a server reads that as "no".
        let mut v = serde_json::to_value(params()).expect("serialize");
        assert!(v.get("share").is_none(), "not sent when false: {v}");
        v["share"] = serde_json::Value::Bool(true);
        let p: TestParams = serde_json::from_value(v).expect("parse");
        assert!(p.share);
        // The message round-trips; a cap of null lifts it.
        let m = ServerMsg::Share {
            rate_bps: None,
            sessions: 2,
            path_bps: Some(9),
        };
        let mut wire = Vec::new();
        write_msg(&mut wire, &m).expect("encode");
        assert_eq!(decode::<ServerMsg>(&wire[4..]).expect("decode"), m);
        assert_eq!(m.kind(), "share");
    }

    #[test]
    fn retiring_is_opt_in_both_ways_and_older_peers_ignore_it() {
        // A hint that retires nothing reads as before, and one from a client that predates
        // retire (no field) reads as "retire nothing".
        let hint = ClientMsg::Hint {
            seq: 1,
            hint: PathHint::default(),
            streams: 3,
            retire: false,
        };
        let mut v = serde_json::to_value(&hint).expect("serialize");
        assert!(v.get("retire").is_none(), "not sent when false: {v}");
        v["retire"] = serde_json::Value::Bool(true);
        let m: ClientMsg = serde_json::from_value(v).expect("parse");
        assert!(matches!(m, ClientMsg::Hint { retire: true, .. }));
        // A server that predates it says nothing: the client reads that as "does not retire".
        let accepted = serde_json::json!({
            "type": "accepted",
            "limits": serde_json::to_value(ServerLimits {
                max_streams: 4,
                max_message_size: 1,
                max_messages: 1,
                max_total_bytes: 1,
                max_duration_ms: 1,
            }).expect("limits"),
            "host_limits": serde_json::to_value(HostLimits::linux_defaults()).expect("host"),
            "congestion": "bbr",
            "can_force": false,
            "auth_required": false,
            "key_share": "00",
        });
        let m: ServerMsg = serde_json::from_value(accepted).expect("parse");
        assert!(matches!(m, ServerMsg::Accepted { retires: false, .. }));
    }

    #[test]
    fn hex_round_trips_and_refuses_bad_input() {
        let s = [7u8; 16];
        assert_eq!(from_hex::<16>(&to_hex(&s)), Some(s));
        assert_eq!(from_hex::<2>("zz00"), None);
        assert_eq!(from_hex::<2>("abc"), None);
    }
}
