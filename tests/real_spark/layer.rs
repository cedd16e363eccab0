//! `ReattachLayer` under a stub generated from the protos with messages of
//! its own (`spark-connect-stub`), not the session, against real Spark.
//!
//! *Why:* the layer promises exact results to any tonic client; the
//! embedded server's fault scripts show the rules, these show them through
//! real Spark's own behavior: connections cut mid-stream by the fault proxy,
//! and a server that ends streams cleanly every 1 MiB. Every row is decoded
//! from Arrow and checked once, in order, and the layer's `ReattachExecute`s
//! are counted beneath it, where they go on the wire.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use spark_connect_retry::layer::{ReattachLayer, ReattachService};
use spark_connect_stub::spark::connect as stub;
use stub::spark_connect_service_client::SparkConnectServiceClient;
use tower::Layer;

use crate::{
    Check, CutMode, CutSchedule, Direction, Duration, FaultProxy, Instant, Retrying, SocketAddr,
    absorb, addr_of, assert_exact, debug_events_on_failure, remote,
};

const ROWS: i64 = 2_000_000;
const REATTACH_EXECUTE: &str = "/spark.connect.SparkConnectService/ReattachExecute";

/// The foreign stub over `ReattachLayer` over a channel to `addr`; the
/// layer's `ReattachExecute`s are counted in `reattaches`.
fn stub_over_layer(
    addr: SocketAddr,
    reattaches: Arc<AtomicU64>,
) -> SparkConnectServiceClient<ReattachService> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let counted =
        tower::util::MapRequest::new(channel, move |req: http::Request<tonic::body::Body>| {
            if req.uri().path() == REATTACH_EXECUTE {
                reattaches.fetch_add(1, Ordering::SeqCst);
            }
            req
        });
    let layer = ReattachLayer::new().retrying(Retrying::default().with_seed(11));
    SparkConnectServiceClient::new(layer.layer(counted)).max_decoding_message_size(usize::MAX)
}

fn user() -> Option<stub::UserContext> {
    Some(stub::UserContext {
        user_id: "layer-test".into(),
        ..Default::default()
    })
}

/// A foreign-stub `ExecutePlanRequest` for `sql` in `session`, with no
/// operation id and no reattach option (the layer adds them).
fn sql_request(session: &str, sql: &str) -> stub::ExecutePlanRequest {
    stub::ExecutePlanRequest {
        session_id: session.into(),
        user_context: user(),
        plan: Some(stub::Plan {
            op_type: Some(stub::plan::OpType::Root(stub::Relation {
                rel_type: Some(stub::relation::RelType::Sql(stub::Sql {
                    query: sql.into(),
                    ..Default::default()
                })),
                ..Default::default()
            })),
        }),
        client_type: Some("foreign-stub".into()),
        ..Default::default()
    }
}

/// Reads the 2M-row result with a stub over the layer through `proxy` and
/// checks it exact (`what` names the run in a failure): the proxy's cuts,
/// the ReattachExecute calls the layer made, and when the read started.
async fn exact_through(proxy: &FaultProxy, what: &str) -> (u64, u64, Instant) {
    let reattaches = Arc::new(AtomicU64::new(0));
    let mut client = stub_over_layer(proxy.local_addr(), reattaches.clone());
    let started = Instant::now();
    let check = tokio::time::timeout(Duration::from_secs(300), read_rows(&mut client, ROWS))
        .await
        .unwrap_or_else(|_| panic!("{what}: hung; proxy {:?}", proxy.stats()))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_exact(&check, ROWS);
    (
        proxy.stats().cuts,
        reattaches.load(Ordering::SeqCst),
        started,
    )
}

/// `SELECT id, id*2 AS x FROM range(n)` through `client` in a new session
/// to its end: every Arrow batch decoded into a [`Check`]; the stream must
/// end with `ResultComplete` and nothing after it. The session is released
/// at the end (a pass-through call), as `SparkSession::close` does.
async fn read_rows(
    client: &mut SparkConnectServiceClient<ReattachService>,
    n: i64,
) -> Result<Check, tonic::Status> {
    let session = uuid::Uuid::new_v4().to_string();
    let check = read_rows_in(client, &session, n).await?;
    client
        .release_session(stub::ReleaseSessionRequest {
            session_id: session,
            user_context: user(),
            ..Default::default()
        })
        .await?;
    Ok(check)
}

async fn read_rows_in(
    client: &mut SparkConnectServiceClient<ReattachService>,
    session: &str,
    n: i64,
) -> Result<Check, tonic::Status> {
    let request = sql_request(session, &format!("SELECT id, id*2 AS x FROM range({n})"));
    let mut stream = client.execute_plan(request).await?.into_inner();
    let mut check = Check {
        in_order: true,
        ..Default::default()
    };
    let mut complete = false;
    while let Some(resp) = stream.message().await? {
        assert!(!complete, "a response after ResultComplete");
        match resp.response_type {
            Some(stub::execute_plan_response::ResponseType::ArrowBatch(b)) => {
                let reader = arrow_ipc::reader::StreamReader::try_new(&b.data[..], None)
                    .expect("an Arrow IPC stream");
                let mut rows = 0;
                for batch in reader {
                    let batch = batch.expect("an Arrow batch");
                    rows += batch.num_rows() as i64;
                    absorb(&mut check, &batch);
                }
                assert_eq!(rows, b.row_count, "the batch's row_count");
            }
            Some(stub::execute_plan_response::ResponseType::ResultComplete(_)) => complete = true,
            _ => {}
        }
    }
    assert!(complete, "the stream ended without ResultComplete");
    Ok(check)
}

real_test!(
    layer_under_a_foreign_stub_through_seeded_cuts,
    needs = [SPARK]
);
/// 8 seeded schedules of up to 3 cuts (RST, FIN every fourth seed) 200 kB
/// to 20 MB into each connection, as the session's: 2M rows exact each
/// time, and the layer reattached after the cuts.
async fn layer_under_a_foreign_stub_through_seeded_cuts() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE") else {
        return;
    };
    debug_events_on_failure();
    let (mut all_cuts, mut all_reattaches) = (0, 0);
    for seed in 0..8u64 {
        let schedule = CutSchedule::seeded(seed, 3, 200_000..=20_000_000);
        let mode = if seed % 4 == 3 {
            CutMode::Fin
        } else {
            CutMode::Reset
        };
        let proxy = FaultProxy::builder(addr_of(&url))
            .cut_schedule(Direction::ServerToClient, schedule.clone())
            .cut_mode(mode)
            .start()
            .await
            .unwrap();
        let (cuts, reattached, started) =
            exact_through(&proxy, &format!("seed {seed} {:?}", schedule.offsets())).await;
        eprintln!(
            "layer seed {seed} {mode:?} offsets {:?}: 2M rows exact in {:.2?}, {cuts} cuts, \
             {reattached} ReattachExecute, {} connections",
            schedule.offsets(),
            started.elapsed(),
            proxy.stats().connections
        );
        assert!(cuts >= 1, "seed {seed}: the 32 MB result was never cut");
        assert!(
            reattached >= 1,
            "seed {seed}: {cuts} cuts, yet the layer never reattached"
        );
        all_cuts += cuts;
        all_reattaches += reattached;
        proxy.shutdown().await;
    }
    eprintln!("layer, 8 seeds: {all_cuts} cuts, {all_reattaches} ReattachExecute, all exact");
}

real_test!(
    layer_under_a_foreign_stub_through_graceful_ends_and_cuts,
    needs = [GRACEFUL]
);
/// The server ends each stream cleanly after 1 MiB or 1 s, and the proxy
/// cuts the connection twice on top: 2M rows exact, with a reattach per
/// clean end (a stub alone would stop at the first).
async fn layer_under_a_foreign_stub_through_graceful_ends_and_cuts() {
    let Some(url) = remote("SPARK_CONNECT_TEST_REMOTE_GRACEFUL") else {
        return;
    };
    debug_events_on_failure();
    let schedule = CutSchedule::seeded(7, 2, 2_000_000..=12_000_000);
    let proxy = FaultProxy::builder(addr_of(&url))
        .cut_schedule(Direction::ServerToClient, schedule.clone())
        .start()
        .await
        .unwrap();
    let (cuts, reattached, started) =
        exact_through(&proxy, &format!("{:?}", schedule.offsets())).await;
    eprintln!(
        "layer, graceful ends + cuts at {:?}: 2M rows exact in {:.2?}, {cuts} cuts, \
         {reattached} ReattachExecute",
        schedule.offsets(),
        started.elapsed()
    );
    assert!(cuts >= 1, "the result was never cut: {:?}", proxy.stats());
    assert!(
        reattached > 10,
        "32 MB in 1 MiB segments needs a reattach per clean end: {reattached}"
    );
    proxy.shutdown().await;
}
