//! [`TokenError`]: why a call could not be authenticated. A leaf: the
//! session's [`SparkError`](crate::session::SparkError) converts it.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

/// Why a call could not be authenticated with the provider's token. Each
/// names the provider ([`TokenProvider::name`](super::TokenProvider::name));
/// none contains the token.
#[derive(Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The provider returned an error instead of a token: the call was not
    /// sent. The provider's error is the `source()`.
    #[error("[TOKEN_PROVIDER_FAILED] token provider `{provider}` failed: {source}")]
    ProviderFailed {
        /// The provider's name.
        provider: String,
        /// What it returned.
        #[source]
        source: Arc<dyn StdError + Send + Sync>,
    },
    /// The server refused the provider's token again after a fresh one was
    /// asked for: the provider hands out tokens the server does not take.
    /// The server's last status is the `source()`.
    #[error(
        "[TOKEN_REFUSED] {call}the server refused the token of provider `{provider}` after {refreshes} refresh(es); last error: {}: {}",
        code_name(.status.code()),
        .status.message(),
        call = call_prefix(.rpc, .target.as_deref())
    )]
    Refused {
        /// The provider's name.
        provider: String,
        /// Fresh tokens asked for since the last progress.
        refreshes: u32,
        /// The RPC refused, when known.
        rpc: Option<&'static str>,
        /// The server, `host:port`, when known.
        target: Option<String>,
        /// The server's last answer.
        #[source]
        status: tonic::Status,
    },
}

impl TokenError {
    /// The provider this error is about.
    pub fn provider(&self) -> &str {
        match self {
            TokenError::ProviderFailed { provider, .. } | TokenError::Refused { provider, .. } => {
                provider
            }
        }
    }

    /// Names the RPC and its server on a refusal (the session, which knows them).
    pub(crate) fn set_call(&mut self, call: &'static str, server: &str) {
        if let TokenError::Refused { rpc, target, .. } = self {
            rpc.get_or_insert(call);
            target.get_or_insert_with(|| server.to_owned());
        }
    }
}

/// `ExecutePlan to host:port: `, as far as known.
fn call_prefix(rpc: &Option<&'static str>, target: Option<&str>) -> String {
    match (rpc, target) {
        (Some(rpc), Some(t)) => format!("{rpc} to {t}: "),
        (Some(rpc), None) => format!("{rpc}: "),
        (None, Some(t)) => format!("call to {t}: "),
        (None, None) => String::new(),
    }
}

/// The two codes a refusal has, as gRPC spells them.
fn code_name(code: tonic::Code) -> String {
    match code {
        tonic::Code::Unauthenticated => "UNAUTHENTICATED".to_owned(),
        tonic::Code::PermissionDenied => "PERMISSION_DENIED".to_owned(),
        other => format!("{other:?}"),
    }
}

/// The provider and what went wrong; the status as its code and message.
impl fmt::Debug for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenError::ProviderFailed { provider, source } => f
                .debug_struct("ProviderFailed")
                .field("provider", provider)
                .field("source", source)
                .finish(),
            TokenError::Refused {
                provider,
                refreshes,
                rpc,
                target,
                status,
            } => f
                .debug_struct("Refused")
                .field("provider", provider)
                .field("refreshes", refreshes)
                .field("rpc", rpc)
                .field("target", target)
                .field("code", &status.code())
                .field("message", &status.message())
                .finish(),
        }
    }
}
