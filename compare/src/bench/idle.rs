//! The idle keep-alive load: connections that each send one request, read its answer
//! and then stay open, saying nothing, while the server's RSS is sampled. What a server
//! holds for a connection between requests is what a browser's or a proxy's pool of
//! kept-alive connections costs it.
//!
//! No stock tool holds thousands of connections idle (ab closes, wrk keeps them busy),
//! so the bench does it itself: one connection at a time, each answered before the
//! next one opens, so that no listen backlog is ever full.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::bench::load::LoadResult;

/// Longest a connect or an answer may take before that connection counts as failed.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Open `connections` to `addr`, send `GET path` with keep-alive on each and read the
/// answer, hold them all for `hold`, then close them. Served: the 2xx answers. There
/// are no latencies or rates to report (NaN).
pub fn hold(addr: SocketAddr, path: &str, connections: usize, hold: Duration) -> LoadResult {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    let started = Instant::now();
    let mut open = Vec::with_capacity(connections);
    let mut served = 0;
    for _ in 0..connections {
        if let Ok((stream, status)) = one(addr, &request) {
            served += u64::from((200..300).contains(&status));
            open.push(stream);
        }
    }
    std::thread::sleep(hold);
    let secs = started.elapsed().as_secs_f64();
    drop(open);
    LoadResult {
        requests: connections as u64,
        served,
        failed: connections as u64 - served,
        secs,
        rps: f64::NAN,
        p50_ms: f64::NAN,
        p99_ms: f64::NAN,
    }
}

/// One connection with one request answered on it: the stream, still open, and the
/// status.
fn one(addr: SocketAddr, request: &str) -> io::Result<(TcpStream, u16)> {
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.write_all(request.as_bytes())?;
    let status = read_answer(&mut stream)?;
    Ok((stream, status))
}

/// Read one answer framed by Content-Length; its status.
fn read_answer(stream: &mut TcpStream) -> io::Result<u16> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    let head_end = loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(bad("closed before the answer"));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status = head
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status line"))?;
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| bad("no Content-Length"))?;
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(bad("closed inside the body"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn connections_are_answered_held_and_counted() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let mut kept = Vec::new();
            for (i, conn) in listener.incoming().take(3).enumerate() {
                let mut conn = conn.unwrap();
                let mut buf = [0u8; 256];
                let _ = conn.read(&mut buf).unwrap();
                let status = if i == 2 { 503 } else { 200 };
                write!(conn, "HTTP/1.1 {status} X\r\nContent-Length: 2\r\n\r\nok").unwrap();
                kept.push(conn);
            }
            // Every connection is still open when the client holds them.
            let mut probe = [0u8; 1];
            kept[0].set_nonblocking(true).unwrap();
            let still_open =
                matches!(kept[0].read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
            still_open
        });
        let r = hold(addr, "/hello", 3, Duration::from_millis(200));
        assert_eq!((r.requests, r.served, r.failed), (3, 2, 1));
        assert!(r.rps.is_nan() && r.p99_ms.is_nan());
        assert!(
            server.join().unwrap(),
            "held open while the client held them"
        );
    }
}
