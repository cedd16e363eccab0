//! Tests for `session::conn_string`: the test vectors of Spark's JVM client (the `URIs` pack of
//! `SparkConnectClientSuite`, its "Check URI: …" tests), every parameter,
//! environment fallbacks, redaction, and fuzzing for panics.

use std::collections::HashMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use spark_connect_retry::session::Http2FlowControl;
use spark_connect_retry::session::conn_string::{
    ConnectionString, ConnectionStringError as E, Keepalive, ParamPart,
};
use spark_connect_retry::token::Token;

mod env;
mod fuzz;
mod options;
mod spec;
mod syntax;

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

// ---------------------------------------------------------------- secrets

const SECRET: &str = "SuperSecretTokenValue42";
