//! The simulated world of one schedule: the embedded server, the guard
//! (optional) and the client, each a turmoil host, with real tonic, hyper,
//! h2 and tower over simulated TCP. Only the network and the clock are
//! simulated. Timed faults are applied between ticks; the server's
//! turn-based faults are pushed into its fault script when it first starts.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spark_connect_guard::Guard;
use spark_connect_retry::layer::ReattachLayer;
use spark_connect_retry::reattach::StreamStats;
use spark_connect_retry::retrying::{PySparkRetrying, Retrying};
use spark_connect_testkit::{
    CallCounts, Fault as KitFault, Rpc, SparkException, TestServer, TokenRotation,
};

use crate::client::{ClientSetup, Defect, QueryResult, QueryTimes, Timeline, run_query};
use crate::net::{self, PORT, PUSHBACK, RequestLog};
use crate::schedule::{ClientKind, Fault, Link, Schedule, StreamRpc, Topology};
use crate::session::{CurrentToken, SessionMetrics, SessionResult, run_session};
use crate::trace::Trace;
use crate::unary::{UnaryResult, run_unary};

/// How the world is run (the same for every seed of a sample).
#[derive(Debug, Clone)]
pub struct WorldConfig {
    /// The planted defect of the client (none by default).
    pub defect: Defect,
    /// turmoil's tick.
    pub tick: Duration,
    /// The simulated time after which a run counts as hung.
    pub limit: Duration,
    /// Message latency on every link, before any latency fault.
    pub latency: (Duration, Duration),
}

impl Default for WorldConfig {
    fn default() -> Self {
        WorldConfig {
            defect: Defect::None,
            tick: Duration::from_millis(10),
            limit: Duration::from_secs(600),
            latency: (Duration::from_millis(10), Duration::from_millis(50)),
        }
    }
}

/// What one run left behind, for the properties and the trace.
#[derive(Debug)]
pub struct Outcome {
    /// Each query's result (one for the stub); `None` when the client
    /// never finished.
    pub results: Option<Vec<QueryResult>>,
    /// The session's counters of each query's stream (empty for the stub).
    pub stream_stats: Vec<Option<StreamStats>>,
    /// What the session's meter provider received (`None` for the stub).
    pub session_metrics: Option<SessionMetrics>,
    /// turmoil's error (the time limit, a host's error), if any.
    pub sim_error: Option<String>,
    /// Simulated time at the end.
    pub elapsed: Duration,
    /// Every request the client sent, at simulated time.
    pub requests: Vec<(Duration, String)>,
    /// When the client was answered `RESOURCE_EXHAUSTED` at once (the stub,
    /// under the layer).
    pub pushbacks: Vec<Duration>,
    /// Each firing of the server's scripted faults: when (simulated time, to
    /// the tick) and what it did (the test kit's description).
    pub firings: Vec<(Duration, String)>,
    /// When each query delivered each response and when it ended, as far
    /// as it got (also when the run hit the time limit).
    pub timelines: Vec<QueryTimes>,
    /// What the server counted, summed over its lives (a crash starts a new one).
    pub server_calls: CallCounts,
    /// Calls and streams the server refused for their token, summed over
    /// its lives.
    pub token_refusals: u64,
    /// The executions the server holds at the end (`None`: it is down).
    pub live_executions: Option<Vec<String>>,
    /// Whether the client's `release_all` was acknowledged (through the
    /// guard, where releases are the client's), or the session's `close()`
    /// succeeded.
    pub released: bool,
    /// What the second client did (`None`: the seed has none, or it never
    /// finished).
    pub unary: Option<UnaryResult>,
    /// The trace.
    pub trace: Trace,
}

/// The server's lives: one [`TestServer`] per start.
#[derive(Debug, Default)]
struct Servers {
    lives: Vec<TestServer>,
    up: bool,
}

type Shared<T> = Rc<RefCell<T>>;

/// The server's lives, shared with the session's token provider (which
/// must be `Send`): the simulation runs on one thread, so the lock is
/// never contended.
type SharedServers = Arc<Mutex<Servers>>;

fn lock(servers: &SharedServers) -> std::sync::MutexGuard<'_, Servers> {
    servers
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The bearer tokens of a [`Fault::TokenExpiry`]: `sim-token-<k>`.
fn rotation(every: u64) -> TokenRotation {
    TokenRotation::new("sim-token-").every_responses(every)
}

/// The identity service of a [`Fault::TokenExpiry`]: each token it hands
/// out is new, with a whole life ahead of it, and replaces the one before
/// (the server's current life rotates to it; a new life starts from the
/// last life's token).
fn issue_token(servers: SharedServers, every: u64) -> CurrentToken {
    Arc::new(move || {
        let k = lock(&servers)
            .lives
            .last()
            .and_then(TestServer::current_token)
            .unwrap_or(0);
        rotation(every).token(k)
    })
}

fn kit_rpc(rpc: StreamRpc) -> Rpc {
    match rpc {
        StreamRpc::Execute => Rpc::ExecutePlan,
        StreamRpc::Reattach => Rpc::ReattachExecute,
    }
}

/// The test kit's faults for a turn-based fault, in script order (none
/// for timed ones).
pub(crate) fn kit_faults(fault: &Fault) -> Vec<KitFault> {
    vec![match *fault {
        Fault::Reset { rpc, after } => KitFault::reset_connection()
            .on(kit_rpc(rpc))
            .after_responses(after),
        Fault::Unavailable { rpc, after } => KitFault::unavailable()
            .on(kit_rpc(rpc))
            .after_responses(after),
        Fault::Disconnected { rpc, after } => {
            KitFault::spark(SparkException::cursor_disconnected())
                .on(kit_rpc(rpc))
                .after_responses(after)
        }
        Fault::RetryInfo { rpc, ms } => KitFault::status(tonic::Code::ResourceExhausted, "busy")
            .retry_info(Duration::from_millis(ms))
            .on(kit_rpc(rpc)),
        Fault::Stall { rpc, after, ms } => KitFault::stall(Duration::from_millis(ms))
            .on(kit_rpc(rpc))
            .after_responses(after),
        Fault::OperationNotFound => KitFault::operation_not_found().on(Rpc::ExecutePlan),
        Fault::SessionNotFound => KitFault::session_not_found().on(Rpc::ExecutePlan),
        Fault::LoseRequest => KitFault::lose_request().on(Rpc::ExecutePlan),
        Fault::Restart { rpc, after } => {
            KitFault::restart().on(kit_rpc(rpc)).after_responses(after)
        }
        Fault::Repeat { every, times } => {
            // The first on the ExecutePlan, the rest on the reattaches
            // that follow: each after `every` responses of its stream.
            let first = KitFault::unavailable()
                .on(Rpc::ExecutePlan)
                .after_responses(every);
            let rest = KitFault::unavailable()
                .on(Rpc::ReattachExecute)
                .after_responses(every)
                .times(times.saturating_sub(1));
            return if times > 1 {
                vec![first, rest]
            } else {
                vec![first]
            };
        }
        Fault::Replay => KitFault::replay(),
        // Set on the server's builder instead.
        Fault::TokenExpiry { .. } => return vec![],
        Fault::Hold { .. }
        | Fault::Partition { .. }
        | Fault::Latency { .. }
        | Fault::Crash { .. } => {
            return vec![];
        }
    }]
}

/// A network or host action at a simulated time.
#[derive(Debug, Clone)]
enum Action {
    Hold(&'static str, &'static str),
    Release(&'static str, &'static str),
    Partition(&'static str, &'static str),
    PartitionOneway(&'static str, &'static str),
    Repair(&'static str, &'static str),
    Latency(&'static str, &'static str, Duration),
    Crash,
    Bounce,
}

fn hosts(link: Link, topology: Topology) -> (&'static str, &'static str) {
    match (link, topology) {
        (Link::ClientSide, Topology::Direct) => ("client", "server"),
        (Link::ClientSide, Topology::Guard) => ("client", "guard"),
        (Link::GuardServer, _) => ("guard", "server"),
    }
}

/// The timed faults as actions, in order of time (ties: in order drawn).
fn actions(schedule: &Schedule) -> Vec<(Duration, Action)> {
    let mut out = vec![];
    for fault in &schedule.faults {
        match *fault {
            Fault::Hold { at, dur, link } => {
                let (a, b) = hosts(link, schedule.topology);
                out.push((at, Action::Hold(a, b)));
                out.push((at + dur, Action::Release(a, b)));
            }
            Fault::Partition {
                at,
                dur,
                link,
                oneway,
            } => {
                let (a, b) = hosts(link, schedule.topology);
                let cut = if oneway {
                    Action::PartitionOneway(a, b)
                } else {
                    Action::Partition(a, b)
                };
                out.push((at, cut));
                out.push((at + dur, Action::Repair(a, b)));
            }
            Fault::Latency { at, link, ms } => {
                let (a, b) = hosts(link, schedule.topology);
                out.push((at, Action::Latency(a, b, Duration::from_millis(ms))));
            }
            Fault::Crash { at, down } => {
                out.push((at, Action::Crash));
                out.push((at + down, Action::Bounce));
            }
            _ => {}
        }
    }
    out.sort_by_key(|(at, _)| *at);
    out
}

/// Runs `schedule` to its end (or the time limit).
pub fn run(schedule: &Schedule, config: &WorldConfig) -> Outcome {
    let trace = Trace::default();
    let mut sim = turmoil::Builder::new()
        .rng_seed(schedule.seed)
        .tick_duration(config.tick)
        .simulation_duration(config.limit)
        .min_message_latency(config.latency.0)
        .max_message_latency(config.latency.1)
        .build();

    let servers: SharedServers = Arc::default();
    let mut script: Vec<KitFault> = schedule.faults.iter().flat_map(kit_faults).collect();
    if let Some(plan) = &schedule.unary {
        script.extend(plan.kit_faults());
    }
    {
        let servers = servers.clone();
        let trace = trace.clone();
        let s = schedule.clone();
        sim.host("server", move || {
            let servers = servers.clone();
            let trace = trace.clone();
            let script = script.clone();
            let s = s.clone();
            async move {
                let addr = SocketAddr::new(turmoil::lookup("server"), PORT);
                let incoming = net::incoming().await?;
                let mut builder = TestServer::builder().rows_per_batch(s.rows_per_batch);
                if let Some(n) = s.max_responses_per_stream {
                    builder = builder.max_responses_per_stream(n);
                }
                if let Some(every) = s.token_expiry() {
                    builder = builder.token_rotation(rotation(every));
                }
                let server = builder.serve_incoming(addr, incoming);
                // Tokens are the identity service's, not the server's: a
                // new life accepts the token the last one did.
                let carried = lock(&servers)
                    .lives
                    .last()
                    .and_then(TestServer::current_token)
                    .unwrap_or(0);
                for _ in 0..carried {
                    server.rotate_token();
                }
                let first = lock(&servers).lives.is_empty();
                if first {
                    // The script is the first life's: a crash loses what is left.
                    for fault in script {
                        server.faults().push(fault);
                    }
                }
                trace.now(format!("server: up (life {})", lock(&servers).lives.len()));
                {
                    let mut servers = lock(&servers);
                    servers.lives.push(server);
                    servers.up = true;
                }
                std::future::pending::<()>().await;
                Ok(())
            }
        });
    }
    if schedule.topology == Topology::Guard {
        let seed = schedule.seed;
        sim.host("guard", move || async move {
            let addr = SocketAddr::new(turmoil::lookup("guard"), PORT);
            let incoming = net::incoming().await?;
            // The guard's own HTTP/2 windows towards the server.
            let upstream = net::channel("server", Some((1024 * 1024, 32 * 1024 * 1024)));
            let guard = Guard::builder(format!("sc://server:{PORT}"))
                .layer(
                    ReattachLayer::new()
                        .retrying(Retrying::pyspark().with_seed(seed.wrapping_add(1))),
                )
                .serve_incoming(addr, upstream, incoming)
                .await?;
            std::future::pending::<()>().await;
            drop(guard);
            Ok(())
        });
    }
    let log: RequestLog = Arc::new(Mutex::new(vec![]));
    let result: Shared<Option<SessionResult>> = Rc::default();
    let released = Rc::new(std::cell::Cell::new(false));
    let timeline = Timeline::default();
    {
        let setup = ClientSetup {
            seed: schedule.seed,
            target: match schedule.topology {
                Topology::Direct => "server",
                Topology::Guard => "guard",
            },
            rows: schedule.rows,
            chunk_bytes: schedule.chunk_bytes,
            layer_releases: schedule.topology == Topology::Direct,
            defect: config.defect,
        };
        let log = log.clone();
        let result = result.clone();
        let trace = trace.clone();
        let servers = servers.clone();
        let released = released.clone();
        let kind = schedule.client.clone();
        let timeline = timeline.clone();
        let token = schedule
            .token_expiry()
            .map(|every| issue_token(servers.clone(), every));
        sim.client("client", async move {
            let out = match &kind {
                ClientKind::Stub => {
                    let out = run_query(&setup, log, &trace, &timeline).await;
                    released.set(
                        trace
                            .lines()
                            .iter()
                            .any(|l| l.ends_with("client: released")),
                    );
                    SessionResult {
                        queries: vec![out],
                        ..SessionResult::default()
                    }
                }
                ClientKind::Session { queries } => {
                    let out = run_session(
                        setup.seed,
                        setup.target,
                        queries,
                        token.clone(),
                        log,
                        &trace,
                        &timeline,
                    )
                    .await;
                    released.set(out.closed);
                    out
                }
            };
            *result.borrow_mut() = Some(out);
            // Let the releases land: wait (bounded) until the server holds
            // nothing, as a client process would live on.
            for _ in 0..1800 {
                let idle = {
                    let s = lock(&servers);
                    !s.up
                        || s.lives
                            .last()
                            .is_none_or(|l| l.live_executions().is_empty())
                };
                if idle {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            trace.now("client: done");
            Ok(())
        });
    }

    let unary: Shared<Option<UnaryResult>> = Rc::default();
    if let Some(plan) = schedule.unary {
        let unary = unary.clone();
        let trace = trace.clone();
        let target = match schedule.topology {
            Topology::Direct => "server",
            Topology::Guard => "guard",
        };
        let seed = schedule.seed;
        sim.client("ops", async move {
            let out = run_unary(plan, target, seed, &trace).await;
            *unary.borrow_mut() = Some(out);
            Ok(())
        });
    }
    let mut pending = actions(schedule).into_iter().peekable();
    let mut sim_error = None;
    let mut firings = vec![];
    loop {
        while let Some((at, _)) = pending.peek() {
            if *at > sim.elapsed() {
                break;
            }
            let (_, action) = pending.next().expect("peeked");
            apply(&mut sim, &action, &servers, &trace);
        }
        let stepped = sim.step();
        record_firings(&servers, &mut firings, sim.elapsed(), &trace);
        match stepped {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                sim_error = Some(e.to_string());
                break;
            }
        }
    }
    let elapsed = sim.elapsed();
    let servers = lock(&servers);
    let mut calls = CallCounts::default();
    let token_refusals = servers.lives.iter().map(TestServer::token_refusals).sum();
    for life in &servers.lives {
        let c = life.calls();
        calls.execute += c.execute;
        calls.reattach += c.reattach;
        calls.release_until += c.release_until;
        calls.release_all += c.release_all;
        calls.other += c.other;
        calls.config += c.config;
        calls.analyze += c.analyze;
        calls.interrupt += c.interrupt;
        calls.release_session += c.release_session;
        calls.fetch_error_details += c.fetch_error_details;
        for call in life.recorded_calls() {
            trace.event(elapsed, format!("server saw {:?}", call.rpc));
        }
        for r in life.reattach_requests() {
            trace.event(
                elapsed,
                format!("server saw reattach after {:?}", r.last_response_id),
            );
        }
    }
    let live_executions = servers.up.then(|| {
        servers
            .lives
            .last()
            .map(TestServer::live_executions)
            .unwrap_or_default()
    });
    let (pushbacks, requests): (Vec<_>, Vec<_>) = log
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .cloned()
        .partition(|(_, what)| what == PUSHBACK);
    let pushbacks: Vec<Duration> = pushbacks.into_iter().map(|(at, _)| at).collect();
    for at in &pushbacks {
        trace.event(*at, "client saw RESOURCE_EXHAUSTED");
    }
    for (at, rpc) in &requests {
        trace.event(*at, format!("client sent {rpc}"));
    }
    let result = result.borrow_mut().take();
    trace.event(
        elapsed,
        format!(
            "end: {:?} calls {calls:?} live {:?} error {sim_error:?}",
            result.as_ref().map(|r| r
                .queries
                .iter()
                .map(|q| (q.rows.len(), q.complete, q.error.clone()))
                .collect::<Vec<_>>()),
            // Counted, not listed: the list is sorted by the ids' values,
            // which the OS RNG draws for the session.
            live_executions.as_ref().map(Vec::len)
        ),
    );
    let mut timelines = timeline.queries();
    let queries = match &schedule.client {
        ClientKind::Stub => 1,
        ClientKind::Session { queries } => queries.len(),
    };
    if timelines.len() < queries {
        timelines.resize_with(queries, QueryTimes::default);
    }
    let session_metrics = match (&schedule.client, &result) {
        (ClientKind::Session { .. }, Some(r)) => Some(r.metrics),
        _ => None,
    };
    let (results, stream_stats) = match result {
        Some(r) => (Some(r.queries), r.stats),
        None => (None, vec![]),
    };
    Outcome {
        results,
        stream_stats,
        session_metrics,
        sim_error,
        elapsed,
        requests,
        pushbacks,
        firings,
        timelines,
        server_calls: calls,
        token_refusals,
        live_executions,
        released: released.get(),
        unary: unary.borrow_mut().take(),
        trace,
    }
}

/// Stamps the script's new firings with `now` (the end of the tick they
/// fired in). Only the first life has a script: a crash loses what is
/// left of it, an in-place restart keeps it.
fn record_firings(
    servers: &SharedServers,
    firings: &mut Vec<(Duration, String)>,
    now: Duration,
    trace: &Trace,
) {
    let servers = lock(servers);
    let Some(script) = servers.lives.first().map(TestServer::faults) else {
        return;
    };
    for fired in script.fired().into_iter().skip(firings.len()) {
        trace.event(
            now,
            format!("server: fault fired on {:?}: {}", fired.rpc, fired.what),
        );
        firings.push((now, fired.what));
    }
}

fn apply(sim: &mut turmoil::Sim<'_>, action: &Action, servers: &SharedServers, trace: &Trace) {
    trace.event(sim.elapsed(), format!("fault: {action:?}"));
    match *action {
        Action::Hold(a, b) => sim.hold(a, b),
        Action::Release(a, b) => sim.release(a, b),
        Action::Partition(a, b) => sim.partition(a, b),
        Action::PartitionOneway(a, b) => sim.partition_oneway(a, b),
        Action::Repair(a, b) => sim.repair(a, b),
        Action::Latency(a, b, d) => sim.set_link_latency(a, b, d),
        Action::Crash => {
            let up = std::mem::replace(&mut lock(servers).up, false);
            if up {
                sim.crash("server");
            }
        }
        Action::Bounce => {
            if !lock(servers).up {
                sim.bounce("server");
            }
        }
    }
}
