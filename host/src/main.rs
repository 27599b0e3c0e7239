//! The `outboxd` binary: the command line (`cli/`) over the `outboxd` library; see
//! `outboxd --help`. Nothing here is part of the library's API.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
