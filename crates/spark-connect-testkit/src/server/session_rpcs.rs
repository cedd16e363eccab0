//! The session RPCs: AnalyzePlan, Config, Interrupt, ReleaseSession and
//! FetchErrorDetails.

use std::collections::BTreeMap;
use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::buffer::Operation;
use super::call;
use super::conf_defaults::server_default;
use super::state::Shared;
use crate::error::SparkException;
use crate::faults::{Rpc, lock};
use spark_connect_retry::proto;

/// AnalyzePlan, as [`answer_analyze`].
pub(super) async fn analyze_plan(
    shared: &Shared,
    request: Request<proto::AnalyzePlanRequest>,
) -> Result<Response<proto::AnalyzePlanResponse>, Status> {
    let counter = &shared.counters.analyze;
    call::session_unary(shared, Rpc::AnalyzePlan, counter, request, answer_analyze).await
}

/// Config, as [`answer_config`].
pub(super) async fn config(
    shared: &Shared,
    request: Request<proto::ConfigRequest>,
) -> Result<Response<proto::ConfigResponse>, Status> {
    let counter = &shared.counters.config;
    call::session_unary(shared, Rpc::Config, counter, request, answer_config).await
}

/// Interrupt, as [`answer_interrupt`].
pub(super) async fn interrupt(
    shared: &Shared,
    request: Request<proto::InterruptRequest>,
) -> Result<Response<proto::InterruptResponse>, Status> {
    let counter = &shared.counters.interrupt;
    call::session_unary(shared, Rpc::Interrupt, counter, request, answer_interrupt).await
}

/// ReleaseSession, as [`answer_release_session`].
pub(super) async fn release_session(
    shared: &Shared,
    request: Request<proto::ReleaseSessionRequest>,
) -> Result<Response<proto::ReleaseSessionResponse>, Status> {
    let counter = &shared.counters.release_session;
    call::unary(
        shared,
        Rpc::ReleaseSession,
        counter,
        request,
        "",
        answer_release_session,
    )
    .await
}

/// FetchErrorDetails, as [`answer_fetch_error_details`].
pub(super) async fn fetch_error_details(
    shared: &Shared,
    request: Request<proto::FetchErrorDetailsRequest>,
) -> Result<Response<proto::FetchErrorDetailsResponse>, Status> {
    let counter = &shared.counters.fetch_error_details;
    call::session_unary(
        shared,
        Rpc::FetchErrorDetails,
        counter,
        request,
        answer_fetch_error_details,
    )
    .await
}

/// AnalyzePlan: `spark_version`, and `schema` (the plan's Spark schema).
fn answer_analyze(
    shared: &Shared,
    req: proto::AnalyzePlanRequest,
) -> Result<proto::AnalyzePlanResponse, Status> {
    use proto::{analyze_plan_request::Analyze, analyze_plan_response as apr};
    let result = match &req.analyze {
        Some(Analyze::SparkVersion(_)) => apr::Result::SparkVersion(apr::SparkVersion {
            version: shared.settings.spark_version.clone(),
        }),
        Some(Analyze::Schema(s)) => {
            let schema = match shared.parse_plan(&req.session_id, s.plan.as_ref()) {
                Ok(crate::sql_grammar::Work::Rows(rows)) => rows.spark_schema(),
                Ok(_) => proto::DataType::default(),
                Err(e) => return Err(shared.spark_status(&e, Some(&req.session_id))),
            };
            apr::Result::Schema(apr::Schema {
                schema: Some(schema),
            })
        }
        None => {
            return Err(Status::unimplemented(
                "this AnalyzePlan request is not implemented by the test server",
            ));
        }
    };
    Ok(proto::AnalyzePlanResponse {
        session_id: req.session_id,
        server_side_session_id: shared.ssid(),
        result: Some(result),
    })
}

/// Config: applies the operation to the session's config.
fn answer_config(
    shared: &Shared,
    req: proto::ConfigRequest,
) -> Result<proto::ConfigResponse, Status> {
    let session_id = &req.session_id;
    let op = req.operation.as_ref().and_then(|o| o.op_type.as_ref());
    if let Some(proto::config_request::operation::OpType::Set(set)) = op
        && let Some(p) = set
            .pairs
            .iter()
            .find(|p| shared.settings.refused_confs.contains(&p.key))
    {
        let e = SparkException::new(
            "CANNOT_MODIFY_CONFIG",
            "46110",
            format!(
                "Cannot modify the value of the Spark config: \"{}\".",
                p.key
            ),
        );
        return Err(shared.spark_status(&e, Some(session_id)));
    }
    let applied = {
        let mut st = lock(&shared.state);
        let Some(session) = st.sessions.get_mut(session_id) else {
            return Err(SparkException::session_closed(session_id).to_status(None));
        };
        apply_config(&mut session.conf, op)
    };
    let pairs = applied.map_err(|missing| {
        shared.spark_status(&SparkException::conf_not_found(&missing), Some(session_id))
    })?;
    Ok(proto::ConfigResponse {
        session_id: session_id.clone(),
        server_side_session_id: shared.ssid(),
        pairs,
        warnings: Vec::new(),
    })
}

/// Interrupt: all of the session's executions, those with a tag, or one by
/// id; running ones end with `OPERATION_CANCELED`.
fn answer_interrupt(
    shared: &Shared,
    req: proto::InterruptRequest,
) -> Result<proto::InterruptResponse, Status> {
    use proto::interrupt_request::{Interrupt, InterruptType};
    let session_id = &req.session_id;
    let ops: Vec<Arc<Operation>> = lock(&shared.state)
        .sessions
        .get(session_id)
        .map(|s| s.ops.values().cloned().collect())
        .unwrap_or_default();
    let selected: Vec<Arc<Operation>> = match (req.interrupt_type(), &req.interrupt) {
        (InterruptType::All, _) => ops,
        (InterruptType::Tag, Some(Interrupt::OperationTag(t))) => {
            ops.into_iter().filter(|o| o.tags.contains(t)).collect()
        }
        (InterruptType::OperationId, Some(Interrupt::OperationId(id))) => {
            ops.into_iter().filter(|o| &o.id == id).collect()
        }
        _ => {
            let e = SparkException::java(
                "java.lang.IllegalArgumentException",
                "Unsupported or incomplete interrupt type",
            );
            return Err(shared.spark_status(&e, Some(session_id)));
        }
    };
    let mut interrupted_ids = Vec::new();
    for op in selected {
        if op.is_running() && op.fail(shared.canceled_status(session_id)) {
            interrupted_ids.push(op.id.clone());
        }
    }
    interrupted_ids.sort();
    Ok(proto::InterruptResponse {
        session_id: session_id.clone(),
        server_side_session_id: shared.ssid(),
        interrupted_ids,
    })
}

/// ReleaseSession: forgets the session and cancels its executions; unless
/// `allow_reconnect`, later RPCs on it fail with `SESSION_CLOSED`.
fn answer_release_session(
    shared: &Shared,
    req: proto::ReleaseSessionRequest,
) -> Result<proto::ReleaseSessionResponse, Status> {
    let session_id = req.session_id;
    let ops: Vec<Arc<Operation>> = {
        let mut st = lock(&shared.state);
        let ops = st
            .sessions
            .remove(&session_id)
            .map(|s| s.ops.into_values().collect())
            .unwrap_or_default();
        if !req.allow_reconnect {
            st.closed.insert(session_id.clone());
        }
        ops
    };
    for op in ops {
        // The session is gone, so the cancel error carries no errorId.
        op.fail(SparkException::operation_canceled().to_status(None));
        op.close();
    }
    Ok(proto::ReleaseSessionResponse {
        session_id,
        server_side_session_id: shared.ssid(),
    })
}

/// FetchErrorDetails: serves a recorded error once, to its own session.
fn answer_fetch_error_details(
    shared: &Shared,
    req: proto::FetchErrorDetailsRequest,
) -> Result<proto::FetchErrorDetailsResponse, Status> {
    use proto::fetch_error_details_response as fed;
    let found = {
        let mut st = lock(&shared.state);
        match st.errors.get(&req.error_id) {
            Some((sid, _)) if *sid == req.session_id => st.errors.remove(&req.error_id),
            _ => None,
        }
    };
    let mut resp = proto::FetchErrorDetailsResponse {
        server_side_session_id: shared.ssid(),
        session_id: req.session_id,
        root_error_idx: None,
        errors: Vec::new(),
    };
    if let Some((_, e)) = found {
        resp.root_error_idx = Some(0);
        resp.errors.push(fed::Error {
            error_type_hierarchy: e.classes.clone(),
            message: e.message(),
            stack_trace: Vec::new(),
            cause_idx: None,
            spark_throwable: Some(fed::SparkThrowable {
                error_class: e.error_class.clone(),
                message_parameters: e.message_parameters.clone().into_iter().collect(),
                sql_state: e.sql_state.clone(),
                condition: e.error_class.clone(),
            }),
        });
    }
    Ok(resp)
}

/// A key's value: the session's, else the server's default for it (as
/// Spark's `conf.get` falls back to a registered conf's default).
fn value(conf: &BTreeMap<String, String>, key: &str) -> Option<String> {
    conf.get(key)
        .cloned()
        .or_else(|| server_default(key).map(str::to_owned))
}

/// Applies one Config operation to a session's config. Returns the pairs to
/// answer with, or the first key `Get` did not find.
fn apply_config(
    conf: &mut BTreeMap<String, String>,
    op: Option<&proto::config_request::operation::OpType>,
) -> Result<Vec<proto::KeyValue>, String> {
    use proto::config_request::operation::OpType;
    let kv = |k: &str, v: Option<String>| proto::KeyValue {
        key: k.to_owned(),
        value: v,
    };
    let pairs = match op {
        Some(OpType::Set(set)) => {
            for p in &set.pairs {
                match &p.value {
                    Some(v) => conf.insert(p.key.clone(), v.clone()),
                    None => conf.remove(&p.key),
                };
            }
            Vec::new()
        }
        Some(OpType::Get(get)) => {
            let mut pairs = Vec::new();
            for k in &get.keys {
                let v = value(conf, k).ok_or_else(|| k.clone())?;
                pairs.push(kv(k, Some(v)));
            }
            pairs
        }
        Some(OpType::GetWithDefault(g)) => g
            .pairs
            .iter()
            .map(|p| kv(&p.key, conf.get(&p.key).cloned().or(p.value.clone())))
            .collect(),
        Some(OpType::GetOption(g)) => g.keys.iter().map(|k| kv(k, value(conf, k))).collect(),
        Some(OpType::GetAll(g)) => {
            let prefix = g.prefix.as_deref().unwrap_or("");
            conf.iter()
                .filter(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| kv(k, Some(v.clone())))
                .collect()
        }
        Some(OpType::Unset(u)) => {
            for k in &u.keys {
                conf.remove(k);
            }
            Vec::new()
        }
        Some(OpType::IsModifiable(m)) => m
            .keys
            .iter()
            .map(|k| kv(k, Some("true".to_owned())))
            .collect(),
        None => Vec::new(),
    };
    Ok(pairs)
}
