//! Not API: the framework's internals that the comparison rig (`compare/`: the async
//! twin, raw may_minihttp, the bench) and the demo's tools and tests reuse, so that the
//! twin parses, refuses, counts, drains and logs exactly as the fiber server does.
//! Hidden from the docs, exempt from semver, and free to change with the rig: an app
//! uses the crate's root and its public modules instead.
//!
//! Each name is here because one of those callers needs it; a name no caller uses any
//! more goes (`fiber_web/tests/surface.rs` counts them with the public items).

// What a request's bytes mean: the parser, the chunked decoder, the target and Host
// rules, the query string, dates and HTML text.
pub use crate::http::chunked::Decoder as ChunkedDecoder;
pub use crate::http::date::{civil_from_days, imf_fixdate};

pub use crate::http::query::query_param;
pub use crate::http::request::{parse_head, Framing};
pub use crate::http::target::{
    check_host, options_star, parse as parse_target, Target, DEFAULT_ALLOW,
};
pub use crate::http::HttpError;

// How the server answers what it refuses, notices a client that left, accepts, and
// reports readiness.
pub use crate::builtin::readiness_response;
pub use crate::http::departure::{look as look_for_departures, Probe, Seen};
pub use crate::http::idle::TICK as IDLE_TICK;
pub use crate::http::listener::{bind as bind_listener, bind_error, ACCEPT_RETRY_PAUSE};
pub use crate::http::refusal::{over_limit, queue_full, wait_timed_out, OVER_LIMIT_WRITE_TIMEOUT};

// Shutdown, signals and the supervisor, for a server that runs without `serve`.
pub use crate::shutdown::{Connection, Stop, StopRequests};
pub use crate::supervisor::inherit::take_listener;
pub use crate::supervisor::init as init_supervisor;
pub use crate::supervisor::process::{Supervisor, SupervisorConfig};
pub use crate::supervisor::worker::{ready, stop_requests};

// The logger and its lines under the app's name.
pub use crate::logging::{
    access, app_name, banner, init as init_logging, server_error, set_app_name,
};

// Figures the rig's reports and the demo's tests compare against (the originals stay
// the crate's: `config.rs`).
/// [`config::COROUTINE_CACHE`](crate::config): finished coroutines may keeps.
pub const COROUTINE_CACHE: usize = crate::config::COROUTINE_CACHE;

/// The cores this process may run on: the default number of scheduler threads.
pub fn cores() -> usize {
    crate::config::cores()
}
