//! The `outboxd` binary: the command line (`cli/`) over the `outboxd` library; see
//! `outboxd --help`. Nothing here is part of the library's API.

mod cli;

/// mimalloc, not glibc's malloc: a drain allocates and frees per event on several threads (rows,
/// envelopes, plugin calls, spans), and glibc's arenas spent a third of the host's CPU on it
/// (docs/PERFORMANCE.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
