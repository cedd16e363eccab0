//! The value rules of a connection string: percent-decoding, booleans,
//! positive numbers, the UUID, the authority (host and port), host names and
//! metadata. Each returns a [`ConnectionStringError`] that names the part.

use std::borrow::Cow;
use std::net::Ipv6Addr;
use std::time::Duration;

use base64::Engine as _;
use percent_encoding::percent_decode_str;
use tonic::metadata::{
    AsciiMetadataKey, AsciiMetadataValue, BinaryMetadataKey, BinaryMetadataValue, MetadataMap,
};
use uuid::Uuid;

use super::error::{ConnectionStringError, ParamPart, invalid_value, quote_key};
use crate::connect::flow_control::{
    DEFAULT_CONNECTION_WINDOW, DEFAULT_STREAM_WINDOW, Http2FlowControl, check_window,
};
use crate::reattach::ids::is_canonical_uuid;

/// Header names that tonic strips or HTTP/2 forbids; accepting them would silently drop them
/// or break every call.
const FORBIDDEN_METADATA_KEYS: &[&str] = &[
    "te",
    "content-type",
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

pub(super) fn decode(
    raw: &str,
    index: usize,
    part: ParamPart,
) -> Result<Cow<'_, str>, ConnectionStringError> {
    percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| ConnectionStringError::PercentDecoding { index, part })
}

/// The `token` parameter (or `SPARK_CONNECT_AUTHENTICATE_TOKEN`), checked.
pub(super) fn token(
    value: impl Into<String>,
) -> Result<crate::token::Token, ConnectionStringError> {
    crate::token::Token::new(value).map_err(|e| invalid_value("token", e.reason()))
}

pub(super) fn is_printable_ascii(b: u8) -> bool {
    (0x20..=0x7e).contains(&b)
}

pub(super) fn non_empty(key: &str, value: Cow<'_, str>) -> Result<String, ConnectionStringError> {
    if value.is_empty() {
        Err(invalid_value(key, "must not be empty"))
    } else {
        Ok(value.into_owned())
    }
}

pub(super) fn parse_bool(key: &str, value: &str) -> Result<bool, ConnectionStringError> {
    if value.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if value.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(invalid_value(key, "must be 'true' or 'false'"))
    }
}

/// Parses a positive decimal integer. Only ASCII digits: `u64::from_str` would also take a
/// leading `+`.
pub(super) fn parse_positive(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse::<u64>().ok().filter(|&n| n > 0)
}

pub(super) fn parse_millis(key: &str, value: &str) -> Result<Duration, ConnectionStringError> {
    parse_positive(value)
        .map(Duration::from_millis)
        .ok_or_else(|| invalid_value(key, "must be a positive integer number of milliseconds"))
}

pub(super) fn parse_max_size(value: &str) -> Result<usize, ConnectionStringError> {
    parse_positive(value)
        .filter(|&n| n <= u64::from(u32::MAX))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| {
            invalid_value(
                "grpc_max_message_size",
                "must be an integer between 1 and 4294967295",
            )
        })
}

/// Accepts only the canonical hyphenated 8-4-4-4-12 form.
pub(super) fn parse_uuid(value: &str) -> Result<Uuid, ConnectionStringError> {
    let err = || invalid_value("session_id", "must be a UUID in 8-4-4-4-12 hex form");
    if !is_canonical_uuid(value) {
        return Err(err());
    }
    Uuid::parse_str(value).map_err(|_| err())
}

/// Splits and validates `host[:port]`; the port is `None` when not written
/// (the caller applies the default). Never quotes the authority in errors: a malformed
/// string can put parameters (and a token) there.
pub(super) fn parse_authority(
    authority: &str,
) -> Result<(String, Option<u16>), ConnectionStringError> {
    use ConnectionStringError::{Host, Path, Port};
    if authority.contains(';') {
        return Err(Path {
            reason: "parameters must follow a '/', as in sc://host:port/;key=value",
        });
    }
    if authority.contains('@') {
        return Err(Host {
            reason: "user info ('user@') is not supported",
        });
    }
    if authority.is_empty() {
        return Err(Host {
            reason: "the host is missing",
        });
    }
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let Some((inside, after)) = bracketed.split_once(']') else {
            return Err(Host {
                reason: "IPv6 address is missing its closing ']'",
            });
        };
        if inside.parse::<Ipv6Addr>().is_err() {
            return Err(Host {
                reason: "invalid IPv6 address (zone ids are not supported)",
            });
        }
        let port = if after.is_empty() {
            None
        } else if let Some(p) = after.strip_prefix(':') {
            Some(p)
        } else {
            return Err(Host {
                reason: "unexpected characters after the IPv6 address",
            });
        };
        (inside.to_ascii_lowercase(), port)
    } else {
        let (host, port) = match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        if host.is_empty() {
            return Err(Host {
                reason: "the host is missing",
            });
        }
        if port.is_some_and(|p| p.contains(':')) {
            return Err(Host {
                reason: "IPv6 addresses must be enclosed in '[' and ']'",
            });
        }
        validate_hostname(host)?;
        (host.to_owned(), port)
    };
    let port = match port {
        None => None,
        Some("") => {
            return Err(Port {
                reason: "empty port after ':'",
            });
        }
        Some(p) => match parse_positive(p).and_then(|n| u16::try_from(n).ok()) {
            Some(n) => Some(n),
            None => {
                return Err(Port {
                    reason: "must be an integer between 1 and 65535",
                });
            }
        },
    };
    Ok((host, port))
}

pub(super) fn validate_hostname(host: &str) -> Result<(), ConnectionStringError> {
    let err = |reason| Err(ConnectionStringError::Host { reason });
    if host.len() > 253 {
        return err("longer than 253 characters");
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return err("only ASCII letters, digits, '-', '_' and '.' are allowed");
    }
    for label in host.split('.') {
        if label.is_empty() {
            return err("empty label (leading, trailing or double '.')");
        }
        if label.len() > 63 {
            return err("a label is longer than 63 characters");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return err("a label starts or ends with '-'");
        }
    }
    Ok(())
}

pub(super) fn insert_metadata(
    map: &mut MetadataMap,
    key: &str,
    value: &str,
    has_token: bool,
) -> Result<(), ConnectionStringError> {
    let bad_key = |reason| ConnectionStringError::InvalidMetadataKey {
        key: quote_key(key),
        reason,
    };
    let bad_value = |reason| ConnectionStringError::InvalidMetadataValue {
        key: quote_key(key),
        reason,
    };
    let lower = key.to_ascii_lowercase();
    if !lower
        .bytes()
        .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || matches!(b, b'_' | b'-' | b'.'))
    {
        return Err(bad_key(
            "only ASCII letters, digits, '_', '-' and '.' are allowed",
        ));
    }
    if lower.starts_with("grpc-") {
        return Err(bad_key("the 'grpc-' prefix is reserved by gRPC"));
    }
    if FORBIDDEN_METADATA_KEYS.contains(&lower.as_str()) {
        return Err(bad_key("this header is managed by the transport"));
    }
    if has_token && lower == "authorization" {
        return Err(bad_key(
            "conflicts with the token, which is sent as 'authorization: Bearer ...'",
        ));
    }
    if lower.ends_with("-bin") {
        // The same engine that checks `grpc-status-details-bin`: gRPC's
        // binary metadata is standard base64, padding optional.
        let bytes = tonic_retry::sanitize::GRPC_BASE64
            .decode(value)
            .map_err(|_| bad_value("keys ending in '-bin' need standard base64 values"))?;
        let k = BinaryMetadataKey::from_bytes(lower.as_bytes())
            .map_err(|_| bad_key("not a valid binary metadata key"))?;
        let mut v = BinaryMetadataValue::from_bytes(&bytes);
        v.set_sensitive(true);
        map.insert_bin(k, v);
    } else {
        if !value.bytes().all(is_printable_ascii) {
            return Err(bad_value("must be printable ASCII"));
        }
        let k = AsciiMetadataKey::from_bytes(lower.as_bytes())
            .map_err(|_| bad_key("not a valid metadata key"))?;
        let mut v = AsciiMetadataValue::try_from(value)
            .map_err(|_| bad_value("not a valid header value"))?;
        v.set_sensitive(true);
        map.insert(k, v);
    }
    Ok(())
}

pub(super) const STREAM_WINDOW_KEY: &str = "grpc_initial_stream_window_size";
pub(super) const CONNECTION_WINDOW_KEY: &str = "grpc_initial_connection_window_size";
pub(super) const BDP_PROBE_KEY: &str = "grpc_http2_bdp_probe";

pub(super) fn parse_window(key: &str, value: &str) -> Result<u32, ConnectionStringError> {
    parse_positive(value)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| check_window(n).is_ok())
        .ok_or_else(|| invalid_value(key, "must be an integer between 65535 and 2147483647"))
}

/// The flow-control parameters as written, resolved into one setting once all are read.
#[derive(Default)]
pub(super) struct WindowParams {
    pub(super) stream: Option<u32>,
    pub(super) connection: Option<u32>,
    pub(super) bdp_probe: bool,
}

impl WindowParams {
    pub(super) fn resolve(self) -> Result<Http2FlowControl, ConnectionStringError> {
        if self.bdp_probe {
            if self.stream.is_some() || self.connection.is_some() {
                return Err(invalid_value(
                    BDP_PROBE_KEY,
                    "'true' cannot be combined with a window size (the adaptive window replaces it)",
                ));
            }
            return Ok(Http2FlowControl::Adaptive);
        }
        let (stream_window, connection_window) = match (self.stream, self.connection) {
            (None, None) => (DEFAULT_STREAM_WINDOW, DEFAULT_CONNECTION_WINDOW),
            (Some(s), None) => (s, s.max(DEFAULT_CONNECTION_WINDOW)),
            (None, Some(c)) => (c.min(DEFAULT_STREAM_WINDOW), c),
            (Some(s), Some(c)) if c < s => {
                return Err(invalid_value(
                    CONNECTION_WINDOW_KEY,
                    "must be at least grpc_initial_stream_window_size",
                ));
            }
            (Some(s), Some(c)) => (s, c),
        };
        Ok(Http2FlowControl::Fixed {
            stream_window,
            connection_window,
        })
    }
}
