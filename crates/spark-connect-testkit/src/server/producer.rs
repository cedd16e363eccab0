//! The producer: the background task that runs an execution's plan and
//! appends its responses to the buffer, independently of any attached
//! stream, at most [`PRODUCER_WINDOW`](super::PRODUCER_WINDOW) responses
//! ahead of the consumer.

use std::sync::Arc;

use tokio::sync::watch;

use super::buffer::Operation;
use super::state::Shared;
use crate::error::SparkException;
use crate::sql_grammar::{Source, Work};
use spark_connect_retry::proto::{self, execute_plan_response as epr};

/// Runs `work` for `op` until it completes, fails or is cancelled.
pub(super) async fn produce(
    shared: Arc<Shared>,
    op: Arc<Operation>,
    work: Result<Work, SparkException>,
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
        Ok(Work::CreateView(view)) => {
            // Spark reports progress while a command runs, too.
            if shared.settings.execution_progress && !op.push(progress()) {
                return;
            }
            match shared.create_view(&op.session_id, view) {
                Ok(()) => op.complete(),
                Err(e) => fail(&shared, &op, &e),
            }
        }
        Ok(Work::Rows(rows)) => {
            if produce_rows(&shared, &op, &rows).await {
                op.complete();
            }
        }
    }
}

/// The session conf of the rows per result batch (Spark's; unset, zero
/// or negative: the server's `rows_per_batch` alone).
const MAX_RECORDS_CONF: &str = "spark.sql.execution.arrow.maxRecordsPerBatch";

/// Appends the Arrow batches of `rows` (each after an `ExecutionProgress`
/// when configured). `true` when every batch was appended; `false` when the
/// execution failed or ended early (cancelled, released).
async fn produce_rows(shared: &Shared, op: &Operation, rows: &Source) -> bool {
    let settings = &shared.settings;
    let total = rows.row_count();
    let mut changed = op.changed.subscribe();
    let mut offset = 0u64;
    if settings.schema_response && !op.push(schema(rows)) {
        return false;
    }
    // Spark reads the codec when the execution starts.
    let codec = match super::codec::codec(
        shared
            .session_conf(&op.session_id, super::codec::CODEC_CONF)
            .as_deref(),
    ) {
        Ok(c) => c,
        Err(e) => {
            fail(shared, op, &e);
            return false;
        }
    };
    let chunk = op.chunking.map(|preferred| {
        if (1024..settings.max_chunk_bytes).contains(&preferred) {
            preferred
        } else {
            settings.max_chunk_bytes
        }
    });
    // Spark reads the batch size when the execution starts, too.
    let batch_rows = shared
        .session_conf(&op.session_id, MAX_RECORDS_CONF)
        .and_then(|v| v.trim().parse::<i64>().ok())
        .and_then(|n| u64::try_from(n).ok().filter(|n| *n > 0))
        .map_or(settings.rows_per_batch, |n| n.min(settings.rows_per_batch));
    loop {
        let len = rows.next_len(offset, batch_rows);
        let data = match rows.ipc_batch(offset, len).and_then(|d| match codec {
            Some(c) => super::codec::compress(&d, c),
            None => Ok(d),
        }) {
            Ok(d) => d,
            Err(e) => {
                fail(shared, op, &e);
                return false;
            }
        };
        if settings.execution_progress && !op.push(progress()) {
            return false;
        }
        if !arrow_batch(data, offset, len, chunk)
            .into_iter()
            .all(|r| op.push(r))
        {
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
fn fail(shared: &Shared, op: &Operation, err: &SparkException) {
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

/// The responses of one batch: one, or its chunks when the client allows
/// chunking and the batch is larger than `chunk` bytes.
fn arrow_batch(
    data: Vec<u8>,
    offset: u64,
    len: u64,
    chunk: Option<usize>,
) -> Vec<proto::ExecutePlanResponse> {
    let one = |data: bytes::Bytes, index: Option<i64>, chunks: Option<i64>| {
        response(epr::ResponseType::ArrowBatch(epr::ArrowBatch {
            row_count: len as i64,
            data,
            start_offset: Some(offset as i64),
            chunk_index: index,
            num_chunks_in_batch: chunks,
        }))
    };
    match chunk {
        Some(size) if data.len() > size => {
            let data = bytes::Bytes::from(data);
            let n = data.len().div_ceil(size) as i64;
            (0..n as usize)
                .map(|i| {
                    let end = ((i + 1) * size).min(data.len());
                    one(data.slice(i * size..end), Some(i as i64), Some(n))
                })
                .collect()
        }
        Some(_) => vec![one(data.into(), Some(0), Some(1))],
        None => vec![one(data.into(), None, None)],
    }
}

/// The schema response Spark sends before the first batch.
fn schema(rows: &Source) -> proto::ExecutePlanResponse {
    proto::ExecutePlanResponse {
        schema: Some(rows.spark_schema()),
        ..Default::default()
    }
}
