//! Logs: the logger the binary installs (env_logger behind the `log` facade), the
//! lines both servers write (the access line and the 5xx line), and the start-up
//! line on stdout ([`banner`]).
//!
//! - `RUST_LOG` is honoured, on top of the defaults `info,may=warn`: a directive it
//!   gives replaces the default of the same name, so `RUST_LOG=debug` leaves may at
//!   warn (it logs every socket it registers at info) and `RUST_LOG=NAME=debug` (the
//!   app's name)
//!   leaves everything else at info. A bad directive is dropped with a warning naming
//!   it; the others still apply and logging goes on.
//! - Lines look like `2026-11-30T20:51:06.123Z WARN  todo_api: GET show -> 503: ...`:
//!   UTC to the millisecond, the level, the target (the app's name for the
//!   framework's records, the module for other crates'), the message.
//! - Access lines (target `NAME::access`, at info, printed without it) are written after the
//!   response is ready: on the fiber server from the connection's coroutine (the
//!   carrier), never from the fiber; on the twin from the connection's task.
//! - Anything that does log on a fiber (may's own records, if `RUST_LOG` lets them
//!   through) first makes sure the fiber has [`LOG_STACK_MARGIN`] of stack left, so
//!   that an overflow strikes before the logger takes stderr's lock, not inside it (a
//!   lock held by abandoned frames stays held: STACK_SIZES.md).
//!
//! Why env_logger: it is the logger `RUST_LOG` comes from, small without its default
//! features (no regex, no colours, our own timestamp: no time crate), and writes each
//! record with one `write` to stderr, so lines from many threads do not interleave.

use std::io::Write;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use log::{Level, Log, Metadata, Record};

/// The app's name and the target of its access lines, set once per process by
/// [`serve`](crate::serve()) or [`start`](crate::start()) from
/// [`Options::name`](crate::Options::name).
static NAMES: OnceLock<(&'static str, &'static str)> = OnceLock::new();

/// Names this process's app `name`: its log records' target, and `name::access` for its
/// access lines. The first call of a process wins (a test that starts several servers
/// in one process logs under the first one's name).
pub fn set_app_name(name: &str) {
    NAMES.get_or_init(|| {
        let name: &'static str = Box::leak(name.to_string().into_boxed_str());
        let access: &'static str = Box::leak(format!("{name}::access").into_boxed_str());
        (name, access)
    });
}

/// The app's name (until an app is served, the binary's, as
/// [`Options::name`](crate::Options::name) defaults to): the target of the
/// framework's records, so that `RUST_LOG=NAME=debug` selects them.
pub fn app_name() -> &'static str {
    names().0
}

/// The target of access lines, `NAME::access`: `RUST_LOG=NAME::access=off` silences
/// them.
pub(crate) fn access_target() -> &'static str {
    names().1
}

fn names() -> (&'static str, &'static str) {
    if NAMES.get().is_none() {
        set_app_name(crate::AppFlags::new().name());
    }
    NAMES.get().copied().unwrap_or(("app", "app::access"))
}

/// The filter used when `RUST_LOG` says nothing else.
pub(crate) const DEFAULT_FILTER: &str = "info,may=warn";

/// Stack a log call on a fiber gets before the logger runs: formatting into
/// env_logger's buffer, and the write to stderr under its lock (debug builds' frames
/// are several times larger than release builds').
pub(crate) const LOG_STACK_MARGIN: usize = 16 * 1024;

/// Install the logger: `DEFAULT_FILTER`, then the directives of `RUST_LOG`. Bad
/// directives are reported through the logger once it is installed. Does nothing if
/// a logger is already installed.
pub fn init() {
    let spec = std::env::var("RUST_LOG").unwrap_or_default();
    let (good, bad) = split_directives(&spec);
    let mut builder = env_logger::Builder::new();
    builder
        .parse_filters(DEFAULT_FILTER)
        .parse_filters(&good)
        .format(format);
    let logger = builder.build();
    let max = logger.filter();
    if log::set_boxed_logger(Box::new(FiberSafe(logger))).is_err() {
        return;
    }
    log::set_max_level(max);
    for directive in bad {
        log::warn!(
            target: app_name(),
            "RUST_LOG: ignored {directive}; the other directives apply \
             (write directives like info,{}=off,may=warn)",
            access_target()
        );
    }
}

/// `spec` split into the directives env_logger accepts (joined again) and a
/// description of each one it does not.
pub(crate) fn split_directives(spec: &str) -> (String, Vec<String>) {
    let (mods, filter) = match spec.split_once('/') {
        Some((mods, filter)) => (mods, Some(filter)),
        None => (spec, None),
    };
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for directive in mods.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        match env_filter::Builder::new().try_parse(directive) {
            Ok(_) => good.push(directive.to_string()),
            Err(e) => bad.push(format!("'{directive}' ({e})")),
        }
    }
    let mut good = good.join(",");
    if let Some(filter) = filter {
        let with_filter = format!("{good}/{filter}");
        match env_filter::Builder::new().try_parse(&with_filter) {
            Ok(_) => good = with_filter,
            Err(e) => bad.push(format!("the filter '/{filter}' ({e})")),
        }
    }
    (good, bad)
}

/// env_logger, made safe to call on a fiber: see the module's header.
struct FiberSafe(env_logger::Logger);

impl Log for FiberSafe {
    fn enabled(&self, metadata: &Metadata) -> bool {
        self.0.enabled(metadata)
    }

    fn log(&self, record: &Record) {
        if self.0.matches(record) {
            // Does nothing off a fiber; on one, overflows here, before the logger locks
            // anything (whatever the caller holds: it counts as outside a safe point).
            fiber_pool::check_stack(LOG_STACK_MARGIN);
            self.0.log(record);
        }
    }

    fn flush(&self) {
        self.0.flush();
    }
}

/// One line: timestamp, level, the target (the app's name, or another crate's module),
/// the message; an access line has no target.
fn format(out: &mut env_logger::fmt::Formatter, record: &Record) -> std::io::Result<()> {
    let ts = Timestamp::of(SystemTime::now());
    let level = record.level();
    if record.target() == access_target() {
        writeln!(out, "{ts} {level:<5} {}", record.args())
    } else {
        writeln!(
            out,
            "{ts} {level:<5} {}: {}",
            record.target(),
            record.args()
        )
    }
}

/// `2026-11-30T20:51:06.123Z`: RFC 3339, UTC, milliseconds. Written digit by digit
/// into 24 bytes: with `format!` it was the largest part of the access line's cost
/// (callgrind: 3,300 instructions of 8,700; now 320).
pub(crate) struct Timestamp([u8; 24]);

impl Timestamp {
    /// The timestamp of `t`.
    pub(crate) fn of(t: SystemTime) -> Timestamp {
        let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = since.as_secs();
        let (days, rem) = (secs / 86_400, secs % 86_400);
        let (year, month, day) = crate::http::date::civil_from_days(days);
        let mut out = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, width: usize, mut n: u64| {
            for i in (at..at + width).rev() {
                out[i] = b'0' + (n % 10) as u8;
                n /= 10;
            }
        };
        put(0, 4, year);
        put(5, 2, month.into());
        put(8, 2, day.into());
        put(11, 2, rem / 3600);
        put(14, 2, rem / 60 % 60);
        put(17, 2, rem % 60);
        put(20, 3, since.subsec_millis().into());
        Timestamp(out)
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Only ASCII digits and punctuation were written.
        f.write_str(std::str::from_utf8(&self.0).unwrap_or("?"))
    }
}

/// Prints a start-up line (`listening on ...`) on stdout and flushes it. A closed
/// stdout (`serve | head -1`, a reader that took the first line and left) is no
/// reason to stop serving: a failed write is dropped, where `println!` would panic
/// and take the process down, and with a supervisor its private MariaDB too.
pub fn banner(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// The access line of one request, at info under `access_target()` (`NAME::access`):
/// `GET /widgets 200 51.234ms route=widgets id=5f0c3a9e12b4d7e8-2a stack=3312B`. The
/// path is the request's (no query string: it may carry a user's tokens); `route=-`
/// when no route matched; `id=` when the app gives request ids; `stack=` only when
/// this request's fiber stack was measured (every 64th). A request whose client left
/// before its answer has status 499, as nginx writes it: nothing was sent.
pub fn access(
    method: &str,
    path: &str,
    status: u16,
    took: Duration,
    route: Option<&str>,
    stack_used: Option<usize>,
    id: Option<&str>,
) {
    let micros = took.as_micros();
    log::info!(
        target: access_target(),
        "{} {} {status} {}.{:03}ms route={}{}{}",
        Printable(method),
        Printable(path),
        micros / 1000,
        micros % 1000,
        route.unwrap_or("-"),
        Id(id),
        StackUsed(stack_used),
    );
}

/// The status an access line gives a request whose client left before its answer.
pub const CLIENT_GONE: u16 = 499;

/// ` id=ID`, or nothing. An id is printable ASCII without spaces (`request_id.rs`).
struct Id<'a>(Option<&'a str>);

impl std::fmt::Display for Id<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(id) => write!(f, " id={}", Printable(id)),
            None => Ok(()),
        }
    }
}

/// The line logged for every 5xx (`said` is what happened: a problem's internal
/// text, else the body; on one line and cut at 512 bytes):
/// `NAME: GET widgets -> 503 id=...: database unavailable: ...`. A 500 (an overflow, a
/// panic, a query that failed) is an error, a refusal or a gateway failure (502, 503,
/// 504) a warning.
pub fn server_error(method: &str, route: &str, status: u16, said: &[u8], id: Option<&str>) {
    let level = if status == 500 {
        Level::Error
    } else {
        Level::Warn
    };
    // A route's default label is its method and pattern: the method is said once.
    let route = route
        .strip_prefix(method)
        .and_then(|r| r.strip_prefix(' '))
        .unwrap_or(route);
    log::log!(
        target: app_name(),
        level,
        "{method} {route} -> {status}{}: {}",
        Id(id),
        one_line(said)
    );
}

/// Bytes of a 5xx body that its log line keeps: the start says what happened; a longer
/// body (a page, a dump) is cut, and its length said.
const LOGGED_BODY: usize = 512;

/// `body` as the tail of one log line: each run of whitespace (a pretty-printed JSON
/// body's newlines and indentation) one space, any other control character `?`, and
/// at most [`LOGGED_BODY`] bytes of it.
fn one_line(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut out = String::with_capacity(text.len().min(LOGGED_BODY + 32));
    for word in text.split_whitespace() {
        if out.len() > LOGGED_BODY {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.extend(word.chars().map(|c| if c.is_control() { '?' } else { c }));
    }
    if out.len() > LOGGED_BODY {
        let mut cut = LOGGED_BODY;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str(&format!("... ({} bytes)", body.len()));
    }
    out
}

/// Text from a client, with every byte outside printable ASCII percent-escaped, so a
/// request cannot write control characters (a newline, a terminal escape) into a log.
struct Printable<'a>(&'a str);

impl std::fmt::Display for Printable<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Runs of printable text go out whole; each other byte as %XX.
        let mut rest = self.0;
        while let Some(at) = rest.bytes().position(|b| !b.is_ascii_graphic()) {
            f.write_str(&rest[..at])?;
            let mut utf8 = [0u8; 4];
            let c = rest[at..].chars().next().unwrap_or(' ');
            for b in c.encode_utf8(&mut utf8).bytes() {
                write!(f, "%{b:02X}")?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        f.write_str(rest)
    }
}

/// ` stack=3312B`, or nothing when the stack was not measured.
struct StackUsed(Option<usize>);

impl std::fmt::Display for StackUsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(bytes) => write!(f, " stack={bytes}B"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_directives_are_named_and_the_rest_kept() {
        let (good, bad) = split_directives("info,may=loud,app::access=off,a=b=c");
        assert_eq!(good, "info,app::access=off");
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad[0].contains("'may=loud'"), "{bad:?}");
        assert!(bad[1].contains("'a=b=c'"), "{bad:?}");
        let (good, bad) = split_directives("");
        assert_eq!((good.as_str(), bad.len()), ("", 0));
        let (good, bad) = split_directives("debug/GET");
        assert_eq!((good.as_str(), bad.len()), ("debug/GET", 0));
        let (good, bad) = split_directives("warn/a/b");
        assert_eq!(good, "warn");
        assert_eq!(bad.len(), 1, "{bad:?}");
    }

    #[test]
    fn timestamps_are_rfc3339_utc_with_milliseconds() {
        let t = UNIX_EPOCH + Duration::from_millis(1_795_922_349_007); // 2026-11-29 03:19:09
        let ts = |t| Timestamp::of(t).to_string();
        assert_eq!(ts(t), "2026-11-29T03:19:09.007Z");
        assert_eq!(ts(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            ts(UNIX_EPOCH + Duration::from_millis(951_868_799_999)),
            "2000-02-29T23:59:59.999Z"
        );
    }

    #[test]
    fn a_5xx_body_is_logged_on_one_line_and_cut() {
        let pretty = b"{\n  \"error\": \"no fiber\",\n  \"status\": 503\n}\n";
        assert_eq!(
            one_line(pretty),
            r#"{ "error": "no fiber", "status": 503 }"#
        );
        assert_eq!(one_line(b"a\x1b[31m b\r\n"), "a?[31m b");
        let long = "\u{e9}".repeat(400); // 800 bytes, two to a character
        let cut = one_line(long.as_bytes());
        assert!(cut.ends_with("... (800 bytes)"), "{cut}");
        assert_eq!(cut.len(), LOGGED_BODY + "... (800 bytes)".len());
    }

    #[test]
    fn client_text_cannot_write_control_characters() {
        let shown = Printable("/a b\n\u{1b}[31m%é").to_string();
        assert_eq!(shown, "/a%20b%0A%1B[31m%%C3%A9");
        assert_eq!(StackUsed(Some(3312)).to_string(), " stack=3312B");
        assert_eq!(StackUsed(None).to_string(), "");
    }
}
