//! The endpoint's slots (see [`super::slots`] for the rules): whether a client that asks for
//! a session gets a free slot, the slot of a session below the minimum rate (shed), or a
//! place in the wait queue; serving the queue in order when slots free; telling waiting
//! clients their place; sampling every session's payload.
//!
//! Data connections a queued client pipelined before its answer wait with it (held, bounded
//! by its stream allowance, until the queue's deadline) and join once it is admitted.

use super::slots::{pick_victim, Candidate, QueueFull, Waiting};
use super::{
    ceil_secs, Conn, ConnState, Endpoint, EndpointEvent, MonitorEvent, Request, SessionId, Stage,
};
use crate::events::{QueueOutcome, ServerEvent};
use crate::session::guard::addr_group;
use crate::session::server::Observation;
use crate::session::ConnId;
use crate::wire::{self, ServerMsg, Token, MAX_SERVER_FRAME};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Bytes a queued client may send after its request (its pipelined phase start).
const MAX_QUEUED_BYTES: usize = 64 * 1024;

/// A session's label in the log: the first 8 hex digits of its token.
fn label(token: Option<Token>) -> String {
    token.map_or_else(|| "-".to_string(), |t| wire::to_hex(&t.0)[..8].to_string())
}

/// What a client that asks for a session can have now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    /// A free slot.
    Free,
    /// The slot of this session, below the minimum rate.
    Shed(SessionId),
    /// None: it waits. Whether its group's limit (else the total) is what is reached.
    Wait { group_limit: bool },
}

impl Endpoint {
    /// Whether `group`'s client can have a slot now. A client that proved the shared
    /// secret is not limited per address (only by the total).
    pub(super) fn slot_for(&self, now: Instant, group: IpAddr) -> Slot {
        let authenticated = self.cfg.secret.is_some();
        let group_sessions = self.addrs.get(&group).map_or(0, |a| a.sessions);
        let group_limit = !authenticated && group_sessions >= self.cfg.max_sessions_per_addr;
        let full = self.sessions.len() as u32 >= self.cfg.max_sessions;
        if !group_limit && !full {
            return Slot::Free;
        }
        let rules = &self.cfg.slots;
        let candidates = self
            .sessions
            .iter()
            .filter(|(_, e)| e.session.mode() != "advise" && !e.session.is_closed())
            .filter(|(_, e)| !group_limit || addr_group(e.peer.ip()) == group)
            .filter(|(_, e)| e.progress.below_min_rate(now, rules))
            .map(|(sid, e)| Candidate {
                session: *sid,
                group_sessions: self
                    .addrs
                    .get(&addr_group(e.peer.ip()))
                    .map_or(0, |a| a.sessions),
                moved: e.progress.moved_in_window(),
            });
        match pick_victim(candidates) {
            Some(v) => Slot::Shed(v),
            None => Slot::Wait { group_limit },
        }
    }

    /// End `victim` (below the minimum rate) to give its slot to a client that needs it.
    pub(super) fn shed(&mut self, now: Instant, victim: SessionId) {
        let rules = self.cfg.slots.clone();
        let Some(e) = self.sessions.get_mut(&victim) else {
            return;
        };
        let rate = e.progress.moved_in_window() as f64 / rules.window.as_secs_f64();
        let reason = format!(
            "shed: the session moved {rate:.0} B/s of data over the last {:.0} s, below this server's minimum of {} B/s, and another client needed its slot",
            rules.window.as_secs_f64(),
            rules.min_rate
        );
        e.session.shed(reason);
        // Counted by kind (the session's end is logged with the reason).
        *self.stats.refused_by.entry("shed".to_string()).or_insert(0) += 1;
        self.events
            .push_back(EndpointEvent::Monitor(MonitorEvent::Refused {
                kind: "shed",
            }));
        self.shedding = true;
        self.pump(now, victim);
        self.shedding = false;
    }

    /// Put the handshake on `conn` (its request is `request`) in the wait queue, or refuse
    /// it when the queue is full. `group_limit`: its group's limit is what is reached.
    pub(super) fn enqueue(
        &mut self,
        now: Instant,
        conn: ConnId,
        peer: SocketAddr,
        request: Request,
        group_limit: bool,
    ) {
        let group = addr_group(peer.ip());
        let rules = self.cfg.slots.clone();
        let full = if group_limit {
            let n = self.addrs.get(&group).map_or(0, |a| a.sessions);
            format!(
                "{} already runs {n} sessions here (the limit per address)",
                peer.ip()
            )
        } else {
            format!(
                "server busy: all {} session slots are in use",
                self.cfg.max_sessions
            )
        };
        let kind = if group_limit { "addr_sessions" } else { "busy" };
        let place = match self.queue.push(now, conn, group, &rules) {
            Ok(p) => p,
            Err(q) => {
                let retry = self.retry_after(now, group_limit.then_some(group));
                let why = match q {
                    QueueFull::All(n) => format!("{full}, and {n} clients wait already"),
                    QueueFull::Group(n) => {
                        format!("{full}, and {n} clients from this address wait already")
                    }
                };
                let why = match retry {
                    Some(d) => format!("{why}; a slot is expected to free in {} s", ceil_secs(d)),
                    None => why,
                };
                return self.reject(now, conn, kind, why, retry);
            }
        };
        let token = match self.conns.get_mut(&conn) {
            Some(Conn {
                state: ConnState::Handshake(h),
                ..
            }) => {
                h.stage = Stage::Queued(Box::new(request));
                h.token
            }
            _ => None,
        };
        let until = now + rules.queue_timeout;
        self.hold(conn);
        self.set_deadline(conn, until);
        if let Some(list) = token.and_then(|t| self.parked.get(&t)).cloned() {
            for c in list {
                self.hold(c);
                self.set_deadline(c, until);
            }
        }
        self.tell_places(now);
        // Counted as the refusals are; logged (rate-limited as they are) as queued.
        let logged = self.count_refusal(now, peer, "queued");
        self.queue.set_logged(conn, logged);
        if logged {
            self.events
                .push_back(EndpointEvent::Log(ServerEvent::Queued {
                    peer,
                    session: label(token),
                    place,
                    reason: full,
                }));
        }
    }

    /// `w` (the client of `token` at `peer`) left the queue: counted, and logged when its
    /// arrival was.
    pub(super) fn left_queue(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        token: Option<Token>,
        w: Waiting,
        outcome: QueueOutcome,
    ) {
        match outcome {
            QueueOutcome::Admitted => self.stats.queue_admitted += 1,
            QueueOutcome::Gone => self.stats.queue_gave_up += 1,
            // Counted as the refusal `queue_timeout`.
            QueueOutcome::TimedOut => {}
        }
        if w.logged {
            self.events
                .push_back(EndpointEvent::Log(ServerEvent::QueueLeft {
                    peer,
                    session: label(token),
                    outcome,
                    waited: now.saturating_duration_since(w.since),
                }));
        }
    }

    /// When the queued session of `token` stops waiting, if one waits.
    pub(super) fn queued_until(&self, token: &Token) -> Option<Instant> {
        self.queue.iter().find_map(|w| {
            let c = self.conns.get(&w.conn)?;
            match &c.state {
                ConnState::Handshake(h) if h.token.as_ref() == Some(token) => c.deadline,
                _ => None,
            }
        })
    }

    /// `conn` waits in the queue: it counts against the queue's bounds, not the pending
    /// connections' (a flood of new connections does not evict it).
    pub(super) fn hold(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.held || !c.pending() {
            return;
        }
        c.held = true;
        let group = addr_group(c.peer.ip());
        self.pending = self.pending.saturating_sub(1);
        self.held += 1;
        if let Some(a) = self.addrs.get_mut(&group) {
            a.pending.retain(|x| *x != conn);
        }
    }

    /// `conn` stops waiting in the queue: pending again, until its session takes it.
    fn release(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if !c.held {
            return;
        }
        c.held = false;
        let group = addr_group(c.peer.ip());
        self.held = self.held.saturating_sub(1);
        self.pending += 1;
        self.addrs.entry(group).or_default().pending.push_back(conn);
        self.order.push_back(conn);
    }

    /// Admit waiting clients while slots can be had: of those that can have one, the one
    /// whose group runs the fewest sessions (the fair share), then the first in line; a free
    /// slot before a shed one.
    pub(super) fn serve_queue(&mut self, now: Instant) {
        if self.serving || self.queue.is_empty() {
            return;
        }
        self.serving = true;
        for _ in 0..=self.queue.len() {
            let mut best: Option<(bool, u32, usize, ConnId, Slot)> = None;
            for (i, w) in self.queue.iter().enumerate() {
                let slot = self.slot_for(now, w.group);
                if matches!(slot, Slot::Wait { .. }) {
                    continue;
                }
                let shed = matches!(slot, Slot::Shed(_));
                let n = self.addrs.get(&w.group).map_or(0, |a| a.sessions);
                let key = (shed, n, i, w.conn, slot);
                if best.is_none_or(|b| (key.0, key.1, key.2) < (b.0, b.1, b.2)) {
                    best = Some(key);
                }
            }
            let Some((_, _, _, conn, slot)) = best else {
                break;
            };
            if let Some(w) = self.queue.remove(conn) {
                if let Some(c) = self.conns.get(&conn) {
                    let token = match &c.state {
                        ConnState::Handshake(h) => h.token,
                        _ => None,
                    };
                    let peer = c.peer;
                    self.left_queue(now, peer, token, w, QueueOutcome::Admitted);
                }
            }
            if let Slot::Shed(v) = slot {
                self.shed(now, v);
            }
            self.admit_queued(now, conn);
        }
        self.serving = false;
        self.tell_places(now);
    }

    /// Take `conn` out of the queue and admit its request (it can have a slot now).
    fn admit_queued(&mut self, now: Instant, conn: ConnId) {
        let request = match self.conns.get_mut(&conn) {
            Some(Conn {
                state: ConnState::Handshake(h),
                ..
            }) => match std::mem::replace(&mut h.stage, Stage::Setup) {
                Stage::Queued(r) => Some((*r, h.token)),
                other => {
                    h.stage = other;
                    None
                }
            },
            _ => None,
        };
        let Some((request, token)) = request else {
            return;
        };
        self.release(conn);
        if let Some(list) = token.and_then(|t| self.parked.get(&t)).cloned() {
            for c in list {
                self.release(c);
            }
        }
        match request {
            Request::Setup(params) => self.admit(now, conn, params),
            Request::Advise(request) => self.admit_advise(now, conn, request),
        }
    }

    /// Tell waiting clients whose place changed their new place (at most once a second
    /// each).
    pub(super) fn tell_places(&mut self, now: Instant) {
        for (conn, place) in self.queue.due_places(now) {
            let msg = ServerMsg::Queued {
                place,
                expected_wait_s: self.expected_free(now, None, place as usize).map(ceil_secs),
            };
            if let Ok(frame) = wire::encode_limited(&msg, MAX_SERVER_FRAME) {
                self.events.push_back(EndpointEvent::Send { conn, frame });
            }
        }
    }

    /// Whether a queued handshake has sent more than its pipelined start: refused.
    pub(super) fn queued_overflow(&self, conn: ConnId) -> bool {
        matches!(
            self.conns.get(&conn).map(|c| &c.state),
            Some(ConnState::Handshake(h))
                if matches!(h.stage, Stage::Queued(_)) && h.reader.buffered() > MAX_QUEUED_BYTES
        )
    }

    /// When the `place`-th slot (of the group `ip`, or any) is expected to free: the
    /// running sessions' expected ends (remaining bytes at their rate; when that is not
    /// known, when they are gone at the latest if that is soon: an idle session's timeout),
    /// in order. `None` when nothing can be said (copies of unknown size, say).
    pub(super) fn expected_free(
        &self,
        now: Instant,
        ip: Option<IpAddr>,
        place: usize,
    ) -> Option<Duration> {
        let soon = self.cfg.handshake_timeout + self.cfg.idle_timeout * 2;
        let mut ends: Vec<Duration> = self
            .sessions
            .values()
            .filter(|e| ip.is_none_or(|ip| addr_group(e.peer.ip()) == ip))
            .filter_map(|e| {
                let latest = e.session.gone_by().saturating_duration_since(now);
                match e.progress.expected_end(now) {
                    Some(d) => Some(d.min(latest)),
                    None => (latest <= soon).then_some(latest),
                }
            })
            .collect();
        ends.sort_unstable();
        let i = place.max(1).min(ends.len()).checked_sub(1)?;
        ends.get(i).copied()
    }

    /// Sample the payload of every session whose sample is due.
    pub(super) fn sample_progress(
        &mut self,
        now: Instant,
        observe: &dyn Fn(SessionId) -> Option<Observation>,
    ) {
        let rules = self.cfg.slots.clone();
        for (sid, e) in self.sessions.iter_mut() {
            if e.progress.next_sample() <= now {
                let delivered = observe(*sid).map(|o| o.delivered);
                e.progress.observe(now, delivered, &rules);
            }
        }
    }
}
