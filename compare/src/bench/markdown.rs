//! `bench.md`: the machine and its core split, the quota and the preflight's findings,
//! the commit, the table, memory per request, server CPU per request and the load
//! tools' own use, the scenarios with their bounds, every round's req/s and CPU
//! figures (with the quota's use), and the servers' start-up lines.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use compare::Runtime;

use crate::bench::cpus::Split;
use crate::bench::load::LoadResult;
use crate::bench::report::{self, Row, Sample, Table};
use crate::bench::scenario::{Load, Scenario};
use crate::bench::{bounds, load, RUNTIMES};

/// How the run was set up, for the report's opening.
pub struct Context<'a> {
    pub title: &'a str,
    pub split: &'a Split,
    pub threads: usize,
    /// The quota line (`quota: ...`).
    pub quota: &'a str,
    /// What the preflight printed.
    pub preflight: &'a [String],
    pub took: Duration,
}

/// The Markdown report: settings, the table, memory, and every round's req/s.
pub fn markdown(
    cx: &Context<'_>,
    scenarios: &[Scenario],
    rows: &[Row],
    samples: &HashMap<(&'static str, Runtime), Vec<Sample>>,
    banners: &[String],
) -> String {
    let (split, threads) = (cx.split, cx.threads);
    let mut md = format!("# {}\n\n", cx.title);
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
        "Machine: {} cores ({cpu}). {split}. Server threads: {threads}. Commit: {commit}. \
         Took {:.0} s.\n\n\
         Served counts 2xx answers only. `of ceiling C/S` is the true ceiling of a \
         sleeping route (C clients, S seconds); `of expected` is what the load tool lets \
         through at best (the ab floor, or wrk's C x (D-S) / (D x S)). `fibers/this` is \
         the median of the per-round ratios of fibers' req/s to this row's, with their \
         min-max.\n",
        fiber_web::rig::cores(),
        cx.took.as_secs_f64()
    );
    let _ = writeln!(
        md,
        "{}. A quota'd row's `quota` cell says how much of its quota the server used (its \
         CPU over the load's wall time, over the quota).\n",
        cx.quota.replacen("quota:", "Quota:", 1)
    );
    if !cx.preflight.is_empty() {
        md.push_str("The preflight, before anything started:\n\n");
        for line in cx.preflight {
            let _ = writeln!(md, "- {line}");
        }
        md.push('\n');
    }
    md.push_str(&Table::main(rows).markdown());
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
    let cpu = Table::cpu(rows);
    if !cpu.is_empty() {
        md.push_str(
            "## Server CPU per request\n\n\
             What the server spends on a request, whether or not the load tool could keep \
             it busy: the CPU time of the server process (utime and stime of \
             /proc/PID/stat, all its threads; the bench runs each server as one process) \
             from the load tool's start to its exit, over the requests it served (2xx). \
             `this/fibers` is the median of the per-round ratios of this row's figure to \
             fibers' (above 1: fibers spend less), with their min-max. `load tool CPU` is \
             the tool's own user + kernel time over its wall time and the cpus it was \
             given. Both are read in clock ticks (10 ms at CLK_TCK 100): a few parts in a \
             thousand of a 10 s run.\n\n",
        );
        md.push_str(&cpu.markdown());
        md.push('\n');
    }
    let mut load_bound = report::load_bound_lines(rows);
    load_bound.extend(report::quota_lines(rows));
    for line in &load_bound {
        let _ = writeln!(md, "- {line}");
    }
    if !load_bound.is_empty() {
        md.push('\n');
    }
    md.push_str("## Scenarios\n\n| name | request | load | --fibers | --db-pool | --queue | --max-connections | quota | ceiling C/S | expected |\n|---|---|---|---|---|---|---|---|---|---|\n");
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
        let quota = s
            .settings
            .quota
            .map_or("-".into(), |p| format!("{p}% of a cpu"));
        let _ = writeln!(
            md,
            "| {} | `{}` | {load} | {} | {} | {} | {} | {quota} | {ceiling} | {expected} |",
            s.name,
            s.path,
            s.settings.fibers,
            s.settings.db_pool,
            s.settings.queue,
            s.settings.max_connections
        );
    }
    every_round(&mut md, "req/s", scenarios, rows, samples, &|s, x, r| {
        if matches!(s.load, Load::Idle { .. }) {
            format!(
                "{:.2} KiB a connection ({} failed)",
                x.kib_per_connection(s.load.concurrency()),
                r.failed
            )
        } else {
            format!("{:.1} ({} failed)", r.rps, r.failed)
        }
    });
    // The scenarios of the CPU table's rows only: a sleeping route serves too few
    // requests for the clock ticks of its CPU time to divide into a figure.
    let cpu_bound: Vec<Scenario> = scenarios
        .iter()
        .filter(|s| rows.iter().any(|r| r.scenario == s.name && r.cpu_bound()))
        .cloned()
        .collect();
    every_round(
        &mut md,
        "server CPU per served request; the load tool's CPU",
        &cpu_bound,
        rows,
        samples,
        &|s, x, _| {
            let server = x.cpu_us_per_request().map_or("-".into(), |c| {
                format!(
                    "{:.2} us ({:.2} user + {:.2} kernel)",
                    c.total(),
                    c.user,
                    c.kernel
                )
            });
            let tool = x.load_pct().map_or("-".into(), |p| format!("{p:.0}%"));
            let quota = match (x.quota, x.quota_used_pct()) {
                (Some(q), Some(used)) => format!(
                    ", quota {}% used {used:.0}%{}",
                    q.percent,
                    x.throttled_pct().map_or(String::new(), |t| format!(
                        " (throttled in {t:.0}% of periods)"
                    ))
                ),
                _ => String::new(),
            };
            format!(
                "{server}, {} {tool}{quota}",
                s.load.tool().unwrap_or("load")
            )
        },
    );
    md.push_str("\n## Servers\n\n");
    for b in banners {
        let _ = writeln!(md, "    {b}");
    }
    md
}

/// A section of `md` listing each round's `cell` for every scenario and runtime
/// (`cell` gets the round's load result when it has one; a failed round reads
/// `error`; a row not run says why, as its row in `rows` does).
fn every_round(
    md: &mut String,
    what: &str,
    scenarios: &[Scenario],
    rows: &[Row],
    samples: &HashMap<(&'static str, Runtime), Vec<Sample>>,
    cell: &dyn Fn(&Scenario, &Sample, &LoadResult) -> String,
) {
    let _ = write!(
        md,
        "\n## Every round ({what})\n\n| scenario | runtime | rounds |\n|---|---|---|\n"
    );
    for s in scenarios {
        for runtime in RUNTIMES {
            let skipped = rows
                .iter()
                .find(|r| r.scenario == s.name && r.runtime == runtime.to_string())
                .and_then(|r| r.skipped.as_deref());
            if let Some(why) = skipped {
                let _ = writeln!(md, "| {} | {runtime} | not run: {why} |", s.name);
                continue;
            }
            let list: Vec<String> = samples
                .get(&(s.name, runtime))
                .map(|v| {
                    v.iter()
                        .map(|x| match &x.result {
                            Ok(r) => cell(s, x, r),
                            Err(_) => "error".into(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let _ = writeln!(md, "| {} | {runtime} | {} |", s.name, list.join(", "));
        }
    }
}
