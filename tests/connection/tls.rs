//! Real TLS handshakes: a TLS-terminating front (rustls, as a load balancer
//! does) on loopback in front of the embedded server, with certificates made
//! here by `rcgen`. A private CA works; a wrong CA, a certificate for
//! another host, an expired one, and a missing client certificate each fail
//! after one connection with an error naming the cause; a plaintext client
//! against the TLS port fails cleanly.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose, date_time_ymd,
};
use spark_connect_retry::session::tls::TlsFailure;
use spark_connect_retry::session::{SparkError, SparkSession};
use spark_connect_testkit::TestServer;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig, server::WebPkiClientVerifier};
use tonic_retry::retrying::RecordingSleeper;

use crate::support::policies::recorded;

/// A CA that signs server and client certificates.
struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf for `names`; `expired` makes it valid only in 2020.
    fn leaf(&self, names: &[&str], expired: bool) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        if expired {
            params.not_before = date_time_ymd(2020, 1, 1);
            params.not_after = date_time_ymd(2020, 2, 1);
        }
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

fn der_certs(pem: &str) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(Result::unwrap)
        .collect()
}

/// Terminates TLS on a loopback port and forwards the bytes to `backend`,
/// counting the connections it accepted.
struct TlsFront {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn front(backend: SocketAddr, cert: (String, String), client_ca: Option<&Ca>) -> TlsFront {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in der_certs(&ca.pem) {
                roots.add(c).unwrap();
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    use rustls::pki_types::pem::PemObject;
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(cert.1.as_bytes()).unwrap();
    let mut config = builder.with_single_cert(der_certs(&cert.0), key).unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            count.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut up) = TcpStream::connect(backend).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
            });
        }
    });
    TlsFront {
        addr,
        accepted,
        task,
    }
}

const BOUND: Duration = Duration::from_secs(30);

/// `SELECT id FROM range(1000)` through the session; the rows, or the error.
async fn query(spark: &SparkSession) -> Result<usize, SparkError> {
    let stream = spark.sql("SELECT id FROM range(1000)").await?;
    let batches = stream.collect().await?;
    Ok(batches.iter().map(|b| b.num_rows()).sum())
}

fn session(
    port: u16,
    sleeper: &RecordingSleeper,
) -> spark_connect_retry::session::SparkSessionBuilder {
    SparkSession::builder()
        .remote(format!("sc://localhost:{port}/;use_ssl=true"))
        .retrying(recorded(sleeper, 7))
}

/// The handshake failure of `err`, asserting it came after one connection
/// and no retry wait.
fn handshake_failure(err: &SparkError, front: &TlsFront, sleeper: &RecordingSleeper) -> TlsFailure {
    let SparkError::Tls(tls) = err else {
        panic!("expected a TLS handshake error, got {err:?}: {err}");
    };
    assert_eq!(
        front.accepted.load(Ordering::SeqCst),
        1,
        "one connection, no retry"
    );
    assert!(
        sleeper.sleeps().is_empty(),
        "no retry wait: {:?}",
        sleeper.sleeps()
    );
    assert!(
        err.to_string().contains("TLS handshake with localhost:"),
        "{err}"
    );
    tls.failure().clone()
}

#[tokio::test]
async fn a_private_ca_from_the_builder_or_the_connection_string_works() {
    let server = TestServer::start().await.unwrap();
    let ca = Ca::new("test CA");
    let front = front(server.addr(), ca.leaf(&["localhost"], false), None).await;
    let sleeper = RecordingSleeper::new();
    let spark = session(front.addr.port(), &sleeper)
        .tls_ca_pem(ca.pem.clone())
        .build()
        .unwrap();
    let rows = tokio::time::timeout(BOUND, query(&spark)).await.unwrap();
    assert_eq!(rows.unwrap(), 1000);

    let dir = std::env::temp_dir().join(format!("tls-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ca.pem");
    std::fs::write(&file, &ca.pem).unwrap();
    // `tls_ca_file` alone turns TLS on.
    let url = format!(
        "sc://localhost:{}/;tls_ca_file={}",
        front.addr.port(),
        file.display()
    );
    let spark = SparkSession::builder().remote(url).build().unwrap();
    let rows = tokio::time::timeout(BOUND, query(&spark)).await.unwrap();
    assert_eq!(rows.unwrap(), 1000);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A session trusting `trusted`, against a front presenting a certificate
/// of `issuer` for `hosts` (expired or not), fails at once with `failure`,
/// its message saying `why`.
async fn fails_at_once(
    issuer: &Ca,
    hosts: &[&str],
    expired: bool,
    trusted: &Ca,
    failure: TlsFailure,
    why: &str,
) {
    let server = TestServer::start().await.unwrap();
    let front = front(server.addr(), issuer.leaf(hosts, expired), None).await;
    let sleeper = RecordingSleeper::new();
    let spark = session(front.addr.port(), &sleeper)
        .tls_ca_pem(trusted.pem.clone())
        .build()
        .unwrap();
    let err = tokio::time::timeout(BOUND, query(&spark))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(handshake_failure(&err, &front, &sleeper), failure);
    assert!(err.to_string().contains(why), "{err}");
}

#[tokio::test]
async fn a_wrong_ca_fails_at_once_naming_the_unknown_issuer() {
    let (ca, other) = (Ca::new("the server's CA"), Ca::new("another CA"));
    let why = "not signed by a trusted CA";
    fails_at_once(
        &ca,
        &["localhost"],
        false,
        &other,
        TlsFailure::UnknownIssuer,
        why,
    )
    .await;
}

#[tokio::test]
async fn a_certificate_for_another_host_fails_at_once() {
    let ca = Ca::new("test CA");
    let why = "not valid for this host name";
    fails_at_once(
        &ca,
        &["spark.other.example"],
        false,
        &ca,
        TlsFailure::WrongHostName,
        why,
    )
    .await;
}

#[tokio::test]
async fn an_expired_certificate_fails_at_once() {
    let ca = Ca::new("test CA");
    fails_at_once(
        &ca,
        &["localhost"],
        true,
        &ca,
        TlsFailure::Expired,
        "expired",
    )
    .await;
}

#[tokio::test]
async fn mutual_tls_works_with_the_client_certificate_and_fails_clearly_without() {
    let server = TestServer::start().await.unwrap();
    let ca = Ca::new("test CA");
    let clients = Ca::new("client CA");
    let front = front(
        server.addr(),
        ca.leaf(&["localhost"], false),
        Some(&clients),
    )
    .await;
    let (cert, key) = clients.leaf(&["client"], false);
    let sleeper = RecordingSleeper::new();
    let spark = session(front.addr.port(), &sleeper)
        .tls_ca_pem(ca.pem.clone())
        .tls_client_identity_pem(cert, key.clone())
        .build()
        .unwrap();
    assert!(!format!("{spark:?}").contains(key.lines().nth(1).unwrap()));
    let rows = tokio::time::timeout(BOUND, query(&spark)).await.unwrap();
    assert_eq!(rows.unwrap(), 1000);

    let front2 = self::front(
        server.addr(),
        ca.leaf(&["localhost"], false),
        Some(&clients),
    )
    .await;
    let sleeper = RecordingSleeper::new();
    let spark = session(front2.addr.port(), &sleeper)
        .tls_ca_pem(ca.pem.clone())
        .build()
        .unwrap();
    let err = tokio::time::timeout(BOUND, query(&spark))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(
        handshake_failure(&err, &front2, &sleeper),
        TlsFailure::ClientCertificateRequired
    );
    assert!(err.to_string().contains("client certificate"), "{err}");
}

#[tokio::test]
async fn a_plaintext_client_against_the_tls_port_fails_cleanly() {
    let server = TestServer::start().await.unwrap();
    let ca = Ca::new("test CA");
    let front = front(server.addr(), ca.leaf(&["localhost"], false), None).await;
    let sleeper = RecordingSleeper::new();
    let spark = SparkSession::builder()
        .remote(format!("sc://localhost:{}", front.addr.port()))
        .retrying(recorded(&sleeper, 7))
        .build()
        .unwrap();
    let err = tokio::time::timeout(BOUND, query(&spark))
        .await
        .expect("no hang")
        .unwrap_err();
    // The TLS server closes a connection that does not open with a
    // ClientHello: a transport failure, retried within the policy's budget.
    assert!(matches!(err, SparkError::Server(_)), "{err:?}");
    assert!(server.calls().execute == 0, "nothing reached the server");
    eprintln!(
        "plaintext against TLS: {err} ({} connections)",
        front.accepted.load(Ordering::SeqCst)
    );
}
