//! Reading rich error details from a [`tonic::Status`], defensively.
//!
//! Spark Connect servers put a `google.rpc.Status` in the
//! `grpc-status-details-bin` trailer: an `ErrorInfo` with Spark's error class
//! and SQLSTATE, and (for retryable errors) a `RetryInfo`. Everything here
//! treats malformed details as absent and never panics. The one panic tonic
//! itself raises on such input (non-base64 header bytes) is stopped earlier,
//! by [`crate::sanitize`].

use std::collections::HashMap;
use std::time::Duration;

use prost::Message;
use tonic::Status;
use tonic_types::pb;

const RETRY_INFO_URL: &str = "type.googleapis.com/google.rpc.RetryInfo";
const ERROR_INFO_URL: &str = "type.googleapis.com/google.rpc.ErrorInfo";

fn details(status: &Status) -> Option<pb::Status> {
    if status.details().is_empty() {
        return None;
    }
    pb::Status::decode(status.details()).ok()
}

/// The `google.rpc.RetryInfo.retry_delay` of the first `RetryInfo` detail.
///
/// A `RetryInfo` without a delay (or with a negative one) gives
/// `Some(Duration::ZERO)`: its presence alone makes an error retryable.
/// Undecodable details give `None`.
///
/// This runs on every retry decision, so it walks the encoded
/// `google.rpc.Status` in place instead of decoding it into owned strings
/// and vectors; it accepts and rejects exactly what a full decode does
/// (checked against one by a property test).
pub fn retry_info(status: &Status) -> Option<Duration> {
    let details = status.details();
    if details.is_empty() {
        return None;
    }
    scan::retry_info(details).ok().flatten()
}

/// The slow reference: decode everything with prost.
#[cfg(test)]
fn retry_info_decoded(details: &[u8]) -> Option<Duration> {
    let rich = pb::Status::decode(details).ok()?;
    let any = rich.details.iter().find(|a| a.type_url == RETRY_INFO_URL)?;
    let info = pb::RetryInfo::decode(any.value.as_slice()).ok()?;
    Some(delay_of(info.retry_delay.map(|d| (d.seconds, d.nanos))))
}

fn delay_of(d: Option<(i64, i32)>) -> Duration {
    match d {
        Some((seconds, nanos)) if seconds > 0 || (seconds == 0 && nanos > 0) => {
            Duration::new(seconds.max(0) as u64, nanos.clamp(0, 999_999_999) as u32)
        }
        _ => Duration::ZERO,
    }
}

/// A zero-allocation walk over protobuf wire data, validating as prost does
/// (wire types, lengths, UTF-8 of `string` fields, unknown fields skipped).
mod scan {
    use std::time::Duration;

    use prost::DecodeError;

    /// The details are not a valid message; which way does not matter here.
    #[derive(Debug)]
    pub(super) struct Malformed;

    impl From<DecodeError> for Malformed {
        fn from(_: DecodeError) -> Self {
            Malformed
        }
    }
    use prost::encoding::{
        DecodeContext, WireType, check_wire_type, decode_key, decode_varint, skip_field,
    };

    use super::RETRY_INFO_URL;

    fn take<'a>(buf: &mut &'a [u8], wire: WireType) -> Result<&'a [u8], Malformed> {
        check_wire_type(WireType::LengthDelimited, wire)?;
        let len = decode_varint(buf)?;
        let len = usize::try_from(len).map_err(|_| Malformed)?;
        if len > buf.len() {
            return Err(Malformed);
        }
        let (head, tail) = buf.split_at(len);
        *buf = tail;
        Ok(head)
    }

    fn string<'a>(buf: &mut &'a [u8], wire: WireType) -> Result<&'a str, Malformed> {
        std::str::from_utf8(take(buf, wire)?).map_err(|_| Malformed)
    }

    fn varint(buf: &mut &[u8], wire: WireType) -> Result<u64, Malformed> {
        check_wire_type(WireType::Varint, wire)?;
        Ok(decode_varint(buf)?)
    }

    fn skip(buf: &mut &[u8], wire: WireType, tag: u32) -> Result<(), Malformed> {
        Ok(skip_field(wire, tag, buf, DecodeContext::default())?)
    }

    /// `google.protobuf.Any`: (type_url, value); later occurrences win.
    fn any(mut buf: &[u8]) -> Result<(&str, &[u8]), Malformed> {
        let (mut url, mut value) = ("", &[][..]);
        while !buf.is_empty() {
            let (tag, wire) = decode_key(&mut buf)?;
            match tag {
                1 => url = string(&mut buf, wire)?,
                2 => value = take(&mut buf, wire)?,
                _ => skip(&mut buf, wire, tag)?,
            }
        }
        Ok((url, value))
    }

    /// `google.protobuf.Duration` merged into `acc` (prost merges repeated
    /// occurrences of a message field).
    fn duration(mut buf: &[u8], acc: &mut (i64, i32)) -> Result<(), Malformed> {
        while !buf.is_empty() {
            let (tag, wire) = decode_key(&mut buf)?;
            match tag {
                1 => acc.0 = varint(&mut buf, wire)? as i64,
                2 => acc.1 = varint(&mut buf, wire)? as i32,
                _ => skip(&mut buf, wire, tag)?,
            }
        }
        Ok(())
    }

    /// `google.rpc.RetryInfo`.
    fn retry_info_message(mut buf: &[u8]) -> Result<Duration, Malformed> {
        let mut delay: Option<(i64, i32)> = None;
        while !buf.is_empty() {
            let (tag, wire) = decode_key(&mut buf)?;
            match tag {
                1 => {
                    let inner = take(&mut buf, wire)?;
                    duration(inner, delay.get_or_insert((0, 0)))?;
                }
                _ => skip(&mut buf, wire, tag)?,
            }
        }
        Ok(super::delay_of(delay))
    }

    /// `google.rpc.Status`: the first RetryInfo detail's delay. The whole
    /// message must be valid, as a full decode requires.
    pub(super) fn retry_info(mut buf: &[u8]) -> Result<Option<Duration>, Malformed> {
        let mut first: Option<&[u8]> = None;
        while !buf.is_empty() {
            let (tag, wire) = decode_key(&mut buf)?;
            match tag {
                1 => {
                    varint(&mut buf, wire)?;
                }
                2 => {
                    string(&mut buf, wire)?;
                }
                3 => {
                    let (url, value) = any(take(&mut buf, wire)?)?;
                    if first.is_none() && url == RETRY_INFO_URL {
                        first = Some(value);
                    }
                }
                _ => skip(&mut buf, wire, tag)?,
            }
        }
        first.map(retry_info_message).transpose()
    }
}

/// The first `google.rpc.ErrorInfo` detail, as Spark fills it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SparkErrorInfo {
    /// The exception class on the server (ErrorInfo `reason`).
    pub reason: String,
    /// ErrorInfo `domain`, `org.apache.spark` for Spark.
    pub domain: String,
    /// ErrorInfo `metadata`: `errorClass`, `sqlState`, `messageParameters`, `errorId`, …
    pub metadata: HashMap<String, String>,
}

impl SparkErrorInfo {
    /// `metadata["errorClass"]`.
    pub fn error_class(&self) -> Option<&str> {
        self.metadata.get("errorClass").map(String::as_str)
    }
    /// `metadata["sqlState"]`.
    pub fn sql_state(&self) -> Option<&str> {
        self.metadata.get("sqlState").map(String::as_str)
    }
    /// `metadata["errorId"]`, the key for FetchErrorDetails.
    pub fn error_id(&self) -> Option<&str> {
        self.metadata.get("errorId").map(String::as_str)
    }
}

/// The first `ErrorInfo` detail of `status`, if the details decode.
pub fn error_info(status: &Status) -> Option<SparkErrorInfo> {
    let rich = details(status)?;
    let any = rich.details.iter().find(|a| a.type_url == ERROR_INFO_URL)?;
    let info = pb::ErrorInfo::decode(any.value.as_slice()).ok()?;
    Some(SparkErrorInfo {
        reason: info.reason,
        domain: info.domain,
        metadata: info.metadata.into_iter().collect(),
    })
}

/// The message of the rich `google.rpc.Status`, if the details decode.
pub fn rich_message(status: &Status) -> Option<String> {
    details(status).map(|s| s.message)
}

/// Whether the status names `marker` (e.g. `INVALID_HANDLE.OPERATION_NOT_FOUND`)
/// in its message, in the rich status message, or as its ErrorInfo error class.
pub fn mentions(status: &Status, marker: &str) -> bool {
    if status.message().contains(marker) {
        return true;
    }
    if let Some(rich) = details(status)
        && rich.message.contains(marker)
    {
        return true;
    }
    error_info(status).is_some_and(|i| i.error_class() == Some(marker))
}

/// The Spark error class of `status`: ErrorInfo's `errorClass`, or else the
/// `[CLASS]` prefix Spark puts in messages (for when metadata was dropped
/// because it exceeded the server's size limit).
pub fn spark_error_class(status: &Status) -> Option<String> {
    if let Some(class) = error_info(status).and_then(|i| i.error_class().map(str::to_owned)) {
        return Some(class);
    }
    bracketed_class(status.message())
}

/// Parses a leading `[ERROR.CLASS]` from a Spark message.
pub(crate) fn bracketed_class(message: &str) -> Option<String> {
    let rest = message.trim_start().strip_prefix('[')?;
    let end = rest.find(']')?;
    let class = &rest[..end];
    let valid = !class.is_empty()
        && class
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_' || c == '.');
    valid.then(|| class.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;
    use tonic_types::{ErrorDetails, StatusExt};

    #[test]
    fn retry_info_roundtrip_and_garbage() {
        let s = Status::with_error_details(
            Code::Unavailable,
            "u",
            ErrorDetails::with_retry_info(Some(Duration::from_millis(1500))),
        );
        assert_eq!(retry_info(&s), Some(Duration::from_millis(1500)));
        let s =
            Status::with_error_details(Code::Unavailable, "u", ErrorDetails::with_retry_info(None));
        assert_eq!(retry_info(&s), Some(Duration::ZERO));
        let s = Status::with_details(
            Code::Unavailable,
            "u",
            bytes::Bytes::from_static(&[0xff; 9]),
        );
        assert_eq!(retry_info(&s), None);
        assert_eq!(error_info(&s), None);
    }

    fn status_bytes(details: Vec<(String, Vec<u8>)>, message: &str) -> Vec<u8> {
        pb::Status {
            code: 14,
            message: message.to_owned(),
            details: details
                .into_iter()
                .map(|(type_url, value)| prost_types::Any { type_url, value })
                .collect(),
        }
        .encode_to_vec()
    }

    fn retry_info_bytes(seconds: i64, nanos: i32) -> Vec<u8> {
        pb::RetryInfo {
            retry_delay: Some(prost_types::Duration { seconds, nanos }),
        }
        .encode_to_vec()
    }

    proptest::proptest! {
        /// The in-place scan agrees with a full prost decode on valid input
        /// and on any corruption of it.
        #[test]
        fn scan_agrees_with_full_decode(
            seconds in -5i64..100_000,
            nanos in -5i32..1_000_000_000,
            other_first in proptest::bool::ANY,
            flips in proptest::collection::vec((0usize..200, proptest::num::u8::ANY), 0..4),
            cut in proptest::option::of(0usize..200),
        ) {
            let mut details = vec![(RETRY_INFO_URL.to_owned(), retry_info_bytes(seconds, nanos))];
            if other_first {
                details.insert(0, ("type.googleapis.com/google.rpc.ErrorInfo".to_owned(), vec![10, 1, b'x']));
            }
            let mut bytes = status_bytes(details, "server says wait");
            for (at, b) in flips {
                if !bytes.is_empty() {
                    let i = at % bytes.len();
                    bytes[i] = b;
                }
            }
            if let Some(c) = cut {
                bytes.truncate(c.min(bytes.len()));
            }
            let fast = scan::retry_info(&bytes).ok().flatten();
            proptest::prop_assert_eq!(fast, retry_info_decoded(&bytes));
        }
    }

    #[test]
    fn scan_handles_edge_cases_like_prost() {
        for bytes in [
            vec![],
            vec![0x1a, 0x00],                               // an empty Any
            vec![0x12, 0x02, 0xff, 0xfe],                   // message not UTF-8
            vec![0x1a, 0x05, 0x0a, 0x03, 0xff, 0xfe, 0xfd], // type_url not UTF-8
            vec![0x0f],                                     // wire type 7
            vec![0x1a, 0x80],                               // truncated length
        ] {
            assert_eq!(
                scan::retry_info(&bytes).ok().flatten(),
                retry_info_decoded(&bytes),
                "{bytes:?}"
            );
        }
        // RetryInfo with no delay, and a message merged from two occurrences.
        let bytes = status_bytes(vec![(RETRY_INFO_URL.to_owned(), vec![])], "m");
        assert_eq!(scan::retry_info(&bytes).unwrap(), Some(Duration::ZERO));
        let mut value = retry_info_bytes(3, 0);
        value.extend(
            pb::RetryInfo {
                retry_delay: Some(prost_types::Duration {
                    seconds: 0,
                    nanos: 5_000_000,
                }),
            }
            .encode_to_vec(),
        );
        let bytes = status_bytes(vec![(RETRY_INFO_URL.to_owned(), value)], "m");
        assert_eq!(
            scan::retry_info(&bytes).ok().flatten(),
            retry_info_decoded(&bytes)
        );
    }

    #[test]
    fn error_class_from_info_or_message() {
        let mut md = HashMap::new();
        md.insert("errorClass".to_owned(), "PARSE_SYNTAX_ERROR".to_owned());
        md.insert("sqlState".to_owned(), "42601".to_owned());
        let s = Status::with_error_details(
            Code::Internal,
            "[PARSE_SYNTAX_ERROR] Syntax error",
            ErrorDetails::with_error_info(
                "org.apache.spark.sql.catalyst.parser.ParseException",
                "org.apache.spark",
                md,
            ),
        );
        assert_eq!(spark_error_class(&s).as_deref(), Some("PARSE_SYNTAX_ERROR"));
        assert_eq!(error_info(&s).unwrap().sql_state(), Some("42601"));
        let s = Status::internal("[INVALID_HANDLE.OPERATION_NOT_FOUND] The handle x is invalid.");
        assert_eq!(
            spark_error_class(&s).as_deref(),
            Some("INVALID_HANDLE.OPERATION_NOT_FOUND")
        );
        assert!(mentions(&s, "INVALID_HANDLE.OPERATION_NOT_FOUND"));
        assert_eq!(bracketed_class("[not a class] x"), None);
        assert_eq!(bracketed_class("no bracket"), None);
    }
}
