//! The loop's own edge cases.

use std::time::Duration;

use tonic::Status;

use super::{AttemptError, RecordingSleeper, Retrying};
use crate::policy::RetryPolicy;
use prost::Message;
use tonic_types::pb;

/// A server asking for `i64::MAX` seconds, with the cap turned off: each
/// wait saturates at `u64::MAX` ms, and their sum at `Duration::MAX`.
#[tokio::test]
async fn slept_saturates_with_huge_waits() {
    let policy = RetryPolicy::builder()
        .max_server_retry_delay(None)
        .max_retries(Some(1100))
        .build()
        .unwrap();
    let sleeper = RecordingSleeper::new();
    let retrying = Retrying::new(vec![policy]).with_sleeper(sleeper.clone());
    let info = pb::RetryInfo {
        retry_delay: Some(prost_types::Duration {
            seconds: i64::MAX,
            nanos: 0,
        }),
    };
    let details = pb::Status {
        code: 14,
        message: "wait".into(),
        details: vec![prost_types::Any {
            type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
            value: info.encode_to_vec(),
        }],
    }
    .encode_to_vec();
    let (result, stats) = retrying
        .run(|| {
            let status =
                Status::with_details(tonic::Code::Unavailable, "wait", details.clone().into());
            async move { Err::<(), AttemptError>(AttemptError::Status(status)) }
        })
        .await;
    assert!(result.is_err());
    assert_eq!(stats.policy_retries, 1100);
    assert_eq!(sleeper.sleeps()[0], Duration::from_millis(u64::MAX));
    assert_eq!(stats.slept, Duration::MAX);
}
