//! Running ab and wrk, and reading what they print.
//!
//! Both tools are driven as the user would run them by hand; the parsers read only the
//! summary lines that ab 2.3 and wrk 4.1 print (a run whose output lacks them is an
//! error that quotes the output, not a row of zeros).

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use crate::bench::cpus::Split;
use crate::bench::idle;
use crate::bench::scenario::Load;

/// wrk's per-request timeout: longer than a one-second route waits in any queue we
/// build, so a slow answer is counted as slow, not as an error.
pub const WRK_TIMEOUT: &str = "10s";

/// What one run of a load tool measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadResult {
    /// Requests completed (any status).
    pub requests: u64,
    /// Of those, answered 2xx: what counts as served.
    pub served: u64,
    /// Failed requests: connection errors, timeouts, and answers that were not 2xx.
    pub failed: u64,
    /// Wall-clock seconds of the run, as the tool reports it.
    pub secs: f64,
    /// Served (2xx) requests per second: `served / secs` (the tools' own figure
    /// counts a fast 503 as well as a 200).
    pub rps: f64,
    /// Median latency in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile latency in milliseconds.
    pub p99_ms: f64,
}

/// The command line for a tool's `load` against `url`, on the load cpus of `split`
/// (`None` for the idle load, which the bench makes itself).
pub fn command(load: &Load, url: &str, split: &Split) -> Option<Command> {
    Some(match *load {
        Load::Ab {
            concurrency,
            requests,
        } => {
            let mut cmd = split.command(&split.load, "ab");
            cmd.arg("-c")
                .arg(concurrency.to_string())
                .arg("-n")
                .arg(requests.to_string())
                .arg(url);
            cmd
        }
        Load::Wrk {
            concurrency,
            duration_secs,
        } => wrk(concurrency, Duration::from_secs(duration_secs), url, split),
        Load::Idle { .. } => return None,
    })
}

/// wrk's threads for `concurrency` connections: one per load cpu, and no more than
/// the connections.
pub fn wrk_threads(concurrency: usize, split: &Split) -> usize {
    split.load_threads().min(concurrency.max(1))
}

/// `wrk -tT -c C -d D --latency --timeout 10s URL` on the load cpus, T from
/// [`wrk_threads`].
pub fn wrk(concurrency: usize, duration: Duration, url: &str, split: &Split) -> Command {
    let mut cmd = split.command(&split.load, "wrk");
    cmd.arg(format!("-t{}", wrk_threads(concurrency, split)))
        .arg(format!("-c{concurrency}"))
        .arg(format!("-d{}s", duration.as_secs().max(1)))
        .arg("--latency")
        .arg("--timeout")
        .arg(WRK_TIMEOUT)
        .arg(url);
    cmd
}

/// Run `load` against `addr` + `path` and parse the summary.
pub fn run(load: &Load, addr: SocketAddr, path: &str, split: &Split) -> Result<LoadResult, String> {
    let url = format!("http://{addr}{path}");
    if let Load::Idle {
        connections,
        hold_secs,
    } = *load
    {
        let r = idle::hold(addr, path, connections, Duration::from_secs(hold_secs));
        return match r.served {
            0 => Err(format!(
                "none of {connections} connections to {url} was answered 2xx"
            )),
            _ => Ok(r),
        };
    }
    let mut cmd = command(load, &url, split).ok_or_else(|| format!("no tool runs {load:?}"))?;
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e} (install apache2-utils and wrk)"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let parsed = match load {
        Load::Ab { .. } => parse_ab(&stdout),
        Load::Wrk { .. } => parse_wrk(&stdout),
        Load::Idle { .. } => unreachable!("the idle load runs no tool"),
    };
    parsed.map_err(|why| {
        format!(
            "{cmd:?} exited with {}: {why}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `n` over `secs`, 0 for a run that took no time.
fn per_sec(n: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}

/// The number after `label` on the line that starts with it (after leading spaces).
fn field(text: &str, label: &str) -> Option<f64> {
    text.lines()
        .map(str::trim_start)
        .find_map(|l| l.strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.trim_end_matches(',').parse().ok())
}

/// Read ab's summary. Failed requests and non-2xx answers overlap (a 503 of another
/// length is both), so the larger of the two counts is reported; served are the
/// completed requests less the `Non-2xx responses`.
pub fn parse_ab(text: &str) -> Result<LoadResult, String> {
    let need = |label: &str| field(text, label).ok_or(format!("no `{label}` line"));
    let requests = need("Complete requests:")? as u64;
    let failed = need("Failed requests:")? as u64;
    let non_2xx = field(text, "Non-2xx responses:").unwrap_or(0.0) as u64;
    let percentile = |p: &str| {
        text.lines()
            .map(str::trim_start)
            .find_map(|l| l.strip_prefix(p))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<f64>().ok())
            .ok_or(format!("no {p} percentile"))
    };
    let secs = need("Time taken for tests:")?;
    need("Requests per second:")?;
    let served = requests.saturating_sub(non_2xx);
    Ok(LoadResult {
        requests,
        served,
        failed: failed.max(non_2xx),
        secs,
        rps: per_sec(served, secs),
        p50_ms: percentile("50%")?,
        p99_ms: percentile("99%")?,
    })
}

/// A wrk latency like `142.00us`, `1.01ms`, `1.00s` or `1.00m`, in milliseconds.
fn wrk_latency_ms(s: &str) -> Option<f64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().ok()?;
    Some(match unit {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        "m" => n * 60_000.0,
        _ => return None,
    })
}

/// Read wrk's summary (run with `--latency` for the percentiles).
pub fn parse_wrk(text: &str) -> Result<LoadResult, String> {
    // "  105447 requests in 2.00s, 12.17MB read"
    let (requests, secs) = text
        .lines()
        .find_map(|l| {
            let (n, rest) = l.trim().split_once(" requests in ")?;
            let secs = rest.split(',').next()?;
            Some((n.parse::<u64>().ok()?, wrk_latency_ms(secs)? / 1000.0))
        })
        .ok_or("no `N requests in Ds` line")?;
    field(text, "Requests/sec:").ok_or("no `Requests/sec:` line")?;
    let percentile = |p: &str| {
        text.lines()
            .map(str::trim_start)
            .find_map(|l| l.strip_prefix(p))
            .and_then(|rest| wrk_latency_ms(rest.trim()))
            .ok_or(format!("no {p} latency (was --latency given?)"))
    };
    // "  Socket errors: connect 0, read 12, write 0, timeout 3"
    let socket_errors: u64 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Socket errors:"))
        .map(|rest| {
            rest.split(',')
                .filter_map(|part| part.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    let non_2xx = field(text, "Non-2xx or 3xx responses:").unwrap_or(0.0) as u64;
    let served = requests.saturating_sub(non_2xx);
    Ok(LoadResult {
        requests,
        served,
        failed: socket_errors + non_2xx,
        secs,
        rps: per_sec(served, secs),
        p50_ms: percentile("50%")?,
        p99_ms: percentile("99%")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const AB: &str = "\
Concurrency Level:      220
Time taken for tests:   11.034 seconds
Complete requests:      2000
Failed requests:        7
   (Connect: 0, Receive: 0, Length: 7, Exceptions: 0)
Non-2xx responses:      7
Requests per second:    181.26 [#/sec] (mean)
Percentage of the requests served within a certain time (ms)
  50%   1003
  66%   1004
  99%   1012
 100%   1020 (longest request)
";

    const WRK: &str = "\
Running 10s test @ http://127.0.0.1:3000/widgets
  2 threads and 1000 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.00s     2.31ms   1.03s    90.00%
  Latency Distribution
     50%    1.00s 
     75%    1.00s 
     90%    1.01s 
     99%  512.00us
  9000 requests in 10.01s, 1.07MB read
  Socket errors: connect 0, read 2, write 0, timeout 3
  Non-2xx or 3xx responses: 4
Requests/sec:    899.10
Transfer/sec:    109.75KB
";

    #[test]
    fn ab_summary_is_read() {
        let r = parse_ab(AB).unwrap();
        assert_eq!(r.requests, 2000);
        assert_eq!(r.failed, 7);
        assert_eq!(r.secs, 11.034);
        assert_eq!(r.served, 1993);
        assert!(
            (r.rps - 1993.0 / 11.034).abs() < 1e-9,
            "2xx only: {}",
            r.rps
        );
        assert_eq!((r.p50_ms, r.p99_ms), (1003.0, 1012.0));
    }

    #[test]
    fn wrk_summary_is_read_in_every_unit() {
        let r = parse_wrk(WRK).unwrap();
        assert_eq!(r.requests, 9000);
        assert_eq!(r.failed, 2 + 3 + 4);
        assert!((r.secs - 10.01).abs() < 1e-9);
        assert_eq!(r.served, 8996);
        assert!((r.rps - 8996.0 / 10.01).abs() < 1e-9, "2xx only: {}", r.rps);
        assert_eq!(r.p50_ms, 1000.0);
        assert_eq!(r.p99_ms, 0.512);
        assert_eq!(wrk_latency_ms("1.50m"), Some(90_000.0));
    }

    #[test]
    fn output_without_a_summary_is_an_error() {
        assert!(parse_ab("apr_socket_recv: Connection reset by peer (104)")
            .unwrap_err()
            .contains("Complete requests"));
        assert!(parse_wrk("unable to connect to 127.0.0.1:1 Connection refused").is_err());
    }
}
