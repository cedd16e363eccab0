//! gRPC service config (gRFC A6) from JSON.
//!
//! gRPC clients in other languages read their retry settings from a
//! service config, a JSON document the service's owners publish (in DNS,
//! xDS, or a file). Reading the same document lets a Rust client retry
//! exactly as a Java, Go or C++ client of that service does, without
//! translating it by hand. [`ServiceConfig::from_json`] reads the parts
//! that concern retries, checks them by A6's rules, and
//! [`RetryLayer::from_service_config`](super::RetryLayer::from_service_config)
//! turns them into a layer.

use std::collections::HashSet;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};
use tonic::Code;

use super::hedging_policy::HedgingPolicy;
use super::throttle::RetryThrottle;
use crate::policy::{CodeClassifier, RetryPolicy};

/// A service config that breaks one of A6's rules, or is not JSON.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceConfigError {
    /// Not a JSON document.
    #[error("service config is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A field of the wrong JSON type.
    #[error("{path}: expected {expected}")]
    WrongType {
        /// The field, e.g. `methodConfig[1].retryPolicy.maxAttempts`.
        path: String,
        /// What was expected there.
        expected: &'static str,
    },
    /// A required field is absent.
    #[error("{path}: required")]
    Missing {
        /// The field.
        path: String,
    },
    /// A field whose value breaks a rule.
    #[error("{path}: {value} {reason}")]
    Invalid {
        /// The field.
        path: String,
        /// The value found, as JSON.
        value: String,
        /// The rule it breaks.
        reason: &'static str,
    },
    /// What [`ServiceConfig::from_json_strict`] makes of a
    /// [`ConfigWarning`]: a field no gRPC implementation reads, or a value
    /// that contradicts another.
    #[error("{0}")]
    Strict(ConfigWarning),
}

/// A part of a service config that is read but probably not what its
/// author meant: a field no gRPC implementation reads (a typo such as
/// `retryPolcy` turns retries off), or values that contradict each other.
/// Logged as a warning by [`ServiceConfig::from_json`], kept in
/// [`ServiceConfig::warnings`], and an error under
/// [`ServiceConfig::from_json_strict`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigWarning {
    /// The JSON path of the field, e.g. `methodConfig[0].retryPolcy`.
    pub path: String,
    /// What is wrong, e.g. "unknown field (did you mean `retryPolicy`?)".
    pub message: String,
}

impl ServiceConfigError {
    /// The JSON path of the offending field (`$` for the document itself,
    /// empty for a document that is not JSON).
    pub fn path(&self) -> &str {
        match self {
            ServiceConfigError::Json(_) => "",
            ServiceConfigError::WrongType { path, .. }
            | ServiceConfigError::Missing { path }
            | ServiceConfigError::Invalid { path, .. } => path,
            ServiceConfigError::Strict(w) => &w.path,
        }
    }
}

/// The retry parts of a gRPC service config: the same JSON document
/// grpc-java, grpc-go and grpc-core read, so a Rust client of a service
/// retries as its other clients do.
///
/// ```
/// use tonic_retry::layer::{RetryLayer, ServiceConfig};
/// use tonic_retry::retrying::Retrying;
///
/// let config = ServiceConfig::from_json(r#"{
///   "methodConfig": [{
///     "name": [{"service": "helloworld.Greeter", "method": "SayHello"}],
///     "timeout": "10s",
///     "retryPolicy": {
///       "maxAttempts": 4,
///       "initialBackoff": "0.1s",
///       "maxBackoff": "1s",
///       "backoffMultiplier": 2,
///       "retryableStatusCodes": ["UNAVAILABLE", 10]
///     }
///   }],
///   "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
/// }"#).unwrap();
/// let layer = RetryLayer::from_service_config(&config, Retrying::default());
/// let method = layer.method_config("/helloworld.Greeter/SayHello");
/// assert_eq!(method.retrying().unwrap().policies()[0].max_retries(), Some(3));
///
/// let err = ServiceConfig::from_json(r#"{"methodConfig": [{"retryPolicy": {
///   "maxAttempts": 1, "initialBackoff": "1s", "maxBackoff": "1s",
///   "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#).unwrap_err();
/// assert_eq!(err.path(), "methodConfig[0].retryPolicy.maxAttempts");
/// ```
///
/// What is read, and the rules applied (each broken rule is a
/// [`ServiceConfigError`] naming the JSON path):
///
/// | field | rule |
/// |---|---|
/// | `methodConfig[i].name[j]` | `service` and `method` strings; `method` needs a `service`; no name twice. `{}` is the default for every method, `{"service": s}` every method of `s` |
/// | `methodConfig[i].timeout` | a proto-JSON duration (`"1.5s"`), not negative, at most proto's 10 000 years (a deadline past the clock's range is none) |
/// | `methodConfig[i].retryPolicy` | not together with `hedgingPolicy` |
/// | `….maxAttempts` | required, an integer ≥ 2; more than 5 is read as 5 (A6's cap) |
/// | `….initialBackoff`, `….maxBackoff` | required, durations > 0 and at most 365 days; `maxBackoff` below `initialBackoff` is a warning |
/// | `….backoffMultiplier` | required, a number > 0 |
/// | `….retryableStatusCodes` | required, non-empty; names (`"UNAVAILABLE"`) or numbers (`14`), not OK |
/// | `methodConfig[i].hedgingPolicy.maxAttempts` | required, an integer ≥ 2; more than 5 is read as 5 (A6's cap) |
/// | `….hedgingDelay` | a duration, `"0s"` allowed (all attempts at once); absent means 0 |
/// | `….nonFatalStatusCodes` | names or numbers, not OK; absent means none |
/// | `retryThrottling.maxTokens` | required, an integer in `1..=1000` |
/// | `retryThrottling.tokenRatio` | required, a number ≥ 0.001 (A6 keeps three decimals) |
///
/// Fields the other gRPC clients read for other purposes
/// (`loadBalancingConfig`, `loadBalancingPolicy`, `healthCheckConfig`,
/// `waitForReady`, the message size limits, C-core's
/// `perAttemptRecvTimeout`) are accepted and ignored. Field names are the
/// camelCase ones that grpc-java, grpc-go and grpc-core all read.
///
/// # Unknown fields and contradictions
///
/// grpc-go, grpc-java and grpc-core ignore fields they do not know, so
/// that a config written for newer clients still works with older ones;
/// an error here would make this client the one that rejects a config all
/// others accept. Ignoring them silently, though, lets a typo such as
/// `"retryPolcy"` turn retries off unnoticed. So [`from_json`](Self::from_json)
/// accepts the config, logs one warning per such field naming its JSON
/// path (with the known field it most resembles), and keeps them in
/// [`warnings`](Self::warnings); [`from_json_strict`](Self::from_json_strict)
/// makes each an error, for tests and for configs you write yourself. The
/// same goes for values A6 allows but that contradict each other:
/// `maxBackoff` below `initialBackoff` (every wait is then `maxBackoff`).
/// A value A6 forbids (`maxAttempts: -1`) is always an error naming it.
///
/// ```
/// use tonic_retry::layer::ServiceConfig;
///
/// let json = r#"{"methodConfig": [{"name": [{"service": "kv.Store"}],
///   "retryPolcy": {"maxAttempts": 3}}]}"#;
/// let config = ServiceConfig::from_json(json).unwrap();
/// let warning = &config.warnings()[0];
/// assert_eq!(warning.path, "methodConfig[0].retryPolcy");
/// assert!(warning.message.contains("did you mean `retryPolicy`"), "{warning}");
/// let err = ServiceConfig::from_json_strict(json).unwrap_err();
/// assert_eq!(err.path(), "methodConfig[0].retryPolcy");
/// ```
#[derive(Debug)]
pub struct ServiceConfig {
    method_configs: Vec<MethodEntry>,
    retry_throttling: Option<RetryThrottle>,
    warnings: Vec<ConfigWarning>,
}

/// One `methodConfig` entry.
#[derive(Debug, Clone)]
pub struct MethodEntry {
    names: Vec<MethodName>,
    retry_policy: Option<RetryPolicy>,
    hedging_policy: Option<HedgingPolicy>,
    timeout: Option<Duration>,
}

/// One `name` of a `methodConfig` entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MethodName {
    service: Option<String>,
    method: Option<String>,
}

impl MethodName {
    /// The service (`package.Service`); `None` for the default entry.
    pub fn service(&self) -> Option<&str> {
        self.service.as_deref()
    }
    /// The method; `None` for every method of the service.
    pub fn method(&self) -> Option<&str> {
        self.method.as_deref()
    }
}

impl MethodEntry {
    /// The methods this entry applies to.
    pub fn names(&self) -> &[MethodName] {
        &self.names
    }
    /// The `retryPolicy` as a [`RetryPolicy`]: the listed codes only, at
    /// most `maxAttempts - 1` retries, A6's backoff with its ±20 % jitter,
    /// and no `RetryInfo` floor (A6 has none).
    pub fn retry_policy(&self) -> Option<&RetryPolicy> {
        self.retry_policy.as_ref()
    }
    /// The `hedgingPolicy`, if the method is hedged.
    pub fn hedging_policy(&self) -> Option<&HedgingPolicy> {
        self.hedging_policy.as_ref()
    }
    /// The `timeout`: the call's deadline across attempts.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}

impl ServiceConfig {
    /// Read a service config (see [`ServiceConfig`] for the rules); each
    /// [`ConfigWarning`] is logged as a `tracing` warning.
    pub fn from_json(json: &str) -> Result<Self, ServiceConfigError> {
        let config = Self::parse(json)?;
        for w in &config.warnings {
            tracing::warn!(path = %w.path, "service config: {}", w.message);
        }
        Ok(config)
    }

    /// [`from_json`](Self::from_json), with the first [`ConfigWarning`] an
    /// error ([`ServiceConfigError::Strict`]).
    pub fn from_json_strict(json: &str) -> Result<Self, ServiceConfigError> {
        let config = Self::parse(json)?;
        match config.warnings.first() {
            Some(w) => Err(ServiceConfigError::Strict(w.clone())),
            None => Ok(config),
        }
    }

    fn parse(json: &str) -> Result<Self, ServiceConfigError> {
        let doc: Value = serde_json::from_str(json)?;
        let root = object(&doc, "$")?;
        let mut warnings = Vec::new();
        known_fields(root, "", ROOT_FIELDS, &mut warnings);
        let mut method_configs = Vec::new();
        let mut seen = HashSet::new();
        if let Some(list) = root.get("methodConfig") {
            for (i, entry) in array(list, "methodConfig")?.iter().enumerate() {
                let path = format!("methodConfig[{i}]");
                method_configs.push(method_entry(entry, &path, &mut seen, &mut warnings)?);
            }
        }
        let retry_throttling = match root.get("retryThrottling") {
            Some(t) => Some(throttling(t, "retryThrottling", &mut warnings)?),
            None => None,
        };
        Ok(ServiceConfig {
            method_configs,
            retry_throttling,
            warnings,
        })
    }

    /// What was read but probably not meant (see [`ConfigWarning`]).
    pub fn warnings(&self) -> &[ConfigWarning] {
        &self.warnings
    }

    /// The `methodConfig` entries, in order.
    pub fn method_configs(&self) -> &[MethodEntry] {
        &self.method_configs
    }

    /// A fresh (full) token bucket from `retryThrottling`, if present.
    pub fn retry_throttling(&self) -> Option<RetryThrottle> {
        self.retry_throttling.as_ref().map(RetryThrottle::refilled)
    }
}

/// The fields of each object of a service config that some gRPC client
/// reads (those this crate does not use are accepted and ignored).
const ROOT_FIELDS: &[&str] = &[
    "methodConfig",
    "retryThrottling",
    "loadBalancingConfig",
    "loadBalancingPolicy",
    "healthCheckConfig",
];
const METHOD_FIELDS: &[&str] = &[
    "name",
    "timeout",
    "retryPolicy",
    "hedgingPolicy",
    "waitForReady",
    "maxRequestMessageBytes",
    "maxResponseMessageBytes",
];
const NAME_FIELDS: &[&str] = &["service", "method"];
const RETRY_FIELDS: &[&str] = &[
    "maxAttempts",
    "initialBackoff",
    "maxBackoff",
    "backoffMultiplier",
    "retryableStatusCodes",
    "perAttemptRecvTimeout",
];
const HEDGING_FIELDS: &[&str] = &["maxAttempts", "hedgingDelay", "nonFatalStatusCodes"];
const THROTTLING_FIELDS: &[&str] = &["maxTokens", "tokenRatio"];

/// A warning for each field of `obj` not in `known`, naming the known
/// field it most resembles.
fn known_fields(
    obj: &Map<String, Value>,
    path: &str,
    known: &[&str],
    warnings: &mut Vec<ConfigWarning>,
) {
    for key in obj.keys() {
        if known.contains(&key.as_str()) {
            continue;
        }
        let closest = known
            .iter()
            .map(|k| {
                (
                    distance(&key.to_ascii_lowercase(), &k.to_ascii_lowercase()),
                    k,
                )
            })
            .min();
        let message = match closest {
            Some((d, k)) if d <= 3 => format!("unknown field (did you mean `{k}`?), ignored"),
            _ => "unknown field, ignored".to_owned(),
        };
        let path = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        warnings.push(ConfigWarning { path, message });
    }
}

/// Levenshtein distance, for the "did you mean" of an unknown field.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (prev + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

fn method_entry(
    v: &Value,
    path: &str,
    seen: &mut HashSet<MethodName>,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<MethodEntry, ServiceConfigError> {
    let obj = object(v, path)?;
    known_fields(obj, path, METHOD_FIELDS, warnings);
    let mut names = Vec::new();
    if let Some(list) = obj.get("name") {
        let list_path = format!("{path}.name");
        for (j, raw) in array(list, &list_path)?.iter().enumerate() {
            let name_path = format!("{list_path}[{j}]");
            let n = object(raw, &name_path)?;
            known_fields(n, &name_path, NAME_FIELDS, warnings);
            let field = |k| -> Result<Option<String>, ServiceConfigError> {
                let s: Option<String> = optional(n, &name_path, k, "a string")?;
                Ok(s.filter(|s| !s.is_empty()))
            };
            let name = MethodName {
                service: field("service")?,
                method: field("method")?,
            };
            if name.service.is_none() && name.method.is_some() {
                return Err(invalid(
                    &format!("{name_path}.method"),
                    &n["method"],
                    "needs a service",
                ));
            }
            if !seen.insert(name.clone()) {
                return Err(invalid(&name_path, raw, "is named twice"));
            }
            names.push(name);
        }
    }
    let timeout = match obj.get("timeout") {
        Some(t) => Some(duration(t, &format!("{path}.timeout"), true)?),
        None => None,
    };
    let retry_policy = match obj.get("retryPolicy") {
        Some(_) if obj.contains_key("hedgingPolicy") => {
            return Err(invalid(
                path,
                &Value::from("retryPolicy + hedgingPolicy"),
                "may set only one of them",
            ));
        }
        Some(p) => Some(retry_policy(p, &format!("{path}.retryPolicy"), warnings)?),
        None => None,
    };
    let hedging_policy = match obj.get("hedgingPolicy") {
        Some(p) => Some(hedging_policy(
            p,
            &format!("{path}.hedgingPolicy"),
            warnings,
        )?),
        None => None,
    };
    Ok(MethodEntry {
        names,
        retry_policy,
        hedging_policy,
        timeout,
    })
}

/// `maxAttempts`: an integer of at least 2 (more than 5 is read as 5
/// where it is used).
fn max_attempts(obj: &Map<String, Value>, path: &str) -> Result<u32, ServiceConfigError> {
    let n: i64 = required(obj, path, "maxAttempts", "an integer")?;
    let at = format!("{path}.maxAttempts");
    if n < 2 {
        return Err(invalid(&at, &obj["maxAttempts"], "must be at least 2"));
    }
    u32::try_from(n).map_err(|_| invalid(&at, &obj["maxAttempts"], "is out of range"))
}

fn hedging_policy(
    v: &Value,
    path: &str,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<HedgingPolicy, ServiceConfigError> {
    let obj = object(v, path)?;
    known_fields(obj, path, HEDGING_FIELDS, warnings);
    let at = |k: &str| format!("{path}.{k}");
    let max_attempts = max_attempts(obj, path)?;
    let delay = match obj.get("hedgingDelay") {
        Some(d) => duration(d, &at("hedgingDelay"), true)?,
        None => Duration::ZERO,
    };
    let codes = match obj.get("nonFatalStatusCodes") {
        Some(list) => status_codes(list, &at("nonFatalStatusCodes"))?,
        None => Vec::new(),
    };
    let policy = HedgingPolicy::new(max_attempts, delay).map_err(|_| {
        invalid(
            &at("maxAttempts"),
            &obj["maxAttempts"],
            "must be at least 2",
        )
    })?;
    Ok(policy.non_fatal(codes))
}

/// A list of status codes, each by name or number.
fn status_codes(list: &Value, path: &str) -> Result<Vec<Code>, ServiceConfigError> {
    array(list, path)?
        .iter()
        .enumerate()
        .map(|(i, c)| status_code(c, &format!("{path}[{i}]")))
        .collect()
}

fn retry_policy(
    v: &Value,
    path: &str,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<RetryPolicy, ServiceConfigError> {
    let obj = object(v, path)?;
    known_fields(obj, path, RETRY_FIELDS, warnings);
    let at = |k: &str| format!("{path}.{k}");
    let max_attempts = max_attempts(obj, path)?;
    let backoff = |k: &str| match obj.get(k) {
        Some(d) => duration(d, &at(k), false),
        None => Err(ServiceConfigError::Missing { path: at(k) }),
    };
    let initial = backoff("initialBackoff")?;
    let max = backoff("maxBackoff")?;
    if max < initial {
        warnings.push(ConfigWarning {
            path: at("maxBackoff"),
            message: format!(
                "{} is below initialBackoff {}: every wait will be maxBackoff",
                obj["maxBackoff"], obj["initialBackoff"]
            ),
        });
    }
    let multiplier: f64 = required(obj, path, "backoffMultiplier", "a number")?;
    if !(multiplier > 0.0 && multiplier.is_finite()) {
        let v = &obj["backoffMultiplier"];
        return Err(invalid(
            &at("backoffMultiplier"),
            v,
            "must be greater than 0",
        ));
    }
    let codes_path = at("retryableStatusCodes");
    let codes = match obj.get("retryableStatusCodes") {
        Some(list) => status_codes(list, &codes_path)?,
        None => return Err(ServiceConfigError::Missing { path: codes_path }),
    };
    if codes.is_empty() {
        return Err(invalid(
            &codes_path,
            &obj["retryableStatusCodes"],
            "must not be empty",
        ));
    }
    RetryPolicy::builder()
        .name(path)
        .classifier(CodeClassifier::new(codes))
        .max_retries(Some(max_attempts.min(5) - 1))
        // A6: the first wait is min(initialBackoff, maxBackoff) too.
        .initial_backoff(initial.min(max))
        .max_backoff(Some(max))
        .backoff_multiplier(multiplier)
        .proportional_jitter(0.2)
        .recognize_server_retry_delay(false)
        .build()
        .map_err(|e| {
            // Only the backoffs can fail here (the multiplier is checked above).
            let key = match e.field() {
                "max_backoff" => "maxBackoff",
                "backoff_multiplier" => "backoffMultiplier",
                _ => "initialBackoff",
            };
            invalid(&at(key), &obj[key], e.reason())
        })
}

fn throttling(
    v: &Value,
    path: &str,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<RetryThrottle, ServiceConfigError> {
    let obj = object(v, path)?;
    known_fields(obj, path, THROTTLING_FIELDS, warnings);
    let max_tokens: u32 = required(obj, path, "maxTokens", "an integer")?;
    let ratio: f64 = required(obj, path, "tokenRatio", "a number")?;
    RetryThrottle::new(max_tokens, ratio).map_err(|e| {
        let key = if e.field() == "max_tokens" {
            "maxTokens"
        } else {
            "tokenRatio"
        };
        invalid(&format!("{path}.{key}"), &obj[key], e.reason())
    })
}

/// A status code by its canonical name or its number.
fn status_code(v: &Value, path: &str) -> Result<Code, ServiceConfigError> {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    let n = match v {
        Value::String(s) => NAMES.iter().position(|n| n == s),
        Value::Number(n) => n.as_u64().and_then(|n| usize::try_from(n).ok()),
        _ => return Err(wrong(path, "a status code name or number")),
    };
    match n.and_then(|n| i32::try_from(n).ok()) {
        Some(0) => Err(invalid(path, v, "(OK) is not a failure")),
        Some(n @ 1..=16) => Ok(Code::from_i32(n)),
        _ => Err(invalid(path, v, "is not a gRPC status code")),
    }
}

/// A proto-JSON duration: optional `-`, seconds, up to nine decimals, `s`.
fn duration(v: &Value, path: &str, zero_ok: bool) -> Result<Duration, ServiceConfigError> {
    // Proto's own bound on a Duration: 10 000 years.
    const MAX_SECS: u64 = 315_576_000_000;
    let Value::String(s) = v else {
        return Err(wrong(path, "a duration string such as \"0.1s\""));
    };
    let bad = || invalid(path, v, "is not a duration such as \"0.1s\"");
    let body = s.strip_suffix('s').ok_or_else(bad)?;
    let (negative, body) = match body.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, body),
    };
    let (secs, frac) = body.split_once('.').unwrap_or((body, ""));
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    if (secs.is_empty() && frac.is_empty()) || !digits(secs) || !digits(frac) || frac.len() > 9 {
        return Err(bad());
    }
    let secs: u64 = if secs.is_empty() {
        0
    } else {
        secs.parse().map_err(|_| bad())?
    };
    let nanos: u32 = format!("{frac:0<9}").parse().map_err(|_| bad())?;
    if secs > MAX_SECS {
        return Err(invalid(path, v, "is longer than proto's 10 000 years"));
    }
    let d = Duration::new(secs, nanos);
    if negative && !d.is_zero() {
        return Err(invalid(path, v, "is negative"));
    }
    if d.is_zero() && !zero_ok {
        return Err(invalid(path, v, "must be greater than 0"));
    }
    Ok(d)
}

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, ServiceConfigError> {
    v.as_object().ok_or_else(|| wrong(path, "an object"))
}

fn array<'a>(v: &'a Value, path: &str) -> Result<&'a Vec<Value>, ServiceConfigError> {
    v.as_array().ok_or_else(|| wrong(path, "an array"))
}

fn optional<T: for<'de> Deserialize<'de>>(
    obj: &Map<String, Value>,
    path: &str,
    key: &str,
    expected: &'static str,
) -> Result<Option<T>, ServiceConfigError> {
    match obj.get(key) {
        None => Ok(None),
        Some(v) => T::deserialize(v)
            .map(Some)
            .map_err(|_| wrong(&format!("{path}.{key}"), expected)),
    }
}

fn required<T: for<'de> Deserialize<'de>>(
    obj: &Map<String, Value>,
    path: &str,
    key: &str,
    expected: &'static str,
) -> Result<T, ServiceConfigError> {
    optional(obj, path, key, expected)?.ok_or_else(|| ServiceConfigError::Missing {
        path: format!("{path}.{key}"),
    })
}

fn wrong(path: &str, expected: &'static str) -> ServiceConfigError {
    ServiceConfigError::WrongType {
        path: path.to_owned(),
        expected,
    }
}

fn invalid(path: &str, value: &Value, reason: &'static str) -> ServiceConfigError {
    ServiceConfigError::Invalid {
        path: path.to_owned(),
        value: value.to_string(),
        reason,
    }
}

#[cfg(test)]
mod tests;
