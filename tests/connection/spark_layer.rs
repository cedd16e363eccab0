//! The generated Spark Connect client through `RetryLayer` against the
//! embedded Spark Connect server, and a `SparkSession` over a layered channel.

use spark_connect_retry::layer::{RetryLayer, SparkConnectLayer};
use spark_connect_retry::proto::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_retry::proto::{self, ConfigRequest};
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_retry::retrying::Retrying;
use spark_connect_retry::session::SparkSession;
use spark_connect_retry::transport::grpc_channel;
use spark_connect_testkit::{Fault, Rpc, TestServer, plans};
use tonic_retry::retrying::RecordingSleeper;
use tower::ServiceBuilder;

fn layer(sleeper: &RecordingSleeper) -> RetryLayer {
    RetryLayer::spark_connect(
        Retrying::pyspark()
            .with_sleeper(sleeper.clone())
            .with_seed(2),
    )
}

fn config_get(session: &str) -> ConfigRequest {
    ConfigRequest {
        session_id: session.to_owned(),
        operation: Some(proto::config_request::Operation {
            op_type: Some(proto::config_request::operation::OpType::GetAll(
                proto::config_request::GetAll { prefix: None },
            )),
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn generated_client_through_the_layer_retries_unary_rpcs() {
    let server = TestServer::start().await.unwrap();
    server
        .faults()
        .push(Fault::unavailable().on(Rpc::Config).times(2));
    server
        .faults()
        .push(Fault::reset_connection().on(Rpc::Config));
    let sleeper = RecordingSleeper::new();
    let layer = layer(&sleeper);
    let stats = layer.stats_handle();
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect_lazy();
    let mut client =
        SparkConnectServiceClient::new(ServiceBuilder::new().layer(layer).service(channel));
    let session = plans::new_id();
    client.config(config_get(&session)).await.unwrap();
    assert_eq!(sleeper.sleeps_ms(), vec![50, 200, 800]);
    assert_eq!(server.calls().config, 4);
    let s = stats.snapshot();
    assert_eq!((s.calls, s.retries), (1, 3));
    // The server saw the attempt count on the retries.
    let attempts: Vec<_> = server
        .recorded_calls()
        .iter()
        .filter(|c| c.rpc == Rpc::Config)
        .map(|c| {
            c.metadata
                .get("grpc-previous-rpc-attempts")
                .map(|v| v.to_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(
        attempts,
        vec![None, Some("1".into()), Some("2".into()), Some("3".into())]
    );
}

#[tokio::test]
async fn execute_plan_is_not_replayed_by_the_layer() {
    let server = TestServer::start().await.unwrap();
    server
        .faults()
        .push(Fault::unavailable().on(Rpc::ExecutePlan));
    let sleeper = RecordingSleeper::new();
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect_lazy();
    let mut client = SparkConnectServiceClient::new(
        ServiceBuilder::new()
            .layer(layer(&sleeper))
            .service(channel),
    );
    let req = plans::execute_request(&plans::new_id(), plans::range(None, 10, 1));
    let status = match client.execute_plan(req).await {
        Err(s) => s,
        Ok(resp) => resp.into_inner().message().await.unwrap_err(),
    };
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert_eq!(server.calls().execute, 1);
    assert!(sleeper.sleeps().is_empty());
}

#[tokio::test]
async fn a_session_over_a_layered_channel() {
    let server = TestServer::builder()
        .rows_per_batch(1000)
        .start()
        .await
        .unwrap();
    server
        .faults()
        .push(Fault::unavailable().on(Rpc::AnalyzePlan));
    server.faults().push(
        Fault::reset_connection()
            .on(Rpc::ExecutePlan)
            .after_responses(3),
    );
    let sleeper = RecordingSleeper::new();
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect_lazy();
    let layered = ServiceBuilder::new()
        .layer(layer(&sleeper))
        .service(channel);
    let spark = SparkSession::builder()
        .remote(server.remote())
        .channel(grpc_channel(layered))
        .retrying(Retrying::pyspark().with_sleeper(sleeper.clone()))
        .build()
        .unwrap();
    // The layer absorbs the UNAVAILABLE below the session's own loop...
    assert_eq!(spark.spark_version().await.unwrap(), "4.3.0");
    assert_eq!(sleeper.sleeps_ms(), vec![50]);
    // ...and the cut stream is reattached by the session's execution.
    let err = spark.range(0, 20_000, 1).unwrap().collect().await;
    let batches = match err {
        Ok(b) => b,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 20_000);
}
