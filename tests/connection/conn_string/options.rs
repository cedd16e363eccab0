//! Parameter values: defaults, TLS, keepalive, message size, flow control, session id, user id and agent.

use super::*;

// ---------------------------------------------------------------- defaults and parameters

#[test]
fn defaults() {
    let cs = parse("sc://h").unwrap();
    assert_eq!(cs.host(), "h");
    assert_eq!(cs.port(), 15002);
    assert!(cs.token().is_none());
    assert!(!cs.use_ssl());
    assert!(!cs.use_tls());
    assert_eq!(cs.user_id(), None);
    assert_eq!(cs.user_agent(), "_SPARK_CONNECT_RUST");
    assert_eq!(cs.max_message_size(), 128 * 1024 * 1024);
    assert_eq!(cs.max_message_size(), 134_217_728);
    assert_eq!(
        cs.keepalive(),
        Keepalive {
            enabled: true,
            time: Duration::from_millis(60_000),
            timeout: Duration::from_millis(20_000),
            without_calls: true,
        }
    );
    assert_eq!(
        cs.http2_flow_control(),
        Http2FlowControl::Fixed {
            stream_window: 16 * 1024 * 1024,
            connection_window: 32 * 1024 * 1024,
        }
    );
    assert!(cs.metadata().is_empty());
    assert_eq!(cs.authority(), "h:15002");
}

#[test]
fn use_ssl_values() {
    for v in ["true", "TRUE", "True", "tRuE"] {
        assert!(
            parse(&format!("sc://h/;use_ssl={v}")).unwrap().use_ssl(),
            "{v}"
        );
    }
    for v in ["false", "FALSE", "False"] {
        assert!(
            !parse(&format!("sc://h/;use_ssl={v}")).unwrap().use_ssl(),
            "{v}"
        );
    }
    for v in ["", "1", "yes", "ture", " true", "true "] {
        assert!(
            matches!(parse(&format!("sc://h/;use_ssl={v}")), Err(E::InvalidValue { key, .. }) if key == "use_ssl"),
            "{v:?}"
        );
    }
}

#[test]
fn tls_rule() {
    let tls = |s: &str| parse(s).unwrap().use_tls();
    assert!(!tls("sc://host"));
    assert!(tls("sc://host/;use_ssl=true"));
    assert!(tls("sc://localhost/;use_ssl=true"));
    assert!(tls("sc://host/;token=t"));
    assert!(
        tls("sc://host/;token=t;use_ssl=false"),
        "use_ssl=false does not disable TLS"
    );
    assert!(
        !tls("sc://localhost/;token=t"),
        "token to localhost is plaintext"
    );
    assert!(!tls("sc://localhost:1234/;token=t;use_ssl=false"));
    assert!(tls("sc://LOCALHOST/;token=t"), "host comparison is exact");
    assert!(tls("sc://127.0.0.1/;token=t"));
    assert!(tls("sc://[::1]/;token=t"));
}

#[test]
fn keepalive_params() {
    let cs = parse(
        "sc://h/;grpc_keepalive_enabled=FALSE;grpc_keepalive_time_ms=1500;\
         grpc_keepalive_timeout_ms=250;grpc_keepalive_without_calls=false",
    )
    .unwrap();
    assert_eq!(
        cs.keepalive(),
        Keepalive {
            enabled: false,
            time: Duration::from_millis(1500),
            timeout: Duration::from_millis(250),
            without_calls: false,
        }
    );
    assert!(cs.metadata().is_empty(), "keepalive keys are not metadata");
    for bad in [
        "grpc_keepalive_enabled=1",
        "grpc_keepalive_time_ms=0",
        "grpc_keepalive_time_ms=-5",
        "grpc_keepalive_time_ms=+5",
        "grpc_keepalive_time_ms=1.5",
        "grpc_keepalive_time_ms=99999999999999999999999",
        "grpc_keepalive_timeout_ms=",
        "grpc_keepalive_without_calls=no",
    ] {
        assert!(
            matches!(
                parse(&format!("sc://h/;{bad}")),
                Err(E::InvalidValue { .. })
            ),
            "{bad}"
        );
    }
}

#[test]
fn max_message_size() {
    let size = |v: &str| {
        parse(&format!("sc://h/;grpc_max_message_size={v}")).map(|c| c.max_message_size())
    };
    assert_eq!(size("1").unwrap(), 1);
    assert_eq!(size("4294967295").unwrap(), u32::MAX as usize);
    for bad in ["0", "-1", "4294967296", "1e6", " 5", "+5", "", "0x10"] {
        assert!(size(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn flow_control_windows() {
    let fc = |params: &str| parse(&format!("sc://h/{params}")).map(|c| c.http2_flow_control());
    let fixed = |stream_window, connection_window| Http2FlowControl::Fixed {
        stream_window,
        connection_window,
    };
    const MIB: u32 = 1024 * 1024;
    assert_eq!(
        fc(";grpc_initial_stream_window_size=65535;grpc_initial_connection_window_size=2147483647")
            .unwrap(),
        fixed(65_535, 2_147_483_647)
    );
    assert_eq!(
        fc(";grpc_initial_stream_window_size=4194304;grpc_initial_connection_window_size=4194304")
            .unwrap(),
        fixed(4 * MIB, 4 * MIB)
    );
    // One window alone: the other follows it, keeping connection >= stream.
    assert_eq!(
        fc(";grpc_initial_stream_window_size=67108864").unwrap(),
        fixed(64 * MIB, 64 * MIB)
    );
    assert_eq!(
        fc(";grpc_initial_stream_window_size=1048576").unwrap(),
        fixed(MIB, 32 * MIB)
    );
    assert_eq!(
        fc(";grpc_initial_connection_window_size=8388608").unwrap(),
        fixed(8 * MIB, 8 * MIB)
    );
    assert_eq!(
        fc(";grpc_initial_connection_window_size=1073741824").unwrap(),
        fixed(16 * MIB, 1024 * MIB)
    );
    // The windows are parameters, not metadata.
    let cs = parse("sc://h/;grpc_initial_stream_window_size=1048576").unwrap();
    assert!(cs.metadata().is_empty());
    // The last value of a repeated key wins.
    assert_eq!(
        fc(";grpc_initial_stream_window_size=1048576;grpc_initial_stream_window_size=65536")
            .unwrap(),
        fixed(65_536, 32 * MIB)
    );
}

#[test]
fn flow_control_adaptive() {
    let fc = |params: &str| parse(&format!("sc://h/{params}")).map(|c| c.http2_flow_control());
    assert_eq!(
        fc(";grpc_http2_bdp_probe=true").unwrap(),
        Http2FlowControl::Adaptive
    );
    assert_eq!(
        fc(";grpc_http2_bdp_probe=TRUE").unwrap(),
        Http2FlowControl::Adaptive
    );
    assert_eq!(
        fc(";grpc_http2_bdp_probe=false").unwrap(),
        Http2FlowControl::default()
    );
    assert_eq!(
        fc(";grpc_http2_bdp_probe=false;grpc_initial_stream_window_size=1048576").unwrap(),
        Http2FlowControl::Fixed {
            stream_window: 1024 * 1024,
            connection_window: 32 * 1024 * 1024,
        }
    );
}

#[test]
fn flow_control_errors_name_the_key() {
    let err = |params: &str| parse(&format!("sc://h/{params}")).unwrap_err();
    let invalid = |e: E| match e {
        E::InvalidValue { key, reason } => (key, reason),
        other => panic!("expected InvalidValue, got {other:?}"),
    };
    for key in [
        "grpc_initial_stream_window_size",
        "grpc_initial_connection_window_size",
    ] {
        for bad in [
            "0",
            "65534",
            "2147483648",
            "4294967296",
            "-1",
            "+65536",
            " 65536",
            "",
            "1e6",
            "16MiB",
        ] {
            let (k, reason) = invalid(err(&format!(";{key}={bad}")));
            assert_eq!(k, key, "{bad:?}");
            assert!(reason.contains("65535 and 2147483647"), "{reason}");
        }
    }
    let (k, reason) = invalid(err(
        ";grpc_initial_stream_window_size=8388608;grpc_initial_connection_window_size=4194304",
    ));
    assert_eq!(k, "grpc_initial_connection_window_size");
    assert!(reason.contains("at least"), "{reason}");
    for window in [
        "grpc_initial_stream_window_size=1048576",
        "grpc_initial_connection_window_size=67108864",
    ] {
        // In either order: the combination is what is wrong.
        for params in [
            format!(";grpc_http2_bdp_probe=true;{window}"),
            format!(";{window};grpc_http2_bdp_probe=true"),
        ] {
            let e = err(&params);
            assert!(e.to_string().contains("grpc_http2_bdp_probe"), "{e}");
            let (k, reason) = invalid(e);
            assert_eq!(k, "grpc_http2_bdp_probe");
            assert!(reason.contains("window size"), "{reason}");
        }
    }
    let (k, reason) = invalid(err(";grpc_http2_bdp_probe=yes"));
    assert_eq!(k, "grpc_http2_bdp_probe");
    assert!(reason.contains("'true' or 'false'"), "{reason}");
}

#[test]
fn session_id_forms() {
    let upper = UUID.to_ascii_uppercase();
    let cs = parse(&format!("sc://h/;session_id={upper}")).unwrap();
    assert_eq!(
        cs.session_id().unwrap().to_string(),
        UUID,
        "normalised to lower case"
    );
    for bad in [
        "1-1-1-1-1",
        "6f3b7d524a1e4c7b9a0d2b9e5c8f1a34",
        "{6f3b7d52-4a1e-4c7b-9a0d-2b9e5c8f1a34}",
        "urn:uuid:6f3b7d52-4a1e-4c7b-9a0d-2b9e5c8f1a34",
        "6f3b7d52-4a1e-4c7b-9a0d-2b9e5c8f1a3g",
        "6f3b7d52-4a1e-4c7b-9a0d-2b9e5c8f1a345",
        "6f3b7d52_4a1e-4c7b-9a0d-2b9e5c8f1a34",
    ] {
        assert!(
            parse(&format!("sc://h/;session_id={bad}")).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn user_id_and_agent() {
    assert!(
        matches!(parse("sc://h/;user_id="), Err(E::InvalidValue { key, .. }) if key == "user_id")
    );
    assert!(
        matches!(parse("sc://h/;user_agent="), Err(E::InvalidValue { key, .. }) if key == "user_agent")
    );
    let cs = parse("sc://h/;user_agent=my%20app;user_id=j%C3%B6rg").unwrap();
    assert_eq!(cs.user_agent(), "my app");
    assert_eq!(cs.user_id(), Some("jörg"));
    assert!(cs.client_type().starts_with("my app spark/4.3.0 os/"));
}

#[test]
fn client_type_format() {
    let ct = parse("sc://h").unwrap().client_type();
    let parts: Vec<&str> = ct.split(' ').collect();
    assert_eq!(parts.len(), 4, "{ct}");
    assert_eq!(parts[0], "_SPARK_CONNECT_RUST");
    assert_eq!(parts[1], "spark/4.3.0");
    assert!(parts[2].starts_with("os/") && parts[2].len() > 3);
    assert_eq!(parts[3], concat!("rust/", env!("CARGO_PKG_VERSION")));
    #[cfg(target_os = "linux")]
    assert_eq!(parts[2], "os/linux");
}

#[test]
fn user_agent_length_limit() {
    let ok = "a".repeat(2048);
    assert!(parse(&format!("sc://h/;user_agent={ok}")).is_ok());
    let too_long = "a".repeat(2049);
    assert_eq!(
        parse(&format!("sc://h/;user_agent={too_long}")).unwrap_err(),
        E::UserAgentTooLong { encoded_len: 2049 }
    );
    // 683 spaces encode to 2049 characters ("%20" each).
    let spaces = "%20".repeat(683);
    assert_eq!(
        parse(&format!("sc://h/;user_agent={spaces}")).unwrap_err(),
        E::UserAgentTooLong { encoded_len: 2049 }
    );
    assert!(parse(&format!("sc://h/;user_agent={}", "%20".repeat(682))).is_ok());
    // '/' is not encoded (Python's quote default).
    assert!(parse(&format!("sc://h/;user_agent={}", "/".repeat(2048))).is_ok());
    // The limit also applies to the environment fallback.
    let env = env_of(&[("SPARK_CONNECT_USER_AGENT", &too_long)]);
    assert!(matches!(
        ConnectionString::parse_with_env("sc://h", env),
        Err(E::UserAgentTooLong { .. })
    ));
}
