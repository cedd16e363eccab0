//! What Sail 0.7.2 does not support, stated as tests: each asserts Sail's
//! actual answer (docs/servers.md), so a gap is never a silent skip, and the
//! test fails the day Sail changes, when the crate and the docs must follow.

use std::time::Duration;

use spark_connect_retry::proto;
use spark_connect_retry::session::{SparkError, SparkSession};
use spark_connect_retry::transport::{SparkClient, spark_client};

use crate::arrow_data::{rows, schema};
use crate::{Srv, addr_of, assert_exact, query_rows_on, session};

/// A query that runs until interrupted (minutes on Sail).
const LONG_QUERY: &str = "SELECT count(*) AS c FROM range(0, 100000000000) a WHERE a.id % 7 = 3";

/// Sail's answer to anything about artifacts: ErrorInfo reason.
const UNSUPPORTED: &str = "java.lang.UnsupportedOperationException";

/// A raw client on Sail, outside the session (no retries, no enrichment).
fn raw_client(url: &str) -> SparkClient {
    let endpoint = format!("http://{}", addr_of(url));
    let channel = tonic::transport::Endpoint::from_shared(endpoint)
        .unwrap()
        .connect_lazy();
    spark_client(channel)
}

fn user() -> Option<proto::UserContext> {
    Some(proto::UserContext {
        user_id: "sail-gaps".to_owned(),
        ..Default::default()
    })
}

/// The ErrorInfo reason of `status`, or "" without one.
fn reason(status: &tonic::Status) -> String {
    spark_connect_retry::status::error_info(status)
        .map(|i| i.reason)
        .unwrap_or_default()
}

real_test!(
    sail_upload_above_the_inline_threshold_fails_naming_the_rpc,
    needs = [SAIL]
);
/// Gap "artifacts" (docs/servers.md): Sail has no artifacts, so data above
/// the inline threshold cannot be uploaded. Sail reports a 2 GiB threshold
/// (the client caps inlining at 64 MiB); a session-level threshold of 1 KiB
/// sends 16 kB down the artifact path, and the first artifact RPC fails with
/// a typed server error naming the RPC, never a partial DataFrame.
async fn sail_upload_above_the_inline_threshold_fails_naming_the_rpc() {
    let Some(url) = Srv::Sail.remote() else {
        return;
    };
    let spark = session(&url);
    let key = "spark.sql.session.localRelationCacheThreshold";
    assert_eq!(
        spark.config_get(&[key]).await.unwrap(),
        [Some("2147483647".to_owned())],
        "Sail's default: never cache"
    );
    spark.config_set(&[(key, "1024")]).await.unwrap();
    assert_eq!(
        spark.config_get(&[key]).await.unwrap(),
        [Some("1024".to_owned())]
    );
    let err = spark
        .create_dataframe(schema(), rows(1000, 100))
        .await
        .expect_err("Sail has no artifacts");
    eprintln!("Sail upload: {err}");
    let server = err.server_error().expect("a server error");
    assert_eq!(server.code(), tonic::Code::Internal, "{err:?}");
    assert_eq!(server.rpc(), Some("ArtifactStatus"), "{err:?}");
    assert_eq!(server.message(), "handle artifact statuses", "{err:?}");
    assert_eq!(reason(server.status()), UNSUPPORTED, "{err:?}");
    assert_eq!(server.error_class(), None, "{err:?}");
    // Below the threshold the same data is inlined and works.
    spark.config_unset(&[key]).await.unwrap();
    let df = spark
        .create_dataframe(schema(), rows(1000, 100))
        .await
        .unwrap();
    assert!(!df.is_cached());
    assert_eq!(
        df.collect()
            .await
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum::<usize>(),
        1000
    );
    spark.close().await.unwrap();
}

real_test!(sail_artifact_rpcs_are_unsupported, needs = [SAIL]);
/// Gap "artifacts" (docs/servers.md): ArtifactStatus and AddArtifacts, sent
/// raw, are `INTERNAL` with ErrorInfo reason `UnsupportedOperationException`.
async fn sail_artifact_rpcs_are_unsupported() {
    let Some(url) = Srv::Sail.remote() else {
        return;
    };
    let mut client = raw_client(&url);
    let session_id = uuid::Uuid::new_v4().to_string();
    let name = format!("cache/{}", "0".repeat(64));
    let status = client
        .artifact_status(proto::ArtifactStatusesRequest {
            session_id: session_id.clone(),
            user_context: user(),
            names: vec![name.clone()],
            ..Default::default()
        })
        .await
        .expect_err("unsupported");
    eprintln!("Sail ArtifactStatus: {status:?}");
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    assert_eq!(status.message(), "handle artifact statuses");
    assert_eq!(reason(&status), UNSUPPORTED, "{status:?}");

    use proto::add_artifacts_request::{ArtifactChunk, Batch, Payload, SingleChunkArtifact};
    let request = proto::AddArtifactsRequest {
        session_id,
        user_context: user(),
        payload: Some(Payload::Batch(Batch {
            artifacts: vec![SingleChunkArtifact {
                name,
                data: Some(ArtifactChunk {
                    data: b"abc".to_vec(),
                    crc: 0,
                }),
            }],
        })),
        ..Default::default()
    };
    let status = client
        .add_artifacts(tokio_stream::iter([request]))
        .await
        .expect_err("unsupported");
    eprintln!("Sail AddArtifacts: {status:?}");
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    assert_eq!(status.message(), "handle add artifacts");
    assert_eq!(reason(&status), UNSUPPORTED, "{status:?}");
}

real_test!(sail_fetch_error_details_is_unimplemented, needs = [SAIL]);
/// Gap "FetchErrorDetails" (docs/servers.md): `UNIMPLEMENTED`. The crate
/// never calls it on Sail, whose errors carry no errorId.
async fn sail_fetch_error_details_is_unimplemented() {
    let Some(url) = Srv::Sail.remote() else {
        return;
    };
    let mut client = raw_client(&url);
    let status = client
        .fetch_error_details(proto::FetchErrorDetailsRequest {
            session_id: uuid::Uuid::new_v4().to_string(),
            user_context: user(),
            error_id: uuid::Uuid::new_v4().to_string(),
            ..Default::default()
        })
        .await
        .expect_err("unimplemented");
    eprintln!("Sail FetchErrorDetails: {status:?}");
    assert_eq!(status.code(), tonic::Code::Unimplemented, "{status:?}");
    assert_eq!(status.message(), "fetch error details");
}

/// Interrupt `op` with `interrupt` until Sail reports it (the execution may
/// not be registered yet right after `sql()` returns).
async fn interrupt_until_reported<F, Fut>(op: &str, interrupt: F) -> Vec<String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<String>, SparkError>>,
{
    for _ in 0..50 {
        let ids = interrupt().await.unwrap();
        if ids.iter().any(|id| id == op) {
            return ids;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{op} was never reported interrupted");
}

/// After an interrupt Sail ends the open stream cleanly (OK, no
/// ResultComplete, no `OPERATION_CANCELED`); the client takes that for a
/// graceful end, reattaches, and Sail answers "operation not found": that
/// INTERNAL error is what the reader gets. Asserted here.
async fn assert_interrupted_stream_ends_with_not_found(
    mut stream: spark_connect_retry::session::ArrowStream,
) {
    let op = stream.operation_id().to_owned();
    let item = tokio::time::timeout(Duration::from_secs(60), stream.next_batch())
        .await
        .expect("the interrupted stream ends");
    let err = item.expect("an item").expect_err("an error, not rows");
    eprintln!("Sail interrupted stream: {err}; {:?}", stream.stats());
    let server = err.server_error().expect("a server error");
    assert_eq!(server.code(), tonic::Code::Internal, "{err:?}");
    assert_eq!(server.error_class(), None, "{err:?}");
    assert_eq!(
        server.message(),
        format!("invalid argument: operation not found: {op}"),
        "{err:?}"
    );
    // Named by the RPC that got the answer: the reattach.
    assert_eq!(server.rpc(), Some("ReattachExecute"), "{err:?}");
    assert_eq!(server.operation_id(), Some(op.as_str()), "{err:?}");
    let stats = stream.stats();
    assert_eq!((stats.graceful_ends, stats.reattaches), (1, 1), "{stats:?}");
    assert_eq!(stats.re_executes, 0, "never re-executed: {stats:?}");
    assert!(stream.next_batch().await.is_none(), "the stream has ended");
}

real_test!(
    sail_interrupt_tag_ends_the_stream_without_operation_canceled,
    needs = [SAIL]
);
/// Gap "tags, interrupt" (docs/servers.md): `interrupt_tag` returns the
/// tagged operation's id, only that one, and the stream ends cleanly on
/// Sail's side (no `OPERATION_CANCELED`); the reader gets Sail's "operation
/// not found" from the reattach that follows.
async fn sail_interrupt_tag_ends_the_stream_without_operation_canceled() {
    let Some(url) = Srv::Sail.remote() else {
        return;
    };
    let spark = session(&url);
    spark.add_tag("victim").unwrap();
    let tagged = spark.sql(LONG_QUERY).await.unwrap();
    spark.clear_tags();
    let op = tagged.operation_id().to_owned();
    let ids = interrupt_until_reported(&op, || spark.interrupt_tag("victim")).await;
    assert_eq!(ids, std::slice::from_ref(&op));
    // Sail forgets the interrupted operation: a second interrupt finds none.
    assert_eq!(
        spark.interrupt_tag("victim").await.unwrap(),
        Vec::<String>::new()
    );
    assert_interrupted_stream_ends_with_not_found(tagged).await;
    spark.close().await.unwrap();
}

real_test!(
    sail_interrupt_all_ends_the_stream_without_operation_canceled,
    needs = [SAIL]
);
/// Gap "tags, interrupt" (docs/servers.md): the same for `interrupt_all`.
async fn sail_interrupt_all_ends_the_stream_without_operation_canceled() {
    let Some(url) = Srv::Sail.remote() else {
        return;
    };
    let spark = session(&url);
    let stream = spark.sql(LONG_QUERY).await.unwrap();
    let op = stream.operation_id().to_owned();
    let ids = interrupt_until_reported(&op, || spark.interrupt_all()).await;
    assert_eq!(ids, [op]);
    assert_interrupted_stream_ends_with_not_found(stream).await;
    spark.close().await.unwrap();
}

real_test!(
    sail_server_side_session_id_is_the_client_session_id,
    needs = [SAIL]
);
/// Gap "`server_side_session_id`" (docs/servers.md): Sail answers with the
/// client's own session id, so a restarted Sail looks like the same session
/// and stale-session renewal never triggers.
async fn sail_server_side_session_id_is_the_client_session_id() {
    let Some(url) = Srv::Sail.remote() else {
        return;
    };
    let spark = session(&url);
    let stream = spark.sql("SELECT 1 AS one").await.unwrap();
    assert_eq!(stream.collect().await.unwrap()[0].num_rows(), 1);
    assert_eq!(spark.server_side_session_id(), Some(spark.session_id()));
    assert_eq!(spark.session_renewals(), 0);
    // A second session, same server: again its own id, not a server UUID.
    let other = SparkSession::connect(&url).unwrap();
    other.spark_version().await.unwrap();
    assert_eq!(other.server_side_session_id(), Some(other.session_id()));
    assert_ne!(other.session_id(), spark.session_id());
    spark.close().await.unwrap();
    other.close().await.unwrap();
}

real_test!(sail_has_no_graceful_stream_ends, needs = [SAIL]);
/// Gap "graceful stream end" (docs/servers.md): Sail never ends a stream on
/// its own before ResultComplete (no senderMaxStreamDuration/Size), so the
/// graceful-end path is not exercised on Sail: 2M rows (32 MB) in one segment.
async fn sail_has_no_graceful_stream_ends() {
    let Some(url) = Srv::Sail.remote() else {
        return;
    };
    let spark = session(&url);
    let (check, stats) = tokio::time::timeout(
        Duration::from_secs(120),
        query_rows_on(Srv::Sail, &spark, 2_000_000),
    )
    .await
    .expect("hung")
    .unwrap();
    assert_exact(&check, 2_000_000);
    eprintln!("Sail 2M rows: {stats:?}");
    assert_eq!(
        (stats.graceful_ends, stats.reattaches, stats.re_executes),
        (0, 0, 0),
        "{stats:?}"
    );
    spark.close().await.unwrap();
}
