//! The `switchyard` binary: a thin shell over the library's CLI.

/// mimalloc instead of glibc malloc: request buffers are often allocated on one
/// worker thread and freed on another, which glibc serves with locked arenas.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    switchyard::cli::main()
}
