//! Tokens that expire: which bearer token the server accepts, and when the
//! next one takes over.
//!
//! A client that refreshes tokens can only be tested against a server
//! whose tokens run out, at a moment the test controls. With a
//! [`TokenRotation`] the server accepts exactly one token at a time,
//! `<prefix><k>`, starting at `k = 0`; the next one takes over after a
//! number of accepted calls, after a number of result responses sent
//! (exact, whatever the client's timing), after a time (tokio's clock, so
//! paused time moves it), or when the test calls
//! [`TestServer::rotate_token`](crate::TestServer::rotate_token). Any other
//! token is answered `UNAUTHENTICATED`, and a result stream opened with a
//! token that has since been replaced fails `UNAUTHENTICATED` before its
//! next response (as a gateway cutting an expired session would). A test
//! provider mirrors the scheme with [`TokenRotation::token`].
//!
//! The answers never contain a token.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tonic::Status;
use tonic::metadata::MetadataMap;

/// Which tokens the embedded server accepts, and when they rotate.
///
/// ```
/// use std::time::Duration;
/// use spark_connect_testkit::TokenRotation;
///
/// let r = TokenRotation::new("tok-").every_calls(100).every(Duration::from_secs(60));
/// assert_eq!(r.token(0), "tok-0");
/// assert_eq!(r.token(3), "tok-3");
/// ```
#[derive(Debug, Clone)]
pub struct TokenRotation {
    prefix: String,
    calls: Option<u64>,
    responses: Option<u64>,
    lifetime: Option<Duration>,
}

impl TokenRotation {
    /// Tokens `<prefix>0`, `<prefix>1`, ..., replaced only by
    /// [`TestServer::rotate_token`](crate::TestServer::rotate_token) unless
    /// a limit below is set.
    pub fn new(prefix: impl Into<String>) -> Self {
        TokenRotation {
            prefix: prefix.into(),
            calls: None,
            responses: None,
            lifetime: None,
        }
    }
    /// Each token is valid for `n` accepted calls (at least 1).
    pub fn every_calls(mut self, n: u64) -> Self {
        self.calls = Some(n.max(1));
        self
    }
    /// Each token is valid for `n` ExecutePlan / ReattachExecute responses
    /// sent (at least 1): the stream that sends the `n`-th fails
    /// `UNAUTHENTICATED` before its next response, wherever the client is.
    pub fn every_responses(mut self, n: u64) -> Self {
        self.responses = Some(n.max(1));
        self
    }
    /// Each token is valid for `lifetime` from when the previous one
    /// expired (the first from the server's start).
    pub fn every(mut self, lifetime: Duration) -> Self {
        self.lifetime = Some(lifetime);
        self
    }
    /// The `k`-th token: what a test provider hands out.
    pub fn token(&self, k: u64) -> String {
        format!("{}{k}", self.prefix)
    }
    /// Which token `value` (an `authorization` header) names, if any.
    fn index(&self, value: &str) -> Option<u64> {
        value
            .strip_prefix("Bearer ")?
            .strip_prefix(self.prefix.as_str())?
            .parse()
            .ok()
    }
}

/// The server's side of a rotation: the current token and its use.
#[derive(Debug)]
pub(super) struct Tokens {
    rotation: TokenRotation,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    current: u64,
    calls: u64,
    responses: u64,
    since: Instant,
    refused: u64,
}

impl Tokens {
    pub(super) fn new(rotation: TokenRotation) -> Self {
        Tokens {
            rotation,
            state: Mutex::new(State {
                current: 0,
                calls: 0,
                responses: 0,
                since: Instant::now(),
                refused: 0,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current token's index, after the time-based rotations due.
    fn current(&self, st: &mut State) -> u64 {
        if let Some(life) = self.rotation.lifetime.filter(|l| !l.is_zero()) {
            while Instant::now().saturating_duration_since(st.since) >= life {
                st.since += life;
                next(st);
            }
        }
        st.current
    }

    /// Checks a call's `authorization`: `Ok(k)` for the current token
    /// (the call is counted against it), else `UNAUTHENTICATED`.
    pub(super) fn check(&self, metadata: &MetadataMap) -> Result<u64, Status> {
        let mut st = self.state();
        let current = self.current(&mut st);
        let given = metadata
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(|v| self.rotation.index(v));
        let k = match given {
            Some(Some(k)) if k == current => k,
            refused => {
                st.refused += 1;
                return Err(match refused {
                    None => Status::unauthenticated("No authentication token provided"),
                    Some(Some(k)) if k < current => Status::unauthenticated("token expired"),
                    Some(_) => Status::unauthenticated("Invalid authentication token"),
                });
            }
        };
        st.calls += 1;
        if self.rotation.calls.is_some_and(|n| st.calls >= n) {
            next(&mut st);
        }
        Ok(k)
    }

    /// The token index a call's metadata names (already checked).
    pub(super) fn index(&self, metadata: &MetadataMap) -> Option<u64> {
        let v = metadata.get("authorization")?.to_str().ok()?;
        self.rotation.index(v)
    }

    /// A stream opened with token `k` is about to send a response: may
    /// it? Counts the response against the token, or a refusal.
    pub(super) fn may_send(&self, k: u64) -> bool {
        let mut st = self.state();
        if self.current(&mut st) != k {
            st.refused += 1;
            return false;
        }
        st.responses += 1;
        if self.rotation.responses.is_some_and(|n| st.responses >= n) {
            next(&mut st);
        }
        true
    }

    /// Replaces the current token by the next; returns the new index.
    pub(super) fn rotate(&self) -> u64 {
        let mut st = self.state();
        self.current(&mut st);
        next(&mut st);
        st.since = Instant::now();
        st.current
    }

    /// The current token's index.
    pub(super) fn current_index(&self) -> u64 {
        let mut st = self.state();
        self.current(&mut st)
    }

    /// Calls and streams refused for their token so far.
    pub(super) fn refused(&self) -> u64 {
        self.state().refused
    }
}

/// The next token takes over: the counts start again.
fn next(st: &mut State) {
    st.current += 1;
    st.calls = 0;
    st.responses = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(t: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("authorization", format!("Bearer {t}").parse().unwrap());
        m
    }

    #[test]
    fn each_token_for_n_calls() {
        let tokens = Tokens::new(TokenRotation::new("t").every_calls(2));
        assert_eq!(tokens.check(&bearer("t0")).unwrap(), 0);
        assert_eq!(tokens.check(&bearer("t0")).unwrap(), 0);
        let e = tokens.check(&bearer("t0")).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert_eq!(e.message(), "token expired");
        assert!(!tokens.may_send(0));
        assert_eq!(tokens.check(&bearer("t1")).unwrap(), 1);
        assert!(tokens.check(&bearer("t9")).is_err());
        assert!(tokens.check(&MetadataMap::new()).is_err());
        assert_eq!(tokens.refused(), 4);
    }

    #[test]
    fn each_token_for_n_responses() {
        let tokens = Tokens::new(TokenRotation::new("t").every_responses(2));
        assert_eq!(tokens.check(&bearer("t0")).unwrap(), 0);
        assert!(tokens.may_send(0) && tokens.may_send(0));
        assert!(!tokens.may_send(0), "the third response is refused");
        assert_eq!(tokens.current_index(), 1);
        assert!(tokens.may_send(1));
    }

    #[tokio::test(start_paused = true)]
    async fn each_token_for_a_time() {
        let tokens = Tokens::new(TokenRotation::new("t").every(Duration::from_secs(10)));
        assert!(tokens.check(&bearer("t0")).is_ok());
        tokio::time::advance(Duration::from_secs(25)).await;
        assert_eq!(tokens.current_index(), 2);
        assert!(tokens.check(&bearer("t1")).is_err());
        assert!(tokens.check(&bearer("t2")).is_ok());
        assert_eq!(tokens.rotate(), 3);
    }
}
