//! Fan-out in a handler: [`fiber_pool::scope()`] with each child's error a
//! [`Response`], so neither a child nor its join needs a type written out.
//!
//! ```no_run
//! # use fiber_web::{fan_out, Response};
//! # fn count(_: &str) -> Result<u64, fiber_pool::RunError> { Ok(1) }
//! # fn handler() -> Result<u64, Response> {
//! let (users, orders) = fan_out::scope(|s| {
//!     let users = s.spawn(|| Ok(count("users")? + 1));
//!     let orders = s.spawn(|| Ok(count("orders")?));
//!     Ok::<_, Response>((users.join()?, orders.join()?))
//! })?;
//! # Ok(users + orders) }
//! ```
//!
//! A child returns `Result<T, Response>`: inside it, `?` turns a query's, an HTTP
//! call's or a nested child's error into the response it is (`From` for each), and
//! `Ok(value)` alone fixes the rest. [`Child::join`] gives `Result<T, Response>` too:
//! a child that did not finish (its panic or overflow, no fiber, the deadline) is the
//! 500, 503 or 504 [`From<fiber_pool::RunError>`](Response#impl-From<RunError>-for-Response)
//! makes, so one `?` in the handler passes on either failure. Everything else is
//! fiber_pool's scope: children on guarded fibers of their own, none outliving the
//! scope, all under the request's deadline and cancellation. For children that return
//! something other than a `Result`, use [`fiber_pool::scope()`] itself.

use std::time::Instant;

use crate::Response;

/// Runs `f` with a [`Scope`] for spawning children and returns `f`'s value once every
/// child has ended, as [`fiber_pool::scope()`] (under the request's context, from a
/// handler or a job).
///
/// # Panics
///
/// When not called from a job (a handler always is one).
pub fn scope<'env, F, R>(f: F) -> R
where
    F: for<'scope> FnOnce(Scope<'scope, 'env>) -> R,
{
    fiber_pool::scope(|inner| f(Scope { inner }))
}

/// [`scope`] whose children's context is cancelled at `deadline`, or at the
/// request's if that is earlier: a child still running then ends with a 504.
///
/// # Panics
///
/// As [`scope`].
pub fn scope_with_deadline<'env, F, R>(deadline: Instant, f: F) -> R
where
    F: for<'scope> FnOnce(Scope<'scope, 'env>) -> R,
{
    fiber_pool::scope_with_deadline(deadline, |inner| f(Scope { inner }))
}

/// A scope's handle for spawning children (copied freely: every copy spawns into the
/// same scope).
#[derive(Clone, Copy)]
pub struct Scope<'scope, 'env: 'scope> {
    inner: &'scope fiber_pool::Scope<'scope, 'env>,
}

impl<'scope> Scope<'scope, '_> {
    /// Runs `f` as a child on a guarded fiber of its own; its result comes from
    /// [`Child::join`].
    pub fn spawn<F, T>(&self, f: F) -> Child<'scope, T>
    where
        F: FnOnce() -> Result<T, Response> + Send + 'scope,
        T: Send + 'scope,
    {
        Child(self.inner.spawn(f))
    }

    /// Cancels the scope's children, not the request (`CancelReason::Requested`): a
    /// running child's waits end early (a query is killed), and one not yet started
    /// never starts and joins as a 503. For when one child's result makes the others'
    /// moot.
    pub fn cancel(&self) {
        self.inner.cancel(fiber_pool::CancelReason::Requested);
    }
}

/// A child of a [`scope`]; dropping it does not stop the child.
pub struct Child<'scope, T: Send>(fiber_pool::Child<'scope, Result<T, Response>>);

impl<T: Send> Child<'_, T> {
    /// Waits for the child to end and returns its value, its own error, or the
    /// response for why it did not finish.
    pub fn join(self) -> Result<T, Response> {
        self.0.join()?
    }
}
