//! Compiles the agent protocol with protox, so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["banhub/agent/v1/agent.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Keeps `CommandResult`'s outcome small: a jail's config is the largest variant.
        .boxed(".banhub.agent.v1.JailConfig.running_state")
        .compile_fds(fds)?;
    Ok(())
}
