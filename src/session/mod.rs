//! Connecting to a Spark Connect server: `sc://` connection strings ([`conn_string`]) and the
//! tonic channel, interceptor and client built from them ([`channel`]).

pub mod channel;
pub mod conn_string;
