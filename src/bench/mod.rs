//! `fiberstack bench`: the fiber server and its async twin, measured side by side.

use clap::Args;

/// The flags of `fiberstack bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Rounds of A/B alternation; the table shows medians.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// A short smoke run: small loads, seconds long.
    #[arg(long)]
    pub quick: bool,
}

/// Run the benchmark.
pub fn run(_args: &BenchArgs) -> Result<(), String> {
    Err("not yet".into())
}
