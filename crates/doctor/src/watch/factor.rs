//! What limits a connection's rate, in one word: the classification `watch --metrics`
//! counts connections by. Pure: a [`Row`] in, a [`LimitingFactor`] out.
//!
//! Linux accounts a sending socket's time in `tcp_info`: `busy_time` while it had data to
//! send, of which `rwnd_limited` waiting for the peer's receive window and `sndbuf_limited`
//! waiting for its own send buffer; the rest of the busy time the congestion window (the
//! network) limited it. A socket that was busy only part of the time was waiting for its
//! application.

use super::{LimitKind, Row, ShareBasis};
use serde::Serialize;

/// A connection busy (with data to send) less than this share of the time is limited by
/// its application, not the network.
pub const BUSY_SHARE_FOR_NETWORK: f64 = 0.5;

/// What limits a connection's rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitingFactor {
    /// The peer's advertised receive window (watch's receive-window limit).
    ReceiveWindow,
    /// This host's send buffer (watch's send-buffer limit).
    SendBuffer,
    /// The congestion window: the network (or the congestion control) sets the pace, as it
    /// should for a bulk transfer.
    CongestionWindow,
    /// The application: the socket had nothing to send most of the time.
    Application,
    /// The connection receives and sends (almost) nothing: what limits it is decided at
    /// the sender (`watch` there tells).
    Receiving,
}

impl LimitingFactor {
    /// Every factor, in a fixed order (for metrics that list them all).
    pub const ALL: [LimitingFactor; 5] = [
        LimitingFactor::ReceiveWindow,
        LimitingFactor::SendBuffer,
        LimitingFactor::CongestionWindow,
        LimitingFactor::Application,
        LimitingFactor::Receiving,
    ];

    /// The name used in JSON and as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitingFactor::ReceiveWindow => "receive_window",
            LimitingFactor::SendBuffer => "send_buffer",
            LimitingFactor::CongestionWindow => "congestion_window",
            LimitingFactor::Application => "application",
            LimitingFactor::Receiving => "receiving",
        }
    }
}

/// The factor that limits `row`:
///
/// 1. a receive-window or send-buffer limit that watch found (limited more than
///    [`super::LIMITED_SHARE`] of the busy time);
/// 2. else, receiving: more bytes came in than went out over the last refresh and it was
///    rarely busy sending;
/// 3. else the congestion window when it was busy at least [`BUSY_SHARE_FOR_NETWORK`] of
///    the last refresh, the application when less;
/// 4. on first sight (no previous refresh to compare with), the kernel's last
///    delivery-rate sample decides: application-limited or not.
pub fn limiting_factor(row: &Row) -> LimitingFactor {
    match row.limit.as_ref().map(|l| l.kind) {
        Some(LimitKind::ReceiveWindow) => return LimitingFactor::ReceiveWindow,
        Some(LimitKind::SendBuffer) => return LimitingFactor::SendBuffer,
        None => {}
    }
    let busy = match (row.share_basis, row.busy_share) {
        (ShareBasis::Interval, Some(b)) => b,
        _ => {
            return if row.app_limited {
                LimitingFactor::Application
            } else {
                LimitingFactor::CongestionWindow
            }
        }
    };
    let received = row.recv_rate_bps.unwrap_or(0);
    let sent = row.send_rate_bps.unwrap_or(0);
    if busy < BUSY_SHARE_FOR_NETWORK && received > 0 && received >= sent {
        LimitingFactor::Receiving
    } else if busy >= BUSY_SHARE_FOR_NETWORK {
        LimitingFactor::CongestionWindow
    } else {
        LimitingFactor::Application
    }
}
