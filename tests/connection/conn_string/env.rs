//! Environment fallbacks, and the token kept out of Debug and errors.

use super::*;

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
