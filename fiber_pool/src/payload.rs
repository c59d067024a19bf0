//! What the crate does with a caught panic's payload: words its message
//! ([`panic_message`], for [`RunError::Panicked`](crate::RunError::Panicked)) and drops
//! it where nothing may unwind (`drop_payload`): in a fiber's body, a cancel hook's
//! runner, a blocking thread.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};

/// The message of a caught panic, for [`RunError::Panicked`](crate::RunError::Panicked):
/// its text when it has one (`panic!("...")` with or without arguments), else a fixed
/// phrase. The async twin words its caught panics with this too.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_owned()
    }
}

/// Drops a caught panic's payload where nothing may unwind: in a fiber's body a
/// panic escaping it would unwind `run` past the code that gives the slot its stack
/// back and marks it idle, and every later job on that slot would fail (a cancel
/// hook's runner and a blocking thread likewise go on after the panic they caught).
/// The payload's own drop may panic (`panic_any` of a value whose `Drop` panics):
/// that panic is caught, and its payload forgotten (leaked) rather than dropped in
/// turn, since it could panic again.
pub(crate) fn drop_payload(payload: Box<dyn Any + Send>) {
    if let Err(again) = panic::catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}
