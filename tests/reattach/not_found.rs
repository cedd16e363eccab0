//! An ExecutePlan that never reached the server, against the embedded
//! server: re-sent, never reattached, while the transport proves it unsent.
//! (The table of each server's "not found" wording and the core's rule are
//! unit-tested beside them, in `reattach::not_found`.)

use crate::support::policies;
use spark_connect_retry::retrying::PySparkRetrying;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::Int64Array;
use futures_util::future::BoxFuture;
use spark_connect_retry::proto::execute_plan_response::ResponseType;
use spark_connect_retry::reattach::{ReattachOptions, ReattachableExecution};
use spark_connect_retry::retrying::{Retrying, Sleeper};
use spark_connect_retry::transport::spark_client;
use spark_connect_testkit::{TestServer, plans};
use tokio::net::{TcpSocket, TcpStream};
use tokio_stream::StreamExt;

/// Sleeps not at all; on the `at`-th sleep it starts listening on the
/// reserved port and forwards each connection to `upstream`.
#[derive(Debug, Clone)]
struct ListenOnSleep {
    at: usize,
    sleeps: Arc<Mutex<usize>>,
    reserved: Arc<Mutex<Option<TcpSocket>>>,
    upstream: SocketAddr,
}

impl Sleeper for ListenOnSleep {
    fn sleep(&self, _: Duration) -> BoxFuture<'static, ()> {
        let mut n = self.sleeps.lock().unwrap();
        *n += 1;
        if *n == self.at {
            let socket = self.reserved.lock().unwrap().take().unwrap();
            let listener = socket.listen(64).unwrap();
            let upstream = self.upstream;
            tokio::spawn(async move {
                while let Ok((mut down, _)) = listener.accept().await {
                    tokio::spawn(async move {
                        if let Ok(mut up) = TcpStream::connect(upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                        }
                    });
                }
            });
        }
        Box::pin(std::future::ready(()))
    }
}

#[tokio::test]
async fn refused_until_listening_sends_execute_again_and_never_reattaches() {
    let server = TestServer::builder()
        .rows_per_batch(1000)
        .start()
        .await
        .unwrap();
    // Bound, not listening: connects are refused (ECONNREFUSED) while the
    // port stays ours, until the second backoff starts the listener.
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    let sleeper = ListenOnSleep {
        at: 2,
        sleeps: Arc::default(),
        reserved: Arc::new(Mutex::new(Some(socket))),
        upstream: server.addr(),
    };
    let retrying = Retrying::pyspark_with(vec![policies::test_policy()])
        .with_seed(3)
        .with_sleeper(sleeper.clone());
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let request = plans::execute_request(
        "6f1c6a7e-2b9d-4c1a-9d8e-0a1b2c3d4e5f",
        plans::range(Some(0), 50_000, 1),
    );
    let mut exec = ReattachableExecution::new(
        spark_client(channel),
        request,
        retrying,
        ReattachOptions::default(),
    )
    .unwrap();
    let stats = exec.stats_handle();
    let mut ids = Vec::new();
    while let Some(item) = tokio::time::timeout(Duration::from_secs(30), exec.next())
        .await
        .expect("execution hung")
    {
        if let Some(ResponseType::ArrowBatch(b)) = item.unwrap().response_type {
            for batch in plans::decode(&b).unwrap() {
                let col = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap();
                ids.extend(col.values().iter().copied());
            }
        }
    }
    assert!(ids.iter().copied().eq(0..50_000), "rows: {}", ids.len());
    let counters = stats.snapshot();
    assert_eq!(*sleeper.sleeps.lock().unwrap(), 2);
    assert_eq!(
        (counters.re_executes, counters.reattaches),
        (2, 0),
        "{counters:?}"
    );
    let calls = server.calls();
    assert_eq!((calls.execute, calls.reattach), (1, 0), "{calls:?}");
}
