//! [`FaultProxyError`]: why a proxy did not start.

use std::io;
use std::net::SocketAddr;

/// Which of the proxy's two addresses a [`FaultProxyError::NotLoopback`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrRole {
    /// The address the proxy listens on.
    Listen,
    /// The server the proxy forwards to.
    Upstream,
}

impl std::fmt::Display for AddrRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AddrRole::Listen => "listen",
            AddrRole::Upstream => "upstream",
        })
    }
}

/// Errors from [`FaultProxyBuilder::start`](crate::FaultProxyBuilder::start).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FaultProxyError {
    /// The listen or upstream address is not a loopback address; the proxy is
    /// a test tool and refuses to carry traffic anywhere else.
    #[error("fault proxy {role} address {addr} is not a loopback address")]
    NotLoopback {
        /// Which address was refused.
        role: AddrRole,
        /// The refused address.
        addr: SocketAddr,
    },
    /// Binding the listening socket failed.
    #[error("fault proxy could not bind")]
    Bind(#[source] io::Error),
    /// [`FaultProxy::builder_for_remote`](crate::FaultProxy::builder_for_remote)
    /// could not read a loopback `host:port` out of the connection string.
    #[error("fault proxy: cannot take a loopback host:port from {0:?}")]
    InvalidRemote(String),
}
