//! The execution RPCs: ExecutePlan starts (or, with a live operation id and
//! the same plan, re-attaches to) an execution; ReattachExecute resumes one
//! after a response id; ReleaseExecute frees its buffer up to an id, or all
//! of it.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tonic::{Request, Response, Status};

use super::buffer::{OpState, Operation};
use super::call::{self, Deferred, kill_switch};
use super::producer::produce;
use super::sender::{Caller, ExecStream, attach_stream};
use super::state::Shared;
use crate::error::SparkException;
use crate::faults::{Rpc, lock};
use spark_connect_retry::proto;
use spark_connect_retry::proto::release_execute_request::Release;

/// ExecutePlan: starts an execution (or attaches to the live one of the
/// same operation id and plan) and streams it.
pub(super) async fn execute_plan(
    shared: &Arc<Shared>,
    request: Request<proto::ExecutePlanRequest>,
) -> Result<Response<ExecStream>, Status> {
    let kill = kill_switch(&request);
    let token = shared
        .tokens
        .as_ref()
        .and_then(|t| t.index(request.metadata()));
    let session_id = request.get_ref().session_id.clone();
    let op_hint = request.get_ref().operation_id.clone().unwrap_or_default();
    let fault = Deferred::new(
        Rpc::ExecutePlan,
        call::begin(
            shared,
            Rpc::ExecutePlan,
            &shared.counters.execute,
            &request,
            &session_id,
            &op_hint,
        )
        .await?,
    );
    let req = request.into_inner();
    lock(&shared.log).execute.push(req.clone());
    shared.get_or_create_session(
        &session_id,
        req.client_observed_server_side_session_id.as_deref(),
    )?;
    let op_id = operation_id(&req)?;
    let work = shared.parse_plan(&session_id, req.plan.as_ref());
    if req.plan.as_ref().and_then(|p| p.op_type.as_ref()).is_none() {
        // Like Spark's plan validation before the execution starts: the
        // error is returned at once and nothing is registered.
        if let Err(e) = &work {
            return Err(shared.spark_status(e, Some(&session_id)));
        }
    }

    // Spark 4.1+ "idempotent ExecutePlan": the same plan under a live
    // operation id attaches to it from the beginning.
    let op = match shared.find_op(&session_id, &op_id) {
        Some(existing) => {
            check_reexecute(shared, &existing, &req)?;
            existing
        }
        None => {
            let op = register(shared, &req, op_id)?;
            tokio::spawn(produce(shared.clone(), op.clone(), work));
            op
        }
    };
    Ok(Response::new(attach_stream(
        shared.clone(),
        op,
        0,
        fault.into_stream(),
        Caller { kill, token },
    )))
}

/// An ExecutePlan under the id of a live execution may only attach to
/// it: same plan, and reattachable.
fn check_reexecute(
    shared: &Shared,
    existing: &Operation,
    req: &proto::ExecutePlanRequest,
) -> Result<(), Status> {
    let session_id = Some(req.session_id.as_str());
    if existing.plan != req.plan {
        let e = SparkException::operation_already_exists(&existing.id);
        return Err(shared.spark_status(&e, session_id));
    }
    if !existing.reattachable {
        return Err(shared.spark_status(&SparkException::not_reattachable(), session_id));
    }
    Ok(())
}

/// Registers a new execution in its session.
fn register(
    shared: &Shared,
    req: &proto::ExecutePlanRequest,
    op_id: String,
) -> Result<Arc<Operation>, Status> {
    let op = Arc::new(Operation {
        id: op_id.clone(),
        session_id: req.session_id.clone(),
        reattachable: reattachable(req),
        tags: req.tags.clone(),
        chunking: chunking(req),
        plan: req.plan.clone(),
        state: Mutex::new(OpState::default()),
        changed: watch::Sender::new(()),
    });
    let mut st = lock(&shared.state);
    match st.sessions.get_mut(&req.session_id) {
        Some(s) => {
            s.ops.insert(op_id, op.clone());
            Ok(op)
        }
        // Released concurrently.
        None => Err(SparkException::session_closed(&req.session_id).to_status(None)),
    }
}

/// ReattachExecute: resumes a reattachable execution after a response id.
pub(super) async fn reattach_execute(
    shared: &Arc<Shared>,
    request: Request<proto::ReattachExecuteRequest>,
) -> Result<Response<ExecStream>, Status> {
    let kill = kill_switch(&request);
    let token = shared
        .tokens
        .as_ref()
        .and_then(|t| t.index(request.metadata()));
    let session_id = request.get_ref().session_id.clone();
    let op_id = request.get_ref().operation_id.clone();
    let fault = Deferred::new(
        Rpc::ReattachExecute,
        call::begin(
            shared,
            Rpc::ReattachExecute,
            &shared.counters.reattach,
            &request,
            &session_id,
            &op_id,
        )
        .await?,
    );
    let req = request.into_inner();
    lock(&shared.log).reattach.push(req.clone());
    shared.lookup_session(
        &session_id,
        req.client_observed_server_side_session_id.as_deref(),
    )?;
    let Some(op) = shared.find_op(&session_id, &op_id) else {
        return Err(shared.spark_status(
            &SparkException::operation_not_found(&op_id),
            Some(&session_id),
        ));
    };
    if !op.reattachable {
        return Err(shared.spark_status(&SparkException::not_reattachable(), Some(&session_id)));
    }
    let start_after = match &req.last_response_id {
        None => 0,
        Some(id) => match op.index_of(id) {
            Some(i) => i,
            None => {
                let e = SparkException::position_not_found(id);
                return Err(shared.spark_status(&e, Some(&session_id)));
            }
        },
    };
    Ok(Response::new(attach_stream(
        shared.clone(),
        op,
        start_after,
        fault.into_stream(),
        Caller { kill, token },
    )))
}

/// ReleaseExecute, as [`release`] (the unary bookkeeping around it).
pub(super) async fn release_execute(
    shared: &Arc<Shared>,
    request: Request<proto::ReleaseExecuteRequest>,
) -> Result<Response<proto::ReleaseExecuteResponse>, Status> {
    let counters = &shared.counters;
    let counter = match request.get_ref().release {
        Some(Release::ReleaseUntil(_)) => &counters.release_until,
        _ => &counters.release_all,
    };
    let op_id = request.get_ref().operation_id.clone();
    call::unary(
        shared,
        Rpc::ReleaseExecute,
        counter,
        request,
        &op_id,
        release,
    )
    .await
}

/// ReleaseExecute: `release_until` evicts up to an id, `release_all` removes
/// and cancels the execution; an unknown execution is a no-op success.
fn release(
    shared: &Shared,
    req: proto::ReleaseExecuteRequest,
) -> Result<proto::ReleaseExecuteResponse, Status> {
    lock(&shared.log).release.push(req.clone());
    let (session_id, op_id) = (&req.session_id, &req.operation_id);
    // Spark looks the session up without checking the observed id.
    shared.lookup_session(session_id, None)?;
    let mut resp = proto::ReleaseExecuteResponse {
        session_id: session_id.clone(),
        server_side_session_id: shared.ssid(),
        operation_id: None,
    };
    let Some(op) = shared.find_op(session_id, op_id) else {
        return Ok(resp); // Already gone: a no-op success.
    };
    let spark_status = |e: &SparkException| shared.spark_status(e, Some(session_id));
    if !op.reattachable {
        return Err(spark_status(&SparkException::not_reattachable()));
    }
    match &req.release {
        Some(Release::ReleaseAll(_)) => {
            shared.remove_op(&op);
            shared.close_ops(vec![op]);
        }
        Some(Release::ReleaseUntil(u)) => {
            op.release_until(&u.response_id, shared.faults.keeps_replayable())
                .map_err(|e| spark_status(&e))?;
        }
        None => {
            return Err(spark_status(&SparkException::java(
                "java.lang.UnsupportedOperationException",
                "ReleaseExecute needs release_all or release_until",
            )));
        }
    }
    resp.operation_id = Some(op_id.clone());
    Ok(resp)
}

/// The request's operation id (a UUID), or a fresh one.
fn operation_id(req: &proto::ExecutePlanRequest) -> Result<String, Status> {
    match &req.operation_id {
        Some(id) if uuid::Uuid::parse_str(id).is_err() => {
            Err(SparkException::invalid_handle_format(id).to_status(None))
        }
        Some(id) => Ok(id.clone()),
        None => Ok(uuid::Uuid::new_v4().to_string()),
    }
}

/// Whether the request asks for a reattachable execution.
fn reattachable(req: &proto::ExecutePlanRequest) -> bool {
    req.request_options.iter().any(|o| {
        matches!(
            &o.request_option,
            Some(proto::execute_plan_request::request_option::RequestOption::ReattachOptions(r)) if r.reattachable
        )
    })
}

/// The client's `ResultChunkingOptions`: its preferred chunk size (0: none
/// given) when it allows chunking.
fn chunking(req: &proto::ExecutePlanRequest) -> Option<usize> {
    req.request_options
        .iter()
        .find_map(|o| match &o.request_option {
            Some(
                proto::execute_plan_request::request_option::RequestOption::ResultChunkingOptions(
                    c,
                ),
            ) if c.allow_arrow_batch_chunking => Some(
                c.preferred_arrow_chunk_size
                    .and_then(|s| usize::try_from(s).ok())
                    .unwrap_or(0),
            ),
            _ => None,
        })
}
