//! Generates the Spark Connect service's server stubs (`SparkConnectService`,
//! `SparkConnectServiceServer`) from `proto/`, a copy of the client crate's
//! protocol (a test checks that they are the same), with a pure-Rust protobuf
//! compiler (protox): no system `protoc`. Every message is mapped to
//! `::spark_connect_retry::proto`, so only the service is generated here and
//! servers share the client crate's types.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["spark/connect/base.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        // Servers implement only the RPCs they script; the rest answer
        // UNIMPLEMENTED (server-streaming RPCs then return a boxed stream).
        .generate_default_stubs(true)
        .extern_path(".spark.connect", "::spark_connect_retry::proto")
        .compile_fds(fds)?;
    Ok(())
}
