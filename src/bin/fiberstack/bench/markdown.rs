//! `bench.md`: the machine and its core split, the commit, the table, memory per
//! request, the scenarios with their bounds, every round's req/s, and the servers'
//! start-up lines.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use fiberstack::config::Runtime;

use crate::bench::cpus::Split;
use crate::bench::report::{self, Row, Sample};
use crate::bench::scenario::{Load, Scenario};
use crate::bench::{bounds, load, RUNTIMES};

/// The Markdown report: settings, the table, memory, and every round's req/s.
#[allow(clippy::too_many_arguments)]
pub fn markdown(
    title: &str,
    split: &Split,
    workers: usize,
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
    let commit = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown (not run in a git checkout)".into());
    let _ = writeln!(
        md,
        "Machine: {} cores ({cpu}). {split}. Server workers: {workers}. Commit: {commit}. \
         Took {:.0} s.\n\n\
         Served counts 2xx answers only. `of ceiling C/S` is the true ceiling of a \
         sleeping route (C clients, S seconds); `of expected` is what the load tool lets \
         through at best (the ab floor, or wrk's C x (D-S) / (D x S)). `fibers/this` is \
         the median of the per-round ratios of fibers' req/s to this row's, with their \
         min-max.\n",
        fiberstack::config::cores(),
        took.as_secs_f64()
    );
    md.push_str(&report::markdown_table(rows));
    md.push('\n');
    let memory = report::memory_lines(rows);
    if !memory.is_empty() {
        md.push_str(
            "Memory per in-flight request, or per idle keep-alive connection = (RSS with \
             them - RSS of the fresh server) / connections:\n\n",
        );
        for line in memory {
            let _ = writeln!(md, "- {line}");
        }
        md.push('\n');
    }
    md.push_str("## Scenarios\n\n| name | request | load | --fibers | --db-pool | --queue | ceiling C/S | expected |\n|---|---|---|---|---|---|---|---|\n");
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
                load::wrk_threads(concurrency, split),
                load::WRK_TIMEOUT
            ),
            Load::Idle {
                connections,
                hold_secs,
            } => format!(
                "{connections} connections opened one by one, each sends one request, read, \
                 then held idle {hold_secs} s (the bench's own client)"
            ),
        };
        let ceiling = match (s.route_secs, &s.load) {
            (_, Load::Idle { .. }) => "-".to_string(),
            (None, _) => "none (CPU-bound)".to_string(),
            (Some(secs), _) => format!("{:.1} req/s", bounds::ceiling_rps(&s.load, secs)),
        };
        let expected = match (s.route_secs, &s.load) {
            (
                Some(secs),
                Load::Ab {
                    concurrency,
                    requests,
                },
            ) => format!(
                "ab floor {:.1} s = {:.1} req/s",
                bounds::ab_floor_secs(*requests, *concurrency, secs),
                bounds::expected_rps(&s.load, secs)
            ),
            (Some(secs), Load::Wrk { .. }) => format!(
                "C x (D-S) / (D x S) = {:.1} req/s",
                bounds::expected_rps(&s.load, secs)
            ),
            (None, _) | (Some(_), Load::Idle { .. }) => "-".into(),
        };
        let _ = writeln!(
            md,
            "| {} | `{}` | {load} | {} | {} | {} | {ceiling} | {expected} |",
            s.name, s.path, s.settings.fibers, s.settings.db_pool, s.settings.queue
        );
    }
    md.push_str("\n## Every round (req/s)\n\n| scenario | runtime | rounds |\n|---|---|---|\n");
    for s in scenarios {
        for runtime in RUNTIMES {
            if let Some(why) = s.skipped_on(runtime) {
                let _ = writeln!(md, "| {} | {runtime} | not run: {why} |", s.name);
                continue;
            }
            let list: Vec<String> = samples
                .get(&(s.name, runtime))
                .map(|v| {
                    v.iter()
                        .map(|x| match &x.result {
                            Ok(r) if matches!(s.load, Load::Idle { .. }) => format!(
                                "{:.1} KiB a connection ({} failed)",
                                x.kib_per_connection(s.load.concurrency()),
                                r.failed
                            ),
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
