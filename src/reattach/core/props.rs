//! Properties of this sans-I/O reattach core under random server behaviour:
//! random segments of responses (fresh, replayed or id-less), statuses,
//! clean ends and lifetimes. For every sequence: no panic, termination,
//! every response delivered at most once, nothing after an error, and
//! reopens after short empty segments paced by the policy's backoff.

use std::collections::HashSet;
use std::time::Duration;

use super::{Action, Event, ReattachCore};
use crate::policy::PySparkPolicy;
use crate::policy::RetryPolicy;
use crate::proto::execute_plan_response::{ResponseType, ResultComplete};
use crate::proto::{ExecutePlanRequest, ExecutePlanResponse};
use crate::reattach::ReattachError;
use crate::retrying::PySparkRetrying;
use crate::retrying::Retrying;
use proptest::prelude::*;
use tonic::{Code, Status};
use tonic_retry::retrying::ManualClock;
use tonic_types::{ErrorDetails, StatusExt};

/// What a segment does after its responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Clean,
    Unavailable,
    Deadline,
    NotFound,
    Fatal,
    Complete,
}

#[derive(Debug, Clone)]
struct Segment {
    /// Response ids: 0 = empty id, others from a small pool (so replays happen).
    ids: Vec<u8>,
    end: End,
    /// Short (instant) or long (1 s, longer than any owed wait here).
    long: bool,
}

fn segment() -> impl Strategy<Value = Segment> {
    (
        prop::collection::vec(prop_oneof![1 => Just(0u8), 12 => 1u8..40], 0..3),
        prop_oneof![
            4 => Just(End::Clean),
            2 => Just(End::Unavailable),
            2 => Just(End::Deadline),
            2 => Just(End::NotFound),
            1 => Just(End::Fatal),
            1 => Just(End::Complete),
        ],
        prop::bool::weighted(0.3),
    )
        .prop_map(|(ids, end, long)| Segment { ids, end, long })
}

/// The policy: waits 10, 20, 40, 80 ms (no jitter), then the budget is spent.
const SCHEDULE: [u64; 4] = [10, 20, 40, 80];

fn retrying(clock: &ManualClock) -> Retrying {
    let p = RetryPolicy::pyspark_builder()
        .max_retries(Some(4))
        .initial_backoff_ms(10.0)
        .backoff_multiplier(2.0)
        .max_backoff_ms(Some(1000.0))
        .jitter_ms(0.0)
        .build()
        .unwrap();
    Retrying::pyspark_with(vec![p])
        .with_clock(clock.clone())
        .with_seed(1)
}

fn resp(id: u8, complete: bool) -> ExecutePlanResponse {
    ExecutePlanResponse {
        session_id: "s".into(),
        response_id: if id == 0 {
            String::new()
        } else {
            format!("r{id}")
        },
        response_type: complete.then_some(ResponseType::ResultComplete(ResultComplete {})),
        ..Default::default()
    }
}

fn status(end: End) -> Option<Status> {
    Some(match end {
        End::Unavailable => Status::unavailable("u"),
        End::Deadline => Status::deadline_exceeded("d"),
        End::NotFound => Status::with_error_details(
            Code::Internal,
            "INVALID_HANDLE.OPERATION_NOT_FOUND",
            ErrorDetails::new(),
        ),
        End::Fatal => Status::invalid_argument("bad"),
        End::Clean | End::Complete => return None,
    })
}

/// One reopen of the stream, as the driver saw it.
#[derive(Debug)]
struct Reopen {
    /// The previous segment delivered nothing, was short, and ended in a
    /// way PySpark reopens at once (clean end, NOT_FOUND, deadline).
    after_short_empty: bool,
    /// Responses delivered before this reopen (the window it belongs to).
    window: usize,
    slept: Duration,
}

fn run(script: &[Segment]) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let retrying = retrying(&clock);
    let mut core = ReattachCore::new(ExecutePlanRequest {
        session_id: "s".into(),
        ..Default::default()
    })
    .unwrap();
    let mut delivered: Vec<String> = Vec::new();
    let mut reopens: Vec<Reopen> = Vec::new();
    let mut segments = script.iter().cloned();
    // The current segment: its remaining ids, end, lifetime, whether it delivered.
    let mut current: Option<(std::vec::IntoIter<u8>, End, bool, bool)> = None;
    let mut last: Option<(End, bool, bool)> = None; // previous segment's end, long, delivered
    let mut failed: Option<ReattachError> = None;
    let mut steps = 0;
    'consumer: loop {
        let mut action = core.poll_next(&retrying);
        loop {
            steps += 1;
            prop_assert!(steps < 100_000, "no termination");
            action = match action {
                Action::Finish => break 'consumer,
                Action::Emit(r, _) => {
                    prop_assert!(failed.is_none(), "a response after an error");
                    if !r.response_id.is_empty() {
                        prop_assert!(
                            !delivered.contains(&r.response_id),
                            "{} delivered twice",
                            r.response_id
                        );
                    }
                    delivered.push(r.response_id.clone());
                    if let Some(c) = current.as_mut() {
                        c.3 = true;
                    }
                    continue 'consumer;
                }
                Action::Fail(e, _) => {
                    failed = Some(e);
                    break;
                }
                a @ (Action::SleepThenOpen(..) | Action::Open(_) | Action::RefreshThenOpen(_)) => {
                    let slept = match a {
                        Action::SleepThenOpen(d, _) => d,
                        _ => Duration::ZERO,
                    };
                    if let Some((end, long, any)) = last {
                        reopens.push(Reopen {
                            after_short_empty: !any
                                && !long
                                && matches!(end, End::Clean | End::NotFound | End::Deadline),
                            window: delivered.len(),
                            slept,
                        });
                    }
                    clock.advance(slept);
                    // A fresh segment: scripted, then instant empty clean ends forever.
                    let s = segments.next().unwrap_or(Segment {
                        ids: vec![],
                        end: End::Clean,
                        long: false,
                    });
                    current = Some((s.ids.into_iter(), s.end, s.long, false));
                    Action::Read
                }
                Action::Read => {
                    let (ids, end, long, any) = current.as_mut().expect("a read without a stream");
                    let event = match ids.next() {
                        Some(id) => Event::Response(Box::new(resp(id, false))),
                        None => {
                            if *long {
                                clock.advance(Duration::from_secs(1));
                            }
                            last = Some((*end, *long, *any));
                            match *end {
                                End::Complete => {
                                    *any = true;
                                    // A fresh id so the completion is never a replay.
                                    Event::Response(Box::new(resp(200, true)))
                                }
                                End::Clean => Event::EndOfStream,
                                e => Event::Error(status(e).unwrap()),
                            }
                        }
                    };
                    core.on_event(event, &retrying)
                }
            };
        }
        // After an error the core finishes, and emits nothing more.
        prop_assert!(matches!(core.poll_next(&retrying), Action::Finish));
        break;
    }
    let _ = failed;
    // Pacing: within a window without a delivered response, only the first
    // reopen after a short empty segment is immediate; the others wait the
    // policy's schedule, in order; at most 1 + 4 such reopens per window.
    let windows: HashSet<usize> = reopens.iter().map(|r| r.window).collect();
    for w in windows {
        let paced: Vec<Duration> = reopens
            .iter()
            .filter(|r| r.window == w && r.after_short_empty)
            .map(|r| r.slept)
            .collect();
        prop_assert!(paced.len() <= 1 + SCHEDULE.len(), "{paced:?}");
        let immediate = paced.iter().filter(|d| d.is_zero()).count();
        prop_assert!(
            immediate <= 1,
            "{immediate} immediate reopens in one run: {paced:?}"
        );
        let waits: Vec<u64> = paced
            .iter()
            .filter(|d| !d.is_zero())
            .map(|d| d.as_millis() as u64)
            .collect();
        prop_assert_eq!(&waits[..], &SCHEDULE[..waits.len()]);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn any_server_behaviour_is_bounded_exact_or_a_typed_error(
        script in prop::collection::vec(segment(), 0..30)
    ) {
        run(&script)?;
    }
}
