//! What the client tests share: running a call on a real fiber (a pool that measures
//! every job's stack), and fake upstreams: std listeners on 127.0.0.1:0, each
//! connection on a std thread, that behave as the test says and record what arrived.

#![allow(dead_code)] // each test file uses its own part

pub mod tls;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use fiber_pool::{FiberPool, PoolConfig};

/// How long a fake upstream keeps a connection it is not told to close.
pub const HOLD: Duration = Duration::from_secs(10);

/// A pool of fibers like the server's (128 KiB stacks), measuring every job's stack.
pub fn fibers() -> FiberPool {
    FiberPool::new(PoolConfig {
        size: 8,
        stack_size: 128 * 1024,
        measure_every: 1,
        ..PoolConfig::default()
    })
    .unwrap()
}

/// Run `job` on one of `pool`'s fibers, carried by a may coroutine, and wait for it.
pub fn on_fiber<T: Send + 'static>(
    pool: &FiberPool,
    label: &'static str,
    job: impl FnOnce() -> T + Send + 'static,
) -> T {
    let pool = pool.clone();
    let carrier = move || pool.run(label, job).expect("the job ran on a fiber");
    fiber_pool::carrier::go(carrier).join().unwrap()
}

/// Poll `f` until it holds, for at most `within`.
pub fn poll(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if f() {
            return true;
        }
        if start.elapsed() > within {
            return false;
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// A request as a fake upstream read it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub target: String,
    /// Names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Which accepted connection (0, 1, ...) it came on.
    pub connection: usize,
    /// Its index on that connection (0 for the first).
    pub nth: usize,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What a fake upstream does after reading a request.
pub enum Next {
    /// Read the next request on this connection.
    KeepOpen,
    /// Close the connection.
    Close,
}

type Behave = dyn Fn(&mut TcpStream, &Seen) -> Next + Send + Sync;

/// A fake upstream and what it saw.
pub struct Upstream {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    /// Connections accepted so far.
    pub connections: Arc<AtomicUsize>,
    /// Connections still open on the upstream's side.
    pub live: Arc<AtomicUsize>,
}

impl Upstream {
    /// Start one: each request read (head and Content-Length body) is recorded and
    /// goes to `behave`.
    pub fn start(
        behave: impl Fn(&mut TcpStream, &Seen) -> Next + Send + Sync + 'static,
    ) -> Upstream {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        Self::listen(seen, move |mut s, connection| {
            let behave: &Behave = &behave;
            for nth in 0.. {
                let Some(req) = read_request(&mut s, connection, nth) else {
                    return;
                };
                log.lock().unwrap().push(req.clone());
                if let Next::Close = behave(&mut s, &req) {
                    return;
                }
            }
        })
    }

    /// Start one that hands each accepted connection (and its index) to `serve`,
    /// reading nothing itself.
    pub fn start_raw(serve: impl Fn(TcpStream, usize) + Send + Sync + 'static) -> Upstream {
        Self::listen(Arc::default(), serve)
    }

    fn listen(
        seen: Arc<Mutex<Vec<Seen>>>,
        serve: impl Fn(TcpStream, usize) + Send + Sync + 'static,
    ) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let live = Arc::new(AtomicUsize::new(0));
        let serve = Arc::new(serve);
        let (count, open) = (Arc::clone(&connections), Arc::clone(&live));
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let n = count.fetch_add(1, Ordering::SeqCst);
                open.fetch_add(1, Ordering::SeqCst);
                stream.set_read_timeout(Some(HOLD)).unwrap();
                stream.set_write_timeout(Some(HOLD)).unwrap();
                let (serve, open) = (Arc::clone(&serve), Arc::clone(&open));
                thread::spawn(move || {
                    serve(stream, n);
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Upstream {
            addr,
            seen,
            connections,
            live,
        }
    }

    /// `http://addr` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Read one request (head, then a Content-Length body); `None` when the client closed
/// or sent something unreadable.
pub fn read_request(s: &mut impl Read, connection: usize, nth: usize) -> Option<Seen> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    let text = String::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    s.read_exact(&mut body).ok()?;
    Some(Seen {
        method,
        target,
        headers,
        body,
        connection,
        nth,
    })
}

/// Write a keep-alive response with a Content-Length body.
pub fn respond(s: &mut impl Write, status: &str, headers: &str, body: &[u8]) -> Next {
    let head = format!(
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\n\r\n",
        body.len()
    );
    let sent = s
        .write_all(head.as_bytes())
        .and_then(|()| s.write_all(body));
    if sent.and_then(|()| s.flush()).is_ok() {
        Next::KeepOpen
    } else {
        Next::Close
    }
}

/// Wait until the client hangs up (or [`HOLD`] passes): a silent upstream.
pub fn hold_until_closed(s: &mut TcpStream) -> Next {
    let mut sink = [0u8; 1024];
    while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
    Next::Close
}

/// The number of file descriptors this process has open.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}
