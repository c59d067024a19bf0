//! The server connections a pool needs beyond its own size, named once for all that
//! count them: the pool's check of the server's `max_connections` and the error that
//! explains a refusal, the side channel that sends `KILL QUERY`, and the private
//! server's `--max-connections`.

/// Connections kept free on the server beyond the pool (for `KILL QUERY`).
pub const KILL_HEADROOM: usize = 1;
/// Room above the pool for the KILL QUERY connection, admin sessions and tests.
pub const CONNECTION_HEADROOM: usize = 20;
