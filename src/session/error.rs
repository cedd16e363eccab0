//! The session's errors.
//!
//! A Spark user matches on what Spark says went wrong: the error class
//! (`TABLE_OR_VIEW_NOT_FOUND`), the SQLSTATE (`42P01`), the message
//! parameters and the operation that failed. [`ServerError`] carries all of
//! them next to the original `tonic::Status`; [`SparkError`] is the one error
//! type every session call returns.
//!
//! A server error displays as Spark shows it, `[CLASS] message (SQLSTATE:
//! …)`, with no gRPC prefix; a failure without a Spark class as its gRPC
//! code and message, followed by the transport's cause chain
//! (`UNAVAILABLE: tcp connect error: Connection refused (os error 111)`).
//! A call the retry policy gave up on says so first, with its history:
//! `[RETRIES_EXCEEDED] ExecutePlan to 127.0.0.1:15002 gave up after 4
//! attempts and 0.9 s of waiting; last error: UNAVAILABLE: …`.

use std::collections::HashMap;
use std::fmt;

use crate::connect::channel::ChannelError;
use crate::connect::conn_string::ConnectionStringError;
use crate::error_classes::{SESSION_CHANGED, SESSION_CLOSED};
use crate::policy::Failure;
use crate::reattach::ReattachError;
#[cfg(feature = "arrow")]
use crate::results::{change::ResultChange, error::ResultError};
use crate::retrying::GaveUp;

/// An error the server reported, with Spark's details.
///
/// The original [`tonic::Status`] is kept (and is the error's `source()`).
/// When the retry policy gave up, [`gave_up`](Self::gave_up) has the
/// history, and the last attempt's status is
/// [`GaveUp::last_status`]. `Debug` shows the decoded fields, never the raw
/// `grpc-status-details-bin` bytes.
#[derive(Clone, thiserror::Error)]
#[error("{}", self.render())]
pub struct ServerError {
    #[source]
    status: tonic::Status,
    error_class: Option<String>,
    sql_state: Option<String>,
    message_parameters: HashMap<String, String>,
    error_id: Option<String>,
    operation_id: Option<String>,
    details: Option<ErrorDetails>,
    rpc: Option<&'static str>,
    target: Option<String>,
}

/// The full message and cause chain recovered by FetchErrorDetails.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ErrorDetails {
    /// The root error's full (unabbreviated) message.
    pub message: String,
    /// The messages of its causes, outermost first.
    pub causes: Vec<String>,
    /// The root error's class, as FetchErrorDetails reports it.
    pub error_class: Option<String>,
    /// The root error's SQLSTATE, as FetchErrorDetails reports it.
    pub sql_state: Option<String>,
    /// The root error's message parameters, as FetchErrorDetails reports them.
    pub message_parameters: HashMap<String, String>,
}

impl ServerError {
    /// Build from a status, parsing ErrorInfo (or a `[CLASS]` prefix and a
    /// `SQLSTATE: xxxxx` suffix of the message).
    pub fn from_status(status: tonic::Status) -> Self {
        let info = crate::status::error_info(&status);
        let error_class = crate::status::spark_error_class(&status);
        let sql_state = info
            .as_ref()
            .and_then(|i| i.sql_state().map(str::to_owned))
            .or_else(|| sqlstate_from_message(status.message()));
        let message_parameters = info
            .as_ref()
            .and_then(|i| i.metadata.get("messageParameters"))
            .map(|json| parse_message_parameters(json))
            .unwrap_or_default();
        let error_id = info.as_ref().and_then(|i| i.error_id().map(str::to_owned));
        ServerError {
            status,
            error_class,
            sql_state,
            message_parameters,
            error_id,
            operation_id: None,
            details: None,
            rpc: None,
            target: None,
        }
    }
    /// The gRPC status as received.
    pub fn status(&self) -> &tonic::Status {
        &self.status
    }
    /// The gRPC code.
    pub fn code(&self) -> tonic::Code {
        self.status.code()
    }
    /// Spark's error class, e.g. `PARSE_SYNTAX_ERROR`.
    pub fn error_class(&self) -> Option<&str> {
        self.error_class.as_deref()
    }
    /// The SQLSTATE, e.g. `42601`.
    pub fn sql_state(&self) -> Option<&str> {
        self.sql_state.as_deref()
    }
    /// Spark's message parameters (values that are not JSON strings keep
    /// their JSON text).
    pub fn message_parameters(&self) -> &HashMap<String, String> {
        &self.message_parameters
    }
    /// The id under which the server keeps the full error for FetchErrorDetails.
    pub fn error_id(&self) -> Option<&str> {
        self.error_id.as_deref()
    }
    /// The operation that failed, for errors of an execution.
    pub fn operation_id(&self) -> Option<&str> {
        self.operation_id.as_deref()
    }
    /// The enrichment from FetchErrorDetails, when it was available.
    pub fn details(&self) -> Option<&ErrorDetails> {
        self.details.as_ref()
    }
    /// The message: the enriched one if available, else the status message.
    pub fn message(&self) -> &str {
        self.details
            .as_ref()
            .map(|d| d.message.as_str())
            .filter(|m| !m.is_empty())
            .unwrap_or(self.status.message())
    }
    /// The retry history, when the retry policy gave up on this call
    /// (attempts made, time waited, the last attempt's status).
    pub fn gave_up(&self) -> Option<&GaveUp> {
        crate::retrying::GaveUp::of(&self.status)
    }
    /// The RPC that failed (`ExecutePlan`, `Config`, …), when known.
    pub fn rpc(&self) -> Option<&str> {
        self.rpc
    }
    /// The server it was sent to, `host:port` (never a token), when known.
    pub fn target(&self) -> Option<&str> {
        self.target.as_deref()
    }
    pub(crate) fn set_operation_id(&mut self, id: &str) {
        self.operation_id = Some(id.to_owned());
    }
    pub(crate) fn set_call(&mut self, rpc: Option<&'static str>, target: &str) {
        if self.rpc.is_none() {
            self.rpc = rpc;
        }
        self.target.get_or_insert_with(|| target.to_owned());
    }
    /// Attach FetchErrorDetails' answer; it fills what ErrorInfo lacked
    /// (Spark drops large message parameters from the status).
    pub(crate) fn set_details(&mut self, details: ErrorDetails) {
        if self.error_class.is_none() {
            self.error_class = details.error_class.clone();
        }
        if self.sql_state.is_none() {
            self.sql_state = details.sql_state.clone();
        }
        if self.message_parameters.is_empty() {
            self.message_parameters = details.message_parameters.clone();
        }
        self.details = Some(details);
    }
    fn is_deadline(&self) -> bool {
        Failure::new(&self.status).is_deadline()
    }
}

impl ServerError {
    /// The display: as Spark shows it, or as gRPC code and message (see
    /// the module docs).
    fn render(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_display(&mut text);
        text
    }

    fn write_display(&self, f: &mut String) -> fmt::Result {
        use std::fmt::Write as _;
        if let Some(history) = self.gave_up() {
            f.write_str("[RETRIES_EXCEEDED] ")?;
            match (self.rpc, &self.target) {
                (Some(rpc), Some(target)) => write!(f, "{rpc} to {target} ")?,
                (Some(rpc), None) => write!(f, "{rpc} ")?,
                (None, Some(target)) => write!(f, "call to {target} ")?,
                (None, None) => {}
            }
            write!(f, "{history}; last error: ")?;
        }
        let message = self.message().trim();
        match self.error_class() {
            Some(class) => {
                if crate::status::bracketed_class(message).as_deref() != Some(class) {
                    write!(f, "[{class}] ")?;
                }
                match self.sql_state() {
                    // Spark ends its messages with `SQLSTATE: xxxxx`; shown
                    // in parentheses, as for messages without it. A SQLSTATE
                    // inside the text (a parse error's SQL excerpt follows
                    // it) is left where Spark put it.
                    Some(state) => {
                        let suffix = format!("SQLSTATE: {state}");
                        match message.strip_suffix(&suffix) {
                            Some(text) => write!(f, "{} ({suffix})", text.trim_end())?,
                            None if message.contains(&suffix) => f.write_str(message)?,
                            None => write!(f, "{message} ({suffix})")?,
                        }
                    }
                    None => f.write_str(message)?,
                }
            }
            None => {
                write!(f, "{}: {message}", code_name(self.code()))?;
                write_causes(f, &self.status, message)?;
            }
        }
        if self.is_deadline() {
            f.write_str(": RPC deadline exceeded. Raise the deadline in RpcDeadlines, or use RpcDeadlines::disabled()")?;
        }
        Ok(())
    }
}

/// The decoded fields; the status as its code and message only (its
/// details are raw protobuf bytes, decoded into the other fields).
impl fmt::Debug for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerError")
            .field("code", &self.status.code())
            .field("message", &self.status.message())
            .field("error_class", &self.error_class)
            .field("sql_state", &self.sql_state)
            .field("message_parameters", &self.message_parameters)
            .field("error_id", &self.error_id)
            .field("operation_id", &self.operation_id)
            .field("rpc", &self.rpc)
            .field("target", &self.target)
            .field("gave_up", &self.gave_up())
            .field("details", &self.details)
            .finish()
    }
}

/// `code`'s canonical gRPC name (`UNAVAILABLE`), as grpc-java and grpc-go
/// print it.
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

/// The transport's cause chain of a client-side failure (`: Connection
/// refused (os error 111)`), each cause once; the retry history and nested
/// statuses are walked through, not printed.
fn write_causes(f: &mut String, status: &tonic::Status, message: &str) -> fmt::Result {
    use std::fmt::Write as _;
    let mut written = message.to_owned();
    for err in tonic_retry::policy::sources(status) {
        if !err.is::<GaveUp>() && !err.is::<tonic::Status>() {
            let text = err.to_string();
            // tonic's own wrapper says nothing its cause does not.
            if !text.is_empty() && text != "transport error" && !written.contains(&text) {
                write!(f, ": {text}")?;
                written.push_str(&text);
            }
        }
    }
    Ok(())
}

fn sqlstate_from_message(msg: &str) -> Option<String> {
    let idx = msg.rfind("SQLSTATE: ")?;
    let code: String = msg[idx + 10..].chars().take(5).collect();
    (code.len() == 5 && code.chars().all(|c| c.is_ascii_alphanumeric())).then_some(code)
}

/// Spark's `messageParameters`: a JSON object. String values are taken as
/// they are; other values keep their JSON text. Anything else is no
/// parameters (the status message still says what happened).
fn parse_message_parameters(json: &str) -> HashMap<String, String> {
    let Ok(map) = serde_json::from_str::<HashMap<String, serde_json::Value>>(json) else {
        return HashMap::new();
    };
    map.into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => (k, s),
            other => (k, other.to_string()),
        })
        .collect()
}

/// Everything a [`SparkSession`](super::SparkSession) can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SparkError {
    /// The server returned an error (after any retries).
    #[error("{0}")]
    Server(#[source] Box<ServerError>),
    /// The server lost the operation or session after results were received.
    #[error(
        "[RESPONSE_ALREADY_RECEIVED] the server lost the execution{op} after responses were received: {0}",
        op = operation_suffix(.0)
    )]
    ResponseAlreadyReceived(#[source] Box<ServerError>),
    /// The session was closed ([`close`](super::SparkSession::close) or
    /// [`release_session`](super::SparkSession::release_session)), or its
    /// server session changed.
    #[error(
        "[INVALID_HANDLE.SESSION_CLOSED] no active session: this SparkSession was closed; build a new one"
    )]
    SessionClosed,
    /// The connection string is invalid.
    #[error(transparent)]
    ConnectionString(#[from] ConnectionStringError),
    /// The channel could not be built.
    #[error(transparent)]
    Channel(#[from] ChannelError),
    /// An RPC deadline cannot be used (it names the field).
    #[error(transparent)]
    Deadline(#[from] crate::deadlines::InvalidDeadline),
    /// A builder option has a value the session cannot use.
    #[error("invalid session option `{field}`: {reason}")]
    InvalidOption {
        /// The option, e.g. `idle_timeout` or `deadlines.config`.
        field: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A SQL parameter cannot be sent: its name or value (it names the
    /// parameter).
    #[error(transparent)]
    Params(#[from] crate::session::params::ParamError),
    /// A session tag is empty or contains a comma (PySpark's rule).
    #[error("invalid tag {tag:?}: {reason}")]
    InvalidTag {
        /// The tag given.
        tag: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A temporary view name the client refuses before sending it (an
    /// empty one); the server checks the others.
    #[error("invalid view name {name:?}: {reason}")]
    InvalidViewName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Arrow data could not be decoded.
    #[cfg(feature = "arrow")]
    #[error("invalid Arrow data from server: {0}")]
    Arrow(#[source] arrow_schema::ArrowError),
    /// A result batch could not be decoded, and the client can say which:
    /// a codec it does not read, a corrupt compressed buffer, a STRING that
    /// is not UTF-8 (it names the batch, and the codec, column or row).
    #[cfg(feature = "arrow")]
    #[error(transparent)]
    ResultDecode(crate::results::decode_error::ResultDecodeError),
    /// An Arrow batch did not start where the previous one ended: a dropped
    /// or replayed batch, never silently accepted.
    #[error(
        "Arrow batch starts at row {got}, expected {expected}: a batch was dropped or replayed"
    )]
    BatchOffset {
        /// The row offset expected.
        expected: i64,
        /// The row offset received.
        got: i64,
    },
    /// An execution failed for a reason of its own, as [`ReattachError`]
    /// says (its server errors become [`Server`](Self::Server) and
    /// [`ResponseAlreadyReceived`](Self::ResponseAlreadyReceived)):
    /// the server-side session changed (a server restart; the session is
    /// closed, or renewed with
    /// [`renew_stale_session`](super::SparkSessionBuilder::renew_stale_session)),
    /// a response named another session, the result broke a
    /// stream-integrity rule (a replayed response, a torn or miscounted
    /// batch; see [`crate::reattach`], "stream integrity"), the server kept
    /// answering without making progress, or a caller's operation id is not
    /// a UUID.
    #[error(transparent)]
    Execution(ReattachError),
    /// The server answered something this client cannot use.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// Local data could not be sent: a bad batch, a limit, a CRC mismatch
    /// the server reported, or a malformed upload answer.
    #[cfg(feature = "arrow")]
    #[error(transparent)]
    Upload(#[from] crate::local_data::upload::UploadError),
    /// A query re-executed after the server lost its execution
    /// ([`resume_queries`](super::SparkSessionBuilder::resume_queries)) gave
    /// a different result: its first rows are not the ones already
    /// delivered, or it has fewer. Nothing more is delivered; the caller
    /// has exactly the first `delivered` rows of the original result.
    #[cfg(feature = "arrow")]
    #[error(
        "[RESULT_CHANGED_ON_RESUME] the query was re-executed (operation {operation_id}) after the server lost its execution, and its result changed: {change}; {delivered} rows had been delivered, none after them"
    )]
    ResultChanged {
        /// Rows delivered before the execution was lost.
        delivered: u64,
        /// The operation id of the re-execution.
        operation_id: String,
        /// How the result changed.
        change: ResultChange,
    },
    /// A TLS handshake failed in a way no retry fixes (an unknown CA, a
    /// certificate for another host name, an expired certificate, a client
    /// certificate missing or refused): the call was made once.
    #[cfg(feature = "tls")]
    #[error("[TLS_HANDSHAKE_FAILED] {0}")]
    Tls(#[source] crate::connect::tls::TlsHandshakeError),
    /// The token provider failed, or the server refused its token again
    /// after a refresh ([`crate::token`]); it names the provider,
    /// never the token.
    #[error(transparent)]
    Token(crate::token::TokenError),
}

/// ` <operation id>`, when the error names one.
fn operation_suffix(e: &ServerError) -> String {
    e.operation_id()
        .map(|op| format!(" {op}"))
        .unwrap_or_default()
}

impl SparkError {
    /// Tags a server error with the operation it belongs to.
    pub(crate) fn with_operation_id(mut self, id: &str) -> Self {
        if let SparkError::Server(e) | SparkError::ResponseAlreadyReceived(e) = &mut self {
            e.set_operation_id(id);
        }
        self
    }

    /// The server error, if this is one.
    pub fn server_error(&self) -> Option<&ServerError> {
        match self {
            SparkError::Server(e) | SparkError::ResponseAlreadyReceived(e) => Some(e),
            _ => None,
        }
    }
    /// Spark's error class, when known.
    pub fn error_class(&self) -> Option<&str> {
        match self {
            SparkError::Execution(ReattachError::ServerSideSessionChanged { .. }) => {
                Some(SESSION_CHANGED)
            }
            SparkError::SessionClosed => Some(SESSION_CLOSED),
            other => other.server_error().and_then(ServerError::error_class),
        }
    }
    /// The SQLSTATE, when the server gave one.
    pub fn sql_state(&self) -> Option<&str> {
        self.server_error().and_then(ServerError::sql_state)
    }
}

impl SparkError {
    /// The one conversion of a status: a TLS handshake failure, a token
    /// provider's failure or refusal, or else a server error. `call` is the
    /// RPC and the server (`host:port`) it went to, when known; a server
    /// error keeps both, a token error the RPC's.
    pub(crate) fn from_status(
        s: tonic::Status,
        call: Option<(Option<&'static str>, &str)>,
    ) -> Self {
        #[cfg(feature = "tls")]
        if let Some(tls) = crate::connect::tls::TlsHandshakeError::from_status(&s) {
            return SparkError::Tls(tls.clone());
        }
        if let Some(t) = crate::token::refusal::token_error(&s) {
            let mut t = t.clone();
            if let Some((Some(rpc), target)) = call {
                t.set_call(rpc, target);
            }
            return SparkError::Token(t);
        }
        let mut e = ServerError::from_status(s);
        if let Some((rpc, target)) = call {
            e.set_call(rpc, target);
        }
        SparkError::Server(Box::new(e))
    }
}

impl From<tonic::Status> for SparkError {
    fn from(s: tonic::Status) -> Self {
        SparkError::from_status(s, None)
    }
}

impl From<ReattachError> for SparkError {
    fn from(e: ReattachError) -> Self {
        match e {
            ReattachError::Status(s) => SparkError::from(s),
            ReattachError::ResponseAlreadyReceived { status, .. } => {
                SparkError::ResponseAlreadyReceived(Box::new(ServerError::from_status(status)))
            }
            ReattachError::ZeroIdleTimeout => SparkError::InvalidOption {
                field: "idle_timeout",
                reason: "must be greater than zero",
            },
            ReattachError::InvalidDeadline(e) => SparkError::Deadline(e),
            e => SparkError::Execution(e),
        }
    }
}

#[cfg(feature = "arrow")]
impl From<ResultError> for SparkError {
    /// Each case of a result's error as the variant of the same name; a
    /// broken integrity rule as [`Execution`](SparkError::Execution).
    fn from(e: ResultError) -> Self {
        match e {
            ResultError::Arrow(e) => SparkError::Arrow(e),
            ResultError::ResultDecode(e) => SparkError::ResultDecode(e),
            ResultError::BatchOffset { expected, got } => SparkError::BatchOffset { expected, got },
            ResultError::Integrity(e) => SparkError::Execution(e.into()),
            ResultError::Protocol(what) => SparkError::Protocol(what),
            ResultError::ResultChanged {
                delivered,
                operation_id,
                change,
            } => SparkError::ResultChanged {
                delivered,
                operation_id,
                change,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_message_parameters_with_every_json_escape() {
        let m = parse_message_parameters(
            r#"{"error":"'x'","hint":"a \"q\" \u0041\r\b\f\t\n\/","pair":"\ud83d\ude00","n":3}"#,
        );
        assert_eq!(m["error"], "'x'");
        assert_eq!(m["hint"], "a \"q\" A\r\u{8}\u{c}\t\n/");
        assert_eq!(m["pair"], "😀");
        assert_eq!(m["n"], "3");
        assert!(parse_message_parameters("garbage").is_empty());
        assert!(parse_message_parameters("{\"unterminated").is_empty());
        assert!(parse_message_parameters("[1,2]").is_empty());
    }

    #[test]
    fn sqlstate_from_the_message_suffix() {
        assert_eq!(
            sqlstate_from_message("[X] bad. SQLSTATE: 42601").as_deref(),
            Some("42601")
        );
        assert_eq!(sqlstate_from_message("SQLSTATE: 42"), None);
    }

    #[test]
    fn details_fill_what_error_info_lacked() {
        let mut e = ServerError::from_status(tonic::Status::internal("boom"));
        assert_eq!(e.error_class(), None);
        e.set_details(ErrorDetails {
            message: "full boom".into(),
            error_class: Some("DIVIDE_BY_ZERO".into()),
            sql_state: Some("22012".into()),
            message_parameters: [("config".to_owned(), "x".to_owned())].into(),
            ..Default::default()
        });
        assert_eq!(e.error_class(), Some("DIVIDE_BY_ZERO"));
        assert_eq!(e.sql_state(), Some("22012"));
        assert_eq!(e.message_parameters()["config"], "x");
        assert_eq!(e.message(), "full boom");
    }

    #[test]
    fn deadline_hint() {
        let e = ServerError::from_status(tonic::Status::deadline_exceeded("late"));
        let s = e.to_string();
        assert!(
            s.contains("RPC deadline exceeded") && s.contains("RpcDeadlines::disabled()"),
            "{s}"
        );
    }

    #[test]
    fn displays_as_spark_or_as_grpc() {
        let with_class = |message: &str| {
            let mut e = ServerError::from_status(tonic::Status::internal(message));
            e.sql_state = Some("42601".into());
            e.to_string()
        };
        assert_eq!(
            with_class("\n[PARSE_SYNTAX_ERROR] Bad. SQLSTATE: 42601\n"),
            "[PARSE_SYNTAX_ERROR] Bad. (SQLSTATE: 42601)"
        );
        assert_eq!(
            with_class("[PARSE_SYNTAX_ERROR] Bad. SQLSTATE: 42601 (line 1, pos 0)"),
            "[PARSE_SYNTAX_ERROR] Bad. SQLSTATE: 42601 (line 1, pos 0)"
        );
        let e = ServerError::from_status(tonic::Status::unavailable("down"));
        assert_eq!(e.to_string(), "UNAVAILABLE: down");
        assert!(e.gave_up().is_none());
    }

    #[test]
    fn an_execution_error_keeps_its_text_and_class() {
        let changed = SparkError::from(ReattachError::ServerSideSessionChanged {
            expected: "a".into(),
            got: "b".into(),
        });
        assert_eq!(
            changed.to_string(),
            "[INVALID_HANDLE.SESSION_CHANGED] server-side session changed from a to b; create a new session"
        );
        assert_eq!(changed.error_class(), Some(SESSION_CHANGED));
        let mismatch = SparkError::from(ReattachError::SessionMismatch {
            expected: "a".into(),
            got: "b".into(),
        });
        assert_eq!(
            mismatch.to_string(),
            "protocol error: response for session b, expected a"
        );
        assert_eq!(mismatch.error_class(), None);
        let id = SparkError::from(ReattachError::InvalidOperationId("x".into()));
        assert_eq!(id.to_string(), "operation id \"x\" is not a UUID");
    }

    #[test]
    fn closed_session_says_so() {
        let s = SparkError::SessionClosed.to_string();
        assert!(s.contains("no active session"), "{s}");
    }
}
