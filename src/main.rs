//! The `switchyard` binary: a thin shell over the library's CLI.

/// mimalloc instead of glibc malloc: request buffers are often allocated on one
/// worker thread and freed on another, which glibc serves with locked arenas. Blocks of
/// a megabyte and more are mapped from the OS and returned when freed (see
/// `switchyard::alloc`).
#[global_allocator]
static ALLOC: switchyard::alloc::Allocator = switchyard::alloc::Allocator;

fn main() -> std::process::ExitCode {
    switchyard::cli::main()
}
