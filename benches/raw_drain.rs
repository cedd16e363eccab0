//! The floor for any Spark Connect client: one plain tonic `ExecutePlan`
//! drained with no decoding, run once, one JSON line on stdout.
//!
//! ```text
//! cargo bench --bench raw_drain -- \
//!     --remote sc://127.0.0.1:15010 --case arrow10m|first_batch [--reattachable] [--keep] \
//!     [--batch-rows N]
//! ```
//!
//! `scripts/side-by-side.sh` runs it as the `raw` arm next to this crate's
//! client and PySpark's: the same query, the same warm-up round trip before
//! the timer, the timer from just before the ExecutePlan to the last
//! response (`arrow10m`) or to the first ArrowBatch (`first_batch`). No
//! retries, no reattach, no sanitize layer, no Arrow decoding: only the
//! `row_count` of each ArrowBatch is summed and checked after the timer.
//! (There is no `cuts10m` here: a raw stream does not survive a cut.)
//!
//! TLS: with `;tls_ca_file=PATH` in `--remote` the drain connects over TLS
//! trusting only that CA (tonic's `ClientTlsConfig`, the host name checked),
//! so it can stand beside the other arms behind a TLS load balancer. It
//! reads no other connection-string key.
//!
//! Two flags make it the floor for a real client, the `raw_client` arm:
//! `--reattachable` asks for a reattachable execution, as every retrying
//! client does (this crate, PySpark, the official Rust client), so the
//! server keeps its retry buffer (one ReleaseExecute(all) after the timer
//! frees it); `--keep` keeps every payload until after the timer, as a
//! client that returns the result must (163 MB for 10M rows: the memory is
//! fresh, and faulting it in costs the process CPU).
//!
//! `--batch-rows N` asks the server for N rows per Arrow batch (a Config
//! call setting `spark.sql.execution.arrow.maxRecordsPerBatch`, before the
//! timer), as this crate's session does by default; without it the
//! server's own value (Spark: 10,000) stays.

mod support;

use std::process::ExitCode;
use std::time::Instant;

use spark_connect_retry::proto::execute_plan_request::{RequestOption, request_option};
use spark_connect_retry::proto::execute_plan_response::ResponseType;
use spark_connect_retry::proto::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_retry::proto::{self, ExecutePlanRequest, Plan, Relation};

const ROWS: i64 = 10_000_000;
const QUERY: &str = "SELECT id, id*2 AS x FROM range(10000000)";
const USAGE: &str = "usage: raw_drain --remote sc://HOST:PORT --case arrow10m|first_batch [--reattachable] [--keep] [--batch-rows N]";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Command-line flags.
struct Args {
    remote: String,
    case: String,
    reattachable: bool,
    keep: bool,
    batch_rows: Option<u32>,
}

fn parse_args() -> Result<Args, String> {
    let (mut remote, mut case) = (std::env::var("SPARK_REMOTE").ok(), None);
    let (mut reattachable, mut keep, mut batch_rows) = (false, false, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--remote" => remote = args.next(),
            "--case" => case = args.next(),
            "--reattachable" => reattachable = true,
            "--keep" => keep = true,
            "--batch-rows" => {
                let n = args.next().ok_or("--batch-rows needs a row count")?;
                batch_rows = Some(n.parse().map_err(|e| format!("--batch-rows {n:?}: {e}"))?);
            }
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
    Ok(Args {
        remote,
        case,
        reattachable,
        keep,
        batch_rows,
    })
}

async fn run(args: &Args) -> Result<String, BoxError> {
    let (case, reattachable) = (args.case.as_str(), args.reattachable);
    let authority = args
        .remote
        .trim_start_matches("sc://")
        .split(['/', ';'])
        .next()
        .unwrap_or_default();
    let ca_file = args
        .remote
        .split(';')
        .find_map(|kv| kv.strip_prefix("tls_ca_file="));
    let scheme = if ca_file.is_some() { "https" } else { "http" };
    // The session's windows, so the drain stays the floor over a long round
    // trip too (tonic's own are 2 MiB per stream, 5 MiB per connection).
    let mut endpoint = tonic::transport::Endpoint::from_shared(format!("{scheme}://{authority}"))?;
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|e| format!("tls_ca_file {path}: {e}"))?;
        let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
        endpoint = endpoint.tls_config(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(pem))
                .domain_name(host),
        )?;
    }
    let channel = endpoint
        .tcp_nodelay(true)
        // The session's default HTTP/2 windows (16 MiB per stream, 32 MiB per connection).
        .initial_stream_window_size(16 * 1024 * 1024)
        .initial_connection_window_size(32 * 1024 * 1024)
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
    if let Some(rows) = args.batch_rows {
        use proto::config_request::{Operation, Set, operation::OpType};
        client
            .config(proto::ConfigRequest {
                session_id: session_id.clone(),
                user_context: user_context.clone(),
                operation: Some(Operation {
                    op_type: Some(OpType::Set(Set {
                        pairs: vec![proto::KeyValue {
                            key: "spark.sql.execution.arrow.maxRecordsPerBatch".into(),
                            value: Some(rows.to_string()),
                        }],
                        silent: None,
                    })),
                }),
                ..Default::default()
            })
            .await?;
    }
    let request_options = if reattachable {
        vec![RequestOption {
            request_option: Some(request_option::RequestOption::ReattachOptions(
                proto::ReattachOptions { reattachable: true },
            )),
        }]
    } else {
        Vec::new()
    };
    let operation_id = uuid::Uuid::new_v4().to_string();
    let request = ExecutePlanRequest {
        session_id: session_id.clone(),
        user_context: user_context.clone(),
        operation_id: Some(operation_id.clone()),
        request_options,
        plan: Some(Plan {
            op_type: Some(proto::plan::OpType::Root(Relation {
                common: None,
                rel_type: Some(proto::relation::RelType::Sql(proto::Sql {
                    query: format!(
                        "{QUERY}{}",
                        std::env::var("SBS_QUERY_SUFFIX").unwrap_or_default()
                    ),
                    ..Default::default()
                })),
            })),
        }),
        ..Default::default()
    };
    let t0 = Instant::now();
    let mut stream = client.execute_plan(request).await?.into_inner();
    let (mut rows, mut batches, mut bytes) = (0i64, 0u64, 0u64);
    let mut kept = Vec::new();
    while let Some(resp) = stream.message().await? {
        if let Some(ResponseType::ArrowBatch(b)) = resp.response_type {
            rows += b.row_count;
            batches += 1;
            bytes += b.data.len() as u64;
            if args.keep {
                kept.push(b.data);
            }
            if case == "first_batch" {
                break;
            }
        }
    }
    let wall = t0.elapsed();
    drop(stream);
    drop(kept);
    if reattachable {
        client
            .release_execute(proto::ReleaseExecuteRequest {
                session_id,
                user_context,
                operation_id,
                release: Some(proto::release_execute_request::Release::ReleaseAll(
                    Default::default(),
                )),
                ..Default::default()
            })
            .await?;
    }
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
            "{{\"client\":\"{}\",\"case\":\"{}\",\"wall_ms\":{:.1},\"cpu_ms\":null,",
            "\"rows\":{},\"batches\":{},\"bytes\":{},\"proxy_cuts\":0,\"server\":\"{}\"}}"
        ),
        match (reattachable, args.keep) {
            (false, false) => "raw",
            (true, true) => "raw_client",
            (true, false) => "raw_reattach",
            (false, true) => "raw_keep",
        },
        case,
        wall.as_secs_f64() * 1e3,
        rows,
        batches,
        bytes,
        server,
    ))
}

fn main() -> ExitCode {
    support::main_with(
        parse_args(),
        |a| format!("raw_drain {}", a.case),
        |rt, a| rt.block_on(run(a)).map_err(|e| e.to_string()),
    )
}
