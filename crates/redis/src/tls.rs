//! Reading [`TlsOptions`] files into redis-rs's [`TlsCertificates`].

use std::path::Path;

use redis::{ClientTlsConfig, TlsCertificates};

use crate::error::{Error, Result};
use crate::topology::{TlsOptions, Topology};

/// Makes `ring` the process's rustls crypto provider unless one is installed already: redis-rs
/// builds its TLS configs on the process default, and without one a `rediss://` connection
/// panics.
pub(crate) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: a provider is then installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The certificates of `tls`, or `None` without TLS options.
///
/// A client certificate needs its key (and the other way round); TLS files beside URLs that
/// are not `rediss://` are a configuration error rather than silently unused.
pub(crate) fn load(
    tls: Option<&TlsOptions>,
    topology: &Topology,
) -> Result<Option<TlsCertificates>> {
    let Some(tls) = tls else {
        return Ok(None);
    };
    if let Some(url) = topology
        .urls()
        .iter()
        .find(|url| !url.starts_with("rediss://"))
    {
        return Err(Error::InvalidConfig {
            field: "redis.tls",
            value: crate::redact_url(url),
            reason: "TLS files are set but this URL is not rediss://".to_owned(),
        });
    }
    let client_tls = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read("redis.tls.cert_file", cert)?,
            client_key: read("redis.tls.key_file", key)?,
        }),
        (None, None) => None,
        (Some(cert), None) => {
            return Err(Error::InvalidConfig {
                field: "redis.tls.key_file",
                value: "(unset)".to_owned(),
                reason: format!("needed with redis.tls.cert_file {}", cert.display()),
            })
        }
        (None, Some(key)) => {
            return Err(Error::InvalidConfig {
                field: "redis.tls.cert_file",
                value: "(unset)".to_owned(),
                reason: format!("needed with redis.tls.key_file {}", key.display()),
            })
        }
    };
    let root_cert = tls
        .ca_file
        .as_deref()
        .map(|path| read("redis.tls.ca_file", path))
        .transpose()?;
    Ok(Some(TlsCertificates {
        client_tls,
        root_cert,
    }))
}

fn read(field: &'static str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|error| Error::TlsFile {
        field,
        path: path.to_owned(),
        reason: error.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_named_with_its_field() {
        let tls = TlsOptions {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..TlsOptions::default()
        };
        let error = load(Some(&tls), &Topology::standalone("rediss://h:1"))
            .expect_err("the file does not exist");
        assert!(error.to_string().contains("redis.tls.ca_file"), "{error}");
        assert!(error.to_string().contains("/nonexistent/ca.pem"), "{error}");
    }

    #[test]
    fn tls_files_need_rediss_urls_and_pairs() {
        let tls = TlsOptions::default();
        let error =
            load(Some(&tls), &Topology::standalone("redis://:pw@h:1")).expect_err("not rediss");
        assert!(error.to_string().contains("redis.tls"), "{error}");
        assert!(!error.to_string().contains("pw"), "{error}");
        let half = TlsOptions {
            cert_file: Some("c.pem".into()),
            ..TlsOptions::default()
        };
        let error = load(Some(&half), &Topology::standalone("rediss://h:1")).expect_err("no key");
        assert!(error.to_string().contains("redis.tls.key_file"), "{error}");
    }
}
