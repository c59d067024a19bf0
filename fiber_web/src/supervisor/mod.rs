//! Several worker processes behind one port, and a supervisor that replaces them
//! without refusing a connection: `fiberstack serve --processes N`, and the same for
//! any app built on the library (see `examples/minimal_server.rs`).
//!
//! ```text
//! supervisor (process.rs): binds the port once, owns what the workers share (the
//!   |   private MariaDB: its URL goes to the workers in the environment, never argv),
//!   |   accepts only while no worker does (refuse.rs: a 503 with Retry-After).
//!   |   SIGHUP: rolling restart. SIGTERM/SIGINT: stop all, then return.
//!   |-- worker 1 (this same binary, re-executed with the same arguments)
//!   |-- worker 2      each inherits the listening socket (inherit.rs: LISTEN_FDS, as
//!   '-- ...           systemd passes it) and talks to the supervisor on its stdin
//!                     (worker.rs: "ready", "replace <reason>", "suspect <reason>";
//!                     the supervisor: "stop <why>" when replaced, "stop-all <why>"
//!                     when all stop)
//! ```
//!
//! A replacement goes in this order: the new worker starts and says `ready` once it
//! accepts; only then is the old one told to stop; it stops accepting at once (the
//! accept loop's wait is woken, see `server.rs`), finishes its in-flight requests for
//! up to `--shutdown-grace`, and exits. The listening socket stays open in the
//! supervisor all along, so the port never refuses a connection: connections wait in
//! the kernel's backlog for whichever worker accepts next. A worker that dies (exit,
//! crash, `kill -9`) is replaced at once; what it had accepted and not answered is lost
//! with it, nothing else.
//!
//! # The contract of [`ask_for_replacement`]
//! Any thread of a worker (the stall watchdog, a handler that noticed broken state)
//! may call `ask_for_replacement(reason)`. It never blocks for long (one short write,
//! bounded by [`worker::CONTROL_WRITE_TIMEOUT`]) and never stops the caller's process
//! by itself. In a supervised worker the supervisor logs the reason, starts a new
//! worker (at once, or when its rate bound lets it: `process.rs`), and once that one
//! accepts, tells this one to stop (gracefully: SIGTERM-like, in-flight requests
//! finish up to `--shutdown-grace`). A worker that a stack overflow left suspect has
//! stopped accepting already (`suspect.rs`); while no worker accepts, the supervisor
//! answers the port itself (`refuse.rs`). Repeated calls while a
//! replacement is under way are ignored by the supervisor. Without a supervisor
//! (`--processes 1`, the default) it only logs that nobody can replace this process,
//! and the process carries on.
//!
//! # Who starts it
//! [`serve`](crate::serve()) does, when `--processes` is 2 or more and this process is
//! not a worker already (`serve.rs`'s picture): it binds, runs what the app starts
//! beside its workers, then [`process::Supervisor::run`]. The comparison rig's servers
//! start it themselves, through the same calls (`rig`).

pub(crate) mod inherit;
pub(crate) mod process;
pub(crate) mod refuse;
pub(crate) mod worker;

pub(crate) use process::{Supervisor, SupervisorConfig, MAX_PROCESSES};
pub(crate) use worker::{ask_for_replacement, every_worker_stops, ready, stop_requests, worker};

/// Read what this process inherited (its worker identity, its listening socket) and
/// take it out of the environment. Call it first in `main`, before any thread starts;
/// later calls do nothing.
pub fn init() {
    let _ = worker::worker();
    inherit::init();
}

/// The socket to serve on: the inherited one (a worker's, or systemd's), else `addr`
/// bound here, with `backlog` connections queued in the kernel.
pub(crate) fn listener_with_backlog(
    addr: std::net::SocketAddr,
    backlog: i32,
) -> std::io::Result<crate::http::listener::Listener> {
    match inherit::take_listener()? {
        Some(inherited) => crate::http::listener::adopt(inherited),
        None => crate::http::listener::bind_with_backlog(addr, backlog).map(Into::into),
    }
}

/// Who answers: this process's pid, and its worker id and generation when a
/// supervisor runs it (`/stats` shows it).
pub fn describe() -> serde_json::Value {
    match worker() {
        Some(w) => serde_json::json!({
            "pid": std::process::id(),
            "id": w.id,
            "generation": w.generation,
            "supervisor_pid": w.supervisor_pid,
        }),
        None => serde_json::json!({
            "pid": std::process::id(),
            "id": null,
            "generation": null,
            "supervisor_pid": null,
        }),
    }
}
