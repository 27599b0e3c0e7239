//! Compiles `proto/outbox/v1/envelope.proto` with protox (pure Rust), so no system `protoc` is needed.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = "../proto";
    let file = "../proto/outbox/v1/envelope.proto";
    println!("cargo:rerun-if-changed={file}");
    let descriptors = protox::compile([file], [proto_dir])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
