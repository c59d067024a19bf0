//! `bench.md`: the settings, the table, memory per request, the scenarios with their
//! bounds, every round's req/s, and the servers' start-up lines.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use fiberstack::config::Runtime;

use crate::bench::report::{self, Row, Sample};
use crate::bench::scenario::{Load, Scenario};
use crate::bench::{bounds, load, BenchArgs};

/// The Markdown report: settings, the table, memory, and every round's req/s.
pub fn markdown(
    title: &str,
    args: &BenchArgs,
    scenarios: &[Scenario],
    rows: &[Row],
    samples: &HashMap<(&'static str, Runtime), Vec<Sample>>,
    banners: &[String],
    took: Duration,
) -> String {
    let mut md = format!("# {title}\n\n");
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let _ = writeln!(
        md,
        "Machine: {} cores ({cpu}); the load tools, both servers and MariaDB share them. \
         Server workers: {}. Took {:.0} s.\n",
        fiberstack::config::cores(),
        args.workers,
        took.as_secs_f64()
    );
    md.push_str(&report::markdown_table(rows));
    md.push('\n');
    let memory = report::memory_lines(rows);
    if !memory.is_empty() {
        md.push_str(
            "Memory per in-flight request = (RSS under load - idle RSS) / connections:\n\n",
        );
        for line in memory {
            let _ = writeln!(md, "- {line}");
        }
        md.push('\n');
    }
    md.push_str("## Scenarios\n\n| name | request | load | --fibers | --db-pool | --queue | bound |\n|---|---|---|---|---|---|---|\n");
    for s in scenarios {
        let load = match s.load {
            Load::Ab {
                concurrency,
                requests,
            } => format!("`ab -c {concurrency} -n {requests}`"),
            Load::Wrk {
                concurrency,
                duration_secs,
            } => format!(
                "`wrk -t{} -c{concurrency} -d{duration_secs}s --latency --timeout {}`",
                load::wrk_threads(concurrency),
                load::WRK_TIMEOUT
            ),
        };
        let bound = match (s.route_secs, &s.load) {
            (
                Some(secs),
                Load::Ab {
                    concurrency,
                    requests,
                },
            ) => format!(
                "ab floor {:.1} s = {:.1} req/s",
                bounds::ab_floor_secs(*requests, *concurrency, secs),
                bounds::bound_rps(&s.load, secs)
            ),
            (Some(secs), Load::Wrk { .. }) => {
                format!(
                    "C x (D-S)/D / S = {:.1} req/s",
                    bounds::bound_rps(&s.load, secs)
                )
            }
            (None, _) => "none (CPU-bound)".into(),
        };
        let _ = writeln!(
            md,
            "| {} | `{}` | {load} | {} | {} | {} | {bound} |",
            s.name, s.path, s.settings.fibers, s.settings.db_pool, s.settings.queue
        );
    }
    md.push_str("\n## Every round (req/s)\n\n| scenario | runtime | rounds |\n|---|---|---|\n");
    for s in scenarios {
        for runtime in [Runtime::Fibers, Runtime::Async] {
            let list: Vec<String> = samples
                .get(&(s.name, runtime))
                .map(|v| {
                    v.iter()
                        .map(|x| match &x.result {
                            Ok(r) => format!("{:.1} ({} failed)", r.rps, r.failed),
                            Err(_) => "error".into(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let _ = writeln!(md, "| {} | {runtime} | {} |", s.name, list.join(", "));
        }
    }
    md.push_str("\n## Servers\n\n");
    for b in banners {
        let _ = writeln!(md, "    {b}");
    }
    md
}
