//! What the layer logs, for one call that is retried and one that gives up.
//!
//! A tonic-health server on loopback fails its first two calls with
//! UNAVAILABLE; a client through a layer built from a service config
//! retries them. A second client points at a closed port and spends its
//! budget. Run it with the layer's events on:
//!
//! ```sh
//! RUST_LOG=tonic_retry=debug cargo run -p tonic-retry --example events
//! ```
//!
//! Each attempt logs one `grpc attempt` event (numbered from 1, with the
//! wait it slept before the next); the attempt that ends the budget logs
//! one warning naming the method and the target.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tonic_health::ServingStatus;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};
use tonic_retry::layer::{RetryLayer, ServiceConfig};
use tonic_retry::retrying::Retrying;
use tower::ServiceBuilder;
use tracing_subscriber::EnvFilter;

const CONFIG: &str = r#"{
  "methodConfig": [{
    "name": [{"service": "grpc.health.v1.Health"}],
    "retryPolicy": {
      "maxAttempts": 4, "initialBackoff": "0.02s", "maxBackoff": "0.1s",
      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}"#;

type Client = HealthClient<tonic_retry::layer::RetryService<tonic::transport::Channel>>;

fn client(addr: std::net::SocketAddr) -> Result<Client, Box<dyn std::error::Error>> {
    // A tonic `Channel` keeps its address to itself: name it for the events.
    let layer =
        RetryLayer::from_service_config(&ServiceConfig::from_json(CONFIG)?, Retrying::default())
            .target(addr.to_string());
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?.connect_lazy();
    Ok(HealthClient::new(
        ServiceBuilder::new().layer(layer).service(channel),
    ))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| "tonic_retry=debug".into()),
        )
        .with_target(true)
        .init();

    // A health server whose first two calls fail as a restarting server's would.
    let reporter = HealthReporter::new();
    reporter
        .set_service_status("kv.Store", ServingStatus::Serving)
        .await;
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let health = HealthService::from_health_reporter(reporter);
    let flaky = HealthServer::with_interceptor(health, move |request| {
        if seen.fetch_add(1, Ordering::SeqCst) >= 2 {
            return Ok(request);
        }
        Err(tonic::Status::unavailable("restarting"))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(flaky)
            .serve_with_incoming(incoming),
    );

    let request = || HealthCheckRequest {
        service: "kv.Store".into(),
    };
    println!("-- a call retried twice");
    let status = client(addr)?.check(request()).await?.into_inner().status;
    assert_eq!(
        (status, calls.load(Ordering::SeqCst)),
        (1, 3),
        "SERVING on the third attempt"
    );

    println!("-- a call to a closed port");
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await?
        .local_addr()?;
    let err = client(closed)?.check(request()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    println!("-- the caller's error: {err}");
    Ok(())
}
