//! Code around every handler: the [`Layer`] trait and the [`Next`] it calls (see
//! [`Layer`] for how layers run), and the layers that ship with the framework, each a
//! [`Layer`] for any app:
//! - [`Cors`]: cross-origin requests from the origins you allow, preflights answered;
//! - [`RequestId`]: a request id in a header, kept from the client or made here,
//!   seen by the handler and sent back;
//! - [`BearerAuth`]: `Authorization: Bearer <token>` required, 401 without it.

mod bearer;
mod cors;
mod request_id;

pub use crate::layer::{Layer, Next};
pub use bearer::BearerAuth;
pub use cors::Cors;
pub use request_id::RequestId;
