//! Layers that ship with the framework, each a [`Layer`](crate::Layer) for any app:
//! - [`Cors`]: cross-origin requests from the origins you allow, preflights answered;
//! - [`RequestId`]: a request id in a header, kept from the client or made here,
//!   seen by the handler and sent back;
//! - [`BearerAuth`]: `Authorization: Bearer <token>` required, 401 without it.

mod bearer;
mod cors;
mod request_id;

pub use bearer::BearerAuth;
pub use cors::Cors;
pub use request_id::RequestId;
