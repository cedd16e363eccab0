//! Getting to a server: `sc://` connection strings, the channel the session
//! builds (TLS rule, token, keepalive, limits), HTTP/2 windows, renewed
//! connections, the Spark Connect method table of the retry layer
//! (`SparkConnectLayer`), and wire compatibility of the protocol with newer
//! servers.

mod support;

// The theme's tests, one file each: tests/connection/*.rs.
mod connection {
    mod channel;
    mod conn_string;
    mod http2_windows;
    mod proto_compat;
    mod reconnect;
    mod spark_layer;
    mod tls;
}
