//! The handler trait: what a route runs, on a guarded fiber ([`Handler`]'s own docs
//! are the guide).

use crate::http::{IntoResponse, Request, Response};

/// A route handler: plain, blocking-looking code that runs on a fiber. Implemented for
/// every `Fn(&S, &Request) -> impl IntoResponse` that may be shared between threads:
/// plain functions, and closures that capture their configuration: of the state its
/// routes share and the request, returning anything that becomes a response
/// ([`IntoResponse`]):
///
/// ```
/// use fiber_web::{Json, Request, Response};
///
/// struct Todos;
/// fn show(_todos: &Todos, req: &Request) -> Result<Json<u64>, Response> {
///     let id: u64 = req.param("id")?; // 400 naming the parameter if it is not a number
///     Ok(Json(id))
/// }
/// ```
///
/// What it may and may not do on its fiber (STACK_SIZES.md has the why and the
/// figures):
/// - It may call blocking-looking may I/O (`fiber_mysql`, [`crate::client`]):
///   the waits yield to the scheduler. It must not call blocking std I/O or
///   `std::thread::sleep` (they stall a whole scheduler thread; the watchdog names the
///   route).
/// - It may hold anything across a wait, thread-bound values included: a fiber runs
///   from its first instruction to its last on the OS thread it started on (the
///   patched may of `patches/may` never moves a coroutine, and a fiber runs inside
///   one), so a `thread_local!` borrow, an `Rc` into a thread-local
///   (`rand::thread_rng()`), a `tracing` span entered on the thread's stack or a std
///   lock guard is still its own thread's when the wait ends: no value is touched from
///   two threads, and safe code cannot make a data race of it. What other requests of
///   the same thread do meanwhile is what interleaving gives, as on a current-thread
///   async executor: a `RefCell` borrowed mutably across a wait makes theirs panic,
///   and a std `Mutex` held across one deadlocks the thread when another of its
///   requests locks it (use `may::sync::Mutex`, which parks instead).
/// - A stack overflow abandons its frames without unwinding: the client gets a 500 and
///   the server goes on, but locks those frames held stay held. Take MySQL connections
///   through `fiber_mysql::Pool::checkout` (it keeps the connection outside the fiber
///   stack), locks through `fiber_pool::lock` (or `fiber_pool::reserve_stack` first),
///   and do not print on a fiber: return what to log (the server logs every 5xx).
/// - Keep big buffers on the heap and recursion bounded; measure with the pool's
///   per-route stack peaks (`/metrics`: `fiberstack_route_stack_peak_bytes`), and keep
///   4x headroom.
pub trait Handler<S>: Send + Sync {
    /// The response to `req`.
    fn call(&self, state: &S, req: &Request) -> Response;
}

impl<S, F, R> Handler<S> for F
where
    F: Fn(&S, &Request) -> R + Send + Sync + 'static,
    R: IntoResponse,
{
    fn call(&self, state: &S, req: &Request) -> Response {
        self(state, req).into_response()
    }
}
