//! TLS, mTLS and a client token on the guard's listening side, with
//! certificates made at test time.

use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use spark_connect_guard::{ClientToken, Guard, GuardError, GuardTls};
use spark_connect_retry::session::{SparkError, SparkSession, SparkSessionBuilder};
use spark_connect_stub::spark::connect::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_testkit::TestServer;

use crate::support::{range_sql, sql_request};

const BOUND: Duration = Duration::from_secs(60);
const UPSTREAM_TOKEN: &str = "upstream-t0ken";
const CLIENT_TOKEN: &str = "client-t0ken";

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

    fn leaf(&self, name: &str) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A server that requires the upstream token, reached as `localhost` (a
/// token goes over plaintext to localhost only).
async fn upstream() -> (TestServer, String) {
    let s = TestServer::builder()
        .required_token(UPSTREAM_TOKEN)
        .start()
        .await
        .unwrap();
    let remote = format!(
        "{}/;token={UPSTREAM_TOKEN}",
        s.remote().replace("127.0.0.1", "localhost")
    );
    (s, remote)
}

async fn rows(spark: SparkSessionBuilder) -> Result<usize, SparkError> {
    let spark = spark.build()?;
    let go = async {
        let batches = spark.sql(&range_sql(1000)).await?.collect().await?;
        Ok(batches.iter().map(|b| b.num_rows()).sum())
    };
    tokio::time::timeout(BOUND, go).await.expect("query hung")
}

#[tokio::test]
async fn tls_with_the_client_token_serves_and_the_upstream_sees_only_its_own_token() {
    let (server, remote) = upstream().await;
    let ca = Ca::new("guard CA");
    let (cert, key) = ca.leaf("localhost");
    let guard = Guard::builder(remote)
        .tls(GuardTls::from_pem(cert, key).unwrap())
        .client_token(ClientToken::new(CLIENT_TOKEN).unwrap())
        .start()
        .await
        .unwrap();
    let port = guard.local_addr().port();
    let spark = SparkSession::builder()
        .remote(format!(
            "sc://localhost:{port}/;use_ssl=true;token={CLIENT_TOKEN}"
        ))
        .tls_ca_pem(ca.pem.clone());
    assert_eq!(rows(spark).await.unwrap(), 1000);
    // The server was given the guard's upstream token, never the client's.
    let seen = server
        .last_metadata(spark_connect_testkit::Rpc::ExecutePlan)
        .unwrap();
    let auth = seen.get("authorization").unwrap().to_str().unwrap();
    assert_eq!(auth, format!("Bearer {UPSTREAM_TOKEN}"));
    assert_eq!(server.token_refusals(), 0);
    // A client without the token is refused over TLS too.
    let spark = SparkSession::builder()
        .remote(format!("sc://localhost:{port}/;use_ssl=true"))
        .tls_ca_pem(ca.pem.clone());
    let err = rows(spark).await.unwrap_err();
    assert!(err.to_string().contains("no client token"), "{err}");
    guard.shutdown().await;
}

#[tokio::test]
async fn mtls_serves_a_client_certificate_and_refuses_a_client_without_one() {
    let server = TestServer::start().await.unwrap();
    let ca = Ca::new("guard CA");
    let clients = Ca::new("client CA");
    let (cert, key) = ca.leaf("localhost");
    let guard = Guard::builder(server.remote())
        .tls(
            GuardTls::from_pem(cert, key)
                .unwrap()
                .client_ca_pem(clients.pem.clone())
                .unwrap(),
        )
        .start()
        .await
        .unwrap();
    let remote = format!("sc://localhost:{}/;use_ssl=true", guard.local_addr().port());
    let (client_cert, client_key) = clients.leaf("client");
    let with_cert = SparkSession::builder()
        .remote(remote.clone())
        .tls_ca_pem(ca.pem.clone())
        .tls_client_identity_pem(client_cert, client_key);
    assert_eq!(rows(with_cert).await.unwrap(), 1000);
    let without = SparkSession::builder()
        .remote(remote)
        .tls_ca_pem(ca.pem.clone());
    let err = rows(without).await.unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
    // Only the client with a certificate got a call through.
    let stats = guard.stats();
    let executes: u64 = stats
        .ended
        .iter()
        .filter(|(m, _, _)| *m == "ExecutePlan")
        .map(|(_, _, n)| n)
        .sum();
    assert_eq!(executes, 1, "{stats:?}");
    guard.shutdown().await;
}

#[tokio::test]
async fn a_wrong_or_missing_token_is_refused_at_once_with_unauthenticated() {
    let (server, remote) = upstream().await;
    let guard = Guard::builder(remote)
        .client_token(ClientToken::new(CLIENT_TOKEN).unwrap())
        .start()
        .await
        .unwrap();
    let channel = crate::support::channel_to(guard.local_addr());
    for (auth, says) in [
        (None, "no client token"),
        (Some("Bearer wrong-token"), "the client token is wrong"),
        (
            Some(format!("Bearer {UPSTREAM_TOKEN}").as_str()),
            "the client token is wrong",
        ),
        (Some("Basic abc"), "not `Bearer <token>`"),
    ] {
        let auth = auth.map(|a| a.parse::<tonic::metadata::MetadataValue<_>>().unwrap());
        let mut client = SparkConnectServiceClient::with_interceptor(
            channel.clone(),
            move |mut req: tonic::Request<()>| {
                if let Some(a) = &auth {
                    req.metadata_mut().insert("authorization", a.clone());
                }
                Ok(req)
            },
        );
        let err = tokio::time::timeout(BOUND, client.execute_plan(sql_request(&range_sql(10))))
            .await
            .expect("refusal hung")
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
        assert!(err.message().contains(says), "{err:?}");
        assert!(!err.message().contains("t0ken"), "{err:?}");
    }
    // Refused at the guard: nothing reached the server.
    assert_eq!(server.calls().execute, 0);
    let stats = guard.stats();
    assert_eq!(stats.refused, 4);
    assert_eq!(stats.ended_with("UNAUTHENTICATED"), 4);
    // The right token is served.
    let mut client =
        SparkConnectServiceClient::with_interceptor(channel, |mut req: tonic::Request<()>| {
            req.metadata_mut().insert(
                "authorization",
                format!("Bearer {CLIENT_TOKEN}").parse().unwrap(),
            );
            Ok(req)
        })
        .max_decoding_message_size(usize::MAX);
    let out = crate::support::drain(&mut client, sql_request(&range_sql(10_000))).await;
    crate::support::assert_exact(&out, 10_000);
    guard.shutdown().await;
}

#[test]
fn bad_tls_files_and_tokens_are_typed_errors_that_name_the_problem() {
    let ca = Ca::new("guard CA");
    let (cert, key) = ca.leaf("localhost");
    let err = GuardTls::from_pem("not a certificate", key.clone()).unwrap_err();
    assert!(
        matches!(
            err,
            GuardError::Tls {
                what: "certificate",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("no CERTIFICATE block"), "{err}");
    let err = GuardTls::from_pem(cert.clone(), "garbage").unwrap_err();
    assert!(
        matches!(
            err,
            GuardError::Tls {
                what: "private key",
                ..
            }
        ),
        "{err}"
    );
    let err =
        GuardTls::from_pem_files("/nonexistent/cert.pem", "/nonexistent/key.pem").unwrap_err();
    assert!(err.to_string().contains("/nonexistent/cert.pem"), "{err}");
    let tls = GuardTls::from_pem(cert, key.clone()).unwrap();
    let err = tls.clone().client_ca_pem("nope").unwrap_err();
    assert!(
        matches!(
            err,
            GuardError::Tls {
                what: "client CA",
                ..
            }
        ),
        "{err}"
    );
    // The key is never shown.
    let key_line = key.lines().nth(1).unwrap();
    assert!(!format!("{tls:?}").contains(key_line));
    let err = ClientToken::from_file("/nonexistent/token").unwrap_err();
    assert!(err.to_string().contains("/nonexistent/token"), "{err}");
    assert!(ClientToken::new("two words").is_err());
}
