//! What the access and 5xx lines say, read from the records themselves (a logger of
//! this test's own, in this process, over a real socket): one line each, the request id
//! on both when the app gives ids, what a client must not read (a panic's message, a
//! readiness check's reason) on the 5xx line, and an access line with status 499 for a request whose client left.

mod serving;

use std::io::Write;
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::Duration;

use fiber_web::{App, Request, RequestId};

use serving::{exchange, options, poll, serve};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

/// Every record logged, as `LEVEL message`.
static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let line = format!("{} {}", record.level(), record.args());
        LINES.lock().unwrap().push(line);
    }

    fn flush(&self) {}
}

fn lines_with(text: &str) -> Vec<String> {
    let lines = LINES.lock().unwrap();
    lines.iter().filter(|l| l.contains(text)).cloned().collect()
}

#[test]
fn access_and_5xx_lines_carry_the_id_and_a_client_that_left_has_a_499() {
    log::set_logger(&Capture).unwrap();
    log::set_max_level(log::LevelFilter::Info);
    let app = App::new(())
        .get("/hello", |_: &(), _: &Request| "hello")
        .get("/panic", |_: &(), _: &Request| -> &'static str {
            panic!("the handler's secret\nsecond line")
        })
        .get("/slow", |_: &(), _: &Request| {
            let _ = fiber_pool::sleep_or_cancelled(Duration::from_secs(5));
            "slow"
        })
        .readiness(|_| Err("the database is away: its secret text".into()))
        .request_ids(RequestId::default());
    let mut opts = options();
    opts.access_log = true;
    let serving = serve(&opts, app);
    let send = |path: &str, id: &str| {
        let raw = format!(
            "GET {path} HTTP/1.1\r\nHost: t\r\nX-Request-Id: {id}\r\nConnection: close\r\n\r\n"
        );
        exchange(serving.addr(), raw.as_bytes())
    };
    assert_eq!(send("/hello", "id-hello").status, 200);
    let r = send("/panic", "id-panic");
    assert_eq!(r.status, 500);
    assert!(!r.body.contains("secret"), "{}", r.body);
    let r = send("/readyz", "id-ready");
    assert_eq!(r.status, 503);
    assert!(!r.body.contains("secret"), "{}", r.body);
    // A client that leaves mid-request.
    let mut gone = TcpStream::connect(serving.addr()).unwrap();
    gone.write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\nX-Request-Id: id-gone\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(100)); // the request is running
    drop(gone);
    assert!(
        poll(|| !lines_with("id=id-gone").is_empty()),
        "{:#?}",
        LINES.lock().unwrap()
    );

    let hello = lines_with("id=id-hello");
    assert_eq!(hello.len(), 1, "{hello:#?}");
    assert!(hello[0].starts_with("INFO GET /hello 200 "), "{hello:#?}");
    let panic = lines_with("id=id-panic");
    assert_eq!(panic.len(), 2, "an access line and a 5xx line: {panic:#?}");
    let fivexx = panic
        .iter()
        .find(|l| l.starts_with("ERROR"))
        .expect("a 5xx line");
    assert!(
        fivexx.starts_with("ERROR GET /panic -> 500 id=id-panic: "),
        "{fivexx}"
    );
    assert!(
        fivexx.contains("the handler's secret"),
        "the operator reads it: {fivexx}"
    );
    let ready = lines_with("id=id-ready");
    assert!(
        ready
            .iter()
            .any(|l| l.contains("-> 503 id=id-ready: ") && l.contains("its secret text")),
        "the operator reads the check's reason: {ready:#?}"
    );
    let gone = lines_with("id=id-gone");
    assert!(gone[0].starts_with("INFO GET /slow 499 "), "{gone:#?}");
    for line in LINES.lock().unwrap().iter() {
        assert!(!line.contains('\n'), "one line per record: {line:?}");
    }
}
