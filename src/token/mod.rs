//! Bearer tokens that expire: a [`TokenProvider`] the session asks for a
//! token, cached until it expires or the server refuses it.
//!
//! Managed Spark Connect endpoints hand out tokens that live an hour or
//! less, and a long query or a long-lived session outlives its token. With
//! a token fixed at build time, the first call after the expiry fails with
//! `UNAUTHENTICATED` and nothing in the client can recover. A provider
//! (an identity service, a file a sidecar rewrites, a cloud SDK) is asked
//! instead, through an `async` method, so it can do I/O.
//!
//! # What the session does with it
//!
//! * **Cache.** The token is asked for on the first call and reused until
//!   it expires ([`AccessToken::expires_in`], refreshed a tenth of its
//!   lifetime early, at most 60 s early) or the server refuses it.
//!   Concurrent calls wait for one provider call; they never ask twice for
//!   the same refresh.
//! * **Refusal.** `UNAUTHENTICATED` from the server is a refused token.
//!   `PERMISSION_DENIED` is one only when its message plainly concerns the
//!   token (it names a token that expired or is invalid): otherwise it
//!   means the identity may not do this, and a fresh token of the same
//!   identity would not change that. A status with a client-side cause (a
//!   TLS handshake, the provider's own failure) is never a refusal.
//! * **One fresh token, then continue.** A unary call the server refused
//!   is sent again at once with a fresh token (the loop's immediate retry).
//!   A result stream (ExecutePlan, ReattachExecute) *reattaches* from the
//!   last response it delivered with a fresh token; it never re-executes
//!   (an ExecutePlan refused before it ran is sent again: it never ran).
//! * **Bounded.** One refresh per refusal, and a second refusal without
//!   progress in between (a response delivered, a unary call answered)
//!   ends the call with [`TokenError::Refused`], naming the provider and
//!   keeping the server's last status as its `source()`. A provider that
//!   keeps handing out bad tokens therefore ends in that error, never a
//!   loop. Progress of the session's other streams counts for a token
//!   they used: a refused token that some stream delivered a response
//!   with has expired, and is worth a fresh one (with several queries at
//!   once, the others can use up a short-lived token before a refreshed
//!   query's first response). A provider that fails ends the call with
//!   [`TokenError::ProviderFailed`] at once; the provider retries its own
//!   identity service if it wants to.
//! * **Secret.** The token never appears in `Debug`, logs or errors: the
//!   header value is marked sensitive, every wrapper prints the provider's
//!   [`name`](TokenProvider::name) only.
//!
//! The connection string's `token=` (or `SPARK_CONNECT_AUTHENTICATE_TOKEN`)
//! is a provider that never refreshes: the same code path, and a refusal
//! of it is the server's error, as before. A provider given to
//! [`SparkSessionBuilder::token_provider`](crate::session::SparkSessionBuilder::token_provider)
//! replaces it, and, like it, implies TLS to any host but `localhost`.
//!
//! ```
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::time::Duration;
//! use spark_connect_retry::session::SparkSession;
//! use spark_connect_retry::token::Token;
//! use spark_connect_retry::token::{AccessToken, TokenFuture, TokenProvider};
//!
//! /// Hands out `t-0`, `t-1`, ... each valid for 10 minutes.
//! struct Rotating(AtomicU32);
//!
//! impl TokenProvider for Rotating {
//!     fn token(&self) -> TokenFuture<'_> {
//!         Box::pin(async move {
//!             let n = self.0.fetch_add(1, Ordering::SeqCst);
//!             let token = Token::new(format!("t-{n}"))?;
//!             Ok(AccessToken::new(token).expires_in(Duration::from_secs(600)))
//!         })
//!     }
//!     fn name(&self) -> &str {
//!         "rotating"
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let spark = SparkSession::builder()
//!     .remote("sc://localhost:15002")
//!     .token_provider(Rotating(AtomicU32::new(0)))
//!     .build()?; // nothing is asked yet: the first call asks
//! let debug = format!("{spark:?}");
//! assert!(!debug.contains("t-0"));
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::transport::BoxError;

pub(crate) mod cache;
pub(crate) mod call;
mod error;
pub(crate) mod refusal;
mod secret;
pub(crate) mod service;

pub use error::TokenError;
pub use secret::{InvalidToken, Token};

/// The future a [`TokenProvider`] returns.
pub type TokenFuture<'a> = Pin<Box<dyn Future<Output = Result<AccessToken, BoxError>> + Send + 'a>>;

/// Where a session gets its bearer token.
///
/// Asked on the first call, then again only when the token it gave
/// expired or the server refused it (see the [module docs](self)). Object
/// safe: the session keeps it as `Arc<dyn TokenProvider>`. An error it
/// returns ends the call with [`TokenError::ProviderFailed`], which names
/// the provider; it should not contain the token.
pub trait TokenProvider: Send + Sync + 'static {
    /// A token: a fresh one, since the session asks only when it has none
    /// it can use.
    fn token(&self) -> TokenFuture<'_>;

    /// The name errors and logs show for this provider (never a secret).
    /// Default: the type's name.
    fn name(&self) -> &str {
        std::any::type_name::<Self>()
    }

    /// Whether asking again can give another token (default `true`). A
    /// provider that says `false` is asked once, and a refusal of its token
    /// is the server's error, as with the connection string's `token=`.
    fn refreshes(&self) -> bool {
        true
    }
}

/// A shared provider (one identity service for several sessions).
impl<T: TokenProvider + ?Sized> TokenProvider for std::sync::Arc<T> {
    fn token(&self) -> TokenFuture<'_> {
        (**self).token()
    }
    fn name(&self) -> &str {
        (**self).name()
    }
    fn refreshes(&self) -> bool {
        (**self).refreshes()
    }
}

/// A token and how long it is valid.
///
/// ```
/// use std::time::Duration;
/// use spark_connect_retry::token::Token;
/// use spark_connect_retry::token::AccessToken;
///
/// let t = AccessToken::new(Token::new("s3cr3t")?).expires_in(Duration::from_secs(3600));
/// assert_eq!(t.lifetime(), Some(Duration::from_secs(3600)));
/// assert!(!format!("{t:?}").contains("s3cr3t"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct AccessToken {
    token: Token,
    lifetime: Option<Duration>,
}

impl AccessToken {
    /// A token with no known expiry: used until the server refuses it.
    pub fn new(token: Token) -> Self {
        AccessToken {
            token,
            lifetime: None,
        }
    }
    /// Valid for `lifetime` from now (an identity service's `expires_in`);
    /// the session asks for the next one a little before.
    pub fn expires_in(mut self, lifetime: Duration) -> Self {
        self.lifetime = Some(lifetime);
        self
    }
    /// How long the token is valid, from when the provider returned it.
    pub fn lifetime(&self) -> Option<Duration> {
        self.lifetime
    }
    /// The token.
    pub fn token(&self) -> &Token {
        &self.token
    }
}

/// A [`TokenProvider`] from a name and an async closure.
///
/// ```
/// use spark_connect_retry::token::Token;
/// use spark_connect_retry::token::{AccessToken, TokenProvider, provider_fn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let p = provider_fn("vault", || async { Ok(AccessToken::new(Token::new("abc")?)) });
/// assert_eq!(p.name(), "vault");
/// assert_eq!(p.token().await.unwrap().token().expose_secret(), "abc");
/// # }
/// ```
pub fn provider_fn<F, Fut>(name: impl Into<String>, f: F) -> impl TokenProvider
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<AccessToken, BoxError>> + Send + 'static,
{
    FnProvider {
        name: name.into(),
        f,
    }
}

struct FnProvider<F> {
    name: String,
    f: F,
}

impl<F, Fut> TokenProvider for FnProvider<F>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<AccessToken, BoxError>> + Send + 'static,
{
    fn token(&self) -> TokenFuture<'_> {
        Box::pin((self.f)())
    }
    fn name(&self) -> &str {
        &self.name
    }
}

/// The connection string's token: a provider that never refreshes.
pub(crate) struct StaticToken(pub(crate) Token);

impl TokenProvider for StaticToken {
    fn token(&self) -> TokenFuture<'_> {
        let token = AccessToken::new(self.0.clone());
        Box::pin(async move { Ok(token) })
    }
    fn name(&self) -> &str {
        "connection string token"
    }
    fn refreshes(&self) -> bool {
        false
    }
}
