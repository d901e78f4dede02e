//! The `switchyard` binary: a thin shell over the library's CLI.

fn main() -> std::process::ExitCode {
    switchyard::cli::main()
}
