//! Stale sessions: the rule that says whether a failed call means the
//! server-side session is gone, and whether the call may be sent again.
//!
//! A Spark Connect session lives in the server's memory. When the server
//! restarts (or expires the session after an hour idle), that state is gone:
//! the server answers the next request that names the server-side session
//! the client saw with `INVALID_HANDLE.SESSION_CHANGED`, and without
//! renewal every later call fails until the user builds a new session. A
//! long-running service would rather carry on, on a fresh server-side
//! session, and accept what is lost with the old one.
//!
//! **What "stale" means** (read in Spark 4.3's `SparkConnectSessionManager`,
//! and seen on a real server after a restart):
//!
//! * `INVALID_HANDLE.SESSION_CHANGED`: ExecutePlan, Config, AnalyzePlan and
//!   Interrupt get or create the session, then compare its server-side id
//!   with the `client_observed_server_side_session_id` the request carries.
//!   After a restart the request itself re-creates the session under a new
//!   id, so the comparison fails, *before anything runs*.
//! * `INVALID_HANDLE.SESSION_NOT_FOUND` / `INVALID_HANDLE.SESSION_CLOSED`
//!   from an RPC that only looks the session up (ReattachExecute,
//!   ReleaseExecute), or `SESSION_CLOSED` from one that would create it (the
//!   session expired or was released): stale only if the client had already
//!   seen a server-side id, i.e. the session existed. Before that, not found
//!   means "not created yet" (SPARK-48056), not gone.
//! * A response carrying a different `server_side_session_id` than the one
//!   pinned (checked by the client): stale, but the call may have run.
//!
//! The rule is [`verdict`]; it also says whether the failed request can be
//! sent again on a fresh session: only when the server refused it before
//! running anything, and nothing of it was received: a unary call (all are
//! idempotent, and retried anyway), or an execution with no response yet.
//! The latter is the rule by which the reattachable stream itself sends its
//! ExecutePlan again when the server no longer knows the operation
//! (PySpark's, SPARK-48056); after a restart the first ExecutePlan often
//! meets the dead connection, reattaches, gets `SESSION_NOT_FOUND`, is sent
//! again and only then refused with `SESSION_CHANGED`. A running execution
//! (one that delivered a response) is never moved: it keeps its own error
//! (`RESPONSE_ALREADY_RECEIVED`, `OPERATION_NOT_FOUND`, ...).
//!
//! **Renewal** (`SparkSessionBuilder::renew_stale_session(true)`): the
//! session's ids live in a [`Generation`]; a stale generation is replaced,
//! once however many calls race on it, by one with a new client session id
//! and no observed server-side id; the builder's configs are set on it before
//! its first call. Lost with the old server-side session: temporary views
//! and functions, configs set at run time (`config_set`, `SET`), the current
//! database, cached relations and artifacts. Tags are the client's and are
//! kept.

use super::error::SparkError;
use crate::error_classes::{SESSION_CHANGED, SESSION_CLOSED, SESSION_NOT_FOUND};

/// What a failed call says about its session (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing about the session.
    Unrelated,
    /// The session is stale, and the call may have run: the error stands.
    Stale,
    /// The server refused the request because the session is stale, before
    /// running anything: it may be sent again on a fresh session.
    StaleRefused,
}

/// The staleness rule. `error_class` is the failed call's Spark error class;
/// `observed` says whether the session had seen a server-side id; `untouched`
/// whether nothing of the call was received (a unary call, or an execution
/// with no response yet).
pub(super) fn verdict(error_class: Option<&str>, observed: bool, untouched: bool) -> Verdict {
    let stale = match error_class {
        Some(SESSION_CHANGED) => true,
        Some(SESSION_NOT_FOUND | SESSION_CLOSED) => observed,
        _ => false,
    };
    match (stale, untouched) {
        (false, _) => Verdict::Unrelated,
        (true, true) => Verdict::StaleRefused,
        (true, false) => Verdict::Stale,
    }
}

/// The error class the server (or a response's ids) reported: never the
/// client's own [`SparkError::SessionClosed`], which is no news about the
/// server's session.
pub(super) fn reported_class(err: &SparkError) -> Option<&str> {
    match err {
        SparkError::SessionClosed => None,
        other => other.error_class(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::error_classes::OPERATION_NOT_FOUND;
    use crate::session::generation::Renewal;

    #[test]
    fn session_changed_is_stale_and_refused_when_untouched() {
        assert_eq!(
            verdict(Some(SESSION_CHANGED), false, true),
            Verdict::StaleRefused
        );
        assert_eq!(
            verdict(Some(SESSION_CHANGED), true, true),
            Verdict::StaleRefused
        );
        assert_eq!(verdict(Some(SESSION_CHANGED), true, false), Verdict::Stale);
    }

    #[test]
    fn not_found_and_closed_are_stale_only_once_the_session_existed() {
        for class in [SESSION_NOT_FOUND, SESSION_CLOSED] {
            assert_eq!(
                verdict(Some(class), false, true),
                Verdict::Unrelated,
                "{class}"
            );
            assert_eq!(
                verdict(Some(class), true, true),
                Verdict::StaleRefused,
                "{class}"
            );
            assert_eq!(verdict(Some(class), true, false), Verdict::Stale, "{class}");
        }
    }

    #[test]
    fn other_errors_say_nothing_about_the_session() {
        for class in [
            None,
            Some(OPERATION_NOT_FOUND),
            Some("INVALID_HANDLE.OPERATION_ABANDONED"),
            Some("INVALID_HANDLE.FORMAT"),
            Some("OPERATION_CANCELED"),
            Some("PARSE_SYNTAX_ERROR"),
            Some("INVALID_HANDLE.SESSION_CHANGED_NOT"),
        ] {
            assert_eq!(verdict(class, true, true), Verdict::Unrelated, "{class:?}");
        }
    }

    #[test]
    fn only_what_the_server_reported_counts() {
        let changed =
            SparkError::Execution(crate::reattach::ReattachError::ServerSideSessionChanged {
                expected: "a".into(),
                got: "b".into(),
            });
        assert_eq!(reported_class(&changed), Some(SESSION_CHANGED));
        assert_eq!(reported_class(&SparkError::SessionClosed), None);
        let status = tonic::Status::internal("[INVALID_HANDLE.SESSION_CLOSED] gone");
        assert_eq!(reported_class(&status.into()), Some(SESSION_CLOSED));
    }

    #[test]
    fn a_stale_generation_is_renewed_once() {
        let r = Renewal::new("a".into(), true);
        let g = r.current();
        assert!(Arc::ptr_eq(&r.successor(g.clone()), &g), "fresh: kept");
        g.stale.store(true, Ordering::SeqCst);
        let first = r.successor(g.clone());
        let second = r.successor(g.clone());
        assert!(
            Arc::ptr_eq(&first, &second),
            "racing callers share one renewal"
        );
        assert_ne!(first.session_id(), "a");
        assert!(crate::reattach::ids::is_canonical_uuid(first.session_id()));
        assert_eq!(first.observed(), None);
        assert_eq!(r.renewals(), 1);
    }
}
