//! The shared bearer token clients must present: [`ClientToken`].

use std::fmt;
use std::path::Path;

use http::HeaderMap;
use http::header::AUTHORIZATION;
use subtle::ConstantTimeEq;
use tonic::Status;

use crate::error::GuardError;

/// A token every client must send as `authorization: Bearer <token>`
/// (PySpark and the Spark Connect clients: `;token=...` in the connection
/// string, which they send over TLS or to localhost only).
///
/// Compared in constant time; never logged, and shown as `<redacted>` by
/// Debug. A client's token is checked and then removed: the upstream sees
/// the guard's own upstream token (from its connection string or token
/// provider), never the client's.
#[derive(Clone)]
pub struct ClientToken {
    token: Vec<u8>,
}

impl fmt::Debug for ClientToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientToken(<redacted>)")
    }
}

impl ClientToken {
    /// This token: visible ASCII (as an HTTP header carries it), not empty.
    pub fn new(token: impl Into<String>) -> Result<ClientToken, GuardError> {
        let token = token.into();
        if token.is_empty() {
            return Err(GuardError::InvalidOption {
                option: "client token",
                reason: "is empty",
            });
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(GuardError::InvalidOption {
                option: "client token",
                reason: "must be visible ASCII without spaces",
            });
        }
        Ok(ClientToken {
            token: token.into_bytes(),
        })
    }

    /// The token in this file (one line; surrounding whitespace ignored).
    pub fn from_file(path: impl AsRef<Path>) -> Result<ClientToken, GuardError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| GuardError::File {
            what: "client token file",
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::new(text.trim())
    }

    /// Checks a call's headers: `Ok` with the client's `authorization`
    /// removed, or UNAUTHENTICATED naming what is missing or wrong.
    pub(crate) fn admit(&self, headers: &mut HeaderMap) -> Result<(), Status> {
        let Some(value) = headers.get(AUTHORIZATION) else {
            return Err(Status::unauthenticated(
                "spark-connect-guard: no client token: send `authorization: Bearer <token>` \
                 (`;token=...` in the connection string)",
            ));
        };
        let bytes = value.as_bytes();
        let presented = match bytes.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => &bytes[7..],
            _ => {
                return Err(Status::unauthenticated(
                    "spark-connect-guard: the authorization header is not `Bearer <token>`",
                ));
            }
        };
        if bool::from(presented.ct_eq(&self.token)) {
            headers.remove(AUTHORIZATION);
            Ok(())
        } else {
            Err(Status::unauthenticated(
                "spark-connect-guard: the client token is wrong",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ClientToken;
    use http::HeaderMap;

    fn headers(auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = auth {
            h.insert("authorization", a.parse().unwrap());
        }
        h
    }

    #[test]
    fn the_token_is_checked_removed_and_never_shown() {
        let t = ClientToken::new("s3cret").unwrap();
        assert_eq!(format!("{t:?}"), "ClientToken(<redacted>)");
        let mut ok = headers(Some("Bearer s3cret"));
        t.admit(&mut ok).unwrap();
        assert!(ok.get("authorization").is_none());
        t.admit(&mut headers(Some("bearer s3cret"))).unwrap();
        for (h, says) in [
            (None, "no client token"),
            (Some("Basic s3cret"), "not `Bearer <token>`"),
            (Some("Bearer s3cre"), "wrong"),
            (Some("Bearer s3cret2"), "wrong"),
        ] {
            let e = t.admit(&mut headers(h)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated);
            assert!(e.message().contains(says), "{e:?}");
            assert!(!e.message().contains("s3cret"), "{e:?}");
        }
        assert!(ClientToken::new("").is_err());
        assert!(ClientToken::new("a b").is_err());
    }
}
