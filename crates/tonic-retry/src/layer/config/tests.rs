//! Edge values of the service-config parser.

use super::ServiceConfig;

fn retry_policy(initial: &str, max: &str) -> String {
    format!(
        r#"{{"methodConfig": [{{"name": [{{}}], "retryPolicy": {{"maxAttempts": 3,
        "initialBackoff": "{initial}", "maxBackoff": "{max}", "backoffMultiplier": 2,
        "retryableStatusCodes": ["UNAVAILABLE"]}}}}]}}"#
    )
}

#[test]
fn backoffs_past_a_year_are_rejected_naming_the_field() {
    let year = 365 * 24 * 3600;
    for (initial, max, field) in [
        ("1s".to_owned(), "315576000000s".to_owned(), "maxBackoff"),
        (
            format!("{}s", year + 1),
            format!("{}s", year + 1),
            "initialBackoff",
        ),
    ] {
        let e = ServiceConfig::from_json(&retry_policy(&initial, &max)).unwrap_err();
        assert_eq!(
            e.path(),
            format!("methodConfig[0].retryPolicy.{field}"),
            "{e}"
        );
        assert!(e.to_string().contains("365 days"), "{e}");
    }
    let ok = ServiceConfig::from_json(&retry_policy("1s", &format!("{year}s"))).unwrap();
    let p = ok.method_configs()[0].retry_policy().unwrap();
    assert_eq!(p.max_backoff(), Some(crate::policy::MAX_POLICY_DURATION));
}

#[test]
fn huge_timeouts_delays_and_throttle_values_never_panic() {
    let c = ServiceConfig::from_json(
        r#"{"methodConfig": [{"name": [{}], "timeout": "315576000000.999999999s",
            "hedgingPolicy": {"maxAttempts": 4294967295, "hedgingDelay": "315576000000s"}}],
           "retryThrottling": {"maxTokens": 1000, "tokenRatio": 1e308}}"#,
    )
    .unwrap();
    let entry = &c.method_configs()[0];
    assert_eq!(entry.hedging_policy().unwrap().max_attempts(), 5);
    let t = c.retry_throttling().unwrap();
    t.on_failure();
    t.on_success();
    assert_eq!(t.tokens(), 1000.0);
    for (json, path) in [
        (
            r#"{"retryThrottling": {"maxTokens": 1e20, "tokenRatio": 0.1}}"#,
            "retryThrottling.maxTokens",
        ),
        (
            r#"{"retryThrottling": {"maxTokens": 18446744073709551616, "tokenRatio": 0.1}}"#,
            "retryThrottling.maxTokens",
        ),
        (
            r#"{"retryThrottling": {"maxTokens": 10, "tokenRatio": 1e400}}"#,
            "",
        ),
        (
            r#"{"methodConfig": [{"hedgingPolicy": {"maxAttempts": 99999999999}}]}"#,
            "methodConfig[0].hedgingPolicy.maxAttempts",
        ),
    ] {
        let e = ServiceConfig::from_json(json).unwrap_err();
        assert_eq!(e.path(), path, "{json}: {e}");
    }
}
