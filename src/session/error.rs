//! The session's error type.

use std::collections::HashMap;
use std::fmt;

use crate::policy::{FailureKind, classify_failure};
use crate::reattach::ReattachError;
use crate::session::channel::ChannelError;
use crate::session::conn_string::ConnectionStringError;

/// An error the server reported, with Spark's details.
///
/// The original [`tonic::Status`] is kept (and is the error's `source()`).
#[derive(Debug, Clone)]
pub struct ServerError {
    status: tonic::Status,
    error_class: Option<String>,
    sql_state: Option<String>,
    message_parameters: HashMap<String, String>,
    error_id: Option<String>,
    operation_id: Option<String>,
    details: Option<ErrorDetails>,
}

/// The full message and cause chain recovered by FetchErrorDetails.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorDetails {
    /// The root error's full (unabbreviated) message.
    pub message: String,
    /// The messages of its causes, outermost first.
    pub causes: Vec<String>,
}

impl ServerError {
    /// Build from a status, parsing ErrorInfo (or a `[CLASS]` prefix).
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
            .map(|json| parse_flat_json_object(json))
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
    /// Spark's message parameters.
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
    pub(crate) fn set_operation_id(&mut self, id: &str) {
        self.operation_id = Some(id.to_owned());
    }
    pub(crate) fn set_details(&mut self, details: ErrorDetails) {
        self.details = Some(details);
    }
    fn is_deadline(&self) -> bool {
        self.status.code() == tonic::Code::DeadlineExceeded
            || classify_failure(&self.status) == FailureKind::Deadline
    }
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status.code(), self.message())?;
        if self.is_deadline() {
            f.write_str(": RPC deadline exceeded. Raise the deadline in RpcDeadlines, or use RpcDeadlines::disabled()")?;
        }
        Ok(())
    }
}

impl std::error::Error for ServerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.status)
    }
}

fn sqlstate_from_message(msg: &str) -> Option<String> {
    let idx = msg.rfind("SQLSTATE: ")?;
    let code: String = msg[idx + 10..].chars().take(5).collect();
    (code.len() == 5 && code.chars().all(|c| c.is_ascii_alphanumeric())).then_some(code)
}

/// Parses `{"k":"v",...}` with string values (Spark's messageParameters). Best effort.
fn parse_flat_json_object(s: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut chars = s.trim().chars().peekable();
    if chars.next() != Some('{') {
        return out;
    }
    let read_string = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| -> Option<String> {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        if chars.next()? != '"' {
            return None;
        }
        let mut v = String::new();
        loop {
            match chars.next()? {
                '"' => return Some(v),
                '\\' => match chars.next()? {
                    'n' => v.push('\n'),
                    't' => v.push('\t'),
                    'u' => {
                        let hex: String = (0..4).filter_map(|_| chars.next()).collect();
                        v.push(
                            u32::from_str_radix(&hex, 16)
                                .ok()
                                .and_then(char::from_u32)?,
                        );
                    }
                    c => v.push(c),
                },
                c => v.push(c),
            }
        }
    };
    while let Some(k) = read_string(&mut chars) {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ':') {
            chars.next();
        }
        match read_string(&mut chars) {
            Some(v) => {
                out.insert(k, v);
            }
            None => break,
        }
    }
    out
}

/// Everything a [`SparkSession`](super::SparkSession) can fail with.
#[derive(Debug)]
#[non_exhaustive]
pub enum SparkError {
    /// The server returned an error (after any retries).
    Server(Box<ServerError>),
    /// The server lost the operation or session after results were received.
    ResponseAlreadyReceived(Box<ServerError>),
    /// The server-side session id changed (a server restart): the session is closed.
    SessionChanged {
        /// The id seen first.
        expected: String,
        /// The id received.
        got: String,
    },
    /// The session was released or closed.
    SessionClosed,
    /// The connection string is invalid.
    ConnectionString(ConnectionStringError),
    /// The channel could not be built.
    Channel(ChannelError),
    /// Arrow data could not be decoded.
    #[cfg(feature = "arrow")]
    Arrow(arrow_schema::ArrowError),
    /// An Arrow batch did not start where the previous one ended: a dropped
    /// or replayed batch, never silently accepted.
    BatchOffset {
        /// The row offset expected.
        expected: i64,
        /// The row offset received.
        got: i64,
    },
    /// The server answered something this client cannot use.
    Protocol(String),
    /// A caller-provided operation id is not a UUID.
    InvalidOperationId(String),
}

impl fmt::Display for SparkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SparkError::Server(e) => e.fmt(f),
            SparkError::ResponseAlreadyReceived(e) => {
                f.write_str("[RESPONSE_ALREADY_RECEIVED] the server lost the execution")?;
                if let Some(op) = e.operation_id() {
                    write!(f, " {op}")?;
                }
                write!(f, " after responses were received: {e}")
            }
            SparkError::SessionChanged { expected, got } => write!(
                f,
                "[INVALID_HANDLE.SESSION_CHANGED] server-side session changed from {expected} to {got}; create a new session"
            ),
            SparkError::SessionClosed => {
                f.write_str("[INVALID_HANDLE.SESSION_CLOSED] the session is closed")
            }
            SparkError::ConnectionString(e) => e.fmt(f),
            SparkError::Channel(e) => e.fmt(f),
            #[cfg(feature = "arrow")]
            SparkError::Arrow(e) => write!(f, "invalid Arrow data from server: {e}"),
            SparkError::BatchOffset { expected, got } => write!(
                f,
                "Arrow batch starts at row {got}, expected {expected}: a batch was dropped or replayed"
            ),
            SparkError::Protocol(m) => write!(f, "protocol error: {m}"),
            SparkError::InvalidOperationId(id) => write!(f, "operation id {id:?} is not a UUID"),
        }
    }
}

impl std::error::Error for SparkError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SparkError::Server(e) | SparkError::ResponseAlreadyReceived(e) => Some(e.as_ref()),
            SparkError::ConnectionString(e) => Some(e),
            SparkError::Channel(e) => Some(e),
            #[cfg(feature = "arrow")]
            SparkError::Arrow(e) => Some(e),
            _ => None,
        }
    }
}

impl SparkError {
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
            SparkError::SessionChanged { .. } => Some("INVALID_HANDLE.SESSION_CHANGED"),
            SparkError::SessionClosed => Some("INVALID_HANDLE.SESSION_CLOSED"),
            other => other.server_error().and_then(ServerError::error_class),
        }
    }
}

impl From<tonic::Status> for SparkError {
    fn from(s: tonic::Status) -> Self {
        SparkError::Server(Box::new(ServerError::from_status(s)))
    }
}

impl From<ConnectionStringError> for SparkError {
    fn from(e: ConnectionStringError) -> Self {
        SparkError::ConnectionString(e)
    }
}

impl From<ChannelError> for SparkError {
    fn from(e: ChannelError) -> Self {
        SparkError::Channel(e)
    }
}

impl From<ReattachError> for SparkError {
    fn from(e: ReattachError) -> Self {
        match e {
            ReattachError::Status(s) => SparkError::Server(Box::new(ServerError::from_status(s))),
            ReattachError::ResponseAlreadyReceived { status, .. } => {
                SparkError::ResponseAlreadyReceived(Box::new(ServerError::from_status(status)))
            }
            ReattachError::ServerSideSessionChanged { expected, got } => {
                SparkError::SessionChanged { expected, got }
            }
            ReattachError::SessionMismatch { expected, got } => {
                SparkError::Protocol(format!("response for session {got}, expected {expected}"))
            }
            ReattachError::InvalidOperationId(id) => SparkError::InvalidOperationId(id),
            e @ ReattachError::ZeroIdleTimeout => SparkError::Protocol(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_message_parameters_and_sqlstate() {
        let m = parse_flat_json_object(r#"{"error":"'x'","hint":"a \"q\" \u0041"}"#);
        assert_eq!(m["error"], "'x'");
        assert_eq!(m["hint"], "a \"q\" A");
        assert!(parse_flat_json_object("garbage").is_empty());
        assert!(parse_flat_json_object("{\"unterminated").is_empty());
        assert_eq!(
            sqlstate_from_message("[X] bad. SQLSTATE: 42601").as_deref(),
            Some("42601")
        );
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
}
