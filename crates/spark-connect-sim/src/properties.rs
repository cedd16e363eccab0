//! The properties every schedule must keep, checked on its
//! [`Outcome`].
//!
//! * **Exactly once, in order**: the rows delivered are `0, 1, 2, ...`
//!   with no gap or repeat, each batch at the `start_offset` it claims;
//!   a query that completes delivers every row.
//! * **Or a typed error**: a query may end with an error only when the
//!   schedule holds a fault that loses the server's state (crash, restart,
//!   NOT_FOUND, a lost request), and only with a documented one (see
//!   [`TYPED_ERRORS`]); never with wrong data, and never with a stream that
//!   just stops without `ResultComplete`.
//! * **No hang**: the client finishes within the simulated time limit.
//! * **No storm**: in any simulated second, at most
//!   [`MAX_REQUESTS_PER_SECOND`] requests per query beyond two per response
//!   received (a reattach and a release per response is what a server that
//!   ends every stream after one response asks for). Each query of a
//!   session retries on its own, so the allowance is per query.
//! * **RetryInfo honoured** (the stub): after a `RESOURCE_EXHAUSTED` with a
//!   `RetryInfo`, no request but a release before the delay it asked for.
//! * **Nothing left behind**: where releases are the client's, a running
//!   server holds no execution once the client is done.
//! * **Stats agree** (direct): the server saw no call the client did not
//!   send; with no fault that cuts a connection, it saw every one; the
//!   session's queries refreshed their token no more often than the
//!   server refused one.
//! * **Tokens expire** ([`Fault::TokenExpiry`]): a fresh token for each
//!   refusal keeps every query exact. The session's token error
//!   (`TOKEN_REFUSED`: refused again without progress since the last
//!   fresh token) is allowed only where the server can spend a token's
//!   life on responses the client has not seen
//!   (`Schedule::tokens_used_unseen`), and only after a fresh token.
//! * **Recovery** (`recovery.rs`): after a fault heals, each query
//!   makes progress again within a bound derived from the client's idle
//!   timeout, its policy's backoff and its channels' keepalive; while
//!   nothing is wrong it is never silent for longer.
//! * **Unary calls under `RetryLayer`** (the `ops` client, [`crate::unary`]):
//!   each answered, or failed with a code its service config retries or
//!   its deadline, within its attempts; where nothing but the server's
//!   script fails them, exactly the outcomes and attempts the script
//!   implies.
//! * **A replay is refused**: a server that re-sends a response the client
//!   already has ([`Fault::Replay`]) never yields a row twice: the query is
//!   exact, or ends with the typed integrity error for a repeated response
//!   id (`is_replay_error`).

use std::time::Duration;

use spark_connect_retry::reattach::{IntegrityError, ReattachError};

use crate::client::QueryResult;
use crate::recovery::{self, Bound};
use crate::schedule::{ClientKind, Fault, Schedule, Topology};
use crate::session::SessionMetrics;
use crate::unary::{self, UnaryPlan};
use crate::violation::Violation;
use crate::world::Outcome;

/// What the session's token error says ([`Fault::TokenExpiry`]).
pub(crate) const TOKEN_REFUSED: &str = "[TOKEN_REFUSED]";

/// The most requests each query may send in any one simulated second,
/// beyond two per response received in it.
pub const MAX_REQUESTS_PER_SECOND: usize = 20;

/// What a documented error's message holds: the Spark error classes the
/// reattach rules end a query with when the server lost it, and the
/// retry policy giving up.
pub const TYPED_ERRORS: [&str; 5] = [
    "INVALID_HANDLE.OPERATION_NOT_FOUND",
    "INVALID_HANDLE.SESSION_NOT_FOUND",
    "INVALID_HANDLE.SESSION_CHANGED",
    "RESPONSE_ALREADY_RECEIVED",
    "INVALID_CURSOR",
];

/// Whether `msg` is the client's typed error for a response id received
/// twice (the reattach rules' `[RESULT_INTEGRITY]` error for a replayed
/// response), as the stub, the guard and the session word it.
pub(crate) fn is_replay_error(msg: &str) -> bool {
    const ID: &str = "00000000-0000-0000-0000-000000000000";
    let text = ReattachError::from(IntegrityError::DuplicateResponseId(ID.into())).to_string();
    let quoted = format!("{ID:?}");
    match text.split_once(quoted.as_str()) {
        Some((before, after)) => msg.contains(before) && msg.contains(after),
        None => false,
    }
}

/// Checks every property; the violations found (empty: it passed). The
/// most specific come first: a query's data and error, then recovery (a
/// run cut at the time limit is also a query that stopped recovering).
pub fn check(schedule: &Schedule, outcome: &Outcome) -> Vec<Violation> {
    let mut v = vec![];
    if let Some(results) = &outcome.results {
        for (k, r) in results.iter().enumerate() {
            check_query(schedule, k, r, &mut |property, detail| {
                v.push(Violation { property, detail });
            });
        }
    }
    v.extend(recovery::check(schedule, outcome, &Bound::of_clients()));
    let mut fail = |property: &'static str, detail: String| v.push(Violation { property, detail });
    if let Some(e) = &outcome.sim_error {
        fail("hang", format!("hang or host error: {e}"));
    }
    if outcome.results.is_none() {
        fail("hang", "the client never finished".into());
    }
    if let Some(plan) = &schedule.unary {
        check_unary(schedule, plan, outcome, &mut fail);
    }
    check_session_metrics(outcome, &mut fail);
    let mut responses: Vec<Duration> = outcome
        .timelines
        .iter()
        .flat_map(|t| t.responses.iter().copied())
        .collect();
    responses.sort();
    let queries = match &schedule.client {
        ClientKind::Session { queries } => queries.len(),
        _ => 1,
    };
    let allowance = MAX_REQUESTS_PER_SECOND * queries;
    if let Some((n, r)) = storm(&outcome.requests, &responses, allowance) {
        fail(
            "storm",
            format!("a storm: {n} requests and {r} responses within one simulated second"),
        );
    }
    // RetryInfo is a floor: no request but a release before the delay the
    // server asked for (the shortest of the schedule's, as a pushback is
    // not matched to its fault).
    let floor = schedule
        .faults
        .iter()
        .filter_map(|f| match f {
            Fault::RetryInfo { ms, .. } => Some(Duration::from_millis(*ms)),
            _ => None,
        })
        .min();
    if let Some(floor) = floor {
        for at in &outcome.pushbacks {
            if let Some((next, rpc)) = outcome
                .requests
                .iter()
                .find(|(t, rpc)| t >= at && rpc != "ReleaseExecute")
                && *next < *at + floor
            {
                fail(
                    "retry_info",
                    format!(
                        "{rpc} {:?} after a RESOURCE_EXHAUSTED asking for at least {floor:?}",
                        *next - *at
                    ),
                );
            }
        }
    }
    let stub = schedule.client == ClientKind::Stub;
    let releases_are_clients = (stub && schedule.topology == Topology::Direct) || outcome.released;
    if releases_are_clients
        && let Some(live) = &outcome.live_executions
        && !live.is_empty()
    {
        fail("leak", format!("the server still holds {live:?}"));
    }
    let sent = |rpc: &str| outcome.requests.iter().filter(|(_, r)| r == rpc).count() as u64;
    let calls = &outcome.server_calls;
    // Through the guard the client's calls are the guard's to carry (it
    // retries an ExecutePlan itself): only direct calls are compared.
    let mut pairs = vec![];
    // A query whose `sql()` failed has no stream, so no counters: its
    // calls are unknown, and the session is then not compared; nor is a
    // session that never finished (it left no counters at all).
    let all_stats = outcome.results.is_some() && outcome.stream_stats.iter().all(Option::is_some);
    if schedule.topology == Topology::Direct && !stub && all_stats {
        // The session's own counters: each query's ExecutePlan, its
        // re-executes and reattaches. The requests it sent are not named
        // (they are counted from HTTP/2 frames), so these stand in.
        let stats: Vec<_> = outcome.stream_stats.iter().flatten().collect();
        let queries = outcome.results.as_ref().map_or(0, Vec::len) as u64;
        let execs = queries + stats.iter().map(|s| s.re_executes).sum::<u64>();
        let reattaches = stats.iter().map(|s| s.reattaches).sum::<u64>();
        pairs.push(("ExecutePlan", calls.execute, execs));
        pairs.push(("ReattachExecute", calls.reattach, reattaches));
        // Every fresh token answers a refusal the server made.
        let refreshes: u64 = stats.iter().map(|s| s.token_refreshes).sum();
        if refreshes > outcome.token_refusals {
            fail(
                "stats",
                format!(
                    "the queries refreshed their token {refreshes} times but the server refused {} tokens",
                    outcome.token_refusals
                ),
            );
        }
    }
    if schedule.topology == Topology::Direct && stub {
        pairs.push(("ExecutePlan", calls.execute, sent("ExecutePlan")));
        pairs.push(("ReattachExecute", calls.reattach, sent("ReattachExecute")));
        pairs.push((
            "ReleaseExecute",
            calls.release_all + calls.release_until,
            sent("ReleaseExecute"),
        ));
    }
    let lossless = schedule.topology == Topology::Direct
        && !schedule.faults.iter().any(|f| {
            matches!(
                f,
                Fault::Hold { .. }
                    | Fault::Partition { .. }
                    | Fault::Crash { .. }
                    | Fault::Reset { .. }
                    | Fault::LoseRequest
                    | Fault::Restart { .. }
            )
        });
    for (rpc, seen, sent) in pairs {
        if seen > sent {
            fail(
                "stats",
                format!("the server saw {seen} {rpc} but the client sent {sent}"),
            );
        } else if lossless && seen != sent {
            fail(
                "stats",
                format!(
                    "the client sent {sent} {rpc} on a lossless network but the server saw {seen}"
                ),
            );
        }
    }
    v
}

/// The data and error properties of query `k`.
fn check_query(
    schedule: &Schedule,
    k: usize,
    r: &QueryResult,
    fail: &mut impl FnMut(&'static str, String),
) {
    if let Some(i) = r
        .rows
        .iter()
        .enumerate()
        .position(|(i, id)| *id != r.start + i as i64)
    {
        fail(
            "data",
            format!(
                "query {k}: wrong data: row {i} is {} (lost, duplicated or another query's rows)",
                r.rows[i]
            ),
        );
    }
    if !r.offsets_ok {
        fail(
            "data",
            format!("query {k}: a batch arrived at the wrong start_offset"),
        );
    }
    match &r.error {
        None if r.complete && r.rows.len() as i64 != r.expected => fail(
            "data",
            format!(
                "query {k}: complete with {} rows of {}",
                r.rows.len(),
                r.expected
            ),
        ),
        None if !r.complete => fail(
            "data",
            format!(
                "query {k}: the stream ended without ResultComplete after {} rows",
                r.rows.len()
            ),
        ),
        None => {}
        // A replaying server: the typed error for a repeated response id,
        // whatever else the schedule holds.
        Some((_, msg)) if schedule.faults.contains(&Fault::Replay) && is_replay_error(msg) => {}
        // Refused again after a fresh token, never without one.
        Some((_, msg))
            if schedule.tokens_used_unseen()
                && msg.contains(TOKEN_REFUSED)
                && !msg.contains("after 0 refresh") => {}
        Some((code, msg)) => {
            if !schedule.may_lose_state() {
                fail(
                    "error",
                    format!("query {k}: an error without a fault that loses state: {code:?} {msg}"),
                );
            } else if !TYPED_ERRORS.iter().any(|t| msg.contains(t)) {
                fail(
                    "error",
                    format!("query {k}: an undocumented error: {code:?} {msg}"),
                );
            }
        }
    }
}

/// The second client's calls ([`crate::unary`]): each answered, or failed
/// with a code its service config retries (only after every attempt) or
/// its deadline; never more attempts than the config allows. On a world that
/// loses nothing else, every outcome and the attempts in all are exactly
/// those [`UnaryPlan::expected`] derives from the server's script.
fn check_unary(
    schedule: &Schedule,
    plan: &UnaryPlan,
    outcome: &Outcome,
    fail: &mut impl FnMut(&'static str, String),
) {
    let Some(result) = &outcome.unary else {
        fail("hang", "the ops client never finished".into());
        return;
    };
    if result.outcomes.len() != plan.calls as usize {
        fail(
            "unary",
            format!("{} of {} calls made", result.outcomes.len(), plan.calls),
        );
        return;
    }
    // What the meter provider received is what the layer counted.
    let m = &result.metrics;
    if (m.attempts, m.calls) != (result.stats.attempts, u64::from(plan.calls)) {
        fail(
            "metrics",
            format!(
                "the meter received {} attempts of {} calls; the layer made {} attempts of {} calls",
                m.attempts, m.calls, result.stats.attempts, plan.calls
            ),
        );
    }
    let most = u64::from(plan.calls) * u64::from(unary::MAX_ATTEMPTS);
    if result.stats.attempts > most {
        fail(
            "unary",
            format!(
                "{} attempts for {} calls of at most {} attempts",
                result.stats.attempts,
                plan.calls,
                unary::MAX_ATTEMPTS
            ),
        );
    }
    for (i, outcome) in result.outcomes.iter().enumerate() {
        if let Err((code, msg)) = outcome
            && !matches!(
                code,
                tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
            )
        {
            fail(
                "unary",
                format!("call {i}: {code:?} {msg}, not a code the config retries"),
            );
        }
    }
    // A call fails UNAVAILABLE only once its attempts are used up, or
    // when the next attempt would start past its deadline (the layer's
    // rule 10: the last attempt's status is delivered).
    let unavailable = result
        .outcomes
        .iter()
        .zip(&result.durations)
        .filter(|(o, took)| {
            matches!(o, Err((tonic::Code::Unavailable, _)))
                && **took + unary::MAX_BACKOFF < unary::DEADLINE
        })
        .count() as u64;
    if unavailable > result.stats.exhausted {
        fail(
            "unary",
            format!(
                "{unavailable} calls failed UNAVAILABLE well before their deadline but only {} used up their attempts",
                result.stats.exhausted
            ),
        );
    }
    // What can fail a unary call besides the script: the server gone or
    // restarted, and, through the guard, its link to the server cut or
    // its one connection to the server dropped (which the main client's
    // faults do, and which the ops client's calls share).
    let guard = schedule.topology == Topology::Guard;
    let disturbed = schedule.faults.iter().any(|f| match f {
        Fault::Crash { .. } | Fault::Restart { .. } => true,
        Fault::Reset { .. } | Fault::LoseRequest => guard,
        Fault::Hold { link, .. } | Fault::Partition { link, .. } => {
            *link == crate::schedule::Link::GuardServer
        }
        _ => false,
    });
    if disturbed {
        return;
    }
    let (expected, attempts) = plan.expected();
    let got: Vec<bool> = result.outcomes.iter().map(Result::is_ok).collect();
    if got != expected {
        fail(
            "unary",
            format!("answered {got:?}, expected {expected:?} from the server's script"),
        );
    }
    if result.stats.attempts != attempts {
        fail(
            "unary",
            format!(
                "{} attempts, expected {attempts} from the server's script",
                result.stats.attempts
            ),
        );
    }
    // Every AnalyzePlan attempt reached the server (only this client
    // sends one).
    if m.analyze_attempts != outcome.server_calls.analyze {
        fail(
            "metrics",
            format!(
                "the meter received {} AnalyzePlan attempts; the server saw {}",
                m.analyze_attempts, outcome.server_calls.analyze
            ),
        );
    }
}

/// The session's instruments against its streams' counters: reattaches
/// and re-executes as counted, and the rows of every batch delivered.
fn check_session_metrics(outcome: &Outcome, fail: &mut impl FnMut(&'static str, String)) {
    let (Some(m), Some(results)) = (&outcome.session_metrics, &outcome.results) else {
        return;
    };
    if !outcome.stream_stats.iter().all(Option::is_some) {
        return;
    }
    let stats: Vec<_> = outcome.stream_stats.iter().flatten().collect();
    let counted = SessionMetrics {
        reattaches: stats.iter().map(|s| s.reattaches).sum(),
        re_executes: stats.iter().map(|s| s.re_executes).sum(),
        rows: results.iter().map(|r| r.rows.len() as u64).sum(),
    };
    // A resumption replays rows to verify them: counted, not delivered.
    let resumed = stats.iter().any(|s| s.resumptions > 0);
    let received = SessionMetrics {
        rows: if resumed { counted.rows } else { m.rows },
        ..*m
    };
    if received != counted {
        fail(
            "metrics",
            format!("the session's meter received {m:?}; its streams counted {counted:?}"),
        );
    }
}

/// The worst simulated second (requests, responses), if over the bound.
fn storm(
    requests: &[(Duration, String)],
    responses: &[Duration],
    allowance: usize,
) -> Option<(usize, usize)> {
    let second = Duration::from_secs(1);
    let mut start = 0;
    for end in 0..requests.len() {
        while requests[end].0 - requests[start].0 >= second {
            start += 1;
        }
        let n = end - start + 1;
        let from = requests[start].0;
        let r = responses
            .iter()
            .filter(|t| **t >= from && **t < from + second)
            .count();
        if n > allowance + 2 * r {
            return Some((n, r));
        }
    }
    None
}
