//! The demo's own flags, parsed with the framework's in one table
//! ([`fiber_web::AppFlags`]): MySQL, the upstream of `/twitter`, the self-calling
//! route's limit. `fiberstack serve --help` lists them with the framework's; each is
//! also a `FIBERSTACK_*` variable (`--database-url` is `DATABASE_URL`).

use std::time::Duration;

use fiber_web::{AppArgs, AppFlags, Options};

use crate::config::{ServeConfig, APP_NAME, DEFAULT_DB_POOL, DEFAULT_DB_WAIT};

/// Most `--db-pool` connections.
pub const MAX_DB_POOL: usize = 10_000;

/// The demo's flags, beside the framework's.
pub fn flags() -> AppFlags {
    flags_named(APP_NAME)
}

/// [`flags`] for an app of another name that serves the same routes (the comparison
/// rig's twin keeps the demo's name, so that their metrics compare).
pub fn flags_named(name: &str) -> AppFlags {
    AppFlags::named(name)
        .flag(
            "db-pool",
            "N",
            "MySQL connections in the pool",
            Some(&DEFAULT_DB_POOL.to_string()),
        )
        .flag_env(
            "database-url",
            "URL",
            "an external server, mysql://user:pass@host:port/db (without it, a private \
             MariaDB starts)",
            None,
            "DATABASE_URL",
        )
        .flag(
            "mariadbd",
            "PATH",
            "the mariadbd binary of the private server (default: PATH, then /usr/sbin)",
            None,
        )
        .flag(
            "db-driver",
            "native|threads",
            "MySQL driver: native (coroutine-native) or threads (the mysql crate, a thread \
             per connection)",
            Some(&fiber_mysql::Driver::default().to_string()),
        )
        .flag(
            "db-wait",
            "SECS",
            "seconds a request may wait for a MySQL connection before a 503",
            Some(&DEFAULT_DB_WAIT.as_secs_f64().to_string()),
        )
        .flag(
            "self-call-limit",
            "N",
            "most /widgets/http at once (default: half the fibers), so that the calls they \
             make back into this server always find a fiber",
            None,
        )
        .flag(
            "upstream",
            "URL",
            "the JSON API /twitter reads (default: this server's \
             /upstream/search.json?q=rails+3)",
            None,
        )
}

/// The configuration the framework's options and the demo's values describe.
pub fn config(web: Options, args: &AppArgs) -> Result<ServeConfig, fiber_web::Error> {
    let bad = |name: &str, why: String| fiber_web::Error::Option {
        name: format!("--{name}"),
        why,
    };
    let db_pool: usize = args.get("db-pool")?;
    if !(1..=MAX_DB_POOL).contains(&db_pool) {
        return Err(bad(
            "db-pool",
            format!("'{db_pool}' is not a whole number from 1 to {MAX_DB_POOL}"),
        ));
    }
    let db_wait: f64 = args.get("db-wait")?;
    if !(db_wait.is_finite()
        && (0.0..=fiber_web::config::MAX_WAIT.as_secs_f64()).contains(&db_wait))
    {
        return Err(bad(
            "db-wait",
            format!(
                "'{db_wait}' is not a number of seconds from 0 to {}",
                fiber_web::config::MAX_WAIT.as_secs()
            ),
        ));
    }
    let self_call_limit: Option<usize> = args.optional("self-call-limit")?;
    if self_call_limit == Some(0) {
        return Err(bad(
            "self-call-limit",
            "'0' is not a whole number of at least 1".into(),
        ));
    }
    let nonempty = |v: Option<String>| v.filter(|u| !u.is_empty());
    Ok(ServeConfig {
        web,
        db_pool,
        self_call_limit,
        database_url: nonempty(args.optional("database-url")?),
        mariadbd: args.optional("mariadbd")?,
        db_driver: args.get("db-driver")?,
        upstream: nonempty(args.optional("upstream")?),
        db_wait_timeout: Duration::from_secs_f64(db_wait),
        ..ServeConfig::default()
    })
}

/// The configuration the command line (`args`, after the subcommand) and this
/// process's environment give.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<ServeConfig, fiber_web::Error> {
    let (web, values) = Options::parse(&flags(), args, |name| std::env::var(name).ok())?;
    config(web, &values)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(list: &[&str]) -> Result<ServeConfig, fiber_web::Error> {
        let (web, values) = Options::parse(&flags(), list.iter().map(|s| s.to_string()), |_| None)?;
        config(web, &values)
    }

    /// `serve` without flags is exactly `ServeConfig::default()`.
    #[test]
    fn no_flags_is_the_default_config() {
        assert_eq!(
            format!("{:?}", parse(&[]).unwrap()),
            format!("{:?}", ServeConfig::default())
        );
    }

    #[test]
    fn the_demos_flags_set_their_fields_and_bad_ones_are_named() {
        let cfg = parse(&["--db-pool", "7", "--db-driver", "threads", "--fibers", "9"]).unwrap();
        assert_eq!((cfg.db_pool, cfg.web.fibers), (7, 9));
        assert_eq!(cfg.db_driver, fiber_mysql::Driver::Threads);
        let e = |list: &[&str]| parse(list).unwrap_err().to_string();
        assert!(e(&["--db-pool", "0"]).starts_with("--db-pool: '0'"));
        assert!(e(&["--db-driver", "fast"]).starts_with("--db-driver: 'fast'"));
        assert!(e(&["--db-wait", "-1"]).starts_with("--db-wait: '-1'"));
        assert!(e(&["--self-call-limit", "0"]).starts_with("--self-call-limit"));
    }

    /// Every flag the README's table names is accepted.
    #[test]
    fn every_flag_of_the_readme_is_accepted() {
        let readme = include_str!("../README.md");
        let table = readme
            .split("## Flags")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("the README's Flags section");
        let help = Options::help_with(&flags());
        let mut named = 0;
        let first_cells = table
            .lines()
            .filter(|l| l.starts_with("| `--"))
            .filter_map(|l| l.split(" | ").next());
        for flag in first_cells
            .flat_map(|cell| cell.split('`'))
            .filter(|w| w.starts_with("--") && w.len() > 2)
        {
            let name = flag.split_whitespace().next().unwrap();
            assert!(
                help.contains(&format!("  {name} ")),
                "{name} is in the README but not in --help"
            );
            named += 1;
        }
        assert!(
            named >= 20,
            "only {named} flags found in the README's table"
        );
    }
}
