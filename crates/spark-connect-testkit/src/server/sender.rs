//! The sender: the task that streams one execution's responses to one
//! attached client (ExecutePlan or ReattachExecute), applies the stream's
//! fault, and ends the stream gracefully at the configured limits, on
//! preemption by a newer attach, or with the execution's outcome.

use std::ops::ControlFlow;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::buffer::{Operation, Step};
use super::state::Shared;
use crate::conn::KillSwitch;
use crate::error::SparkException;
use crate::faults::{Action, Fault, Rpc, lock};
use spark_connect_retry::proto;

/// The response stream of ExecutePlan and ReattachExecute.
pub(super) type ExecStream = ReceiverStream<Result<proto::ExecutePlanResponse, Status>>;

type Tx = mpsc::Sender<Result<proto::ExecutePlanResponse, Status>>;

/// What a sender does after one step: go on, or end the stream with this
/// status (`None`: OK, or nothing more can be sent).
type Flow = ControlFlow<Option<Status>>;

/// A fault that fires inside a response stream.
struct StreamFault {
    fault: Fault,
    /// The RPC that attached the stream.
    rpc: Rpc,
    after: u64,
}

/// What the call that attaches a stream brought along: its connection's
/// kill switch and the index of the token it was accepted with.
pub(super) struct Caller {
    pub(super) kill: Option<KillSwitch>,
    pub(super) token: Option<u64>,
}

/// Attaches a new sender to `op`, starting after index `start_after`, and
/// returns its response stream. Attaching preempts older senders at once.
pub(super) fn attach_stream(
    shared: Arc<Shared>,
    op: Arc<Operation>,
    start_after: u64,
    fault: Option<(Rpc, Fault)>,
    caller: Caller,
) -> ExecStream {
    let gen_ = op.attach();
    let (tx, rx) = mpsc::channel(1);
    let fault = fault.map(|(rpc, f)| StreamFault {
        after: u64::from(f.after.unwrap_or(0)),
        rpc,
        fault: f,
    });
    tokio::spawn(async move {
        let last = run_sender(&shared, &op, gen_, start_after, fault, caller, &tx).await;
        if !op.reattachable {
            // A non-reattachable execution lives only as long as its one
            // stream: it is removed (and cancelled if unfinished) before the
            // client can see the end, so tests observe it deterministically.
            if op.is_running() {
                let status = shared.canceled_status(&op.session_id);
                op.fail(status);
            }
            shared.remove_op(&op);
        }
        if let Some(status) = last {
            let _ = tx.send(Err(status)).await;
        }
    });
    ReceiverStream::new(rx)
}

/// Sends responses of `op` from index `start_after + 1` until the stream
/// ends. Returns the status to end the stream with (`None`: OK, or nothing
/// more can be sent).
async fn run_sender(
    shared: &Shared,
    op: &Operation,
    gen_: u64,
    start_after: u64,
    mut fault: Option<StreamFault>,
    Caller { kill, token }: Caller,
    tx: &Tx,
) -> Option<Status> {
    let mut sender = Sender::new(shared, op, gen_, start_after, kill, tx);
    sender.token = token;
    loop {
        if let Some(f) = fault.take_if(|f| f.after == sender.sent)
            && let ControlFlow::Break(end) = sender.inject(&f.fault, f.rpc).await
        {
            return end;
        }
        sender.changed.borrow_and_update();
        let keep = shared.faults.keeps_replayable();
        let step = op.consume(sender.next, gen_, sender.retry_buffer, keep);
        let complete = matches!(step, Step::Finished(Ok(())));
        if let ControlFlow::Break(end) = sender.step(step).await {
            if let (true, Some(f)) = (complete, fault) {
                // The whole result was shorter than the fault's trigger (a
                // client's short command stream before its query, say): the
                // fault waits for the next matching stream instead.
                f.fault.log_put_back(f.rpc, sender.sent);
                shared.faults.put_back(f.fault);
            }
            return end;
        }
    }
}

/// One attached sender's position and limits.
struct Sender<'a> {
    shared: &'a Shared,
    op: &'a Operation,
    /// The attach generation; a newer one preempts this sender.
    gen_: u64,
    tx: &'a Tx,
    kill: Option<KillSwitch>,
    /// Graceful end after `max_stream_duration` (reattachable only).
    deadline: Option<Instant>,
    /// Bytes of sent responses the buffer keeps behind the current one.
    retry_buffer: u64,
    changed: watch::Receiver<()>,
    stopping: watch::Receiver<bool>,
    /// The index of the next response to send.
    next: u64,
    /// Responses and bytes sent on this stream.
    sent: u64,
    bytes: u64,
    /// The index of the token the stream was opened with (a rotation).
    token: Option<u64>,
}

impl<'a> Sender<'a> {
    fn new(
        shared: &'a Shared,
        op: &'a Operation,
        gen_: u64,
        start_after: u64,
        kill: Option<KillSwitch>,
        tx: &'a Tx,
    ) -> Self {
        let settings = &shared.settings;
        let deadline = settings
            .max_stream_duration
            .filter(|_| op.reattachable)
            // Saturating: a duration too large for the clock means "never"
            // (`Instant + Duration::MAX` would panic this task).
            .and_then(|d| Instant::now().checked_add(d));
        let retry_buffer = if op.reattachable {
            settings.retry_buffer_bytes as u64
        } else {
            0
        };
        Sender {
            shared,
            op,
            gen_,
            tx,
            kill,
            deadline,
            retry_buffer,
            changed: op.changed.subscribe(),
            stopping: shared.stopping.subscribe(),
            next: start_after + 1,
            sent: 0,
            bytes: 0,
            token: None,
        }
    }

    /// Applies the stream's fault, due now.
    async fn inject(&mut self, fault: &Fault, rpc: Rpc) -> Flow {
        let when = format!("after {} responses of the stream", self.sent);
        self.shared.faults.fire(fault, rpc, &when);
        match &fault.action {
            Action::Fail(_) | Action::BadStatusDetails => {
                ControlFlow::Break(fault.status_for(&self.op.session_id, &self.op.id))
            }
            Action::Reset | Action::LoseRequest => {
                // Let the responses already handed over reach the socket.
                tokio::time::sleep(fault.reset_grace).await;
                if let Some(k) = &self.kill {
                    k.kill();
                }
                ControlFlow::Break(None)
            }
            Action::Restart => {
                tokio::time::sleep(fault.reset_grace).await;
                self.shared.restart();
                ControlFlow::Break(None)
            }
            Action::Stall(duration) => {
                let sleep = async {
                    match duration {
                        Some(d) => tokio::time::sleep(*d).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = sleep => ControlFlow::Continue(()),
                    _ = self.tx.closed() => ControlFlow::Break(None),
                    _ = self.stopping.changed() => ControlFlow::Break(None),
                    _ = preempted(self.op, self.gen_, &mut self.changed) => ControlFlow::Continue(()),
                }
            }
            // Only meaningful on AddArtifacts.
            Action::Corrupt => ControlFlow::Continue(()),
            Action::Replay => self.replay().await,
        }
    }

    /// Re-sends the response before the stream's position (the one a
    /// reattach resumed after, or the last one this stream sent), its id
    /// unchanged; not counted as sent. Nothing when there is none.
    async fn replay(&mut self) -> Flow {
        let Some((mut resp, _)) = self
            .next
            .checked_sub(1)
            .filter(|i| *i >= 1)
            .and_then(|i| self.op.replayable(i))
        else {
            tracing::info!(operation_id = %self.op.id, "replay: no response before the position");
            return ControlFlow::Continue(());
        };
        resp.server_side_session_id = self.shared.ssid();
        if self.tx.send(Ok(resp)).await.is_err() {
            return ControlFlow::Break(None); // The client went away.
        }
        ControlFlow::Continue(())
    }

    /// Acts on what the buffer gave for the next index.
    async fn step(&mut self, step: Step) -> Flow {
        match step {
            Step::Send(resp, size) => self.send(*resp, size).await,
            Step::Wait => self.wait().await,
            Step::Finished(outcome) => ControlFlow::Break(outcome.err()),
            Step::Disconnected => self.end_with(&SparkException::cursor_disconnected()),
            Step::Evicted(id, index) => {
                self.end_with(&SparkException::position_not_available(&id, index))
            }
        }
    }

    /// Sends one response, then ends gracefully if a stream limit is reached.
    async fn send(&mut self, mut resp: proto::ExecutePlanResponse, size: u64) -> Flow {
        // A stream opened with a token since replaced ends before its next
        // response, as a gateway cutting an expired session would.
        if let (Some(tokens), Some(k)) = (&self.shared.tokens, self.token)
            && !tokens.may_send(k)
        {
            return ControlFlow::Break(Some(Status::unauthenticated("token expired")));
        }
        resp.server_side_session_id = self.shared.ssid();
        if self.tx.send(Ok(resp)).await.is_err() {
            return ControlFlow::Break(None); // The client went away.
        }
        self.sent += 1;
        self.bytes += size;
        self.next += 1;
        if self.op.reattachable && self.over_limit() {
            // Graceful end: OK status, no ResultComplete; the client must
            // reattach.
            tracing::info!(
                operation_id = %self.op.id,
                responses = self.sent,
                bytes = self.bytes,
                "graceful stream end"
            );
            return ControlFlow::Break(None);
        }
        ControlFlow::Continue(())
    }

    fn over_limit(&self) -> bool {
        let settings = &self.shared.settings;
        let over_count = settings
            .max_responses_per_stream
            .is_some_and(|n| self.sent >= n);
        let over_bytes = settings
            .max_bytes_per_stream
            .is_some_and(|n| self.bytes > n);
        let over_time = self.deadline.is_some_and(|d| Instant::now() >= d);
        over_count || over_bytes || over_time
    }

    /// Waits for the next response, the client leaving, the server stopping
    /// or the stream deadline.
    async fn wait(&mut self) -> Flow {
        let deadline = self.deadline;
        let timeout = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = self.changed.changed() => if r.is_err() { ControlFlow::Break(None) } else { ControlFlow::Continue(()) },
            _ = self.tx.closed() => ControlFlow::Break(None),
            _ = self.stopping.changed() => ControlFlow::Break(None),
            _ = timeout => ControlFlow::Break(None),
        }
    }

    fn end_with(&self, err: &SparkException) -> Flow {
        ControlFlow::Break(Some(
            self.shared.spark_status(err, Some(&self.op.session_id)),
        ))
    }
}

/// Resolves once a newer sender attached or the operation was released.
async fn preempted(op: &Operation, gen_: u64, changed: &mut watch::Receiver<()>) {
    loop {
        changed.borrow_and_update();
        {
            let st = lock(&op.state);
            if st.closed || st.attach_gen != gen_ {
                return;
            }
        }
        if changed.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}
