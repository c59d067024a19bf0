//! An app's own flags, parsed with the framework's: [`AppFlags`] declares them (name,
//! value, help, default, environment variable), [`Options::parse`](crate::Options::parse)
//! reads them from the command line and the environment beside the framework's own,
//! and [`AppArgs`] hands their values to the app, each parsed on request and refused
//! naming its flag. One table, one parser: `--help` lists both, an unknown flag is
//! refused, and the app's name (the binary's, or [`AppFlags::name`]) prefixes the
//! environment variables (`todo_api` reads `TODO_API_FIBERS` and `TODO_API_DB_POOL`),
//! the metrics and the log lines.
//!
//! ```
//! use fiber_web::{AppFlags, Options};
//!
//! let flags = AppFlags::named("todo_api")
//!     .flag("db-pool", "N", "MySQL connections in the pool", Some("10"))
//!     .flag_env("database-url", "URL", "the MySQL server", None, "DATABASE_URL");
//! let args = ["--db-pool", "4", "--fibers", "50"].map(String::from);
//! let (options, app) = Options::parse(&flags, args, |_| None).unwrap();
//! assert_eq!(options.fibers, 50);
//! assert_eq!(app.get::<usize>("db-pool").unwrap(), 4);
//! assert_eq!(app.optional::<String>("database-url").unwrap(), None);
//! ```

use std::collections::BTreeMap;
use std::fmt::Display;
use std::str::FromStr;

use crate::Error;

/// One flag of the app's own.
#[derive(Clone, Debug)]
pub(crate) struct AppFlag {
    pub(crate) name: &'static str,
    pub(crate) value: &'static str,
    pub(crate) help: &'static str,
    pub(crate) default: Option<String>,
    /// Its environment variable when not the app's prefix + the name.
    pub(crate) env: Option<&'static str>,
}

/// The app's name and its own flags, parsed beside the framework's by
/// [`Options::parse`](crate::Options::parse) and
/// [`Options::from_env_and_args_with`](crate::Options::from_env_and_args_with).
#[derive(Clone, Debug)]
pub struct AppFlags {
    pub(crate) name: String,
    pub(crate) flags: Vec<AppFlag>,
}

impl Default for AppFlags {
    fn default() -> Self {
        AppFlags::new()
    }
}

impl AppFlags {
    /// No flags of the app's own; the app is named after its binary.
    pub fn new() -> AppFlags {
        AppFlags::named(&binary_name())
    }

    /// No flags yet, and the app named `name`: its metrics are `NAME_*`, its access
    /// lines' log target `NAME::access`, its variables `NAME_*` in capitals (a name
    /// is cut to letters, digits and `_`).
    pub fn named(name: &str) -> AppFlags {
        AppFlags {
            name: sanitize(name),
            flags: Vec::new(),
        }
    }

    /// The app's name, as its metrics and variables spell it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A flag `--NAME VALUE` (`value` is how `--help` shows the value, `help` what it
    /// means), with `default` when neither the command line nor its variable
    /// (`APP_NAME`, in capitals with `_` for `-`) gives one. A flag without a default
    /// is absent unless given ([`AppArgs::optional`]).
    ///
    /// # Panics
    ///
    /// When `name` is taken: by the framework's flags or an earlier one of the app's.
    pub fn flag(
        self,
        name: &'static str,
        value: &'static str,
        help: &'static str,
        default: Option<&str>,
    ) -> AppFlags {
        self.add(name, value, help, default, None)
    }

    /// [`flag`](Self::flag), read from the variable `env` instead of the app's prefix
    /// + the name (`DATABASE_URL`, a name other programs share).
    ///
    /// # Panics
    ///
    /// As for [`flag`](Self::flag).
    pub fn flag_env(
        self,
        name: &'static str,
        value: &'static str,
        help: &'static str,
        default: Option<&str>,
        env: &'static str,
    ) -> AppFlags {
        self.add(name, value, help, default, Some(env))
    }

    fn add(
        mut self,
        name: &'static str,
        value: &'static str,
        help: &'static str,
        default: Option<&str>,
        env: Option<&'static str>,
    ) -> AppFlags {
        assert!(
            !crate::options::is_framework_flag(name) && self.get(name).is_none(),
            "the flag --{name} is taken: each flag has one meaning"
        );
        self.flags.push(AppFlag {
            name,
            value,
            help,
            default: default.map(str::to_string),
            env,
        });
        self
    }

    pub(crate) fn get(&self, name: &str) -> Option<&AppFlag> {
        self.flags.iter().find(|f| f.name == name)
    }

    /// The environment variable of flag `name` (the framework's or the app's).
    pub fn env_name(&self, name: &str) -> String {
        match self.get(name).and_then(|f| f.env) {
            Some(env) => env.to_string(),
            None => format!(
                "{}_{}",
                self.name.to_ascii_uppercase(),
                name.replace('-', "_").to_ascii_uppercase()
            ),
        }
    }
}

/// Where an app flag's value came from: what a refusal names.
#[derive(Clone, Debug)]
enum Given {
    Default,
    Env(String),
    Flag,
}

impl Given {
    /// How a refusal names flag `name` given this way: its variable, or its flag.
    fn named(&self, name: &str) -> String {
        match self {
            Given::Env(var) => var.clone(),
            Given::Default | Given::Flag => format!("--{name}"),
        }
    }
}

/// The values of the app's own flags, as given (or defaulted); each parsed when asked
/// for.
#[derive(Clone, Debug, Default)]
pub struct AppArgs {
    values: BTreeMap<&'static str, (String, Given)>,
}

impl AppArgs {
    pub(crate) fn defaults(flags: &AppFlags) -> AppArgs {
        let values = flags
            .flags
            .iter()
            .filter_map(|f| Some((f.name, (f.default.clone()?, Given::Default))))
            .collect();
        AppArgs { values }
    }

    pub(crate) fn set_from_env(&mut self, name: &'static str, value: String, var: String) {
        self.values.insert(name, (value, Given::Env(var)));
    }

    pub(crate) fn set_from_flag(&mut self, name: &'static str, value: String) {
        self.values.insert(name, (value, Given::Flag));
    }

    /// Flag `name`'s value as a `T`; refused naming the flag (or the variable that gave
    /// it) when it does not parse or was not given and has no default.
    pub fn get<T>(&self, name: &str) -> Result<T, Error>
    where
        T: FromStr,
        T::Err: Display,
    {
        self.optional(name)?.ok_or_else(|| Error::Option {
            name: format!("--{name}"),
            why: "needs a value".into(),
        })
    }

    /// Flag `name`'s value as a `T`, or `None` when it was not given and has no
    /// default; refused naming the flag when it does not parse.
    pub fn optional<T>(&self, name: &str) -> Result<Option<T>, Error>
    where
        T: FromStr,
        T::Err: Display,
    {
        let Some((value, given)) = self.values.get(name) else {
            return Ok(None);
        };
        value.parse().map(Some).map_err(|e: T::Err| Error::Option {
            name: given.named(name),
            why: format!("'{value}': {e}"),
        })
    }

    /// What gave flag `name` its value, as a refusal names it.
    fn given_as(&self, name: &str) -> String {
        match self.values.get(name) {
            Some((_, given)) => given.named(name),
            None => format!("--{name}"),
        }
    }

    /// Flag `name` as a switch (`on`/`off`, as the framework's own switches are
    /// written; `true`/`false`, `yes`/`no`, `1`/`0` too): `false` when it was not
    /// given and has no default, refused naming the flag when it is not a switch.
    pub fn switch(&self, name: &str) -> Result<bool, Error> {
        let Some(value) = self.raw(name) else {
            return Ok(false);
        };
        crate::options::switch(value).map_err(|why| Error::Option {
            name: self.given_as(name),
            why,
        })
    }

    /// Flag `name`'s value as written, if it has one.
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(|(v, _)| v.as_str())
    }
}

/// This binary's file name: what an app is called unless it says otherwise.
fn binary_name() -> String {
    std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "app".into())
}

/// `name` as a metric prefix and a variable prefix: letters, digits and `_`, not
/// starting with a digit, never empty.
fn sanitize(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_prefixes_of_letters_digits_and_underscores() {
        assert_eq!(AppFlags::named("todo-api").name(), "todo_api");
        assert_eq!(AppFlags::named("9lives").name(), "_9lives");
        assert_eq!(AppFlags::named("").name(), "_");
        let flags =
            AppFlags::named("todo-api").flag_env("database-url", "URL", "db", None, "DATABASE_URL");
        assert_eq!(flags.env_name("db-pool"), "TODO_API_DB_POOL");
        assert_eq!(flags.env_name("database-url"), "DATABASE_URL");
    }

    #[test]
    #[should_panic(expected = "the flag --fibers is taken")]
    fn a_flag_of_the_framework_cannot_be_declared_again() {
        let _ = AppFlags::named("a").flag("fibers", "N", "mine", None);
    }
}
