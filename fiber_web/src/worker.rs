//! This process as one of the supervisor's worker processes: which one it is
//! ([`current`], [`describe`] for a `/stats`-like route), and how a handler or the app
//! asks for a fresh process when this one is broken ([`ask_for_replacement`]: a lock
//! an overflow left held, state it knows is bad). Without a supervisor (`--supervisor
//! off`) there is no worker: `current` is `None`, and a request for replacement is
//! only logged.

pub use crate::supervisor::describe;
pub use crate::supervisor::worker::{ask_for_replacement, worker as current, Worker};
