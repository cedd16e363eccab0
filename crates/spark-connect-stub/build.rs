//! Generates the Spark Connect client stub and messages from the root
//! crate's `proto/`, with protox (no system `protoc`), and with no
//! `extern_path`: the messages are this crate's own, as in any program that
//! generates its stub from Spark's protos.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../../proto");
    let fds = protox::compile(["spark/connect/base.proto"], ["../../proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
