//! The `fiberstack` binary: the tools around the framework. It parses the command line
//! (`cli.rs`) and runs the server from the library, or one of the tools that live only
//! here: `stack-report` (`stack_report.rs`) and `bench` (`bench/`).

#![forbid(unsafe_code)]

mod bench;
mod cli;
mod stack_report;

fn main() -> std::process::ExitCode {
    cli::main()
}
