//! Each session's ephemeral X25519 exchange (x25519-dalek; randomness from `getrandom`):
//! the protocol crate derives the session's keys from its result ([`tcptune_proto::keys`]).

use std::io;
use tcptune_proto::auth::Secret;
use tcptune_proto::keys::{KeyError, KeyExchange, KeyShare, SessionKeys};
use tcptune_proto::wire::Token;
use x25519_dalek::{PublicKey, StaticSecret};

/// A fresh X25519 key pair, for one session.
pub(crate) struct Ephemeral {
    secret: StaticSecret,
    public: KeyShare,
}

impl Ephemeral {
    /// A new key pair from the kernel's random bytes.
    pub(crate) fn new() -> io::Result<Ephemeral> {
        let mut b = [0u8; 32];
        tcptune_sys::os::random_bytes(&mut b)?;
        let secret = StaticSecret::from(b);
        let public = PublicKey::from(&secret).to_bytes();
        Ok(Ephemeral { secret, public })
    }

    /// This end's public key.
    pub(crate) fn public(&self) -> KeyShare {
        self.public
    }

    /// The X25519 result with the peer's public key.
    fn dh(&self, peer: &KeyShare) -> [u8; 32] {
        self.secret
            .diffie_hellman(&PublicKey::from(*peer))
            .to_bytes()
    }

    /// The client's keys for the session of `token`, the server having answered with
    /// `server`.
    pub(crate) fn client_keys(
        &self,
        server: &KeyShare,
        secret: Option<&Secret>,
        token: &Token,
    ) -> Result<SessionKeys, KeyError> {
        SessionKeys::derive(&self.dh(server), secret, token, &self.public, server)
    }
}

/// The server's half: a fresh key pair per session, dropped (zeroized) once answered.
pub(crate) struct ServerExchange;

impl KeyExchange for ServerExchange {
    fn respond(&mut self, client: &KeyShare) -> (KeyShare, [u8; 32]) {
        match Ephemeral::new() {
            Ok(e) => (e.public(), e.dh(client)),
            // No random bytes: an all-zero result, which the session refuses (fail closed).
            Err(_) => ([0; 32], [0; 32]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_and_server_agree_on_the_keys_and_a_low_order_share_is_refused() {
        let client = Ephemeral::new().expect("random");
        let token = Token([3; 16]);
        let secret = Secret::from_bytes(b"0123456789abcdef0123456789abcdef");
        let (server_pub, dh) = ServerExchange.respond(&client.public());
        let at_server =
            SessionKeys::derive(&dh, secret.as_ref(), &token, &client.public(), &server_pub)
                .expect("keys");
        let at_client = client
            .client_keys(&server_pub, secret.as_ref(), &token)
            .expect("keys");
        assert_eq!(at_server, at_client);
        // The identity point: X25519 gives all zeros.
        let (_, dh) = ServerExchange.respond(&[0; 32]);
        assert_eq!(dh, [0; 32]);
        assert_eq!(
            client.client_keys(&[0; 32], None, &token),
            Err(KeyError::NonContributory)
        );
    }
}
