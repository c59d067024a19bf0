//! Shared by the tests that serve an app on a real socket: the app started on port 0
//! through `fiber_web::start`, a plain std socket to talk to it (not fiber_web's own
//! client, so that a bug there cannot hide one in the server), its answers parsed, and
//! a bounded poll for a state.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use fiber_web::{App, Options, Serving};

/// How long a test waits for an answer or a state before it fails.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A test server's options: port 0, a few fibers on two threads, no access log.
pub fn options() -> Options {
    Options {
        bind: "127.0.0.1:0".parse().unwrap(),
        fibers: 8,
        threads: 2,
        access_log: false,
        ..Options::default()
    }
}

/// `app` served with `options` in this process, until the test shuts it down (or drops
/// it with the process).
pub fn serve<S: Send + Sync + 'static>(options: &Options, app: App<S>) -> Serving {
    fiber_web::start(
        options,
        |_: &str| {},
        move |_| Ok::<_, std::convert::Infallible>(app),
    )
    .expect("the app starts")
}

/// One answer as it came over the wire.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// The header lines, as sent.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// Every value of header `name`, in the order sent.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.all(name).first().copied()
    }
}

/// Read one answer from `s`: its head, then the `Content-Length` bytes of its body.
pub fn read_reply(s: &mut TcpStream) -> Reply {
    read_answer(s, false)
}

/// Read one answer from `s`; the answer to a HEAD request has no body, whatever its
/// `Content-Length` says.
fn read_answer(s: &mut TcpStream, to_head: bool) -> Reply {
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => got.push(byte[0]),
            other => panic!(
                "the head ended early ({other:?}): {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    let head = String::from_utf8(got).expect("an ASCII head");
    let mut lines = head.trim_end().split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l
                .split_once(':')
                .unwrap_or_else(|| panic!("a header: {l:?}"));
            (n.to_string(), v.trim().to_string())
        })
        .collect();
    let length = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.parse().unwrap());
    let length = if to_head { 0 } else { length };
    let mut body = vec![0u8; length];
    s.read_exact(&mut body).unwrap();
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// Send `raw` on a new connection and read one answer.
pub fn exchange(addr: SocketAddr, raw: &[u8]) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(raw).unwrap();
    read_reply(&mut s)
}

/// `METHOD path` with no body, on a connection of its own.
pub fn request(addr: SocketAddr, method: &str, path: &str) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(
        format!("{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    read_answer(&mut s, method == "HEAD")
}

/// `POST path` with `body` and `content_type`.
pub fn post(addr: SocketAddr, path: &str, content_type: &str, body: &str) -> Reply {
    exchange(
        addr,
        format!(
            "POST {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Type: \
             {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
}

/// Whether `done` became true within [`PATIENCE`], asked every millisecond.
pub fn poll(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
