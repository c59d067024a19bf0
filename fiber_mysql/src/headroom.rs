//! The server connections a pool needs beyond its own size, named once for all that
//! count them: the pool's check of the server's `max_connections` and the error that
//! explains a refusal, the side channel that sends `KILL QUERY`, and the private
//! server's `--max-connections`.

/// Connections kept free on the server beyond the pool: the side channel's, which
/// send `KILL QUERY` (`killer.rs` says why four). With the kills on the server's
/// `extra_port` they go unused; a server without one needs them.
pub const KILL_HEADROOM: usize = 4;
/// Room above the pool for the KILL QUERY connections, admin sessions and tests.
pub const CONNECTION_HEADROOM: usize = 20;
