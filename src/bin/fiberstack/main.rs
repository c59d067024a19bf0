//! The `fiberstack` binary: the tools around the framework. It parses the command line
//! (`cli.rs`) and runs the server from the library, or one of the tools that live only
//! here: `stack-report` (`stack_report.rs`), `cancel-report` (`cancel_report.rs`) and
//! `bench` (`bench/`).

#![forbid(unsafe_code)]

/// Every allocation first makes sure the fiber it runs on (if any) has stack left for
/// the allocator: an overflow then strikes before malloc takes its arena lock, never
/// inside it (STACK_SIZES.md). An app declares it once, in its binary.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod bench;
mod cancel_report;
mod cli;
mod stack_report;

fn main() -> std::process::ExitCode {
    cli::main()
}
