//! The builder's checks at `build()`, without a server.

use std::time::Duration;

use super::SparkSessionBuilder;
use crate::connect::conn_string::ConnectionString;
use crate::deadlines::RpcDeadlines;
use crate::session::error::SparkError;
use crate::session::spark::SparkSession;

fn builder() -> SparkSessionBuilder {
    SparkSession::builder().remote("sc://127.0.0.1:1")
}

fn invalid_field(result: Result<SparkSession, SparkError>) -> &'static str {
    match result {
        Err(SparkError::InvalidOption { field, .. }) => field,
        Err(SparkError::Deadline(e)) => e.field,
        other => panic!("expected an invalid option, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_timeouts_name_the_field() {
    let huge = Some(Duration::MAX);
    assert_eq!(
        invalid_field(builder().idle_timeout(huge).build()),
        "idle_timeout"
    );
    assert_eq!(
        invalid_field(builder().idle_timeout(Some(Duration::ZERO)).build()),
        "idle_timeout"
    );
    assert_eq!(
        invalid_field(builder().connect_timeout(Duration::MAX).build()),
        "connect_timeout"
    );
    let deadlines = RpcDeadlines {
        reattach_execute: huge,
        ..RpcDeadlines::default()
    };
    assert_eq!(
        invalid_field(builder().deadlines(deadlines).build()),
        "reattach_execute"
    );
    assert_eq!(
        invalid_field(builder().preferred_arrow_chunk_size(10).build()),
        "preferred_arrow_chunk_size"
    );
    assert_eq!(invalid_field(builder().config(" ", "x").build()), "config");
}

#[test]
fn chunk_size_fits_the_message_limit() {
    let small = ConnectionString::parse("sc://h/;grpc_max_message_size=1048576").unwrap();
    let b = SparkSessionBuilder::default();
    assert_eq!(b.chunk_size(&small).unwrap(), Some(1024 * 1024 - 64 * 1024));
    let b = SparkSessionBuilder::default().preferred_arrow_chunk_size(4096);
    assert_eq!(b.chunk_size(&small).unwrap(), Some(4096));
    let b = SparkSessionBuilder::default().preferred_arrow_chunk_size(1 << 30);
    assert_eq!(b.chunk_size(&small).unwrap(), Some(1024 * 1024 - 64 * 1024));
    let tiny = ConnectionString::parse("sc://h/;grpc_max_message_size=2000").unwrap();
    assert_eq!(
        SparkSessionBuilder::default().chunk_size(&tiny).unwrap(),
        Some(1024)
    );
    let off = SparkSessionBuilder::default().arrow_chunking(false);
    assert_eq!(off.chunk_size(&small).unwrap(), None);
}

#[test]
fn a_config_key_set_twice_keeps_the_last_value() {
    let b = SparkSessionBuilder::default()
        .config("a", "1")
        .config("b", "2")
        .config("a", "3");
    assert_eq!(
        b.configs.0,
        [
            ("b".to_owned(), "2".to_owned()),
            ("a".to_owned(), "3".to_owned())
        ]
    );
    let debug = format!("{:?}", b.config("spark.secret.key", "hunter2"));
    assert!(
        debug.contains("spark.secret.key") && !debug.contains("hunter2"),
        "{debug}"
    );
}

#[tokio::test]
async fn session_ids_are_drawn_per_build() {
    let config = ConnectionString::parse("sc://127.0.0.1:1").unwrap();
    let a = SparkSession::builder()
        .connection(config.clone())
        .build()
        .unwrap();
    let b = SparkSession::builder().connection(config).build().unwrap();
    assert_ne!(a.session_id(), b.session_id());
    let given = "00112233-4455-6677-8899-aabbccddeeff";
    let url = format!("sc://127.0.0.1:1/;session_id={given}");
    let c = SparkSession::builder().remote(url).build().unwrap();
    assert_eq!(c.session_id(), given);
}
