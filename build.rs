//! Compiles `proto/` into Rust with a pure-Rust protobuf compiler (protox),
//! so a machine with only cargo can build the crate: no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["spark/connect/base.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        // Servers (the test kit's) generate their own stubs.
        .build_server(false)
        // SQL parameters by name: sorted, so a plan encodes to the same
        // bytes in every process (a replayed or resumed query resends them).
        .btree_map(".spark.connect.SQL.args")
        .btree_map(".spark.connect.SQL.named_arguments")
        .btree_map(".spark.connect.SqlCommand.args")
        .btree_map(".spark.connect.SqlCommand.named_arguments")
        // Result payloads as `bytes::Bytes`: prost slices them out of the
        // buffer tonic decoded the message from (no copy), and arrow's
        // `Buffer` takes the same allocation (results::decode).
        .bytes(".spark.connect.ExecutePlanResponse.ArrowBatch.data")
        .compile_fds(fds)?;
    Ok(())
}
