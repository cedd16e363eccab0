//! The shared spec's valid and invalid connection-string vectors.

use super::*;

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
