//! Local relations executed by the embedded server: the rows come back
//! exactly as uploaded, inline or through cached artifacts, also when the
//! result stream is cut and reattached.

use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use spark_connect_retry::proto::{self, relation::RelType};
use spark_connect_retry::session::SparkSession;
use spark_connect_testkit::{Fault, Rpc, TestServer};

use super::{SESSION, add, assert_spark, client, pyspark_requests};

fn batch(ids: std::ops::Range<i64>) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]));
    let names: Vec<Option<String>> = ids
        .clone()
        .map(|i| (i % 7 != 0).then(|| format!("row-{i}")))
        .collect();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(ids)),
            Arc::new(StringArray::from(names)),
        ],
    )
    .unwrap()
}

fn ipc(batches: &[RecordBatch]) -> Vec<u8> {
    let mut w = arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &batches[0].schema()).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.finish().unwrap();
    w.into_inner().unwrap()
}

fn relation(rel_type: RelType) -> proto::Relation {
    proto::Relation {
        common: None,
        rel_type: Some(rel_type),
    }
}

async fn session(server: &TestServer) -> SparkSession {
    SparkSession::builder()
        .remote(format!("{}/;session_id={SESSION}", server.remote()))
        .build()
        .unwrap()
}

/// Every row of the result, as (id, name).
fn rows(batches: &[RecordBatch]) -> Vec<(i64, Option<String>)> {
    let mut out = Vec::new();
    for b in batches {
        let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let names = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        for i in 0..b.num_rows() {
            out.push((
                ids.value(i),
                names.is_valid(i).then(|| names.value(i).to_owned()),
            ));
        }
    }
    out
}

#[tokio::test]
async fn a_local_relation_returns_exactly_its_rows() {
    let server = TestServer::builder()
        .rows_per_batch(300)
        .start()
        .await
        .unwrap();
    let spark = session(&server).await;
    let sent = [batch(0..1000), batch(1000..1001), batch(1001..2500)];
    let rel = relation(RelType::LocalRelation(proto::LocalRelation {
        data: Some(ipc(&sent)),
        schema: Some("id long, name string".into()),
    }));
    let got = spark.relation(rel).unwrap().collect().await.unwrap();
    assert_eq!(rows(&got), rows(&sent));
    assert!(got.iter().all(|b| b.num_rows() <= 300));
    assert_eq!(got[0].schema(), sent[0].schema());
    spark.close().await.unwrap();
    server.shutdown().await;
}

/// PySpark's cached path: chunks of the data and the schema uploaded as
/// `cache/<hash>` artifacts, then a ChunkedCachedLocalRelation naming them;
/// the result stream is cut twice and reattached.
#[tokio::test]
async fn a_chunked_cached_relation_survives_cut_results() {
    let server = TestServer::builder()
        .rows_per_batch(1000)
        .start()
        .await
        .unwrap();
    let chunks = [ipc(&[batch(0..4000)]), ipc(&[batch(4000..9000)])];
    let schema = b"id long, name string".to_vec();
    let items: Vec<(String, &[u8])> = vec![
        ("cache/schema0".into(), &schema[..]),
        ("cache/chunk0".into(), &chunks[0][..]),
        ("cache/chunk1".into(), &chunks[1][..]),
    ];
    let items: Vec<(&str, &[u8])> = items.iter().map(|(n, d)| (n.as_str(), *d)).collect();
    let mut c = client(&server).await;
    add(&mut c, pyspark_requests(SESSION, &items))
        .await
        .unwrap();

    let spark = session(&server).await;
    server.faults().push(
        Fault::reset_connection()
            .on(Rpc::ExecutePlan)
            .after_responses(3),
    );
    server.faults().push(
        Fault::reset_connection()
            .on(Rpc::ReattachExecute)
            .after_responses(2),
    );
    let rel = relation(RelType::ChunkedCachedLocalRelation(
        proto::ChunkedCachedLocalRelation {
            data_hashes: vec!["chunk0".into(), "chunk1".into()],
            schema_hash: Some("schema0".into()),
        },
    ));
    let mut stream = spark.relation(rel).unwrap();
    let mut got = Vec::new();
    while let Some(b) = stream.next_batch().await {
        got.push(b.unwrap());
    }
    assert_eq!(rows(&got), rows(&[batch(0..9000)]));
    assert!(stream.stats().reattaches >= 2, "{:?}", stream.stats());
    spark.close().await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn a_cached_local_relation_reads_its_artifact() {
    let server = TestServer::start().await.unwrap();
    let local = proto::LocalRelation {
        data: Some(ipc(&[batch(0..50)])),
        schema: None,
    };
    let blob = prost::Message::encode_to_vec(&local);
    let mut c = client(&server).await;
    add(&mut c, pyspark_requests(SESSION, &[("cache/whole", &blob)]))
        .await
        .unwrap();
    let spark = session(&server).await;
    let rel = relation(RelType::CachedLocalRelation(proto::CachedLocalRelation {
        hash: "whole".into(),
    }));
    let got = spark.relation(rel).unwrap().collect().await.unwrap();
    assert_eq!(rows(&got), rows(&[batch(0..50)]));
    spark.close().await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn a_missing_artifact_fails_the_query_as_spark_does() {
    let server = TestServer::start().await.unwrap();
    let mut c = client(&server).await;
    let plan = |rel_type| proto::Plan {
        op_type: Some(proto::plan::OpType::Root(relation(rel_type))),
    };
    let req = spark_connect_testkit::plans::execute_request(
        SESSION,
        plan(RelType::ChunkedCachedLocalRelation(
            proto::ChunkedCachedLocalRelation {
                data_hashes: vec!["nothere".into()],
                schema_hash: None,
            },
        )),
    );
    let mut s = c.execute_plan(req).await.unwrap().into_inner();
    let err = loop {
        match s.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("no error"),
            Err(e) => break e,
        }
    };
    assert_spark(&err, "INTERNAL_ERROR");
    let expected = format!(
        "[INTERNAL_ERROR] Not found chunked cached local relation block with the hash: nothere in the session with sessionUUID {}. SQLSTATE: XX000",
        server.server_side_session_id()
    );
    assert_eq!(err.message(), expected);
    server.shutdown().await;
}
