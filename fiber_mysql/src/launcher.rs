//! A private, throwaway MariaDB for the demo and the tests.
//!
//! [`MariaDb::start`] initialises a data directory under the system temp dir,
//! starts `mariadbd` on a free loopback port, waits until it answers, creates
//! the database and a password-protected application user, and runs the
//! caller's `init_sql` (schema and seed).
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
//! `mariadb-install-db` takes about 0.7 s. It runs once per machine into a
//! template directory (`$TMPDIR/fiberstack-mariadb-template-*`, kept); each
//! server then starts from a copy of it (tens of milliseconds).
//!
//! These functions block the calling thread (start-up code): call them from
//! `main` or a test, not from inside a fiber that serves traffic.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::opts::Opts;
use crate::Conn;

/// Small InnoDB files: a data directory of about 25 MB instead of 126 MB.
const INNODB_FILES: [&str; 2] = [
    "--innodb-log-file-size=4M",
    "--innodb-data-file-path=ibdata1:12M:autoextend",
];
/// Room above the pool for the KILL QUERY connection, admin sessions and tests.
pub const CONNECTION_HEADROOM: usize = 20;
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
    /// The application user (gets all privileges on `db_name` only).
    pub user: String,
    /// Longest wait for the server to answer after start.
    pub startup_timeout: Duration,
    /// `mariadbd` to use; `None`: look in PATH, then /usr/sbin.
    pub mariadbd: Option<PathBuf>,
}

impl Default for LaunchConfig {
    fn default() -> Self {
        LaunchConfig {
            max_connections: 250 + CONNECTION_HEADROOM,
            init_sql: Vec::new(),
            db_name: "fiberstack".into(),
            user: "app".into(),
            startup_timeout: Duration::from_secs(20),
            mariadbd: None,
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
    pid: u32,
    password: String,
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

/// The supervisor. `$1` is the data directory, the rest is mariadbd's argv.
const SUPERVISOR: &str = r#"
dir=$1; shift
start() { "$@" </dev/null >>"$dir.log" 2>&1 & pid=$!; echo "started $pid"; }
stop() { kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
cleanup() { stop; rm -rf "$dir" "$dir.log"; exit 0; }
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
        let dir = unique_dir()?;
        copy_template(&mariadbd, &dir)?;
        let port = free_port()?;
        let mut password = random_hex(12)?;
        password.insert_str(0, "fs-");

        let mut args: Vec<String> = vec![
            mariadbd.display().to_string(),
            "--no-defaults".into(),
            format!("--datadir={}", dir.display()),
            format!("--socket={}", dir.join("sock").display()),
            format!("--pid-file={}", dir.join("pid").display()),
            format!("--port={port}"),
            "--bind-address=127.0.0.1".into(),
            format!("--max-connections={}", cfg.max_connections),
            format!("--back-log={}", cfg.max_connections + 50),
            "--thread-handling=pool-of-threads".into(),
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
            pid: 0,
            password,
            cfg,
        };
        db.pid = db.expect_started()?;
        db.wait_ready()?;
        db.initialize()?;
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

    /// Waits until root can log in over TCP, or the process died, or timeout.
    fn wait_ready(&mut self) -> Result<()> {
        let started = Instant::now();
        let mut opts = self.admin_opts();
        opts.db = None;
        opts.connect_timeout = Duration::from_secs(1);
        loop {
            match Conn::connect(&opts) {
                Ok(_) => return Ok(()),
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

    fn initialize(&mut self) -> Result<()> {
        let mut admin_opts = self.admin_opts();
        admin_opts.db = None;
        let mut root = Conn::connect(&admin_opts)?;
        let db = quote_ident(&self.cfg.db_name);
        root.query(&format!("CREATE DATABASE IF NOT EXISTS {db}"))?;
        root.query(&format!(
            "CREATE USER IF NOT EXISTS '{}'@'%' IDENTIFIED BY '{}'",
            self.cfg.user, self.password
        ))?;
        root.query(&format!(
            "GRANT ALL PRIVILEGES ON {db}.* TO '{}'@'%'",
            self.cfg.user
        ))?;
        root.query(&format!("USE {db}"))?;
        for sql in &self.cfg.init_sql {
            root.query(sql)
                .map_err(|e| Error::Launch(format!("init_sql failed: {e}\nstatement: {sql}")))?;
        }
        Ok(())
    }

    /// The application user's options (password-protected, `db_name` selected).
    pub fn opts(&self) -> Opts {
        let mut opts = Opts::new("127.0.0.1", self.port, self.cfg.user.clone());
        opts.password = self.password.clone();
        opts.db = Some(self.cfg.db_name.clone());
        opts
    }

    /// root (no password, all privileges), for tests and administration.
    pub fn admin_opts(&self) -> Opts {
        let mut opts = Opts::new("127.0.0.1", self.port, "root");
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
        self.wait_ready()
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

    fn log_tail(&self) -> String {
        let log = fs::read_to_string(self.dir.with_extension("log")).unwrap_or_default();
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
    fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
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

fn free_port() -> Result<u16> {
    // Bind port 0, read the port, release it for mariadbd. The window in
    // which another process could take it is tiny; start fails loudly if so.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::Launch(format!("no free loopback port: {e}")))?;
    Ok(listener
        .local_addr()
        .map_err(|e| Error::Launch(e.to_string()))?
        .port())
}

fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| Error::Launch(format!("/dev/urandom: {e}")))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

fn unique_dir() -> Result<PathBuf> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "fiberstack-mariadb-{}-{n}-{}",
        std::process::id(),
        random_hex(3)?
    ));
    Ok(dir)
}

/// Copies the per-machine template data directory to `dir`, creating the
/// template first if needed (see "Speed" in the module comment).
fn copy_template(mariadbd: &Path, dir: &Path) -> Result<()> {
    let meta = fs::metadata(mariadbd)
        .map_err(|e| Error::Launch(format!("{}: {e}", mariadbd.display())))?;
    // Keyed by the binary, so an upgraded server gets a fresh template.
    let key = format!("{:x}-{:x}", meta.len(), meta.mtime());
    let template = std::env::temp_dir().join(format!(
        "fiberstack-mariadb-template-{}-{key}",
        fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0)
    ));
    if !template.join("ready").exists() {
        let staging = PathBuf::from(format!("{}.tmp-{}", template.display(), random_hex(4)?));
        install_db(&staging)?;
        fs::write(staging.join("ready"), b"")
            .map_err(|e| Error::Launch(format!("template: {e}")))?;
        // Another process may have won the race: then keep theirs.
        if fs::rename(&staging, &template).is_err() {
            let _ = fs::remove_dir_all(&staging);
        }
    }
    let status = Command::new("cp")
        .arg("-a")
        .arg(&template)
        .arg(dir)
        .status()
        .map_err(|e| Error::Launch(format!("cp: {e}")))?;
    if !status.success() {
        return Err(Error::Launch(format!(
            "could not copy {} to {}",
            template.display(),
            dir.display()
        )));
    }
    let _ = fs::remove_file(dir.join("ready"));
    Ok(())
}

fn install_db(dir: &Path) -> Result<()> {
    let install =
        find_program("mariadb-install-db", &["/usr/bin", "/usr/sbin"]).ok_or_else(|| {
            Error::Launch(
            "`mariadb-install-db` not found: install it with `apt-get install mariadb-server`, \
             or use an existing database with --database-url"
                .into(),
        )
        })?;
    let mut cmd = Command::new(install);
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", dir.display()))
        .arg("--auth-root-authentication-method=normal")
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
        let _ = fs::remove_dir_all(dir);
        return Err(Error::Launch(format!(
            "mariadb-install-db failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

/// The environment variable naming an existing server for the tests.
pub const TEST_DATABASE_URL_ENV: &str = "FIBERSTACK_TEST_DATABASE_URL";
/// `max_connections` of the per-process test server.
pub const TEST_SERVER_MAX_CONNECTIONS: usize = 300;

/// Options for tests that do not stop the server: the server named by
/// `FIBERSTACK_TEST_DATABASE_URL` if set (one server shared by a whole test
/// run), else a private server started once per process. That server is
/// never dropped; the supervisor removes it when the process exits.
/// Tests that kill or restart the server start their own [`MariaDb`].
pub fn test_database_opts() -> Result<Opts> {
    static SERVER: std::sync::OnceLock<std::result::Result<MariaDb, String>> =
        std::sync::OnceLock::new();
    if let Ok(url) = std::env::var(TEST_DATABASE_URL_ENV) {
        return Opts::from_url(&url);
    }
    let server = SERVER.get_or_init(|| {
        MariaDb::start(LaunchConfig {
            max_connections: TEST_SERVER_MAX_CONNECTIONS,
            db_name: "fiberstack_test".into(),
            ..LaunchConfig::default()
        })
        .map_err(|e| e.to_string())
    });
    match server {
        Ok(server) => Ok(server.opts()),
        Err(e) => Err(Error::Launch(e.clone())),
    }
}
