//! Reading a server's requested delay (`google.rpc.RetryInfo`) from a
//! [`tonic::Status`], defensively.
//!
//! A server that is overloaded or restarting can say how long its clients
//! should wait: a `google.rpc.Status` in the `grpc-status-details-bin`
//! trailer carrying a `RetryInfo`. The retry policy uses it as a floor on its
//! backoff. The bytes come from the wire, so they may be anything. Everything here
//! treats malformed details as absent and never panics. The one panic tonic
//! itself raises on such input (non-base64 header bytes) is stopped earlier,
//! by [`crate::sanitize`].

use std::time::Duration;

use tonic::Status;

const RETRY_INFO_URL: &str = "type.googleapis.com/google.rpc.RetryInfo";

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
pub(crate) fn retry_info(status: &Status) -> Option<Duration> {
    let details = status.details();
    if details.is_empty() {
        return None;
    }
    scan::retry_info(details).ok().flatten()
}

/// The slow reference: decode everything with prost.
#[cfg(test)]
fn retry_info_decoded(details: &[u8]) -> Option<Duration> {
    use prost::Message;
    use tonic_types::pb;
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

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use tonic::Code;
    use tonic_types::{ErrorDetails, StatusExt, pb};

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
}
