//! Egress proxies: a session's connections through an HTTP CONNECT proxy.
//!
//! *Why:* many companies let programs reach the outside, Spark included,
//! only through a forward proxy named in `HTTPS_PROXY`. The official Rust
//! client honours it since 4.3 (SPARK-61773); a client that ignores it
//! cannot connect at all there. A gRPC connection is tunnelled with
//! `CONNECT host:port`, whether or not it then speaks TLS, so the proxy
//! for a Spark Connect server is the one for `https://host:port`:
//! `HTTPS_PROXY` / `https_proxy`, else `ALL_PROXY` / `all_proxy`, unless
//! `NO_PROXY` / `no_proxy` names the host. Credentials in the proxy URL
//! (`http://user:password@proxy:3128`) go out as `Proxy-Authorization:
//! Basic`. The environment is read by `hyper-util`'s matcher (curl's
//! rules) and the tunnel is `hyper-util`'s `Tunnel`; this file only
//! chooses.
//!
//! A proxy that refuses the tunnel, or goes away, is a failed connection
//! like any other: the policy classifies and retries it, and a stream
//! reattaches through a fresh tunnel.

use std::fmt;

use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::proxy::matcher::Matcher;

use crate::connector::Connector;

/// Which proxy a session's connections go through.
#[derive(Clone, Default)]
pub(crate) enum EgressProxy {
    /// As the environment says (the default).
    #[default]
    FromEnv,
    /// Straight to the server.
    Direct,
    /// Through this proxy URL, whatever the environment says.
    Url(String),
}

impl fmt::Debug for EgressProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EgressProxy::FromEnv => f.write_str("FromEnv"),
            EgressProxy::Direct => f.write_str("Direct"),
            // The URL may carry credentials.
            EgressProxy::Url(_) => f.write_str("Url(<redacted>)"),
        }
    }
}

/// Why a proxy URL cannot be used; it never contains the URL, which may
/// carry credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid egress proxy URL: {reason}")]
pub struct InvalidProxyUrl {
    reason: &'static str,
}

impl EgressProxy {
    /// Checks a proxy URL given by the program (the environment's are
    /// read as curl reads them).
    pub(crate) fn check(&self) -> Result<(), InvalidProxyUrl> {
        let EgressProxy::Url(url) = self else {
            return Ok(());
        };
        let invalid = |reason| Err(InvalidProxyUrl { reason });
        let Ok(uri) = url.parse::<Uri>() else {
            return invalid("not a URL");
        };
        match uri.scheme_str() {
            Some("http") => {}
            Some(_) => return invalid("the scheme must be http (an HTTP CONNECT proxy)"),
            None => return invalid("the scheme is missing (http://host:port)"),
        }
        if uri.host().is_none_or(str::is_empty) {
            return invalid("the host is missing");
        }
        if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return invalid("a proxy URL has no path or query");
        }
        Ok(())
    }

    /// The connector that tunnels to `authority` (`host:port`) through the
    /// chosen proxy, or `None` to connect directly.
    pub(crate) fn connector_for(
        &self,
        authority: &str,
    ) -> Result<Option<Connector>, InvalidProxyUrl> {
        self.check()?;
        let matcher = match self {
            EgressProxy::Direct => return Ok(None),
            EgressProxy::FromEnv => Matcher::from_env(),
            EgressProxy::Url(url) => Matcher::builder().all(url.clone()).build(),
        };
        let Ok(target) = format!("https://{authority}").parse::<Uri>() else {
            return Ok(None);
        };
        let Some(intercept) = matcher.intercept(&target) else {
            return Ok(None);
        };
        if intercept.uri().scheme_str() != Some("http") {
            return Err(InvalidProxyUrl {
                reason: "the scheme must be http (an HTTP CONNECT proxy)",
            });
        }
        let mut dial = HttpConnector::new();
        dial.set_nodelay(true);
        let mut tunnel = Tunnel::new(intercept.uri().clone(), dial);
        if let Some(auth) = intercept.basic_auth() {
            tunnel = tunnel.with_auth(auth.clone());
        }
        tracing::debug!(proxy = %redacted(intercept.uri()), "connecting through an egress proxy");
        Ok(Some(Connector::new(tunnel)))
    }
}

/// The proxy's `host:port`, for logs: no scheme, no credentials.
fn redacted(uri: &Uri) -> String {
    match (uri.host(), uri.port_u16()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_owned(),
        _ => "?".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_urls_are_named_without_the_url() {
        for (url, reason) in [
            ("not a url at all", "not a URL"),
            ("https://u:secret@proxy:3128", "the scheme must be http"),
            ("proxy:3128", "the scheme"),
            ("http://u:secret@proxy:3128/path", "no path or query"),
        ] {
            let err = EgressProxy::Url(url.into())
                .check()
                .unwrap_err()
                .to_string();
            assert!(err.contains(reason), "{url}: {err}");
            assert!(!err.contains("secret"), "{err}");
        }
        assert!(
            EgressProxy::Url("http://u:p@proxy:3128".into())
                .check()
                .is_ok()
        );
        let debug = format!(
            "{:?}",
            EgressProxy::Url("http://u:secret@proxy:3128".into())
        );
        assert!(!debug.contains("secret"), "{debug}");
    }

    #[test]
    fn direct_and_an_explicit_proxy_win_over_the_environment() {
        assert!(
            EgressProxy::Direct
                .connector_for("spark:15002")
                .unwrap()
                .is_none()
        );
        let explicit = EgressProxy::Url("http://127.0.0.1:3128".into());
        assert!(explicit.connector_for("spark:15002").unwrap().is_some());
    }
}
