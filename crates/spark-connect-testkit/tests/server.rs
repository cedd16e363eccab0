//! The embedded test server, exercised by a real tonic client over loopback.

use std::error::Error as _;

use arrow_array::{Array, Int64Array};
use spark_connect_retry::proto::{
    self, execute_plan_response::ResponseType,
    spark_connect_service_client::SparkConnectServiceClient,
};
use spark_connect_testkit::TestServer;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;

// The theme's tests, one file each: tests/server/*.rs.
mod server {
    mod faults;
    mod replay;
    mod rpcs;
    mod streams;
}

type Client = SparkConnectServiceClient<Channel>;

const SESSION: &str = "8f2d3c1e-0b7a-4c55-9d2e-3a4b5c6d7e8f";

async fn client(server: &TestServer) -> Client {
    SparkConnectServiceClient::connect(server.endpoint())
        .await
        .expect("connect")
}

fn range_plan(start: Option<i64>, end: i64, step: i64) -> proto::Plan {
    proto::Plan {
        op_type: Some(proto::plan::OpType::Root(proto::Relation {
            common: None,
            rel_type: Some(proto::relation::RelType::Range(proto::Range {
                start,
                end,
                step,
                num_partitions: None,
            })),
        })),
    }
}

fn sql_relation(q: &str) -> proto::Relation {
    proto::Relation {
        common: None,
        rel_type: Some(proto::relation::RelType::Sql(proto::Sql {
            query: q.into(),
            ..Default::default()
        })),
    }
}

fn sql_plan(q: &str) -> proto::Plan {
    proto::Plan {
        op_type: Some(proto::plan::OpType::Root(sql_relation(q))),
    }
}

fn exec(plan: proto::Plan, reattachable: bool, op_id: Option<&str>) -> proto::ExecutePlanRequest {
    use proto::execute_plan_request::{RequestOption, request_option};
    proto::ExecutePlanRequest {
        session_id: SESSION.into(),
        operation_id: op_id.map(Into::into),
        plan: Some(plan),
        request_options: vec![RequestOption {
            request_option: Some(request_option::RequestOption::ReattachOptions(
                proto::ReattachOptions { reattachable },
            )),
        }],
        ..Default::default()
    }
}

fn reattach(op_id: &str, last: Option<&str>) -> proto::ReattachExecuteRequest {
    proto::ReattachExecuteRequest {
        session_id: SESSION.into(),
        operation_id: op_id.into(),
        last_response_id: last.map(Into::into),
        ..Default::default()
    }
}

fn release(op_id: &str, until: Option<&str>) -> proto::ReleaseExecuteRequest {
    use proto::release_execute_request::{Release, ReleaseAll, ReleaseUntil};
    proto::ReleaseExecuteRequest {
        session_id: SESSION.into(),
        operation_id: op_id.into(),
        release: Some(match until {
            Some(id) => Release::ReleaseUntil(ReleaseUntil {
                response_id: id.into(),
            }),
            None => Release::ReleaseAll(ReleaseAll {}),
        }),
        ..Default::default()
    }
}

/// Reads a stream to its end: the responses, and the final status.
async fn drain(
    mut s: tonic::Streaming<proto::ExecutePlanResponse>,
) -> (Vec<proto::ExecutePlanResponse>, Result<(), Status>) {
    let mut out = Vec::new();
    loop {
        match s.message().await {
            Ok(Some(r)) => out.push(r),
            Ok(None) => return (out, Ok(())),
            Err(e) => return (out, Err(e)),
        }
    }
}

fn is_complete(r: &proto::ExecutePlanResponse) -> bool {
    matches!(r.response_type, Some(ResponseType::ResultComplete(_)))
}

/// Decodes every ArrowBatch (checking start_offset continuity) into the
/// values of column `col`.
fn column(resps: &[proto::ExecutePlanResponse], col: usize) -> Vec<i64> {
    let mut out = Vec::new();
    for r in resps {
        if let Some(ResponseType::ArrowBatch(b)) = &r.response_type {
            assert_eq!(b.start_offset, Some(out.len() as i64), "start_offset");
            let reader = arrow_ipc::reader::StreamReader::try_new(
                std::io::Cursor::new(b.data.clone()),
                None,
            )
            .unwrap();
            let mut rows = 0;
            for batch in reader {
                let batch = batch.unwrap();
                rows += batch.num_rows();
                let a = batch
                    .column(col)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap();
                out.extend(a.values().iter().copied());
            }
            assert_eq!(rows as i64, b.row_count);
        }
    }
    out
}

fn error_class(s: &Status) -> Option<String> {
    s.get_details_error_info()
        .and_then(|i| i.metadata.get("errorClass").cloned())
}

fn assert_spark(s: &Status, class: &str) {
    assert_eq!(s.code(), Code::Internal, "{s:?}");
    assert_eq!(error_class(s).as_deref(), Some(class), "{s:?}");
    assert!(
        s.message().starts_with(&format!("[{class}] ")),
        "{}",
        s.message()
    );
}

/// Runs an operation to the end through reattaches; returns all responses.
async fn run_to_completion(
    c: &mut Client,
    first: Vec<proto::ExecutePlanResponse>,
    op_id: &str,
) -> Vec<proto::ExecutePlanResponse> {
    let mut all = first;
    while !all.last().is_some_and(is_complete) {
        let last = all.last().map(|r| r.response_id.clone());
        let s = c
            .reattach_execute(reattach(op_id, last.as_deref()))
            .await
            .unwrap()
            .into_inner();
        let (resps, end) = drain(s).await;
        end.unwrap();
        all.extend(resps);
    }
    all
}

/// True when the status came from the transport (a source chain), not from
/// a server-sent status.
fn transport_source(s: &Status) -> bool {
    let mut src = s.source();
    while let Some(e) = src {
        if e.downcast_ref::<h2::Error>().is_some() || e.downcast_ref::<std::io::Error>().is_some() {
            return true;
        }
        src = e.source();
    }
    false
}
