//! The handshake part of the [`Endpoint`]: `Hello` (protocol, token, key share, proof of
//! the shared secret), the challenge when the proof's freshness cannot be checked, and `Setup` (or
//! `Advise`), which admits the session or refuses it saying why.

use super::queue::Slot;
use super::slots::Progress;
use super::{
    ceil_secs, Conn, ConnState, Endpoint, EndpointEvent, MonitorEvent, Request, SessionEntry,
    Stage, MAX_DISCARDED,
};
use crate::auth::CLOCK_SKEW;
use crate::events::ServerEvent;
use crate::keys::{KeyShare, SessionKeys};
use crate::session::guard::{addr_group, Freshness};
use crate::session::server::{ServerSession, SessionPolicy, MAX_PROBE};
use crate::session::ConnId;
use crate::wire::{
    self, AdviseRequest, ClientAuth, ClientMsg, FrameReader, ServerLimits, ServerMsg, Token,
    MAX_CLIENT_FRAME, MAX_SERVER_FRAME, PROTOCOL_VERSION,
};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Descriptors a session holds whatever its streams: its control connection, and the
/// sealed memfd a sending engine sends its pattern from (`sendfile`).
const SESSION_FDS: u64 = 2;

impl Endpoint {
    pub(super) fn handshake_frames(&mut self, now: Instant, unix_s: u64, conn: ConnId) {
        loop {
            let Some(Conn {
                state: ConnState::Handshake(h),
                ..
            }) = self.conns.get_mut(&conn)
            else {
                return;
            };
            if matches!(h.stage, Stage::Queued(_)) {
                // What follows the request is the session's, once it is admitted.
                if self.queued_overflow(conn) {
                    let why = "too much sent while waiting in the queue".to_string();
                    self.reject(now, conn, "protocol", why, None);
                }
                return;
            }
            let body = match h.reader.take_frame() {
                Ok(Some(b)) => b,
                Ok(None) => return,
                Err(e) => return self.reject(now, conn, "garbage", e.to_string(), None),
            };
            let msg = match wire::decode::<ClientMsg>(&body) {
                Ok(m) => m,
                Err(e) => return self.reject(now, conn, "garbage", e.to_string(), None),
            };
            // A first complete message: the handshake's own deadline applies from now on.
            self.set_deadline(conn, now + self.cfg.handshake_timeout);
            self.handshake_msg(now, unix_s, conn, msg);
        }
    }

    pub(super) fn set_deadline(&mut self, conn: ConnId, d: Instant) {
        if let Some(c) = self.conns.get_mut(&conn) {
            if let Some(old) = c.deadline {
                if old >= d {
                    return;
                }
                self.deadlines.remove(&(old, conn));
            }
            c.deadline = Some(d);
            self.deadlines.insert((d, conn));
        }
    }

    fn handshake_msg(&mut self, now: Instant, unix_s: u64, conn: ConnId, msg: ClientMsg) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let peer = c.peer;
        let ConnState::Handshake(h) = &mut c.state else {
            return;
        };
        match (&mut h.stage, msg) {
            (
                Stage::Hello,
                ClientMsg::Hello {
                    protocol,
                    token,
                    auth,
                    key_share,
                    ..
                },
            ) => {
                if protocol != PROTOCOL_VERSION {
                    let why = format!(
                        "protocol version {protocol} is not supported (this server speaks {PROTOCOL_VERSION}; update tcptune at one end)"
                    );
                    return self.reject(now, conn, "protocol", why, None);
                }
                let Some(token) = token else {
                    return self.reject(
                        now,
                        conn,
                        "protocol",
                        "hello without a session token".into(),
                        None,
                    );
                };
                h.token = Some(token);
                let Some(key_share) = key_share.and_then(|k| wire::from_hex::<32>(&k)) else {
                    return self.reject(
                        now,
                        conn,
                        "protocol",
                        "hello without a key share (32 bytes of hex)".into(),
                        None,
                    );
                };
                h.key_share = Some(key_share);
                if self.tokens.contains_key(&token) || self.agreed.contains_key(&token) {
                    return self.reject(now, conn, "protocol", "session token in use".into(), None);
                }
                if let Some(wait) = self
                    .addrs
                    .get(&addr_group(peer.ip()))
                    .and_then(|a| a.backoff.blocked_for(now))
                {
                    let why = format!(
                        "too many failed authentications from {}: retry in {} s",
                        peer.ip(),
                        ceil_secs(wait)
                    );
                    return self.reject(now, conn, "auth_backoff", why, Some(wait));
                }
                self.check_proof(now, unix_s, conn, peer, (token, key_share), auth);
            }
            (Stage::Hello, other) => {
                let why = format!("expected hello, got {}", other.kind());
                self.reject(now, conn, "protocol", why, None);
            }
            (Stage::Auth { nonce, .. }, ClientMsg::Auth { mac }) => {
                let nonce = *nonce;
                let token = h.token.unwrap_or(Token([0; 16]));
                let ok = self.cfg.secret.as_ref().is_some_and(|s| {
                    wire::from_hex::<32>(&mac)
                        .is_some_and(|m| s.verify_answer(&nonce, &token.0, &m))
                });
                if ok {
                    h.stage = Stage::Setup;
                    // The challenge was answered: the proof is fresh.
                    self.addrs
                        .entry(addr_group(peer.ip()))
                        .or_default()
                        .backoff
                        .succeed();
                } else {
                    self.auth_failed(now, conn, peer);
                }
            }
            (Stage::Auth { discarded, .. }, _) => {
                // Sent before the client saw the challenge: dropped, the client sends it
                // again after `Auth`.
                *discarded += 1;
                if *discarded > MAX_DISCARDED {
                    self.reject(
                        now,
                        conn,
                        "protocol",
                        "no answer to the challenge".into(),
                        None,
                    );
                }
            }
            (Stage::Setup, ClientMsg::Setup { params }) => self.admit(now, conn, params),
            (Stage::Setup, ClientMsg::Advise { request }) => self.admit_advise(now, conn, request),
            (Stage::Setup, other) => {
                let why = format!("expected setup or advise, got {}", other.kind());
                self.reject(now, conn, "protocol", why, None);
            }
            // Not read while it waits (see `handshake_frames`).
            (Stage::Queued(_), _) => {}
        }
    }

    fn check_proof(
        &mut self,
        now: Instant,
        unix_s: u64,
        conn: ConnId,
        peer: SocketAddr,
        (token, key_share): (Token, KeyShare),
        auth: Option<ClientAuth>,
    ) {
        let Some(secret) = self.cfg.secret.clone() else {
            self.set_stage(conn, Stage::Setup);
            return;
        };
        let Some(auth) = auth else {
            let why =
                "this server requires a shared secret: pass the server's secret with --secret-file"
                    .to_string();
            return self.reject(now, conn, "auth", why, None);
        };
        let nonce = wire::from_hex::<32>(&auth.nonce);
        let mac = wire::from_hex::<32>(&auth.mac);
        let (Some(nonce), Some(mac)) = (nonce, mac) else {
            return self.auth_failed(now, conn, peer);
        };
        if !secret.verify_proof(&nonce, auth.time_unix_s, &token.0, &key_share, &mac) {
            return self.auth_failed(now, conn, peer);
        }
        let skew = unix_s.abs_diff(auth.time_unix_s);
        let reason = if skew > CLOCK_SKEW.as_secs() {
            Some(format!(
                "the client's clock is {skew} s away from the server's"
            ))
        } else {
            let expires = unix_s.max(auth.time_unix_s) + CLOCK_SKEW.as_secs();
            match self.replay.check(unix_s, nonce, expires) {
                Freshness::Fresh => None,
                Freshness::Replayed => Some("a proof seen before".to_string()),
                Freshness::Full => Some("too many recent proofs to check".to_string()),
            }
        };
        match reason {
            None => {
                // Only a fresh proof resets the backoff: a replayed one (or one whose
                // freshness cannot be told) waits for the challenge's answer.
                self.addrs
                    .entry(addr_group(peer.ip()))
                    .or_default()
                    .backoff
                    .succeed();
                self.set_stage(conn, Stage::Setup)
            }
            Some(reason) => {
                // The keys now: the client's data connections need not wait for `Accepted`.
                let Some((key_share, _)) = self.agree(now, conn, token) else {
                    return;
                };
                let nonce = (self.nonces)();
                let msg = ServerMsg::Challenge {
                    nonce: wire::to_hex(&nonce),
                    reason,
                    key_share: Some(wire::to_hex(&key_share)),
                };
                if let Ok(frame) = wire::encode_limited(&msg, MAX_SERVER_FRAME) {
                    self.events.push_back(EndpointEvent::Send { conn, frame });
                }
                self.set_stage(
                    conn,
                    Stage::Auth {
                        nonce,
                        discarded: 0,
                    },
                );
            }
        }
    }

    fn set_stage(&mut self, conn: ConnId, stage: Stage) {
        if let Some(Conn {
            state: ConnState::Handshake(h),
            ..
        }) = self.conns.get_mut(&conn)
        {
            h.stage = stage;
        }
    }

    fn auth_failed(&mut self, now: Instant, conn: ConnId, peer: SocketAddr) {
        let b = &mut self.addrs.entry(addr_group(peer.ip())).or_default().backoff;
        b.fail(now);
        let wait = b.blocked_for(now).map_or(0, ceil_secs);
        let why = format!(
            "authentication failed: the shared secret does not match the server's (this address may try again in {wait} s)"
        );
        self.reject(now, conn, "auth", why, None);
    }

    /// Admit the session of a complete handshake, or refuse it saying why.
    pub(super) fn admit(&mut self, now: Instant, conn: ConnId, params: crate::wire::TestParams) {
        if let Err(e) = crate::session::server::validate(&params, &self.cfg.limits) {
            return self.reject(now, conn, "bad_request", e, None);
        }
        if let Some(job) = &params.files {
            let checked = match &self.cfg.files {
                None => Err(crate::files::FileFailure::new(
                    crate::files::FailKind::Refused,
                    "the server shares no files (it was started without --root DIR)",
                )),
                Some(share) => job.check(params.reverse, share.read_only),
            };
            if let Err(failure) = checked {
                // The kind first (a client turns it into its exit status), then the refusal.
                let why = failure.message.clone();
                let msg = ServerMsg::FileFailed { failure };
                if let Ok(frame) = wire::encode_limited(&msg, MAX_SERVER_FRAME) {
                    self.events.push_back(EndpointEvent::Send { conn, frame });
                }
                return self.reject(now, conn, "files", why, None);
            }
        }
        if let Some(cc) = &params.congestion {
            if !self.host.available_cc.iter().any(|a| a == cc) {
                let why = format!(
                    "congestion control '{cc}' is not available on this server (available: {})",
                    self.host.available_cc.join(", ")
                );
                return self.reject(now, conn, "bad_request", why, None);
            }
        }
        let Some((peer, token, allowance, reserved)) = self.admission(
            now,
            conn,
            params.streams,
            self.cfg.limits.max_streams,
            params.files.is_some(),
            || Request::Setup(params.clone()),
        ) else {
            return;
        };
        let Some((key_share, keys)) = self.agree(now, conn, token) else {
            return;
        };
        let mut limits = self.cfg.limits.clone();
        limits.max_streams = allowance;
        let congestion = params
            .congestion
            .clone()
            .unwrap_or_else(|| self.host.congestion.clone());
        let accepted = ServerMsg::Accepted {
            limits: limits.clone(),
            host_limits: self.host.limits.clone(),
            congestion,
            can_force: self.host.limits.can_force,
            auth_required: self.cfg.secret.is_some(),
            key_share: wire::to_hex(&key_share),
            encrypt: params.files.as_ref().is_some_and(|f| f.encrypt),
            retires: true,
        };
        if let Ok(frame) = wire::encode_limited(&accepted, MAX_SERVER_FRAME) {
            self.events.push_back(EndpointEvent::Send { conn, frame });
        }
        let label = wire::to_hex(&token.0)[..8].to_string();
        self.events
            .push_back(EndpointEvent::Log(ServerEvent::SessionStarted {
                peer,
                session: label,
                params: Box::new(params.clone()),
            }));
        let session =
            ServerSession::new(now, params.clone(), self.transfer_policy(limits, &params));
        self.install(now, conn, (peer, token, keys), reserved, session);
    }

    /// Admit an advice session (the same bounds as a transfer's; descriptors for the
    /// measurement's streams, should it measure), or refuse it saying why.
    pub(super) fn admit_advise(&mut self, now: Instant, conn: ConnId, request: AdviseRequest) {
        let wanted = self
            .cfg
            .limits
            .max_streams
            .min(tcptune_core::fullpipe::MAX_PROBE_STREAMS);
        let Some((peer, token, allowance, reserved)) =
            self.admission(now, conn, 1, wanted, false, || {
                Request::Advise(request.clone())
            })
        else {
            return;
        };
        let Some((key_share, keys)) = self.agree(now, conn, token) else {
            return;
        };
        let mut limits = self.cfg.limits.clone();
        limits.max_streams = allowance;
        let seed = u64::from_le_bytes((self.nonces)()[..8].try_into().unwrap_or([7; 8]));
        let session = ServerSession::advise(
            now,
            request,
            self.policy(limits),
            self.host.limits.clone(),
            seed,
            key_share,
        );
        self.install(now, conn, (peer, token, keys), reserved, session);
    }

    /// A transfer's bounds: its lifetime is its workload's time at the minimum rate (its
    /// bytes, else its duration, at most its cap), after the grace period, a probe and the
    /// time to connect and to finish.
    fn transfer_policy(
        &self,
        limits: ServerLimits,
        params: &crate::wire::TestParams,
    ) -> SessionPolicy {
        let rules = &self.cfg.slots;
        let at_min_rate = |bytes: u64| {
            Duration::from_secs_f64((bytes as f64 / rules.min_rate.max(1) as f64).min(1e8))
        };
        let mut work = match (params.duration_ms, &params.files) {
            (Some(ms), _) => Duration::from_millis(ms),
            // A copy's size is not known here: the server's byte budget.
            (None, Some(_)) => at_min_rate(self.cfg.limits.max_total_bytes),
            (None, None) => at_min_rate(params.messages.saturating_mul(params.message_size)),
        };
        if let Some(cap) = params.max_time_ms {
            work = work.min(Duration::from_millis(cap));
        }
        let lifetime = self.cfg.handshake_timeout
            + MAX_PROBE
            + rules.grace
            + work.min(Duration::from_secs(100 * 365 * 86_400))
            + self.cfg.idle_timeout * 2;
        SessionPolicy {
            limits,
            handshake_timeout: self.cfg.handshake_timeout,
            idle_timeout: self.cfg.idle_timeout,
            lifetime,
        }
    }

    /// An advice session's bounds (its own: a lookup and at most a short measurement).
    fn policy(&self, limits: ServerLimits) -> SessionPolicy {
        let lifetime = self.cfg.handshake_timeout
            + MAX_PROBE
            + Duration::from_millis(self.cfg.limits.max_duration_ms)
            + self.cfg.idle_timeout * 2;
        SessionPolicy {
            limits,
            handshake_timeout: self.cfg.handshake_timeout,
            idle_timeout: self.cfg.idle_timeout,
            lifetime,
        }
    }

    /// The bounds every session is admitted under (sessions per address and in all,
    /// descriptors for at least `streams` of the `wanted` streams, two per stream and the
    /// receiver's open files for a copy of `files`). `None`: refused (the client was told
    /// why); else the client's address, its token, the session's stream allowance and the
    /// descriptors it reserves.
    fn admission(
        &mut self,
        now: Instant,
        conn: ConnId,
        streams: u32,
        wanted: u32,
        files: bool,
        request: impl FnOnce() -> Request,
    ) -> Option<(SocketAddr, Token, u32, u64)> {
        let c = self.conns.get(&conn)?;
        let peer = c.peer;
        let ConnState::Handshake(h) = &c.state else {
            return None;
        };
        let token = h.token?;
        if self.tokens.contains_key(&token) {
            self.reject(now, conn, "protocol", "session token in use".into(), None);
            return None;
        }
        match self.slot_for(now, addr_group(peer.ip())) {
            Slot::Free => {}
            Slot::Shed(victim) => self.shed(now, victim),
            Slot::Wait { group_limit } => {
                self.enqueue(now, conn, peer, request(), group_limit);
                return None;
            }
        }
        // This connection stops being pending; the session reserves its own descriptors.
        let free = self
            .cfg
            .fd_budget
            .saturating_sub(self.pending.saturating_sub(1) + self.reserved + SESSION_FDS);
        // A copy also holds a file per stream and the receiver's open files.
        let files_extra = if files {
            crate::files::MAX_OPEN as u64 + 8
        } else {
            0
        };
        let per_stream = if files { 2 } else { 1 };
        let allowance = u64::from(wanted).min(free.saturating_sub(files_extra) / per_stream) as u32;
        if allowance < streams {
            let why = format!(
                "server out of file descriptors for {streams} more streams (RLIMIT_NOFILE): retry later"
            );
            self.reject(now, conn, "fds", why, Some(Duration::from_secs(10)));
            return None;
        }
        let reserved = SESSION_FDS + u64::from(allowance) * per_stream + files_extra;
        Some((peer, token, allowance, reserved))
    }

    /// The server's half of the key exchange for the session of the handshake on `conn`:
    /// its public key and the session's keys, or `None` (refused, the client was told why)
    /// when the client's key share does not contribute (a low-order point).
    fn agree(
        &mut self,
        now: Instant,
        conn: ConnId,
        token: Token,
    ) -> Option<(KeyShare, SessionKeys)> {
        let h = match self.conns.get_mut(&conn).map(|c| &mut c.state) {
            Some(ConnState::Handshake(h)) => h,
            _ => return None,
        };
        if let Some(agreed) = &h.agreed {
            return Some(agreed.clone());
        }
        let client = h.key_share?;
        let (server, dh) = self.kx.respond(&client);
        match SessionKeys::derive(&dh, self.cfg.secret.as_ref(), &token, &client, &server) {
            Ok(keys) => {
                h.agreed = Some((server, keys.clone()));
                self.agreed.insert(token, conn);
                self.purge_parked(now, token, &keys);
                Some((server, keys))
            }
            Err(e) => {
                self.reject(now, conn, "key", e.to_string(), None);
                None
            }
        }
    }

    /// Make the handshake on `conn` the control connection of `session` (of the client at
    /// `peer`, with its token and keys), which reserves `reserved` descriptors.
    fn install(
        &mut self,
        now: Instant,
        conn: ConnId,
        (peer, token, keys): (SocketAddr, Token, SessionKeys),
        reserved: u64,
        session: ServerSession,
    ) {
        let budget = session.workload_bytes();
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let accepted = c.accepted;
        let ConnState::Handshake(h) =
            std::mem::replace(&mut c.state, ConnState::Unknown(Vec::new()))
        else {
            return;
        };
        let sid = self.next_session;
        self.next_session += 1;
        c.state = ConnState::Control(sid);
        if let Some(d) = c.deadline.take() {
            self.deadlines.remove(&(d, conn));
        }
        self.pending = self.pending.saturating_sub(1);
        let a = self.addrs.entry(addr_group(peer.ip())).or_default();
        a.pending.retain(|x| *x != conn);
        a.sessions += 1;
        self.reserved += reserved;
        let label = wire::to_hex(&token.0)[..8].to_string();
        self.events
            .push_back(EndpointEvent::Monitor(MonitorEvent::Admitted {
                mode: session.mode(),
            }));
        self.agreed.remove(&token);
        self.tokens.insert(token, sid);
        self.sessions.insert(
            sid,
            SessionEntry {
                session,
                reader: FrameReader::new(MAX_CLIENT_FRAME),
                ctrl: conn,
                peer,
                token,
                label,
                reserved,
                accepted: Some(accepted),
                keys,
                progress: Progress::new(now, budget, &self.cfg.slots),
                share: (false, false),
            },
        );
        // What the client pipelined after its request is the session's.
        let rest = h.reader;
        if let Some(e) = self.sessions.get_mut(&sid) {
            e.reader = rest;
        }
        self.pump(now, sid);
        self.on_bytes(now, 0, conn, &[]);
    }
}
