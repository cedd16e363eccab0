//! Compiles `proto/` into Rust with a pure-Rust protobuf compiler (protox),
//! so a machine with only cargo can build the crate: no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["spark/connect/base.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        // Servers (the test kit's) generate their own stubs.
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
