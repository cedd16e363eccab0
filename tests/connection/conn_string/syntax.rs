//! URL syntax: parameter splitting, path, query and fragment, hosts, ports, metadata keys and values.

use super::*;

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
