//! The fault script: a TOML file a person writes by hand, read into the
//! server's settings and a list of faults before the server starts.
//!
//! Pure: text in, a [`Script`] or a [`ScriptError`] naming the line and the
//! field out. Every fault of the Rust API (`spark_connect_testkit::Fault`)
//! has a `kind`; `rpc`, `times`, `after_responses` / `after_requests` and
//! `retry_info_ms` refine it as the builder methods of the same names do.
//! Unknown fields, fields that do not apply to a kind and values of the wrong
//! type are errors, so a typo never runs a different scenario.

use std::ops::Range;
use std::time::Duration;

use serde::Deserialize;
use spark_connect_testkit::Rpc;
use toml::Spanned;
use tonic::Code;

/// A parsed script: the server's settings, the faults in the order they are
/// pushed, and what a correct client returns (read by the scenario runners,
/// not by the server).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Script {
    pub(crate) server: ServerSpec,
    pub(crate) faults: Vec<FaultSpec>,
    pub(crate) expect: Option<ExpectSpec>,
}

/// `[server]`: the `TestServerBuilder` settings, all optional.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerSpec {
    pub(crate) rows_per_batch: Option<u64>,
    pub(crate) retry_buffer_bytes: Option<usize>,
    pub(crate) max_responses_per_stream: Option<u64>,
    pub(crate) max_bytes_per_stream: Option<u64>,
    pub(crate) max_stream_duration_ms: Option<u64>,
    pub(crate) batch_delay_ms: Option<u64>,
    pub(crate) max_chunk_bytes: Option<usize>,
    pub(crate) execution_progress: Option<bool>,
    pub(crate) schema_response: Option<bool>,
    pub(crate) token: Option<Secret>,
    pub(crate) spark_version: Option<String>,
}

/// A token: compared and used, never shown by `Debug`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub(crate) struct Secret(pub(crate) String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// `[expect]`: what a correct client returns for `query`: `rows` rows (the
/// rows of `range(rows)`, each once, in order), or an error whose message
/// names `error`; and, with `min_seconds`, not sooner (a backoff honoured).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExpectSpec {
    pub(crate) query: String,
    pub(crate) rows: Option<u64>,
    pub(crate) error: Option<String>,
    pub(crate) min_seconds: Option<f64>,
}

/// One `[[fault]]`, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FaultSpec {
    /// The line of its `kind`.
    pub(crate) line: usize,
    pub(crate) action: Action,
    pub(crate) rpc: Rpc,
    pub(crate) times: u32,
    pub(crate) after: Option<u32>,
    pub(crate) retry_info: Option<Duration>,
}

/// What a fault does (`kind` and the fields that go with it).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    Status {
        code: Code,
        message: String,
    },
    Unavailable,
    Spark {
        error_class: String,
        sql_state: String,
        message: String,
    },
    SessionNotFound,
    OperationNotFound,
    Reset,
    LoseRequest,
    Stall(Duration),
    StallForever,
    BadStatusDetails,
    CorruptChunk,
    Restart,
}

/// A script that cannot run: where, which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: field `{field}`: {message}")]
pub(crate) struct ScriptError {
    /// 1-based.
    pub(crate) line: usize,
    pub(crate) field: String,
    pub(crate) message: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScript {
    #[serde(default)]
    server: ServerSpec,
    #[serde(default)]
    fault: Vec<RawFault>,
    expect: Option<ExpectSpec>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Status,
    Unavailable,
    Spark,
    SessionNotFound,
    OperationNotFound,
    Reset,
    LoseRequest,
    Stall,
    StallForever,
    BadStatusDetails,
    CorruptChunk,
    Restart,
}

/// gRPC status codes as gRPC spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum CodeName {
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    kind: Spanned<Kind>,
    rpc: Option<Spanned<Rpc>>,
    times: Option<Spanned<u32>>,
    after_responses: Option<Spanned<u32>>,
    after_requests: Option<Spanned<u32>>,
    retry_info_ms: Option<Spanned<u64>>,
    code: Option<Spanned<CodeName>>,
    message: Option<Spanned<String>>,
    error_class: Option<Spanned<String>>,
    sql_state: Option<Spanned<String>>,
    duration_ms: Option<Spanned<u64>>,
}

/// Reads a script.
pub(crate) fn parse(text: &str) -> Result<Script, ScriptError> {
    let raw: RawScript = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
    let faults = raw
        .fault
        .into_iter()
        .map(|f| check_fault(text, f))
        .collect::<Result<_, _>>()?;
    Ok(Script {
        server: raw.server,
        faults,
        expect: raw.expect,
    })
}

/// The 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// A parse error of the `toml` crate, with its line and the key written on
/// that line (its messages name unknown and missing fields themselves).
fn toml_error(text: &str, e: &toml::de::Error) -> ScriptError {
    let start = e.span().map_or(0, |s| s.start);
    let line = line_of(text, start);
    let key = text
        .lines()
        .nth(line - 1)
        .and_then(|l| l.split_once('='))
        .map(|(k, _)| k.trim().trim_matches('"').to_owned())
        .filter(|k| !k.is_empty() && !k.starts_with('['));
    let message = e.message().trim().to_owned();
    let field = key.unwrap_or_else(|| {
        // "missing field `kind`" and the like name it in backquotes.
        message
            .split('`')
            .nth(1)
            .map_or_else(|| "(none)".to_owned(), str::to_owned)
    });
    ScriptError {
        line,
        field,
        message,
    }
}

fn error_at(text: &str, span: Range<usize>, field: &str, message: String) -> ScriptError {
    ScriptError {
        line: line_of(text, span.start),
        field: field.to_owned(),
        message,
    }
}

/// Checks one fault: the fields its kind needs are there, the others are
/// not, and the numbers make sense.
fn check_fault(text: &str, f: RawFault) -> Result<FaultSpec, ScriptError> {
    let kind = *f.kind.get_ref();
    let kind_span = f.kind.span();
    let kind_name = kind_label(kind);
    let needs = |field: &str| {
        error_at(
            text,
            kind_span.clone(),
            field,
            format!("kind = \"{kind_name}\" needs `{field}`"),
        )
    };
    let not_for = |field: &str, span: Range<usize>| {
        error_at(
            text,
            span,
            field,
            format!("does not apply to kind = \"{kind_name}\""),
        )
    };
    // Fields only some kinds take: refuse them elsewhere.
    let fails = matches!(
        kind,
        Kind::Status
            | Kind::Unavailable
            | Kind::Spark
            | Kind::SessionNotFound
            | Kind::OperationNotFound
    );
    let optional: [(&str, Option<Range<usize>>, bool); 6] = [
        (
            "code",
            f.code.as_ref().map(Spanned::span),
            kind == Kind::Status,
        ),
        (
            "message",
            f.message.as_ref().map(Spanned::span),
            matches!(kind, Kind::Status | Kind::Spark),
        ),
        (
            "error_class",
            f.error_class.as_ref().map(Spanned::span),
            kind == Kind::Spark,
        ),
        (
            "sql_state",
            f.sql_state.as_ref().map(Spanned::span),
            kind == Kind::Spark,
        ),
        (
            "duration_ms",
            f.duration_ms.as_ref().map(Spanned::span),
            kind == Kind::Stall,
        ),
        (
            "retry_info_ms",
            f.retry_info_ms.as_ref().map(Spanned::span),
            fails,
        ),
    ];
    for (field, span, allowed) in optional {
        if let (Some(span), false) = (span, allowed) {
            return Err(not_for(field, span));
        }
    }
    let value = |s: Option<Spanned<String>>| s.map(Spanned::into_inner);
    let action = match kind {
        Kind::Status => Action::Status {
            code: code(*f.code.ok_or_else(|| needs("code"))?.get_ref()),
            message: value(f.message).unwrap_or_else(|| "injected fault".to_owned()),
        },
        Kind::Unavailable => Action::Unavailable,
        Kind::Spark => Action::Spark {
            error_class: value(f.error_class).ok_or_else(|| needs("error_class"))?,
            sql_state: value(f.sql_state).ok_or_else(|| needs("sql_state"))?,
            message: value(f.message).unwrap_or_else(|| "Injected fault.".to_owned()),
        },
        Kind::SessionNotFound => Action::SessionNotFound,
        Kind::OperationNotFound => Action::OperationNotFound,
        Kind::Reset => Action::Reset,
        Kind::LoseRequest => Action::LoseRequest,
        Kind::Stall => {
            let d = f.duration_ms.ok_or_else(|| needs("duration_ms"))?;
            Action::Stall(Duration::from_millis(*d.get_ref()))
        }
        Kind::StallForever => Action::StallForever,
        Kind::BadStatusDetails => Action::BadStatusDetails,
        Kind::CorruptChunk => Action::CorruptChunk,
        Kind::Restart => Action::Restart,
    };
    let rpc = match (&f.rpc, kind) {
        (None, Kind::CorruptChunk) => Rpc::AddArtifacts,
        (None, _) => Rpc::Any,
        (Some(r), Kind::CorruptChunk) if *r.get_ref() != Rpc::AddArtifacts => {
            return Err(error_at(
                text,
                r.span(),
                "rpc",
                "kind = \"corrupt_chunk\" only acts on rpc = \"AddArtifacts\"".to_owned(),
            ));
        }
        (Some(r), _) => *r.get_ref(),
    };
    let times = match f.times {
        Some(t) if *t.get_ref() == 0 => {
            return Err(error_at(
                text,
                t.span(),
                "times",
                "must be at least 1".to_owned(),
            ));
        }
        Some(t) => *t.get_ref(),
        None => 1,
    };
    let after = match (f.after_responses, f.after_requests) {
        (Some(_), Some(r)) => {
            return Err(error_at(
                text,
                r.span(),
                "after_requests",
                "give either after_responses or after_requests, not both".to_owned(),
            ));
        }
        (Some(a), None) | (None, Some(a)) => Some(*a.get_ref()),
        (None, None) => None,
    };
    Ok(FaultSpec {
        line: line_of(text, kind_span.start),
        action,
        rpc,
        times,
        after,
        retry_info: f
            .retry_info_ms
            .map(|ms| Duration::from_millis(*ms.get_ref())),
    })
}

fn kind_label(kind: Kind) -> &'static str {
    match kind {
        Kind::Status => "status",
        Kind::Unavailable => "unavailable",
        Kind::Spark => "spark",
        Kind::SessionNotFound => "session_not_found",
        Kind::OperationNotFound => "operation_not_found",
        Kind::Reset => "reset",
        Kind::LoseRequest => "lose_request",
        Kind::Stall => "stall",
        Kind::StallForever => "stall_forever",
        Kind::BadStatusDetails => "bad_status_details",
        Kind::CorruptChunk => "corrupt_chunk",
        Kind::Restart => "restart",
    }
}

fn code(name: CodeName) -> Code {
    match name {
        CodeName::Cancelled => Code::Cancelled,
        CodeName::Unknown => Code::Unknown,
        CodeName::InvalidArgument => Code::InvalidArgument,
        CodeName::DeadlineExceeded => Code::DeadlineExceeded,
        CodeName::NotFound => Code::NotFound,
        CodeName::AlreadyExists => Code::AlreadyExists,
        CodeName::PermissionDenied => Code::PermissionDenied,
        CodeName::ResourceExhausted => Code::ResourceExhausted,
        CodeName::FailedPrecondition => Code::FailedPrecondition,
        CodeName::Aborted => Code::Aborted,
        CodeName::OutOfRange => Code::OutOfRange,
        CodeName::Unimplemented => Code::Unimplemented,
        CodeName::Internal => Code::Internal,
        CodeName::Unavailable => Code::Unavailable,
        CodeName::DataLoss => Code::DataLoss,
        CodeName::Unauthenticated => Code::Unauthenticated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(body: &str) -> Result<FaultSpec, ScriptError> {
        parse(&format!("[[fault]]\n{body}\n")).map(|s| s.faults[0].clone())
    }

    fn err(text: &str) -> (usize, String) {
        let e = parse(text).unwrap_err();
        (e.line, e.field)
    }

    #[test]
    fn every_fault_kind_parses() {
        let cases: Vec<(&str, Action)> = vec![
            (
                "kind = \"status\"\ncode = \"RESOURCE_EXHAUSTED\"\nmessage = \"busy\"",
                Action::Status {
                    code: Code::ResourceExhausted,
                    message: "busy".into(),
                },
            ),
            ("kind = \"unavailable\"", Action::Unavailable),
            (
                "kind = \"spark\"\nerror_class = \"INVALID_CURSOR.DISCONNECTED\"\nsql_state = \"HY109\"",
                Action::Spark {
                    error_class: "INVALID_CURSOR.DISCONNECTED".into(),
                    sql_state: "HY109".into(),
                    message: "Injected fault.".into(),
                },
            ),
            ("kind = \"session_not_found\"", Action::SessionNotFound),
            ("kind = \"operation_not_found\"", Action::OperationNotFound),
            ("kind = \"reset\"", Action::Reset),
            ("kind = \"lose_request\"", Action::LoseRequest),
            (
                "kind = \"stall\"\nduration_ms = 250",
                Action::Stall(Duration::from_millis(250)),
            ),
            ("kind = \"stall_forever\"", Action::StallForever),
            ("kind = \"bad_status_details\"", Action::BadStatusDetails),
            ("kind = \"corrupt_chunk\"", Action::CorruptChunk),
            ("kind = \"restart\"", Action::Restart),
        ];
        for (body, action) in cases {
            let f = one(body).unwrap_or_else(|e| panic!("{body}: {e}"));
            assert_eq!(f.action, action, "{body}");
            assert_eq!((f.line, f.times, f.after, f.retry_info), (2, 1, None, None));
            let expected_rpc = if action == Action::CorruptChunk {
                Rpc::AddArtifacts
            } else {
                Rpc::Any
            };
            assert_eq!(f.rpc, expected_rpc);
            // The Rust API's fault, refined the same way.
            assert_eq!(f.to_fault().rpc(), expected_rpc);
        }
    }

    #[test]
    fn refinements_match_the_builder_methods() {
        let f = one(
            "kind = \"unavailable\"\nrpc = \"ReattachExecute\"\ntimes = 3\nafter_responses = 7\nretry_info_ms = 300",
        )
        .unwrap();
        assert_eq!(
            (f.rpc, f.times, f.after, f.retry_info),
            (
                Rpc::ReattachExecute,
                3,
                Some(7),
                Some(Duration::from_millis(300))
            )
        );
        let debug = format!("{:?}", f.to_fault());
        assert!(
            debug.contains("times: 3") && debug.contains("after: Some(7)"),
            "{debug}"
        );
        let f = one("kind = \"reset\"\nrpc = \"AddArtifacts\"\nafter_requests = 2").unwrap();
        assert_eq!((f.rpc, f.after), (Rpc::AddArtifacts, Some(2)));
    }

    #[test]
    fn server_settings_and_expectations_parse() {
        let s = parse(
            "[server]\nrows_per_batch = 4096\nmax_bytes_per_stream = 4194304\ntoken = \"s3cret\"\n\
             [expect]\nquery = \"SELECT 1\"\nrows = 1\n",
        )
        .unwrap();
        assert_eq!(s.server.rows_per_batch, Some(4096));
        assert_eq!(s.server.max_bytes_per_stream, Some(4 << 20));
        assert!(
            !format!("{s:?}").contains("s3cret"),
            "a token never shows in Debug"
        );
        assert_eq!(s.expect.unwrap().rows, Some(1));
        assert_eq!(parse("").unwrap(), Script::default());
    }

    #[test]
    fn malformed_scripts_name_line_and_field() {
        // An unknown field.
        assert_eq!(
            err("[[fault]]\nkind = \"reset\"\naftr_responses = 3\n"),
            (3, "aftr_responses".into())
        );
        assert_eq!(
            err("[server]\n\nrows_per_btach = 1\n"),
            (3, "rows_per_btach".into())
        );
        // An unknown kind, RPC or code.
        assert_eq!(err("[[fault]]\nkind = \"explode\"\n"), (2, "kind".into()));
        assert_eq!(
            err("[[fault]]\nkind = \"reset\"\nrpc = \"Execute\"\n"),
            (3, "rpc".into())
        );
        assert_eq!(
            err("[[fault]]\nkind = \"status\"\ncode = \"unavailable\"\n"),
            (3, "code".into())
        );
        // The wrong type.
        assert_eq!(
            err("[[fault]]\nkind = \"reset\"\ntimes = \"two\"\n"),
            (3, "times".into())
        );
        assert_eq!(
            err("[server]\nrows_per_batch = -1\n"),
            (2, "rows_per_batch".into())
        );
        // A missing field: the kind's line.
        assert_eq!(err("[[fault]]\nrpc = \"Config\"\n"), (1, "kind".into()));
        assert_eq!(err("\n[[fault]]\nkind = \"status\"\n"), (3, "code".into()));
        assert_eq!(
            err("[[fault]]\nkind = \"stall\"\n"),
            (2, "duration_ms".into())
        );
        assert_eq!(
            err("[[fault]]\nkind = \"spark\"\nsql_state = \"HY000\"\n"),
            (2, "error_class".into())
        );
        // A field the kind does not take.
        assert_eq!(
            err("[[fault]]\nkind = \"reset\"\nretry_info_ms = 5\n"),
            (3, "retry_info_ms".into())
        );
        assert_eq!(
            err("[[fault]]\nkind = \"reset\"\ncode = \"ABORTED\"\n"),
            (3, "code".into())
        );
        assert_eq!(
            err("[[fault]]\nkind = \"stall_forever\"\nduration_ms = 5\n"),
            (3, "duration_ms".into())
        );
        // Values that make no sense.
        assert_eq!(
            err("[[fault]]\nkind = \"reset\"\ntimes = 0\n"),
            (3, "times".into())
        );
        assert_eq!(
            err("[[fault]]\nkind = \"reset\"\nafter_responses = 1\nafter_requests = 1\n"),
            (4, "after_requests".into())
        );
        assert_eq!(
            err("[[fault]]\nkind = \"corrupt_chunk\"\nrpc = \"Config\"\n"),
            (3, "rpc".into())
        );
        // Not TOML at all.
        assert_eq!(err("[server\n").0, 1);
        // A top-level table that does not exist.
        assert_eq!(err("[servers]\nrows_per_batch = 1\n").0, 1);
        // The message says what is wrong.
        let e = parse("[[fault]]\nkind = \"reset\"\naftr_responses = 3\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("line 3: field `aftr_responses`: unknown field"),
            "{e}"
        );
    }

    #[test]
    fn shipped_scenarios_parse() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let text = std::fs::read_to_string(&path).unwrap();
                let script = parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert!(script.expect.is_some(), "{}: no [expect]", path.display());
                n += 1;
            }
        }
        assert!(n >= 5, "{n} scenarios");
    }
}
