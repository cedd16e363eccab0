//! `grpc.health.v1.Health` on the guard's port: SERVING while the upstream
//! answers, NOT_SERVING once it stops, SERVING again when a server listens
//! on the same port.

use std::net::SocketAddr;
use std::time::Duration;

use spark_connect_guard::{Guard, HealthCheck, SPARK_CONNECT_SERVICE};
use spark_connect_testkit::TestServer;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// The guard's answer for `service` (`Err`: the call's status).
pub async fn health(addr: SocketAddr, service: &str) -> Result<ServingStatus, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        HealthClient::new(channel).check(HealthCheckRequest {
            service: service.into(),
        }),
    )
    .await
    .expect("health check hung")?;
    Ok(answer.into_inner().status())
}

/// Waits, a bounded number of times, until the guard reports `want`.
pub async fn wait_for(addr: SocketAddr, want: ServingStatus) {
    let mut last = None;
    for _ in 0..400 {
        let now = health(addr, "").await.ok();
        if now == Some(want) {
            // Both names report the same.
            assert_eq!(health(addr, SPARK_CONNECT_SERVICE).await.ok(), Some(want));
            return;
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("health never became {want:?}; last {last:?}");
}

pub fn fast_checks() -> HealthCheck {
    HealthCheck::new()
        .interval(Duration::from_millis(50))
        .timeout(Duration::from_secs(2))
        .failure_threshold(2)
}

#[tokio::test]
async fn health_follows_the_upstream_down_and_back_on_the_same_port() {
    let server = TestServer::start().await.unwrap();
    let upstream = server.addr();
    let guard = Guard::builder(server.remote())
        .health_check(fast_checks())
        .start()
        .await
        .unwrap();
    wait_for(guard.local_addr(), ServingStatus::Serving).await;
    // A name the guard does not report is NOT_FOUND, as the protocol says.
    let unknown = health(guard.local_addr(), "no.such.Service").await;
    assert_eq!(unknown.unwrap_err().code(), tonic::Code::NotFound);

    server.shutdown().await;
    wait_for(guard.local_addr(), ServingStatus::NotServing).await;

    let again = TestServer::builder()
        .listen_addr(upstream)
        .start()
        .await
        .unwrap();
    wait_for(guard.local_addr(), ServingStatus::Serving).await;
    guard.shutdown().await;
    again.shutdown().await;
}

#[tokio::test]
async fn an_upstream_that_never_answers_is_not_serving_from_the_start() {
    // A port nothing listens on.
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = nobody.local_addr().unwrap();
    drop(nobody);
    let guard = Guard::builder(format!("sc://{addr}"))
        .health_check(fast_checks())
        .start()
        .await
        .unwrap();
    // Several checks fail; it never reports SERVING.
    for _ in 0..10 {
        assert_eq!(
            health(guard.local_addr(), "").await.unwrap(),
            ServingStatus::NotServing
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    guard.shutdown().await;
}

#[tokio::test]
async fn bad_health_options_are_refused_by_name() {
    let server = TestServer::start().await.unwrap();
    for (check, name) in [
        (
            HealthCheck::new().interval(Duration::ZERO),
            "health interval",
        ),
        (HealthCheck::new().timeout(Duration::ZERO), "health timeout"),
        (
            HealthCheck::new().failure_threshold(0),
            "health failure threshold",
        ),
    ] {
        let err = Guard::builder(server.remote())
            .health_check(check)
            .start()
            .await
            .unwrap_err();
        assert!(err.to_string().starts_with(name), "{err}");
    }
}
