//! Many clients through one guard while the upstream connection is cut:
//! every result exact.

use spark_connect_guard::Guard;
use spark_connect_retry::layer::ReattachLayer;
use spark_connect_stub::spark::connect::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_testkit::{Direction, FaultProxy, TestServer};
use tonic_retry::retrying::RecordingSleeper;

use crate::support::{assert_exact, drain, range_sql, retrying, sql_request};

const CLIENTS: usize = 64;
const ROWS: i64 = 40_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_clients_through_upstream_cuts_are_all_exact() {
    let server = TestServer::builder()
        .rows_per_batch(2_000)
        .start()
        .await
        .unwrap();
    // Every upstream connection is cut after 3 MiB towards the guard, four
    // times: each cut breaks every stream on it at once.
    let proxy = FaultProxy::builder(server.addr())
        .cut_after_bytes(Direction::ServerToClient, 3 * 1024 * 1024)
        .max_cuts(4)
        .start()
        .await
        .unwrap();
    let sleeper = RecordingSleeper::new();
    let guard = Guard::builder(proxy.remote())
        .layer(ReattachLayer::new().retrying(retrying(&sleeper)))
        .start()
        .await
        .unwrap();
    let addr = guard.local_addr();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            tokio::spawn(async move {
                // A plain stub, one connection each: the guard alone makes
                // the result exact.
                let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                    .unwrap()
                    .connect_lazy();
                let mut client =
                    SparkConnectServiceClient::new(channel).max_decoding_message_size(usize::MAX);
                drain(&mut client, sql_request(&range_sql(ROWS))).await
            })
        })
        .collect();
    for c in clients {
        assert_exact(&c.await.unwrap(), ROWS);
    }
    assert_eq!(proxy.stats().cuts, 4, "{:?}", proxy.stats());
    assert!(server.calls().reattach >= CLIENTS as u64);
    let stats = guard.stats();
    assert!(stats.connections_accepted >= CLIENTS as u64, "{stats:?}");
    assert_eq!(stats.ended_with("OK"), CLIENTS as u64, "{stats:?}");
    assert_eq!(stats.open_calls, 0, "{stats:?}");
    // Nothing was released upstream: that is left to the clients.
    assert_eq!(server.release_requests().len(), 0);
    guard.shutdown().await;
    proxy.shutdown().await;
}
