//! Seeded fuzzing: every input parses or fails with a typed error, never a panic.

use super::*;

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
