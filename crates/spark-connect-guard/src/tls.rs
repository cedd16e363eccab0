//! TLS on the guard's listening side: [`GuardTls`], from PEM files, with
//! an optional CA for client certificates (mTLS).

use std::fmt;
use std::path::{Path, PathBuf};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use crate::error::GuardError;

/// The guard's certificate and key, and optionally the CA its clients'
/// certificates must chain to (mTLS: a client without one is refused in
/// the handshake). Checked when made: a file that cannot be read, or holds
/// no certificate or key, is a [`GuardError::Tls`] naming the file. The
/// key is never shown (Debug prints `<redacted>`).
#[derive(Clone)]
pub struct GuardTls {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
    source: Option<PathBuf>,
}

impl fmt::Debug for GuardTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardTls")
            .field("cert", &self.source)
            .field("key", &"<redacted>")
            .field("client_certificates_required", &self.client_ca.is_some())
            .finish()
    }
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, GuardError> {
    std::fs::read(path).map_err(|e| GuardError::Tls {
        what,
        source_name: path.display().to_string(),
        reason: format!("cannot read it: {e}"),
    })
}

fn certificates(pem: &[u8], what: &'static str, name: &str) -> Result<(), GuardError> {
    let bad = |reason: String| GuardError::Tls {
        what,
        source_name: name.to_owned(),
        reason,
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(bad("no CERTIFICATE block".into()));
    }
    Ok(())
}

fn private_key(pem: &[u8], name: &str) -> Result<(), GuardError> {
    // The error names the file and the kind of problem, never the bytes.
    PrivateKeyDer::from_pem_slice(pem)
        .map(|_| ())
        .map_err(|e| GuardError::Tls {
            what: "private key",
            source_name: name.to_owned(),
            reason: match e {
                rustls_pki_types::pem::Error::NoItemsFound => "no PRIVATE KEY block".into(),
                _ => "not a PEM private key".into(),
            },
        })
}

impl GuardTls {
    /// The guard's certificate chain and private key, from PEM files.
    pub fn from_pem_files(
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<GuardTls, GuardError> {
        let (cert, key) = (cert.as_ref(), key.as_ref());
        let cert_pem = read(cert, "certificate")?;
        let key_pem = read(key, "private key")?;
        certificates(&cert_pem, "certificate", &cert.display().to_string())?;
        private_key(&key_pem, &key.display().to_string())?;
        Ok(GuardTls {
            cert: cert_pem,
            key: key_pem,
            client_ca: None,
            source: Some(cert.to_owned()),
        })
    }

    /// The guard's certificate chain and private key, as PEM text.
    pub fn from_pem(
        cert: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Result<GuardTls, GuardError> {
        let (cert, key) = (cert.into(), key.into());
        certificates(&cert, "certificate", "the PEM given")?;
        private_key(&key, "the PEM given")?;
        Ok(GuardTls {
            cert,
            key,
            client_ca: None,
            source: None,
        })
    }

    /// Require client certificates that chain to the CA(s) in this PEM
    /// file (mTLS).
    pub fn client_ca_file(self, ca: impl AsRef<Path>) -> Result<GuardTls, GuardError> {
        let ca = ca.as_ref();
        let pem = read(ca, "client CA")?;
        certificates(&pem, "client CA", &ca.display().to_string())?;
        Ok(GuardTls {
            client_ca: Some(pem),
            ..self
        })
    }

    /// Require client certificates that chain to the CA(s) in this PEM
    /// text (mTLS).
    pub fn client_ca_pem(self, ca: impl Into<Vec<u8>>) -> Result<GuardTls, GuardError> {
        let pem = ca.into();
        certificates(&pem, "client CA", "the PEM given")?;
        Ok(GuardTls {
            client_ca: Some(pem),
            ..self
        })
    }

    pub(crate) fn server_config(&self) -> ServerTlsConfig {
        let config = ServerTlsConfig::new().identity(Identity::from_pem(&self.cert, &self.key));
        match &self.client_ca {
            Some(ca) => config.client_ca_root(Certificate::from_pem(ca)),
            None => config,
        }
    }
}
