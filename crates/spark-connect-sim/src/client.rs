//! The client under test: the generated stub `spark-connect-stub` over
//! the [`ReattachLayer`], over a request log, over a tonic channel on
//! simulated TCP. Its ids (session, operation) and its retry jitter come
//! from the seed. A planted defect can be put under the layer to show
//! that the simulation fails when the client is wrong.

use std::cell::RefCell;
use std::future::Future;
use std::io::Cursor;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use arrow_array::{Array, Int64Array};
use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use spark_connect_retry::layer::ReattachLayer;
use spark_connect_retry::retrying::{PySparkRetrying, Retrying};
use spark_connect_stub::spark::connect as pb;
use tower::{Layer, Service};

use crate::net::{PUSHBACK, RequestLog};
use crate::trace::Trace;

/// A deliberately broken client, to show that the simulation can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Defect {
    /// None: the client as shipped.
    #[default]
    None,
    /// Every `ReattachExecute` loses its `last_response_id` on the way to
    /// the network, so the server resumes from the start.
    DropLastResponseId,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The service under the [`ReattachLayer`]: logs every request (the
/// layer's own reattaches and releases too) and applies the [`Defect`].
#[derive(Clone, Debug)]
pub struct Logged<S> {
    inner: S,
    log: RequestLog,
    defect: Defect,
}

impl<S> Logged<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, log: RequestLog, defect: Defect) -> Self {
        Logged { inner, log, defect }
    }
}

impl<S> Service<http::Request<tonic::body::Body>> for Logged<S>
where
    S: Service<http::Request<tonic::body::Body>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let path = req.uri().path();
        let rpc = path.rsplit('/').next().unwrap_or(path).to_owned();
        let at = turmoil::sim_elapsed().unwrap_or_default();
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((at, rpc.clone()));
        // The ready clone serves this call (tower's rule).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let defect = self.defect;
        let log = self.log.clone();
        Box::pin(async move {
            let req = if defect == Defect::DropLastResponseId && rpc == "ReattachExecute" {
                drop_last_response_id(req).await?
            } else {
                req
            };
            let resp = inner.call(req).await.map_err(Into::into)?;
            // A trailers-only RESOURCE_EXHAUSTED: a pushback (RetryInfo) the
            // retry must honour; logged apart from the requests.
            if resp.headers().get("grpc-status").map(|v| v.as_bytes()) == Some(b"8") {
                let at = turmoil::sim_elapsed().unwrap_or_default();
                log.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((at, PUSHBACK.to_owned()));
            }
            Ok(resp)
        })
    }
}

/// The planted defect: decodes the request, clears `last_response_id`,
/// encodes it again.
async fn drop_last_response_id(
    req: http::Request<tonic::body::Body>,
) -> Result<http::Request<tonic::body::Body>, BoxError> {
    let (parts, body) = req.into_parts();
    let bytes = body.collect().await?.to_bytes();
    if bytes.len() < 5 {
        return Err("short gRPC frame".into());
    }
    let mut msg = pb::ReattachExecuteRequest::decode(&bytes[5..])?;
    msg.last_response_id = None;
    let encoded = msg.encode_to_vec();
    let mut framed = BytesMut::with_capacity(encoded.len() + 5);
    framed.put_u8(0);
    framed.put_u32(u32::try_from(encoded.len())?);
    framed.extend_from_slice(&encoded);
    let body = tonic::body::Body::new(http_body_util::Full::new(framed.freeze()));
    Ok(http::Request::from_parts(parts, body))
}

/// The client's ids, drawn from the seed (a stream of its own, apart from
/// the schedule's).
#[derive(Debug, Clone)]
pub struct Ids {
    /// The session id.
    pub session: String,
    /// The operation id of the query.
    pub operation: String,
}

impl Ids {
    /// Draws both from `seed`.
    pub fn from_seed(seed: u64) -> Ids {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x05ee_d1d5);
        let mut uuid = || {
            let b: u128 = rng.random();
            // A version-4, variant-1 UUID.
            let b = (b & !(0xf << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
            let h = format!("{b:032x}");
            format!(
                "{}-{}-{}-{}-{}",
                &h[0..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..32]
            )
        };
        Ids {
            session: uuid(),
            operation: uuid(),
        }
    }
}

/// How the query ended, as the stub saw it.
#[derive(Debug, Clone, Default)]
pub struct QueryResult {
    /// The first row id the query must deliver.
    pub start: i64,
    /// How many rows it must deliver.
    pub expected: i64,
    /// Every row id delivered, in order of delivery.
    pub rows: Vec<i64>,
    /// Whether `ResultComplete` arrived.
    pub complete: bool,
    /// The status the stream ended with, if it failed.
    pub error: Option<(tonic::Code, String)>,
    /// Every row id delivered was decoded from a batch whose
    /// `start_offset` matched the rows before it.
    pub offsets_ok: bool,
}

/// When one query's responses reached the caller, and when it ended
/// (simulated time).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryTimes {
    /// When its result stream was open (the stub: `execute_plan` answered;
    /// the session: `sql()` returned, after its unary calls).
    pub opened: Option<Duration>,
    /// Each response delivered (the stub: every response; the session:
    /// every Arrow batch).
    pub responses: Vec<Duration>,
    /// When the query ended: complete, failed, or its stream stopped.
    pub ended: Option<Duration>,
}

/// Each query's [`QueryTimes`], written as it happens and shared with the
/// world: a run cut at the time limit still shows how far each query got.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    inner: Rc<RefCell<Vec<QueryTimes>>>,
}

impl Timeline {
    /// Query `k` delivered a response now.
    pub(crate) fn response(&self, k: usize) {
        let now = turmoil::sim_elapsed().unwrap_or_default();
        self.query(k, |q| q.responses.push(now));
    }

    /// Query `k`'s result stream is open now.
    pub(crate) fn opened(&self, k: usize) {
        let now = turmoil::sim_elapsed().unwrap_or_default();
        self.query(k, |q| q.opened = Some(now));
    }

    /// Query `k` ended now.
    pub(crate) fn ended(&self, k: usize) {
        let now = turmoil::sim_elapsed().unwrap_or_default();
        self.query(k, |q| q.ended = Some(now));
    }

    /// Every query's times so far.
    pub(crate) fn queries(&self) -> Vec<QueryTimes> {
        self.inner.borrow().clone()
    }

    fn query(&self, k: usize, f: impl FnOnce(&mut QueryTimes)) {
        let mut queries = self.inner.borrow_mut();
        if queries.len() <= k {
            queries.resize_with(k + 1, QueryTimes::default);
        }
        f(&mut queries[k]);
    }
}

/// What the client needs to know.
#[derive(Debug, Clone)]
pub struct ClientSetup {
    /// The seed (jitter, ids).
    pub seed: u64,
    /// The host it calls.
    pub target: &'static str,
    /// Rows of the `range` query.
    pub rows: i64,
    /// Allow chunked batches of this preferred size.
    pub chunk_bytes: Option<i64>,
    /// Whether the layer sends releases (else the client sends `release_all`
    /// itself at the end, as PySpark does through the guard).
    pub layer_releases: bool,
    /// The planted defect.
    pub defect: Defect,
}

/// Runs the query through the stub and records what arrived (its times in
/// `times`, as query 0).
pub async fn run_query(
    setup: &ClientSetup,
    log: RequestLog,
    trace: &Trace,
    times: &Timeline,
) -> QueryResult {
    let ids = Ids::from_seed(setup.seed);
    let channel = crate::net::channel(setup.target, None);
    let logged = Logged::new(channel, log, setup.defect);
    let mut layer = ReattachLayer::new().retrying(Retrying::pyspark().with_seed(setup.seed));
    if !setup.layer_releases {
        layer = layer.releases(spark_connect_retry::layer::Releases::CallerOnly);
    }
    let mut client =
        pb::spark_connect_service_client::SparkConnectServiceClient::new(layer.layer(logged));
    let mut request_options = vec![];
    if let Some(size) = setup.chunk_bytes {
        request_options.push(pb::execute_plan_request::RequestOption {
            request_option: Some(
                pb::execute_plan_request::request_option::RequestOption::ResultChunkingOptions(
                    pb::ResultChunkingOptions {
                        allow_arrow_batch_chunking: true,
                        preferred_arrow_chunk_size: Some(size),
                    },
                ),
            ),
        });
    }
    let request = pb::ExecutePlanRequest {
        session_id: ids.session.clone(),
        operation_id: Some(ids.operation.clone()),
        user_context: Some(pb::UserContext {
            user_id: "sim".into(),
            ..Default::default()
        }),
        client_type: Some("spark-connect-sim".into()),
        request_options,
        plan: Some(pb::Plan {
            op_type: Some(pb::plan::OpType::Root(pb::Relation {
                rel_type: Some(pb::relation::RelType::Range(pb::Range {
                    start: Some(0),
                    end: setup.rows,
                    step: 1,
                    num_partitions: None,
                })),
                ..Default::default()
            })),
        }),
        ..Default::default()
    };
    let mut out = QueryResult {
        offsets_ok: true,
        expected: setup.rows,
        ..Default::default()
    };
    trace.now(format!(
        "client: ExecutePlan session {} operation {}",
        ids.session, ids.operation
    ));
    let mut stream = match client.execute_plan(request).await {
        Ok(r) => r.into_inner(),
        Err(status) => {
            trace.now(format!(
                "client: open failed {:?} {}",
                status.code(),
                status.message()
            ));
            out.error = Some((status.code(), status.message().to_owned()));
            times.ended(0);
            return out;
        }
    };
    times.opened(0);
    let mut chunks: Vec<u8> = vec![];
    loop {
        match stream.message().await {
            Ok(Some(resp)) => {
                times.response(0);
                record(&resp, &mut out, &mut chunks, trace);
            }
            Ok(None) => {
                trace.now("client: stream ended");
                break;
            }
            Err(status) => {
                trace.now(format!(
                    "client: failed {:?} {}",
                    status.code(),
                    status.message()
                ));
                out.error = Some((status.code(), status.message().to_owned()));
                break;
            }
        }
    }
    times.ended(0);
    drop(stream);
    if !setup.layer_releases {
        let release = pb::ReleaseExecuteRequest {
            session_id: ids.session.clone(),
            operation_id: ids.operation.clone(),
            user_context: Some(pb::UserContext {
                user_id: "sim".into(),
                ..Default::default()
            }),
            release: Some(pb::release_execute_request::Release::ReleaseAll(
                pb::release_execute_request::ReleaseAll {},
            )),
            ..Default::default()
        };
        // PySpark retries its release a few times, then gives up.
        for _ in 0..5 {
            match client.release_execute(release.clone()).await {
                Ok(_) => {
                    trace.now("client: released");
                    break;
                }
                Err(status) => {
                    trace.now(format!("client: release failed {:?}", status.code()));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
    out
}

fn record(
    resp: &pb::ExecutePlanResponse,
    out: &mut QueryResult,
    chunks: &mut Vec<u8>,
    trace: &Trace,
) {
    use pb::execute_plan_response::ResponseType;
    match &resp.response_type {
        Some(ResponseType::ArrowBatch(b)) => {
            trace.now(format!(
                "client: batch {} offset {:?} rows {} chunk {:?}/{:?}",
                resp.response_id, b.start_offset, b.row_count, b.chunk_index, b.num_chunks_in_batch
            ));
            chunks.extend_from_slice(&b.data);
            let last = match (b.chunk_index, b.num_chunks_in_batch) {
                (Some(i), Some(n)) => i + 1 >= n,
                _ => true,
            };
            if !last {
                return;
            }
            let data = Bytes::from(std::mem::take(chunks));
            if b.start_offset != Some(out.rows.len() as i64) {
                out.offsets_ok = false;
            }
            match decode(&data) {
                Some(ids) => out.rows.extend(ids),
                None => {
                    trace.now("client: undecodable batch");
                    out.offsets_ok = false;
                }
            }
        }
        Some(ResponseType::ResultComplete(_)) => {
            trace.now(format!("client: complete {}", resp.response_id));
            out.complete = true;
        }
        _ => trace.now(format!("client: response {}", resp.response_id)),
    }
}

/// The `id` column of an Arrow IPC stream.
fn decode(data: &[u8]) -> Option<Vec<i64>> {
    let reader = arrow_ipc::reader::StreamReader::try_new(Cursor::new(data), None).ok()?;
    let mut ids = vec![];
    for batch in reader {
        let batch = batch.ok()?;
        let col = batch.column(0).as_any().downcast_ref::<Int64Array>()?;
        ids.extend(col.values().iter().copied());
        debug_assert_eq!(col.null_count(), 0);
    }
    Some(ids)
}
