//! Connecting: from an `sc://` string (or the builder's options) to a
//! tonic channel that carries the token, TLS and HTTP/2 settings.
//!
//! Everything that must be right before the first RPC lives here, apart
//! from the session that uses it: the connection string ([`conn_string`]),
//! TLS ([`tls`]), the channel ([`channel`]), HTTP/2 flow control and the
//! result settings (compression, rows per batch). The session's
//! [`SparkSessionBuilder`](crate::session::SparkSessionBuilder) checks every
//! option once and builds a session from them; it lives with the session
//! it builds, above this module. The module is private; users name these
//! items under [`session`](crate::session), one public path each.

pub mod channel;
pub mod conn_string;
pub(crate) mod egress;
pub(crate) mod flow_control;
pub(crate) mod result_batch_rows;
pub(crate) mod result_compression;
#[cfg(feature = "tls")]
pub mod tls;
