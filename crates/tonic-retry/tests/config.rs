//! gRPC service configs (gRFC A6) read by `ServiceConfig::from_json`:
//! documents in the forms grpc-java, grpc-go and grpc-core accept (written
//! for these tests), and each validation rule broken once, with the typed
//! error and the JSON path it names.

use std::time::Duration;

use tonic::{Code, Status};
use tonic_retry::layer::{RetryLayer, ServiceConfig, ServiceConfigError};
use tonic_retry::policy::Failure;
use tonic_retry::retrying::Retrying;

/// The shape of A6's own example: one service-wide entry, throttling, and
/// the fields a retry layer does not use (they are accepted and ignored).
const SERVICE_WIDE: &str = r#"{
  "loadBalancingConfig": [{"round_robin": {}}],
  "methodConfig": [{
    "name": [{"service": "echo.Echo"}],
    "waitForReady": true,
    "timeout": "2.5s",
    "maxRequestMessageBytes": 1048576,
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "0.1s",
      "maxBackoff": "1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]
    }
  }],
  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
}"#;

/// Several entries: one method, the default (`{}`), codes as numbers, a
/// fraction without a leading digit, and maxAttempts above A6's cap.
const PER_METHOD: &str = r#"{
  "methodConfig": [
    {
      "name": [{"service": "echo.Echo", "method": "Write"}],
      "timeout": "0.000001s"
    },
    {
      "name": [{"service": "echo.Echo", "method": "Read"}, {"service": "kv.Store", "method": "Get"}],
      "retryPolicy": {
        "maxAttempts": 9,
        "initialBackoff": ".05s",
        "maxBackoff": "30s",
        "backoffMultiplier": 1.5,
        "retryableStatusCodes": [14, "ABORTED", 4]
      }
    },
    {
      "name": [{}],
      "timeout": "60s"
    }
  ]
}"#;

#[test]
fn a_service_wide_entry_with_throttling() {
    let config = ServiceConfig::from_json(SERVICE_WIDE).unwrap();
    let [entry] = config.method_configs() else {
        panic!("one entry")
    };
    assert_eq!(entry.names().len(), 1);
    assert_eq!(entry.names()[0].service(), Some("echo.Echo"));
    assert_eq!(entry.names()[0].method(), None);
    assert_eq!(entry.timeout(), Some(Duration::from_millis(2500)));
    let p = entry.retry_policy().unwrap();
    assert_eq!(p.max_retries(), Some(3));
    assert_eq!(p.initial_backoff(), Duration::from_millis(100));
    assert_eq!(p.max_backoff(), Some(Duration::from_secs(1)));
    assert_eq!(p.backoff_multiplier(), 2.0);
    assert_eq!(p.jitter_factor(), 0.2);
    assert!(!p.recognize_server_retry_delay());
    assert!(p.can_retry(&Failure::new(&Status::unavailable(""))));
    assert!(p.can_retry(&Failure::new(&Status::resource_exhausted(""))));
    assert!(!p.can_retry(&Failure::new(&Status::aborted(""))));
    let t = config.retry_throttling().unwrap();
    assert_eq!(t.tokens(), 10.0);

    // The layer: every method of the service, none elsewhere.
    let layer = RetryLayer::from_service_config(&config, Retrying::default());
    let m = layer.method_config("/echo.Echo/Anything");
    assert!(m.is_idempotent());
    assert_eq!(m.timeout(), Some(Duration::from_millis(2500)));
    assert_eq!(m.retrying().unwrap().policies()[0].max_retries(), Some(3));
    let other = layer.method_config("/other.Svc/M");
    assert!(!other.is_idempotent() && other.retrying().is_none());
    assert!(
        layer.retrying().policies().is_empty(),
        "unnamed: no retries"
    );
    assert_eq!(layer.throttle_handle().unwrap().tokens(), 10.0);
}

#[test]
fn per_method_entries_and_the_default() {
    let config = ServiceConfig::from_json(PER_METHOD).unwrap();
    let entries = config.method_configs();
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[0].timeout(), Some(Duration::from_micros(1)));
    assert!(entries[0].retry_policy().is_none());
    let p = entries[1].retry_policy().unwrap();
    assert_eq!(p.max_retries(), Some(4), "maxAttempts 9 is capped at 5");
    assert_eq!(p.initial_backoff(), Duration::from_millis(50));
    for code in [Code::Unavailable, Code::Aborted, Code::DeadlineExceeded] {
        assert!(
            p.can_retry(&Failure::new(&Status::new(code, ""))),
            "{code:?}"
        );
    }
    assert!(config.retry_throttling().is_none());

    let layer = RetryLayer::from_service_config(&config, Retrying::default());
    assert!(layer.method_config("/kv.Store/Get").retrying().is_some());
    assert!(layer.method_config("/echo.Echo/Read").is_idempotent());
    let write = layer.method_config("/echo.Echo/Write");
    assert!(!write.is_idempotent());
    assert_eq!(write.timeout(), Some(Duration::from_micros(1)));
    // Not named: the default entry's timeout, no retries.
    let put = layer.method_config("/kv.Store/Put");
    assert_eq!(put.timeout(), Some(Duration::from_secs(60)));
    assert!(put.retrying().is_none());
}

#[test]
fn an_empty_document_retries_nothing() {
    let config = ServiceConfig::from_json("{}").unwrap();
    assert!(config.method_configs().is_empty());
    let layer = RetryLayer::from_service_config(&config, Retrying::default());
    assert!(layer.retrying().policies().is_empty());
}

fn policy_with(field: &str, value: &str) -> String {
    let mut fields = vec![
        ("maxAttempts", "3"),
        ("initialBackoff", "\"0.1s\""),
        ("maxBackoff", "\"1s\""),
        ("backoffMultiplier", "2"),
        ("retryableStatusCodes", "[\"UNAVAILABLE\"]"),
    ];
    fields.retain(|(k, _)| *k != field);
    if !value.is_empty() {
        fields.push((field, value));
    }
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("\"{k}\": {v}"))
        .collect();
    format!(
        r#"{{"methodConfig": [{{"name": [{{"service": "a.A"}}]}},
            {{"name": [{{"service": "b.B"}}], "retryPolicy": {{{}}}}}]}}"#,
        body.join(", ")
    )
}

#[derive(Debug, PartialEq)]
enum Kind {
    Json,
    WrongType,
    Missing,
    Invalid,
}

fn kind(e: &ServiceConfigError) -> Kind {
    match e {
        ServiceConfigError::Json(_) => Kind::Json,
        ServiceConfigError::WrongType { .. } => Kind::WrongType,
        ServiceConfigError::Missing { .. } => Kind::Missing,
        ServiceConfigError::Invalid { .. } => Kind::Invalid,
        other => panic!("unexpected {other:?}"),
    }
}

/// Each document fails with its kind of error, naming its path.
fn expect_errors(cases: Vec<(String, Kind, String)>) {
    for (json, want_kind, want_path) in cases {
        let e = ServiceConfig::from_json(&json).unwrap_err();
        assert_eq!(kind(&e), want_kind, "{json}: {e}");
        assert_eq!(e.path(), want_path, "{json}: {e}");
        assert!(e.to_string().contains(&want_path), "{e}");
    }
}

/// Every rule of the module's table, broken once.
#[test]
fn each_rule_broken_once() {
    let rp = |k: &str| format!("methodConfig[1].retryPolicy.{k}");
    let cases: Vec<(String, Kind, String)> = vec![
        ("{".into(), Kind::Json, String::new()),
        ("[]".into(), Kind::WrongType, "$".into()),
        (r#"{"methodConfig": {}}"#.into(), Kind::WrongType, "methodConfig".into()),
        (r#"{"methodConfig": [3]}"#.into(), Kind::WrongType, "methodConfig[0]".into()),
        (
            r#"{"methodConfig": [{"name": {"service": "a.A"}}]}"#.into(),
            Kind::WrongType,
            "methodConfig[0].name".into(),
        ),
        (
            r#"{"methodConfig": [{"name": [{"service": 7}]}]}"#.into(),
            Kind::WrongType,
            "methodConfig[0].name[0].service".into(),
        ),
        (
            r#"{"methodConfig": [{"name": [{"method": "Get"}]}]}"#.into(),
            Kind::Invalid,
            "methodConfig[0].name[0].method".into(),
        ),
        (
            r#"{"methodConfig": [{"name": [{"service": "a.A"}]}, {"name": [{}, {"service": "a.A"}]}]}"#
                .into(),
            Kind::Invalid,
            "methodConfig[1].name[1]".into(),
        ),
        (
            r#"{"methodConfig": [{"name": [{}], "timeout": 5}]}"#.into(),
            Kind::WrongType,
            "methodConfig[0].timeout".into(),
        ),
        (
            r#"{"methodConfig": [{"name": [{}], "timeout": "5 s"}]}"#.into(),
            Kind::Invalid,
            "methodConfig[0].timeout".into(),
        ),
        (
            r#"{"methodConfig": [{"name": [{}], "timeout": "-1s"}]}"#.into(),
            Kind::Invalid,
            "methodConfig[0].timeout".into(),
        ),
        (
            r#"{"methodConfig": [{"name": [{}], "timeout": "315576000001s"}]}"#.into(),
            Kind::Invalid,
            "methodConfig[0].timeout".into(),
        ),
        (
            r#"{"methodConfig": [{"retryPolicy": {}, "hedgingPolicy": {}}]}"#.into(),
            Kind::Invalid,
            "methodConfig[0]".into(),
        ),
        (policy_with("maxAttempts", ""), Kind::Missing, rp("maxAttempts")),
        (policy_with("maxAttempts", "\"3\""), Kind::WrongType, rp("maxAttempts")),
        (policy_with("maxAttempts", "1"), Kind::Invalid, rp("maxAttempts")),
        (policy_with("initialBackoff", ""), Kind::Missing, rp("initialBackoff")),
        (policy_with("initialBackoff", "\"0s\""), Kind::Invalid, rp("initialBackoff")),
        (policy_with("maxBackoff", "\"1.0000000001s\""), Kind::Invalid, rp("maxBackoff")),
        (policy_with("backoffMultiplier", ""), Kind::Missing, rp("backoffMultiplier")),
        (policy_with("backoffMultiplier", "0"), Kind::Invalid, rp("backoffMultiplier")),
        (policy_with("backoffMultiplier", "\"2\""), Kind::WrongType, rp("backoffMultiplier")),
        (policy_with("retryableStatusCodes", ""), Kind::Missing, rp("retryableStatusCodes")),
        (policy_with("retryableStatusCodes", "[]"), Kind::Invalid, rp("retryableStatusCodes")),
        (
            policy_with("retryableStatusCodes", "[\"UNAVAILABLE\", \"unavailable\"]"),
            Kind::Invalid,
            rp("retryableStatusCodes[1]"),
        ),
        (
            policy_with("retryableStatusCodes", "[17]"),
            Kind::Invalid,
            rp("retryableStatusCodes[0]"),
        ),
        (
            policy_with("retryableStatusCodes", "[\"OK\"]"),
            Kind::Invalid,
            rp("retryableStatusCodes[0]"),
        ),
        (
            r#"{"retryThrottling": {"tokenRatio": 0.1}}"#.into(),
            Kind::Missing,
            "retryThrottling.maxTokens".into(),
        ),
        (
            r#"{"retryThrottling": {"maxTokens": 1001, "tokenRatio": 0.1}}"#.into(),
            Kind::Invalid,
            "retryThrottling.maxTokens".into(),
        ),
        (
            r#"{"retryThrottling": {"maxTokens": 10, "tokenRatio": 0}}"#.into(),
            Kind::Invalid,
            "retryThrottling.tokenRatio".into(),
        ),
        (
            r#"{"retryThrottling": {"maxTokens": 10}}"#.into(),
            Kind::Missing,
            "retryThrottling.tokenRatio".into(),
        ),
    ];
    expect_errors(cases);
}

/// A hedged method: A6's `hedgingPolicy`, read into the layer.
#[test]
fn a_hedging_policy() {
    let config = ServiceConfig::from_json(
        r#"{"methodConfig": [
          {"name": [{"service": "kv.Store", "method": "Get"}],
           "hedgingPolicy": {"maxAttempts": 7, "hedgingDelay": "0.005s",
                             "nonFatalStatusCodes": ["UNAVAILABLE", 10]}},
          {"name": [{"service": "kv.Store", "method": "Scan"}],
           "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0s"}},
          {"name": [{"service": "kv.Store", "method": "List"}],
           "hedgingPolicy": {"maxAttempts": 3}}
        ]}"#,
    )
    .unwrap();
    let policies: Vec<_> = config
        .method_configs()
        .iter()
        .map(|e| e.hedging_policy().unwrap().clone())
        .collect();
    assert_eq!(policies[0].max_attempts(), 5, "A6's cap");
    assert_eq!(policies[0].delay(), Duration::from_millis(5));
    assert!(policies[0].is_non_fatal(Code::Unavailable) && policies[0].is_non_fatal(Code::Aborted));
    assert!(!policies[0].is_non_fatal(Code::Internal));
    assert_eq!(
        (policies[1].max_attempts(), policies[1].delay()),
        (2, Duration::ZERO)
    );
    assert_eq!(policies[2].delay(), Duration::ZERO, "absent: 0");
    assert!(!policies[2].is_non_fatal(Code::Unavailable), "absent: none");
    let layer = RetryLayer::from_service_config(&config, Retrying::default());
    let get = layer.method_config("/kv.Store/Get");
    assert!(get.is_idempotent());
    assert_eq!(get.hedging(), Some(&policies[0]));
    assert!(get.retrying().is_none());
    assert!(layer.method_config("/kv.Store/Put").hedging().is_none());
}

/// Every rule of `hedgingPolicy`, broken once.
#[test]
fn each_hedging_rule_broken_once() {
    let hp = |k: &str| format!("methodConfig[0].hedgingPolicy{k}");
    let doc = |policy: &str| format!(r#"{{"methodConfig": [{{"hedgingPolicy": {policy}}}]}}"#);
    let both = r#"{"methodConfig": [{"hedgingPolicy": {"maxAttempts": 2},
        "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s",
        "backoffMultiplier": 2, "retryableStatusCodes": [14]}}]}"#;
    let cases: Vec<(String, Kind, String)> = vec![
        (both.into(), Kind::Invalid, "methodConfig[0]".into()),
        (doc("[]"), Kind::WrongType, hp("")),
        (doc("{}"), Kind::Missing, hp(".maxAttempts")),
        (
            doc(r#"{"maxAttempts": 1}"#),
            Kind::Invalid,
            hp(".maxAttempts"),
        ),
        (
            doc(r#"{"maxAttempts": -3}"#),
            Kind::Invalid,
            hp(".maxAttempts"),
        ),
        (
            doc(r#"{"maxAttempts": 2, "hedgingDelay": 5}"#),
            Kind::WrongType,
            hp(".hedgingDelay"),
        ),
        (
            doc(r#"{"maxAttempts": 2, "hedgingDelay": "-1s"}"#),
            Kind::Invalid,
            hp(".hedgingDelay"),
        ),
        (
            doc(r#"{"maxAttempts": 2, "hedgingDelay": "315576000001s"}"#),
            Kind::Invalid,
            hp(".hedgingDelay"),
        ),
        (
            doc(r#"{"maxAttempts": 2, "nonFatalStatusCodes": 14}"#),
            Kind::WrongType,
            hp(".nonFatalStatusCodes"),
        ),
        (
            doc(r#"{"maxAttempts": 2, "nonFatalStatusCodes": [14, "OK"]}"#),
            Kind::Invalid,
            hp(".nonFatalStatusCodes[1]"),
        ),
        (
            doc(r#"{"maxAttempts": 2, "nonFatalStatusCodes": ["NOPE"]}"#),
            Kind::Invalid,
            hp(".nonFatalStatusCodes[0]"),
        ),
    ];
    expect_errors(cases);
}

/// Hedging in code: a hedged method is idempotent; a policy below two
/// attempts is a typed error.
#[test]
fn hedging_in_code_makes_the_method_idempotent() {
    use tonic_retry::layer::{HedgingPolicy, MethodConfig};
    let policy = HedgingPolicy::new(3, Duration::from_millis(5)).unwrap();
    let e = HedgingPolicy::new(1, Duration::ZERO).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid hedging policy: `max_attempts` = 1 must be at least 2"
    );
    for m in [MethodConfig::non_idempotent(), MethodConfig::passthrough()] {
        let m = m.with_hedging(policy.clone());
        assert!(m.is_idempotent() && m.is_retried(), "{m:?}");
        assert_eq!(m.hedging(), Some(&policy));
    }
    let layer = RetryLayer::new(Retrying::default())
        .service("kv.Store", MethodConfig::idempotent())
        .hedge("/kv.Store/Get", policy.clone())
        .max_request_buffer(1 << 10);
    assert_eq!(
        layer.method_config("/kv.Store/Get").hedging(),
        Some(&policy)
    );
    assert!(layer.method_config("/kv.Store/Put").hedging().is_none());
}

/// Unknown fields are reported, not errors (grpc-go, grpc-java and
/// grpc-core ignore them for forward compatibility), each naming its path
/// and the field it most resembles; the strict parser makes them errors.
#[test]
fn unknown_fields_are_warnings_naming_the_field() {
    let json = r#"{
      "methodConfig": [{
        "name": [{"service": "kv.Store", "methd": "Get"}],
        "retryPolcy": {"maxAttempts": 3},
        "waitForReady": true
      }, {
        "name": [{"service": "kv.Other"}],
        "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
          "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": 0.2}
      }],
      "retryThrotling": {"maxTokens": 10, "tokenRatio": 0.1},
      "loadBalancingConfig": [{"round_robin": {}}]
    }"#;
    let config = ServiceConfig::from_json(json).unwrap();
    let got: Vec<(&str, &str)> = config
        .warnings()
        .iter()
        .map(|w| (w.path.as_str(), w.message.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (
                "retryThrotling",
                "unknown field (did you mean `retryThrottling`?), ignored"
            ),
            (
                "methodConfig[0].retryPolcy",
                "unknown field (did you mean `retryPolicy`?), ignored"
            ),
            (
                "methodConfig[0].name[0].methd",
                "unknown field (did you mean `method`?), ignored"
            ),
            (
                "methodConfig[1].retryPolicy.jitter",
                "unknown field, ignored"
            ),
        ]
    );
    // The typo turned retries off for kv.Store: that is what the warning is for.
    assert!(config.method_configs()[0].retry_policy().is_none());
    let e = ServiceConfig::from_json_strict(json).unwrap_err();
    assert!(matches!(e, ServiceConfigError::Strict(_)), "{e}");
    assert_eq!(e.path(), "retryThrotling");
    assert!(
        e.to_string().contains("did you mean `retryThrottling`"),
        "{e}"
    );
    // Fields other gRPC clients read are not reported.
    let clean = r#"{"loadBalancingPolicy": "round_robin", "healthCheckConfig": {},
      "methodConfig": [{"name": [{}], "waitForReady": true, "timeout": "1s",
        "maxRequestMessageBytes": 1024, "maxResponseMessageBytes": 1024}]}"#;
    assert!(
        ServiceConfig::from_json_strict(clean)
            .unwrap()
            .warnings()
            .is_empty()
    );
}

/// Values A6 allows but that contradict each other are warnings; values
/// A6 forbids are errors that say what is wrong.
#[test]
fn contradictions_warn_and_impossible_values_fail_clearly() {
    let policy = |attempts: &str, initial: &str, max: &str| {
        format!(
            r#"{{"methodConfig": [{{"name": [{{}}], "retryPolicy": {{"maxAttempts": {attempts},
              "initialBackoff": "{initial}", "maxBackoff": "{max}", "backoffMultiplier": 2,
              "retryableStatusCodes": ["UNAVAILABLE"]}}}}]}}"#
        )
    };
    let config = ServiceConfig::from_json(&policy("3", "2s", "1s")).unwrap();
    let w = &config.warnings()[0];
    assert_eq!(w.path, "methodConfig[0].retryPolicy.maxBackoff");
    assert!(w.message.contains("below initialBackoff"), "{w}");
    let p = config.method_configs()[0].retry_policy().unwrap();
    assert_eq!(
        p.initial_backoff(),
        Duration::from_secs(1),
        "A6: min(initial, max)"
    );
    assert!(ServiceConfig::from_json_strict(&policy("3", "2s", "1s")).is_err());
    for attempts in ["-1", "0", "1"] {
        let e = ServiceConfig::from_json(&policy(attempts, "1s", "2s")).unwrap_err();
        assert_eq!(e.path(), "methodConfig[0].retryPolicy.maxAttempts");
        assert_eq!(
            e.to_string(),
            format!("methodConfig[0].retryPolicy.maxAttempts: {attempts} must be at least 2")
        );
    }
    let e = ServiceConfig::from_json(&policy("1.5", "1s", "2s")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "methodConfig[0].retryPolicy.maxAttempts: expected an integer"
    );
}
