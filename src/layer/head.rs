//! [`RetainedHead`]: what a retry needs of a request's head, kept without
//! copying the head up front.
//!
//! A retry must send the same method, URI, headers and extensions as the
//! first attempt, and the first attempt consumes its request. Cloning
//! `http::request::Parts` for every call costs five allocations for a tonic
//! request (the header map's two tables; the extensions' box, table and
//! value), which `benches/layer.rs` measured at about two points of the
//! layer's added latency. Most calls never retry, so the first attempt
//! takes the original head, and this copy keeps what a tonic request holds
//! inline: a few headers, and tonic's own [`GrpcMethod`] extension. Anything
//! else falls back to a plain clone.

use http::header::{HeaderName, HeaderValue};
use http::{Extensions, HeaderMap, Method, Request, Uri, Version};
use tonic::GrpcMethod;

/// Headers kept inline: a tonic request reaches the layer with `te` and
/// `content-type`, plus the application's metadata (a token, a session).
const INLINE_HEADERS: usize = 4;

/// A request head, kept for retries (see the module docs).
#[derive(Debug)]
pub(crate) struct RetainedHead {
    method: Method,
    uri: Uri,
    version: Version,
    headers: Headers,
    extensions: Ext,
}

#[derive(Debug)]
enum Headers {
    /// Up to [`INLINE_HEADERS`] (name, value) pairs in iteration order.
    Inline([Option<(HeaderName, HeaderValue)>; INLINE_HEADERS]),
    /// A larger map, cloned.
    Map(HeaderMap),
}

#[derive(Debug)]
enum Ext {
    /// No extension at all.
    Empty,
    /// tonic's method extension alone: what every generated client sets.
    Grpc(GrpcMethod<'static>),
    /// Anything else, cloned.
    Other(Extensions),
}

impl Headers {
    fn of(map: &HeaderMap) -> Self {
        if map.len() > INLINE_HEADERS {
            return Headers::cloned(map);
        }
        let mut slots: [Option<(HeaderName, HeaderValue)>; INLINE_HEADERS] = Default::default();
        for (slot, (name, value)) in slots.iter_mut().zip(map) {
            *slot = Some((name.clone(), value.clone()));
        }
        Headers::Inline(slots)
    }

    // The rare shapes are out of line, so that the common copy stays small.
    #[cold]
    #[inline(never)]
    fn cloned(map: &HeaderMap) -> Self {
        Headers::Map(map.clone())
    }
}

impl Ext {
    fn of(ext: &Extensions) -> Self {
        match ext.len() {
            0 => Ext::Empty,
            1 => match ext.get::<GrpcMethod<'static>>() {
                Some(m) => Ext::Grpc(m.clone()),
                None => Ext::cloned(ext),
            },
            _ => Ext::cloned(ext),
        }
    }

    #[cold]
    #[inline(never)]
    fn cloned(ext: &Extensions) -> Self {
        Ext::Other(ext.clone())
    }
}

impl RetainedHead {
    /// Keep what a retry needs of `parts`. Allocates nothing for a tonic
    /// request with at most four headers and no extension but its
    /// [`GrpcMethod`].
    pub(crate) fn of(parts: &http::request::Parts) -> Self {
        RetainedHead {
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            version: parts.version,
            headers: Headers::of(&parts.headers),
            extensions: Ext::of(&parts.extensions),
        }
    }

    /// The request path, e.g. `/spark.connect.SparkConnectService/Config`.
    pub(crate) fn path(&self) -> &str {
        self.uri.path()
    }

    /// A head equal to the one this was made from, for another attempt.
    pub(crate) fn to_parts(&self) -> http::request::Parts {
        let (mut parts, ()) = Request::new(()).into_parts();
        parts.method = self.method.clone();
        parts.uri = self.uri.clone();
        parts.version = self.version;
        parts.headers = match &self.headers {
            Headers::Inline(slots) => {
                let mut map = HeaderMap::with_capacity(INLINE_HEADERS);
                for (name, value) in slots.iter().flatten() {
                    map.append(name.clone(), value.clone());
                }
                map
            }
            Headers::Map(map) => map.clone(),
        };
        parts.extensions = match &self.extensions {
            Ext::Empty => Extensions::new(),
            Ext::Grpc(m) => {
                let mut e = Extensions::new();
                e.insert(m.clone());
                e
            }
            Ext::Other(e) => e.clone(),
        };
        parts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Tag(u32);

    fn parts(headers: usize, grpc: bool, tag: bool) -> http::request::Parts {
        let mut b = Request::builder()
            .method(Method::POST)
            .uri("/pkg.Svc/Method")
            .version(Version::HTTP_2);
        for i in 0..headers {
            // Repeated names, to keep multi-valued headers in order.
            b = b.header(format!("x-h{}", i % 3), format!("v{i}"));
        }
        let (mut p, ()) = b.body(()).unwrap().into_parts();
        if headers > 0 {
            let mut v = HeaderValue::from_static("secret");
            v.set_sensitive(true);
            p.headers.append("authorization", v);
        }
        if grpc {
            p.extensions.insert(GrpcMethod::new("pkg.Svc", "Method"));
        }
        if tag {
            p.extensions.insert(Tag(7));
        }
        p
    }

    #[test]
    fn round_trip_inline_and_cloned() {
        for headers in [0, 1, 3, 4, 9] {
            for (grpc, tag) in [(false, false), (true, false), (false, true), (true, true)] {
                let original = parts(headers, grpc, tag);
                let head = RetainedHead::of(&original);
                for _ in 0..2 {
                    let copy = head.to_parts();
                    assert_eq!(copy.method, original.method);
                    assert_eq!(copy.uri, original.uri);
                    assert_eq!(copy.version, original.version);
                    assert_eq!(copy.headers, original.headers, "{headers} headers");
                    let order = |h: &HeaderMap| {
                        h.iter()
                            .map(|(k, v)| (k.clone(), v.clone(), v.is_sensitive()))
                            .collect::<Vec<_>>()
                    };
                    assert_eq!(order(&copy.headers), order(&original.headers));
                    assert_eq!(copy.extensions.len(), original.extensions.len());
                    let m = |e: &Extensions| {
                        e.get::<GrpcMethod<'static>>()
                            .map(|m| (m.service().to_owned(), m.method().to_owned()))
                    };
                    assert_eq!(m(&copy.extensions), m(&original.extensions));
                    assert_eq!(
                        copy.extensions.get::<Tag>(),
                        original.extensions.get::<Tag>()
                    );
                }
                assert_eq!(head.path(), "/pkg.Svc/Method");
                let inline = matches!(head.headers, Headers::Inline(_));
                assert_eq!(inline, original.headers.len() <= INLINE_HEADERS);
                assert_eq!(matches!(head.extensions, Ext::Other(_)), tag);
            }
        }
    }
}
