//! The start of a real push by a raw client (as `tcptune send` would begin one), for the
//! tests of session slots: connect from a chosen address, ask for a session, and read the
//! server's first answer.

use super::RawKeys;
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use tcptune_core::{PathHint, TuneMode};
use tcptune_transfer::proto::{
    self, ClientMsg, DataHello, FrameReader, Phase, ServerMsg, TestParams, Token,
};

/// A TCP connection to `to` from `from` (in the calling thread's network namespace).
pub(crate) fn connect_from(from: IpAddr, to: SocketAddr) -> TcpStream {
    let fd = tcptune_sys::net::tcp_socket(&to).expect("socket");
    tcptune_sys::net::bind(&fd, &SocketAddr::new(from, 0)).expect("bind");
    tcptune_sys::net::connect(fd, &to, Duration::from_secs(5)).expect("connect")
}

/// The server's next message on `s`, or `None` after 10 s or on an error.
pub(crate) fn recv(s: &mut TcpStream, r: &mut FrameReader) -> Option<ServerMsg> {
    s.set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match r.poll_msg(s) {
            Ok(Some(m)) => return Some(m),
            Ok(None) if Instant::now() < deadline => {}
            _ => return None,
        }
    }
}

/// Ask for a push of 1000 x 1 MiB from `from` with the token `[token; 16]` (hello, setup
/// and the main phase's start, pipelined); returns the control connection, its key pair and
/// the server's first answer (`Accepted`, `Queued`, `Rejected`, or `None`).
pub(crate) fn push_ask(
    addr: SocketAddr,
    from: IpAddr,
    token: u8,
) -> (TcpStream, RawKeys, Option<ServerMsg>) {
    let mut s = connect_from(from, addr);
    let mut r = FrameReader::new(proto::MAX_SERVER_FRAME);
    let params = TestParams {
        tune: TuneMode::Kernel,
        streams: 1,
        message_size: 1 << 20,
        messages: 1000,
        duration_ms: None,
        max_time_ms: None,
        reverse: false,
        samples: false,
        congestion: None,
        seed: 7,
        corrupt_message: None,
        files: None,
        share: false,
    };
    let raw = RawKeys::new(token);
    let hello = raw.hello(token, "test");
    proto::write_msg(&mut s, &hello).expect("hello");
    proto::write_msg(&mut s, &ClientMsg::Setup { params }).expect("setup");
    let start = ClientMsg::StartPhase {
        seq: 0,
        phase: Phase::Main,
        hint: PathHint::default(),
        streams: 1,
    };
    proto::write_msg(&mut s, &start).expect("start");
    let answer = recv(&mut s, &mut r);
    (s, raw, answer)
}

/// The start of a real push from `from` that the server accepts (1000 x 1 MiB announced,
/// phase started, its stream connected with a sealed data hello); returns the control and
/// data connections.
pub(crate) fn push_start(addr: SocketAddr, from: IpAddr, token: u8) -> (TcpStream, TcpStream) {
    let (s, raw, a) = push_ask(addr, from, token);
    assert!(
        matches!(a, Some(ServerMsg::Accepted { .. })),
        "{token}: {a:?}"
    );
    let d = push_stream(addr, from, token, &raw, &a.expect("accepted"));
    (s, d)
}

/// The data stream of the accepted push of `token` (the server answered `accepted`).
pub(crate) fn push_stream(
    addr: SocketAddr,
    from: IpAddr,
    token: u8,
    raw: &RawKeys,
    accepted: &ServerMsg,
) -> TcpStream {
    let keys = raw.keys(accepted, token);
    let mut d = connect_from(from, addr);
    let hello = DataHello::sealed(&keys, Token([token; 16]), 0, 0);
    d.write_all(&hello.encode()).expect("data hello");
    d
}
