//! The floor for any Spark Connect client: one plain tonic `ExecutePlan`
//! drained with no decoding, run once, one JSON line on stdout.
//!
//! ```text
//! cargo bench --bench raw_drain --features testing -- \
//!     --remote sc://127.0.0.1:15010 --case arrow10m|first_batch
//! ```
//!
//! `scripts/side-by-side.sh` runs it as the `raw` arm next to this crate's
//! client and PySpark's: the same query, the same warm-up round trip before
//! the timer, the timer from just before the ExecutePlan to the last
//! response (`arrow10m`) or to the first ArrowBatch (`first_batch`). No
//! retries, no reattach, no sanitize layer, no Arrow decoding: only the
//! `row_count` of each ArrowBatch is summed and checked after the timer.
//! (There is no `cuts10m` here: a raw stream does not survive a cut.)

use std::process::ExitCode;
use std::time::Instant;

use spark_connect_retry::proto::execute_plan_response::ResponseType;
use spark_connect_retry::proto::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_retry::proto::{self, ExecutePlanRequest, Plan, Relation};

const ROWS: i64 = 10_000_000;
const QUERY: &str = "SELECT id, id*2 AS x FROM range(10000000)";
const USAGE: &str = "usage: raw_drain --remote sc://HOST:PORT --case arrow10m|first_batch";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn parse_args() -> Result<(String, String), String> {
    let (mut remote, mut case) = (std::env::var("SPARK_REMOTE").ok(), None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--remote" => remote = args.next(),
            "--case" => case = args.next(),
            // `cargo bench` passes `--bench`; the driver passes `--proxy-cuts 0`.
            "--bench" => {}
            "--proxy-cuts" => {
                args.next();
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let remote = remote.ok_or(USAGE)?;
    let case = case.ok_or(USAGE)?;
    if case != "arrow10m" && case != "first_batch" {
        return Err(format!("unknown case {case:?}\n{USAGE}"));
    }
    Ok((remote, case))
}

async fn run(remote: &str, case: &str) -> Result<String, BoxError> {
    let authority = remote
        .trim_start_matches("sc://")
        .split(['/', ';'])
        .next()
        .unwrap_or_default();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{authority}"))?
        .tcp_nodelay(true)
        .connect()
        .await?;
    let mut client =
        SparkConnectServiceClient::new(channel).max_decoding_message_size(128 * 1024 * 1024);
    let session_id = uuid::Uuid::new_v4().to_string();
    let user_context = Some(proto::UserContext::default());
    // Warm-up round trip outside the timer, as the other arms do.
    let version = client
        .analyze_plan(proto::AnalyzePlanRequest {
            session_id: session_id.clone(),
            user_context: user_context.clone(),
            analyze: Some(proto::analyze_plan_request::Analyze::SparkVersion(
                Default::default(),
            )),
            ..Default::default()
        })
        .await?
        .into_inner();
    let request = ExecutePlanRequest {
        session_id,
        user_context,
        plan: Some(Plan {
            op_type: Some(proto::plan::OpType::Root(Relation {
                common: None,
                rel_type: Some(proto::relation::RelType::Sql(proto::Sql {
                    query: QUERY.to_owned(),
                })),
            })),
        }),
        ..Default::default()
    };
    let t0 = Instant::now();
    let mut stream = client.execute_plan(request).await?.into_inner();
    let (mut rows, mut batches, mut bytes) = (0i64, 0u64, 0u64);
    while let Some(resp) = stream.message().await? {
        if let Some(ResponseType::ArrowBatch(b)) = resp.response_type {
            rows += b.row_count;
            batches += 1;
            bytes += b.data.len() as u64;
            if case == "first_batch" {
                break;
            }
        }
    }
    let wall = t0.elapsed();
    drop(stream);
    let want = if case == "first_batch" {
        rows.max(1)
    } else {
        ROWS
    };
    if rows != want {
        return Err(format!("wrong result: {rows} rows, want {want}").into());
    }
    let server = match version.result {
        Some(proto::analyze_plan_response::Result::SparkVersion(v)) => v.version,
        _ => String::new(),
    };
    Ok(format!(
        concat!(
            "{{\"client\":\"raw\",\"case\":\"{}\",\"wall_ms\":{:.1},\"cpu_ms\":null,",
            "\"rows\":{},\"batches\":{},\"bytes\":{},\"proxy_cuts\":0,\"server\":\"{}\"}}"
        ),
        case,
        wall.as_secs_f64() * 1e3,
        rows,
        batches,
        bytes,
        server,
    ))
}

fn main() -> ExitCode {
    let (remote, case) = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(&remote, &case)) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("raw_drain {case}: {e}");
            ExitCode::FAILURE
        }
    }
}
