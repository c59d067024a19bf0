//! The private MariaDB seen by another local user (README, "Security"): nobody gets in over TCP
//! without a password, a planted template is never used, and what we write under the
//! temp dir is not readable by others.
//!
//! The second user is `nobody`, through `runuser` (the tests run as root in CI). Run as
//! an ordinary user, the same logins are tried as that user (still an unauthenticated
//! TCP client) and the `runuser` half is reported as not run.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fiber_mysql::launcher::{LaunchConfig, MariaDb};

/// The second local user.
const OTHER_USER: &str = "nobody";
/// uid of `nobody` on Debian, owner of what "they" plant.
const OTHER_UID: u32 = 65534;
/// Longest wait for a child's first line (a template install on busy cores).
const START_TIMEOUT: Duration = Duration::from_secs(120);

fn is_root() -> bool {
    fs::metadata("/proc/self").unwrap().uid() == 0
}

/// A fresh directory for one test, world-traversable like /tmp is.
fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("fiberstack-sectest-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// A TMPDIR and an XDG_CACHE_HOME for one test, removed when dropped.
struct Dirs {
    tmp: PathBuf,
    cache: PathBuf,
}

impl Dirs {
    fn new(name: &str) -> Dirs {
        Dirs {
            tmp: scratch(&format!("{name}-tmp")),
            cache: scratch(&format!("{name}-cache")),
        }
    }
}

impl Drop for Dirs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.tmp);
        let _ = fs::remove_dir_all(&self.cache);
    }
}

/// `mariadb -h 127.0.0.1 -P port -u user` with no password, as `OTHER_USER` when
/// `other` (and we are root), else as ourselves. Returns (logged in, output).
fn tcp_login(port: u16, user: &str, other: bool) -> (bool, String) {
    let mut cmd = if other {
        let mut c = Command::new("runuser");
        c.args(["-u", OTHER_USER, "--", "mariadb"]);
        c
    } else {
        Command::new("mariadb")
    };
    let out = cmd
        .args(["--no-defaults", "--protocol=tcp", "-h", "127.0.0.1"])
        .args(["-P", &port.to_string(), "-u", user, "--connect-timeout=10"])
        .args(["-N", "-e", "select current_user()"])
        .stdin(Stdio::null())
        .output()
        .expect("the mariadb client (apt-get install mariadb-client)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Every account a stranger might try, refused with "Access denied" (not merely
/// unreachable: the server must be up and answering for this to mean anything).
fn assert_no_way_in(port: u16, app_user: &str) {
    let mut as_whom = vec![false];
    if is_root() {
        as_whom.push(true);
    } else {
        eprintln!("not root: the `runuser -u {OTHER_USER}` logins were not tried");
    }
    // An anonymous login (an empty user name; the mariadb client would put the OS user
    // name in its place), as an unauthenticated TCP client.
    let err = fiber_mysql::Conn::connect(&fiber_mysql::Opts::new("127.0.0.1", port, ""))
        .expect_err("an anonymous login over TCP succeeded");
    assert!(err.to_string().contains("Access denied"), "{err}");
    for other in as_whom {
        for user in ["root", app_user, "fiberstack_admin", "mysql", "mariadb.sys"] {
            let (ok, out) = tcp_login(port, user, other);
            assert!(
                !ok && out.contains("Access denied"),
                "user `{user}` (tried as {}) over TCP without a password: {out}\n\
                 the server's log ends:\n{}",
                if other { OTHER_USER } else { "ourselves" },
                log_tail(port)
            );
        }
    }
}

/// Through the socket, as this OS user (unix_socket): the administrator's way in works,
/// and no account reachable over TCP lacks a password.
fn assert_admin_only_via_socket(socket: &Path) {
    let out = Command::new("mariadb")
        .args(["--no-defaults", "-S"])
        .arg(socket)
        .args(["-N", "-e"])
        .arg(
            "select concat(user, '@', host, ':', plugin, ':', authentication_string = '') \
             from mysql.user where host <> 'localhost'",
        )
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "admin via socket: {}\nthe server's log ends:\n{}",
        String::from_utf8_lossy(&out.stderr),
        log_tail_in(&socket.with_file_name("mariadbd.log"))
    );
    for line in text.lines() {
        assert!(
            line.ends_with(":0"),
            "a TCP account without password: {line}"
        );
        assert!(!line.starts_with("root@"), "root over TCP: {line}");
    }
    if is_root() {
        // The socket is inside the 0700 data directory: the other user cannot reach it.
        let out = Command::new("runuser")
            .args(["-u", OTHER_USER, "--", "mariadb", "--no-defaults", "-S"])
            .arg(socket)
            .args(["-u", "root", "-e", "select 1"])
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "{OTHER_USER} got in through the socket"
        );
    }
}

/// The first line of a child's stdout within START_TIMEOUT, or (stopped) its stderr.
fn first_line(child: &mut Child) -> Result<String, String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(START_TIMEOUT) {
        Ok(line) if !line.is_empty() => Ok(line),
        _ => {
            stop(child);
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err);
            Err(err)
        }
    }
}

/// SIGTERM, then wait (bounded) for the exit.
fn stop(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `fiberstack <args>` with TMPDIR and XDG_CACHE_HOME of the test's choosing.
fn fiberstack(args: &[&str], tmp: &Path, cache: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_fiberstack"))
        .args(args)
        .env("TMPDIR", tmp)
        .env("XDG_CACHE_HOME", cache)
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The last lines of the log of the mariadbd listening on `port`, for a failure's message.
fn log_tail(port: u16) -> String {
    log_tail_in(&datadir_of(port).join("mariadbd.log"))
}

/// The last lines of the server log `log`.
fn log_tail_in(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_else(|e| format!("{}: {e}", log.display()));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// The private server's port in a `mysql://user:***@127.0.0.1:PORT/db` text.
fn port_in(text: &str) -> u16 {
    let after = text
        .split("@127.0.0.1:")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    after[..after.find('/').unwrap()].parse().unwrap()
}

/// The data directory (`--datadir=`) of the mariadbd listening on `port`, from /proc.
fn datadir_of(port: u16) -> PathBuf {
    let want = format!("--port={port}");
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).to_string())
            .collect();
        if args.first().is_some_and(|a| a.ends_with("mariadbd")) && args.contains(&want) {
            let dir = args
                .iter()
                .find_map(|a| a.strip_prefix("--datadir="))
                .unwrap();
            return PathBuf::from(dir);
        }
    }
    panic!("no mariadbd with {want}");
}

/// Every entry under `root` (not following symlinks).
fn walk(root: &Path) -> Vec<(PathBuf, fs::Metadata)> {
    let mut out = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let meta = fs::symlink_metadata(entry.path()).unwrap();
            if meta.is_dir() {
                pending.push(entry.path());
            }
            out.push((entry.path(), meta));
        }
    }
    out
}

/// What we create under `tmp`: top-level entries private to us, nothing inside
/// readable by others.
fn assert_private_tree(tmp: &Path) {
    for entry in fs::read_dir(tmp).unwrap().flatten() {
        let meta = fs::symlink_metadata(entry.path()).unwrap();
        assert_eq!(
            meta.mode() & 0o077,
            0,
            "{} has mode {:o}",
            entry.path().display(),
            meta.mode()
        );
    }
    for (path, meta) in walk(tmp) {
        if meta.file_type().is_socket() {
            // mariadbd makes its socket 0777; what guards it is the 0700 directory.
            let parent = path.parent().unwrap().metadata().unwrap();
            assert_eq!(parent.mode() & 0o077, 0, "{}", path.display());
            continue;
        }
        assert_eq!(
            meta.mode() & 0o007,
            0,
            "{} is open to others: mode {:o}",
            path.display(),
            meta.mode()
        );
    }
}

#[test]
fn serve_private_mariadb_lets_no_one_in_over_tcp_and_keeps_its_files_private() {
    let dirs = Dirs::new("serve");
    let (tmp, cache) = (&dirs.tmp, &dirs.cache);
    let mut serve = fiberstack(
        &[
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--db-pool",
            "4",
            "--fibers",
            "8",
        ],
        tmp,
        cache,
    );
    let banner = first_line(&mut serve).unwrap_or_else(|e| panic!("serve: {e}"));
    assert!(banner.contains("app:***@"), "password not masked: {banner}");
    let port = port_in(&banner);
    let datadir = datadir_of(port);
    assert!(datadir.starts_with(tmp), "{}", datadir.display());
    assert_no_way_in(port, "app");
    assert_admin_only_via_socket(&datadir.join("sock"));
    assert_private_tree(tmp);
    assert_private_tree(cache);
    stop(&mut serve);
    assert!(
        fs::read_dir(tmp).unwrap().next().is_none(),
        "left behind under TMPDIR: {:?}",
        fs::read_dir(tmp)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect::<Vec<_>>()
    );
}

/// The tests' and the bench's path: both call `MariaDb::start` (the source check below).
#[test]
fn launcher_private_mariadb_lets_no_one_in_over_tcp() {
    let db = MariaDb::start(LaunchConfig {
        max_connections: 20,
        ..LaunchConfig::default()
    })
    .unwrap();
    assert_no_way_in(db.port(), "app");
    assert_admin_only_via_socket(&db.dir().join("sock"));
    assert_eq!(db.dir().metadata().unwrap().mode() & 0o777, 0o700);
    // The app user, with its password, does get in, and only to its own database.
    let mut app = fiber_mysql::Conn::connect(&db.opts()).unwrap();
    let err = app.query("create database other_db").unwrap_err();
    assert!(err.to_string().contains("denied"), "{err}");
    let mut admin = fiber_mysql::Conn::connect(&db.admin_opts()).unwrap();
    admin.query("select 1").unwrap();
}

#[test]
fn bench_and_test_fixture_start_mariadb_through_the_launcher() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("compare/src");
    let bench: Vec<String> = walk(&src)
        .into_iter()
        .filter(|(p, m)| m.is_file() && p.extension().is_some_and(|e| e == "rs"))
        .map(|(p, _)| fs::read_to_string(p).unwrap())
        .filter(|text| text.contains("fn fresh_database"))
        .collect();
    assert_eq!(bench.len(), 1, "where is the bench's fresh_database?");
    let body = bench[0].split("fn fresh_database").nth(1).unwrap();
    let body = &body[..body.find("\n}\n").unwrap()];
    assert!(body.contains("MariaDb::start("), "{body}");
    let fixture = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fiber_mysql/src/testing.rs"),
    )
    .unwrap();
    assert!(fixture.contains("MariaDb::start("));
}

/// The name the old launcher computed for its template under $TMPDIR.
fn old_template_name() -> String {
    let meta = fs::metadata("/usr/sbin/mariadbd").unwrap();
    format!(
        "fiberstack-mariadb-template-{}-{:x}-{:x}",
        fs::metadata("/proc/self").unwrap().uid(),
        meta.len(),
        meta.mtime()
    )
}

/// The name of the template under the cache dir.
fn template_name() -> String {
    let meta = fs::metadata("/usr/sbin/mariadbd").unwrap();
    format!("mariadb-v2-{:x}-{:x}", meta.len(), meta.mtime())
}

/// A template "another user" made: a marker file, a `ready` file, a mysql/ dir,
/// all owned by OTHER_UID when we can chown (root), world-writable else.
fn plant(dir: &Path) {
    fs::create_dir_all(dir.join("mysql")).unwrap();
    fs::write(dir.join("ready"), b"").unwrap();
    fs::write(dir.join("PLANTED"), b"by another user").unwrap();
    fs::write(dir.join("mysql/PLANTED"), b"by another user").unwrap();
    for (path, _) in walk(dir)
        .into_iter()
        .chain([(dir.to_path_buf(), dir.metadata().unwrap())])
    {
        fs::set_permissions(&path, fs::Permissions::from_mode(0o777)).unwrap();
        if is_root() {
            std::os::unix::fs::lchown(&path, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
        }
    }
}

/// `fiberstack mariadb` with these dirs. If it starts: nothing planted is in its data
/// dir and no one gets in over TCP; else Err(its stderr).
fn run_mariadb(tmp: &Path, cache: &Path) -> Result<(), String> {
    let mut child = fiberstack(&["mariadb", "--max-connections", "20"], tmp, cache);
    let line = first_line(&mut child)?;
    let port = port_in(&line);
    let planted: Vec<_> = walk(&datadir_of(port))
        .into_iter()
        .filter(|(p, m)| p.ends_with("PLANTED") || m.uid() == OTHER_UID)
        .map(|(p, _)| p)
        .collect();
    assert!(
        planted.is_empty(),
        "planted files reached the data dir: {planted:?}"
    );
    assert_no_way_in(port, "app");
    stop(&mut child);
    Ok(())
}

#[test]
fn a_template_planted_at_the_old_tmp_path_is_not_used() {
    let dirs = Dirs::new("old");
    let (tmp, cache) = (&dirs.tmp, &dirs.cache);
    plant(&tmp.join(old_template_name()));
    run_mariadb(tmp, cache).unwrap();
}

#[test]
fn a_template_planted_in_the_cache_dir_is_refused_with_what_to_delete() {
    let dirs = Dirs::new("new");
    let (tmp, cache) = (&dirs.tmp, &dirs.cache);
    let ours = cache.join("fiberstack");
    plant(&ours.join(template_name()));
    let err = run_mariadb(tmp, cache).unwrap_err();
    assert!(
        err.contains(&format!("refusing to use {}", ours.display()))
            && err.contains(&format!("rm -rf '{}'", ours.display())),
        "{err}"
    );
}

#[test]
fn a_template_with_a_symlink_inside_is_refused() {
    let dirs = Dirs::new("link");
    let (tmp, cache) = (&dirs.tmp, &dirs.cache);
    let ours = cache.join("fiberstack");
    let template = ours.join(template_name());
    fs::create_dir_all(template.join("mysql")).unwrap();
    for dir in [&ours, &template] {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).unwrap();
    }
    std::os::unix::fs::symlink("/etc/passwd", template.join("mysql/user.MAD")).unwrap();
    let err = run_mariadb(tmp, cache).unwrap_err();
    assert!(
        err.contains(&format!("refusing to use {}", template.display())) && err.contains("symlink"),
        "{err}"
    );
}

#[test]
fn a_cache_home_owned_by_another_user_is_not_used() {
    if !is_root() {
        eprintln!("not root: cannot make a directory owned by {OTHER_USER}; not run");
        return;
    }
    let dirs = Dirs::new("foreign");
    let (tmp, cache) = (&dirs.tmp, &dirs.cache);
    plant(&cache.join("fiberstack").join(template_name()));
    for dir in [cache.join("fiberstack"), cache.clone()] {
        std::os::unix::fs::lchown(dir, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    }
    run_mariadb(tmp, cache).unwrap();
    // Nothing of ours was written into their directory.
    let ours: Vec<_> = walk(cache)
        .into_iter()
        .filter(|(_, m)| m.uid() != OTHER_UID)
        .map(|(p, _)| p)
        .collect();
    assert!(ours.is_empty(), "{ours:?}");
    assert!(
        fs::read_dir(tmp).unwrap().next().is_none(),
        "the throwaway template was left behind"
    );
}

#[test]
fn a_non_loopback_bind_is_warned_about_the_diagnostic_routes() {
    use fiberstack::setup::exposure_warning;
    for exposed in ["0.0.0.0:8080", "[::]:80", "192.168.1.5:3000"] {
        let w = exposure_warning(exposed.parse().unwrap()).expect(exposed);
        assert!(w.contains("/deep") && w.contains("/stats"), "{w}");
    }
    for local in ["127.0.0.1:8080", "[::1]:80"] {
        assert_eq!(exposure_warning(local.parse().unwrap()), None);
    }
}

/// `serve` with a database URL whose password must not show, good or malformed.
#[test]
fn a_database_url_password_never_shows_in_errors() {
    let dirs = Dirs::new("url");
    let tmp = &dirs.tmp;
    for url in [
        "mysql://app:Sekr3tPw@127.0.0.1:1/fiberstack",
        "mysql://app:Sekr3tPw%zz@127.0.0.1:3306/fiberstack",
        "mysql://app:Sekr3tPw%ff%fe@127.0.0.1:3306/fiberstack",
        "mysql://app:Sekr3t/Pw@127.0.0.1:3306/fiberstack",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_fiberstack"))
            .args(["serve", "--bind", "127.0.0.1:0", "--db-pool", "2"])
            .env("DATABASE_URL", url)
            .env("TMPDIR", tmp)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{url}: {text}");
        assert!(
            !text.contains("Sekr3t") && !text.contains("Pw"),
            "{url}: {text}"
        );
    }
}

#[test]
fn a_tmpdir_anyone_can_write_without_the_sticky_bit_is_refused() {
    let dirs = Dirs::new("open");
    let (tmp, cache) = (&dirs.tmp, &dirs.cache);
    fs::set_permissions(tmp, fs::Permissions::from_mode(0o777)).unwrap();
    let err = run_mariadb(tmp, cache).unwrap_err();
    assert!(
        err.contains(&format!("{} (owner uid", tmp.display())) && err.contains("TMPDIR"),
        "{err}"
    );
    assert!(fs::read_dir(tmp).unwrap().next().is_none());
}
