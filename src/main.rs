//! The `fiberstack` binary: parse the command line and hand over to the library.

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    fiberstack::cli::main()
}
