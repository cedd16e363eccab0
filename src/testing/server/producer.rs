//! The producer: the background task that runs an execution's plan and
//! appends its responses to the buffer, independently of any attached
//! stream, at most [`PRODUCER_WINDOW`](super::PRODUCER_WINDOW) responses
//! ahead of the consumer.

use std::sync::Arc;

use tokio::sync::watch;

use super::buffer::Operation;
use super::state::Shared;
use crate::proto::{self, execute_plan_response as epr};
use crate::testing::error::SparkError;
use crate::testing::plan::{Query, Work};

/// Runs `work` for `op` until it completes, fails or is cancelled.
pub(super) async fn produce(
    shared: Arc<Shared>,
    op: Arc<Operation>,
    work: Result<Work, SparkError>,
) {
    match work {
        Err(e) => fail(&shared, &op, &e),
        Ok(Work::SqlCommand(relation)) => {
            let resp = response(epr::ResponseType::SqlCommandResult(epr::SqlCommandResult {
                relation: Some(relation),
            }));
            if op.push(resp) {
                op.complete();
            }
        }
        Ok(Work::Rows(query)) => {
            if produce_rows(&shared, &op, &query).await {
                op.complete();
            }
        }
    }
}

/// Appends the Arrow batches of `query` (each after an `ExecutionProgress`
/// when configured). `true` when every batch was appended; `false` when the
/// execution failed or ended early (cancelled, released).
async fn produce_rows(shared: &Shared, op: &Operation, query: &Query) -> bool {
    let settings = &shared.settings;
    let total = query.row_count();
    let mut changed = op.changed.subscribe();
    let mut offset = 0u64;
    loop {
        let len = settings.rows_per_batch.min(total - offset);
        let data = match query.ipc_batch(offset, len) {
            Ok(d) => d,
            Err(e) => {
                fail(shared, op, &e);
                return false;
            }
        };
        if settings.execution_progress && !op.push(progress()) {
            return false;
        }
        if !op.push(arrow_batch(data, offset, len)) {
            return false;
        }
        offset += len;
        if offset >= total {
            return true;
        }
        if !settings.batch_delay.is_zero() {
            tokio::time::sleep(settings.batch_delay).await;
        }
        if !wait_for_consumer(op, &mut changed).await {
            return false;
        }
    }
}

/// Back-pressure: waits until the consumer is less than the producer window
/// behind. `false` once the execution has ended.
async fn wait_for_consumer(op: &Operation, changed: &mut watch::Receiver<()>) -> bool {
    loop {
        changed.borrow_and_update();
        match op.must_wait_for_consumer() {
            None => return false,
            Some(false) => return true,
            Some(true) => {
                if changed.changed().await.is_err() {
                    return false;
                }
            }
        }
    }
}

/// Ends `op` with `err`, Spark-encoded.
fn fail(shared: &Shared, op: &Operation, err: &SparkError) {
    let status = shared.spark_status(err, Some(&op.session_id));
    op.fail(status);
}

fn response(response_type: epr::ResponseType) -> proto::ExecutePlanResponse {
    proto::ExecutePlanResponse {
        response_type: Some(response_type),
        ..Default::default()
    }
}

fn progress() -> proto::ExecutePlanResponse {
    response(epr::ResponseType::ExecutionProgress(
        epr::ExecutionProgress {
            stages: Vec::new(),
            num_inflight_tasks: 1,
        },
    ))
}

fn arrow_batch(data: Vec<u8>, offset: u64, len: u64) -> proto::ExecutePlanResponse {
    response(epr::ResponseType::ArrowBatch(epr::ArrowBatch {
        row_count: len as i64,
        data,
        start_offset: Some(offset as i64),
        chunk_index: None,
        num_chunks_in_batch: None,
    }))
}
