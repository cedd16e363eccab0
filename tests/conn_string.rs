//! Tests for `session::conn_string`: the test vectors of Spark's JVM client (the `URIs` pack of
//! `SparkConnectClientSuite`, its "Check URI: …" tests), every parameter,
//! environment fallbacks, redaction, and fuzzing for panics.

use std::collections::HashMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use spark_connect_retry::session::Http2FlowControl;
use spark_connect_retry::session::conn_string::{
    ConnectionString, ConnectionStringError as E, DEFAULT_MAX_MESSAGE_SIZE, Keepalive, ParamPart,
    Token,
};

const UUID: &str = "6f3b7d52-4a1e-4c7b-9a0d-2b9e5c8f1a34";

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse(s: &str) -> Result<ConnectionString, E> {
    ConnectionString::parse_with_env(s, no_env)
}

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k: &str| map.get(k).cloned()
}

// ------------------------------ SparkConnectClientSuite `URIs` vectors

#[test]
fn spec_valid_vectors() {
    let ok = [
        "sc://host".to_string(),
        "sc://localhost/".to_string(),
        "sc://localhost:1234/".to_string(),
        "sc://localhost/;".to_string(),
        "sc://host:123".to_string(),
        "sc://host:123/;user_id=a94".to_string(),
        "sc://host:123/;user_agent=a945".to_string(),
        "sc://host:123/;use_ssl=true".to_string(),
        "sc://host:123/;token=mySecretToken".to_string(),
        "sc://host:123/;use_ssl=true;token=mySecretToken".to_string(),
        "sc://host:123/;token=mySecretToken;use_ssl=true".to_string(),
        "sc://host:123/;use_ssl=false;token=mySecretToken".to_string(),
        "sc://host:123/;token=mySecretToken;use_ssl=false".to_string(),
        "sc://host:123/;param1=value1;param2=value2".to_string(),
        format!("sc://host:123/;session_id={UUID}"),
        "sc://SPARK-45486".to_string(),
        "sc://SPARK-47694:123/;grpc_max_message_size=1860".to_string(),
    ];
    for s in &ok {
        assert!(parse(s).is_ok(), "{s} should parse: {:?}", parse(s).err());
    }
}

#[test]
fn spec_valid_vector_details() {
    let cs = parse("sc://localhost/").unwrap();
    assert_eq!((cs.host(), cs.port()), ("localhost", 15002));

    let a = parse("sc://localhost:1234/").unwrap();
    let b = parse("sc://localhost:1234/").unwrap();
    assert_eq!(a.port(), 1234);
    assert_eq!(a.session_id(), None, "drawn per session, not per parse");
    assert_eq!(b.session_id(), None);

    assert_eq!(
        parse("sc://host:123/;user_id=a94").unwrap().user_id(),
        Some("a94")
    );
    assert!(
        parse("sc://host:123/;user_agent=a945")
            .unwrap()
            .client_type()
            .contains("a945")
    );

    let ct = parse("sc://SPARK-45486").unwrap().client_type();
    assert!(
        ct.contains(" spark/") && ct.contains(" os/") && ct.contains(" rust/"),
        "{ct}"
    );

    assert_eq!(
        parse("sc://SPARK-47694:123/;grpc_max_message_size=1860")
            .unwrap()
            .max_message_size(),
        1860
    );

    let md = parse("sc://host:123/;param1=value1;param2=value2").unwrap();
    assert_eq!(md.metadata().get("param1").unwrap(), "value1");
    assert_eq!(md.metadata().get("param2").unwrap(), "value2");
    assert_eq!(md.metadata().len(), 2);

    let sid = parse(&format!("sc://host:123/;session_id={UUID}")).unwrap();
    assert_eq!(sid.session_id().unwrap().to_string(), UUID);
}

#[test]
fn spec_invalid_vectors() {
    let bad = [
        "scc://host:12",
        "http://host",
        "sc:/host:1234/path",
        "sc://host/path",
        "sc://host/;parm1;param2",
        "sc://host:123;user_id=a94",
        "sc:///user_id=123",
        "sc://host:-4",
        "sc://:123/",
        "sc://host:123/;token=",
        "sc://host:123/;session_id=",
        "sc://host:123/;session_id=abcdefgh",
        "sc://SPARK-47694:123/;grpc_max_message_size=abc",
    ];
    for s in bad {
        assert!(parse(s).is_err(), "{s} should be rejected");
    }
}

#[test]
fn spec_invalid_vectors_name_the_part() {
    assert_eq!(parse("scc://host:12").unwrap_err(), E::Scheme);
    assert_eq!(parse("http://host").unwrap_err(), E::Scheme);
    assert_eq!(parse("sc:/host:1234/path").unwrap_err(), E::Scheme);
    assert!(matches!(
        parse("sc://host/path").unwrap_err(),
        E::Path { .. }
    ));
    assert_eq!(
        parse("sc://host/;parm1;param2").unwrap_err(),
        E::MalformedParameter { index: 1 }
    );
    assert!(matches!(
        parse("sc://host:123;user_id=a94").unwrap_err(),
        E::Path { .. }
    ));
    assert!(matches!(
        parse("sc:///user_id=123").unwrap_err(),
        E::Host { .. }
    ));
    assert!(matches!(parse("sc://host:-4").unwrap_err(), E::Port { .. }));
    assert!(matches!(parse("sc://:123/").unwrap_err(), E::Host { .. }));
    assert!(matches!(
        parse("sc://host:123/;token=").unwrap_err(),
        E::InvalidValue { key, .. } if key == "token"
    ));
    for s in [
        "sc://host:123/;session_id=",
        "sc://host:123/;session_id=abcdefgh",
    ] {
        assert!(matches!(
            parse(s).unwrap_err(),
            E::InvalidValue { key, .. } if key == "session_id"
        ));
    }
    assert!(matches!(
        parse("sc://SPARK-47694:123/;grpc_max_message_size=abc").unwrap_err(),
        E::InvalidValue { key, .. } if key == "grpc_max_message_size"
    ));
}

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
    assert_eq!(cs.max_message_size(), DEFAULT_MAX_MESSAGE_SIZE);
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

// ---------------------------------------------------------------- syntax

#[test]
fn parameter_splitting() {
    // Empty pieces are skipped anywhere.
    let cs = parse("sc://h/;;user_id=a;;;").unwrap();
    assert_eq!(cs.user_id(), Some("a"));
    // Exactly one '='.
    assert_eq!(
        parse("sc://h/;a=b=c").unwrap_err(),
        E::MalformedParameter { index: 1 }
    );
    assert_eq!(
        parse("sc://h/;a=b=").unwrap_err(),
        E::MalformedParameter { index: 1 }
    );
    assert_eq!(
        parse("sc://h/;x=1;;a").unwrap_err(),
        E::MalformedParameter { index: 3 }
    );
    // Empty key.
    assert_eq!(parse("sc://h/;=v").unwrap_err(), E::EmptyKey { index: 1 });
    assert!(matches!(
        parse("sc://h/;%20=v").unwrap_err(),
        E::InvalidMetadataKey { .. }
    ));
    // Percent-decoding happens after splitting.
    let cs = parse("sc://h/;user_id=a%3Bb%3Dc;x-k=%41%2b+").unwrap();
    assert_eq!(cs.user_id(), Some("a;b=c"));
    assert_eq!(cs.metadata().get("x-k").unwrap(), "A++");
    assert_eq!(
        parse("sc://h/;user_id=%FF").unwrap_err(),
        E::PercentDecoding {
            index: 1,
            part: ParamPart::Value
        }
    );
    assert_eq!(
        parse("sc://h/;%FF=1").unwrap_err(),
        E::PercentDecoding {
            index: 1,
            part: ParamPart::Key
        }
    );
    // Percent-encoded reserved key still names the reserved parameter.
    assert_eq!(parse("sc://h/;user%5Fid=x").unwrap().user_id(), Some("x"));
    // Keys are case-sensitive: "Token" is metadata, not the token.
    let cs = parse("sc://h/;Token=abc").unwrap();
    assert!(cs.token().is_none());
    assert_eq!(cs.metadata().get("token").unwrap(), "abc");
    // Last occurrence wins.
    let cs = parse("sc://h/;user_id=a;user_id=b;x=1;x=2").unwrap();
    assert_eq!(cs.user_id(), Some("b"));
    assert_eq!(cs.metadata().get_all("x").iter().count(), 1);
    assert_eq!(cs.metadata().get("x").unwrap(), "2");
}

#[test]
fn path_rules() {
    assert!(parse("sc://h/").is_ok());
    assert!(parse("sc://h/;").is_ok());
    for bad in [
        "sc://h//",
        "sc://h/x",
        "sc://h/x;a=b",
        "sc://h//;a=b",
        "sc://h/%2F",
        "sc://h/ ;a=b",
    ] {
        assert!(matches!(parse(bad), Err(E::Path { .. })), "{bad}");
    }
}

#[test]
fn query_and_fragment_rejected() {
    assert_eq!(
        parse("sc://h/?a=b").unwrap_err(),
        E::QueryOrFragment { character: '?' }
    );
    assert_eq!(
        parse("sc://h#frag").unwrap_err(),
        E::QueryOrFragment { character: '#' }
    );
    assert_eq!(
        parse("sc://h/;token=a?b").unwrap_err(),
        E::QueryOrFragment { character: '?' }
    );
    // Percent-encoded, they are fine.
    let cs = parse("sc://h/;user_id=a%3Fb%23c").unwrap();
    assert_eq!(cs.user_id(), Some("a?b#c"));
    assert!(parse("sc://h/?").unwrap_err().to_string().contains("'?'"));
}

#[test]
fn hosts() {
    for (s, host, port) in [
        ("sc://[::1]", "::1", 15002),
        ("sc://[::1]:99/", "::1", 99),
        ("sc://[2001:DB8::1]:1/;a=b", "2001:db8::1", 1),
        ("sc://127.0.0.1:1", "127.0.0.1", 1),
        ("sc://my_host.example.com", "my_host.example.com", 15002),
        ("sc://a-b.c", "a-b.c", 15002),
        ("sc://h:65535", "h", 65535),
        ("sc://h:00080", "h", 80),
    ] {
        let cs = parse(s).unwrap();
        assert_eq!((cs.host(), cs.port()), (host, port), "{s}");
    }
    assert_eq!(parse("sc://[::1]:99").unwrap().authority(), "[::1]:99");
    for bad in [
        "sc://",
        "sc:///",
        "sc://:1",
        "sc://[::1",
        "sc://[::1]x",
        "sc://[zz::1]",
        "sc://[fe80::1%25eth0]",
        "sc://::1",
        "sc://a:b:c",
        "sc://user@host",
        "sc://-host",
        "sc://host-",
        "sc://a..b",
        "sc://.a",
        "sc://a.",
        "sc://h%41",
        "sc://hé",
        "sc://h st",
        "sc://[]",
    ] {
        let err = parse(bad).unwrap_err();
        assert!(matches!(err, E::Host { .. }), "{bad}: {err:?}");
    }
    assert!(matches!(
        parse(&format!("sc://{}", "a".repeat(64))),
        Err(E::Host { .. })
    ));
    assert!(parse(&format!("sc://{}", "a".repeat(63))).is_ok());
    let long = vec!["a".repeat(63); 4].join(".");
    assert!(matches!(
        parse(&format!("sc://{long}")),
        Err(E::Host { .. })
    ));
}

#[test]
fn ports() {
    for bad in [
        "sc://h:",
        "sc://h:0",
        "sc://h:65536",
        "sc://h:x",
        "sc://h:+1",
        "sc://h:-1",
        "sc://[::1]:",
        "sc://h: 1",
    ] {
        assert!(matches!(parse(bad), Err(E::Port { .. })), "{bad}");
    }
}

// ---------------------------------------------------------------- metadata

#[test]
fn metadata_keys_and_values() {
    let cs = parse(
        "sc://h/;X-Custom=Hello%20World;a.b_c-d=;x-trace-bin=AAEC;y-bin=AAECAw%3D%3D;z-bin=AAECAw",
    )
    .unwrap();
    let md = cs.metadata();
    assert_eq!(
        md.get("x-custom").unwrap(),
        "Hello World",
        "keys are lower-cased"
    );
    assert_eq!(md.get("a.b_c-d").unwrap(), "");
    assert_eq!(
        md.get_bin("x-trace-bin")
            .unwrap()
            .to_bytes()
            .unwrap()
            .as_ref(),
        &[0, 1, 2]
    );
    assert_eq!(
        md.get_bin("y-bin").unwrap().to_bytes().unwrap().as_ref(),
        &[0, 1, 2, 3]
    );
    assert_eq!(
        md.get_bin("z-bin").unwrap().to_bytes().unwrap().as_ref(),
        &[0, 1, 2, 3]
    );
    assert!(md.get("x-custom").unwrap().is_sensitive());

    // Binary suffix is matched after lower-casing.
    assert!(
        parse("sc://h/;X-BIN=AA")
            .unwrap()
            .metadata()
            .get_bin("x-bin")
            .is_some()
    );
    assert!(
        parse("sc://h/;x-bin=")
            .unwrap()
            .metadata()
            .get_bin("x-bin")
            .is_some()
    );
}

#[test]
fn metadata_errors() {
    for (s, key_err) in [
        ("sc://h/;x-bin=!!!", false),
        ("sc://h/;x-bin=AAAAA", false), // 5 chars: impossible length
        ("sc://h/;x-bin=AAF", false),   // non-zero trailing bits
        ("sc://h/;x-bin=AA-_", false),  // URL-safe alphabet is not standard base64
        ("sc://h/;x=caf%C3%A9", false),
        ("sc://h/;x=a%0Ab", false),
        ("sc://h/;x=a%09b", false),
        ("sc://h/;x%20y=1", true),
        ("sc://h/;x:y=1", true),
        ("sc://h/;%C3%A9=1", true),
        ("sc://h/;grpc-timeout=1", true),
        ("sc://h/;GRPC-status=1", true),
        ("sc://h/;te=trailers", true),
        ("sc://h/;content-type=x", true),
        ("sc://h/;connection=close", true),
        ("sc://h/;host=x", true),
        ("sc://h/;authorization=Basic%20x;token=t", true),
    ] {
        let err = parse(s).unwrap_err();
        if key_err {
            assert!(matches!(err, E::InvalidMetadataKey { .. }), "{s}: {err:?}");
        } else {
            assert!(
                matches!(err, E::InvalidMetadataValue { .. }),
                "{s}: {err:?}"
            );
        }
    }
    // Without a token, a custom authorization header is allowed.
    let cs = parse("sc://h/;authorization=Basic%20eDp5").unwrap();
    assert_eq!(cs.metadata().get("authorization").unwrap(), "Basic eDp5");
    // A token from the environment also conflicts.
    let env = env_of(&[("SPARK_CONNECT_AUTHENTICATE_TOKEN", "t")]);
    assert!(matches!(
        ConnectionString::parse_with_env("sc://h/;authorization=x", env),
        Err(E::InvalidMetadataKey { .. })
    ));
}

#[test]
fn long_keys_are_shortened_in_errors() {
    let key = format!("{}%20", "k".repeat(500));
    let msg = parse(&format!("sc://h/;{key}=1")).unwrap_err().to_string();
    assert!(msg.len() < 300, "{msg}");
}

// ---------------------------------------------------------------- environment

#[test]
fn environment_fallbacks() {
    let env = env_of(&[
        ("SPARK_CONNECT_AUTHENTICATE_TOKEN", "envtok"),
        ("SPARK_CONNECT_USER_AGENT", "env-agent"),
        ("SPARK_USER", "spark-user"),
        ("USER", "unix-user"),
    ]);
    let cs = ConnectionString::parse_with_env("sc://h", &env).unwrap();
    assert_eq!(cs.token().unwrap().expose_secret(), "envtok");
    assert!(cs.use_tls(), "an environment token also implies TLS");
    assert_eq!(cs.user_agent(), "env-agent");
    assert_eq!(cs.user_id(), Some("spark-user"));

    // Parameters win over the environment.
    let cs =
        ConnectionString::parse_with_env("sc://h/;token=p;user_agent=pa;user_id=pu", &env).unwrap();
    assert_eq!(cs.token().unwrap().expose_secret(), "p");
    assert_eq!(cs.user_agent(), "pa");
    assert_eq!(cs.user_id(), Some("pu"));

    // USER when SPARK_USER is unset or empty.
    let env = env_of(&[("SPARK_USER", ""), ("USER", "unix-user")]);
    assert_eq!(
        ConnectionString::parse_with_env("sc://h", env)
            .unwrap()
            .user_id(),
        Some("unix-user")
    );

    // Empty variables count as unset.
    let env = env_of(&[
        ("SPARK_CONNECT_AUTHENTICATE_TOKEN", ""),
        ("SPARK_CONNECT_USER_AGENT", ""),
    ]);
    let cs = ConnectionString::parse_with_env("sc://h", env).unwrap();
    assert!(cs.token().is_none());
    assert_eq!(cs.user_agent(), "_SPARK_CONNECT_RUST");

    // An invalid environment token is an error that does not show it.
    let env = env_of(&[("SPARK_CONNECT_AUTHENTICATE_TOKEN", "bad\ntoken")]);
    let err = ConnectionString::parse_with_env("sc://h", env).unwrap_err();
    assert!(!format!("{err} {err:?}").contains("bad"), "{err:?}");
}

#[test]
fn from_env_with() {
    let env = env_of(&[
        ("SPARK_REMOTE", "sc://remote:7/;user_id=r"),
        ("SPARK_USER", "ignored"),
    ]);
    let cs = ConnectionString::from_env_with(env).unwrap();
    assert_eq!(
        (cs.host(), cs.port(), cs.user_id()),
        ("remote", 7, Some("r"))
    );
    assert_eq!(
        ConnectionString::from_env_with(no_env).unwrap_err(),
        E::RemoteNotSet
    );
    assert_eq!(
        ConnectionString::from_env_with(env_of(&[("SPARK_REMOTE", "")])).unwrap_err(),
        E::RemoteNotSet
    );
    assert_eq!(
        ConnectionString::from_env_with(env_of(&[("SPARK_REMOTE", "local[*]")])).unwrap_err(),
        E::Scheme
    );
}

#[test]
fn from_str_uses_process_env() {
    // Only checks that FromStr works; the process environment may hold anything else.
    let cs: ConnectionString = "sc://h:1/;token=x;user_id=u".parse().unwrap();
    assert_eq!((cs.port(), cs.user_id()), (1, Some("u")));
}

// ---------------------------------------------------------------- secrets

const SECRET: &str = "SuperSecretTokenValue42";

#[test]
fn token_is_redacted() {
    let t = Token::new(SECRET).unwrap();
    assert_eq!(format!("{t}"), "<redacted>");
    assert_eq!(format!("{t:?}"), "<redacted>");
    assert_eq!(format!("{t:#?}"), "<redacted>");
    assert!(Token::new("").is_err());
    assert!(Token::new("a b").is_ok());
    assert!(Token::new("a\u{7f}").is_err());
    assert!(Token::new("é").is_err());

    let cs = parse(&format!(
        "sc://h/;token={SECRET};x-api-key=SecretHeaderValue;x-bin=AAAA"
    ))
    .unwrap();
    assert_eq!(cs.token().unwrap().expose_secret(), SECRET);
    for rendered in [format!("{cs:?}"), format!("{cs:#?}")] {
        assert!(!rendered.contains(SECRET), "{rendered}");
        assert!(!rendered.contains("SecretHeaderValue"), "{rendered}");
        assert!(rendered.contains("x-api-key"), "keys are shown: {rendered}");
        assert!(rendered.contains("<redacted>"));
    }
}

#[test]
fn errors_never_contain_the_token() {
    let cases = [
        format!("sc://h:1;token={SECRET}"),
        format!("sc://h:{SECRET}"),
        format!("sc://h:1x;token={SECRET}/"),
        format!("sc://[::1]{SECRET}/;token={SECRET}"),
        format!("sc://{SECRET}@h/"),
        format!("sc://h/x;token={SECRET}"),
        format!("sc://h/;token={SECRET};bad"),
        format!("sc://h/;token={SECRET}=x"),
        format!("sc://h/;token={SECRET}%0A"),
        format!("sc://h/;token={SECRET}%FF"),
        format!("sc://h/;token={SECRET}?q"),
        format!("sc://h/;token={SECRET};session_id={SECRET}"),
        format!("sc://h/;token={SECRET};use_ssl={SECRET}"),
        format!("sc://h/;token={SECRET};user_agent={}", "x".repeat(3000)),
        format!("sc://h/;token={SECRET};x-bin={SECRET}!"),
        format!("sc://h/;token={SECRET};x=caf%C3%A9{SECRET}"),
        format!("sc://h/;token={SECRET};authorization={SECRET}"),
        format!("sc://h/;token={SECRET};grpc_max_message_size={SECRET}"),
        format!("scx://h/;token={SECRET}"),
    ];
    for s in &cases {
        let err = parse(s).expect_err(s);
        let rendered = format!("{err} | {err:?}");
        assert!(!rendered.contains(SECRET), "{s} -> {rendered}");
    }
}

// ---------------------------------------------------------------- fuzzing

const FRAGMENTS: &[&str] = &[
    "sc://",
    "sc:/",
    "sc",
    "://",
    ":",
    "/",
    "//",
    ";",
    ";;",
    "=",
    "==",
    "%",
    "%2",
    "%3D",
    "%3B",
    "%FF",
    "%C3%A9",
    "%00",
    "[",
    "]",
    "::1",
    "[::1]",
    "?",
    "#",
    "@",
    "a",
    "Z",
    "0",
    "9",
    "65535",
    "65536",
    "-",
    "_",
    ".",
    " ",
    "\t",
    "\n",
    "é",
    "🦀",
    "\u{0}",
    "+",
    "AAAA",
    "localhost",
    "host",
    "99999999999999999999",
    UUID,
    "token",
    "token=",
    "use_ssl=",
    "true",
    "TRUE",
    "false",
    "session_id=",
    "user_id=",
    "user_agent=",
    "grpc_max_message_size=",
    "grpc_keepalive_enabled=",
    "grpc_keepalive_time_ms=",
    "grpc_keepalive_timeout_ms=",
    "grpc_keepalive_without_calls=",
    "-bin",
    "x-bin=",
    "authorization=",
    "grpc-",
    "te=",
    SECRET,
];

const SEEDS: &[&str] = &[
    "sc://host:123/;use_ssl=true;token=SuperSecretTokenValue42",
    "sc://[::1]:15002/;user_id=a;user_agent=b;x-bin=AAEC",
    "sc://localhost/;session_id=6f3b7d52-4a1e-4c7b-9a0d-2b9e5c8f1a34;grpc_max_message_size=10",
    "sc://h/;grpc_keepalive_enabled=true;grpc_keepalive_time_ms=5;grpc_keepalive_timeout_ms=7;grpc_keepalive_without_calls=false",
    "sc://a.b.c:1/;x=%41;y-bin=AA%3D%3D",
];

/// Checks the invariants of a successful parse; panics are the failure mode under test.
fn check(s: &str) {
    match ConnectionString::parse_with_env(s, no_env) {
        Ok(cs) => {
            assert!(!cs.host().is_empty());
            assert!(cs.port() >= 1);
            assert!(cs.max_message_size() >= 1);
            assert!(cs.client_type().starts_with(cs.user_agent()));
            assert!(!cs.keepalive().time.is_zero() && !cs.keepalive().timeout.is_zero());
            let dbg = format!("{cs:?}");
            if cs.token().is_some_and(|t| t.expose_secret() == SECRET) {
                assert!(!dbg.contains(SECRET), "{s:?} -> {dbg}");
            }
            for k in cs.metadata().keys() {
                let k = match k {
                    tonic::metadata::KeyRef::Ascii(k) => k.as_str(),
                    tonic::metadata::KeyRef::Binary(k) => k.as_str(),
                };
                assert_eq!(k, k.to_ascii_lowercase());
            }
            let _ = cs.authority();
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            let _ = format!("{e:?}");
        }
    }
}

#[test]
fn fuzz_fragment_soup() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0001);
    for _ in 0..20_000 {
        let n = rng.random_range(0..16);
        let mut s = String::new();
        if rng.random_bool(0.7) {
            s.push_str("sc://");
        }
        for _ in 0..n {
            s.push_str(FRAGMENTS[rng.random_range(0..FRAGMENTS.len())]);
        }
        check(&s);
    }
}

#[test]
fn fuzz_mutated_valid_strings() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0002);
    let alphabet: Vec<char> = ":/;=%[]?#@-_. +\u{0}\n\té🦀aZ09AF".chars().collect();
    let mut accepted = 0;
    for _ in 0..20_000 {
        let seed = SEEDS[rng.random_range(0..SEEDS.len())];
        let mut chars: Vec<char> = seed.chars().collect();
        for _ in 0..rng.random_range(1..=4) {
            let op = rng.random_range(0..4);
            let len = chars.len();
            match op {
                0 => {
                    let at = rng.random_range(0..=len);
                    chars.insert(at, alphabet[rng.random_range(0..alphabet.len())]);
                }
                1 if len > 0 => {
                    chars.remove(rng.random_range(0..len));
                }
                2 if len > 0 => {
                    let at = rng.random_range(0..len);
                    chars[at] = alphabet[rng.random_range(0..alphabet.len())];
                }
                _ if len > 0 => {
                    let a = rng.random_range(0..len);
                    let b = rng.random_range(a..=len);
                    let dup: Vec<char> = chars[a..b].to_vec();
                    let at = rng.random_range(0..=len);
                    chars.splice(at..at, dup);
                }
                _ => {}
            }
        }
        let s: String = chars.into_iter().collect();
        if parse(&s).is_ok() {
            accepted += 1;
        }
        check(&s);
    }
    // The mutations should exercise both outcomes.
    assert!(accepted > 1_000 && accepted < 19_000, "accepted {accepted}");
}

#[test]
fn fuzz_random_bytes() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0003);
    for _ in 0..10_000 {
        let n = rng.random_range(0..64);
        let mut bytes: Vec<u8> = b"sc://".to_vec();
        bytes.extend((0..n).map(|_| rng.random::<u8>()));
        check(&String::from_utf8_lossy(&bytes));
        check(&String::from_utf8_lossy(&bytes[5..]));
    }
}
