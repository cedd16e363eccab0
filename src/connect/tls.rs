//! TLS for deployments with their own certificate authority, and TLS
//! handshake failures as errors that say why.
//!
//! Most internal Spark Connect deployments sit behind a TLS-terminating load
//! balancer whose certificate is signed by a private CA. Adding that CA to
//! the machine's trust store needs root, which a service rarely has, so the
//! session takes it directly: PEM bytes or a file, from the builder
//! ([`SparkSessionBuilder::tls_ca_pem`](crate::session::SparkSessionBuilder::tls_ca_pem))
//! or from the connection string (`tls_ca_file`), with an optional client
//! certificate and key for mutual TLS. The server's certificate is always
//! checked against the host name of the connection string.
//!
//! A handshake that fails on a certificate (an unknown CA, a certificate
//! for another host, an expired one, a client certificate the server wants
//! or refuses) fails the same way on every attempt: retrying it only delays
//! the error by the whole retry budget. tonic reports it as a connect error
//! (`UNAVAILABLE`, "never reached the server"), which a retry policy would
//! retry; the session rewrites it into a non-retryable `UNAUTHENTICATED`
//! status carrying a [`TlsHandshakeError`] that names the cause, and the
//! session's calls fail with [`SparkError::Tls`](crate::session::SparkError::Tls)
//! after one attempt.
//!
//! # Choices
//!
//! * **Private CAs replace the native roots.** With a CA given, only the
//!   given CAs are trusted (as `curl --cacert`), so a minimal container
//!   without a system trust store still works and a public CA cannot vouch
//!   for an internal host.
//! * **PEM is checked at build**: a CA file without a certificate, or a key
//!   file without a key, is an error naming the file's role, never an
//!   empty trust store discovered at the first handshake.
//! * **Connection-string keys** (`tls_ca_file`, `tls_cert_file`,
//!   `tls_key_file`) are this client's own: the Spark document reserves
//!   none for this, and PySpark and the JVM client send unknown keys as
//!   headers (harmless: a path, never a key's content). Any of them turns
//!   TLS on, as `use_ssl=true` does. A certificate needs its key and the
//!   reverse.
//! * **What counts as a handshake failure**: a rustls certificate error, a
//!   fatal alert about certificates or the handshake from the server, a
//!   peer that does not speak TLS, or HTTP/2 not negotiated. A handshake
//!   timeout or a connection closed during the handshake stays a transport
//!   failure (retried): the next attempt may well succeed.

use std::error::Error as StdError;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};
use tonic::{Code, Status};

/// Why a TLS handshake failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The server's certificate is not signed by a trusted CA.
    UnknownIssuer,
    /// The server's certificate is not valid for the host name connected to.
    WrongHostName,
    /// The server's certificate has expired.
    Expired,
    /// The server's certificate is not valid yet.
    NotYetValid,
    /// The server's certificate was revoked.
    Revoked,
    /// The server's certificate is invalid in another way (rustls' words).
    InvalidCertificate(String),
    /// The server asked for a client certificate and none was configured.
    ClientCertificateRequired,
    /// The server refused the handshake with this fatal alert (for
    /// example the client certificate: `BadCertificate`, `UnknownCA`).
    RejectedByServer(String),
    /// The peer does not speak TLS (a plaintext port).
    PeerNotTls,
    /// The peer speaks TLS but not HTTP/2 (ALPN `h2` not negotiated), or
    /// no protocol version or cipher suite in common.
    Incompatible(String),
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsFailure::UnknownIssuer => f.write_str(
                "the server's certificate is not signed by a trusted CA (unknown issuer; give the CA with tls_ca_file or tls_ca_pem)",
            ),
            TlsFailure::WrongHostName => {
                f.write_str("the server's certificate is not valid for this host name")
            }
            TlsFailure::Expired => f.write_str("the server's certificate has expired"),
            TlsFailure::NotYetValid => f.write_str("the server's certificate is not valid yet"),
            TlsFailure::Revoked => f.write_str("the server's certificate was revoked"),
            TlsFailure::InvalidCertificate(why) => {
                write!(f, "the server's certificate is invalid: {why}")
            }
            TlsFailure::ClientCertificateRequired => f.write_str(
                "the server requires a client certificate (mutual TLS) and none was configured",
            ),
            TlsFailure::RejectedByServer(alert) => {
                write!(f, "the server refused the handshake (alert {alert})")
            }
            TlsFailure::PeerNotTls => f.write_str("the server does not speak TLS on this port"),
            TlsFailure::Incompatible(why) => write!(f, "no common ground with the server: {why}"),
        }
    }
}

/// A TLS handshake that failed in a way another attempt would not fix.
///
/// It is the source of the `UNAUTHENTICATED` status the session's channel
/// reports for it, and the payload of
/// [`SparkError::Tls`](crate::session::SparkError::Tls).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("TLS handshake with {target} failed: {failure}")]
pub struct TlsHandshakeError {
    target: String,
    failure: TlsFailure,
}

impl TlsHandshakeError {
    /// The cause.
    pub fn failure(&self) -> &TlsFailure {
        &self.failure
    }
    /// The server, `host:port`.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The handshake failure a status carries, if it is one (made by the
    /// session's channel).
    pub fn from_status(status: &Status) -> Option<&TlsHandshakeError> {
        crate::status::find_source(status)
    }
}

/// The TLS failure one link of a status's source chain stands for, if any.
///
/// rustls errors reach tonic inside an `io::Error` (tokio-rustls wraps
/// them), whose `source()` skips the wrapped error, so an `io::Error` is
/// opened with `get_ref`; the walk ([`tonic_retry::policy::sources`]) goes
/// on with the wrapped error's own causes.
fn failure_at(err: &(dyn StdError + 'static)) -> Option<TlsFailure> {
    if let Some(r) = err.downcast_ref::<rustls::Error>() {
        return from_rustls(r);
    }
    if let Some(io) = err.downcast_ref::<std::io::Error>()
        && let Some(inner) = io.get_ref()
    {
        let inner: &(dyn StdError + 'static) = inner;
        if let Some(found) = failure_at(inner) {
            return Some(found);
        }
        // h2 keeps only the kind and text of an I/O error (so that it
        // can clone it): a fatal alert after the handshake (TLS 1.3
        // refuses a client certificate there) is known by rustls' text.
        if io.kind() == std::io::ErrorKind::InvalidData
            && let Some(found) = alert_text(&inner.to_string())
        {
            return Some(found);
        }
    }
    // tonic's own (private) error when the server's ALPN is not h2.
    if err.to_string() == "HTTP/2 was not negotiated." {
        return Some(TlsFailure::Incompatible(
            "HTTP/2 (ALPN h2) not negotiated".into(),
        ));
    }
    None
}

/// rustls' `received fatal alert: <Alert>` text, for the alerts
/// [`from_rustls`] maps.
fn alert_text(text: &str) -> Option<TlsFailure> {
    use rustls::AlertDescription as A;
    let name = text.strip_prefix("received fatal alert: ")?.trim();
    [
        A::CertificateRequired,
        A::BadCertificate,
        A::UnsupportedCertificate,
        A::CertificateRevoked,
        A::CertificateExpired,
        A::CertificateUnknown,
        A::UnknownCA,
        A::AccessDenied,
        A::HandshakeFailure,
        A::DecryptError,
        A::IllegalParameter,
        A::ProtocolVersion,
        A::InsufficientSecurity,
        A::NoApplicationProtocol,
    ]
    .into_iter()
    .find(|a| format!("{a:?}") == name)
    .and_then(|a| from_rustls(&rustls::Error::AlertReceived(a)))
}

fn from_rustls(e: &rustls::Error) -> Option<TlsFailure> {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    Some(match e {
        E::InvalidCertificate(c) => match c {
            C::UnknownIssuer => TlsFailure::UnknownIssuer,
            C::NotValidForName | C::NotValidForNameContext { .. } => TlsFailure::WrongHostName,
            C::Expired | C::ExpiredContext { .. } => TlsFailure::Expired,
            C::NotValidYet | C::NotValidYetContext { .. } => TlsFailure::NotYetValid,
            C::Revoked => TlsFailure::Revoked,
            other => TlsFailure::InvalidCertificate(format!("{other:?}")),
        },
        E::AlertReceived(A::CertificateRequired) => TlsFailure::ClientCertificateRequired,
        E::AlertReceived(
            a @ (A::BadCertificate
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::UnknownCA
            | A::AccessDenied
            | A::HandshakeFailure
            | A::DecryptError
            | A::IllegalParameter),
        ) => TlsFailure::RejectedByServer(format!("{a:?}")),
        E::AlertReceived(
            a @ (A::ProtocolVersion | A::InsufficientSecurity | A::NoApplicationProtocol),
        ) => TlsFailure::Incompatible(format!("alert {a:?}")),
        E::NoCertificatesPresented => {
            TlsFailure::InvalidCertificate("no certificate presented".into())
        }
        E::InvalidMessage(_)
        | E::InappropriateMessage { .. }
        | E::InappropriateHandshakeMessage { .. } => TlsFailure::PeerNotTls,
        E::PeerIncompatible(p) => TlsFailure::Incompatible(format!("{p:?}")),
        E::NoApplicationProtocol => TlsFailure::Incompatible("no application protocol".into()),
        _ => return None,
    })
}

/// Rewrites a status whose transport error is a TLS handshake failure into
/// a non-retryable `UNAUTHENTICATED` with a [`TlsHandshakeError`] as its
/// only source; other statuses pass unchanged.
pub(crate) fn rewrite_handshake_failure(status: Status, target: &str) -> Status {
    if TlsHandshakeError::from_status(&status).is_some() {
        return status;
    }
    let Some(failure) = tonic_retry::policy::sources(&status).find_map(failure_at) else {
        return status;
    };
    let err = TlsHandshakeError {
        target: target.to_owned(),
        failure,
    };
    let mut rewritten = Status::new(Code::Unauthenticated, err.to_string());
    rewritten.set_source(Arc::new(err));
    rewritten
}

/// PEM bytes, or a file to read them from at build.
#[derive(Clone)]
enum PemSource {
    Bytes(Vec<u8>),
    File(PathBuf),
}

impl PemSource {
    fn read(&self, role: &'static str) -> Result<Vec<u8>, TlsConfigError> {
        match self {
            PemSource::Bytes(b) => Ok(b.clone()),
            PemSource::File(path) => std::fs::read(path).map_err(|source| TlsConfigError::Read {
                role,
                path: path.clone(),
                source,
            }),
        }
    }
}

impl fmt::Debug for PemSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PemSource::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
            PemSource::File(p) => f.debug_tuple("File").field(p).finish(),
        }
    }
}

/// What TLS to use besides the connection string's: private CAs and a
/// client identity. `Debug` never shows a key (nor PEM contents).
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    cas: Vec<PemSource>,
    identity: Option<(PemSource, PemSource)>,
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("cas", &self.cas)
            .field(
                "client_certificate",
                &self.identity.as_ref().map(|(c, _)| c),
            )
            .field("client_key", &self.identity.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Why the TLS configuration cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsConfigError {
    /// A file could not be read.
    #[error("cannot read the TLS {role} file {path:?}: {source}")]
    Read {
        /// `CA`, `client certificate` or `client key`.
        role: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The PEM holds no usable item of the expected kind.
    #[error("the TLS {role} is not PEM holding {expected}")]
    NotPem {
        /// `CA`, `client certificate` or `client key`.
        role: &'static str,
        /// What was looked for.
        expected: &'static str,
    },
    /// A client certificate without its key, or a key without its certificate.
    #[error(
        "a TLS client certificate needs its key and the reverse (tls_cert_file with tls_key_file)"
    )]
    IncompleteIdentity,
}

impl TlsSettings {
    pub(crate) fn add_ca_pem(&mut self, pem: Vec<u8>) {
        self.cas.push(PemSource::Bytes(pem));
    }
    pub(crate) fn add_ca_file(&mut self, path: PathBuf) {
        self.cas.push(PemSource::File(path));
    }
    pub(crate) fn identity_pem(&mut self, cert: Vec<u8>, key: Vec<u8>) {
        self.identity = Some((PemSource::Bytes(cert), PemSource::Bytes(key)));
    }
    pub(crate) fn identity_files(&mut self, cert: PathBuf, key: PathBuf) {
        self.identity = Some((PemSource::File(cert), PemSource::File(key)));
    }
    /// Whether anything is set (then the channel uses TLS).
    pub(crate) fn is_set(&self) -> bool {
        !self.cas.is_empty() || self.identity.is_some()
    }

    /// The settings of the connection string's `tls_*` keys.
    pub(crate) fn from_files(
        ca: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<Self, TlsConfigError> {
        let mut s = TlsSettings::default();
        if let Some(ca) = ca {
            s.add_ca_file(ca.to_owned());
        }
        match (cert, key) {
            (Some(c), Some(k)) => s.identity_files(c.to_owned(), k.to_owned()),
            (None, None) => {}
            _ => return Err(TlsConfigError::IncompleteIdentity),
        }
        Ok(s)
    }

    /// `self` with `other`'s CAs added and its identity, if any, in place.
    pub(crate) fn merged(mut self, other: &TlsSettings) -> Self {
        self.cas.extend(other.cas.iter().cloned());
        if other.identity.is_some() {
            self.identity = other.identity.clone();
        }
        self
    }

    /// The tonic configuration: the given CAs only (native roots when none)
    /// and the identity; every PEM read and checked here.
    pub(crate) fn client_config(&self) -> Result<ClientTlsConfig, TlsConfigError> {
        let mut config = ClientTlsConfig::new();
        if self.cas.is_empty() {
            config = config.with_native_roots();
        }
        for ca in &self.cas {
            let pem = ca.read("CA")?;
            let n = CertificateDer::pem_slice_iter(&pem)
                .filter(Result::is_ok)
                .count();
            if n == 0 {
                return Err(TlsConfigError::NotPem {
                    role: "CA",
                    expected: "a certificate",
                });
            }
            config = config.ca_certificate(Certificate::from_pem(pem));
        }
        if let Some((cert, key)) = &self.identity {
            let cert = cert.read("client certificate")?;
            let key = key.read("client key")?;
            if CertificateDer::pem_slice_iter(&cert)
                .next()
                .is_none_or(|c| c.is_err())
            {
                return Err(TlsConfigError::NotPem {
                    role: "client certificate",
                    expected: "a certificate",
                });
            }
            if PrivateKeyDer::from_pem_slice(&key).is_err() {
                return Err(TlsConfigError::NotPem {
                    role: "client key",
                    expected: "a private key",
                });
            }
            config = config.identity(Identity::from_pem(cert, key));
        }
        Ok(config)
    }
}

/// A tonic TLS configuration, whose derived `Debug` would print a client
/// key's bytes: shown as `<redacted>`.
#[derive(Clone)]
pub(crate) struct RedactedTls(pub(crate) ClientTlsConfig);

impl fmt::Debug for RedactedTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientTlsConfig(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_over(err: rustls::Error) -> Status {
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, err);
        Status::from_error(Box::new(tonic::ConnectError(Box::new(io))))
    }

    #[test]
    fn certificate_errors_name_their_cause() {
        use rustls::CertificateError as C;
        for (err, want) in [
            (C::UnknownIssuer, TlsFailure::UnknownIssuer),
            (C::NotValidForName, TlsFailure::WrongHostName),
            (C::Expired, TlsFailure::Expired),
            (C::NotValidYet, TlsFailure::NotYetValid),
        ] {
            let s = rewrite_handshake_failure(
                status_over(rustls::Error::InvalidCertificate(err)),
                "h:1",
            );
            assert_eq!(s.code(), Code::Unauthenticated);
            let tls = TlsHandshakeError::from_status(&s).expect("a handshake error");
            assert_eq!(tls.failure(), &want);
            assert_eq!(tls.target(), "h:1");
            assert!(s.message().contains("h:1"), "{}", s.message());
            // Not retryable under the default policy, and not a transport failure.
            let failure = crate::policy::Failure::new(&s);
            assert!(!failure.kind().is_transport());
        }
    }

    #[test]
    fn other_failures_pass_unchanged() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let s = Status::from_error(Box::new(tonic::ConnectError(Box::new(refused))));
        let out = rewrite_handshake_failure(s, "h:1");
        assert_eq!(out.code(), Code::Unavailable);
        assert!(TlsHandshakeError::from_status(&out).is_none());
        let server = rewrite_handshake_failure(Status::unauthenticated("no token"), "h:1");
        assert!(TlsHandshakeError::from_status(&server).is_none());
        // A general rustls error (not about the handshake's parties) stays.
        let s = rewrite_handshake_failure(status_over(rustls::Error::General("x".into())), "h:1");
        assert_eq!(s.code(), Code::Unavailable);
    }

    #[test]
    fn alerts_and_protocol_mismatches() {
        use rustls::AlertDescription as A;
        let s = rewrite_handshake_failure(
            status_over(rustls::Error::AlertReceived(A::CertificateRequired)),
            "h:1",
        );
        assert_eq!(
            TlsHandshakeError::from_status(&s).unwrap().failure(),
            &TlsFailure::ClientCertificateRequired
        );
        let s = rewrite_handshake_failure(
            status_over(rustls::Error::InvalidMessage(
                rustls::InvalidMessage::InvalidContentType,
            )),
            "h:1",
        );
        assert_eq!(
            TlsHandshakeError::from_status(&s).unwrap().failure(),
            &TlsFailure::PeerNotTls
        );
        // As h2 passes an alert on: kind and text only.
        let text = rustls::Error::AlertReceived(A::CertificateRequired).to_string();
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, text);
        let s = rewrite_handshake_failure(Status::from_error(Box::new(io)), "h:1");
        assert_eq!(
            TlsHandshakeError::from_status(&s).unwrap().failure(),
            &TlsFailure::ClientCertificateRequired
        );
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "received fatal alert: Nonsense",
        );
        let s = rewrite_handshake_failure(Status::from_error(Box::new(io)), "h:1");
        assert!(TlsHandshakeError::from_status(&s).is_none());
    }

    #[test]
    fn bad_pem_is_an_error_at_build_and_keys_stay_out_of_debug() {
        let mut s = TlsSettings::default();
        s.add_ca_pem(b"not pem".to_vec());
        assert!(matches!(
            s.client_config(),
            Err(TlsConfigError::NotPem { role: "CA", .. })
        ));
        let mut s = TlsSettings::default();
        s.identity_pem(
            b"cert".to_vec(),
            b"-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n".to_vec(),
        );
        let debug = format!("{s:?}");
        assert!(
            !debug.contains("c2VjcmV0") && debug.contains("<redacted>"),
            "{debug}"
        );
        assert!(matches!(
            TlsSettings::from_files(None, Some(Path::new("c")), None),
            Err(TlsConfigError::IncompleteIdentity)
        ));
        let missing = TlsSettings::from_files(Some(Path::new("/nonexistent/ca.pem")), None, None)
            .unwrap()
            .client_config();
        assert!(matches!(
            missing,
            Err(TlsConfigError::Read { role: "CA", .. })
        ));
    }
}
