//! [`Http2FlowControl`]: how much result data the client lets the server send ahead of the
//! application, per stream and per connection.
//!
//! Why it matters: an HTTP/2 stream can have at most its receive window in flight, so it
//! moves at most one window per round trip. hyper's own defaults (2 MiB per stream, 5 MiB
//! per connection) cap a result stream at about 50 MB/s at a 40 ms round trip and 20 MB/s at
//! 100 ms, whatever the link carries. gRPC C-core (PySpark) probes the bandwidth-delay product
//! and advertises at least 16 MiB, so its time barely grows with the round trip. The defaults
//! here are fixed windows of the same size: 16 MiB per stream, 32 MiB per connection.
//!
//! # What a window costs
//!
//! The window is the most the client buffers for a stream (connection) when the application
//! stops reading: the server never sends beyond it. A consumer that keeps up buffers close
//! to nothing. Measured peak RSS of a 10 M-row drain at a 40 ms round trip: 9–19 MiB with a
//! fast consumer for every setting; with a consumer that stalls, about 8 MiB plus 1.3× the
//! stream window (26.5 MiB at 16/32 MiB, 8 MiB at hyper's 2/5 MiB).
//!
//! # Why an enum
//!
//! hyper cannot combine the two modes: its adaptive window resets both windows to 64 KiB,
//! and tonic applies it after the sizes, silently dropping them. So a caller picks one.

use tonic::transport::Endpoint;

/// Default initial HTTP/2 window per stream: 16 MiB (gRPC C-core's floor with its BDP probe).
pub(crate) const DEFAULT_STREAM_WINDOW: u32 = 16 * 1024 * 1024;

/// Default initial HTTP/2 window per connection: 32 MiB, room for two full streams (a
/// reattach overlapping the stream it replaces, or a second query on the session).
pub(crate) const DEFAULT_CONNECTION_WINDOW: u32 = 32 * 1024 * 1024;

/// The smallest window HTTP/2 allows (RFC 9113 §6.9.2: the initial 65,535 bytes).
pub(crate) const MIN_WINDOW: u32 = 65_535;

/// The largest window HTTP/2 allows (2^31 − 1, RFC 9113 §6.9.1).
pub(crate) const MAX_WINDOW: u32 = (1 << 31) - 1;

/// HTTP/2 receive flow control of the client's connection.
///
/// Set it with [`SparkSessionBuilder::http2_flow_control`](crate::session::SparkSessionBuilder::http2_flow_control),
/// [`ChannelBuilder::http2_flow_control`](super::channel::ChannelBuilder::http2_flow_control),
/// or the `sc://` parameters `grpc_initial_stream_window_size`,
/// `grpc_initial_connection_window_size` and `grpc_http2_bdp_probe`.
///
/// ```
/// use spark_connect_retry::session::Http2FlowControl;
///
/// let default = Http2FlowControl::default();
/// assert_eq!(
///     default,
///     Http2FlowControl::Fixed { stream_window: 16 << 20, connection_window: 32 << 20 }
/// );
/// assert!(default.validate().is_ok());
/// let inverted = Http2FlowControl::Fixed { stream_window: 8 << 20, connection_window: 4 << 20 };
/// assert!(inverted.validate().unwrap_err().contains("at least the stream window"));
/// assert!(Http2FlowControl::Adaptive.validate().is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Http2FlowControl {
    /// Fixed windows, in bytes, each in `65_535..=2^31-1`, with
    /// `connection_window >= stream_window`. A stream moves at most `stream_window` bytes
    /// per round trip, and the client buffers at most that much per stream (and
    /// `connection_window` in all) when the application stops reading.
    Fixed {
        /// Initial window of each stream (HTTP/2 `SETTINGS_INITIAL_WINDOW_SIZE`).
        stream_window: u32,
        /// Initial window of the whole connection (a connection-level `WINDOW_UPDATE`).
        connection_window: u32,
    },
    /// hyper's adaptive window (a BDP probe, like C-core's `grpc.http2.bdp_probe`). It starts
    /// at 64 KiB, doubles at most once per round trip and stops at 16 MiB, so it trails the
    /// fixed defaults on long round trips; it stays small when the application reads slowly.
    Adaptive,
}

impl Default for Http2FlowControl {
    fn default() -> Self {
        Http2FlowControl::Fixed {
            stream_window: DEFAULT_STREAM_WINDOW,
            connection_window: DEFAULT_CONNECTION_WINDOW,
        }
    }
}

impl Http2FlowControl {
    /// Checks the windows' bounds and order; the error says what is wrong.
    pub fn validate(&self) -> Result<(), &'static str> {
        match *self {
            Http2FlowControl::Adaptive => Ok(()),
            Http2FlowControl::Fixed {
                stream_window,
                connection_window,
            } => {
                check_window(stream_window)?;
                check_window(connection_window)?;
                if connection_window < stream_window {
                    return Err("the connection window must be at least the stream window");
                }
                Ok(())
            }
        }
    }

    /// Applies the setting to `endpoint` (assumed valid; see [`validate`](Self::validate)).
    pub(crate) fn apply(&self, endpoint: Endpoint) -> Endpoint {
        match *self {
            Http2FlowControl::Fixed {
                stream_window,
                connection_window,
            } => endpoint
                .http2_adaptive_window(false)
                .initial_stream_window_size(stream_window)
                .initial_connection_window_size(connection_window),
            Http2FlowControl::Adaptive => endpoint.http2_adaptive_window(true),
        }
    }
}

/// A window size must be one HTTP/2 can advertise.
pub(crate) fn check_window(bytes: u32) -> Result<(), &'static str> {
    if (MIN_WINDOW..=MAX_WINDOW).contains(&bytes) {
        Ok(())
    } else {
        Err("a window must be between 65535 and 2147483647 bytes")
    }
}
