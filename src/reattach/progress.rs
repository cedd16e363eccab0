//! Progress-aware reopening: a stream that keeps coming back empty is
//! reopened with backoff, and not forever.
//!
//! *Why:* PySpark reopens a stream at once, with no sleep and no budget,
//! after a clean end without `ResultComplete`, an `OPERATION_NOT_FOUND`
//! before any response, or a `DEADLINE_EXCEEDED`; the first two without any
//! bound, the last for up to an hour. Against a healthy Spark server that is
//! right: it ends segments on purpose after `senderMaxStreamDuration`. But a
//! server that misbehaves (ends every stream at once with nothing, never
//! finds the operation, times out every reattach, replays) turns each of
//! these into a hot loop of thousands of RPCs per second.
//!
//! # The rule
//!
//! A stream *segment* is one ExecutePlan or ReattachExecute call. A segment
//! that delivered no new response is *empty*. Consecutive empty segments
//! form a *run*; any delivered response ends the run (and resets its budget,
//! as it resets the retry budget).
//!
//! When an empty segment ends in a way that would reopen at once (a clean
//! end, NOT_FOUND before any response, DEADLINE_EXCEEDED, the client's
//! segment deadline, a stall):
//!
//! 1. **A long-lived segment owes nothing.** If it stayed open at least as
//!    long as the wait it would owe (the next backoff of the run, without
//!    jitter), it is not counted and the stream reopens at once. This is
//!    what keeps a silent query on a real server working: Spark ends an
//!    empty segment only after `senderMaxStreamDuration` (2 min by default,
//!    1 s in this crate's CI), far longer than the first backoff (50 ms), so
//!    a query that computes silently for hours never starts a run.
//! 2. **The first short one is free.** The first counted segment of a run
//!    reopens at once, as in PySpark, so a single hiccup (one NOT_FOUND
//!    before the ExecutePlan arrived, one empty segment) costs nothing.
//! 3. **Later ones back off.** Every further counted segment waits the
//!    policy's next backoff (jitter included) before the stream is reopened.
//! 4. **The budget ends the run.** When the policy grants no further wait,
//!    the execution fails with [`ReattachError::NoProgress`], naming the
//!    operation and what the server kept doing.
//!
//! The policy is the first of the retry policies that retries
//! `UNAVAILABLE` (the default policy does: 15 waits from 50 ms growing ×4 to
//! 60 s, about 10 minutes); with none, PySpark's `DefaultPolicy`. The run
//! keeps its own budget, apart from the one that retryable errors use.
//!
//! *Departure from PySpark:* sequences in which every reopen follows a
//! delivered response, or only one short empty segment, behave exactly as
//! in PySpark. From the second short empty segment in a row, this client
//! waits where PySpark reopens at once, and it gives up where PySpark would
//! loop forever (clean ends, NOT_FOUND) or for an hour (deadlines).
//!
//! The bound this gives: while no response arrives, short empty segments
//! are reopened at most once per policy backoff, and at most `max_retries +
//! 1` of them in a row before the typed error. Segments that live at least
//! their owed wait are not bounded by this rule (they are not a hot loop);
//! stalls and deadlines among them stay under the immediate-retry bound.
//!
//! [`ReattachError::NoProgress`]: super::ReattachError::NoProgress

use std::fmt;
use std::time::Duration;

use crate::policy::{Backoff, Failure, PySparkPolicy, RetryPolicy};
use crate::retrying::Retrying;

/// What the server kept doing in a run of empty segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EmptySegment {
    /// The stream ended cleanly without a response.
    EndedEmpty,
    /// The server did not know the operation (before any response).
    NotFound,
    /// The server answered DEADLINE_EXCEEDED.
    DeadlineExceeded,
    /// The client's segment deadline passed with no response.
    SegmentDeadline,
    /// No message within the idle timeout.
    Stalled,
    /// The stream was cut by something between client and server (a reset,
    /// or an end inside a message).
    Cut,
}

impl fmt::Display for EmptySegment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EmptySegment::EndedEmpty => "ended the stream cleanly without a response",
            EmptySegment::NotFound => "answered OPERATION_NOT_FOUND / SESSION_NOT_FOUND",
            EmptySegment::DeadlineExceeded => "answered DEADLINE_EXCEEDED",
            EmptySegment::SegmentDeadline => "let the segment deadline pass without a response",
            EmptySegment::Stalled => "sent nothing within the idle timeout",
            EmptySegment::Cut => "had its stream cut (reset, or ended inside a message)",
        })
    }
}

/// The verdict on an empty segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Reopen after this wait (zero: at once).
    Reopen(Duration),
    /// The run used up its budget.
    GiveUp,
}

/// The current run of empty segments (the [module docs](self)' rule).
#[derive(Debug, Clone)]
pub(crate) struct EmptyRun {
    backoff: Backoff,
    /// Segments counted in this run (short and empty).
    pub(crate) counted: u32,
    /// Backoff waited in this run.
    pub(crate) waited: Duration,
}

impl EmptyRun {
    /// A fresh run under `retrying`'s policy for dead streams.
    pub(crate) fn new(retrying: &Retrying) -> Self {
        let probe = tonic::Status::unavailable("empty stream segment");
        let policy = retrying
            .policies()
            .iter()
            .find(|p| p.can_retry(&Failure::new(&probe)))
            .cloned()
            .unwrap_or_else(RetryPolicy::pyspark);
        EmptyRun {
            backoff: policy.backoff(),
            counted: 0,
            waited: Duration::ZERO,
        }
    }

    /// The wait the next counted segment would owe, without jitter; `None`
    /// when the budget is used up.
    pub(crate) fn owed(&self) -> Option<Duration> {
        self.backoff.clone().next(None, &mut || 0.0)
    }

    /// An empty segment that stayed open for `lived`: reopen (after how
    /// long), or give up.
    pub(crate) fn on_empty(&mut self, lived: Duration, retrying: &Retrying) -> Verdict {
        let owed = self.owed();
        if owed.is_some_and(|owed| lived >= owed) {
            return Verdict::Reopen(Duration::ZERO); // rule 1: owes nothing
        }
        self.counted += 1;
        if self.counted == 1 {
            return Verdict::Reopen(Duration::ZERO); // rule 2: the first is free
        }
        match self.backoff.next(None, &mut || retrying.jitter_sample()) {
            Some(wait) => {
                self.waited += wait;
                Verdict::Reopen(wait) // rule 3
            }
            None => Verdict::GiveUp, // rule 4
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrying::PySparkRetrying;

    fn retrying() -> Retrying {
        Retrying::pyspark().with_seed(1)
    }

    #[test]
    fn first_short_segment_is_free_then_backoff_then_give_up() {
        let r = retrying();
        let mut run = EmptyRun::new(&r);
        assert_eq!(
            run.on_empty(Duration::ZERO, &r),
            Verdict::Reopen(Duration::ZERO)
        );
        let mut waits = Vec::new();
        while let Verdict::Reopen(w) = run.on_empty(Duration::ZERO, &r) {
            waits.push(w);
        }
        assert_eq!(waits.len(), 15, "the default policy's budget");
        assert_eq!(waits[0], Duration::from_millis(50));
        assert_eq!(waits[1], Duration::from_millis(200));
        assert_eq!(run.counted, 17);
    }

    #[test]
    fn long_lived_segments_owe_nothing_and_do_not_count() {
        let r = retrying();
        let mut run = EmptyRun::new(&r);
        for _ in 0..1000 {
            assert_eq!(
                run.on_empty(Duration::from_secs(1), &r),
                Verdict::Reopen(Duration::ZERO)
            );
        }
        assert_eq!(run.counted, 0);
    }

    #[test]
    fn no_policy_for_unavailable_falls_back_to_the_default() {
        let r = Retrying::pyspark_with(vec![]);
        let run = EmptyRun::new(&r);
        assert_eq!(run.owed(), Some(Duration::from_millis(50)));
    }
}
