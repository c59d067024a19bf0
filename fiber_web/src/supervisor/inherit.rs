//! Passing the listening socket down: systemd's socket-activation convention, which
//! both our supervisor and systemd (`systemd-socket-activate -l ADDR fiberstack serve`,
//! or a `.socket` unit) use.
//!
//! systemd's form: the socket is fd 3, `LISTEN_FDS=1`, and `LISTEN_PID` is the pid of
//! the process meant to take it (so that a child that inherits the environment does
//! not take it too). systemd sets `LISTEN_PID` between fork and exec; std's `Command`
//! can only do that in `pre_exec`, which needs unsafe code. Our supervisor instead
//! leaves `LISTEN_PID` out and marks the worker with `FIBERSTACK_SUPERVISOR_PID`: the
//! worker takes the socket only when that pid is its parent's, which a grandchild's
//! is not. The socket's fd number travels in `LISTEN_FDS_FIRST_FD` (an extension that
//! the `listenfd` crate reads), because std cannot place it at fd 3 either.
//!
//! [`init`] reads and removes these variables once, first thing in `main`;
//! [`take_listener`] then hands the socket to whichever start-up wants it.

use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Mutex;

use super::worker;

/// The supervisor's pid, in each worker's environment.
pub(crate) const SUPERVISOR_PID_ENV: &str = "FIBERSTACK_SUPERVISOR_PID";
/// `ID.GENERATION` of a worker, in its environment.
pub(crate) const WORKER_ENV: &str = "FIBERSTACK_WORKER";

/// The inherited socket, once [`init`] has looked.
static INHERITED: Mutex<Option<io::Result<TcpListener>>> = Mutex::new(None);

/// Take the inherited listening socket out of the environment (once).
pub(crate) fn init() {
    let mut slot = INHERITED.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_none() {
        if let Some(found) = from_env().transpose() {
            *slot = Some(found);
        }
    }
}

/// The listening socket this process inherited, if any (the first call takes it):
/// from our supervisor, or from systemd's socket activation. An error says why an
/// inherited socket cannot be used.
pub fn take_listener() -> io::Result<Option<TcpListener>> {
    init();
    INHERITED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .transpose()
}

fn from_env() -> io::Result<Option<TcpListener>> {
    let Ok(count) = std::env::var("LISTEN_FDS") else {
        return Ok(None);
    };
    let for_us = match std::env::var("LISTEN_PID") {
        Ok(pid) => pid.trim() == std::process::id().to_string(),
        Err(_) => worker::worker().is_some(),
    };
    // listenfd reads the variables and removes them, so that no child takes the socket.
    let mut fds = listenfd::ListenFd::from_env();
    if !for_us {
        return Ok(None);
    }
    if count.trim() != "1" {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("LISTEN_FDS={count}: the server serves one listening socket, pass exactly one"),
        ));
    }
    fds.take_tcp_listener(0)
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("the inherited socket (LISTEN_FDS) is not a TCP listener: {e}"),
            )
        })?
        .map(Some)
        .ok_or_else(|| io::Error::other("LISTEN_FDS=1 but no socket was inherited"))
}

/// What a worker started by our supervisor gets: a copy of `listener` without
/// close-on-exec (drop it once the child is spawned), and the variables that name it.
pub(crate) fn for_child(
    listener: &TcpListener,
) -> io::Result<(OwnedFd, [(&'static str, String); 2])> {
    // dup(2) leaves the copy inheritable; the original stays close-on-exec, so only
    // the worker being spawned gets the socket (never the private MariaDB).
    let copy = nix::unistd::dup(listener).map_err(io::Error::from)?;
    let fd = copy.as_raw_fd();
    Ok((
        copy,
        [
            ("LISTEN_FDS", "1".to_string()),
            ("LISTEN_FDS_FIRST_FD", fd.to_string()),
        ],
    ))
}
