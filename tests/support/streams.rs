//! Reading a result stream to its error: what every test of a server that
//! dies mid-query does. A clean end would pass a partial result off as
//! complete, so it fails the test.
#![allow(dead_code)] // each test binary uses part of this module

use std::time::Duration;

use spark_connect_retry::session::{ArrowStream, SparkError};

/// Reads `stream` until its error; a clean end panics.
pub async fn until_error(stream: &mut ArrowStream) -> SparkError {
    loop {
        match stream.next_batch().await {
            Some(Ok(_)) => continue,
            Some(Err(e)) => return e,
            None => panic!("a partial result ended as if complete"),
        }
    }
}

/// [`until_error`] within `bound` (a hang fails the test).
pub async fn first_error(stream: &mut ArrowStream, bound: Duration) -> SparkError {
    tokio::time::timeout(bound, until_error(stream))
        .await
        .expect("a clear error in bounded time")
}

/// A transport failure after the policy's retries (UNAVAILABLE, or what
/// tonic reports a reset as).
pub fn assert_transport_error(err: &SparkError) {
    let code = err.server_error().map(|s| s.code());
    assert!(
        matches!(
            code,
            Some(tonic::Code::Unavailable) | Some(tonic::Code::Unknown)
        ),
        "a transport error after retries: {err:?}"
    );
}
