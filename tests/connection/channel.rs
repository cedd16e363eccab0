//! Tests for `session::channel` against a real tonic server on loopback.

use std::net::SocketAddr;
use std::time::Duration;

use spark_connect_retry::proto::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_retry::proto::{ConfigRequest, ConfigResponse, KeyValue};
use spark_connect_retry::session::channel::{AuthInterceptor, ChannelBuilder, ChannelError};
use spark_connect_retry::session::conn_string::ConnectionString;
use spark_connect_testkit::{SparkConnectService, SparkConnectServiceServer};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::metadata::KeyAndValueRef;
use tonic::service::Interceptor;
use tonic::{Code, Request, Response, Status};

/// The generated client over `channel` with the connection string's
/// interceptor and message size, as a user wires `ChannelBuilder`'s channel.
fn client(
    config: &ConnectionString,
    channel: tonic::transport::Channel,
) -> SparkConnectServiceClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, AuthInterceptor>,
> {
    SparkConnectServiceClient::with_interceptor(channel, AuthInterceptor::new(config))
        .max_decoding_message_size(config.max_message_size())
        .max_encoding_message_size(config.max_message_size())
}

/// Answers `Config` with every received header as a pair (binary values as hex), plus the
/// request's `client_type` under the key `client_type`. Other RPCs are unimplemented.
struct Echo;

#[tonic::async_trait]
impl SparkConnectService for Echo {
    async fn config(
        &self,
        request: Request<ConfigRequest>,
    ) -> Result<Response<ConfigResponse>, Status> {
        let mut pairs = Vec::new();
        for entry in request.metadata().iter() {
            let (key, value) = match entry {
                KeyAndValueRef::Ascii(k, v) => (
                    k.to_string(),
                    v.to_str().unwrap_or("<non-ascii>").to_string(),
                ),
                KeyAndValueRef::Binary(k, v) => {
                    let bytes = v
                        .to_bytes()
                        .map_err(|_| Status::invalid_argument("bad -bin"))?;
                    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                    (k.to_string(), hex)
                }
            };
            pairs.push(KeyValue {
                key,
                value: Some(value),
            });
        }
        let req = request.into_inner();
        pairs.push(KeyValue {
            key: "client_type".into(),
            value: req.client_type.clone(),
        });
        // A large response on demand, to test the decoding limit.
        if req.session_id == "big" {
            pairs.push(KeyValue {
                key: "big".into(),
                value: Some("x".repeat(10_000)),
            });
        }
        Ok(Response::new(ConfigResponse {
            session_id: req.session_id,
            server_side_session_id: "server".into(),
            pairs,
            warnings: vec![],
        }))
    }
}

/// Starts the echo server on `bind` (port 0) and returns its address.
async fn start_server(bind: &str) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(bind).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(SparkConnectServiceServer::new(Echo))
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await;
    });
    Ok(addr)
}

fn parse(s: &str) -> ConnectionString {
    ConnectionString::parse_with_env(s, |_| None).unwrap()
}

/// The string's session id, or a fixed one (sessions draw theirs at build).
fn session_id(cs: &ConnectionString) -> String {
    cs.session_id().map_or_else(
        || "00112233-4455-6677-8899-aabbccddeeff".to_owned(),
        |u| u.to_string(),
    )
}

fn config_request(cs: &ConnectionString) -> ConfigRequest {
    ConfigRequest {
        session_id: session_id(cs),
        client_type: Some(cs.client_type()),
        ..Default::default()
    }
}

fn pair<'a>(resp: &'a ConfigResponse, key: &str) -> Option<&'a str> {
    resp.pairs
        .iter()
        .find(|p| p.key == key)
        .and_then(|p| p.value.as_deref())
}

async fn echo(cs: &ConnectionString) -> Result<ConfigResponse, Status> {
    let channel = ChannelBuilder::new(cs).connect_lazy().unwrap();
    let mut c = client(cs, channel);
    c.config(config_request(cs)).await.map(Response::into_inner)
}

#[tokio::test]
async fn bearer_and_metadata_arrive() {
    let addr = start_server("127.0.0.1:0").await.unwrap();
    // `localhost` + token = plaintext with the bearer header, as upstream.
    let cs = parse(&format!(
        "sc://localhost:{}/;token=s3cr3t;x-team=blue;X-Trace-bin=AAEC;user_agent=tester",
        addr.port()
    ));
    assert!(!cs.use_tls());
    let resp = echo(&cs).await.unwrap();
    assert_eq!(pair(&resp, "authorization"), Some("Bearer s3cr3t"));
    assert_eq!(pair(&resp, "x-team"), Some("blue"));
    assert_eq!(pair(&resp, "x-trace-bin"), Some("000102"));
    let client_type = pair(&resp, "client_type").unwrap();
    assert!(
        client_type.starts_with("tester spark/4.3.0 os/"),
        "{client_type}"
    );
    // The HTTP user-agent carries the client type too (tonic appends its own).
    let ua = pair(&resp, "user-agent").unwrap();
    assert!(ua.starts_with(client_type), "{ua}");
}

#[tokio::test]
async fn no_token_no_authorization_header() {
    let addr = start_server("127.0.0.1:0").await.unwrap();
    let cs = parse(&format!("sc://127.0.0.1:{}/", addr.port()));
    let resp = echo(&cs).await.unwrap();
    assert_eq!(pair(&resp, "authorization"), None);
    assert_eq!(resp.session_id, session_id(&cs));
}

#[tokio::test]
async fn custom_authorization_without_token() {
    let addr = start_server("127.0.0.1:0").await.unwrap();
    let cs = parse(&format!(
        "sc://127.0.0.1:{}/;authorization=Basic%20eDp5",
        addr.port()
    ));
    let resp = echo(&cs).await.unwrap();
    assert_eq!(pair(&resp, "authorization"), Some("Basic eDp5"));
}

#[tokio::test]
async fn request_headers_win_over_interceptor() {
    let addr = start_server("127.0.0.1:0").await.unwrap();
    let cs = parse(&format!(
        "sc://localhost:{}/;token=old;x-team=blue",
        addr.port()
    ));
    let mut c = client(&cs, ChannelBuilder::new(&cs).connect_lazy().unwrap());
    let mut req = Request::new(config_request(&cs));
    req.metadata_mut()
        .insert("authorization", "Bearer refreshed".parse().unwrap());
    req.metadata_mut().insert("x-team", "red".parse().unwrap());
    let resp = c.config(req).await.unwrap().into_inner();
    assert_eq!(pair(&resp, "authorization"), Some("Bearer refreshed"));
    assert_eq!(pair(&resp, "x-team"), Some("red"));
}

/// A raw HTTP/2 peer on loopback that answers the handshake and every
/// PING, and reports each PING the client sends (its 8-byte payload).
async fn ping_counting_peer() -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<[u8; 8]>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let (settings, ping, ack) = (0x4u8, 0x6u8, 0x1u8);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut preface = [0u8; 24];
        tcp.read_exact(&mut preface).await.unwrap();
        assert_eq!(preface, PREFACE);
        // Our SETTINGS (none), as the server's first frame.
        tcp.write_all(&[0, 0, 0, settings, 0, 0, 0, 0, 0])
            .await
            .unwrap();
        loop {
            let mut head = [0u8; 9];
            if tcp.read_exact(&mut head).await.is_err() {
                return; // the client closed the connection
            }
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let mut payload = vec![0u8; len];
            tcp.read_exact(&mut payload).await.unwrap();
            let (kind, flags) = (head[3], head[4]);
            if kind == settings && flags & ack == 0 {
                tcp.write_all(&[0, 0, 0, settings, ack, 0, 0, 0, 0])
                    .await
                    .unwrap();
            } else if kind == ping && flags & ack == 0 {
                let mut pong = vec![0, 0, 8, ping, ack, 0, 0, 0, 0];
                pong.extend_from_slice(&payload);
                tcp.write_all(&pong).await.unwrap();
                let _ = tx.send(<[u8; 8]>::try_from(&payload[..]).unwrap());
            }
        }
    });
    (addr, rx)
}

/// The keepalive settings reach the wire: on an idle connection (no call
/// ever made), a raw HTTP/2 peer sees the client's PINGs. Then calls over
/// a keepalive channel, and with keepalive disabled, still work.
#[tokio::test]
async fn keepalive_settings_do_not_break_calls() {
    let (peer, mut pings) = ping_counting_peer().await;
    let cs = parse(&format!(
        "sc://127.0.0.1:{}/;grpc_keepalive_time_ms=50;grpc_keepalive_timeout_ms=1000;\
         grpc_keepalive_without_calls=true",
        peer.port()
    ));
    let _idle = ChannelBuilder::new(&cs).connect().await.unwrap();
    for _ in 0..2 {
        // A hang guard, not a timing check: without keepalive no PING comes.
        let ping = tokio::time::timeout(Duration::from_secs(10), pings.recv()).await;
        assert!(matches!(ping, Ok(Some(_))), "no keepalive PING: {ping:?}");
    }

    let addr = start_server("127.0.0.1:0").await.unwrap();
    let cs = parse(&format!(
        "sc://127.0.0.1:{}/;grpc_keepalive_time_ms=50;grpc_keepalive_timeout_ms=1000;\
         grpc_keepalive_without_calls=true",
        addr.port()
    ));
    let mut c = client(&cs, ChannelBuilder::new(&cs).connect_lazy().unwrap());
    for _ in 0..3 {
        c.config(config_request(&cs)).await.unwrap();
    }
    let disabled = parse(&format!(
        "sc://127.0.0.1:{}/;grpc_keepalive_enabled=false",
        addr.port()
    ));
    echo(&disabled).await.unwrap();
}

#[tokio::test]
async fn max_message_size_applies_both_ways() {
    let addr = start_server("127.0.0.1:0").await.unwrap();
    let cs = parse(&format!(
        "sc://127.0.0.1:{}/;grpc_max_message_size=1000",
        addr.port()
    ));
    let mut c = client(&cs, ChannelBuilder::new(&cs).connect_lazy().unwrap());
    // Small request, small response: fine.
    c.config(config_request(&cs)).await.unwrap();
    // Response over the limit.
    let mut req = config_request(&cs);
    req.session_id = "big".into();
    let err = c.config(req).await.unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    // Request over the limit. tonic encodes the body lazily, so the encode error resets
    // the stream locally and surfaces as INTERNAL "h2 protocol error" (tonic 0.14.9), not as
    // OUT_OF_RANGE. Either way it fails on the client and is not a transport error.
    let mut req = config_request(&cs);
    req.client_observed_server_side_session_id = Some("y".repeat(2000));
    let err = c.config(req).await.unwrap_err();
    assert!(
        matches!(err.code(), Code::OutOfRange | Code::Internal),
        "{err:?}"
    );
}

#[tokio::test]
async fn ipv6_loopback() {
    let Ok(addr) = start_server("[::1]:0").await else {
        eprintln!("no IPv6 loopback here; skipped");
        return;
    };
    let cs = parse(&format!("sc://[::1]:{}/;x-v=6", addr.port()));
    assert_eq!(
        ChannelBuilder::new(&cs)
            .endpoint()
            .unwrap()
            .uri()
            .to_string(),
        format!("http://[::1]:{}/", addr.port())
    );
    let resp = echo(&cs).await.unwrap();
    assert_eq!(pair(&resp, "x-v"), Some("6"));
}

#[tokio::test]
async fn endpoint_settings() {
    let cs = parse("sc://h:1/");
    let ep = ChannelBuilder::new(&cs).endpoint().unwrap();
    assert_eq!(ep.uri().to_string(), "http://h:1/");
    // The default connect timeout: 10 s.
    assert_eq!(ep.get_connect_timeout(), Some(Duration::from_secs(10)));
    assert!(ep.get_tcp_nodelay());
    let ep = ChannelBuilder::new(&cs)
        .connect_timeout(Duration::from_millis(1234))
        .endpoint()
        .unwrap();
    assert_eq!(ep.get_connect_timeout(), Some(Duration::from_millis(1234)));
}

#[tokio::test]
async fn eager_connect_failure_is_typed() {
    // Bind then drop, so the port is (very likely) closed.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cs = parse(&format!("sc://127.0.0.1:{port}/"));
    let err = ChannelBuilder::new(&cs).connect().await.unwrap_err();
    assert!(matches!(err, ChannelError::Connect(_)), "{err:?}");
    assert!(std::error::Error::source(&err).is_some());
    // A lazy channel reports it per call instead, as UNAVAILABLE.
    let status = echo(&cs).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
}

#[cfg(feature = "tls")]
#[tokio::test]
async fn tls_endpoint() {
    for s in [
        "sc://spark.example.com/;use_ssl=true",
        "sc://spark.example.com/;token=t",
    ] {
        let cs = parse(s);
        match ChannelBuilder::new(&cs).endpoint() {
            Ok(ep) => assert_eq!(ep.uri().scheme_str(), Some("https")),
            // No native roots on this machine: a typed error, never plaintext.
            Err(ChannelError::Endpoint(_)) => {}
            Err(e) => panic!("{s}: {e:?}"),
        }
    }
}

#[cfg(feature = "tls")]
#[tokio::test]
async fn tls_to_plaintext_server_fails_cleanly() {
    let addr = start_server("127.0.0.1:0").await.unwrap();
    let cs = parse(&format!("sc://127.0.0.1:{}/;use_ssl=true", addr.port()));
    let Ok(channel) = ChannelBuilder::new(&cs).connect_lazy() else {
        return; // no native roots here
    };
    let mut c = client(&cs, channel);
    let res = tokio::time::timeout(Duration::from_secs(5), c.config(config_request(&cs))).await;
    let status = res
        .expect("TLS handshake failure must not hang")
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
}

#[cfg(not(feature = "tls"))]
#[tokio::test]
async fn tls_without_feature_is_an_error() {
    for s in ["sc://h/;use_ssl=true", "sc://h/;token=t"] {
        let cs = parse(s);
        assert!(matches!(
            ChannelBuilder::new(&cs).endpoint(),
            Err(ChannelError::TlsFeatureDisabled)
        ));
    }
    // Plaintext still works.
    assert!(
        ChannelBuilder::new(&parse("sc://localhost/;token=t"))
            .endpoint()
            .is_ok()
    );
}

#[test]
fn interceptor_redacts_and_marks_sensitive() {
    let cs = parse("sc://localhost/;token=TopSecret99;x-api-key=HeaderSecret");
    let mut auth = AuthInterceptor::new(&cs);
    let dbg = format!("{auth:?}");
    assert!(
        !dbg.contains("TopSecret99") && !dbg.contains("HeaderSecret"),
        "{dbg}"
    );
    assert!(dbg.contains("x-api-key"));
    let req = auth.call(Request::new(())).unwrap();
    let v = req.metadata().get("authorization").unwrap();
    assert!(v.is_sensitive());
    assert!(req.metadata().get("x-api-key").unwrap().is_sensitive());
    assert!(!format!("{:?}", req.metadata()).contains("TopSecret99"));
    let builder_dbg = format!("{:?}", ChannelBuilder::new(&cs));
    assert!(!builder_dbg.contains("TopSecret99"), "{builder_dbg}");

    let mut none = AuthInterceptor::new(&parse("sc://localhost"));
    assert!(none.call(Request::new(())).unwrap().metadata().is_empty());
}

#[test]
fn every_accepted_plaintext_string_builds_an_endpoint() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    let long_host = vec!["a".repeat(63); 3].join(".") + ".b";
    let fixed = [
        "sc://my_host.example.com".to_string(),
        format!("sc://{long_host}:65535"),
        "sc://[2001:db8::1]:1/".to_string(),
        "sc://SPARK-45486".to_string(),
        "sc://h/;user_agent=j%C3%B6rg%0A".to_string(), // not a valid HTTP user-agent
        "sc://h/;x-bin=;y=".to_string(),
    ];
    for s in &fixed {
        let cs = parse(s);
        assert!(ChannelBuilder::new(&cs).endpoint().is_ok(), "{s}");
    }

    let mut rng = StdRng::seed_from_u64(0x5eed_0004);
    let alphabet: Vec<char> = ":/;=%[]-_.aZ09".chars().collect();
    let base = "sc://a-b.c:80/;user_agent=u;k=v;k-bin=AA";
    let mut built = 0;
    for _ in 0..5_000 {
        let mut chars: Vec<char> = base.chars().collect();
        for _ in 0..rng.random_range(1..=3) {
            let at = rng.random_range(0..chars.len());
            if rng.random_bool(0.5) {
                chars[at] = alphabet[rng.random_range(0..alphabet.len())];
            } else {
                chars.remove(at);
            }
        }
        let s: String = chars.into_iter().collect();
        if let Ok(cs) = ConnectionString::parse_with_env(&s, |_| None)
            && !cs.use_tls()
        {
            let ep = ChannelBuilder::new(&cs).endpoint();
            assert!(ep.is_ok(), "{s}: {ep:?}");
            built += 1;
        }
    }
    assert!(built > 500, "only {built} endpoints built");
}

#[tokio::test]
async fn non_ascii_user_agent_still_calls() {
    let addr = start_server("127.0.0.1:0").await.unwrap();
    let cs = parse(&format!(
        "sc://127.0.0.1:{}/;user_agent=j%C3%B6rg",
        addr.port()
    ));
    let resp = echo(&cs).await.unwrap();
    assert!(
        pair(&resp, "client_type")
            .unwrap()
            .starts_with("jörg spark/")
    );
}
