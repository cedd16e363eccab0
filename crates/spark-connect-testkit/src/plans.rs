//! Helpers to build the plans the [`TestServer`](super::TestServer)
//! understands and to read its Arrow results back.

use std::io::Cursor;

use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_ipc::reader::StreamReader;
use arrow_schema::ArrowError;

use spark_connect_retry::proto::{self, execute_plan_response::ArrowBatch};

/// A fresh random UUID string, e.g. for a `session_id` or `operation_id`.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn root(rel_type: proto::relation::RelType) -> proto::Plan {
    proto::Plan {
        op_type: Some(proto::plan::OpType::Root(proto::Relation {
            common: None,
            rel_type: Some(rel_type),
        })),
    }
}

/// `spark.range(start, end, step)` as a plan (`start` `None` means 0).
pub fn range(start: Option<i64>, end: i64, step: i64) -> proto::Plan {
    root(proto::relation::RelType::Range(proto::Range {
        start,
        end,
        step,
        num_partitions: None,
    }))
}

/// An `ExecutePlanRequest` for `plan` in session `session_id`, as a client
/// sends it before the reattach option and operation id are added.
pub fn execute_request(session_id: &str, plan: proto::Plan) -> proto::ExecutePlanRequest {
    proto::ExecutePlanRequest {
        session_id: session_id.to_owned(),
        plan: Some(plan),
        client_type: Some("spark-connect-retry tests".to_owned()),
        ..Default::default()
    }
}

/// A query relation (`Relation.sql`) as a plan.
pub fn sql(query: &str) -> proto::Plan {
    root(proto::relation::RelType::Sql(proto::Sql {
        query: query.to_owned(),
        ..Default::default()
    }))
}

/// `spark.sql(query)` as PySpark sends it: a `SqlCommand` whose `input` is
/// the SQL relation. The server answers with a `SqlCommandResult`.
pub fn sql_command(query: &str) -> proto::Plan {
    proto::Plan {
        op_type: Some(proto::plan::OpType::Command(proto::Command {
            command_type: Some(proto::command::CommandType::SqlCommand(proto::SqlCommand {
                input: Some(proto::Relation {
                    common: None,
                    rel_type: Some(proto::relation::RelType::Sql(proto::Sql {
                        query: query.to_owned(),
                        ..Default::default()
                    })),
                }),
                ..Default::default()
            })),
        })),
    }
}

/// Decodes the Arrow IPC stream of one `ArrowBatch` response.
pub fn decode(batch: &ArrowBatch) -> Result<Vec<RecordBatch>, ArrowError> {
    StreamReader::try_new(Cursor::new(&batch.data[..]), None)?.collect()
}

/// The values of Int64 column `column` across the `ArrowBatch` responses in
/// `responses` (other response types are skipped).
pub fn int64_column(
    responses: &[proto::ExecutePlanResponse],
    column: usize,
) -> Result<Vec<i64>, ArrowError> {
    use proto::execute_plan_response::ResponseType;
    let mut out = Vec::new();
    for r in responses {
        let Some(ResponseType::ArrowBatch(b)) = &r.response_type else {
            continue;
        };
        for batch in decode(b)? {
            if column >= batch.num_columns() {
                return Err(ArrowError::SchemaError(format!("no column {column}")));
            }
            let values = batch
                .column(column)
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or_else(|| ArrowError::SchemaError(format!("column {column} is not Int64")))?;
            out.extend(values.values().iter().copied());
        }
    }
    Ok(out)
}
