//! [`TestServer`], the public handle: starts and stops the server, exposes
//! the fault script, and reports what the server saw (call counts, metadata,
//! requests, buffer occupancy).

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::{Stream, StreamExt as _};
use tonic::metadata::MetadataMap;

use super::service::Service;
use super::settings::{MAX_MESSAGE_BYTES, Settings};
use super::state::{Counters, Log, RecordedCall, Shared, State, UploadCall};
use super::tokens::Tokens;
use crate::conn::{Connections, Killable};
use crate::edit::ResultEdit;
use crate::faults::{FaultScript, Rpc, lock};
use crate::stubs::SparkConnectServiceServer;
use spark_connect_retry::proto;

/// How many times each RPC was called (including calls that failed or were
/// hit by a fault). See [`TestServer::calls`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallCounts {
    /// `ExecutePlan` calls.
    pub execute: u64,
    /// `ReattachExecute` calls.
    pub reattach: u64,
    /// `ReleaseExecute` calls with `release_until`.
    pub release_until: u64,
    /// `ReleaseExecute` calls with `release_all`.
    pub release_all: u64,
    /// `Config` calls.
    pub config: u64,
    /// `AnalyzePlan` calls.
    pub analyze: u64,
    /// `Interrupt` calls.
    pub interrupt: u64,
    /// `ReleaseSession` calls.
    pub release_session: u64,
    /// `FetchErrorDetails` calls.
    pub fetch_error_details: u64,
    /// `AddArtifacts` calls.
    pub add_artifacts: u64,
    /// `ArtifactStatus` calls.
    pub artifact_status: u64,
    /// Calls of RPCs this server does not implement.
    pub other: u64,
}

/// Retry-buffer occupancy of one execution. See [`TestServer::buffer_stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BufferStats {
    /// Responses buffered now: sent ones kept for reattach, plus produced
    /// ones not sent yet (the producer runs up to 256 responses ahead).
    pub buffered: usize,
    /// Of those, responses already sent: neither released by the client
    /// (`release_until`) nor evicted by the retry-buffer limit yet.
    pub sent_buffered: usize,
    /// Encoded bytes of all buffered responses.
    pub buffered_bytes: u64,
    /// Most `sent_buffered` seen so far, checked after every send.
    pub max_sent_buffered: usize,
    /// Most `buffered` seen so far.
    pub max_buffered: usize,
}

/// An embedded Spark Connect server on `127.0.0.1` with an ephemeral port
/// (or on the connections a caller accepts, with
/// [`serve_incoming`](crate::TestServerBuilder::serve_incoming)).
///
/// See the [crate docs](crate) for what it implements. Dropping it stops
/// the server (in the background); [`shutdown`](Self::shutdown) waits.
#[derive(Debug)]
pub struct TestServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown_tx: Option<oneshot::Sender<()>>,
    serve: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Starts a server with default settings.
    pub async fn start() -> io::Result<TestServer> {
        Self::start_with(Settings::default()).await
    }

    pub(super) async fn start_with(settings: Settings) -> io::Result<TestServer> {
        let listener = TcpListener::bind(settings.listen_addr).await?;
        let addr = listener.local_addr()?;
        let shared = Self::shared(settings);
        let conns = shared.clone();
        let incoming = TcpListenerStream::new(listener)
            .map(move |r| r.map(|s| Killable::tcp(s, &conns.connections)));
        Ok(Self::serve(addr, shared, incoming))
    }

    /// Serves on connections a caller accepts (see
    /// [`TestServerBuilder::serve_incoming`](crate::TestServerBuilder::serve_incoming)).
    pub(super) fn serve_incoming_with<I, IO, IE>(
        settings: Settings,
        addr: SocketAddr,
        incoming: I,
    ) -> TestServer
    where
        I: Stream<Item = Result<IO, IE>> + Send + 'static,
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        IE: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let shared = Self::shared(settings);
        let conns = shared.clone();
        let incoming = incoming.map(move |r| r.map(|s| Killable::other(s, &conns.connections)));
        Self::serve(addr, shared, incoming)
    }

    fn shared(settings: Settings) -> Arc<Shared> {
        let (stopping, _) = watch::channel(false);
        let tokens = settings.token_rotation.clone().map(Tokens::new);
        Arc::new(Shared {
            settings,
            server_side_session_id: Mutex::new(uuid::Uuid::new_v4().to_string()),
            state: Mutex::new(State::default()),
            faults: FaultScript::default(),
            counters: Counters::default(),
            log: Mutex::new(Log::default()),
            connections: Connections::default(),
            stopping,
            tokens,
            edit: Mutex::new(None),
        })
    }

    /// Serves the service on `incoming` in a task of the current runtime.
    fn serve<I, IO, IE>(addr: SocketAddr, shared: Arc<Shared>, incoming: I) -> TestServer
    where
        I: Stream<Item = Result<Killable<IO>, IE>> + Send + 'static,
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        IE: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let svc = SparkConnectServiceServer::new(Service {
            shared: shared.clone(),
        })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let serve = tokio::spawn(async move {
            let result = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = shutdown_rx.await;
                })
                .await;
            if let Err(e) = result {
                tracing::warn!(error = %e, "spark-connect-retry test server stopped with an error");
            }
        });
        TestServer {
            addr,
            shared,
            shutdown_tx: Some(shutdown_tx),
            serve: Some(serve),
        }
    }

    /// The bound socket address (with
    /// [`serve_incoming`](crate::TestServerBuilder::serve_incoming): the
    /// address it was given).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, for `tonic::transport::Endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `sc://127.0.0.1:PORT`, a Spark Connect connection string.
    pub fn remote(&self) -> String {
        format!("sc://{}", self.addr)
    }

    /// The fault script: push faults here.
    pub fn faults(&self) -> &FaultScript {
        &self.shared.faults
    }

    /// Replaces the current token of the [`token_rotation`](crate::TestServerBuilder::token_rotation)
    /// by the next: the old one is refused from now on, also by the
    /// streams it opened. Returns the new token's index (`None` without a
    /// rotation).
    pub fn rotate_token(&self) -> Option<u64> {
        self.shared.tokens.as_ref().map(|t| t.rotate())
    }

    /// The index of the token the server accepts now (`None` without a
    /// [`token_rotation`](crate::TestServerBuilder::token_rotation)).
    pub fn current_token(&self) -> Option<u64> {
        self.shared.tokens.as_ref().map(|t| t.current_index())
    }

    /// Calls and streams refused for their token under the
    /// [`token_rotation`](crate::TestServerBuilder::token_rotation).
    pub fn token_refusals(&self) -> u64 {
        self.shared.tokens.as_ref().map_or(0, |t| t.refused())
    }

    /// Per-RPC call counters.
    pub fn calls(&self) -> CallCounts {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
        CallCounts {
            execute: get(&c.execute),
            reattach: get(&c.reattach),
            release_until: get(&c.release_until),
            release_all: get(&c.release_all),
            config: get(&c.config),
            analyze: get(&c.analyze),
            interrupt: get(&c.interrupt),
            release_session: get(&c.release_session),
            fetch_error_details: get(&c.fetch_error_details),
            add_artifacts: get(&c.add_artifacts),
            artifact_status: get(&c.artifact_status),
            other: get(&c.other),
        }
    }

    /// The operation ids still registered (not released, and for
    /// non-reattachable executions not yet finished), sorted.
    pub fn live_executions(&self) -> Vec<String> {
        let st = lock(&self.shared.state);
        let mut ids: Vec<String> = st
            .sessions
            .values()
            .flat_map(|s| s.ops.keys().cloned())
            .collect();
        ids.sort();
        ids
    }

    /// Retry-buffer occupancy of a registered execution (`None` once it was
    /// released or never existed). Lets benchmarks and tests check that the
    /// client's releases keep the server's buffer bounded.
    pub fn buffer_stats(&self, operation_id: &str) -> Option<BufferStats> {
        let op = {
            let st = lock(&self.shared.state);
            st.sessions
                .values()
                .find_map(|s| s.ops.get(operation_id).cloned())?
        };
        let st = lock(&op.state);
        Some(BufferStats {
            buffered: st.buffer.len(),
            sent_buffered: st.sent_buffered(),
            buffered_bytes: st.buffer.values().map(|(_, size)| size).sum(),
            max_sent_buffered: st.max_sent_buffered,
            max_buffered: st.max_buffered,
        })
    }

    /// The server-side session id set on every response.
    pub fn server_side_session_id(&self) -> String {
        self.shared.ssid()
    }

    /// Replaces the server-side session id and returns the new one. Later
    /// responses carry it, and requests that still carry the old one in
    /// `client_observed_server_side_session_id` fail with
    /// `INVALID_HANDLE.SESSION_CHANGED`. Sessions and executions survive;
    /// see [`simulate_restart`](Self::simulate_restart) for a full restart.
    pub fn rotate_server_side_session_id(&self) -> String {
        self.shared.rotate_ssid()
    }

    /// Simulates a server restart: every open connection is reset (TCP RST),
    /// the server-side session id changes, and every session and execution
    /// is forgotten. Later reattaches get `INVALID_HANDLE.SESSION_NOT_FOUND`,
    /// and requests carrying the old id in
    /// `client_observed_server_side_session_id` get
    /// `INVALID_HANDLE.SESSION_CHANGED`. Returns the new id.
    /// [`Fault::restart`](crate::Fault::restart) does the same from the fault
    /// script.
    pub fn simulate_restart(&self) -> String {
        self.shared.restart()
    }

    /// Changes the rows of the `range` queries executed from now on (`None`:
    /// back to the plain ones). Executions already running keep theirs. With
    /// [`simulate_restart`](Self::simulate_restart), a query that gives other
    /// rows when it is run again.
    pub fn edit_results(&self, edit: Option<ResultEdit>) {
        *lock(&self.shared.edit) = edit;
    }

    /// Resets (TCP RST) every open client connection now. Returns how many.
    pub fn reset_connections(&self) -> usize {
        self.shared.connections.kill_all()
    }

    /// The metadata of every call so far, in arrival order.
    pub fn recorded_calls(&self) -> Vec<RecordedCall> {
        lock(&self.shared.log).calls.clone()
    }

    /// The metadata of the last call of `rpc` ([`Rpc::Any`]: of any call).
    pub fn last_metadata(&self, rpc: Rpc) -> Option<MetadataMap> {
        lock(&self.shared.log)
            .calls
            .iter()
            .rev()
            .find(|c| rpc == Rpc::Any || c.rpc == rpc)
            .map(|c| c.metadata.clone())
    }

    /// Every ExecutePlan request that passed auth and the fault script.
    pub fn execute_requests(&self) -> Vec<proto::ExecutePlanRequest> {
        lock(&self.shared.log).execute.clone()
    }

    /// The last ExecutePlan request that passed auth and the fault script.
    pub fn last_execute_request(&self) -> Option<proto::ExecutePlanRequest> {
        lock(&self.shared.log).execute.last().cloned()
    }

    /// Every ReattachExecute request that passed auth and the fault script.
    pub fn reattach_requests(&self) -> Vec<proto::ReattachExecuteRequest> {
        lock(&self.shared.log).reattach.clone()
    }

    /// The last ReattachExecute request that passed auth and the fault script.
    pub fn last_reattach_request(&self) -> Option<proto::ReattachExecuteRequest> {
        lock(&self.shared.log).reattach.last().cloned()
    }

    /// Every ReleaseExecute request that passed auth and the fault script.
    pub fn release_requests(&self) -> Vec<proto::ReleaseExecuteRequest> {
        lock(&self.shared.log).release.clone()
    }

    /// The last ReleaseExecute request that passed auth and the fault script.
    pub fn last_release_request(&self) -> Option<proto::ReleaseExecuteRequest> {
        lock(&self.shared.log).release.last().cloned()
    }

    /// Every `AddArtifacts` call that passed auth and the fault script, in
    /// arrival order (recorded when the server is done reading it): what it
    /// carried and what it stored.
    pub fn upload_calls(&self) -> Vec<UploadCall> {
        lock(&self.shared.log).uploads.clone()
    }

    /// The artifacts a live session holds: name → bytes.
    pub fn artifacts(&self, session_id: &str) -> BTreeMap<String, bytes::Bytes> {
        lock(&self.shared.state)
            .sessions
            .get(session_id)
            .map(|s| s.artifacts.files.clone())
            .unwrap_or_default()
    }

    /// One artifact of a live session.
    pub fn artifact(&self, session_id: &str, name: &str) -> Option<bytes::Bytes> {
        self.shared.artifact(session_id, name)
    }

    /// How many times a session's artifact was written (stored, or replaced
    /// by a later upload of the same `cache/` name): 1 after an upload that
    /// happened exactly once, whatever was retried.
    pub fn artifact_writes(&self, session_id: &str, name: &str) -> u64 {
        lock(&self.shared.state)
            .sessions
            .get(session_id)
            .and_then(|s| s.artifacts.writes.get(name).copied())
            .unwrap_or(0)
    }

    /// The config of a live session (what `Config.set` stored).
    pub fn session_config(&self, session_id: &str) -> Option<BTreeMap<String, String>> {
        lock(&self.shared.state)
            .sessions
            .get(session_id)
            .map(|s| s.conf.clone())
    }

    fn signal_stop(&mut self) {
        self.shared.stopping.send_replace(true);
        if let Some(tx) = self.shutdown_tx.take() {
            let _ = tx.send(());
        }
    }

    /// Stops the server: ends every open stream (stalled ones too), stops
    /// accepting, and waits up to 2 s for open connections to drain before
    /// dropping the accept loop.
    pub async fn shutdown(mut self) {
        self.signal_stop();
        if let Some(serve) = self.serve.take() {
            let abort = serve.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), serve)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.signal_stop();
    }
}
