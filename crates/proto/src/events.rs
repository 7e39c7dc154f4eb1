//! What the server's endpoint tells its log and its counters: [`ServerEvent`] (one line
//! each, decided by the endpoint's log limiter) and [`ServerStats`].

use crate::wire::TestParams;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;
use tcptune_core::pathdb::Direction;

/// Something the server did, for its log. Strings that came from a client are as the
/// client sent them: escape them (see [`crate::escape`]) before writing them as text.
#[derive(Clone, Debug, PartialEq)]
pub enum ServerEvent {
    /// A session was admitted.
    SessionStarted {
        /// Client address.
        peer: SocketAddr,
        /// The session's label (the first 8 hex digits of its token).
        session: String,
        /// What it asked for.
        params: Box<TestParams>,
    },
    /// A session ended (`error` is `None` when it completed normally).
    SessionEnded {
        /// Client address.
        peer: SocketAddr,
        /// The session's label.
        session: String,
        /// Payload bytes this server moved in the main phase.
        bytes: u64,
        /// Why it failed, if it did.
        error: Option<String>,
    },
    /// A connection was refused or dropped before it joined a session. The first of each
    /// kind from each address is logged; the rest are counted (see
    /// [`ServerEvent::Suppressed`] and [`ServerStats::refused_by`]).
    Refused {
        /// Client address.
        peer: SocketAddr,
        /// The kind of refusal (`busy`, `auth`, `timeout`, `pending_limit`, ...).
        kind: &'static str,
        /// Why.
        reason: String,
    },
    /// A client that asked for a session waits in the queue for a slot (its group of
    /// addresses, or the server, runs its most sessions). Logged as refusals are (the first
    /// from each address per period; the rest counted in [`ServerStats::refused_by`] as
    /// `queued` and summed up by [`ServerEvent::Suppressed`]).
    Queued {
        /// Client address.
        peer: SocketAddr,
        /// The session's label (the first 8 hex digits of its token).
        session: String,
        /// Its place in the queue (from 1).
        place: u32,
        /// Which limit is reached.
        reason: String,
    },
    /// A client left the queue (logged when its [`ServerEvent::Queued`] was).
    QueueLeft {
        /// Client address.
        peer: SocketAddr,
        /// The session's label.
        session: String,
        /// Admitted, timed out or gone.
        outcome: QueueOutcome,
        /// How long it waited.
        waited: Duration,
    },
    /// Under a memory budget: how the budget is shared now. Logged when streams join or
    /// leave it, and every 5 seconds while any holds a share.
    MemoryBudget {
        /// The budget, `SO_SNDBUF` units, bytes.
        budget_bytes: u64,
        /// PSC's `hiwat_fair_share`: what one stream that wants more may hold.
        fair_share_bytes: u64,
        /// What the streams hold together (never more than the budget).
        held_bytes: u64,
        /// Memory their send queues use (`sk_wmem_queued` / 2, as last sampled).
        in_use_bytes: u64,
        /// Every stream drawing from the budget.
        streams: Vec<BudgetShare>,
    },
    /// A client was given advice (`tcptune advise`).
    Advice {
        /// Client address.
        peer: SocketAddr,
        /// The session's label.
        session: String,
        /// Which way the client's data flows (seen from the client).
        direction: Direction,
        /// Where the numbers came from: `path_db` or `measured`.
        source: &'static str,
        /// The path's RTT, microseconds.
        rtt_us: u64,
        /// The path's rate, bit/s.
        rate_bps: u64,
        /// The rate is the path's (else a lower bound).
        full_pipe: bool,
        /// Streams advised.
        streams: u32,
    },
    /// A session's fair share of the path changed (see [`crate::session::fair`]).
    Share {
        /// Client address.
        peer: SocketAddr,
        /// The session's label.
        session: String,
        /// The cap its senders are paced at, payload bit/s (`None`: no cap).
        rate_bps: Option<u64>,
        /// Bulk sessions sharing the server.
        sessions: u32,
        /// What the path delivers in all, as far as the server knows, bit/s.
        path_bps: Option<u64>,
    },
    /// Careful resume for a client that receives (`serve --careful-resume`): the initial
    /// window its data connections were given through a route to it, or why not.
    Resume {
        /// Client address.
        peer: SocketAddr,
        /// The session's label.
        session: String,
        /// The initial congestion window, segments (`None`: not given).
        initcwnd_segs: Option<u64>,
        /// Why not.
        why_not: Option<String>,
    },
    /// A problem outside any session (the path database), said once per kind.
    Warning {
        /// What happened.
        message: String,
    },
    /// Refusals of one kind that were counted but not logged in the last period.
    Suppressed {
        /// The kind.
        kind: &'static str,
        /// How many.
        count: u64,
        /// The period, seconds.
        seconds: u64,
    },
}

/// How a client left the wait queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueOutcome {
    /// A slot could be had: its session was admitted.
    Admitted,
    /// No slot freed within the queue's timeout: refused (also counted as the refusal
    /// `queue_timeout`).
    TimedOut,
    /// The client gave up: it closed the connection, or was refused for what it sent while
    /// waiting.
    Gone,
}

impl QueueOutcome {
    /// Its name in logs: `admitted`, `timed_out`, `gone`.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueOutcome::Admitted => "admitted",
            QueueOutcome::TimedOut => "timed_out",
            QueueOutcome::Gone => "gone",
        }
    }
}

/// One stream's share of a server's memory budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetShare {
    /// The session's label.
    pub session: String,
    /// Stream number (1-based).
    pub stream: u32,
    /// What it wants (`sb_net_target`), bytes.
    pub wants_bytes: u64,
    /// What it holds, bytes.
    pub held_bytes: u64,
    /// What its send queue uses, bytes.
    pub in_use_bytes: u64,
}

/// What the server did over its life (and, for the counters of a running server, so far).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Connections accepted.
    pub connections: u64,
    /// Sessions that completed.
    pub sessions_ok: u64,
    /// Sessions that ended with an error.
    pub sessions_failed: u64,
    /// Connections refused or dropped before they joined a session, all kinds.
    pub refused: u64,
    /// Of those, pending connections dropped to make room (limits per address or in all).
    pub dropped: u64,
    /// Refusals by kind.
    pub refused_by: BTreeMap<String, u64>,
    /// Sessions running now.
    pub sessions_active: u64,
    /// Connections pending now.
    pub pending: u64,
    /// Clients admitted from the wait queue (every client put in it is counted in
    /// [`ServerStats::refused_by`] as `queued`).
    pub queue_admitted: u64,
    /// Clients that gave up waiting in the queue (timeouts are the refusal
    /// `queue_timeout`).
    pub queue_gave_up: u64,
    /// Measurements of clients' paths not recorded because too many came from the same
    /// group of addresses, or in all, lately.
    pub records_limited: u64,
}
