//! The `outboxd` binary: see `outboxd --help`.
fn main() -> std::process::ExitCode {
    outboxd::cli::main()
}
