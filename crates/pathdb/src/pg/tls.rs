//! TLS for the PostgreSQL connection, with rustls (ring as its cryptography): what each of
//! libpq's `sslmode`s checks of the server's certificate.
//!
//! * `prefer`, `require`: encrypted, the certificate not checked (libpq's meaning: protection
//!   against passive listeners only);
//! * `verify-ca`: the chain must end at the authority in `sslrootcert` (any name);
//! * `verify-full`: that, and the certificate must name the host of the URL.

use super::url::{PgUrl, SslMode};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use std::path::PathBuf;
use std::sync::Arc;

/// Most certificates read from an `sslrootcert` file.
pub const MAX_ROOT_CERTS: usize = 256;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Checks signatures only (`prefer`, `require`), or the chain without the name
/// (`verify-ca`).
#[derive(Debug)]
struct Lenient {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The authority file: the URL's `sslrootcert`, else libpq's `~/.postgresql/root.crt`.
fn root_file(url: &PgUrl) -> Result<PathBuf, String> {
    if let Some(p) = &url.sslrootcert {
        return Ok(p.clone());
    }
    std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".postgresql/root.crt"))
        .ok_or_else(|| format!("sslmode={} needs sslrootcert=FILE", url.sslmode.as_str()))
}

fn roots(url: &PgUrl) -> Result<RootCertStore, String> {
    let file = root_file(url)?;
    let mut store = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(&file)
        .map_err(|e| format!("reading sslrootcert {}: {e}", file.display()))?;
    for (i, c) in certs.enumerate() {
        if i >= MAX_ROOT_CERTS {
            return Err(format!(
                "sslrootcert {} holds over {MAX_ROOT_CERTS} certificates",
                file.display()
            ));
        }
        let c = c.map_err(|e| format!("reading sslrootcert {}: {e}", file.display()))?;
        store
            .add(c)
            .map_err(|e| format!("sslrootcert {}: {e}", file.display()))?;
    }
    if store.is_empty() {
        return Err(format!(
            "sslrootcert {} holds no certificate",
            file.display()
        ));
    }
    Ok(store)
}

/// The rustls configuration for the URL's `sslmode` (not called for `disable`).
pub(crate) fn client_config(url: &PgUrl) -> Result<ClientConfig, String> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let verifier: Arc<dyn ServerCertVerifier> = match url.sslmode {
        SslMode::Disable | SslMode::Prefer | SslMode::Require => Arc::new(Lenient {
            provider,
            chain: None,
        }),
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let chain = WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots(url)?),
                provider.clone(),
            )
            .build()
            .map_err(|e| format!("TLS setup: {e}"))?;
            if url.sslmode == SslMode::VerifyFull {
                chain
            } else {
                Arc::new(Lenient {
                    provider,
                    chain: Some(chain),
                })
            }
        }
    };
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}
