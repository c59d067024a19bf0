//! The soak's HTTP client: one request on a fresh connection (`Connection: close`),
//! every wait bounded, and what came back sorted into an [`Answer`] or the [`Cause`]
//! of a failure. A plain std socket, so that nothing of the server's stack is in the
//! client's path. Problems are asked for as JSON, so a refusal names its kind.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::rule::Cause;

/// Longest connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest request, connect to last byte: above the longest legitimate answer under the
/// soak's load (a self-call of one second queued behind a burst, a fiber wait).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest answer read (the demo's biggest, `/stats`, is a few KiB).
const MAX_ANSWER: usize = 1 << 20;
/// Characters of a body kept in a failure's detail.
const DETAIL_CHARS: usize = 160;
/// The prefix of a fiber_web problem's `type`.
const PROBLEM_TYPE: &str = "urn:fiber-web:problem:";

/// A whole answer.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    /// The problem's kind, when the body is a problem.
    pub kind: Option<String>,
    pub body: String,
}

impl Answer {
    /// The cause of a failure whose answer this is.
    pub fn cause(&self) -> Cause {
        Cause::Status(self.status, self.kind.clone())
    }

    /// The start of the body, for a failure's detail.
    pub fn detail(&self) -> String {
        shorten(&self.body)
    }
}

/// A failure to get a whole answer.
#[derive(Clone, Debug)]
pub struct Trouble {
    pub cause: Cause,
    pub detail: String,
}

fn trouble(cause: Cause, detail: impl Into<String>) -> Trouble {
    Trouble {
        cause,
        detail: detail.into(),
    }
}

/// `text`, cut to [`DETAIL_CHARS`] on one line.
pub fn shorten(text: &str) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    one_line.chars().take(DETAIL_CHARS).collect()
}

/// `METHOD path` with an optional JSON body, within [`REQUEST_TIMEOUT`].
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    json: Option<&str>,
) -> Result<Answer, Trouble> {
    let mut bytes = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\
         Connection: close\r\n"
    );
    if let Some(body) = json {
        bytes.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ));
    } else {
        bytes.push_str("\r\n");
    }
    exchange(addr, bytes.as_bytes(), REQUEST_TIMEOUT)
}

/// Send `bytes` on a fresh connection and read the answer, all within `within`.
pub fn exchange(addr: SocketAddr, bytes: &[u8], within: Duration) -> Result<Answer, Trouble> {
    let deadline = Instant::now() + within;
    let left = || deadline.saturating_duration_since(Instant::now());
    let mut s =
        TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT.min(within)).map_err(|e| {
            match e.kind() {
                ErrorKind::TimedOut | ErrorKind::WouldBlock => {
                    trouble(Cause::Connect, format!("connect timed out: {e}"))
                }
                _ => trouble(Cause::Connect, e.to_string()),
            }
        })?;
    let io = |e: std::io::Error, doing: &str| match e.kind() {
        ErrorKind::TimedOut | ErrorKind::WouldBlock => trouble(
            Cause::Timeout,
            format!("no answer within {within:?} ({doing})"),
        ),
        _ => trouble(Cause::Closed, format!("{doing}: {e}")),
    };
    s.set_write_timeout(Some(left().max(Duration::from_millis(1))))
        .map_err(|e| io(e, "set a timeout"))?;
    s.write_all(bytes)
        .map_err(|e| io(e, "writing the request"))?;
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        if let Some(answer) = complete(&got)? {
            return Ok(answer);
        }
        let wait = left();
        if wait.is_zero() {
            return Err(trouble(
                Cause::Timeout,
                format!("no whole answer within {within:?}"),
            ));
        }
        s.set_read_timeout(Some(wait))
            .map_err(|e| io(e, "set a timeout"))?;
        match s.read(&mut buf) {
            Ok(0) => {
                return match parse(&got, true)? {
                    Some(answer) => Ok(answer),
                    None => Err(trouble(
                        Cause::Closed,
                        format!("closed after {} bytes, before a whole answer", got.len()),
                    )),
                }
            }
            Ok(n) if got.len() + n > MAX_ANSWER => {
                return Err(trouble(Cause::Closed, "an answer over 1 MiB"))
            }
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e, "reading the answer")),
        }
    }
}

/// The answer in `got`, once its head and its Content-Length of body have come.
fn complete(got: &[u8]) -> Result<Option<Answer>, Trouble> {
    parse(got, false)
}

/// Parse `got`: `None` while it is incomplete. At the end of the stream (`eof`), an
/// answer without Content-Length ends there; one with it must have all its body.
fn parse(got: &[u8], eof: bool) -> Result<Option<Answer>, Trouble> {
    let Some(head_end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = String::from_utf8_lossy(&got[..head_end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| trouble(Cause::Closed, format!("not a status line: {status_line:?}")))?;
    let mut length = None;
    let mut problem = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<usize>().ok();
        } else if name.eq_ignore_ascii_case("content-type") {
            problem = value.starts_with("application/problem+json");
        }
    }
    let body = &got[head_end + 4..];
    let body = match length {
        Some(n) if body.len() >= n => &body[..n],
        Some(n) if eof => {
            return Err(trouble(
                Cause::Closed,
                format!("closed after {} of {n} body bytes", body.len()),
            ))
        }
        Some(_) => return Ok(None),
        None if eof => body,
        None => return Ok(None),
    };
    let body = String::from_utf8_lossy(body).into_owned();
    let kind = problem
        .then(|| serde_json::from_str::<serde_json::Value>(&body).ok())
        .flatten()
        .and_then(|v| {
            v["type"]
                .as_str()
                .map(|t| t.strip_prefix(PROBLEM_TYPE).unwrap_or(t).to_string())
        });
    Ok(Some(Answer { status, kind, body }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_whole_only_with_their_body() {
        let head = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n";
        assert!(parse(head.as_bytes(), false).unwrap().is_none());
        let whole = format!("{head}Oh hai");
        let a = parse(whole.as_bytes(), false).unwrap().unwrap();
        assert_eq!((a.status, a.body.as_str(), a.kind), (200, "Oh hai", None));
        let cut = parse(format!("{head}Oh").as_bytes(), true).unwrap_err();
        assert_eq!(cut.cause, Cause::Closed);
    }

    #[test]
    fn a_problem_names_its_kind() {
        let body = r#"{"type":"urn:fiber-web:problem:queue-full","status":503}"#;
        let text = format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let a = parse(text.as_bytes(), false).unwrap().unwrap();
        assert_eq!(a.cause(), Cause::Status(503, Some("queue-full".into())));
        assert_eq!(a.cause().to_string(), "503 queue-full");
    }
}
