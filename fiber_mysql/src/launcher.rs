//! A private, throwaway MariaDB for the demo and the tests.
//!
//! [`MariaDb::start`] initialises a data directory under the system temp dir,
//! starts `mariadbd` on a free loopback port, waits until it answers, creates
//! the database and a password-protected application user, and runs the
//! caller's `init_sql` (schema and seed).
//!
//! ## Private to this user
//! Who may log in is in `accounts.rs`: no account reachable over TCP is
//! without a password, and the administrator comes in only through the unix socket.
//! The directories (template, data, socket, log) are in `private_dir.rs`:
//! 0700, created by us and checked, never taken over from another user.
//!
//! ## Cleanup, even after SIGKILL
//! `mariadbd` runs under a tiny `sh` supervisor (in its own process group, so
//! a terminal's Ctrl-C reaches only us) whose stdin is a pipe from this
//! process. The supervisor reads commands (`kill`, `start`) from the pipe;
//! when the pipe closes - because [`MariaDb`] was dropped or because this
//! process died, however it died - it kills `mariadbd` and removes the data
//! directory. No signal handler and no `pre_exec` in our process are needed.
//!
//! ## Speed
//! `mariadb-install-db` takes about 0.7 s. It runs once per user and server
//! binary into a template directory (`$XDG_CACHE_HOME/fiberstack/mariadb-*` or
//! `~/.cache/fiberstack/mariadb-*`, kept); each server then starts from a copy of
//! it (tens of milliseconds). The template is installed in a fresh 0700 staging
//! directory and renamed into place, so a half-written one is never seen.
//!
//! These functions block the calling thread (start-up code): call them from
//! `main` or a test, not from inside a fiber that serves traffic.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::accounts;
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::opts::Opts;
use crate::private_dir::{self, random_hex};

/// Small InnoDB files: a data directory of about 25 MB instead of 126 MB.
const INNODB_FILES: [&str; 2] = [
    "--innodb-log-file-size=4M",
    "--innodb-data-file-path=ibdata1:12M:autoextend",
];
pub use crate::headroom::CONNECTION_HEADROOM;
/// The pool size [`LaunchConfig::default`] makes room for.
pub const DEFAULT_POOL_ROOM: usize = 250;
/// `--back-log` (the listen queue) above `--max-connections`: the auto-sized back_log
/// (150) overflowed when a whole pool connected at once (see docs/FACTS.md).
const BACK_LOG_ABOVE_MAX_CONNECTIONS: usize = 50;
/// Bumped when the way templates are made changes, so old ones are not reused.
const TEMPLATE_FORMAT: u32 = 2;
/// Starts tried before a port collision is reported: between picking two free ports
/// and `mariadbd` binding them (about 0.1 s) any process may take one, and a test
/// run binds and connects hundreds of ports a second.
const PORT_ATTEMPTS: u32 = 5;
/// How often we knock while waiting for the server to answer.
const READY_POLL: Duration = Duration::from_millis(20);

/// What to start.
#[derive(Debug, Clone)]
pub struct LaunchConfig {
    /// `--max-connections`: the pool size plus headroom (see [`CONNECTION_HEADROOM`]).
    pub max_connections: usize,
    /// Statements run as root in `db_name` once the server answers (schema, seed).
    pub init_sql: Vec<String>,
    /// The database to create and connect to.
    pub db_name: String,
    /// The application user: gets SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX,
    /// ALTER and CREATE TEMPORARY TABLES on `db_name` only, nothing server-wide.
    pub user: String,
    /// Longest wait for the server to answer after start.
    pub startup_timeout: Duration,
    /// `mariadbd` to use; `None`: look in PATH, then /usr/sbin.
    pub mariadbd: Option<PathBuf>,
    /// How the server runs its connections' statements (`--thread-handling`).
    pub thread_handling: ThreadHandling,
}

/// MariaDB's `--thread-handling`: a user's own server may run either, so the client is
/// measured against both (`compare cancel-report --thread-handling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ThreadHandling {
    /// `pool-of-threads`: a few thread groups (one per core) serve every connection;
    /// a busy group gets another thread only after `thread_pool_stall_limit` (500 ms
    /// by default) and thread-creation throttling. The private server's default: it
    /// ran 1000 concurrent `select sleep(1)` in 2.55 s here (docs/FACTS.md).
    #[default]
    PoolOfThreads,
    /// `one-thread-per-connection`: MariaDB's own default.
    OneThreadPerConnection,
}

impl ThreadHandling {
    /// Both, in the order reports list them.
    pub const ALL: [ThreadHandling; 2] = [
        ThreadHandling::PoolOfThreads,
        ThreadHandling::OneThreadPerConnection,
    ];

    /// The value of `--thread-handling`.
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadHandling::PoolOfThreads => "pool-of-threads",
            ThreadHandling::OneThreadPerConnection => "one-thread-per-connection",
        }
    }
}

impl std::fmt::Display for ThreadHandling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ThreadHandling {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        ThreadHandling::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "`{s}` is not a thread handling: pool-of-threads or one-thread-per-connection"
                )
            })
    }
}

impl Default for LaunchConfig {
    fn default() -> Self {
        LaunchConfig {
            max_connections: DEFAULT_POOL_ROOM + CONNECTION_HEADROOM,
            init_sql: Vec::new(),
            db_name: "fiberstack".into(),
            user: "app".into(),
            startup_timeout: Duration::from_secs(20),
            mariadbd: None,
            thread_handling: ThreadHandling::default(),
        }
    }
}

/// A running private server; dropping it stops the server and removes its files.
pub struct MariaDb {
    supervisor: Child,
    commands: Option<ChildStdin>,
    events: BufReader<ChildStdout>,
    dir: PathBuf,
    port: u16,
    /// `extra_port`: one thread per connection, for the pools' KILLs (killer.rs).
    extra_port: u16,
    pid: u32,
    password: String,
    admin_password: String,
    /// The OS user name, the administrator through the socket.
    os_user: String,
    cfg: LaunchConfig,
}

impl std::fmt::Debug for MariaDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MariaDb")
            .field("url", &self.opts().url_redacted())
            .field("pid", &self.pid)
            .field("dir", &self.dir)
            .finish()
    }
}

/// The server's log, inside the 0700 data directory.
const LOG_FILE: &str = "mariadbd.log";

/// The supervisor. `$1` is the data directory, the rest is mariadbd's argv.
/// `umask 077` and mariadbd's own `UMASK`/`UMASK_DIR` (its defaults are 0660/0700):
/// the log and the server's files are the owner's alone.
const SUPERVISOR: &str = r#"
umask 077
export UMASK=0600 UMASK_DIR=0700
dir=$1; shift
start() { "$@" </dev/null >>"$dir/mariadbd.log" 2>&1 & pid=$!; echo "started $pid"; }
stop() { kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
cleanup() { stop; rm -rf "$dir"; exit 0; }
trap cleanup TERM HUP
start "$@"
while read -r cmd; do
  case "$cmd" in
    kill) stop; echo stopped ;;
    start) start "$@" ;;
  esac
done
cleanup
"#;

impl MariaDb {
    /// Starts a private server as described in the module comment.
    pub fn start(cfg: LaunchConfig) -> Result<MariaDb> {
        Self::start_on(cfg, free_ports)
    }

    /// [`start`](Self::start) on the ports `pick` gives, asked again after a start that
    /// lost one of them.
    fn start_on(cfg: LaunchConfig, mut pick: impl FnMut() -> Result<[u16; 2]>) -> Result<MariaDb> {
        let mariadbd = match &cfg.mariadbd {
            Some(p) if !p.is_file() => {
                return Err(Error::Launch(format!(
                    "`{}` does not exist: install MariaDB with `apt-get install mariadb-server` \
                     (or scripts/install-deps), or point the server at an existing database \
                     with --database-url mysql://user:password@host:port/db",
                    p.display()
                )))
            }
            Some(p) => p.clone(),
            None => find_program("mariadbd", &["/usr/sbin", "/usr/bin"]).ok_or_else(|| {
                Error::Launch(
                    "`mariadbd` not found in PATH or /usr/sbin: install it with \
                     `apt-get install mariadb-server` (or scripts/install-deps), \
                     or point the server at an existing database with --database-url \
                     mysql://user:password@host:port/db"
                        .into(),
                )
            })?,
        };
        let os_user = accounts::os_user()?;
        let mut attempt = 1;
        loop {
            let mut db = Self::spawn(&mariadbd, &os_user, cfg.clone(), pick()?)?;
            match db.wait_ready() {
                Ok(admin) => {
                    db.initialize(admin)?;
                    return Ok(db);
                }
                // Dropping `db` stops its supervisor and removes its files.
                Err(_) if attempt < PORT_ATTEMPTS && db.lost_a_port() => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// A fresh data directory and `mariadbd` on `port` and `extra_port`, started under
    /// its supervisor: not yet answering.
    fn spawn(
        mariadbd: &Path,
        os_user: &str,
        cfg: LaunchConfig,
        [port, extra_port]: [u16; 2],
    ) -> Result<MariaDb> {
        let dir = private_dir::create_unique(&std::env::temp_dir(), "fiberstack-mariadb")?;
        if let Err(e) = copy_template(mariadbd, os_user, &dir) {
            let _ = fs::remove_dir_all(&dir);
            return Err(e);
        }
        let password = format!("fs-{}", random_hex(12)?);
        let admin_password = format!("fs-{}", random_hex(12)?);

        let mut args: Vec<String> = vec![
            mariadbd.display().to_string(),
            "--no-defaults".into(),
            format!("--datadir={}", dir.display()),
            format!("--socket={}", dir.join("sock").display()),
            format!("--pid-file={}", dir.join("pid").display()),
            format!("--port={port}"),
            // One thread per connection, whatever the thread handling: the pools find
            // it (`@@extra_port`) and send their KILLs there, answered while every
            // thread of a busy pool-of-threads runs a statement (killer.rs).
            format!("--extra-port={extra_port}"),
            format!("--extra-max-connections={}", cfg.max_connections),
            "--bind-address=127.0.0.1".into(),
            format!("--max-connections={}", cfg.max_connections),
            format!(
                "--back-log={}",
                cfg.max_connections + BACK_LOG_ABOVE_MAX_CONNECTIONS
            ),
            format!("--thread-handling={}", cfg.thread_handling),
            "--skip-log-bin".into(),
            "--skip-name-resolve".into(),
            "--innodb-buffer-pool-size=16M".into(),
            "--innodb-flush-log-at-trx-commit=2".into(),
        ];
        args.extend(INNODB_FILES.iter().map(|s| s.to_string()));
        if is_root() {
            args.push("--user=root".into());
        }
        let mut supervisor = Command::new("sh")
            .arg("-c")
            .arg(SUPERVISOR)
            .arg("fiberstack-mariadb-supervisor")
            .arg(&dir)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| Error::Launch(format!("cannot run sh: {e}")))?;
        let commands = supervisor.stdin.take();
        // Both pipes were requested just above, so they exist.
        let events = BufReader::new(supervisor.stdout.take().expect("piped stdout"));
        let mut db = MariaDb {
            supervisor,
            commands,
            events,
            dir,
            port,
            extra_port,
            pid: 0,
            password,
            admin_password,
            os_user: os_user.to_owned(),
            cfg,
        };
        db.pid = db.expect_started()?;
        Ok(db)
    }

    fn expect_started(&mut self) -> Result<u32> {
        let line = self.expect_event("started")?;
        line.trim()
            .strip_prefix("started ")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| Error::Launch(format!("supervisor said `{line}`")))
    }

    fn expect_event(&mut self, what: &str) -> Result<String> {
        let mut line = String::new();
        self.events
            .read_line(&mut line)
            .map_err(|e| Error::Launch(format!("supervisor: {e}")))?;
        if !line.starts_with(what) {
            return Err(Error::Launch(format!(
                "supervisor said `{}`, expected `{what}`",
                line.trim()
            )));
        }
        Ok(line)
    }

    fn command(&mut self, cmd: &str) -> Result<()> {
        let pipe = self
            .commands
            .as_mut()
            .ok_or_else(|| Error::Launch("server already stopped".into()))?;
        writeln!(pipe, "{cmd}").map_err(|e| Error::Launch(format!("supervisor gone: {e}")))
    }

    /// Waits until the administrator can log in through the socket, or the process
    /// died, or timeout. Returns that connection.
    fn wait_ready(&mut self) -> Result<Conn> {
        let started = Instant::now();
        loop {
            match accounts::admin_via_socket(&self.socket(), &self.os_user) {
                Ok(conn) => return Ok(conn),
                Err(e) if started.elapsed() > self.cfg.startup_timeout => {
                    return Err(Error::Launch(format!(
                        "no answer within {:?} ({e}); server log:\n{}",
                        self.cfg.startup_timeout,
                        self.log_tail()
                    )))
                }
                Err(_) if !process_alive(self.pid) => {
                    return Err(Error::Launch(format!(
                        "mariadbd exited during start-up; server log:\n{}",
                        self.log_tail()
                    )))
                }
                Err(_) => std::thread::sleep(READY_POLL),
            }
        }
    }

    fn initialize(&mut self, mut admin: Conn) -> Result<()> {
        let db = quote_ident(&self.cfg.db_name);
        accounts::set_up(
            &mut admin,
            &db,
            &self.cfg.user,
            &self.password,
            &self.admin_password,
        )?;
        admin
            .query(&format!("USE {db}"))
            .map_err(|e| Error::Launch(e.to_string()))?;
        for sql in &self.cfg.init_sql {
            admin
                .query(sql)
                .map_err(|e| Error::Launch(format!("init_sql failed: {e}\nstatement: {sql}")))?;
        }
        Ok(())
    }

    /// The unix socket, inside the 0700 data directory.
    fn socket(&self) -> PathBuf {
        self.dir.join("sock")
    }

    /// The application user's options (password-protected, `db_name` selected).
    pub fn opts(&self) -> Opts {
        let mut opts = Opts::new("127.0.0.1", self.port, self.cfg.user.clone());
        opts.password = self.password.clone();
        opts.db = Some(self.cfg.db_name.clone());
        opts
    }

    /// All privileges over TCP, for tests (feature `testing`): an administrator account
    /// with its own random password (root logs in only through the unix socket).
    #[cfg(feature = "testing")]
    pub fn admin_opts(&self) -> Opts {
        let mut opts = Opts::new("127.0.0.1", self.port, accounts::ADMIN_USER);
        opts.password = self.admin_password.clone();
        opts.db = Some(self.cfg.db_name.clone());
        opts
    }

    /// `mysql://app:password@127.0.0.1:port/db`.
    pub fn url(&self) -> String {
        self.opts().url()
    }

    /// The TCP port (stays the same across [`MariaDb::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The `extra_port` (one thread per connection, whatever the thread handling): a
    /// pool finds it as `@@extra_port` and sends its KILLs there.
    pub fn extra_port(&self) -> u16 {
        self.extra_port
    }

    /// The pid of the running `mariadbd` (changes on restart).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The data directory (removed on drop).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Kills `mariadbd` (SIGKILL, like a crash) and leaves it down; files stay.
    pub fn kill_server(&mut self) -> Result<()> {
        self.command("kill")?;
        self.expect_event("stopped")?;
        Ok(())
    }

    /// Starts `mariadbd` again on the same port and data, and waits until it answers.
    pub fn start_server(&mut self) -> Result<()> {
        self.command("start")?;
        self.pid = self.expect_started()?;
        self.wait_ready().map(drop)
    }

    /// Kill and start again, for outage tests.
    pub fn restart(&mut self) -> Result<()> {
        self.kill_server()?;
        self.start_server()
    }

    /// Stops the server and removes its files (also done by Drop).
    pub fn stop(&mut self) {
        // Closing the pipe is the stop command; wait so the files are gone on return.
        if self.commands.take().is_some() {
            let _ = self.supervisor.wait();
        }
    }

    /// Whether `mariadbd` exited because a port [`free_ports`] picked was taken before
    /// it could bind it.
    fn lost_a_port(&self) -> bool {
        self.log()
            .contains("Can't start server: Bind on TCP/IP port")
    }

    /// The server's log so far (empty when it cannot be read).
    fn log(&self) -> String {
        fs::read_to_string(self.dir.join(LOG_FILE)).unwrap_or_default()
    }

    fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `mysql` identifiers in backquotes.
fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

fn find_program(name: &str, extra_dirs: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra_dirs.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn is_root() -> bool {
    private_dir::uid() == 0
}

fn process_alive(pid: u32) -> bool {
    // A zombie (state Z) has exited; the supervisor reaps it later.
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Two free loopback ports: the server's and its `extra_port`.
fn free_ports() -> Result<[u16; 2]> {
    // Bind port 0 twice (both held, so the two differ), read the ports, release them
    // for mariadbd. Another process can take one meanwhile: `start` then tries again
    // on two new ones.
    let bind = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| Error::Launch(format!("no free loopback port: {e}")))
    };
    let port = |l: &std::net::TcpListener| {
        l.local_addr()
            .map(|a| a.port())
            .map_err(|e| Error::Launch(e.to_string()))
    };
    let (a, b) = (bind()?, bind()?);
    Ok([port(&a)?, port(&b)?])
}

/// Copies this user's template data directory into the (empty, private) `dir`,
/// creating the template first if needed (see "Speed" in the module comment).
fn copy_template(mariadbd: &Path, os_user: &str, dir: &Path) -> Result<()> {
    let meta = fs::metadata(mariadbd)
        .map_err(|e| Error::Launch(format!("{}: {e}", mariadbd.display())))?;
    // Keyed by the binary, so an upgraded server gets a fresh template.
    let name = format!(
        "mariadb-v{TEMPLATE_FORMAT}-{:x}-{:x}",
        meta.len(),
        meta.mtime()
    );
    let cache = private_dir::cache_dir()?;
    let template = cache.path.join(name);
    if fs::symlink_metadata(&template).is_err() {
        let staging = private_dir::create_unique(&cache.path, "staging")?;
        if let Err(e) = install_db(&staging, os_user) {
            let _ = fs::remove_dir_all(&staging);
            return Err(e);
        }
        // Another process may have won the race: then keep theirs (checked below).
        if fs::rename(&staging, &template).is_err() {
            let _ = fs::remove_dir_all(&staging);
        }
    }
    private_dir::verify_tree(&template)?;
    // `template/.`: the contents, into the directory we created (cp -a keeps 0700).
    let status = Command::new("cp")
        .arg("-a")
        .arg(template.join("."))
        .arg(dir)
        .status()
        .map_err(|e| Error::Launch(format!("cp: {e}")))?;
    if cache.throwaway {
        let _ = fs::remove_dir_all(&cache.path);
    }
    if !status.success() {
        return Err(Error::Launch(format!(
            "could not copy {} to {}",
            template.display(),
            dir.display()
        )));
    }
    // Checked after the copy, not assumed.
    private_dir::verify_private(dir)
}

fn install_db(dir: &Path, os_user: &str) -> Result<()> {
    let install =
        find_program("mariadb-install-db", &["/usr/bin", "/usr/sbin"]).ok_or_else(|| {
            Error::Launch(
            "`mariadb-install-db` not found: install it with `apt-get install mariadb-server`, \
             or use an existing database with --database-url"
                .into(),
        )
        })?;
    // Under `umask 077` (a shell, as we have no umask call): files only we can read.
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "umask 077 && exec \"$0\" \"$@\""])
        .arg(install)
        .envs([("UMASK", "0600"), ("UMASK_DIR", "0700")]);
    // The default root authentication, `unix_socket`, for root and for us
    // (see crate::accounts); no TCP root accounts; no test database.
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", dir.display()))
        .arg(format!("--auth-root-socket-user={os_user}"))
        .arg("--skip-name-resolve")
        .arg("--skip-test-db")
        .args(INNODB_FILES)
        .stdin(Stdio::null());
    if is_root() {
        cmd.arg("--user=root");
    }
    let out = cmd
        .output()
        .map_err(|e| Error::Launch(format!("mariadb-install-db: {e}")))?;
    if !out.status.success() {
        return Err(Error::Launch(format!(
            "mariadb-install-db failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback port held by the listener returned with it.
    fn held_port() -> (std::net::TcpListener, u16) {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        (taken, port)
    }

    /// A port taken between the pick and the bind costs a second start, not the
    /// caller's server.
    #[test]
    fn a_port_taken_before_mariadbd_binds_it_is_picked_again() {
        let (_taken, taken_port) = held_port();
        let mut picks = 0;
        let db = MariaDb::start_on(LaunchConfig::default(), || {
            picks += 1;
            let [port, extra_port] = free_ports()?;
            Ok(if picks == 1 {
                [port, taken_port]
            } else {
                [port, extra_port]
            })
        })
        .unwrap();
        assert_eq!(picks, 2);
        assert_ne!(db.extra_port, taken_port);
        let mut conn = Conn::connect(&db.opts()).unwrap();
        assert_eq!(conn.query("select 1").unwrap().rows.len(), 1);
    }

    /// A port that stays taken is reported, with the server's log, after
    /// `PORT_ATTEMPTS` starts.
    #[test]
    fn a_port_taken_every_time_is_an_error_after_the_last_attempt() {
        let (_taken, taken_port) = held_port();
        let mut picks = 0;
        let err = MariaDb::start_on(LaunchConfig::default(), || {
            picks += 1;
            Ok([free_ports()?[0], taken_port])
        })
        .unwrap_err();
        assert_eq!(picks, PORT_ATTEMPTS);
        assert!(err.to_string().contains("Address already in use"), "{err}");
    }
}
