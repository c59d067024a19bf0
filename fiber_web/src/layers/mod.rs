//! Code around every handler: the [`Layer`] trait and the [`Next`] it calls (see
//! [`Layer`] for how layers run), and the layers that ship with the framework, each a
//! [`Layer`] for any app:
//! - [`Cors`]: cross-origin requests from the origins you allow, preflights answered;
//! - [`BearerAuth`]: `Authorization: Bearer <token>` required, 401 without it.
//!
//! Request ids are the app's, not a layer's ([`App::request_ids`](crate::App::request_ids)):
//! the framework's own answers before any layer runs carry them too.

mod bearer;
mod cors;

pub use crate::layer::{Layer, Next};
pub use bearer::BearerAuth;
pub use cors::Cors;
