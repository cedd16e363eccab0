//! The pure rules of a refused token: what counts as a refusal, how many
//! fresh tokens a call may ask for, and how a give-up is marked on the
//! status so the session can turn it into a [`TokenError`].
//!
//! A refusal is worth one fresh token, not more: a provider that keeps
//! handing out tokens the server refuses would otherwise be asked forever
//! (the loop noted in the review of PySpark's SPARK-57425).

use std::error::Error as _;
use std::sync::Arc;

use tonic::{Code, Status};

use super::error::TokenError;

/// Fresh tokens a call may ask for without progress in between.
pub(crate) const MAX_REFRESHES: u32 = 1;

/// Whether the server refused the credentials of the request that got
/// `status`: `UNAUTHENTICATED`, or `PERMISSION_DENIED` whose message names
/// a token that expired or is invalid. A status with a client-side cause
/// (a TLS handshake, the provider's failure, a transport error) never is.
pub(crate) fn is_refusal(status: &Status) -> bool {
    if status.source().is_some() {
        return false;
    }
    match status.code() {
        Code::Unauthenticated => true,
        Code::PermissionDenied => names_the_token(status.message()),
        _ => false,
    }
}

/// "token expired", "Invalid token", "the access token has expired"...
fn names_the_token(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("token") && (m.contains("expired") || m.contains("invalid"))
}

/// The fresh tokens one call (or one stream, between deliveries) asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RefreshBudget {
    used: u32,
}

impl RefreshBudget {
    /// A refusal: `true` if a fresh token may be asked for (and counts it).
    pub(crate) fn try_refresh(&mut self) -> bool {
        if self.used >= MAX_REFRESHES {
            return false;
        }
        self.used += 1;
        true
    }
    /// The server accepted a token and made progress: the budget is whole again.
    pub(crate) fn progress(&mut self) {
        self.used = 0;
    }
    /// Fresh tokens asked for since the last progress.
    pub(crate) fn used(&self) -> u32 {
        self.used
    }
}

/// `status` marked as the refusal a call gave up on: a
/// [`TokenError::Refused`] in its source chain, found by [`token_error`].
pub(crate) fn refused(status: Status, provider: &str, refreshes: u32) -> Status {
    let err = TokenError::Refused {
        provider: provider.to_owned(),
        refreshes,
        rpc: None,
        target: None,
        status: status.clone(),
    };
    let mut status = status;
    status.set_source(Arc::new(err));
    status
}

/// A status carrying `err` (the provider's failure): `UNAUTHENTICATED`,
/// which no retry policy retries, with the error as its source.
pub(crate) fn provider_failed(err: TokenError) -> Status {
    let mut status = Status::unauthenticated(err.to_string());
    status.set_source(Arc::new(err));
    status
}

/// The token error a status carries, if any.
pub(crate) fn token_error(status: &Status) -> Option<&TokenError> {
    crate::status::find_source(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_counts_as_a_refusal() {
        assert!(is_refusal(&Status::unauthenticated(
            "Invalid authentication token"
        )));
        assert!(is_refusal(&Status::unauthenticated("")));
        assert!(is_refusal(&Status::permission_denied(
            "Token expired at 12:00"
        )));
        assert!(is_refusal(&Status::permission_denied(
            "invalid access token"
        )));
        assert!(!is_refusal(&Status::permission_denied(
            "User bob may not SELECT from t"
        )));
        assert!(!is_refusal(&Status::permission_denied("token lacks scope")));
        assert!(!is_refusal(&Status::unavailable("token expired")));
        // A client-side cause: a TLS failure or the provider, never the server's word.
        let mut tls = Status::unauthenticated("certificate unknown");
        tls.set_source(Arc::new(std::io::Error::other("handshake")));
        assert!(!is_refusal(&tls));
    }

    #[test]
    fn one_refresh_until_progress() {
        let mut b = RefreshBudget::default();
        assert!(b.try_refresh());
        assert!(
            !b.try_refresh(),
            "a second refusal without progress ends it"
        );
        assert_eq!(b.used(), 1);
        b.progress();
        assert!(b.try_refresh());
    }

    #[test]
    fn marks_are_found_and_name_the_provider() {
        let s = refused(Status::unauthenticated("expired"), "vault", 1);
        let e = token_error(&s).expect("marked");
        assert_eq!(e.provider(), "vault");
        assert!(!is_refusal(&s), "a marked status is not refused again");
        assert!(token_error(&Status::unauthenticated("x")).is_none());
        let failed = provider_failed(TokenError::ProviderFailed {
            provider: "vault".into(),
            source: Arc::new(std::io::Error::other("down")),
        });
        assert_eq!(failed.code(), Code::Unauthenticated);
        assert!(matches!(
            token_error(&failed),
            Some(TokenError::ProviderFailed { .. })
        ));
    }
}
