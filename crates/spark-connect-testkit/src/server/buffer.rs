//! One execution and its response buffer.
//!
//! The producer appends responses; each attached sender takes them by
//! index. Like Spark's `ExecuteResponseObserver`, the buffer keeps the current
//! response plus a tail of earlier ones (the retry buffer) for reattach, and
//! `release_until` evicts up to an id. Attaching bumps a generation, which
//! preempts the previous sender.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use tokio::sync::watch;
use tonic::Status;

use super::settings::PRODUCER_WINDOW;
use crate::error::SparkException;
use crate::faults::lock;
use spark_connect_retry::proto::{self, execute_plan_response as epr};

#[derive(Debug, Default)]
pub(super) struct OpState {
    /// index (1-based) → (response, encoded size).
    pub(super) buffer: BTreeMap<u64, (proto::ExecutePlanResponse, u64)>,
    /// Every response id ever produced → index (never pruned, like Spark).
    pub(super) index_of: HashMap<String, u64>,
    /// `ids[i - 1]` is the response id of index `i`.
    pub(super) ids: Vec<String>,
    pub(super) produced: u64,
    pub(super) highest_consumed: u64,
    /// Set once: `Ok` after the last response, or the execution's error.
    pub(super) outcome: Option<Result<(), Status>>,
    /// Bumped by every attach; a sender whose generation is stale was
    /// preempted.
    pub(super) attach_gen: u64,
    /// Released (ReleaseAll / session closed): attached senders disconnect.
    pub(super) closed: bool,
    /// High-water mark of sent-but-still-buffered responses, for
    /// [`TestServer::buffer_stats`]: what a client's releases keep bounded.
    pub(super) max_sent_buffered: usize,
    /// High-water mark of all buffered responses (sent or produced ahead).
    pub(super) max_buffered: usize,
    /// The latest response dropped from the buffer (index, response,
    /// size), kept only while the fault script may replay
    /// ([`Fault::replay`](crate::Fault::replay)).
    pub(super) dropped: Option<(u64, proto::ExecutePlanResponse, u64)>,
}

impl OpState {
    /// Responses already sent (index ≤ `highest_consumed`) and still held.
    pub(super) fn sent_buffered(&self) -> usize {
        self.buffer.range(..=self.highest_consumed).count()
    }

    /// Keeps `buffer`'s entries from `from` on; with `keep`, the latest
    /// one dropped is held for a replay.
    fn evict_before(&mut self, from: u64, keep: bool) {
        let kept = self.buffer.split_off(&from);
        let dropped = std::mem::replace(&mut self.buffer, kept);
        if let (true, Some((i, (resp, size)))) = (keep, dropped.into_iter().next_back())
            && self.dropped.as_ref().is_none_or(|(d, ..)| *d < i)
        {
            self.dropped = Some((i, resp, size));
        }
    }

    fn update_gauges(&mut self) {
        self.max_sent_buffered = self.max_sent_buffered.max(self.sent_buffered());
        self.max_buffered = self.max_buffered.max(self.buffer.len());
    }
}

pub(super) enum Step {
    Send(Box<proto::ExecutePlanResponse>, u64),
    Wait,
    Finished(Result<(), Status>),
    Disconnected,
    Evicted(String, u64),
}

#[derive(Debug)]
pub(super) struct Operation {
    pub(super) id: String,
    pub(super) session_id: String,
    pub(super) reattachable: bool,
    pub(super) tags: Vec<String>,
    pub(super) plan: Option<proto::Plan>,
    /// The client's preferred Arrow chunk size, when it allows chunking.
    pub(super) chunking: Option<usize>,
    pub(super) state: Mutex<OpState>,
    /// Pinged on every state change; senders and the producer wait on it.
    pub(super) changed: watch::Sender<()>,
}

impl Operation {
    fn notify(&self) {
        self.changed.send_replace(());
    }

    pub(super) fn attach(&self) -> u64 {
        let gen_ = {
            let mut st = lock(&self.state);
            st.attach_gen += 1;
            st.attach_gen
        };
        // Wakes older senders so they see they were preempted.
        self.notify();
        gen_
    }

    /// Appends a produced response. `false` once the execution has ended
    /// (cancelled or released), which stops the producer.
    pub(super) fn push(&self, mut resp: proto::ExecutePlanResponse) -> bool {
        {
            let mut st = lock(&self.state);
            if st.outcome.is_some() || st.closed {
                return false;
            }
            Self::append(&mut st, &self.session_id, &self.id, &mut resp);
        }
        self.notify();
        true
    }

    fn append(
        st: &mut OpState,
        session_id: &str,
        op_id: &str,
        resp: &mut proto::ExecutePlanResponse,
    ) {
        st.produced += 1;
        let index = st.produced;
        let id = uuid::Uuid::new_v4().to_string();
        resp.response_id = id.clone();
        resp.session_id = session_id.to_owned();
        resp.operation_id = op_id.to_owned();
        st.index_of.insert(id.clone(), index);
        st.ids.push(id);
        let size = prost::Message::encoded_len(resp) as u64;
        st.buffer.insert(index, (resp.clone(), size));
        st.max_buffered = st.max_buffered.max(st.buffer.len());
    }

    /// Successful end: a reattachable execution appends `ResultComplete` in
    /// the same step, as Spark does.
    pub(super) fn complete(&self) {
        {
            let mut st = lock(&self.state);
            if st.outcome.is_some() || st.closed {
                return;
            }
            if self.reattachable {
                let mut done = proto::ExecutePlanResponse {
                    response_type: Some(epr::ResponseType::ResultComplete(epr::ResultComplete {})),
                    ..Default::default()
                };
                Self::append(&mut st, &self.session_id, &self.id, &mut done);
            }
            st.outcome = Some(Ok(()));
        }
        self.notify();
    }

    /// Ends the execution with an error unless it already ended. Returns
    /// whether it was still running.
    pub(super) fn fail(&self, status: Status) -> bool {
        let was_running = {
            let mut st = lock(&self.state);
            if st.outcome.is_some() {
                false
            } else {
                st.outcome = Some(Err(status));
                true
            }
        };
        self.notify();
        was_running
    }

    pub(super) fn is_running(&self) -> bool {
        lock(&self.state).outcome.is_none()
    }

    /// ReleaseAll: drop the buffer and disconnect attached senders.
    pub(super) fn close(&self) {
        {
            let mut st = lock(&self.state);
            st.closed = true;
            st.buffer.clear();
            st.dropped = None;
        }
        self.notify();
    }

    pub(super) fn index_of(&self, response_id: &str) -> Option<u64> {
        lock(&self.state).index_of.get(response_id).copied()
    }

    /// ReleaseUntil: evict up to and including `response_id` (with
    /// `keep`, the latest evicted is held for a replay).
    pub(super) fn release_until(
        &self,
        response_id: &str,
        keep: bool,
    ) -> Result<(), SparkException> {
        let mut st = lock(&self.state);
        let index = *st
            .index_of
            .get(response_id)
            .ok_or_else(|| SparkException::position_not_found(response_id))?;
        st.evict_before(index + 1, keep);
        Ok(())
    }

    /// Response `index` as it was sent, for a replay: from the buffer, or
    /// the latest one dropped from it (if kept).
    pub(super) fn replayable(&self, index: u64) -> Option<(proto::ExecutePlanResponse, u64)> {
        let st = lock(&self.state);
        if let Some((resp, size)) = st.buffer.get(&index) {
            return Some((resp.clone(), *size));
        }
        st.dropped
            .as_ref()
            .filter(|(i, ..)| *i == index)
            .map(|(_, resp, size)| (resp.clone(), *size))
    }

    /// Takes response `index` for the sender of generation `gen_`, then
    /// evicts like Spark's observer: the current response plus a tail of at
    /// least `retry_buffer` bytes of earlier ones stay (with `keep`, the
    /// latest evicted is held for a replay).
    pub(super) fn consume(&self, index: u64, gen_: u64, retry_buffer: u64, keep: bool) -> Step {
        let step;
        let advanced;
        {
            let mut st = lock(&self.state);
            let before = st.highest_consumed;
            step = Self::consume_locked(&mut st, index, gen_, retry_buffer, keep);
            advanced = st.highest_consumed > before;
        }
        if advanced {
            // A producer may be waiting for the consumer (back-pressure).
            self.notify();
        }
        step
    }

    fn consume_locked(
        st: &mut OpState,
        index: u64,
        gen_: u64,
        retry_buffer: u64,
        keep: bool,
    ) -> Step {
        if st.closed || st.attach_gen != gen_ {
            return Step::Disconnected;
        }
        if let Some((resp, size)) = st.buffer.get(&index).cloned() {
            st.highest_consumed = st.highest_consumed.max(index);
            let mut kept = 0u64;
            let mut i = index - 1;
            while i >= 1 && kept < retry_buffer {
                match st.buffer.get(&i) {
                    Some((_, s)) => kept += s,
                    None => break,
                }
                i -= 1;
            }
            if i >= 1 {
                st.evict_before(i + 1, keep);
            }
            st.update_gauges();
            return Step::Send(Box::new(resp), size);
        }
        if index <= st.produced {
            let id = st.ids.get(index as usize - 1).cloned().unwrap_or_default();
            return Step::Evicted(id, index);
        }
        match &st.outcome {
            Some(outcome) => Step::Finished(outcome.clone()),
            None => Step::Wait,
        }
    }

    /// Waits for a state change (the producer's back-pressure).
    pub(super) fn must_wait_for_consumer(&self) -> Option<bool> {
        let st = lock(&self.state);
        if st.outcome.is_some() || st.closed {
            return None;
        }
        Some(st.produced - st.highest_consumed >= PRODUCER_WINDOW)
    }
}
