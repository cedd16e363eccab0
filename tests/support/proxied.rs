//! A server that can die: the embedded server behind a fault proxy, whose
//! port a test closes for good (`FaultProxy::shutdown`, the "kill") or
//! whose TCP connections it counts, while the server itself stays up.

use spark_connect_testkit::{FaultProxy, TestServer};

/// The embedded server (100 rows per batch, so a long query is still
/// streaming when the test acts) and a fault proxy in front of it. Keep
/// both alive for the test; connect to the proxy.
pub async fn proxied_server() -> (TestServer, FaultProxy) {
    let server = TestServer::builder()
        .rows_per_batch(100)
        .start()
        .await
        .unwrap();
    let proxy = FaultProxy::builder(server.addr()).start().await.unwrap();
    (server, proxy)
}
