//! One connection: TCP over `may::net::TcpStream`, the handshake, packet
//! reads and writes with their timeouts, COM_PING, COM_QUIT, and poisoning.
//!
//! Every read and write goes through may's socket, so a fiber waiting for
//! the server parks and the worker thread runs other fibers. Outside a
//! coroutine the same calls simply block the calling thread.
//!
//! Poisoning: after an I/O error, a protocol surprise or a timeout in the
//! middle of a response, the byte stream can no longer be trusted. The
//! connection is marked broken, every later command fails fast, and the
//! pool closes it instead of handing it out again.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::framing::{FrameError, Framing, Payload};
use crate::stream::Stream;
use mysql_common::constants::{CapabilityFlags, Command, MariadbCapabilities};
use mysql_common::io::ParseBuf;
use mysql_common::packets::{HandshakePacket, HandshakeResponse};
use mysql_common::proto::{MyDeserialize, MySerialize};

use crate::auth::{self, PacketIo};
use crate::error::{Error, Result};
use crate::opts::Opts;
use crate::session::{ResetReason, SessionState};
use crate::stmt_cache::StmtCache;

/// Largest packet we accept from the server (its `max_allowed_packet` caps
/// what it sends; this only guards against a corrupt length header).
pub const MAX_PACKET: usize = 64 * 1024 * 1024;
/// Longest a [`Conn::reset`] may take before the connection is given up as broken.
pub const RESET_TIMEOUT: Duration = Duration::from_secs(5);

/// What we ask the server for; intersected with what it offers.
fn client_capabilities() -> CapabilityFlags {
    CapabilityFlags::CLIENT_LONG_PASSWORD
        | CapabilityFlags::CLIENT_LONG_FLAG
        | CapabilityFlags::CLIENT_PROTOCOL_41
        | CapabilityFlags::CLIENT_TRANSACTIONS
        | CapabilityFlags::CLIENT_SECURE_CONNECTION
        | CapabilityFlags::CLIENT_MULTI_STATEMENTS
        | CapabilityFlags::CLIENT_MULTI_RESULTS
        | CapabilityFlags::CLIENT_PS_MULTI_RESULTS
        | CapabilityFlags::CLIENT_PLUGIN_AUTH
        | CapabilityFlags::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
        // Status flags and session-state changes after every command, result sets
        // included (see session.rs).
        | CapabilityFlags::CLIENT_SESSION_TRACK
        | CapabilityFlags::CLIENT_DEPRECATE_EOF
}

/// MariaDB's extensions we ask for; intersected with what the server offers.
fn mariadb_capabilities() -> MariadbCapabilities {
    // The columns of a prepared statement's result are sent at the prepare, and at an
    // execution only when they changed since (query.rs reads them from the statement
    // cache otherwise): less for the server to write and for us to parse.
    MariadbCapabilities::MARIADB_CLIENT_CACHE_METADATA
}

/// Turns on the server's report of session changes (see session.rs), at connect and
/// after every reset (a reset puts session variables back to their global values).
const TRACK_STATE_CHANGES: &str = "SET session_track_state_change = ON";

/// What sends `KILL QUERY` for a connection whose statement must stop: another
/// connection to the same server (cancel.rs's `Killer`, which opens its connections
/// with [`Conn`]; a trait here, so that the connection names nothing above it).
pub(crate) trait QueryKiller: Send + Sync {
    /// Sends `KILL QUERY connection_id` and waits for its answer.
    fn kill_query_of(self: Arc<Self>, connection_id: u32) -> Result<()>;
    /// Sends `KILL CONNECTION connection_id` and waits for its answer.
    fn kill_session_of(self: Arc<Self>, connection_id: u32) -> Result<()>;
}

/// A native connection. Not `Sync`; move it between fibers freely (`Send`).
pub struct Conn {
    stream: Stream,
    /// Packet framing and the connection's buffers (framing.rs).
    pub(crate) io: Framing,
    pub(crate) opts: Opts,
    pub(crate) caps: CapabilityFlags,
    connection_id: u32,
    server_version: String,
    /// Set once the stream cannot be trusted; see the module comment.
    broken: bool,
    /// While set, a read that would pass it fails with [`Error::QueryTimeout`].
    pub(crate) deadline: Option<Instant>,
    /// The read timeout currently set on the socket (to skip redundant syscalls).
    socket_read_timeout: Option<Duration>,
    /// The prepared statements kept (`query.rs` prepares, executes and closes them).
    pub(crate) stmts: StmtCache,
    /// MariaDB's extensions agreed at the handshake: metadata caching, which lets an
    /// execution's answer omit the columns its prepare described.
    mariadb_caps: MariadbCapabilities,
    /// What the server said about the session since the last reset (session.rs).
    pub(crate) session: SessionState,
    /// The caller's deadline for every query ([`Conn::set_deadline`]).
    pub(crate) user_deadline: Option<Instant>,
    /// Where `KILL QUERY` for this connection is sent from: the pool's side channel,
    /// or one of its own made at the first kill (cancel.rs's `Killer`, made by query.rs).
    pub(crate) killer: Option<Arc<dyn QueryKiller>>,
    /// A second descriptor of the TCP socket, made at the connect: what ends the
    /// session of a connection that a fiber's overflow leaked (`pool.rs`,
    /// "Abandoned checkouts"). Cost: one more fd per connection.
    shutdown: Option<Arc<std::net::TcpStream>>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("url", &self.opts.url_redacted())
            .field("connection_id", &self.connection_id)
            .field("broken", &self.broken)
            .finish()
    }
}

impl Conn {
    /// Connects, authenticates and selects `opts.db`, all within
    /// `opts.connect_timeout` (else [`Error::ConnectTimeout`]).
    pub fn connect(opts: &Opts) -> Result<Conn> {
        let mut conn = Conn::open_socket(opts)?;
        conn.finish_connect()?;
        Ok(conn)
    }

    /// The first half of [`Conn::connect`]: the TCP connection only. The result
    /// is not usable until [`Conn::finish_connect`] succeeds; until then it is
    /// marked broken (dropping it just closes the socket). Split so that a
    /// caller can store the connection where it belongs (a pool guard kept
    /// off a fiber stack) before the deep work of the handshake.
    pub(crate) fn open_socket(opts: &Opts) -> Result<Conn> {
        let addr = opts.socket_addr()?;
        let started = Instant::now();
        let stream = Stream::connect_timeout(&addr, opts.connect_timeout).map_err(|e| {
            if is_timeout(&e) {
                Error::ConnectTimeout
            } else {
                Error::Io(io::Error::new(
                    e.kind(),
                    format!("{} ({})", e, opts.url_redacted()),
                ))
            }
        })?;
        Conn::over(stream, opts, started)
    }

    /// A blocking connection as `user` (no password) through the Unix socket `path`,
    /// for the launcher's administrator, whom `unix_socket` authentication knows by
    /// the OS user on the other end of the socket. Start-up code: never on a fiber.
    pub(crate) fn connect_unix(
        path: &std::path::Path,
        user: &str,
        timeout: Duration,
    ) -> Result<Conn> {
        let started = Instant::now();
        let stream = Stream::connect_unix(path).map_err(|e| {
            Error::Io(io::Error::new(
                e.kind(),
                format!("{e} ({})", path.display()),
            ))
        })?;
        let mut opts = Opts::new("localhost", 0, user);
        opts.connect_timeout = timeout;
        opts.read_timeout = timeout;
        let mut conn = Conn::over(stream, &opts, started)?;
        conn.finish_connect()?;
        Ok(conn)
    }

    fn over(stream: Stream, opts: &Opts, started: Instant) -> Result<Conn> {
        stream.set_nodelay()?;
        stream.set_write_timeout(Some(opts.read_timeout))?;
        let shutdown = stream.shutdown_handle().map(Arc::new);
        Ok(Conn {
            stream,
            io: Framing::new(MAX_PACKET),
            opts: opts.clone(),
            caps: client_capabilities(),
            connection_id: 0,
            server_version: String::new(),
            // Until the handshake succeeds: no COM_QUIT on drop, no reuse.
            broken: true,
            deadline: Some(started + opts.connect_timeout),
            socket_read_timeout: None,
            stmts: StmtCache::default(),
            mariadb_caps: MariadbCapabilities::empty(),
            session: SessionState::fresh(false),
            user_deadline: None,
            killer: None,
            shutdown,
        })
    }

    /// The second half of [`Conn::connect`]: handshake, authentication and
    /// database selection, within what is left of the connect timeout.
    pub(crate) fn finish_connect(&mut self) -> Result<()> {
        self.broken = false;
        match self.handshake().and_then(|()| self.start_tracking()) {
            Ok(()) => {
                self.deadline = None;
                Ok(())
            }
            Err(e) => {
                self.broken = true;
                Err(match e {
                    Error::QueryTimeout => Error::ConnectTimeout,
                    Error::Io(e) if is_timeout(&e) => Error::ConnectTimeout,
                    e => e,
                })
            }
        }
    }

    fn handshake(&mut self) -> Result<()> {
        let packet = self.read_packet()?;
        if packet.first() == Some(&0xFF) {
            // e.g. 1040 too many connections, 1129 host blocked
            return Err(auth::server_error(&packet, self.caps));
        }
        let hello = HandshakePacket::deserialize((), &mut ParseBuf(&packet))
            .map_err(|e| self.fail(Error::protocol(format!("bad server greeting: {e}"))))?;
        self.caps = client_capabilities() & hello.capabilities();
        if !self.caps.contains(CapabilityFlags::CLIENT_PROTOCOL_41) {
            return Err(Error::protocol("server is older than MySQL 4.1"));
        }
        // A MariaDB server leaves out CLIENT_MYSQL (MySQL's CLIENT_LONG_PASSWORD, which
        // no server needs) and offers extensions instead, which a client takes by
        // leaving it out too.
        let mariadb = !hello
            .capabilities()
            .contains(CapabilityFlags::CLIENT_LONG_PASSWORD);
        if mariadb {
            self.caps.remove(CapabilityFlags::CLIENT_LONG_PASSWORD);
            self.mariadb_caps = hello.mariadb_ext_capabilities() & mariadb_capabilities();
        }
        self.connection_id = hello.connection_id();
        self.server_version = hello.server_version_str().into_owned();
        let nonce = hello.nonce();
        let plugin = hello
            .auth_plugin()
            .map(|p| p.into_owned())
            .unwrap_or(mysql_common::packets::AuthPlugin::MysqlNativePassword);
        let scramble = auth::scramble(&plugin, &self.opts.password, &nonce);
        let version = hello.server_version_parsed().unwrap_or((5, 5, 5));
        let response = HandshakeResponse::new(
            Some(scramble),
            version,
            Some(self.opts.user.as_bytes().to_vec()),
            self.opts.db.as_ref().map(|d| d.as_bytes().to_vec()),
            Some(plugin.clone()),
            self.caps,
            None,
            MAX_PACKET as u32,
        )
        .with_mariadb_ext_capabilities(self.mariadb_caps);
        self.caps = response.capabilities();
        let mut buf = Vec::new();
        response.serialize(&mut buf);
        self.write_packet(&buf)?;
        let password = self.opts.password.clone();
        let caps = self.caps;
        auth::authenticate(self, plugin, nonce, &password, caps)
    }

    /// Turns the server's session-change report on, if it has one: without it every
    /// give-back resets (session.rs, rule 1). A server that refuses the variable
    /// (older than MariaDB 10.2 or MySQL 5.7) is used without it.
    fn start_tracking(&mut self) -> Result<()> {
        let tracked = self.caps.contains(CapabilityFlags::CLIENT_SESSION_TRACK)
            && match self.query(TRACK_STATE_CHANGES) {
                Ok(_) => true,
                Err(Error::Server { .. }) => false,
                Err(e) => return Err(e),
            };
        self.session = SessionState::fresh(tracked);
        Ok(())
    }

    /// Why this connection's session must be reset before someone else uses it, or
    /// `None` when the server's reports show it unchanged since the connect or the
    /// last reset. The rule is in `session.rs`, and on [`ResetReason`].
    pub fn reset_reason(&self) -> Option<ResetReason> {
        self.session.reset_reason()
    }

    /// Records a session change no rule can see (see [`ResetReason::Marked`]).
    pub fn mark_session_dirty(&mut self) {
        self.session.mark();
    }

    /// Puts the session back to what the connect made it: COM_RESET_CONNECTION (rolls
    /// back; drops temporary tables, user variables, session variables, SQL and
    /// protocol prepared statements, named and table locks), COM_INIT_DB for the
    /// configured database, and tracking on again, in one round trip, within
    /// [`RESET_TIMEOUT`]. The statement cache is emptied with the server's statements.
    /// A failure leaves the connection broken: its session is unknown.
    pub fn reset(&mut self) -> Result<()> {
        self.check_usable()?;
        self.stmts.clear();
        let result = self.reset_pipelined();
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    fn reset_pipelined(&mut self) -> Result<()> {
        self.deadline = Some(Instant::now() + RESET_TIMEOUT);
        let mut commands: Vec<Vec<u8>> = vec![vec![Command::COM_RESET_CONNECTION as u8]];
        if let Some(db) = &self.opts.db {
            let mut init_db = vec![Command::COM_INIT_DB as u8];
            init_db.extend_from_slice(db.as_bytes());
            commands.push(init_db);
        }
        let tracked = self.session.tracked;
        if tracked {
            let mut set = vec![Command::COM_QUERY as u8];
            set.extend_from_slice(TRACK_STATE_CHANGES.as_bytes());
            commands.push(set);
        }
        let result = (|| {
            // Pipelined: all commands in one write, then their answers in order.
            for command in &commands {
                self.io.begin_command();
                self.io.queue(command);
            }
            self.flush()?;
            // Every answer is read, so that the stream stays in step, before the
            // first error is reported.
            let mut first_error = None;
            for _ in &commands {
                self.io.expect_answer();
                let packet = self.read_packet()?;
                match packet.first() {
                    Some(0x00) => {}
                    Some(0xFF) => {
                        first_error.get_or_insert(auth::server_error(&packet, self.caps));
                    }
                    _ => return Err(self.fail(Error::protocol("unexpected answer to a reset"))),
                }
            }
            first_error.map_or(Ok(()), Err)
        })();
        self.deadline = None;
        result?;
        self.session = SessionState::fresh(tracked);
        Ok(())
    }

    /// Every later query must end by `deadline` (`None`: no deadline): one still
    /// running then is stopped with `KILL QUERY` and fails with
    /// [`Error::DeadlineExceeded`] (phase `Query`); one started after it fails so
    /// without being sent. `Opts::query_timeout` still applies, whichever comes first.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.user_deadline = deadline;
    }

    /// The server's id for this connection (what `KILL QUERY` takes).
    pub fn connection_id(&self) -> u32 {
        self.connection_id
    }

    /// The second descriptor of a TCP connection's socket (see the field).
    pub(crate) fn shutdown_handle(&self) -> Option<Arc<std::net::TcpStream>> {
        self.shutdown.clone()
    }

    /// The server's version string, e.g. `5.5.5-10.11.6-MariaDB-0+deb12u1`.
    pub fn server_version(&self) -> &str {
        &self.server_version
    }

    /// The options this connection was opened with.
    pub fn opts(&self) -> &Opts {
        &self.opts
    }

    /// Whether result sets carry MariaDB's "metadata follows" byte and may omit the
    /// columns of a prepared statement (see `mariadb_capabilities`).
    pub(crate) fn caches_metadata(&self) -> bool {
        self.mariadb_caps
            .contains(MariadbCapabilities::MARIADB_CLIENT_CACHE_METADATA)
    }

    /// True once an I/O or protocol error made this connection unusable.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// A free liveness check without a round trip: a healthy idle connection
    /// has nothing to read. End-of-stream (the server went away) or unsolicited
    /// bytes (e.g. "connection killed" sent by a shutting-down server) mean
    /// it is dead. may's sockets are non-blocking, so this never waits.
    pub fn looks_alive(&self) -> bool {
        if self.broken {
            return false;
        }
        let mut byte = [0u8; 1];
        match self.stream.peek_now(&mut byte) {
            Err(e) => e.kind() == io::ErrorKind::WouldBlock,
            Ok(_) => false,
        }
    }

    /// COM_PING: one round trip.
    pub fn ping(&mut self) -> Result<()> {
        self.check_usable()?;
        let result = self
            .write_command(&[Command::COM_PING as u8])
            .and_then(|()| {
                let packet = self.read_packet()?;
                match packet.first() {
                    Some(0x00) => Ok(()),
                    Some(0xFF) => Err(auth::server_error(&packet, self.caps)),
                    _ => Err(Error::protocol("unexpected answer to COM_PING")),
                }
            });
        result.map_err(|e| self.fail(e))
    }

    pub(crate) fn check_usable(&self) -> Result<()> {
        if self.broken {
            return Err(Error::Io(io::Error::new(
                io::ErrorKind::NotConnected,
                "connection was closed after an earlier I/O or protocol error",
            )));
        }
        Ok(())
    }

    /// Marks the connection broken if `e` means the stream is out of sync.
    pub(crate) fn fail(&mut self, e: Error) -> Error {
        if e.poisons_connection() {
            self.broken = true;
        }
        e
    }

    pub(crate) fn mark_broken(&mut self) {
        self.broken = true;
    }

    /// Sends one command: sequence ids restart at 0.
    pub(crate) fn write_command(&mut self, payload: &[u8]) -> Result<()> {
        self.io.begin_command();
        self.write_packet(payload)
    }

    /// Sends what is queued in [`Conn::io`]; a failure poisons the connection.
    pub(crate) fn flush(&mut self) -> Result<()> {
        let sent = self.io.flush(&mut self.stream);
        sent.map_err(|e| self.fail(frame_error(e)))
    }

    /// Reads the next payload into [`Conn::io`]'s buffer (valid until the next
    /// read), with the timeouts of [`PacketIo::read_packet`]; `Conn::io.payload(&p)`
    /// gives its bytes.
    pub(crate) fn next_payload(&mut self) -> Result<Payload> {
        let bounded_by_deadline = self.socket_timeout_for_next_read()?;
        let read = self.io.next(&mut self.stream);
        read.map_err(|e| self.read_failed(e, bounded_by_deadline))
    }

    /// [`Conn::flush`], then [`Conn::next_payload`]: the command and the first read of
    /// its answer in one call of the stream (one switch to the carrier on a fiber,
    /// where the two make two), with the errors and timeouts each has alone. The read's
    /// timeout is set before the send: the two are merged only for a command small
    /// enough to leave at once (`Framing::sends_with_read`); any other is sent first
    /// and its read's timeout set after, from what is left of the deadline.
    pub(crate) fn flush_then_next_payload(&mut self) -> Result<Payload> {
        if !self.io.sends_with_read() {
            self.flush()?;
            return self.next_payload();
        }
        let bounded_by_deadline = match self.socket_timeout_for_next_read() {
            Ok(bounded) => bounded,
            // Sent, then timed out before a read, as the two apart would have it.
            Err(e) => {
                self.flush()?;
                return Err(e);
            }
        };
        match self.io.flush_then_next(&mut self.stream) {
            Ok(read) => read.map_err(|e| self.read_failed(e, bounded_by_deadline)),
            Err(e) => Err(self.fail(frame_error(e))),
        }
    }

    /// What a failed read of an answer is: a timeout at the deadline is
    /// [`Error::QueryTimeout`] (the caller decides); anything else poisons.
    fn read_failed(&mut self, e: FrameError, bounded_by_deadline: bool) -> Error {
        match e {
            FrameError::Io(e) if is_timeout(&e) => {
                // (The socket's timeout is whole milliseconds, rounded up: it fires
                // at or after the deadline.)
                if bounded_by_deadline {
                    Error::QueryTimeout
                } else {
                    let e = io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "no answer within read_timeout ({:?})",
                            self.opts.read_timeout
                        ),
                    );
                    self.fail(Error::Io(e))
                }
            }
            e => self.fail(frame_error(e)),
        }
    }

    /// Sets the socket's read timeout for the next read; returns whether
    /// the deadline (not `read_timeout`) is what bounds it.
    fn socket_timeout_for_next_read(&mut self) -> Result<bool> {
        let mut timeout = self.opts.read_timeout;
        let mut bounded_by_deadline = false;
        if let Some(deadline) = self.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::QueryTimeout);
            }
            if left <= timeout {
                timeout = left;
                bounded_by_deadline = true;
            }
        }
        if self.socket_read_timeout != Some(timeout) {
            self.stream.set_read_timeout(Some(timeout))?;
            self.socket_read_timeout = Some(timeout);
        }
        Ok(bounded_by_deadline)
    }
}

impl PacketIo for Conn {
    /// Reads one packet. A timeout that hits `deadline` is
    /// [`Error::QueryTimeout`] (the caller decides); any other failure poisons.
    /// An owned copy of the next payload, for the handshake and other rare answers;
    /// the result paths read in place ([`Conn::next_payload`]).
    fn read_packet(&mut self) -> Result<Vec<u8>> {
        let payload = self.next_payload()?;
        Ok(self.io.payload(&payload).to_vec())
    }

    fn write_packet(&mut self, payload: &[u8]) -> Result<()> {
        self.io.queue(payload);
        self.flush()
    }
}

impl Drop for Conn {
    /// Says COM_QUIT so the server frees the thread at once (best effort).
    fn drop(&mut self) {
        if !self.broken {
            let _ = self.write_command(&[Command::COM_QUIT as u8]);
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

fn frame_error(e: FrameError) -> Error {
    match e {
        FrameError::Io(e) => Error::Io(e),
        FrameError::Closed => Error::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the server closed the connection",
        )),
        FrameError::TooLarge => Error::protocol("packet larger than MAX_PACKET"),
        FrameError::OutOfSync => Error::protocol("packets out of sync"),
    }
}
