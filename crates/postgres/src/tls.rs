//! TLS by libpq's `sslmode`, through rustls (ring), with the URL parameters `sslrootcert`
//! (a PEM file, or `system` for the operating system's trust store), `sslcert` and `sslkey`
//! (a client certificate).
//!
//! | sslmode | TLS | server certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (libpq's default) | if the server offers it | not verified |
//! | `require` | always | not verified, unless `sslrootcert` is given: then as `verify-ca` |
//! | `verify-ca` | always | signed by `sslrootcert` |
//! | `verify-full` | always | signed by `sslrootcert` and issued for the host connected to |

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::{Error, Result};

/// libpq's `sslmode` values that this crate supports (`allow` is not one: use `prefer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// Plain TCP only.
    Disable,
    /// TLS when the server offers it, without verifying its certificate.
    #[default]
    Prefer,
    /// TLS always; the certificate is verified only against a given `sslrootcert`.
    Require,
    /// TLS always, the certificate signed by a trusted CA.
    VerifyCa,
    /// TLS always, the certificate signed by a trusted CA and issued for the host.
    VerifyFull,
}

impl SslMode {
    /// The mode named by a `sslmode=` value.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "disable" => Some(SslMode::Disable),
            "prefer" => Some(SslMode::Prefer),
            "require" => Some(SslMode::Require),
            "verify-ca" => Some(SslMode::VerifyCa),
            "verify-full" => Some(SslMode::VerifyFull),
            _ => None,
        }
    }

    /// What the driver is told: whether to ask for TLS and whether it may do without.
    pub(crate) fn driver_mode(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Driver;
        match self {
            SslMode::Disable => Driver::Disable,
            SslMode::Prefer => Driver::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Driver::Require,
        }
    }
}

/// The TLS parameters of a URL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// `sslmode`.
    pub mode: SslMode,
    /// `sslrootcert`: a PEM file of trusted CAs, or `system`.
    pub root_cert: Option<String>,
    /// `sslcert`: the client certificate (PEM).
    pub client_cert: Option<PathBuf>,
    /// `sslkey`: the client certificate's key (PEM).
    pub client_key: Option<PathBuf>,
}

/// How the server's certificate is checked.
enum Verification {
    None,
    Ca,
    Full,
}

impl TlsSettings {
    /// Rejects combinations that cannot work.
    pub(crate) fn check(&self) -> Result<()> {
        if matches!(self.mode, SslMode::VerifyCa | SslMode::VerifyFull) && self.root_cert.is_none()
        {
            return Err(Error::invalid(
                "postgres.url sslrootcert",
                "(none)",
                "sslmode=verify-ca and verify-full need sslrootcert=<PEM file> or sslrootcert=system",
            ));
        }
        if self.client_cert.is_some() != self.client_key.is_some() {
            return Err(Error::invalid(
                "postgres.url sslcert",
                &format!("{:?} / sslkey {:?}", self.client_cert, self.client_key),
                "a client certificate needs both sslcert and sslkey",
            ));
        }
        Ok(())
    }

    fn verification(&self) -> Verification {
        match (self.mode, &self.root_cert) {
            (SslMode::VerifyFull, _) => Verification::Full,
            (SslMode::VerifyCa, _) | (SslMode::Require, Some(_)) => Verification::Ca,
            _ => Verification::None,
        }
    }

    /// The connector the driver uses; reads the certificate files now.
    pub(crate) fn connector(&self) -> Result<MakeRustlsConnect> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|error| tls_setup(&error))?;
        let verifier: Arc<dyn ServerCertVerifier> = match self.verification() {
            Verification::None => Arc::new(Unverified {
                provider: provider.clone(),
            }),
            verification => {
                let roots = Arc::new(self.roots()?);
                let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                    .build()
                    .map_err(|error| tls_setup(&error))?;
                match verification {
                    Verification::Full => webpki,
                    _ => Arc::new(AnyName { inner: webpki }),
                }
            }
        };
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => {
                let chain = read_certs("sslcert", cert)?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|error| Error::TlsFile {
                    field: "sslkey",
                    path: key.clone(),
                    reason: error.to_string(),
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|error| Error::TlsFile {
                        field: "sslkey",
                        path: self.client_key.clone().unwrap_or_default(),
                        reason: error.to_string(),
                    })?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(MakeRustlsConnect::new(config))
    }

    fn roots(&self) -> Result<RootCertStore> {
        let mut roots = RootCertStore::empty();
        match self.root_cert.as_deref() {
            Some("system") => {
                let found = rustls_native_certs::load_native_certs();
                for cert in found.certs {
                    // A system store may hold certificates rustls cannot parse; skip those.
                    let _ = roots.add(cert);
                }
                if roots.is_empty() {
                    return Err(Error::invalid(
                        "postgres.url sslrootcert",
                        "system",
                        "the operating system's trust store has no usable certificate",
                    ));
                }
            }
            Some(path) => {
                let path = PathBuf::from(path);
                for cert in read_certs("sslrootcert", &path)? {
                    roots.add(cert).map_err(|error| Error::TlsFile {
                        field: "sslrootcert",
                        path: path.clone(),
                        reason: error.to_string(),
                    })?;
                }
            }
            None => {}
        }
        Ok(roots)
    }
}

fn read_certs(field: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let file_error = |reason: String| Error::TlsFile {
        field,
        path: path.to_owned(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|error| file_error(error.to_string()))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|error| file_error(error.to_string()))?;
    if certs.is_empty() {
        return Err(file_error("no PEM certificate in it".to_owned()));
    }
    Ok(certs)
}

fn tls_setup(error: &dyn std::fmt::Display) -> Error {
    Error::invalid("postgres.url sslmode", "(TLS setup)", &error.to_string())
}

/// `verify-ca`: the chain must lead to a trusted root; the name on the certificate is not
/// compared with the host.
#[derive(Debug)]
struct AnyName {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
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
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// `prefer` and `require` without a root certificate: encryption without authentication of
/// the server, as libpq does. The handshake's signatures are still checked.
#[derive(Debug)]
struct Unverified {
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
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
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_libpq_mode_but_allow_is_known() {
        for (value, mode) in [
            ("disable", SslMode::Disable),
            ("prefer", SslMode::Prefer),
            ("require", SslMode::Require),
            ("verify-ca", SslMode::VerifyCa),
            ("verify-full", SslMode::VerifyFull),
        ] {
            assert_eq!(SslMode::parse(value), Some(mode));
        }
        assert_eq!(SslMode::parse("allow"), None);
    }

    #[test]
    fn a_missing_root_file_names_the_parameter_and_path() {
        let settings = TlsSettings {
            mode: SslMode::VerifyFull,
            root_cert: Some("/nonexistent/ca.pem".to_owned()),
            ..TlsSettings::default()
        };
        let error = settings.connector().err().expect("no such file");
        let shown = error.to_string();
        assert!(
            shown.contains("sslrootcert") && shown.contains("/nonexistent/ca.pem"),
            "{shown}"
        );
    }
}
