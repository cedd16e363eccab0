//! [`Token`]: a bearer token that never prints itself.
//!
//! *Why a type of its own:* a token is a secret, and a `String` ends up in
//! a `Debug` print, a log line or an error sooner or later. Every token the
//! crate holds (a connection string's, a provider's) is this type, whose
//! `Debug` and `Display` print `<redacted>`.

use std::fmt;

/// A bearer token. `Debug` and `Display` print `<redacted>`; use
/// [`Token::expose_secret`] to read it.
///
/// ```
/// use spark_connect_retry::token::Token;
/// let t = Token::new("s3cr3t").unwrap();
/// assert_eq!(format!("{t:?} {t}"), "<redacted> <redacted>");
/// assert_eq!(t.expose_secret(), "s3cr3t");
/// assert_eq!(Token::new("").unwrap_err().to_string(), "invalid token: must not be empty");
/// ```
#[derive(Clone)]
pub struct Token(String);

/// Why a string is not a token; it never contains the string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid token: {reason}")]
pub struct InvalidToken {
    reason: &'static str,
}

impl InvalidToken {
    /// What is wrong with it.
    pub(crate) fn reason(&self) -> &'static str {
        self.reason
    }
}

impl Token {
    /// Wraps a token. It must be non-empty printable ASCII, so that
    /// `Bearer <token>` is a valid header value.
    pub fn new(token: impl Into<String>) -> Result<Self, InvalidToken> {
        let token = token.into();
        if token.is_empty() {
            return Err(InvalidToken {
                reason: "must not be empty",
            });
        }
        if !token.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return Err(InvalidToken {
                reason: "must be printable ASCII",
            });
        }
        Ok(Token(token))
    }

    /// The secret itself. Do not log it.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}
