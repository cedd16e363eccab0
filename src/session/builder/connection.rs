//! How a session reaches the server: TLS, tokens, a connector, an
//! egress proxy, or a whole channel of the caller's. Setters of
//! [`SparkSessionBuilder`], kept apart from the session settings in
//! `builder.rs`; the channel itself is made there, in `build`.

use std::sync::Arc;

use super::SparkSessionBuilder;
use crate::connect::egress::EgressProxy;
use crate::connector::Connector;
use crate::token::TokenProvider;
use crate::token::cache::Credentials;
use crate::transport::GrpcChannel;

impl SparkSessionBuilder {
    /// Trust this CA (PEM, one or more certificates) for the server's
    /// certificate, instead of the platform's roots; turns TLS on. May be
    /// given several times, and beside the connection string's
    /// `tls_ca_file`. Checked at [`build`](Self::build). See
    /// [`tls`](crate::session::tls).
    ///
    /// ```
    /// use spark_connect_retry::session::{SparkError, SparkSession};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let err = SparkSession::builder().remote("sc://localhost").tls_ca_pem("not a PEM").build();
    /// assert!(matches!(err, Err(SparkError::Channel(_))));
    /// assert!(err.unwrap_err().to_string().contains("CA"));
    /// # }
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.add_ca_pem(pem.into());
        self
    }
    /// [`tls_ca_pem`](Self::tls_ca_pem) from a file, read at [`build`](Self::build).
    #[cfg(feature = "tls")]
    pub fn tls_ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls.add_ca_file(path.into());
        self
    }
    /// Present this client certificate and key (PEM) when the server asks
    /// (mutual TLS); turns TLS on. The key never shows in `Debug`, logs or
    /// errors. Replaces the connection string's `tls_cert_file` / `tls_key_file`.
    #[cfg(feature = "tls")]
    pub fn tls_client_identity_pem(
        mut self,
        cert: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.identity_pem(cert.into(), key.into());
        self
    }
    /// [`tls_client_identity_pem`](Self::tls_client_identity_pem) from files,
    /// read at [`build`](Self::build).
    #[cfg(feature = "tls")]
    pub fn tls_client_identity_files(
        mut self,
        cert: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.tls.identity_files(cert.into(), key.into());
        self
    }
    /// Ask `provider` for the bearer token, instead of taking the
    /// connection string's `token=` once: cached until it expires or the
    /// server refuses it, then asked again; a call or a result stream
    /// refused for its token continues with a fresh one, once (see
    /// [`token`](crate::token)). Like a token in the connection string, it
    /// implies TLS to any host but `localhost`. Replaces the connection
    /// string's token.
    ///
    /// ```
    /// use spark_connect_retry::session::SparkSession;
    /// use spark_connect_retry::token::Token;
    /// use spark_connect_retry::token::{AccessToken, provider_fn};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), spark_connect_retry::session::SparkError> {
    /// let builder = SparkSession::builder()
    ///     .remote("sc://localhost:15002")
    ///     .token_provider(provider_fn("identity-service", || async {
    ///         Ok(AccessToken::new(Token::new("s3cr3t")?))
    ///     }));
    /// let debug = format!("{builder:?}");
    /// assert!(debug.contains("identity-service") && !debug.contains("s3cr3t"));
    /// let spark = builder.build()?;
    /// assert!(!format!("{spark:?}").contains("s3cr3t"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn token_provider(mut self, provider: impl TokenProvider) -> Self {
        self.credentials = Some(Credentials::new(Arc::new(provider)));
        self
    }
    /// Dial every connection of the session's channel with `connector`
    /// instead of TCP to the connection string's host: a Unix socket, an
    /// SSH tunnel, an egress proxy, a simulated network. Everything else
    /// the connection string says (TLS, token, HTTP/2 settings, the
    /// `:authority`) still applies; TLS runs over the stream the connector
    /// yields. Ignored when [`channel`](Self::channel) is set.
    ///
    /// ```
    /// use spark_connect_retry::connector::Connector;
    /// use spark_connect_retry::session::SparkSession;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let socket = "/run/spark-connect.sock";
    /// let connector = Connector::new(tower::service_fn(move |_: http::Uri| async move {
    ///     tokio::net::UnixStream::connect(socket).await.map(hyper_util::rt::TokioIo::new)
    /// }));
    /// let spark = SparkSession::builder()
    ///     .remote("sc://spark.internal:15002")
    ///     .connector(connector)
    ///     .build()?; // nothing is dialled until the first RPC
    /// # let _ = spark;
    /// # Ok(())
    /// # }
    /// ```
    pub fn connector(mut self, connector: Connector) -> Self {
        self.connector = Some(connector);
        self
    }

    /// Connect through this HTTP CONNECT proxy (`http://[user:password@]host:port`),
    /// whatever `HTTPS_PROXY` and `NO_PROXY` say. By default the session
    /// honours them: `HTTPS_PROXY` / `https_proxy` (else `ALL_PROXY`), unless
    /// `NO_PROXY` names the server's host (curl's rules). The tunnel carries
    /// the connection whether or not it then speaks TLS. Credentials in the
    /// URL go out as `Proxy-Authorization: Basic` and never appear in
    /// `Debug`, logs or errors; a bad URL fails [`build`](Self::build) with
    /// [`ChannelError::EgressProxy`](crate::session::channel::ChannelError::EgressProxy).
    /// A proxy that refuses or dies is a failed connection, retried under
    /// the policy like any other. Ignored when [`connector`](Self::connector)
    /// or [`channel`](Self::channel) is set.
    ///
    /// ```
    /// use spark_connect_retry::session::SparkSession;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let builder = SparkSession::builder()
    ///     .remote("sc://spark.internal:15002")
    ///     .egress_proxy("http://alice:s3cr3t@proxy.internal:3128");
    /// assert!(!format!("{builder:?}").contains("s3cr3t"));
    /// let err = SparkSession::builder()
    ///     .remote("sc://spark.internal:15002")
    ///     .egress_proxy("https://alice:s3cr3t@proxy.internal:3128")
    ///     .build()
    ///     .unwrap_err()
    ///     .to_string();
    /// assert_eq!(err, "invalid egress proxy URL: the scheme must be http (an HTTP CONNECT proxy)");
    /// # }
    /// ```
    pub fn egress_proxy(mut self, url: impl Into<String>) -> Self {
        self.egress = EgressProxy::Url(url.into());
        self
    }

    /// Connect straight to the server, whatever `HTTPS_PROXY` says.
    pub fn no_egress_proxy(mut self) -> Self {
        self.egress = EgressProxy::Direct;
        self
    }

    /// Send RPCs through this service stack instead of a channel built from
    /// the connection string (for example a channel wrapped in the retry
    /// layer, or a test proxy). Token and metadata headers are still added.
    pub fn channel(mut self, channel: GrpcChannel) -> Self {
        self.channel = Some(channel);
        self
    }
}
