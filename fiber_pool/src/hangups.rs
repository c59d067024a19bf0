//! Which of many sockets their peers have closed or reset, told by the kernel instead
//! of asked of each one: an epoll set that watches only for hang-ups.
//!
//! A server that watches the clients of its requests in flight could `poll(2)` every
//! one of them on every look, a cost that grows with the requests in flight whether
//! or not any client left. A [`HangupSet`] holds the sockets once (`epoll_ctl`, one
//! system call each to add and to remove), and one `epoll_wait` with a zero timeout
//! then names the few that have news: a FIN (`EPOLLRDHUP`), a reset or an error
//! (`EPOLLHUP`, `EPOLLERR`). Data is not news: it is not asked for, so a client that
//! pipelines its next request is not reported.
//!
//! The set is level-triggered: a socket stays reported on every call for as long as
//! its news holds (a half-closed client still waiting for its answer is named again
//! on the next call), so the caller loses nothing by looking at only some of what is
//! ready, and decides for itself what the news means (`fiber_web`'s `departure.rs`).
//!
//! Descriptors are named by number, for a watcher that borrows none of the sockets it
//! watches. The kernel keys a registration on the number and the open socket together,
//! and drops it by itself only when every descriptor of that socket has closed (a
//! duplicate, or a copy inherited by a child in a fork's window, keeps it alive, still
//! reported, and no longer removable by number: epoll(7)). So the caller removes a
//! socket before it closes it, always: then no registration outlives its socket, and
//! a `remove` never finds the number's next owner.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

/// What a registration asks the kernel to report.
const HANGUPS: u32 = (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32;

/// The most sockets one [`HangupSet::ready`] names: the set's buffer for the kernel's
/// answer, 12 KiB, made once with the set.
pub const READY_MOST: usize = 1024;

/// An epoll set watching sockets for their peers' hang-ups (see the module's text).
pub struct HangupSet {
    epoll: OwnedFd,
    /// Where one `epoll_wait` writes what is ready: all of it in one call, since the
    /// calls of a level-triggered set name its ready sockets in turn, coming back to
    /// the first ones once the rest were named, so a second call is not the rest.
    events: Mutex<Box<[libc::epoll_event]>>,
}

impl fmt::Debug for HangupSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HangupSet")
            .field("epoll", &self.epoll)
            .finish_non_exhaustive()
    }
}

impl HangupSet {
    /// An empty set (one descriptor, closed on exec and on drop).
    pub fn new() -> io::Result<HangupSet> {
        // SAFETY: `epoll_create1` takes no pointer; it returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened by `epoll_create1` and nothing else holds it: the
        // `OwnedFd` is its only owner, and closes it once.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        let events = vec![libc::epoll_event { events: 0, u64: 0 }; READY_MOST];
        Ok(HangupSet {
            epoll,
            events: Mutex::new(events.into_boxed_slice()),
        })
    }

    /// Watch socket `fd`, reported as `token`. Errors: the kernel's (`EEXIST` when it
    /// is watched already, `EBADF` when the number is not open, `EPERM` for a file
    /// epoll cannot watch).
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: HANGUPS,
            u64: token,
        };
        self.control(libc::EPOLL_CTL_ADD, fd, &mut event)
    }

    /// Stop watching socket `fd`. Errors: the kernel's (`ENOENT` when it is not
    /// watched).
    pub fn remove(&self, fd: RawFd) -> io::Result<()> {
        // The event is ignored by `EPOLL_CTL_DEL`; kernels before 2.6.9 wanted one.
        let mut unused = libc::epoll_event { events: 0, u64: 0 };
        self.control(libc::EPOLL_CTL_DEL, fd, &mut unused)
    }

    fn control(&self, op: libc::c_int, fd: RawFd, event: &mut libc::epoll_event) -> io::Result<()> {
        // SAFETY: `event` is a live, writable `epoll_event` for the call's length; the
        // kernel reads it (and writes nothing). A number that is not an open
        // descriptor is refused (`EBADF`), not dereferenced.
        let done = unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, event) };
        if done < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Append to `tokens` the tokens of at most `most` (and at most [`READY_MOST`])
    /// watched sockets that have news now, without waiting; how many were appended (0
    /// also when a signal came first). The others ready are named by the next calls.
    /// Allocates nothing but what `tokens` grows by.
    pub fn ready(&self, tokens: &mut Vec<u64>, most: usize) -> io::Result<usize> {
        if most == 0 {
            return Ok(0);
        }
        // Held for one system call that does not wait: never poisoned half done.
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        // READY_MOST entries.
        let most = most.min(events.len());
        // SAFETY: `events` has room for `most` entries, which `epoll_wait` writes at
        // most; a zero timeout returns at once.
        let got = unsafe {
            libc::epoll_wait(
                self.epoll.as_raw_fd(),
                events.as_mut_ptr(),
                most as libc::c_int, // at most READY_MOST
                0,
            )
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let got = got as usize;
        tokens.extend(events[..got].iter().map(|e| e.u64));
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    /// Connected pairs on loopback, all accepted by one listener.
    struct Loopback(TcpListener);

    impl Loopback {
        fn new() -> Loopback {
            Loopback(TcpListener::bind("127.0.0.1:0").unwrap())
        }

        /// A new connection: (the server's side, the client's).
        fn pair(&self) -> (TcpStream, TcpStream) {
            let client = TcpStream::connect(self.0.local_addr().unwrap()).unwrap();
            (self.0.accept().unwrap().0, client)
        }
    }

    /// What `set` names within 5 s, or nothing once that long has passed.
    fn ready_within(set: &HangupSet, most: usize) -> Vec<u64> {
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            let mut tokens = Vec::new();
            set.ready(&mut tokens, most).unwrap();
            if !tokens.is_empty() || Instant::now() >= end {
                return tokens;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Give the kernel a moment to deliver what was sent on loopback, then take what
    /// is ready now (for the assertions that nothing is).
    fn ready_after_a_moment(set: &HangupSet) -> Vec<u64> {
        std::thread::sleep(Duration::from_millis(50));
        let mut tokens = Vec::new();
        set.ready(&mut tokens, 16).unwrap();
        tokens
    }

    #[test]
    fn data_is_not_news_a_fin_or_a_reset_is_and_stays_news() {
        let set = HangupSet::new().unwrap();
        let loopback = Loopback::new();
        let (quiet_server, _quiet_client) = loopback.pair();
        let (talking_server, mut talking_client) = loopback.pair();
        let (fin_server, fin_client) = loopback.pair();
        let (reset_server, reset_client) = loopback.pair();
        set.add(quiet_server.as_raw_fd(), 1).unwrap();
        set.add(talking_server.as_raw_fd(), 2).unwrap();
        set.add(fin_server.as_raw_fd(), 3).unwrap();
        set.add(reset_server.as_raw_fd(), 4).unwrap();

        talking_client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(
            ready_after_a_moment(&set),
            Vec::<u64>::new(),
            "data was reported"
        );

        fin_client.shutdown(Shutdown::Write).unwrap();
        assert_eq!(ready_within(&set, 16), vec![3]);
        // Level-triggered: still news on the next call.
        assert_eq!(ready_within(&set, 16), vec![3]);

        socket2::SockRef::from(&reset_client)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(reset_client);
        let end = Instant::now() + Duration::from_secs(5);
        let mut seen = ready_within(&set, 16);
        while seen.len() < 2 && Instant::now() < end {
            seen = ready_within(&set, 16);
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![3, 4]);

        set.remove(fin_server.as_raw_fd()).unwrap();
        set.remove(reset_server.as_raw_fd()).unwrap();
        assert_eq!(
            ready_after_a_moment(&set),
            Vec::<u64>::new(),
            "a removed socket was reported"
        );
    }

    #[test]
    fn more_ready_than_asked_for_come_in_later_calls() {
        let set = HangupSet::new().unwrap();
        let loopback = Loopback::new();
        let mut servers = Vec::new();
        for token in 0..5 {
            let (server, client) = loopback.pair();
            set.add(server.as_raw_fd(), token).unwrap();
            client.shutdown(Shutdown::Write).unwrap();
            servers.push((server, client));
        }
        // All five have a FIN: wait until all are ready, two at a time.
        let end = Instant::now() + Duration::from_secs(5);
        let mut seen = std::collections::BTreeSet::new();
        while seen.len() < 5 && Instant::now() < end {
            let mut tokens = Vec::new();
            let got = set.ready(&mut tokens, 2).unwrap();
            assert!(
                got <= 2 && got == tokens.len(),
                "{got} tokens for at most 2: {tokens:?}"
            );
            seen.extend(tokens);
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn every_socket_ready_is_named_once_by_one_call() {
        let set = HangupSet::new().unwrap();
        let loopback = Loopback::new();
        let many = 131;
        let mut pairs = Vec::new();
        for token in 0..many as u64 {
            let (server, client) = loopback.pair();
            set.add(server.as_raw_fd(), token).unwrap();
            client.shutdown(Shutdown::Write).unwrap();
            pairs.push((server, client));
        }
        // Level-triggered: each call names every socket with a FIN so far; once the
        // kernel has delivered them all, one call names them all.
        let end = Instant::now() + Duration::from_secs(5);
        let mut tokens = Vec::new();
        while tokens.len() < many && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(2));
            tokens.clear();
            let got = set.ready(&mut tokens, READY_MOST).unwrap();
            assert_eq!(got, tokens.len());
        }
        tokens.sort_unstable();
        assert_eq!(tokens, (0..many as u64).collect::<Vec<_>>());
    }

    #[test]
    fn adding_twice_or_removing_what_is_not_watched_is_an_error() {
        let set = HangupSet::new().unwrap();
        let (server, _client) = Loopback::new().pair();
        set.add(server.as_raw_fd(), 7).unwrap();
        let twice = set.add(server.as_raw_fd(), 7).unwrap_err();
        assert_eq!(twice.raw_os_error(), Some(libc::EEXIST), "{twice}");
        set.remove(server.as_raw_fd()).unwrap();
        let gone = set.remove(server.as_raw_fd()).unwrap_err();
        assert_eq!(gone.raw_os_error(), Some(libc::ENOENT), "{gone}");
        let mut tokens = Vec::new();
        assert_eq!(set.ready(&mut tokens, 0).unwrap(), 0);
    }
}
