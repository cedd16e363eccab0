//! The identifier rules that the reattachable stream and the session both
//! apply, kept once: which UUIDs a client sends, and which session ids a
//! response may carry.
//!
//! * Ids the client sends (operation ids, `session_id` in a connection
//!   string) must be canonical `8-4-4-4-12` hex UUIDs. Java's
//!   `UUID.fromString` on the server is far more lenient, so the client is the
//!   only place a malformed id can be caught with a clear error.
//! * A response must carry the request's `session_id`, and the first
//!   non-empty `server_side_session_id` is pinned: a different one later
//!   means the server restarted and the session's state is gone. Servers
//!   before Spark 3.5 send none (empty), which is never an error.

/// `8-4-4-4-12` lower- or upper-case hex.
pub(crate) fn is_canonical_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// A response whose session ids break the rules of the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionIdMismatch {
    /// The response's `session_id` is not the request's.
    Session {
        /// The request's session id.
        expected: String,
        /// The response's.
        got: String,
    },
    /// The `server_side_session_id` differs from the one pinned first.
    ServerSide {
        /// The id pinned first.
        expected: String,
        /// The id received.
        got: String,
    },
}

/// Checks a response's `session_id` against the request's, and its
/// `server_side_session_id` against `pinned`, pinning the first non-empty one.
/// `pinned` is left unchanged on a mismatch.
pub(crate) fn check_session_ids(
    expected_session_id: &str,
    pinned: &mut Option<String>,
    session_id: &str,
    server_side_session_id: &str,
) -> Result<(), SessionIdMismatch> {
    if session_id != expected_session_id {
        return Err(SessionIdMismatch::Session {
            expected: expected_session_id.to_owned(),
            got: session_id.to_owned(),
        });
    }
    if server_side_session_id.is_empty() {
        return Ok(());
    }
    match pinned {
        Some(seen) if seen != server_side_session_id => Err(SessionIdMismatch::ServerSide {
            expected: seen.clone(),
            got: server_side_session_id.to_owned(),
        }),
        Some(_) => Ok(()),
        None => {
            *pinned = Some(server_side_session_id.to_owned());
            Ok(())
        }
    }
}

impl From<SessionIdMismatch> for super::ReattachError {
    fn from(m: SessionIdMismatch) -> Self {
        match m {
            SessionIdMismatch::Session { expected, got } => {
                super::ReattachError::SessionMismatch { expected, got }
            }
            SessionIdMismatch::ServerSide { expected, got } => {
                super::ReattachError::ServerSideSessionChanged { expected, got }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "00112233-4455-6677-8899-aabbccddeeff";

    #[test]
    fn canonical_uuids_only() {
        assert!(is_canonical_uuid(A));
        assert!(is_canonical_uuid(&A.to_uppercase()));
        for bad in [
            "",
            "00112233445566778899aabbccddeeff",
            "{00112233-4455-6677-8899-aabbccddeeff}",
            "urn:uuid:00112233-4455-6677-8899-aabbccddeeff",
            "00112233-4455-6677-8899-aabbccddeefg",
            "00112233-4455-6677-8899_aabbccddeeff",
            "0011223-34455-6677-8899-aabbccddeeff",
            "00112233-4455-6677-8899-aabbccddeeé",
        ] {
            assert!(!is_canonical_uuid(bad), "{bad:?}");
        }
    }

    #[test]
    fn session_id_must_match_the_request() {
        let mut pinned = None;
        let err = check_session_ids(A, &mut pinned, "other", "ss1").unwrap_err();
        assert_eq!(
            err,
            SessionIdMismatch::Session {
                expected: A.into(),
                got: "other".into()
            }
        );
        assert_eq!(pinned, None, "nothing pinned from a rejected response");
    }

    #[test]
    fn first_server_side_id_is_pinned_and_empty_ones_ignored() {
        let mut pinned = None;
        check_session_ids(A, &mut pinned, A, "").unwrap();
        assert_eq!(pinned, None);
        check_session_ids(A, &mut pinned, A, "ss1").unwrap();
        assert_eq!(pinned.as_deref(), Some("ss1"));
        check_session_ids(A, &mut pinned, A, "ss1").unwrap();
        check_session_ids(A, &mut pinned, A, "").unwrap();
        let err = check_session_ids(A, &mut pinned, A, "ss2").unwrap_err();
        assert_eq!(
            err,
            SessionIdMismatch::ServerSide {
                expected: "ss1".into(),
                got: "ss2".into()
            }
        );
        assert_eq!(pinned.as_deref(), Some("ss1"), "the pinned id stays");
    }
}
