//! Parsing of Spark Connect `sc://` connection strings.
//!
//! A connection string has the form `sc://host[:port][/][;key=value]*`, for example
//! `sc://spark.example.com:443/;use_ssl=true;token=abc;x-tenant=blue`.
//! [`ConnectionString::parse`] turns it into a validated configuration: every documented
//! parameter is checked here, once, so that building the channel
//! ([`crate::session::channel`]) cannot fail on user input later.
//!
//! # Parameters
//!
//! | key | default | accepted values |
//! |---|---|---|
//! | host (authority) | required | DNS name, IPv4, or bracketed IPv6 (`[::1]`) |
//! | port (authority) | `15002` | `1..=65535` |
//! | `token` | env `SPARK_CONNECT_AUTHENTICATE_TOKEN`, else none | non-empty printable ASCII |
//! | `use_ssl` | `false` | `true` / `false`, any case |
//! | `user_id` | env `SPARK_USER`, else `USER`, else none | non-empty |
//! | `user_agent` | env `SPARK_CONNECT_USER_AGENT`, else `_SPARK_CONNECT_RUST` | non-empty, ≤ 2048 chars once percent-encoded |
//! | `session_id` | a random UUID v4, drawn per session built | canonical `8-4-4-4-12` hex UUID |
//! | `grpc_max_message_size` | `134217728` (128 MiB) | `1..=4294967295` |
//! | `grpc_keepalive_enabled` | `true` | `true` / `false`, any case |
//! | `grpc_keepalive_time_ms` | `60000` | positive integer |
//! | `grpc_keepalive_timeout_ms` | `20000` | positive integer |
//! | `grpc_keepalive_without_calls` | `true` | `true` / `false`, any case |
//! | `grpc_initial_stream_window_size` | `16777216` (16 MiB) | `65535..=2147483647` |
//! | `grpc_initial_connection_window_size` | `33554432` (32 MiB) | `65535..=2147483647`, at least the stream window |
//! | `grpc_http2_bdp_probe` | `false` | `true` / `false`, any case; `true` (hyper's adaptive window) excludes both window sizes |
//! | `tls_ca_file` | none (the platform's roots) | a PEM file of CA certificates to trust instead; turns TLS on |
//! | `result_compression` | none (the server's default) | `none` / `zstd` / `lz4`, any case: sets `spark.sql.execution.arrow.compression.codec` when the session starts ([`ResultCompression`](crate::session::ResultCompression)) |
//! | `result_batch_rows` | `100000` ([`ResultBatchRows::DEFAULT`](crate::session::ResultBatchRows::DEFAULT)) | `server` (set nothing: the server's value) or a row count in `0..=2147483647`: sets `spark.sql.execution.arrow.maxRecordsPerBatch` when the session starts ([`ResultBatchRows`](crate::session::ResultBatchRows)) |
//! | `tls_cert_file`, `tls_key_file` | none | a PEM client certificate and its key (mutual TLS), both or neither; turns TLS on |
//! | anything else | — | sent as gRPC metadata on every call |
//!
//! # Parsing rules
//!
//! * The string must start with `sc://` (lower case, as in every Spark client).
//! * A raw `?` or `#` anywhere is an error. Java's `URI` silently drops a query or a fragment
//!   and Python's `urlparse` splits them off, so accepting them would mean silently ignoring
//!   part of what the user wrote. Percent-encode them (`%3F`, `%23`) inside values.
//! * The authority ends at the first `/`. A `;` inside the authority
//!   (`sc://host:123;user_id=a`) is an error: parameters must follow a `/`.
//! * User info (`user@host`) is rejected: Spark has no use for it and Java would silently
//!   drop it.
//! * The path must be empty or exactly `/`.
//! * Parameters are split on `;`, then each on `=`, and only then percent-decoded (the PySpark
//!   order), so `%3B` and `%3D` can appear inside keys and values. Empty pieces are skipped
//!   (`sc://localhost/;` is valid). A piece needs exactly one `=`. Scala drops trailing empty
//!   pieces, so `a=b=` is accepted there but rejected by PySpark. Here it is rejected. `+` is
//!   not a space (percent-decoding, not form decoding), so base64 values survive.
//! * Keys are case-sensitive, as the Spark document says. A repeated key keeps its last
//!   value, as in both upstream clients, whose parameters end up in a map.
//!
//! # Choices where the upstream spec is silent or the clients disagree
//!
//! * **Booleans.** Upstream, `use_ssl` is true only for `true` (any case) and *anything else* is
//!   false, while the keepalive booleans reject anything but `true`/`false`. Here all four accept
//!   only `true`/`false` (any case). A typo such as `use_ssl=ture` would otherwise silently
//!   turn TLS off.
//! * **Empty values.** Empty values of reserved keys are errors (`token=`, `user_id=`,
//!   `session_id=`, ...). An empty value of a metadata key is an empty header, as in PySpark.
//! * **Host names.** ASCII letters, digits, `-`, `_` and `.`; labels of 1–63 chars that do not
//!   start or end with `-`; at most 253 chars in total. Java rejects `_`, but PySpark accepts
//!   it and container service names often use it. Internationalised names must be given in
//!   punycode. IPv6 literals must be bracketed and have no zone id.
//! * **Ports.** `sc://host:` (empty port) and port `0` are errors.
//! * **`session_id`.** Only the canonical hyphenated form is accepted (Java's `UUID.fromString`
//!   is much more lenient, Python accepts braces and `urn:uuid:`). Hex digits may be upper or
//!   lower case. The id is normalised to lower case.
//! * **`grpc_max_message_size`.** The gRPC length prefix is 32 bits, so the upper bound is
//!   `u32::MAX`. Zero is rejected.
//! * **HTTP/2 windows** (see [`Http2FlowControl`]). The names follow gRPC C-core's
//!   `grpc.http2.bdp_probe`, in the `grpc_` style of the other keys. A window outside
//!   `65535..=2147483647` (what HTTP/2 can advertise), a connection window smaller than the
//!   stream window, and `grpc_http2_bdp_probe=true` next to a window size (hyper would
//!   silently drop the size) are errors. With only one window given, the other follows it:
//!   the connection window is at least the stream window and 32 MiB, the stream window at
//!   most the connection window and 16 MiB. PySpark and Scala send keys they do not know
//!   as gRPC headers, so a string shared with them sends these as headers there (harmless).
//! * **Keepalive times** must be positive: a zero ping interval would make no sense.
//! * **Metadata keys** are lower-cased (gRPC requires lower-case header names, and grpc-java
//!   lower-cases them too). After that they must match the gRPC grammar
//!   (`[0-9a-z_.-]+`). Keys that tonic or HTTP/2 own are rejected rather than silently
//!   dropped: `grpc-*`, `te`, `content-type`, `host`, and the connection-specific headers.
//!   `authorization` is allowed as metadata only when there is no token, because the token's
//!   `Bearer` header would replace it.
//! * **Metadata values** must be printable ASCII (`0x20..=0x7E`), the gRPC grammar. Keys ending
//!   in `-bin` hold standard base64 (padding optional, since a raw `=` cannot appear in a value
//!   without percent-encoding), which is decoded into binary metadata.
//! * **Environment.** Empty environment variables count as unset. The token falls back to the
//!   environment only when the string has no `token` parameter.
//! * **`tls_*` keys** are this client's own (the Spark document has none for a private CA;
//!   see [`crate::session::tls`]). PySpark and Scala send them as headers: a file path,
//!   never a certificate or key. The files are read when the channel is built.
//! * **TLS** is used when `use_ssl=true`, when a `tls_*` key is given, or when there is a token and the host is not exactly
//!   `localhost` (case-sensitive, as upstream). `use_ssl=false` does not switch TLS off in that
//!   case. A token with host `localhost` goes over plaintext, as upstream does.
//! * **`result_compression`** is this client's own key (PySpark sets the conf with
//!   `spark.conf.set`); an invalid value is the one error that quotes it (a codec name).
//!   So is **`result_batch_rows`** (its invalid value is quoted too: a number).
//! * **Secrets in errors.** Errors never quote a value (but see `result_compression`, `result_batch_rows`), only the name of the offending part
//!   (scheme, host, port, path, parameter position or key). Authority text is never quoted
//!   either, because a malformed string such as `sc://h:1;token=x` puts a token there.
//!   [`ConnectionString`]'s `Debug` redacts the token and metadata values.

use std::fmt;
use std::time::Duration;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use tonic::metadata::MetadataMap;
use uuid::Uuid;

use super::flow_control::Http2FlowControl;
use super::result_batch_rows::ResultBatchRows;
use super::result_compression::ResultCompression;
use crate::token::Token;

mod defaults;
pub(crate) mod error;
mod values;

pub use error::{ConnectionStringError, ParamPart};
use values::{
    BDP_PROBE_KEY, CONNECTION_WINDOW_KEY, STREAM_WINDOW_KEY, WindowParams, decode, insert_metadata,
    non_empty, parse_authority, parse_bool, parse_max_size, parse_millis, parse_uuid, parse_window,
    token,
};

pub(crate) use defaults::{
    DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_PORT, DEFAULT_USER_AGENT, ENV_REMOTE, ENV_SPARK_USER,
    ENV_TOKEN, ENV_USER, ENV_USER_AGENT, MAX_USER_AGENT_LEN, SPARK_VERSION,
};

/// HTTP/2 keepalive settings (the `grpc_keepalive_*` parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Send keepalive pings at all (`grpc_keepalive_enabled`, default `true`).
    pub enabled: bool,
    /// Interval between pings (`grpc_keepalive_time_ms`, default 60 s).
    pub time: Duration,
    /// How long to wait for a ping acknowledgement before the connection is considered dead
    /// (`grpc_keepalive_timeout_ms`, default 20 s).
    pub timeout: Duration,
    /// Ping also while no call is active (`grpc_keepalive_without_calls`, default `true`).
    pub without_calls: bool,
}

impl Default for Keepalive {
    fn default() -> Self {
        Keepalive {
            enabled: true,
            time: Duration::from_millis(60_000),
            timeout: Duration::from_millis(20_000),
            without_calls: true,
        }
    }
}

/// A parsed, validated `sc://` connection string, with environment fallbacks applied.
///
/// ```
/// use spark_connect_retry::session::conn_string::ConnectionString;
///
/// let cs = ConnectionString::parse_with_env(
///     "sc://spark.example.com/;token=my-secret-token;x-tenant=blue",
///     |_| None, // no environment
/// )?;
/// assert_eq!(cs.host(), "spark.example.com");
/// assert_eq!(cs.port(), 15002);
/// assert!(cs.use_tls()); // a token to a non-localhost host implies TLS
/// assert_eq!(cs.metadata().get("x-tenant").unwrap(), "blue");
/// // (a token of hex digits could match the session id's UUID by chance)
/// assert!(!format!("{cs:?}").contains("my-secret-token"));
/// # Ok::<(), spark_connect_retry::session::conn_string::ConnectionStringError>(())
/// ```
#[derive(Clone)]
pub struct ConnectionString {
    host: String,
    port: u16,
    token: Option<Token>,
    use_ssl: bool,
    user_id: Option<String>,
    user_agent: String,
    session_id: Option<Uuid>,
    max_message_size: usize,
    keepalive: Keepalive,
    flow_control: Http2FlowControl,
    metadata: MetadataMap,
    tls_files: TlsFiles,
    result_compression: Option<ResultCompression>,
    result_batch_rows: Option<ResultBatchRows>,
}

/// The `tls_*` file parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    pub(crate) ca: Option<std::path::PathBuf>,
    pub(crate) cert: Option<std::path::PathBuf>,
    pub(crate) key: Option<std::path::PathBuf>,
}

impl TlsFiles {
    fn any(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }
}

/// The keys of `metadata`, for `Debug` output that must not show values
/// (they may be credentials, e.g. API keys in custom headers).
pub(crate) fn metadata_keys(metadata: &MetadataMap) -> Vec<&str> {
    metadata
        .keys()
        .map(|k| match k {
            tonic::metadata::KeyRef::Ascii(k) => k.as_str(),
            tonic::metadata::KeyRef::Binary(k) => k.as_str(),
        })
        .collect()
}

impl fmt::Debug for ConnectionString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Metadata values may be credentials too (API keys in custom headers), so only the
        // keys are shown.
        let metadata_keys = metadata_keys(&self.metadata);
        f.debug_struct("ConnectionString")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("token", &self.token)
            .field("use_ssl", &self.use_ssl)
            .field("user_id", &self.user_id)
            .field("user_agent", &self.user_agent)
            .field("session_id", &self.session_id)
            .field("max_message_size", &self.max_message_size)
            .field("keepalive", &self.keepalive)
            .field("flow_control", &self.flow_control)
            .field("metadata_keys", &metadata_keys)
            .field("tls_files", &self.tls_files)
            .field("result_compression", &self.result_compression)
            .field("result_batch_rows", &self.result_batch_rows)
            .finish()
    }
}

impl std::str::FromStr for ConnectionString {
    type Err = ConnectionStringError;

    /// Same as [`ConnectionString::parse`]: reads the process environment for fallbacks.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Reads a process environment variable; non-UTF-8 values count as unset.
fn process_env(key: &str) -> Option<String> {
    std::env::var(key).ok()
}

/// Percent-encoding set matching Python's `urllib.parse.quote` defaults: everything except
/// letters, digits, `_.-~` and `/` is encoded.
const QUOTE_SET: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'_')
    .remove(b'.')
    .remove(b'-')
    .remove(b'~')
    .remove(b'/');

impl ConnectionString {
    /// Parses a connection string, using the process environment for fallbacks
    /// (`SPARK_CONNECT_AUTHENTICATE_TOKEN`, `SPARK_CONNECT_USER_AGENT`, `SPARK_USER`, `USER`).
    pub fn parse(s: &str) -> Result<Self, ConnectionStringError> {
        Self::parse_with_env(s, process_env)
    }

    /// Parses a connection string, reading environment fallbacks through `env` instead of the
    /// process environment (handy in tests). `env` returns `None` for an unset variable.
    ///
    /// ```
    /// use spark_connect_retry::session::conn_string::ConnectionString;
    ///
    /// let cs = ConnectionString::parse_with_env("sc://localhost", |k| {
    ///     (k == "SPARK_USER").then(|| "alice".to_string())
    /// })?;
    /// assert_eq!(cs.user_id(), Some("alice"));
    /// # Ok::<(), spark_connect_retry::session::conn_string::ConnectionStringError>(())
    /// ```
    pub fn parse_with_env<F>(s: &str, env: F) -> Result<Self, ConnectionStringError>
    where
        F: Fn(&str) -> Option<String>,
    {
        // Empty environment variables count as unset.
        let env = |k: &str| env(k).filter(|v| !v.is_empty());

        let rest = s
            .strip_prefix("sc://")
            .ok_or(ConnectionStringError::Scheme)?;
        if let Some(character) = rest.chars().find(|c| matches!(c, '?' | '#')) {
            return Err(ConnectionStringError::QueryOrFragment { character });
        }

        let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (host, port) = parse_authority(authority)?;
        let port = port.unwrap_or(DEFAULT_PORT);

        let mut cs = ConnectionString {
            host,
            port,
            token: None,
            use_ssl: false,
            user_id: None,
            user_agent: String::new(),
            session_id: None,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            keepalive: Keepalive::default(),
            flow_control: Http2FlowControl::default(),
            metadata: MetadataMap::new(),
            tls_files: TlsFiles::default(),
            result_compression: None,
            result_batch_rows: None,
        };
        let mut windows = WindowParams::default();
        let mut user_agent = None;
        let mut session_id = None;
        // Metadata is built after the token is known: `authorization` conflicts with it.
        let mut extra: Vec<(String, String)> = Vec::new();

        if !tail.is_empty() {
            let mut pieces = tail.split(';');
            if pieces.next() != Some("/") {
                return Err(ConnectionStringError::Path {
                    reason: "the path must be empty or '/'",
                });
            }
            for (i, piece) in pieces.enumerate() {
                let index = i + 1;
                if piece.is_empty() {
                    continue;
                }
                let Some((raw_key, raw_value)) = piece.split_once('=') else {
                    return Err(ConnectionStringError::MalformedParameter { index });
                };
                if raw_value.contains('=') {
                    return Err(ConnectionStringError::MalformedParameter { index });
                }
                let key = decode(raw_key, index, ParamPart::Key)?;
                let value = decode(raw_value, index, ParamPart::Value)?;
                if key.is_empty() {
                    return Err(ConnectionStringError::EmptyKey { index });
                }
                match &*key {
                    "token" => cs.token = Some(token(value)?),
                    "use_ssl" => cs.use_ssl = parse_bool("use_ssl", &value)?,
                    "user_id" => cs.user_id = Some(non_empty("user_id", value)?),
                    "user_agent" => user_agent = Some(non_empty("user_agent", value)?),
                    "session_id" => session_id = Some(parse_uuid(&value)?),
                    "grpc_max_message_size" => cs.max_message_size = parse_max_size(&value)?,
                    "grpc_keepalive_enabled" => {
                        cs.keepalive.enabled = parse_bool("grpc_keepalive_enabled", &value)?;
                    }
                    "grpc_keepalive_time_ms" => {
                        cs.keepalive.time = parse_millis("grpc_keepalive_time_ms", &value)?;
                    }
                    "grpc_keepalive_timeout_ms" => {
                        cs.keepalive.timeout = parse_millis("grpc_keepalive_timeout_ms", &value)?;
                    }
                    "grpc_keepalive_without_calls" => {
                        cs.keepalive.without_calls =
                            parse_bool("grpc_keepalive_without_calls", &value)?;
                    }
                    STREAM_WINDOW_KEY => {
                        windows.stream = Some(parse_window(STREAM_WINDOW_KEY, &value)?)
                    }
                    CONNECTION_WINDOW_KEY => {
                        windows.connection = Some(parse_window(CONNECTION_WINDOW_KEY, &value)?);
                    }
                    BDP_PROBE_KEY => windows.bdp_probe = parse_bool(BDP_PROBE_KEY, &value)?,
                    "result_compression" => cs.result_compression = Some(value.parse()?),
                    "result_batch_rows" => cs.result_batch_rows = Some(value.parse()?),
                    "tls_ca_file" => {
                        cs.tls_files.ca = Some(non_empty("tls_ca_file", value)?.into())
                    }
                    "tls_cert_file" => {
                        cs.tls_files.cert = Some(non_empty("tls_cert_file", value)?.into());
                    }
                    "tls_key_file" => {
                        cs.tls_files.key = Some(non_empty("tls_key_file", value)?.into());
                    }
                    _ => extra.push((key.into_owned(), value.into_owned())),
                }
            }
        }

        cs.flow_control = windows.resolve()?;

        if cs.token.is_none()
            && let Some(t) = env(ENV_TOKEN)
        {
            cs.token = Some(token(t)?);
        }
        if cs.user_id.is_none() {
            cs.user_id = env(ENV_SPARK_USER).or_else(|| env(ENV_USER));
        }
        let user_agent = user_agent
            .or_else(|| env(ENV_USER_AGENT))
            .unwrap_or_else(|| DEFAULT_USER_AGENT.to_owned());
        let encoded_len = utf8_percent_encode(&user_agent, QUOTE_SET)
            .map(str::len)
            .sum::<usize>();
        if encoded_len > MAX_USER_AGENT_LEN {
            return Err(ConnectionStringError::UserAgentTooLong { encoded_len });
        }
        cs.user_agent = user_agent;
        cs.session_id = session_id;

        for (key, value) in extra {
            insert_metadata(&mut cs.metadata, &key, &value, cs.token.is_some())?;
        }
        Ok(cs)
    }

    /// Parses the connection string in `SPARK_REMOTE`, with process-environment fallbacks.
    pub fn from_env() -> Result<Self, ConnectionStringError> {
        Self::from_env_with(process_env)
    }

    /// Like [`ConnectionString::from_env`], reading variables through `env`.
    ///
    /// ```
    /// use spark_connect_retry::session::conn_string::{ConnectionString, ConnectionStringError};
    ///
    /// let env = |k: &str| (k == "SPARK_REMOTE").then(|| "sc://h:1".to_string());
    /// assert_eq!(ConnectionString::from_env_with(env)?.port(), 1);
    /// assert_eq!(
    ///     ConnectionString::from_env_with(|_| None).unwrap_err(),
    ///     ConnectionStringError::RemoteNotSet
    /// );
    /// # Ok::<(), ConnectionStringError>(())
    /// ```
    pub fn from_env_with<F>(env: F) -> Result<Self, ConnectionStringError>
    where
        F: Fn(&str) -> Option<String>,
    {
        let remote = env(ENV_REMOTE)
            .filter(|v| !v.is_empty())
            .ok_or(ConnectionStringError::RemoteNotSet)?;
        Self::parse_with_env(&remote, env)
    }

    /// Host name or IP address. IPv6 addresses are returned without brackets.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Port (default 15002).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `host:port`, with IPv6 hosts bracketed: the authority of the channel URI.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The bearer token, from the string or `SPARK_CONNECT_AUTHENTICATE_TOKEN`.
    pub fn token(&self) -> Option<&Token> {
        self.token.as_ref()
    }

    /// The `tls_ca_file` / `tls_cert_file` / `tls_key_file` parameters.
    #[cfg(feature = "tls")]
    pub(crate) fn tls_files(&self) -> &TlsFiles {
        &self.tls_files
    }

    /// The `use_ssl` parameter as written. See [`ConnectionString::use_tls`] for the
    /// effective setting.
    pub fn use_ssl(&self) -> bool {
        self.use_ssl
    }

    /// Whether the channel uses TLS: `use_ssl=true`, a `tls_*` file parameter, or a token
    /// with a host other than exactly `localhost`.
    pub fn use_tls(&self) -> bool {
        self.use_ssl || self.tls_files.any() || (self.token.is_some() && self.host != "localhost")
    }

    /// User id for `UserContext`, from the string, `SPARK_USER` or `USER`.
    pub fn user_id(&self) -> Option<&str> {
        self.user_id.as_deref()
    }

    /// The user agent without the version suffix (see [`ConnectionString::client_type`]).
    pub fn user_agent(&self) -> &str {
        &self.user_agent
    }

    /// The full `client_type` sent in every request:
    /// `<user agent> spark/<version> os/<os> rust/<crate version>`.
    ///
    /// `os` is `linux`, `darwin` (like Python and Scala) or `windows`, else Rust's own name
    /// for the OS. The last part is this crate's version: the compiler version is not
    /// available to a library without a build-script probe.
    ///
    /// ```
    /// use spark_connect_retry::session::conn_string::ConnectionString;
    /// let cs = ConnectionString::parse_with_env("sc://h", |_| None)?;
    /// assert!(cs.client_type().starts_with("_SPARK_CONNECT_RUST spark/4.3.0 os/"));
    /// # Ok::<(), spark_connect_retry::session::conn_string::ConnectionStringError>(())
    /// ```
    pub fn client_type(&self) -> String {
        let os = match std::env::consts::OS {
            "macos" => "darwin",
            other => other,
        };
        format!(
            "{} spark/{SPARK_VERSION} os/{os} rust/{}",
            self.user_agent,
            env!("CARGO_PKG_VERSION")
        )
    }

    /// The `session_id` parameter, if the string has one. Without it, every
    /// session built from this configuration draws its own random UUID v4
    /// (so two sessions built from one string never share an id).
    pub fn session_id(&self) -> Option<Uuid> {
        self.session_id
    }

    /// Maximum gRPC message size in bytes, for `max_decoding_message_size` and
    /// `max_encoding_message_size` on generated clients.
    pub fn max_message_size(&self) -> usize {
        self.max_message_size
    }

    /// HTTP/2 keepalive settings.
    pub fn keepalive(&self) -> Keepalive {
        self.keepalive
    }

    /// HTTP/2 flow control: the `grpc_initial_*_window_size` and `grpc_http2_bdp_probe`
    /// parameters (default: 16 MiB per stream, 32 MiB per connection).
    ///
    /// ```
    /// use spark_connect_retry::session::Http2FlowControl;
    /// use spark_connect_retry::session::conn_string::ConnectionString;
    ///
    /// let cs = ConnectionString::parse_with_env(
    ///     "sc://h/;grpc_initial_stream_window_size=8388608",
    ///     |_| None,
    /// )?;
    /// assert_eq!(
    ///     cs.http2_flow_control(),
    ///     Http2FlowControl::Fixed { stream_window: 8 << 20, connection_window: 32 << 20 }
    /// );
    /// # Ok::<(), spark_connect_retry::session::conn_string::ConnectionStringError>(())
    /// ```
    pub fn http2_flow_control(&self) -> Http2FlowControl {
        self.flow_control
    }

    /// The `result_compression` parameter, if given.
    pub fn result_compression(&self) -> Option<ResultCompression> {
        self.result_compression
    }

    /// The `result_batch_rows` parameter, if given (when not, a session
    /// asks for [`ResultBatchRows::DEFAULT`](crate::session::ResultBatchRows::DEFAULT)).
    pub fn result_batch_rows(&self) -> Option<ResultBatchRows> {
        self.result_batch_rows
    }

    /// Extra gRPC metadata (the unknown parameters), sent on every call. Values are marked
    /// sensitive so that HPACK never indexes them and `Debug` hides them.
    pub fn metadata(&self) -> &MetadataMap {
        &self.metadata
    }
}
