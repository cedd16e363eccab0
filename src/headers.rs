//! gRPC header names as pre-parsed [`HeaderName`]s.
//!
//! Looking a header up by `&str` parses and validates the name on every call;
//! on the layer's per-call path that was measurable (instruction counts in
//! `benches/layer.rs`), so the names are built once, at compile time.

use http::{HeaderMap, HeaderName};

pub(crate) const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
pub(crate) const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
pub(crate) const GRPC_STATUS_DETAILS: HeaderName =
    HeaderName::from_static("grpc-status-details-bin");
pub(crate) const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
pub(crate) const GRPC_PREVIOUS_RPC_ATTEMPTS: HeaderName =
    HeaderName::from_static("grpc-previous-rpc-attempts");
pub(crate) const GRPC_RETRY_PUSHBACK_MS: HeaderName =
    HeaderName::from_static("grpc-retry-pushback-ms");

/// Whether `headers` carry `grpc-status: 0`, without building a
/// [`tonic::Status`] (which copies the whole map into its metadata).
/// `None` when there is no `grpc-status` at all.
pub(crate) fn grpc_status_is_ok(headers: &HeaderMap) -> Option<bool> {
    headers.get(GRPC_STATUS).map(|v| v.as_bytes() == b"0")
}

/// The status headers of one header block, found in a single pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatusScan {
    /// As [`grpc_status_is_ok`].
    pub(crate) ok: Option<bool>,
    /// Whether `grpc-status-details-bin` is present (it may need sanitizing).
    pub(crate) details: bool,
}

/// Find `grpc-status` and `grpc-status-details-bin` in `headers`. A
/// response's header blocks are small (content type, date, status), and
/// walking a few entries is cheaper than hashing custom names once per
/// lookup; a large map is looked up instead.
pub(crate) fn scan_status(headers: &HeaderMap) -> StatusScan {
    if headers.len() > 8 {
        return StatusScan {
            ok: grpc_status_is_ok(headers),
            details: headers.contains_key(GRPC_STATUS_DETAILS),
        };
    }
    let mut scan = StatusScan {
        ok: None,
        details: false,
    };
    // Compared as strings: a `HeaderName` constant is a fresh value at each
    // use, built and dropped per comparison.
    for (name, value) in headers {
        match name.as_str() {
            // The first value counts, as `HeaderMap::get` returns it.
            "grpc-status" => {
                scan.ok.get_or_insert(value.as_bytes() == b"0");
            }
            "grpc-status-details-bin" => scan.details = true,
            _ => {}
        }
    }
    scan
}

/// Whether `headers` holds `name`: a walk over a small map (a request's
/// head from tonic has a handful of entries), a lookup in a large one.
pub(crate) fn contains(headers: &HeaderMap, name: &HeaderName) -> bool {
    if headers.len() > 8 {
        return headers.contains_key(name);
    }
    headers.keys().any(|k| k == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn ok_status_check_agrees_with_tonic() {
        for (v, ok) in [
            ("0", true),
            (" 0 ", false),
            ("14", false),
            ("00x", false),
            ("", false),
        ] {
            let mut h = HeaderMap::new();
            h.insert(GRPC_STATUS, HeaderValue::from_static(v));
            assert_eq!(grpc_status_is_ok(&h), Some(ok), "{v:?}");
            let tonic_ok = tonic::Status::from_header_map(&h).map(|s| s.code() == tonic::Code::Ok);
            if ok {
                assert_eq!(tonic_ok, Some(true), "{v:?}");
            } else {
                assert_ne!(tonic_ok, Some(true), "{v:?}");
            }
        }
        assert_eq!(grpc_status_is_ok(&HeaderMap::new()), None);
    }

    #[test]
    fn scan_agrees_with_lookups_small_and_large() {
        let blocks: [&[(&str, &str)]; 6] = [
            &[],
            &[("te", "trailers"), ("grpc-timeout", "5S")],
            &[("content-type", "application/grpc"), ("date", "x")],
            &[("grpc-status", "0"), ("grpc-message", "")],
            &[("grpc-status", "14"), ("grpc-status-details-bin", "@@")],
            &[("grpc-status", "0"), ("grpc-status", "3")],
        ];
        for block in blocks {
            for padding in [0usize, 12] {
                let mut h = HeaderMap::new();
                for i in 0..padding {
                    h.insert(
                        HeaderName::try_from(format!("x-pad-{i}")).unwrap(),
                        HeaderValue::from_static("p"),
                    );
                }
                for (k, v) in block {
                    h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
                }
                let scan = scan_status(&h);
                assert_eq!(scan.ok, grpc_status_is_ok(&h), "{block:?} {padding}");
                assert_eq!(
                    scan.details,
                    h.contains_key(GRPC_STATUS_DETAILS),
                    "{block:?} {padding}"
                );
                for name in [&GRPC_STATUS, &GRPC_STATUS_DETAILS, &GRPC_TIMEOUT] {
                    assert_eq!(
                        contains(&h, name),
                        h.contains_key(name),
                        "{name} in {block:?} {padding}"
                    );
                }
            }
        }
    }
}
