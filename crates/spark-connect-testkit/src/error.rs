//! Spark's error encoding: gRPC `INTERNAL`, a `[CLASS] text SQLSTATE: xxxxx`
//! message and a `google.rpc.ErrorInfo` in `grpc-status-details-bin`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetail, ErrorInfo, RetryInfo, StatusExt};

/// The `ErrorInfo.domain` Spark uses.
pub const SPARK_ERROR_DOMAIN: &str = "org.apache.spark";

/// Spark caps the gRPC description at this many characters.
const MAX_MESSAGE_CHARS: usize = 2048;

/// Spark omits `errorClass` and `messageParameters` when the parameter JSON
/// is longer than `spark.connect.grpc.maxMetadataSize` (1024 bytes).
const MAX_METADATA_SIZE: usize = 1024;

/// A server-side Spark exception, encoded into a [`Status`] the way the real
/// Spark Connect server does (`ErrorUtils.buildStatusFromThrowable`). Its
/// `Display` is the gRPC description, [`message`](Self::message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct SparkException {
    /// The Java class hierarchy, most specific first. The first entry is
    /// `ErrorInfo.reason`; the whole list is the `classes` metadata.
    pub classes: Vec<String>,
    /// The error class (condition), e.g. `INVALID_HANDLE.OPERATION_NOT_FOUND`.
    /// `None` for exceptions that are not `SparkThrowable`s.
    pub error_class: Option<String>,
    /// The SQLSTATE, e.g. `HY000`.
    pub sql_state: Option<String>,
    /// The human-readable text, without the `[CLASS]` prefix and the
    /// `SQLSTATE:` suffix.
    pub text: String,
    /// The message parameters (sent as a JSON object).
    pub message_parameters: BTreeMap<String, String>,
}

const SQL_EXCEPTION: [&str; 4] = [
    "org.apache.spark.SparkSQLException",
    "java.sql.SQLException",
    "java.lang.Exception",
    "java.lang.Throwable",
];

impl SparkException {
    /// A `SparkThrowable` with an error class and SQLSTATE, thrown as
    /// `org.apache.spark.SparkException`.
    pub fn new(
        error_class: impl Into<String>,
        sql_state: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        SparkException {
            classes: to_strings(&[
                "org.apache.spark.SparkException",
                "java.lang.Exception",
                "java.lang.Throwable",
            ]),
            error_class: Some(error_class.into()),
            sql_state: Some(sql_state.into()),
            text: text.into(),
            message_parameters: BTreeMap::new(),
        }
    }

    /// A plain Java exception (no error class, no SQLSTATE), e.g.
    /// `java.lang.IllegalArgumentException`.
    pub fn java(class: impl Into<String>, text: impl Into<String>) -> Self {
        SparkException {
            classes: vec![
                class.into(),
                "java.lang.Exception".to_owned(),
                "java.lang.Throwable".to_owned(),
            ],
            error_class: None,
            sql_state: None,
            text: text.into(),
            message_parameters: BTreeMap::new(),
        }
    }

    /// Replaces the Java class hierarchy (most specific first).
    pub fn with_classes<I, S>(mut self, classes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.classes = classes.into_iter().map(Into::into).collect();
        self
    }

    /// Adds one message parameter.
    pub fn with_parameter(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.message_parameters.insert(key.into(), value.into());
        self
    }

    /// The gRPC description: `[CLASS] text SQLSTATE: xxxxx`, capped at 2048
    /// characters like Spark.
    pub fn message(&self) -> String {
        let mut m = String::new();
        // Spark shows no class on legacy error classes.
        if let Some(class) = &self.error_class
            && !class.starts_with("_LEGACY_ERROR_")
        {
            m.push('[');
            m.push_str(class);
            m.push_str("] ");
        }
        m.push_str(&self.text);
        if let Some(state) = &self.sql_state {
            m.push_str(" SQLSTATE: ");
            m.push_str(state);
        }
        if m.chars().count() > MAX_MESSAGE_CHARS {
            // Spark abbreviates with a trailing "..." inside the limit.
            m = m.chars().take(MAX_MESSAGE_CHARS - 3).collect::<String>() + "...";
        }
        m
    }

    /// The `ErrorInfo` Spark attaches, with `errorId` when given.
    pub fn error_info(&self, error_id: Option<&str>) -> ErrorInfo {
        let mut metadata = HashMap::new();
        metadata.insert(
            "classes".to_owned(),
            serde_json::to_string(&self.classes).unwrap_or_default(),
        );
        if let Some(state) = &self.sql_state {
            metadata.insert("sqlState".to_owned(), state.clone());
        }
        let params = serde_json::to_string(&self.message_parameters).unwrap_or_default();
        if let Some(class) = &self.error_class
            && params.len() <= MAX_METADATA_SIZE
        {
            metadata.insert("errorClass".to_owned(), class.clone());
            metadata.insert("messageParameters".to_owned(), params);
        }
        if let Some(id) = error_id {
            metadata.insert("errorId".to_owned(), id.to_owned());
        }
        let reason = self.classes.first().cloned().unwrap_or_default();
        ErrorInfo::new(reason, SPARK_ERROR_DOMAIN, metadata)
    }

    /// Encodes as Spark does: code `INTERNAL`, the formatted message, and
    /// `details[0]` = `ErrorInfo`.
    pub fn to_status(&self, error_id: Option<&str>) -> Status {
        self.to_status_with(Code::Internal, error_id, None)
    }

    /// Like [`to_status`](Self::to_status) with a chosen code and an optional
    /// `RetryInfo` as `details[1]` (Spark's only retryable error has one).
    pub fn to_status_with(
        &self,
        code: Code,
        error_id: Option<&str>,
        retry_delay: Option<Duration>,
    ) -> Status {
        let mut details = vec![ErrorDetail::ErrorInfo(self.error_info(error_id))];
        if let Some(delay) = retry_delay {
            details.push(ErrorDetail::RetryInfo(RetryInfo::new(Some(delay))));
        }
        Status::with_error_details_vec(code, self.message(), details)
    }

    // ---- the error classes the server raises -------------------------------

    fn invalid_handle(sub: &str, handle: &str, tail: &str) -> Self {
        SparkException::new(
            format!("INVALID_HANDLE.{sub}"),
            "HY000",
            format!("The handle {handle} is invalid. {tail}"),
        )
        .with_classes(SQL_EXCEPTION)
        .with_parameter("handle", handle)
    }

    /// `INVALID_HANDLE.FORMAT`: a session or operation id that is not a UUID.
    pub fn invalid_handle_format(handle: &str) -> Self {
        Self::invalid_handle(
            "FORMAT",
            handle,
            "Handle must be an UUID string of the format '00112233-4455-6677-8899-aabbccddeeff'",
        )
    }

    /// `INVALID_HANDLE.SESSION_NOT_FOUND`.
    pub fn session_not_found(session_id: &str) -> Self {
        Self::invalid_handle("SESSION_NOT_FOUND", session_id, "Session not found.")
    }

    /// `INVALID_HANDLE.SESSION_CLOSED`.
    pub fn session_closed(session_id: &str) -> Self {
        Self::invalid_handle("SESSION_CLOSED", session_id, "Session was closed.")
    }

    /// `INVALID_HANDLE.SESSION_CHANGED`: the client observed another
    /// server-side session id (typically: the server restarted).
    pub fn session_changed(session_id: &str) -> Self {
        Self::invalid_handle(
            "SESSION_CHANGED",
            session_id,
            "The existing Spark server driver instance has restarted. Please reconnect.",
        )
    }

    /// `INVALID_HANDLE.OPERATION_NOT_FOUND`.
    pub fn operation_not_found(operation_id: &str) -> Self {
        Self::invalid_handle("OPERATION_NOT_FOUND", operation_id, "Operation not found.")
    }

    /// `INVALID_HANDLE.OPERATION_ALREADY_EXISTS`.
    pub fn operation_already_exists(operation_id: &str) -> Self {
        Self::invalid_handle(
            "OPERATION_ALREADY_EXISTS",
            operation_id,
            "Operation already exists.",
        )
    }

    fn invalid_cursor(sub: &str, tail: &str) -> Self {
        SparkException::new(
            format!("INVALID_CURSOR.{sub}"),
            "HY109",
            format!("The cursor is invalid. {tail}"),
        )
        .with_classes(SQL_EXCEPTION)
    }

    /// `INVALID_CURSOR.DISCONNECTED`: a newer RPC attached to the operation.
    pub fn cursor_disconnected() -> Self {
        Self::invalid_cursor(
            "DISCONNECTED",
            "The cursor has been disconnected by the server.",
        )
    }

    /// `INVALID_CURSOR.POSITION_NOT_FOUND`: the response id was never produced.
    pub fn position_not_found(response_id: &str) -> Self {
        Self::invalid_cursor(
            "POSITION_NOT_FOUND",
            &format!("The cursor position id {response_id} is not found."),
        )
        .with_parameter("responseId", response_id)
    }

    /// `INVALID_CURSOR.POSITION_NOT_AVAILABLE`: the response was evicted.
    pub fn position_not_available(response_id: &str, index: u64) -> Self {
        Self::invalid_cursor(
            "POSITION_NOT_AVAILABLE",
            &format!(
                "The cursor position id {response_id} is no longer available at index {index}."
            ),
        )
        .with_parameter("responseId", response_id)
        .with_parameter("index", index.to_string())
    }

    /// `INVALID_CURSOR.NOT_REATTACHABLE`.
    pub fn not_reattachable() -> Self {
        Self::invalid_cursor("NOT_REATTACHABLE", "The cursor is not reattachable.")
    }

    /// `OPERATION_CANCELED` (interrupt, ReleaseAll or session close).
    pub fn operation_canceled() -> Self {
        SparkException::new(
            "OPERATION_CANCELED",
            "HY008",
            "Operation has been canceled.",
        )
    }

    /// `PARSE_SYNTAX_ERROR` at the given token (`'tok'` or `end of input`).
    pub fn parse_syntax_error(near: &str) -> Self {
        SparkException::new(
            "PARSE_SYNTAX_ERROR",
            "42601",
            format!("Syntax error at or near {near}."),
        )
        .with_classes(analysis_exception(
            "org.apache.spark.sql.catalyst.parser.ParseException",
        ))
        .with_parameter("error", near)
        .with_parameter("hint", "")
    }

    /// `SQL_CONF_NOT_FOUND`: `conf.get` of a key that is not set.
    pub fn conf_not_found(key: &str) -> Self {
        SparkException::new(
            "SQL_CONF_NOT_FOUND",
            "42K0I",
            format!(
                "The SQL config \"{key}\" cannot be found. Please verify that the config exists."
            ),
        )
        .with_classes([
            "org.apache.spark.SparkNoSuchElementException",
            "java.util.NoSuchElementException",
            "java.lang.RuntimeException",
            "java.lang.Exception",
            "java.lang.Throwable",
        ])
        .with_parameter("sqlConf", format!("\"{key}\""))
    }

    /// Spark Connect's `InvalidPlanInput` with a plain message: condition
    /// `INTERNAL_ERROR`, SQLSTATE `XX000` (e.g. a cached local relation whose
    /// artifact the session does not hold).
    pub fn invalid_plan_input(message: &str) -> Self {
        SparkException::new("INTERNAL_ERROR", "XX000", message)
            .with_classes([
                "org.apache.spark.sql.connect.common.InvalidPlanInput",
                "java.lang.Exception",
                "java.lang.Throwable",
            ])
            .with_parameter("message", message)
    }

    /// `TABLE_OR_VIEW_NOT_FOUND`: SQL reading a table the session does not
    /// have (Spark also appends the position and the unresolved plan).
    pub fn table_or_view_not_found(name: &str) -> Self {
        let search_path = "[`system`.`builtin`, `system`.`session`, `spark_catalog`.`default`]";
        SparkException::new(
            "TABLE_OR_VIEW_NOT_FOUND",
            "42P01",
            format!(
                "The table or view `{name}` cannot be found. Verify the spelling and correctness of the schema and catalog.\n\
                 Search path: {search_path}.\n\
                 If you did not qualify the name with a schema, verify the current_schema() output, or qualify the name with the correct schema and catalog.\n\
                 To tolerate the error on drop use DROP VIEW IF EXISTS or DROP TABLE IF EXISTS."
            ),
        )
        .with_classes(analysis_exception(
            "org.apache.spark.sql.catalyst.ExtendedAnalysisException",
        ))
        .with_parameter("relationName", format!("`{name}`"))
        .with_parameter("searchPath", search_path)
    }

    /// `TEMP_TABLE_OR_VIEW_ALREADY_EXISTS`: a temporary view created without
    /// `replace` under a name the session has.
    pub fn temp_view_already_exists(name: &str) -> Self {
        SparkException::new(
            "TEMP_TABLE_OR_VIEW_ALREADY_EXISTS",
            "42P07",
            format!(
                "Cannot create the temporary view `{name}` because it already exists.\n\
                 Choose a different name, drop or replace the existing view."
            ),
        )
        .with_classes(analysis_exception(
            "org.apache.spark.sql.catalyst.analysis.TempTableAlreadyExistsException",
        ))
        .with_parameter("relationName", format!("`{name}`"))
    }

    /// `_LEGACY_ERROR_TEMP_1321`: a view name Spark cannot parse (no
    /// SQLSTATE, as in Spark).
    pub fn invalid_view_name(name: &str) -> Self {
        let mut e = SparkException::new(
            "_LEGACY_ERROR_TEMP_1321",
            "",
            format!("Invalid view name: {name}."),
        )
        .with_classes(ANALYSIS_EXCEPTION)
        .with_parameter("viewName", name);
        e.sql_state = None;
        e
    }

    /// `ARTIFACT_ALREADY_EXISTS`: AddArtifacts of a name the session holds
    /// with other content (`cache/` artifacts are replaced instead).
    pub fn artifact_already_exists(path: &str) -> Self {
        SparkException::new(
            "ARTIFACT_ALREADY_EXISTS",
            "42713",
            format!(
                "The artifact {path} already exists. Please choose a different name for the new artifact because it cannot be overwritten."
            ),
        )
        .with_classes(RUNTIME_EXCEPTION)
        .with_parameter("normalizedRemoteRelativePath", path)
    }

    /// `INVALID_ARTIFACT_PATH`: an artifact name that is absolute or leaves
    /// the session's directory.
    pub fn invalid_artifact_path(name: &str) -> Self {
        SparkException::new(
            "INVALID_ARTIFACT_PATH",
            "22023",
            format!(
                "Artifact with name {name} is invalid. The name must be a relative path and cannot reference parent/sibling/nephew directories."
            ),
        )
        .with_classes(RUNTIME_EXCEPTION)
        .with_parameter("name", name)
    }
}

const RUNTIME_EXCEPTION: [&str; 4] = [
    "org.apache.spark.SparkRuntimeException",
    "java.lang.RuntimeException",
    "java.lang.Exception",
    "java.lang.Throwable",
];

const ANALYSIS_EXCEPTION: [&str; 3] = [
    "org.apache.spark.sql.AnalysisException",
    "java.lang.Exception",
    "java.lang.Throwable",
];

/// A subclass of `AnalysisException`, then its ancestors.
fn analysis_exception(class: &str) -> Vec<&str> {
    let mut classes = vec![class];
    classes.extend(ANALYSIS_EXCEPTION);
    classes
}

fn to_strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| (*s).to_owned()).collect()
}

/// The error the test server raises for what it does not implement.
pub(crate) fn unsupported(what: &str) -> SparkException {
    SparkException::java(
        "java.lang.UnsupportedOperationException",
        format!("The spark-connect-retry test server does not implement {what}."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_and_error_info() {
        let e = SparkException::operation_not_found("abc");
        assert_eq!(
            e.message(),
            "[INVALID_HANDLE.OPERATION_NOT_FOUND] The handle abc is invalid. Operation not found. SQLSTATE: HY000"
        );
        let info = e.error_info(Some("eid"));
        assert_eq!(info.reason, "org.apache.spark.SparkSQLException");
        assert_eq!(info.domain, "org.apache.spark");
        assert_eq!(
            info.metadata["errorClass"],
            "INVALID_HANDLE.OPERATION_NOT_FOUND"
        );
        assert_eq!(info.metadata["messageParameters"], r#"{"handle":"abc"}"#);
        assert_eq!(info.metadata["errorId"], "eid");
        assert!(info.metadata["classes"].starts_with(r#"["org.apache.spark.SparkSQLException","#));
    }

    #[test]
    fn json_escapes() {
        let mut m = BTreeMap::new();
        m.insert("a\"b".to_owned(), "x\\y\n".to_owned());
        m.insert("c".to_owned(), "\r\u{8}\u{c}😀".to_owned());
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(text, r#"{"a\"b":"x\\y\n","c":"\r\b\f😀"}"#);
        let back: BTreeMap<String, String> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, m);
    }
}
