//! Handlers that hold thread-bound values across every kind of wait, as a user's
//! code does without thinking of it: the thread's id, a borrow of a `thread_local!`
//! `RefCell`, an `Rc` into a thread-local, a `rand::thread_rng()`, and a `tracing`
//! span entered on the thread's span stack. A fiber never changes thread, so each is
//! still its own thread's when the wait ends (tests/thread_bound.rs drives it under
//! `ab`, in every `--threads` and `--processes` setting the docs allow).
//!
//! - `GET /hold?wait=W`: holds them all across one wait `W` (`sleep`,
//!   `sleep_or_cancelled`, `query`, `transaction`, `checkout_timeout` (a checkout that
//!   ends by its timeout), `http` (a GET of this server's `/plain`), `scope` (a child's
//!   join), `blocking`, `gone` (a 10 s sleep that ends when the client leaves)); 200
//!   `held` when every value was its own thread's after it, 500 naming what was not;
//! - `GET /deadline?wait=deadline`: the same, the sleep cancelled by the route's 100 ms
//!   deadline; `GET /limited?wait=limited`: after the route's turn (one at a time);
//! - `GET /report`: what this process saw: `{"pid", "held", "moved", "wrong",
//!   "waiting_to_be_left", "gone"}` (requests that began and that ended the `gone` wait).
//!
//! Run with: DATABASE_URL=mysql://... cargo run --example thread_bound -- --bind 127.0.0.1:0
//! Then:     curl 'http://ADDR/hold?wait=sleep'
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread::{self, ThreadId};
use std::time::Duration;

use fiber_mysql::{Pool, PoolConfig, PooledConn};
use fiber_web::client::{HttpClient, Url};
use fiber_web::{App, Options, Request, Response};
use rand::Rng;

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

/// A wait's length where it has one.
const NAP: Duration = Duration::from_millis(1);

struct State {
    db: Pool,
    /// A pool of one connection, held for ever by `_held`: every checkout of it ends by
    /// its timeout.
    busy: Pool,
    _held: Mutex<PooledConn>,
    http: HttpClient,
    plain: Url,
}

thread_local! {
    /// This thread's id, borrowed across the wait.
    static OWNER: RefCell<Option<ThreadId>> = const { RefCell::new(None) };
    /// A value of this thread, shared by reference count (as `thread_rng()` is).
    static SHARED: Rc<()> = Rc::new(());
    /// The spans entered on this thread and not exited yet (the subscriber's stack).
    static SPANS: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

static HELD: AtomicU64 = AtomicU64::new(0);
static MOVED: AtomicU64 = AtomicU64::new(0);
static WRONG: AtomicU64 = AtomicU64::new(0);
static GONE: AtomicU64 = AtomicU64::new(0);
static LEAVING: AtomicU64 = AtomicU64::new(0);

/// A `tracing` subscriber whose entered spans are a stack per thread, as
/// tracing-subscriber's registry keeps them: a span exited on another thread than it
/// was entered on is not on that thread's stack, and counts as wrong.
struct ThreadStacks {
    next: AtomicU64,
}

impl tracing::Subscriber for ThreadStacks {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed))
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, span: &tracing::span::Id) {
        SPANS.with(|s| s.borrow_mut().push(span.into_u64()));
    }
    fn exit(&self, span: &tracing::span::Id) {
        let found = SPANS.with(|s| {
            let mut s = s.borrow_mut();
            let at = s.iter().rposition(|&id| id == span.into_u64());
            at.map(|at| s.remove(at))
        });
        if found.is_none() {
            WRONG.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The one wait `GET /hold?wait=W` makes; `Err` says what failed.
fn wait(app: &State, kind: &str) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    match kind {
        "sleep" | "limited" => fiber_pool::sleep(NAP),
        "sleep_or_cancelled" => fiber_pool::sleep_or_cancelled(NAP).map_err(|r| e(&r))?,
        "query" => drop(
            app.db
                .checkout()
                .and_then(|mut c| c.query("select 1"))
                .map_err(|x| e(&x))?,
        ),
        "transaction" => {
            let mut c = app.db.checkout().map_err(|x| e(&x))?;
            c.transaction(|tx| tx.query("select 1").map(drop))
                .map_err(|x| e(&x))?
        }
        "checkout_timeout" => {
            if app.busy.checkout_within(Duration::from_millis(2)).is_ok() {
                return Err("the held connection was handed out".into());
            }
        }
        "http" => drop(app.http.get(&app.plain).map_err(|x| e(&x))?),
        "scope" => {
            fiber_pool::scope(|s| s.spawn(|| fiber_pool::sleep(NAP)).join()).map_err(|x| e(&x))?
        }
        "blocking" => {
            fiber_pool::blocking(|| thread::sleep(Duration::from_micros(100))).map_err(|x| e(&x))?
        }
        // Ended by the route's deadline (the deadline thread cancels the context) or
        // by the client's leaving (the server's sweeper): either way, early.
        "gone" => {
            LEAVING.fetch_add(1, Ordering::Relaxed);
            let _ = fiber_pool::sleep_or_cancelled(Duration::from_secs(10));
        }
        "deadline" => {
            let _ = fiber_pool::sleep_or_cancelled(Duration::from_secs(10));
        }
        other => return Err(format!("unknown wait {other:?}")),
    }
    Ok(())
}

/// `GET /hold?wait=W`: every thread-bound value held across the wait.
fn hold(app: &State, req: &Request) -> Response {
    let kind = req.query_param("wait").unwrap_or_default();
    let before = thread::current().id();
    let shared = SHARED.with(Rc::clone);
    let mut rng = rand::thread_rng();
    let span = tracing::info_span!("hold").entered();
    let (waited, borrow_ok) = OWNER.with(|owner| {
        if owner.borrow().is_none() {
            *owner.borrow_mut() = Some(before);
        }
        let owner = owner.borrow();
        let waited = wait(app, &kind);
        (waited, *owner == Some(thread::current().id()))
    });
    let rc_ok = SHARED.with(|s| Rc::ptr_eq(s, &shared));
    let _: u64 = rng.gen();
    drop(span);
    let moved = thread::current().id() != before;
    let mut wrong = HashSet::new();
    if moved {
        MOVED.fetch_add(1, Ordering::Relaxed);
        wrong.insert("thread");
    }
    if !borrow_ok {
        wrong.insert("thread-local borrow");
    }
    if !rc_ok {
        wrong.insert("Rc into a thread-local");
    }
    if !wrong.is_empty() {
        WRONG.fetch_add(1, Ordering::Relaxed);
    }
    if kind == "gone" {
        GONE.fetch_add(1, Ordering::Relaxed);
    }
    match (waited, wrong.is_empty()) {
        (Ok(()), true) => {
            HELD.fetch_add(1, Ordering::Relaxed);
            Response::text(200, "held\n")
        }
        (Ok(()), false) => {
            Response::error(500, format!("another thread's after the wait: {wrong:?}"))
        }
        (Err(why), _) => Response::error(500, format!("the wait failed: {why}")),
    }
}

fn report(_: &State, _: &Request) -> Response {
    let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
    Response::json(
        200,
        &serde_json::json!({
            "pid": std::process::id(), "held": n(&HELD), "moved": n(&MOVED),
            "wrong": n(&WRONG), "waiting_to_be_left": n(&LEAVING), "gone": n(&GONE),
        }),
    )
}

fn main() -> Result<(), fiber_web::Error> {
    fiber_web::serve(Options::from_env_and_args()?, |started| {
        let _ = tracing::subscriber::set_global_default(ThreadStacks {
            next: AtomicU64::new(1),
        });
        let url = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL=mysql://...")?;
        let opts = fiber_mysql::Opts::from_url(&url)?;
        let busy = Pool::new(PoolConfig::new(opts.clone(), 1))?;
        let held = busy.get()?;
        let state = State {
            db: Pool::new(PoolConfig::new(opts, 8))?,
            busy,
            _held: Mutex::new(held),
            http: HttpClient::new(Default::default()),
            plain: Url::parse(&format!("http://{}/plain", started.addr()))?,
        };
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
            App::new(state)
                .get("/hold", hold)
                .get("/plain", |_: &State, _: &Request| "plain\n")
                .get("/report", report)
                .get("/deadline", hold)
                .timeout(Duration::from_millis(100))
                .get("/limited", hold)
                .limit(1, Duration::from_secs(30), "one at a time"),
        )
    })
}
