//! Who may log in to a private MariaDB, and the administrator's way in.
//!
//! - The administrator is the OS user running this process: `mariadb-install-db`
//!   creates `root@localhost` and `<os user>@localhost` with `unix_socket`
//!   authentication (the server asks the kernel who is on the other end of the
//!   socket). `localhost` means the unix socket, which lives inside the 0700 data
//!   directory: no other local user can reach it, and no password exists to leak.
//!   This works whether we run as root (CI) or as a developer.
//! - Every other account that could be reached over TCP (root@127.0.0.1, root@::1,
//!   root@`hostname`, anonymous ones) is dropped at start, whatever the template held.
//! - The application user gets [`APP_PRIVILEGES`] on its own database only, and a
//!   random password.
//! - [`ADMIN_USER`]@127.0.0.1 has all privileges over TCP for tests and tools that
//!   speak only TCP (our `Conn`), with its own random password.
//!
//! Passwords travel only inside SQL sent over the unix socket: never in argv, a
//! file or a log. They live in this process's memory.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::conn::Conn;
use crate::error::{Error, Result};

/// What the application user may do on its own database: the demo creates its table,
/// inserts the seed and reads (CREATE, INSERT, SELECT); the tests that share this
/// launcher also change and drop their own tables. Nothing server-wide (no FILE,
/// PROCESS, SUPER, GRANT OPTION): `KILL QUERY` of its own connections needs none.
pub(crate) const APP_PRIVILEGES: &str =
    "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX, ALTER, CREATE TEMPORARY TABLES";
/// The password-protected all-privileges TCP account (see the module comment).
pub(crate) const ADMIN_USER: &str = "fiberstack_admin";
/// Read and write timeout of an administrator's socket connection.
const ADMIN_IO_TIMEOUT: Duration = Duration::from_secs(30);

/// The OS user name of this process: the name `unix_socket` authentication checks.
pub(crate) fn os_user() -> Result<String> {
    let out = Command::new("id")
        .arg("-un")
        .output()
        .map_err(|e| Error::Launch(format!("cannot run `id -un`: {e}")))?;
    let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || name.is_empty() {
        return Err(Error::Launch(
            "this user has no name (`id -un` failed): the private MariaDB's administrator \
             logs in by OS user name; add the user to /etc/passwd or use --database-url"
                .into(),
        ));
    }
    Ok(name)
}

/// An administrator's connection through the unix socket `socket` (our own client
/// over a blocking Unix socket: start-up code).
pub(crate) fn admin_via_socket(socket: &Path, os_user: &str) -> Result<Conn> {
    Conn::connect_unix(socket, os_user, ADMIN_IO_TIMEOUT)
        .map_err(|e| Error::Launch(format!("admin login via socket: {e}")))
}

/// Drops every TCP-reachable or anonymous account, then creates the application user
/// (on `db` only) and [`ADMIN_USER`]. Identifiers and passwords are ours (checked
/// names, hex passwords), so formatting them into SQL is safe.
pub(crate) fn set_up(
    admin: &mut Conn,
    db: &str,
    app_user: &str,
    app_password: &str,
    admin_password: &str,
) -> Result<()> {
    let sql_err = |e: Error| Error::Launch(format!("setting up accounts: {e}"));
    let reachable = admin
        .query("SELECT user, host FROM mysql.user WHERE host <> 'localhost' OR user = ''")
        .map_err(sql_err)?;
    for row in reachable.rows {
        let (Some(user), Some(host)) = (row.get::<String, _>(0), row.get::<String, _>(1)) else {
            return Err(Error::Launch(format!(
                "unexpected row in mysql.user: {row:?}"
            )));
        };
        admin
            .query(&format!(
                "DROP USER {}@{}",
                quote_str(&user),
                quote_str(&host)
            ))
            .map_err(sql_err)?;
    }
    let user = quote_str(app_user);
    for sql in [
        format!("CREATE DATABASE IF NOT EXISTS {db}"),
        format!(
            "CREATE USER {user}@'%' IDENTIFIED BY {}",
            quote_str(app_password)
        ),
        format!("GRANT {APP_PRIVILEGES} ON {db}.* TO {user}@'%'"),
        format!(
            "CREATE USER {}@'127.0.0.1' IDENTIFIED BY {}",
            quote_str(ADMIN_USER),
            quote_str(admin_password)
        ),
        format!(
            "GRANT ALL PRIVILEGES ON *.* TO {}@'127.0.0.1'",
            quote_str(ADMIN_USER)
        ),
    ] {
        admin.query(&sql).map_err(sql_err)?;
    }
    Ok(())
}

/// A string literal in single quotes.
fn quote_str(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}
