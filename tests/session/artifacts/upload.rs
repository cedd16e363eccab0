//! AddArtifacts and ArtifactStatus: what is stored, what is answered, and
//! what every upload fault leaves behind.

use std::time::Duration;

use spark_connect_retry::proto::{self, add_artifacts_request::Payload};
use spark_connect_testkit::{Fault, Rpc, TestServer};
use tonic::Code;

use super::{SESSION, add, assert_spark, chunk, client, data, pyspark_requests, summaries};

fn names(server: &TestServer) -> Vec<String> {
    server.artifacts(SESSION).into_keys().collect()
}

async fn status(c: &mut super::Client, names: &[&str]) -> Vec<(String, bool)> {
    let r = c
        .artifact_status(proto::ArtifactStatusesRequest {
            session_id: SESSION.into(),
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            ..Default::default()
        })
        .await
        .expect("ArtifactStatus")
        .into_inner();
    assert_eq!(r.session_id, SESSION);
    let mut out: Vec<(String, bool)> = r.statuses.into_iter().map(|(k, v)| (k, v.exists)).collect();
    out.sort();
    out
}

#[tokio::test]
async fn small_artifacts_travel_in_one_batch() {
    let server = TestServer::start().await.unwrap();
    let mut c = client(&server).await;
    let (a, b, e) = (data(10, 1), data(3000, 2), Vec::new());
    let items: [(&str, &[u8]); 3] = [("cache/a", &a), ("files/b.txt", &b), ("cache/empty", &e)];
    let reqs = pyspark_requests(SESSION, &items);
    assert_eq!(reqs.len(), 1);
    let r = add(&mut c, reqs).await.unwrap();
    assert_eq!(r.session_id, SESSION);
    assert_eq!(r.server_side_session_id, server.server_side_session_id());
    assert_eq!(
        summaries(&r),
        vec![
            ("cache/a".to_owned(), true),
            ("files/b.txt".to_owned(), true),
            ("cache/empty".to_owned(), true)
        ]
    );
    assert_eq!(server.artifact(SESSION, "cache/a").as_deref(), Some(&a[..]));
    assert_eq!(
        server.artifact(SESSION, "files/b.txt").as_deref(),
        Some(&b[..])
    );
    assert_eq!(
        server.artifact(SESSION, "cache/empty").as_deref(),
        Some(&[][..])
    );
    let calls = server.upload_calls();
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].messages, calls[0].bytes), (1, 3010));
    assert_eq!(
        calls[0].stored,
        vec!["cache/a", "files/b.txt", "cache/empty"]
    );
    assert_eq!(server.artifact_writes(SESSION, "cache/a"), 1);
    assert_eq!(server.calls().add_artifacts, 1);
    server.shutdown().await;
}

#[tokio::test]
async fn large_artifacts_travel_in_chunks() {
    let server = TestServer::start().await.unwrap();
    let mut c = client(&server).await;
    let big = data(3 * super::CHUNK_SIZE + 1, 3);
    let (s1, s2) = (data(20_000, 4), data(20_000, 5));
    let items: [(&str, &[u8]); 3] = [("cache/s1", &s1), ("cache/big", &big), ("cache/s2", &s2)];
    let reqs = pyspark_requests(SESSION, &items);
    // A batch, begin + 3 chunks, a batch.
    assert_eq!(reqs.len(), 6);
    let r = add(&mut c, reqs).await.unwrap();
    assert!(summaries(&r).iter().all(|(_, ok)| *ok));
    assert_eq!(
        server.artifact(SESSION, "cache/big").as_deref(),
        Some(&big[..])
    );
    assert_eq!(
        server.artifact(SESSION, "cache/s2").as_deref(),
        Some(&s2[..])
    );
    let call = &server.upload_calls()[0];
    assert_eq!(call.messages, 6);
    assert_eq!(call.bytes, (big.len() + s1.len() + s2.len()) as u64);
    server.shutdown().await;
}

#[tokio::test]
async fn artifact_status_knows_only_cache_artifacts() {
    let server = TestServer::start().await.unwrap();
    let mut c = client(&server).await;
    assert_eq!(
        status(&mut c, &["cache/x"]).await,
        vec![("cache/x".to_owned(), false)]
    );
    let x = data(5, 6);
    add(
        &mut c,
        pyspark_requests(SESSION, &[("cache/x", &x), ("files/y", &x)]),
    )
    .await
    .unwrap();
    assert_eq!(
        status(&mut c, &["cache/x", "cache/z", "files/y"]).await,
        vec![
            ("cache/x".to_owned(), true),
            ("cache/z".to_owned(), false),
            ("files/y".to_owned(), false)
        ]
    );
    assert_eq!(server.calls().artifact_status, 2);
    // A fault on ArtifactStatus, as on any unary RPC.
    server
        .faults()
        .push(Fault::unavailable().on(Rpc::ArtifactStatus));
    let err = c
        .artifact_status(proto::ArtifactStatusesRequest {
            session_id: SESSION.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    server.shutdown().await;
}

/// A reset after `k` request messages, for every `k` from before the first
/// to after the last chunk: nothing is stored, the bytes read are recorded,
/// and the upload sent again is stored exactly once.
#[tokio::test]
async fn cuts_before_during_and_after_the_last_chunk() {
    let server = TestServer::start().await.unwrap();
    let big = data(3 * super::CHUNK_SIZE + 100, 7);
    let items: [(&str, &[u8]); 1] = [("cache/big", &big)];
    let n = pyspark_requests(SESSION, &items).len() as u32;
    assert_eq!(n, 4);
    for k in 0..=n {
        server.faults().push(
            Fault::reset_connection()
                .on(Rpc::AddArtifacts)
                .after_requests(k),
        );
        let mut c = client(&server).await;
        let err = add(&mut c, pyspark_requests(SESSION, &items))
            .await
            .unwrap_err();
        assert_ne!(err.code(), Code::Ok);
        assert!(names(&server).is_empty(), "k = {k}: nothing stored");
        let call = server.upload_calls().pop().expect("recorded");
        assert_eq!(call.messages, u64::from(k), "k = {k}");
        let sent: usize = (0..k as usize)
            .map(|i| super::CHUNK_SIZE.min(big.len() - i * super::CHUNK_SIZE))
            .sum();
        assert_eq!(call.bytes, sent as u64, "k = {k}");
        assert!(call.stored.is_empty());
    }
    let mut c = client(&server).await;
    add(&mut c, pyspark_requests(SESSION, &items))
        .await
        .unwrap();
    assert_eq!(
        server.artifact(SESSION, "cache/big").as_deref(),
        Some(&big[..])
    );
    assert_eq!(server.artifact_writes(SESSION, "cache/big"), 1);
    server.shutdown().await;
}

/// A reset with no `after_requests`: the server stores everything, then the
/// connection dies before the response. ArtifactStatus tells the client.
#[tokio::test]
async fn a_cut_after_the_store_loses_only_the_response() {
    let server = TestServer::start().await.unwrap();
    let big = data(2 * super::CHUNK_SIZE + 1, 8);
    server
        .faults()
        .push(Fault::reset_connection().on(Rpc::AddArtifacts));
    let mut c = client(&server).await;
    let err = add(&mut c, pyspark_requests(SESSION, &[("cache/big", &big)]))
        .await
        .unwrap_err();
    assert_ne!(err.code(), Code::Ok);
    assert_eq!(
        server.artifact(SESSION, "cache/big").as_deref(),
        Some(&big[..])
    );
    assert_eq!(server.upload_calls()[0].stored, vec!["cache/big"]);
    let mut c = client(&server).await;
    assert_eq!(
        status(&mut c, &["cache/big"]).await,
        vec![("cache/big".to_owned(), true)]
    );
    assert_eq!(server.artifact_writes(SESSION, "cache/big"), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn statuses_stalls_and_lost_requests() {
    let server = TestServer::start().await.unwrap();
    let mut c = client(&server).await;
    let big = data(3 * super::CHUNK_SIZE, 9);
    let items: [(&str, &[u8]); 1] = [("cache/big", &big)];

    // A status mid-stream: the call fails with it, nothing is stored.
    server
        .faults()
        .push(Fault::unavailable().on(Rpc::AddArtifacts).after_requests(2));
    let err = add(&mut c, pyspark_requests(SESSION, &items))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert!(names(&server).is_empty());
    assert_eq!(server.upload_calls()[0].messages, 2);

    // A status before the stream is read: no message is read.
    server
        .faults()
        .push(Fault::unavailable().on(Rpc::AddArtifacts));
    let err = add(&mut c, pyspark_requests(SESSION, &items))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(server.upload_calls().len(), 1, "not read, not recorded");

    // A lost request: the connection is cut before anything is read.
    server
        .faults()
        .push(Fault::lose_request().on(Rpc::AddArtifacts));
    assert!(
        add(&mut c, pyspark_requests(SESSION, &items))
            .await
            .is_err()
    );
    assert!(names(&server).is_empty());
    assert_eq!(server.upload_calls().len(), 1);

    // A stall mid-stream only delays it.
    server.faults().push(
        Fault::stall(Duration::from_millis(20))
            .on(Rpc::AddArtifacts)
            .after_requests(1),
    );
    let mut c = client(&server).await;
    add(&mut c, pyspark_requests(SESSION, &items))
        .await
        .unwrap();
    assert_eq!(
        server.artifact(SESSION, "cache/big").as_deref(),
        Some(&big[..])
    );
    assert_eq!(server.calls().add_artifacts, 4);
    assert_eq!(server.faults().pending(), 0);
    server.shutdown().await;
}

#[tokio::test]
async fn a_corrupted_chunk_is_reported_and_not_stored() {
    let server = TestServer::start().await.unwrap();
    let mut c = client(&server).await;
    let (a, b) = (data(100, 10), data(200, 11));
    // The first artifact of the first batch.
    server.faults().push(Fault::corrupt_chunk());
    let r = add(
        &mut c,
        pyspark_requests(SESSION, &[("cache/a", &a), ("cache/b", &b)]),
    )
    .await
    .unwrap();
    assert_eq!(
        summaries(&r),
        vec![("cache/a".to_owned(), false), ("cache/b".to_owned(), true)]
    );
    assert_eq!(names(&server), vec!["cache/b"]);

    // The third chunk of a chunked artifact.
    let big = data(4 * super::CHUNK_SIZE, 12);
    server
        .faults()
        .push(Fault::corrupt_chunk().after_requests(2));
    let r = add(&mut c, pyspark_requests(SESSION, &[("cache/big", &big)]))
        .await
        .unwrap();
    assert_eq!(summaries(&r), vec![("cache/big".to_owned(), false)]);
    assert_eq!(server.upload_calls()[1].bytes, big.len() as u64);
    assert_eq!(
        status(&mut c, &["cache/big"]).await,
        vec![("cache/big".to_owned(), false)]
    );
    // Sent again, it is stored.
    let r = add(&mut c, pyspark_requests(SESSION, &[("cache/big", &big)]))
        .await
        .unwrap();
    assert_eq!(summaries(&r), vec![("cache/big".to_owned(), true)]);
    assert_eq!(server.artifact_writes(SESSION, "cache/big"), 1);
    server.shutdown().await;
}

/// The client gives up mid-stream: the server drops what it staged.
#[tokio::test]
async fn a_client_cut_discards_the_partial_upload() {
    let server = TestServer::start().await.unwrap();
    let mut c = client(&server).await;
    let big = data(3 * super::CHUNK_SIZE, 13);
    let mut reqs = pyspark_requests(SESSION, &[("cache/big", &big)]).into_iter();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(reqs.next().unwrap()).await.unwrap();
    tx.send(reqs.next().unwrap()).await.unwrap();
    let call = tokio::spawn(async move {
        let _ = c
            .add_artifacts(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await;
    });
    // Cut once the call has reached the server (bounded wait).
    crate::support::eventually("the upload reached the server", || {
        server.calls().add_artifacts == 1
    })
    .await;
    call.abort();
    drop(tx);
    crate::support::eventually("the cut upload is recorded", || {
        !server.upload_calls().is_empty()
    })
    .await;
    let recorded = server.upload_calls();
    assert_eq!(recorded.len(), 1, "the cut upload is recorded");
    assert!(recorded[0].messages <= 2);
    assert!(recorded[0].stored.is_empty());
    assert!(names(&server).is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn protocol_errors_fail_the_call_as_spark_does() {
    let server = TestServer::start().await.unwrap();
    let mut c = client(&server).await;
    let msg = |payload| proto::AddArtifactsRequest {
        session_id: SESSION.into(),
        payload: Some(payload),
        ..Default::default()
    };
    // A chunk with no chunked artifact open.
    let err = add(&mut c, vec![msg(Payload::Chunk(chunk(b"x")))])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Internal);
    assert!(err.message().contains("requirement failed"), "{err:?}");

    // The stream ends before the last chunk: nothing is stored, not even
    // the complete small artifacts before it.
    let big = data(3 * super::CHUNK_SIZE, 14);
    let mut reqs = pyspark_requests(SESSION, &[("cache/s", b"small"), ("cache/big", &big)]);
    reqs.pop();
    assert!(add(&mut c, reqs).await.is_err());
    assert!(names(&server).is_empty());

    // Names must stay inside the session's directory.
    let err = add(&mut c, pyspark_requests(SESSION, &[("../x", b"x")]))
        .await
        .unwrap_err();
    assert_spark(&err, "INVALID_ARTIFACT_PATH");

    // Only cache/ artifacts may be replaced.
    add(&mut c, pyspark_requests(SESSION, &[("jars/a.jar", b"1")]))
        .await
        .unwrap();
    add(&mut c, pyspark_requests(SESSION, &[("jars/a.jar", b"1")]))
        .await
        .unwrap();
    let err = add(
        &mut c,
        pyspark_requests(SESSION, &[("jars/a.jar", b"2"), ("files/f", b"3")]),
    )
    .await
    .unwrap_err();
    assert_spark(&err, "ARTIFACT_ALREADY_EXISTS");
    assert_eq!(
        server.artifact(SESSION, "jars/a.jar").as_deref(),
        Some(&b"1"[..])
    );
    assert_eq!(
        server.artifact(SESSION, "files/f").as_deref(),
        Some(&b"3"[..])
    );
    assert_eq!(server.artifact_writes(SESSION, "jars/a.jar"), 1);

    // An empty stream.
    let err = add(&mut c, Vec::new()).await.unwrap_err();
    assert_eq!(err.code(), Code::Internal);
    server.shutdown().await;
}

#[tokio::test]
async fn sessions_are_checked_like_the_other_rpcs() {
    let server = TestServer::start().await.unwrap();
    let mut c = client(&server).await;
    let err = add(&mut c, pyspark_requests("not-a-uuid", &[("cache/a", b"a")]))
        .await
        .unwrap_err();
    assert_spark(&err, "INVALID_HANDLE.FORMAT");

    let mut reqs = pyspark_requests(SESSION, &[("cache/a", b"a")]);
    reqs[0].client_observed_server_side_session_id =
        Some("00000000-0000-0000-0000-000000000000".into());
    let err = add(&mut c, reqs).await.unwrap_err();
    assert_spark(&err, "INVALID_HANDLE.SESSION_CHANGED");

    add(&mut c, pyspark_requests(SESSION, &[("cache/a", b"a")]))
        .await
        .unwrap();
    c.release_session(proto::ReleaseSessionRequest {
        session_id: SESSION.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(
        server.artifacts(SESSION).is_empty(),
        "released with the session"
    );
    let err = add(&mut c, pyspark_requests(SESSION, &[("cache/a", b"a")]))
        .await
        .unwrap_err();
    assert_spark(&err, "INVALID_HANDLE.SESSION_CLOSED");
    let err = c
        .artifact_status(proto::ArtifactStatusesRequest {
            session_id: SESSION.into(),
            names: vec!["cache/a".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_spark(&err, "INVALID_HANDLE.SESSION_CLOSED");
    server.shutdown().await;
}
