//! The slow and garbage clients of the soak's faults: a head or a body sent a byte a
//! second, which the server must end with a 408 or a close; and requests that break
//! HTTP, which it must refuse (a 4xx, 501 or 505) or close. Each outcome is a probe the
//! soak counts like a request.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::client::{self, shorten};
use super::rule::Cause;

/// A slow client's pace.
const SLOW_BYTE_EVERY: Duration = Duration::from_secs(1);
/// Longest a slow client may go unanswered: the server's head and body timeouts
/// (fiber_web's default 10 s each) and a margin.
pub const SLOW_BOUND: Duration = Duration::from_secs(20);
/// Longest a garbage request may go unanswered.
pub const GARBAGE_BOUND: Duration = Duration::from_secs(15);

/// What a slow client sends before its byte-a-second part: a head that never ends...
pub const SLOW_HEAD: &[u8] = b"GET /hello HTTP/1.1\r\nHost: soak\r\nX-Slow: ";
/// ... or a head announcing a body that comes a byte at a time.
pub const SLOW_BODY: &[u8] = b"POST /todos HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n";

/// Send `start`, then `byte` once a second, until the server answers or closes; Ok
/// with what it did when that is a 408 or a close within [`SLOW_BOUND`].
pub fn slow_client(addr: SocketAddr, start: &[u8], byte: u8) -> Result<String, String> {
    let deadline = Instant::now() + SLOW_BOUND;
    let mut s = TcpStream::connect_timeout(&addr, client::CONNECT_TIMEOUT)
        .map_err(|e| format!("connect: {e}"))?;
    s.write_all(start).map_err(|e| format!("write: {e}"))?;
    s.set_read_timeout(Some(SLOW_BYTE_EVERY))
        .map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if !got.is_empty() {
                    break;
                }
                // The server may have closed its side already: a failed write says so.
                if s.write_all(&[byte]).is_err() {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&got);
    let status = text.get(9..12).unwrap_or("");
    match (got.is_empty(), status) {
        _ if Instant::now() >= deadline && got.is_empty() => {
            Err(format!("still open after {SLOW_BOUND:?}"))
        }
        (true, _) => Ok("closed".into()),
        (false, "408") => Ok("408".into()),
        (false, _) => Err(format!("answered {}", shorten(&text))),
    }
}

/// A request that breaks HTTP, and its name.
pub struct Garbage {
    pub name: &'static str,
    bytes: fn() -> Vec<u8>,
}

impl Garbage {
    /// Its bytes.
    pub fn bytes(&self) -> Vec<u8> {
        (self.bytes)()
    }
}

/// The garbage requests: each must be refused (a 4xx, 501 or 505) or closed.
pub const GARBAGE: [Garbage; 8] = [
    Garbage {
        name: "binary",
        bytes: || (0u8..=255).cycle().take(2048).collect(),
    },
    Garbage {
        name: "no version",
        bytes: || b"GET /hello\r\n\r\n".to_vec(),
    },
    Garbage {
        name: "HTTP/9.9",
        bytes: || b"GET /hello HTTP/9.9\r\nHost: soak\r\n\r\n".to_vec(),
    },
    Garbage {
        name: "header without a colon",
        bytes: || b"GET /hello HTTP/1.1\r\nHost: soak\r\nnot a header\r\n\r\n".to_vec(),
    },
    Garbage {
        name: "bad Content-Length",
        bytes: || b"POST /hello HTTP/1.1\r\nHost: soak\r\nContent-Length: 1x\r\n\r\n".to_vec(),
    },
    Garbage {
        name: "Content-Length with chunked",
        bytes: || {
            b"POST /hello HTTP/1.1\r\nHost: soak\r\nContent-Length: 3\r\n\
              Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                .to_vec()
        },
    },
    Garbage {
        name: "bad chunk size",
        bytes: || {
            b"POST /hello HTTP/1.1\r\nHost: soak\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
                .to_vec()
        },
    },
    Garbage {
        name: "a 100 KiB header",
        bytes: || {
            let mut r = b"GET /hello HTTP/1.1\r\nHost: soak\r\nX-Big: ".to_vec();
            r.extend(std::iter::repeat_n(b'a', 100 * 1024));
            r.extend_from_slice(b"\r\n\r\n");
            r
        },
    },
];

/// Send one garbage request; Ok when the answer is a refusal or a close.
pub fn garbage(addr: SocketAddr, bytes: &[u8]) -> Result<String, String> {
    match client::exchange(addr, bytes, GARBAGE_BOUND) {
        Ok(a) if (400..500).contains(&a.status) || a.status == 501 || a.status == 505 => {
            Ok(a.status.to_string())
        }
        Ok(a) => Err(format!("answered {}: {}", a.status, a.detail())),
        Err(t) if t.cause == Cause::Closed => Ok("closed".into()),
        Err(t) => Err(format!("{}: {}", t.cause, t.detail)),
    }
}
