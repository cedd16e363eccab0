//! Building a tonic [`Channel`] from a [`ConnectionString`].
//!
//! * [`ChannelBuilder`] turns the configuration into an [`Endpoint`]: `http://` or `https://`
//!   (TLS with the platform's native roots, behind the `tls` feature), HTTP/2 keepalive,
//!   a connect timeout, `TCP_NODELAY`, HTTP/2 flow control ([`Http2FlowControl`]), and the
//!   `client_type` as HTTP `user-agent`.
//! * [`AuthInterceptor`] adds `authorization: Bearer <token>` and the connection string's
//!   extra metadata to every request. A [`SparkSession`](crate::session::SparkSession) takes only the
//!   metadata from it and sends the token through its token provider
//!   ([`token`](crate::token)), which refreshes a token that expires.
//! * [`crate::transport::spark_client`] turns such a channel (or any service stack) into
//!   the generated client.
//!
//! # Choices
//!
//! * **Keepalive is on by default** (60 s / 20 s, also without calls), as in PySpark 4.3.
//!   Without it, a black-holed connection hangs a call forever and the dead connection is
//!   reused by the next call. With `grpc_keepalive_enabled=false`, no HTTP/2 keepalive
//!   setting is touched.
//! * **Connect timeout** defaults to 10 s, so that an
//!   unreachable host surfaces as a retryable `UNAVAILABLE` instead of waiting for the OS TCP
//!   timeout. No per-request timeout is set on the endpoint: deadlines are per RPC.
//! * **HTTP/2 windows default to 16 MiB per stream and 32 MiB per connection** (hyper's are
//!   2 MiB and 5 MiB), so a result stream is not held to one small window per round trip on a
//!   long-haul link. The client buffers at most that much, and only when the application
//!   stops reading; see [`Http2FlowControl`].
//! * **`connect_lazy`** is the default way to get a channel: nothing is dialled until the
//!   first call, and connection failures then surface per call, where the retry policy sees
//!   them.
//! * **TLS without the `tls` feature** is a typed error ([`ChannelError::TlsFeatureDisabled`]),
//!   never a silent downgrade to plaintext.
//! * **Headers already present on a request win** over the interceptor's: the interceptor only
//!   fills in missing `authorization` and metadata headers. A layer that refreshes the token
//!   per call can therefore override it.
//! * **Sensitive headers:** the bearer value and every metadata value are marked sensitive, so
//!   HPACK never adds them to its dynamic table and their `Debug` prints `Sensitive`.

use std::fmt;
use std::time::Duration;

use tonic::metadata::{AsciiMetadataValue, KeyAndValueRef, MetadataMap};
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};

pub use super::egress::InvalidProxyUrl;
use tonic::{Request, Status};

#[cfg(feature = "tls")]
use super::tls::{RedactedTls, TlsSettings};
#[cfg(feature = "tls")]
use tonic::transport::ClientTlsConfig;

use super::conn_string::ConnectionString;
use super::flow_control::Http2FlowControl;

/// Default timeout for establishing a TCP (and TLS) connection.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a channel could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// The connection string asks for TLS (`use_ssl=true`, or a token with a host other than
    /// `localhost`), but the crate was built without the `tls` feature.
    #[error(
        "the connection needs TLS, but spark-connect-retry was built without the 'tls' feature"
    )]
    TlsFeatureDisabled,
    /// tonic rejected the endpoint: an invalid URI, or a TLS setup failure such as no native
    /// root certificates being found.
    #[error("invalid Spark Connect endpoint: {0}")]
    Endpoint(#[source] tonic::transport::Error),
    /// An eager [`ChannelBuilder::connect`] could not connect.
    #[error("cannot connect to Spark Connect: {0}")]
    Connect(#[source] tonic::transport::Error),
    /// The [`Http2FlowControl`] given to [`ChannelBuilder::http2_flow_control`] is invalid.
    #[error("invalid HTTP/2 flow control: {0}")]
    FlowControl(&'static str),
    /// The egress proxy URL given to
    /// [`SparkSessionBuilder::egress_proxy`](crate::session::SparkSessionBuilder::egress_proxy)
    /// cannot be used (the error never contains the URL).
    #[error(transparent)]
    EgressProxy(#[from] InvalidProxyUrl),
    /// A private CA or client identity cannot be used (a file missing, not PEM).
    #[cfg(feature = "tls")]
    #[error("invalid TLS configuration: {0}")]
    Tls(#[source] super::tls::TlsConfigError),
}

/// Builds a tonic [`Endpoint`] / [`Channel`] from a [`ConnectionString`].
///
/// ```
/// use spark_connect_retry::session::channel::ChannelBuilder;
/// use spark_connect_retry::session::conn_string::ConnectionString;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let cs = ConnectionString::parse_with_env("sc://localhost:15002", |_| None)?;
/// let endpoint = ChannelBuilder::new(&cs).endpoint()?;
/// assert_eq!(endpoint.uri().to_string(), "http://localhost:15002/");
/// let _channel = ChannelBuilder::new(&cs).connect_lazy()?; // dials on first use
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ChannelBuilder {
    config: ConnectionString,
    connect_timeout: Duration,
    flow_control: Option<Http2FlowControl>,
    /// A bearer token comes from elsewhere than the connection string (a
    /// session's token provider): TLS as if the string had one.
    bearer: bool,
    #[cfg(feature = "tls")]
    tls: Option<RedactedTls>,
    #[cfg(feature = "tls")]
    tls_settings: TlsSettings,
}

impl ChannelBuilder {
    /// Starts from a connection string, with a 10 s connect timeout.
    pub fn new(config: &ConnectionString) -> Self {
        ChannelBuilder {
            config: config.clone(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            flow_control: None,
            bearer: false,
            #[cfg(feature = "tls")]
            tls: None,
            #[cfg(feature = "tls")]
            tls_settings: TlsSettings::default(),
        }
    }

    /// Sets the connection-establishment timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// HTTP/2 flow control, in place of the connection string's (default: its
    /// `grpc_initial_*_window_size` / `grpc_http2_bdp_probe`, else 16 MiB per stream and
    /// 32 MiB per connection). Checked by [`endpoint`](Self::endpoint).
    ///
    /// ```
    /// use spark_connect_retry::session::Http2FlowControl;
    /// use spark_connect_retry::session::channel::{ChannelBuilder, ChannelError};
    /// use spark_connect_retry::session::conn_string::ConnectionString;
    ///
    /// let cs = ConnectionString::parse_with_env("sc://localhost", |_| None)?;
    /// let bad = Http2FlowControl::Fixed { stream_window: 1024, connection_window: 1 << 20 };
    /// let err = ChannelBuilder::new(&cs).http2_flow_control(bad).endpoint().unwrap_err();
    /// assert!(matches!(err, ChannelError::FlowControl(_)));
    /// assert!(ChannelBuilder::new(&cs).http2_flow_control(Http2FlowControl::Adaptive).endpoint().is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn http2_flow_control(mut self, flow_control: Http2FlowControl) -> Self {
        self.flow_control = Some(flow_control);
        self
    }

    /// Replaces the default TLS configuration (native roots) with `tls`, e.g. to trust a
    /// private CA. Only used when the connection string asks for TLS.
    #[cfg(feature = "tls")]
    pub fn tls_config(mut self, tls: ClientTlsConfig) -> Self {
        self.tls = Some(RedactedTls(tls));
        self
    }

    /// A bearer token will be sent though the connection string has none
    /// (a session's token provider): TLS to any host but `localhost`, as
    /// for a token in the string.
    pub(crate) fn bearer_token(mut self, bearer: bool) -> Self {
        self.bearer = bearer;
        self
    }

    /// Private CAs and a client identity besides the connection string's
    /// `tls_*` files (the session builder's).
    #[cfg(feature = "tls")]
    pub(crate) fn tls_settings(mut self, settings: TlsSettings) -> Self {
        self.tls_settings = settings;
        self
    }

    /// Builds the endpoint without connecting.
    pub fn endpoint(&self) -> Result<Endpoint, ChannelError> {
        let cs = &self.config;
        let scheme = if cs.use_tls() || self.tls_requested() {
            "https"
        } else {
            "http"
        };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", cs.authority()))
            .map_err(ChannelError::Endpoint)?
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true);
        let flow_control = self.flow_control.unwrap_or(cs.http2_flow_control());
        flow_control.validate().map_err(ChannelError::FlowControl)?;
        endpoint = flow_control.apply(endpoint);

        let client_type = cs.client_type();
        // tonic panics later on a user agent it cannot extend, so only printable ASCII is
        // passed on; `client_type` still travels in every request body regardless.
        if client_type.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            endpoint = endpoint
                .user_agent(client_type)
                .map_err(ChannelError::Endpoint)?;
        }

        let keepalive = cs.keepalive();
        if keepalive.enabled {
            endpoint = endpoint
                .http2_keep_alive_interval(keepalive.time)
                .keep_alive_timeout(keepalive.timeout)
                .keep_alive_while_idle(keepalive.without_calls);
        }

        if cs.use_tls() || self.tls_requested() {
            endpoint = self.apply_tls(endpoint)?;
        }
        Ok(endpoint)
    }

    /// TLS asked for besides the connection string: a CA or identity given
    /// to the session builder.
    fn tls_requested(&self) -> bool {
        if self.bearer && self.config.host() != "localhost" {
            return true;
        }
        #[cfg(feature = "tls")]
        return self.tls_settings.is_set();
        #[cfg(not(feature = "tls"))]
        false
    }

    #[cfg(feature = "tls")]
    fn apply_tls(&self, endpoint: Endpoint) -> Result<Endpoint, ChannelError> {
        let tls = match &self.tls {
            Some(RedactedTls(tls)) => tls.clone(),
            None => {
                let files = self.config.tls_files();
                TlsSettings::from_files(
                    files.ca.as_deref(),
                    files.cert.as_deref(),
                    files.key.as_deref(),
                )
                .map(|s| s.merged(&self.tls_settings))
                .and_then(|s| s.client_config())
                .map_err(ChannelError::Tls)?
            }
        };
        endpoint.tls_config(tls).map_err(ChannelError::Endpoint)
    }

    #[cfg(not(feature = "tls"))]
    fn apply_tls(&self, _endpoint: Endpoint) -> Result<Endpoint, ChannelError> {
        Err(ChannelError::TlsFeatureDisabled)
    }

    /// Builds a channel that connects on first use (and reconnects by itself afterwards).
    /// Must be called inside a tokio runtime.
    pub fn connect_lazy(&self) -> Result<Channel, ChannelError> {
        Ok(self.endpoint()?.connect_lazy())
    }

    /// Builds a channel and connects it now.
    pub async fn connect(&self) -> Result<Channel, ChannelError> {
        self.endpoint()?
            .connect()
            .await
            .map_err(ChannelError::Connect)
    }
}

/// The `authorization` header, or why it cannot be sent.
#[derive(Clone)]
enum Bearer {
    None,
    Value(AsciiMetadataValue),
    /// Cannot happen for a [`Token`](crate::token::Token) (it is validated printable ASCII);
    /// kept so that a bug fails calls instead of silently sending them unauthenticated.
    Invalid,
}

/// A tonic [`Interceptor`] that adds `authorization: Bearer <token>` (when there is a token)
/// and the connection string's extra metadata to every request.
///
/// Headers the request already carries are left alone. The bearer value is marked sensitive.
///
/// ```
/// use spark_connect_retry::session::channel::AuthInterceptor;
/// use spark_connect_retry::session::conn_string::ConnectionString;
/// use tonic::service::Interceptor;
///
/// let cs = ConnectionString::parse_with_env("sc://localhost/;token=t0k;x-team=blue", |_| None)?;
/// let mut auth = AuthInterceptor::new(&cs);
/// let req = auth.call(tonic::Request::new(())).unwrap();
/// assert_eq!(req.metadata().get("authorization").unwrap(), "Bearer t0k");
/// assert_eq!(req.metadata().get("x-team").unwrap(), "blue");
/// assert!(!format!("{auth:?}").contains("t0k"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct AuthInterceptor {
    bearer: Bearer,
    metadata: MetadataMap,
}

impl AuthInterceptor {
    /// Takes the token and metadata of `config`.
    pub fn new(config: &ConnectionString) -> Self {
        let bearer = match config.token() {
            None => Bearer::None,
            Some(token) => {
                match AsciiMetadataValue::try_from(format!("Bearer {}", token.expose_secret())) {
                    Ok(mut v) => {
                        v.set_sensitive(true);
                        Bearer::Value(v)
                    }
                    Err(_) => Bearer::Invalid,
                }
            }
        };
        AuthInterceptor {
            bearer,
            metadata: config.metadata().clone(),
        }
    }
}

impl AuthInterceptor {
    /// The metadata of `config` only: a session sends its token through
    /// its token provider (the string's token is one).
    pub(crate) fn metadata_only(config: &ConnectionString) -> Self {
        AuthInterceptor {
            bearer: Bearer::None,
            metadata: config.metadata().clone(),
        }
    }
}

impl fmt::Debug for AuthInterceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bearer = match self.bearer {
            Bearer::None => "none",
            Bearer::Value(_) | Bearer::Invalid => "<redacted>",
        };
        let keys = super::conn_string::metadata_keys(&self.metadata);
        f.debug_struct("AuthInterceptor")
            .field("bearer", &bearer)
            .field("metadata_keys", &keys)
            .finish()
    }
}

impl Interceptor for AuthInterceptor {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let headers = request.metadata_mut();
        for entry in self.metadata.iter() {
            match entry {
                KeyAndValueRef::Ascii(k, v) => {
                    if !headers.contains_key(k) {
                        headers.insert(k.clone(), v.clone());
                    }
                }
                KeyAndValueRef::Binary(k, v) => {
                    if !headers.contains_key(k) {
                        headers.insert_bin(k.clone(), v.clone());
                    }
                }
            }
        }
        match &self.bearer {
            Bearer::None => {}
            Bearer::Value(v) => {
                if !headers.contains_key("authorization") {
                    headers.insert("authorization", v.clone());
                }
            }
            Bearer::Invalid => {
                return Err(Status::unauthenticated(
                    "the configured token cannot be sent as a header",
                ));
            }
        }
        Ok(request)
    }
}
