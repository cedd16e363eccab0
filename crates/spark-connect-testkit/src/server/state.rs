//! The state the service, the executions and the handle share: settings,
//! sessions and their executions, the errors FetchErrorDetails serves, call
//! counters and the request log.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tonic::Status;

use tonic::metadata::MetadataMap;

use super::buffer::Operation;
use super::settings::Settings;
use super::store::Artifacts;
use super::tokens::Tokens;
use crate::conn::Connections;
use crate::edit::ResultEdit;
use crate::error::SparkException;
use crate::faults::{FaultScript, Rpc, lock};
use crate::sql_grammar::{Catalog, Source, View, Work};
use crate::views;
use spark_connect_retry::proto;

/// What one `AddArtifacts` call carried and stored. See
/// [`TestServer::upload_calls`](crate::TestServer::upload_calls).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UploadCall {
    /// The session of its first request (empty when none arrived).
    pub session_id: String,
    /// Request messages read.
    pub messages: u64,
    /// Artifact data bytes read (chunk payloads, as received).
    pub bytes: u64,
    /// The names it wrote into the session, in order (none when the stream
    /// was cut, failed, or only carried CRC failures).
    pub stored: Vec<String>,
}

/// The request metadata (headers) of one call, in arrival order.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RecordedCall {
    /// Which RPC was called.
    pub rpc: Rpc,
    /// Its request metadata (e.g. `authorization`, `user-agent`, custom keys).
    pub metadata: MetadataMap,
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) execute: AtomicU64,
    pub(super) reattach: AtomicU64,
    pub(super) release_until: AtomicU64,
    pub(super) release_all: AtomicU64,
    pub(super) config: AtomicU64,
    pub(super) analyze: AtomicU64,
    pub(super) interrupt: AtomicU64,
    pub(super) release_session: AtomicU64,
    pub(super) fetch_error_details: AtomicU64,
    pub(super) add_artifacts: AtomicU64,
    pub(super) artifact_status: AtomicU64,
    pub(super) other: AtomicU64,
}

#[derive(Debug, Default)]
pub(super) struct Log {
    pub(super) calls: Vec<RecordedCall>,
    pub(super) execute: Vec<proto::ExecutePlanRequest>,
    pub(super) reattach: Vec<proto::ReattachExecuteRequest>,
    pub(super) release: Vec<proto::ReleaseExecuteRequest>,
    pub(super) uploads: Vec<UploadCall>,
}

#[derive(Debug, Default)]
pub(super) struct Session {
    pub(super) conf: BTreeMap<String, String>,
    pub(super) ops: HashMap<String, Arc<Operation>>,
    pub(super) artifacts: Artifacts,
    /// Temporary views: lower-cased name → the view's rows.
    pub(super) views: HashMap<String, Source>,
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) sessions: HashMap<String, Session>,
    pub(super) closed: HashSet<String>,
    /// errorId → (session id, error), served once by FetchErrorDetails.
    pub(super) errors: HashMap<String, (String, SparkException)>,
}

#[derive(Debug)]
pub(super) struct Shared {
    pub(super) settings: Settings,
    pub(super) server_side_session_id: Mutex<String>,
    pub(super) state: Mutex<State>,
    pub(super) faults: FaultScript,
    pub(super) counters: Counters,
    pub(super) log: Mutex<Log>,
    pub(super) connections: Connections,
    pub(super) stopping: watch::Sender<bool>,
    /// Applied to the range queries of later ExecutePlans.
    pub(super) edit: Mutex<Option<ResultEdit>>,
    /// Tokens that expire, when the server rotates them.
    pub(super) tokens: Option<Tokens>,
}

impl Shared {
    pub(super) fn ssid(&self) -> String {
        lock(&self.server_side_session_id).clone()
    }

    /// Replaces the server-side session id; returns the new one.
    pub(super) fn rotate_ssid(&self) -> String {
        let id = uuid::Uuid::new_v4().to_string();
        *lock(&self.server_side_session_id) = id.clone();
        id
    }

    /// A restart: every open connection is reset, the server-side session id
    /// changes, and every session, execution and recorded error is
    /// forgotten. Returns the new server-side session id.
    pub(super) fn restart(&self) -> String {
        let reset = self.connections.kill_all();
        let id = self.rotate_ssid();
        let ops: Vec<Arc<Operation>> = {
            let mut st = lock(&self.state);
            st.errors.clear();
            st.closed.clear();
            st.sessions
                .drain()
                .flat_map(|(_, s)| s.ops.into_values())
                .collect()
        };
        tracing::info!(
            connections_reset = reset,
            executions_lost = ops.len(),
            "server restart"
        );
        for op in ops {
            op.fail(SparkException::operation_canceled().to_status(None));
            op.close();
        }
        id
    }

    /// A Spark-encoded status; when the session exists the error gets an
    /// `errorId` that FetchErrorDetails serves once.
    pub(super) fn spark_status(&self, err: &SparkException, session_id: Option<&str>) -> Status {
        let id = session_id.and_then(|sid| {
            let mut st = lock(&self.state);
            st.sessions.contains_key(sid).then(|| {
                let id = uuid::Uuid::new_v4().to_string();
                st.errors.insert(id.clone(), (sid.to_owned(), err.clone()));
                id
            })
        });
        err.to_status(id.as_deref())
    }

    fn check_observed(&self, session_id: &str, observed: Option<&str>) -> Result<(), Status> {
        match observed {
            Some(o) if o != self.ssid() => {
                Err(self.spark_status(&SparkException::session_changed(session_id), None))
            }
            _ => Ok(()),
        }
    }

    pub(super) fn get_or_create_session(
        &self,
        session_id: &str,
        observed: Option<&str>,
    ) -> Result<(), Status> {
        if uuid::Uuid::parse_str(session_id).is_err() {
            return Err(SparkException::invalid_handle_format(session_id).to_status(None));
        }
        {
            let mut st = lock(&self.state);
            if st.closed.contains(session_id) {
                return Err(SparkException::session_closed(session_id).to_status(None));
            }
            st.sessions
                .entry(session_id.to_owned())
                .or_insert_with(|| Session {
                    conf: self.settings.default_conf.clone(),
                    ..Default::default()
                });
        }
        self.check_observed(session_id, observed)
    }

    pub(super) fn lookup_session(
        &self,
        session_id: &str,
        observed: Option<&str>,
    ) -> Result<(), Status> {
        {
            let st = lock(&self.state);
            if st.closed.contains(session_id) {
                return Err(SparkException::session_closed(session_id).to_status(None));
            }
            if !st.sessions.contains_key(session_id) {
                return Err(SparkException::session_not_found(session_id).to_status(None));
            }
        }
        self.check_observed(session_id, observed)
    }

    /// The bytes of an artifact of a live session.
    pub(super) fn artifact(&self, session_id: &str, name: &str) -> Option<bytes::Bytes> {
        lock(&self.state)
            .sessions
            .get(session_id)
            .and_then(|s| s.artifacts.files.get(name).cloned())
    }

    /// The work a plan of this session asks for (its cached local relations
    /// are looked up among the session's artifacts, table names among its
    /// temporary views).
    pub(super) fn parse_plan(
        &self,
        session_id: &str,
        plan: Option<&proto::Plan>,
    ) -> Result<Work, SparkException> {
        let cache = |name: &str| self.artifact(session_id, name);
        let view = |name: &str| {
            lock(&self.state)
                .sessions
                .get(session_id)
                .and_then(|s| s.views.get(&views::key(name)).cloned())
        };
        let session_uuid = self.ssid();
        let catalog = Catalog {
            cache: &cache,
            views: &view,
            session_uuid: &session_uuid,
        };
        // A compressed plan (SPARK-54194) is read as the plan inside it.
        let plain;
        let plan = match plan.and_then(|p| p.op_type.as_ref()) {
            Some(proto::plan::OpType::CompressedOperation(op)) => {
                plain = super::codec::decompress_plan(op, self.settings.compressed_plans)?;
                Some(&plain)
            }
            _ => plan,
        };
        let work = crate::sql_grammar::parse_plan(plan, &catalog)?;
        Ok(match (work, *lock(&self.edit)) {
            (Work::Rows(Source::Range(q)), Some(edit)) => Work::Rows(Source::Edited(q, edit)),
            (work, _) => work,
        })
    }

    /// Registers a temporary view in a live session.
    /// The value of a session conf (the session's own, else the server's default).
    pub(super) fn session_conf(&self, session_id: &str, key: &str) -> Option<String> {
        let st = lock(&self.state);
        match st.sessions.get(session_id) {
            Some(s) => s.conf.get(key).cloned(),
            None => self.settings.default_conf.get(key).cloned(),
        }
    }

    pub(super) fn create_view(&self, session_id: &str, view: View) -> Result<(), SparkException> {
        let mut st = lock(&self.state);
        let session = st
            .sessions
            .get_mut(session_id)
            .ok_or_else(|| SparkException::session_closed(session_id))?;
        views::register(&mut session.views, view)
    }

    pub(super) fn find_op(&self, session_id: &str, op_id: &str) -> Option<Arc<Operation>> {
        lock(&self.state)
            .sessions
            .get(session_id)
            .and_then(|s| s.ops.get(op_id).cloned())
    }

    pub(super) fn remove_op(&self, op: &Operation) {
        let mut st = lock(&self.state);
        if let Some(s) = st.sessions.get_mut(&op.session_id)
            && s.ops
                .get(&op.id)
                .is_some_and(|o| std::ptr::eq(Arc::as_ptr(o), op))
        {
            s.ops.remove(&op.id);
        }
    }

    pub(super) fn canceled_status(&self, session_id: &str) -> Status {
        self.spark_status(&SparkException::operation_canceled(), Some(session_id))
    }

    /// Cancels (if still running) and disconnects these executions.
    pub(super) fn close_ops(&self, ops: Vec<Arc<Operation>>) {
        for op in ops {
            if op.is_running() {
                let status = self.canceled_status(&op.session_id);
                op.fail(status);
            }
            op.close();
        }
    }
}
