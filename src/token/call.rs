//! [`CallToken`]: one unary call's use of the session's credentials, under
//! the retry loop.
//!
//! Each attempt's request carries a [`TokenUsed`] slot; when the server
//! refuses the token, [`CallToken::judge`] drops exactly that token and
//! asks the loop for an immediate retry (a fresh token, no backoff, no
//! policy budget), once. A second refusal ends the call with the status
//! marked as a [`TokenError::Refused`](super::TokenError::Refused).

use std::sync::Mutex;

use tonic::Status;

use super::cache::Credentials;
use super::refusal::{RefreshBudget, is_refusal, refused};
use super::service::TokenUsed;
use crate::retrying::AttemptError;

/// One call's refresh budget and the credentials it refreshes.
#[derive(Debug)]
pub(crate) struct CallToken<'a> {
    credentials: Option<&'a Credentials>,
    budget: Mutex<RefreshBudget>,
}

impl<'a> CallToken<'a> {
    pub(crate) fn new(credentials: Option<&'a Credentials>) -> Self {
        CallToken {
            credentials,
            budget: Mutex::default(),
        }
    }

    /// A slot for one attempt: put it in the request's extensions.
    pub(crate) fn slot(&self) -> TokenUsed {
        TokenUsed::default()
    }

    /// What the loop sees of a failed attempt whose request carried `used`.
    pub(crate) fn judge<E>(&self, status: Status, used: &TokenUsed) -> AttemptError<E> {
        let Some(credentials) = self.credentials else {
            return AttemptError::Status(status);
        };
        if !credentials.refreshes() || used.serial() == 0 || !is_refusal(&status) {
            return AttemptError::Status(status);
        }
        let mut budget = self.budget.lock().unwrap_or_else(|e| e.into_inner());
        if credentials.was_answered(used.serial()) {
            budget.progress();
        }
        if budget.try_refresh() {
            credentials.invalidate(used.serial());
            return AttemptError::RetryNow(Some(status));
        }
        AttemptError::Status(refused(status, credentials.name(), budget.used()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::token::Token;
    use crate::token::{AccessToken, StaticToken, provider_fn, refusal::token_error};

    /// One fresh token per refusal, and a second refusal without progress
    /// ends the call marked; unless the refused token delivered a response
    /// elsewhere (another stream of the session): it expired, and is worth
    /// a fresh one.
    #[tokio::test]
    async fn one_fresh_token_then_a_marked_refusal_unless_the_token_worked() {
        for answered_elsewhere in [false, true] {
            let p = provider_fn("p", || async { Ok(AccessToken::new(Token::new("t")?)) });
            let creds = Credentials::new(Arc::new(p));
            let call = CallToken::new(Some(&creds));
            let used = call.slot();
            used.set_for_test(creds.bearer().await.unwrap().1);
            let first: AttemptError = call.judge(Status::unauthenticated("expired"), &used);
            assert!(matches!(first, AttemptError::RetryNow(Some(_))));
            let fresh = creds.bearer().await.unwrap().1;
            used.set_for_test(fresh);
            assert_eq!(creds.fetched(), 2, "the refused token was dropped");
            if answered_elsewhere {
                creds.answered(fresh);
                let second: AttemptError = call.judge(Status::unauthenticated("expired"), &used);
                assert!(matches!(second, AttemptError::RetryNow(Some(_))));
                // A third token that nobody was answered with.
                used.set_for_test(creds.bearer().await.unwrap().1);
                assert_eq!(creds.fetched(), 3);
            }
            let AttemptError::Status(last) =
                call.judge::<std::convert::Infallible>(Status::unauthenticated("expired"), &used)
            else {
                panic!("a refusal of a fresh token that never worked is the end")
            };
            assert_eq!(token_error(&last).unwrap().provider(), "p");
            // Other failures pass through.
            let other: AttemptError = call.judge(Status::unavailable("down"), &used);
            assert!(matches!(other, AttemptError::Status(s) if token_error(&s).is_none()));
        }
    }

    #[tokio::test]
    async fn a_static_token_is_never_refreshed() {
        let creds = Credentials::new(Arc::new(StaticToken(Token::new("t").unwrap())));
        let call = CallToken::new(Some(&creds));
        let used = call.slot();
        used.set_for_test(creds.bearer().await.unwrap().1);
        let e: AttemptError = call.judge(Status::unauthenticated("no"), &used);
        assert!(matches!(e, AttemptError::Status(s) if token_error(&s).is_none()));
    }
}
