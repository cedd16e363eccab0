//! `ReconnectingChannel` over real loopback sockets: a request marked
//! `FreshConnection` goes over a newly dialled connection, streams already
//! open on the old one run to their end, and later requests stay on the new one.

use std::time::Duration;

use spark_connect_retry::proto::execute_plan_response::ResponseType;
use spark_connect_retry::proto::{ReleaseExecuteRequest, release_execute_request};
use spark_connect_retry::reconnect::{FreshConnection, ReconnectingChannel};
use spark_connect_retry::transport::spark_client;
use spark_connect_testkit::plans;
use tokio::time::timeout;

use crate::support::proxied::proxied_server;

const SESSION: &str = "0c7d4b1e-5a3f-4e2d-8b6a-9f8e7d6c5b4a";
const BOUND: Duration = Duration::from_secs(10);

fn release_all(operation_id: &str) -> ReleaseExecuteRequest {
    ReleaseExecuteRequest {
        session_id: SESSION.into(),
        operation_id: operation_id.into(),
        release: Some(release_execute_request::Release::ReleaseAll(
            release_execute_request::ReleaseAll {},
        )),
        ..Default::default()
    }
}

#[tokio::test]
async fn fresh_connection_on_request_while_old_streams_finish() {
    // The proxy counts the TCP connections the channel dials.
    let (_server, proxy) = proxied_server().await;
    let endpoint =
        tonic::transport::Endpoint::from_shared(format!("http://{}", proxy.local_addr())).unwrap();
    let channel = ReconnectingChannel::new(endpoint);
    let mut client = spark_client(channel.clone());

    // A stream on the first connection; read its first response.
    let request = plans::execute_request(SESSION, plans::range(Some(0), 10_000, 1));
    let mut old = timeout(BOUND, client.execute_plan(request))
        .await
        .unwrap()
        .unwrap()
        .into_inner();
    let first = timeout(BOUND, old.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let op = first.operation_id.clone();
    assert_eq!(proxy.stats().connections, 1);

    // A request marked FreshConnection dials a second connection.
    let mut marked = tonic::Request::new(release_all("9d5a3c1b-7e2f-4a6d-8c0b-1e2f3a4b5c6d"));
    marked.extensions_mut().insert(FreshConnection);
    timeout(BOUND, client.release_execute(marked))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(channel.reconnects(), 1);
    assert_eq!(proxy.stats().connections, 2);

    // The old stream still runs to its end on the old connection: all 100
    // batches of 100 rows (a non-reattachable execution has no ResultComplete).
    let mut batches = u64::from(matches!(
        first.response_type,
        Some(ResponseType::ArrowBatch(_))
    ));
    while let Some(resp) = timeout(BOUND, old.message()).await.unwrap().unwrap() {
        batches += u64::from(matches!(
            resp.response_type,
            Some(ResponseType::ArrowBatch(_))
        ));
    }
    assert_eq!(
        batches, 100,
        "the stream on the old connection was cut short"
    );

    // Unmarked requests use the new connection: no third one.
    timeout(BOUND, client.release_execute(release_all(&op)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(channel.reconnects(), 1);
    assert_eq!(proxy.stats().connections, 2);
    proxy.shutdown().await;
}

/// With a connector, every connection (the first and each fresh one) is
/// dialled by it, and nothing else dials: the endpoint's host is a name
/// no resolver knows.
#[tokio::test]
async fn a_connector_dials_every_connection() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use spark_connect_retry::connector::Connector;

    let server = spark_connect_testkit::TestServer::start().await.unwrap();
    let addr = server.addr();
    let dials = Arc::new(AtomicU64::new(0));
    let seen = dials.clone();
    let connector = Connector::new(tower::service_fn(move |uri: http::Uri| {
        seen.fetch_add(1, Ordering::SeqCst);
        async move {
            assert_eq!(uri.host(), Some("spark.invalid"), "the endpoint's URI");
            tokio::net::TcpStream::connect(addr)
                .await
                .map(hyper_util::rt::TokioIo::new)
        }
    }));
    let endpoint = tonic::transport::Endpoint::from_static("http://spark.invalid:15002");
    let channel = ReconnectingChannel::with_connector(endpoint, connector);
    let mut client = spark_client(channel.clone());

    // A query answered over the first connection (the server creates the
    // session), then a release over a fresh one.
    let request = plans::execute_request(SESSION, plans::range(Some(0), 10, 1));
    let mut stream = timeout(BOUND, client.execute_plan(request))
        .await
        .unwrap()
        .unwrap()
        .into_inner();
    let first = timeout(BOUND, stream.message()).await.unwrap().unwrap();
    let op = first.expect("a first response").operation_id;
    assert_eq!(dials.load(Ordering::SeqCst), 1);
    let mut marked = tonic::Request::new(release_all(&op));
    marked.extensions_mut().insert(FreshConnection);
    timeout(BOUND, client.release_execute(marked))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        dials.load(Ordering::SeqCst),
        2,
        "a fresh connection is dialled by the connector"
    );
    assert_eq!(channel.reconnects(), 1);
    server.shutdown().await;
}
