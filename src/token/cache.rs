//! [`Credentials`]: the session's provider and the token it gave, cached.
//!
//! Every request of a session needs the token, and asking an identity
//! service per request would be slow and rude; asking only at build would
//! outlive the token. The cache asks once, reuses the answer until it
//! expires (a little early) or a call reports it refused, and lets
//! concurrent calls share one provider call. Each token it hands out has a
//! serial number, so a refusal only throws away the token the refused
//! request carried, not a newer one another call already fetched.
//!
//! The cache also remembers the newest token a stream delivered a response
//! with ([`Credentials::answered`]). A refusal of such a token is its
//! expiry, not a provider handing out tokens the server never takes, so it
//! is worth a fresh one even for a call that has not progressed itself:
//! with several queries at once, the others' responses can use up a short
//! token's life before a refreshed query's first response.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderValue;
use tokio::time::Instant;

use super::error::TokenError;
use super::{AccessToken, TokenProvider};

/// The most a token is refreshed before its expiry.
const MAX_EARLY: Duration = Duration::from_secs(60);

/// When to ask for the next token, for one valid `lifetime` from `now`: a
/// tenth of its lifetime early, at most [`MAX_EARLY`].
pub(crate) fn refresh_at(now: Instant, lifetime: Duration) -> Instant {
    let early = (lifetime / 10).min(MAX_EARLY);
    now + lifetime.saturating_sub(early)
}

/// A token in the cache.
struct Cached {
    header: HeaderValue,
    serial: u64,
    /// `None`: no known expiry.
    refresh_at: Option<Instant>,
}

/// The session's provider and its cached token. Cheap to clone; clones
/// share the cache.
#[derive(Clone)]
pub(crate) struct Credentials {
    inner: Arc<Inner>,
}

struct Inner {
    provider: Arc<dyn TokenProvider>,
    cached: Mutex<Option<Cached>>,
    /// Held while the provider is asked: one provider call at a time.
    fetching: tokio::sync::Mutex<()>,
    /// Tokens asked for so far (the serial of the newest).
    fetched: AtomicU64,
    /// The serial of the newest token a response was delivered with.
    answered: AtomicU64,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("provider", &self.name())
            .field("fetched", &self.fetched())
            .finish_non_exhaustive()
    }
}

impl Credentials {
    pub(crate) fn new(provider: Arc<dyn TokenProvider>) -> Self {
        Credentials {
            inner: Arc::new(Inner {
                provider,
                cached: Mutex::new(None),
                fetching: tokio::sync::Mutex::new(()),
                fetched: AtomicU64::new(0),
                answered: AtomicU64::new(0),
            }),
        }
    }

    /// The provider's name.
    pub(crate) fn name(&self) -> &str {
        self.inner.provider.name()
    }

    /// Whether a refused token can be replaced by asking again.
    pub(crate) fn refreshes(&self) -> bool {
        self.inner.provider.refreshes()
    }

    /// How many tokens the provider was asked for.
    pub(crate) fn fetched(&self) -> u64 {
        self.inner.fetched.load(Ordering::SeqCst)
    }

    /// A response was delivered on a request that carried token `serial`.
    pub(crate) fn answered(&self, serial: u64) {
        self.inner.answered.fetch_max(serial, Ordering::SeqCst);
    }

    /// Whether the server has delivered a response on token `serial` or a
    /// newer one: refusing it now is expiry, not a token it never took.
    pub(crate) fn was_answered(&self, serial: u64) -> bool {
        serial != 0 && self.inner.answered.load(Ordering::SeqCst) >= serial
    }

    fn cached(&self) -> std::sync::MutexGuard<'_, Option<Cached>> {
        self.inner.cached.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached token, if it is still good.
    fn usable(&self) -> Option<(HeaderValue, u64)> {
        let cached = self.cached();
        let c = cached.as_ref()?;
        if c.refresh_at.is_some_and(|at| Instant::now() >= at) {
            return None;
        }
        Some((c.header.clone(), c.serial))
    }

    /// The `authorization` header value for the next request and the
    /// token's serial: the cached token, or a fresh one from the provider.
    pub(crate) async fn bearer(&self) -> Result<(HeaderValue, u64), TokenError> {
        if let Some(hit) = self.usable() {
            return Ok(hit);
        }
        let _one_at_a_time = self.inner.fetching.lock().await;
        // Another call may have fetched while this one waited.
        if let Some(hit) = self.usable() {
            return Ok(hit);
        }
        let token = self.inner.provider.token().await.map_err(|e| {
            let name = self.name().to_owned();
            tracing::warn!(provider = name.as_str(), error = %e, "token provider failed");
            TokenError::ProviderFailed {
                provider: name,
                source: Arc::from(e),
            }
        })?;
        let serial = self.inner.fetched.fetch_add(1, Ordering::SeqCst) + 1;
        let header = header_value(&token);
        let refresh_at = token.lifetime().map(|l| refresh_at(Instant::now(), l));
        tracing::debug!(
            provider = self.name(),
            serial,
            lifetime_ms = token.lifetime().map(|l| l.as_millis() as u64),
            "token fetched"
        );
        *self.cached() = Some(Cached {
            header: header.clone(),
            serial,
            refresh_at,
        });
        Ok((header, serial))
    }

    /// The server refused the token with this serial: the next request
    /// asks the provider again, unless a newer token is already cached.
    pub(crate) fn invalidate(&self, serial: u64) {
        let mut cached = self.cached();
        if cached.as_ref().is_some_and(|c| c.serial == serial) {
            *cached = None;
            tracing::info!(
                provider = self.name(),
                serial,
                "token refused by the server; the next call asks for a fresh one"
            );
        }
    }
}

/// `Bearer <token>`, marked sensitive (HPACK never indexes it, `Debug`
/// prints `Sensitive`). A [`Token`](crate::token::Token) is
/// printable ASCII, so the value is always valid.
fn header_value(token: &AccessToken) -> HeaderValue {
    let mut v = HeaderValue::from_str(&format!("Bearer {}", token.token().expose_secret()))
        .unwrap_or_else(|_| HeaderValue::from_static("Bearer"));
    v.set_sensitive(true);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::Token;
    use crate::token::{TokenFuture, provider_fn};

    fn counting(lifetime: Option<Duration>) -> (Credentials, Arc<AtomicU64>) {
        let n = Arc::new(AtomicU64::new(0));
        let calls = n.clone();
        let p = provider_fn("counting", move || {
            let i = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                let t = AccessToken::new(Token::new(format!("tok-{i}"))?);
                Ok(match lifetime {
                    Some(l) => t.expires_in(l),
                    None => t,
                })
            }
        });
        (Credentials::new(Arc::new(p)), n)
    }

    #[test]
    fn refreshed_a_tenth_early_at_most_a_minute() {
        let now = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(refresh_at(now, s(100)), now + s(90));
        assert_eq!(refresh_at(now, s(3600)), now + s(3540));
        assert_eq!(refresh_at(now, Duration::ZERO), now);
    }

    #[tokio::test(start_paused = true)]
    async fn cached_until_a_little_before_the_expiry() {
        let (creds, calls) = counting(Some(Duration::from_secs(100)));
        let (h, first) = creds.bearer().await.unwrap();
        assert!(h.is_sensitive());
        assert_eq!(creds.bearer().await.unwrap().1, first);
        tokio::time::advance(Duration::from_secs(89)).await;
        assert_eq!(creds.bearer().await.unwrap().1, first, "still cached");
        tokio::time::advance(Duration::from_secs(1)).await;
        let (h, second) = creds.bearer().await.unwrap();
        assert_eq!((first, second), (1, 2));
        assert_eq!(h.to_str().unwrap(), "Bearer tok-1");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_refusal_drops_only_the_token_refused() {
        let (creds, calls) = counting(None);
        let (_, s1) = creds.bearer().await.unwrap();
        creds.invalidate(s1);
        let (_, s2) = creds.bearer().await.unwrap();
        creds.invalidate(s1); // a late report about the old token
        assert_eq!(creds.bearer().await.unwrap().1, s2);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert!(!format!("{creds:?}").contains("tok-"), "{creds:?}");
    }

    #[tokio::test]
    async fn concurrent_calls_share_one_provider_call() {
        let (creds, calls) = counting(None);
        let all = futures_join(&creds).await;
        assert!(all.iter().all(|s| *s == 1), "{all:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    async fn futures_join(creds: &Credentials) -> Vec<u64> {
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let c = creds.clone();
            tasks.push(tokio::spawn(async move { c.bearer().await.unwrap().1 }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }

    struct Failing;
    impl TokenProvider for Failing {
        fn token(&self) -> TokenFuture<'_> {
            Box::pin(async { Err("identity service down".into()) })
        }
        fn name(&self) -> &str {
            "failing"
        }
    }

    #[tokio::test]
    async fn a_provider_error_names_the_provider() {
        let creds = Credentials::new(Arc::new(Failing));
        let err = creds.bearer().await.unwrap_err();
        assert_eq!(err.provider(), "failing");
        let text = err.to_string();
        assert!(
            text.contains("`failing`") && text.contains("identity service down"),
            "{text}"
        );
        assert!(std::error::Error::source(&err).is_some());
    }
}
