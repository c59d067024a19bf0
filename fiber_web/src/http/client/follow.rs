//! A call that follows its job's context ([`follow`]): on a cancel, a hook shuts the
//! call's connection down, so that the read or write it waits in returns at once and
//! the call ends; and the gate that keeps a hook from reaching the connection once the
//! call has given it back.
//!
//! The hook runs on the canceller's side (`fiber_pool::Context::on_cancel`), and a
//! hook already running is not waited for when its registration is dropped: the
//! canceller may have taken the context's hooks to run, and be busy with another one,
//! when the call ends and the connection goes back to the pool for the next call,
//! another job's. So the hook and the call share a [`Gate`], one per call: the hook
//! shuts the socket down only under the gate's lock and only while the gate is open,
//! and the call closes it under the same lock before the connection is reused. A hook
//! that shut the socket down first is seen there, and the connection is closed
//! instead of kept (fiber_mysql's cancel gate does the same for `KILL QUERY`).

use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};

use fiber_pool::{CancelReason, Context, Registration};

use super::conn::Conn;

/// A call's hold on its connection for its cancel hook; lives in the connection
/// (`Conn::following`), inside its `Lent`.
pub(crate) struct Following {
    gate: Arc<Gate>,
    /// Unregisters the hook when dropped (a hook already running is not waited for:
    /// the gate stops it).
    _hook: Registration,
}

/// What the call and its hook share; see the module documentation.
struct Gate(Mutex<Socket>);

/// The hook's copy of the connection's socket, while the call lasts.
enum Socket {
    /// The call runs: a cancel shuts this copy down.
    Open(TcpStream),
    /// A cancel shut the socket down.
    Shut,
    /// The call gave the connection back: a cancel does nothing.
    Closed,
}

impl Gate {
    /// On a cancel: shuts the socket down, unless the call is over.
    fn shut(&self) {
        // On the canceller's side, never a fiber; the call holds the lock only to
        // close the gate, never across a wait.
        let mut socket = fiber_pool::lock_anywhere(&self.0);
        if let Socket::Open(copy) = &*socket {
            let _ = copy.shutdown(Shutdown::Both);
            *socket = Socket::Shut;
        }
    }
}

impl Following {
    /// The call is done with the connection: from here on no hook touches it. Whether
    /// a hook shut it down before (then it must not be reused). Takes the gate's lock on
    /// the fiber, after a stack check (`fiber_pool::lock_anywhere`).
    pub(crate) fn close(self) -> bool {
        let mut socket = fiber_pool::lock_anywhere(&self.gate.0);
        let shut = matches!(*socket, Socket::Shut);
        // The copy of the socket is closed here, under the lock.
        *socket = Socket::Closed;
        shut
    }
}

/// Makes `conn`'s exchange follow its job's context: on a cancel (not a deadline,
/// which the call's own deadline handles and names), the hook shuts the socket down
/// through a copy of it, so the read or write the call waits in returns at once and
/// the call ends; the connection is then closed, never reused. The hook lives in the
/// connection (`Conn::following`), inside its `Lent`, and goes with it: unregistered
/// when the call gives the connection back ([`Following::close`]) or closes it, or by
/// an overflow's give-back.
pub(crate) fn follow(ctx: &Context, conn: &mut Conn) {
    // Without a copy the call still ends at its own timeouts.
    let Ok(copy) = conn.shutdown_handle() else {
        return;
    };
    let gate = Arc::new(Gate(Mutex::new(Socket::Open(copy))));
    let hook = Arc::clone(&gate);
    let registration = ctx.on_cancel(move |reason| {
        if reason != CancelReason::DeadlinePassed {
            hook.shut();
        }
    });
    conn.following = Some(Following {
        gate,
        _hook: registration,
    });
}
