//! The server side of the Spark Connect service (`spark.connect`), generated
//! by this crate's build script from its copy of the protocol, with every
//! message type taken from `spark_connect_retry::proto`: a server built here
//! speaks the client crate's own types, and the client crate compiles no
//! server code.

#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
mod generated {
    tonic::include_proto!("spark.connect");
}

pub use generated::spark_connect_service_server::{SparkConnectService, SparkConnectServiceServer};

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The test kit compiles its own copy of the protocol (a published crate
    /// can only read files inside its package); it must be the client
    /// crate's, byte for byte, or the stubs would describe another service.
    #[test]
    fn the_proto_copy_is_the_client_crates() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto/spark/connect");
        let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto/spark/connect");
        if !client.exists() {
            return; // built from the published package: no workspace around it
        }
        let names = |dir: &Path| {
            let mut v: Vec<_> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(&here), names(&client));
        for name in names(&client) {
            assert_eq!(
                std::fs::read(here.join(&name)).unwrap(),
                std::fs::read(client.join(&name)).unwrap(),
                "{name:?} differs from the client crate's: copy proto/ again"
            );
        }
    }
}
