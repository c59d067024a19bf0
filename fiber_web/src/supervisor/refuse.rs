//! The supervisor answers the port itself while no worker accepts: every connection
//! waiting in the backlog then gets a 503 with `Retry-After` and `Connection: close`,
//! instead of waiting for a worker that may be seconds away (a replacement held back
//! by the rate bound, a crash loop's delay) or closing unanswered.
//!
//! One thread ([`Refuser`]) accepts from a copy of the listening socket, reads what the
//! client sent (so that closing does not reset the answer away), writes the 503 and
//! closes, one connection at a time, each within the sum of [`READ_TIMEOUT`],
//! [`WRITE_TIMEOUT`] and [`LINGER`]. The answer is plain text: the supervisor runs no
//! app, so it cannot render the app's problem format. It stops (and drops its copy of
//! the socket) when the decision thread drops it, once a worker accepts again.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::http::Response;

/// How often the thread looks for a connection in the backlog.
const POLL: Duration = Duration::from_millis(5);
/// Longest a client may take to send its request head.
const READ_TIMEOUT: Duration = Duration::from_millis(200);
/// Longest the answer may take to be written.
const WRITE_TIMEOUT: Duration = Duration::from_millis(200);
/// How long, after answering, what the client still sends is read and dropped, so that
/// it reads the answer before the close.
const LINGER: Duration = Duration::from_millis(200);
/// Most bytes of a request read before answering.
const MAX_HEAD: usize = 16 * 1024;

/// The thread that answers the backlog; it stops when dropped.
pub(crate) struct Refuser {
    stop: Arc<AtomicBool>,
    retry_after: Arc<AtomicU64>,
    answered: Arc<AtomicU64>,
}

impl Refuser {
    /// Starts answering connections on `listener` (a copy of it), telling clients to
    /// retry after `retry_after` seconds.
    pub(crate) fn start(listener: &TcpListener, retry_after: u64) -> io::Result<Refuser> {
        let listener = listener.try_clone()?;
        // The workers' may made the socket non-blocking already (the flag belongs to
        // the socket, which every copy shares); said again for a socket no worker took.
        listener.set_nonblocking(true)?;
        let refuser = Refuser {
            stop: Arc::new(AtomicBool::new(false)),
            retry_after: Arc::new(AtomicU64::new(retry_after)),
            answered: Arc::new(AtomicU64::new(0)),
        };
        let (stop, retry, answered) = (
            Arc::clone(&refuser.stop),
            Arc::clone(&refuser.retry_after),
            Arc::clone(&refuser.answered),
        );
        std::thread::Builder::new()
            .name("supervisor-refuse".into())
            .spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            answer(stream, retry.load(Ordering::Relaxed));
                            answered.fetch_add(1, Ordering::Relaxed);
                        }
                        // Nothing waits (or a worker took it), or the client left.
                        Err(_) => std::thread::sleep(POLL),
                    }
                }
            })?;
        Ok(refuser)
    }

    /// Tell later clients to retry after `secs` seconds.
    pub(crate) fn retry_after(&self, secs: u64) {
        self.retry_after.store(secs, Ordering::Relaxed);
    }

    /// Connections answered so far.
    pub(crate) fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }
}

impl Drop for Refuser {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Reads the request's head (bounded), answers 503 with `Retry-After`, and closes.
fn answer(mut stream: TcpStream, retry_after: u64) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let head = read_head(&mut stream);
    let mut out = Vec::new();
    Response::error(
        503,
        "the server is replacing its worker process; try again shortly",
    )
    .header("Retry-After", retry_after.to_string())
    .write_to(&mut out, 1, false, head.starts_with(b"HEAD "));
    if stream.write_all(&out).is_err() {
        return;
    }
    let _ = stream.shutdown(Shutdown::Write);
    let until = Instant::now() + LINGER;
    let mut buf = [0u8; 4096];
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

/// What the client sent, up to the end of its head, [`MAX_HEAD`] bytes or
/// [`READ_TIMEOUT`].
fn read_head(stream: &mut TcpStream) -> Vec<u8> {
    let until = Instant::now() + READ_TIMEOUT;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let Some(left) = until.checked_duration_since(Instant::now()) else {
            break;
        };
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_in_the_backlog_gets_a_503_with_retry_after_and_close() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let refuser = Refuser::start(&listener, 3).unwrap();
        let mut client = TcpStream::connect(addr).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut reply = String::new();
        client.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
        assert!(reply.contains("Retry-After: 3\r\n"), "{reply}");
        assert!(reply.contains("Connection: close\r\n"), "{reply}");
        assert!(reply.contains("try again"), "{reply}");
        // Counted once the answer's linger ends (the client's close ends it).
        drop(client);
        let until = Instant::now() + Duration::from_secs(5);
        while refuser.answered() < 1 {
            assert!(Instant::now() < until, "never counted");
            std::thread::sleep(POLL);
        }
        drop(refuser);
    }
}
