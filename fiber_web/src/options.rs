//! How an app is served: every limit as a named field of [`Options`], with defaults,
//! filled from the environment and the command line ([`Options::from_env_and_args`],
//! or [`Options::from_env_and_args_with`] for an app with flags of its own:
//! [`crate::AppFlags`]) or set in code.
//!
//! Each flag has an environment variable, the app's name in capitals and the flag's:
//! `--stack-size` of an app named `todo_api` is `TODO_API_STACK_SIZE`. The command
//! line wins over the environment, which wins over the default. A bad value is
//! refused naming the flag (or the variable) and what to write; so is an unknown flag.
//! `--help` prints them all, the app's with the framework's, with their defaults.

use std::net::SocketAddr;
use std::time::Duration;

use crate::config::{
    cores, ByteSize, HttpLimits, WatchdogLimits, DEFAULT_ACCESS_LOG, DEFAULT_BIND, DEFAULT_FIBERS,
    DEFAULT_FIBER_WAIT, DEFAULT_MONITOR_FIBERS, DEFAULT_PROCESSES, DEFAULT_QUEUE,
    DEFAULT_SCOPE_CHILDREN, DEFAULT_SHUTDOWN_GRACE, DEFAULT_STACK_SIZE,
    DEFAULT_WORKER_START_TIMEOUT, MAX_WAIT, MONITOR_QUEUE_PER_FIBER,
};
use crate::flags::{AppArgs, AppFlags};
use crate::Error;

/// Most `--fibers`: each reserves address space for its stack.
pub(crate) const MAX_FIBERS: usize = 100_000;
/// Most `--monitor-fibers`: a few answer any prober; each is a stack.
pub(crate) const MAX_MONITOR_FIBERS: usize = 64;
/// Most `--threads`.
pub(crate) const MAX_THREADS: usize = 1024;
/// Shortest `--stall-warn`: the stall clock ticks in milliseconds.
pub(crate) const MIN_STALL_WARN: Duration = Duration::from_millis(10);

/// How to serve an app.
#[derive(Clone, Debug)]
pub struct Options {
    /// The app's name: the prefix of its metrics (`NAME_http_requests_total`), the
    /// target of its access lines (`NAME::access`), the word its log lines start
    /// with, and its variables' prefix in capitals. By default the binary's name
    /// ([`AppFlags::named`](crate::AppFlags::named) sets another).
    pub name: String,
    /// Address to listen on; port 0 picks a free port.
    pub bind: SocketAddr,
    /// Fibers in the pool: at most this many requests run handlers at once.
    pub fibers: usize,
    /// Usable bytes of each fiber's stack (a guard page is added).
    pub stack_size: usize,
    /// Requests that may wait for a fiber; more are answered 503.
    pub queue: usize,
    /// Longest wait for a fiber before a 503.
    pub fiber_wait: Duration,
    /// Every request's deadline from its arrival: past it, its waits end (a MySQL
    /// query is killed) and it gets a 504 naming the phase; `None`: no deadline but
    /// the ones each wait has of its own. A route can set a tighter one
    /// (`App::timeout`).
    pub request_timeout: Option<Duration>,
    /// Most children one [`fiber_pool::scope()`] of a handler may have; one more fails
    /// with `RunError::ScopeFull` (a 503 when passed on with `?`).
    pub scope_children: usize,
    /// Fibers beyond `fibers` kept for scopes' children, so that fan-outs finish when
    /// requests hold every other fiber.
    pub child_reserve: usize,
    /// Fibers of their own for monitoring routes (`/readyz`, `/metrics` behind the
    /// layers, a route marked [`App::monitoring`](crate::App::monitoring)), off the
    /// request limit: they answer while `fibers` are all busy and the queue is full.
    /// Each may have [`MONITOR_QUEUE_PER_FIBER`] requests waiting for it.
    pub monitor_fibers: usize,
    /// The threads [`fiber_pool::blocking()`] runs closures on, and how many may wait.
    pub blocking: fiber_pool::BlockingConfig,
    /// The scheduler's threads (may's): every request's fiber runs on one of them,
    /// from its first instruction to its last. (A worker is a process: `processes`.)
    pub threads: usize,
    /// Worker processes the supervisor runs behind the port.
    pub processes: usize,
    /// Whether a supervisor runs the worker processes (the default): it replaces one
    /// that dies, hangs on a lock an overflow left held, or asks to go, and restarts
    /// them one by one on SIGHUP, without refusing a connection. Off (`--supervisor
    /// off`), the app serves in this process alone, and a process the watchdog
    /// finds broken can only say so in the log.
    pub supervise: bool,
    /// Whether each request gets an access line on stderr.
    pub access_log: bool,
    /// Time in-flight requests get to finish after SIGTERM or Ctrl-C (and in a
    /// worker being replaced).
    pub shutdown_grace: Duration,
    /// Longest a new worker process may take to accept before it is killed and
    /// started again.
    pub worker_start_timeout: Duration,
    /// When the watchdog logs a stall and when it asks for a fresh process.
    pub watchdog: WatchdogLimits,
    /// The HTTP server's limits per connection and per request.
    pub http: HttpLimits,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            name: AppFlags::new().name().to_string(),
            bind: DEFAULT_BIND,
            fibers: DEFAULT_FIBERS,
            stack_size: DEFAULT_STACK_SIZE,
            queue: DEFAULT_QUEUE,
            fiber_wait: DEFAULT_FIBER_WAIT,
            request_timeout: None,
            scope_children: DEFAULT_SCOPE_CHILDREN,
            child_reserve: fiber_pool::PoolConfig::default().child_reserve,
            monitor_fibers: DEFAULT_MONITOR_FIBERS,
            blocking: fiber_pool::BlockingConfig::default(),
            threads: cores(),
            processes: DEFAULT_PROCESSES,
            supervise: true,
            access_log: DEFAULT_ACCESS_LOG,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            worker_start_timeout: DEFAULT_WORKER_START_TIMEOUT,
            watchdog: WatchdogLimits::default(),
            http: HttpLimits::default(),
        }
    }
}

/// What a flag that was renamed is called now, for the error that refuses the old name.
fn renamed(flag: &str) -> Option<&'static str> {
    (flag == "workers")
        .then_some("is --threads now (the scheduler's threads); a worker is a process: --processes")
}

/// One flag: its name (without `--`), what its value looks like, what it means, and
/// how it sets the options.
struct Flag {
    name: &'static str,
    value: &'static str,
    help: &'static str,
    default: fn(&Options) -> String,
    set: fn(&mut Options, &str) -> Result<(), String>,
}

const FLAGS: &[Flag] = &[
    Flag {
        name: "bind",
        value: "ADDR",
        help: "address to listen on (port 0 picks a free port)",
        default: |o| o.bind.to_string(),
        set: |o, v| {
            o.bind = v.parse().map_err(|_| {
                format!("'{v}' is not an address: write IP:PORT, like 127.0.0.1:3000")
            })?;
            Ok(())
        },
    },
    Flag {
        name: "fibers",
        value: "N",
        help: "fibers in the pool: requests running handlers at once",
        default: |o| o.fibers.to_string(),
        set: |o, v| count(v, 1, MAX_FIBERS).map(|n| o.fibers = n),
    },
    Flag {
        name: "stack-size",
        value: "SIZE",
        help: "usable stack of each fiber: 65536, 64k, 64KiB, 1MiB (see STACK_SIZES.md)",
        default: |o| ByteSize(o.stack_size).to_string(),
        set: |o, v| v.parse::<ByteSize>().map(|b| o.stack_size = b.0),
    },
    Flag {
        name: "queue",
        value: "N",
        help: "requests that may wait for a fiber; more get a 503",
        default: |o| o.queue.to_string(),
        set: |o, v| count(v, 0, usize::MAX).map(|n| o.queue = n),
    },
    Flag {
        name: "fiber-wait",
        value: "SECS",
        help: "seconds a request may wait for a fiber before a 503",
        default: |o| o.fiber_wait.as_secs_f64().to_string(),
        set: |o, v| seconds(v).map(|d| o.fiber_wait = d),
    },
    Flag {
        name: "request-timeout",
        value: "SECS",
        help: "each request's deadline, from its arrival: past it, a 504 naming the phase \
               (0: none)",
        default: |o| {
            o.request_timeout
                .map_or(0.0, |d| d.as_secs_f64())
                .to_string()
        },
        set: |o, v| seconds(v).map(|d| o.request_timeout = (!d.is_zero()).then_some(d)),
    },
    Flag {
        name: "scope-children",
        value: "N",
        help: "most children one fan-out (fiber_pool::scope) may have; more get a 503",
        default: |o| o.scope_children.to_string(),
        set: |o, v| count(v, 1, MAX_FIBERS).map(|n| o.scope_children = n),
    },
    Flag {
        name: "child-reserve",
        value: "N",
        help: "fibers beyond --fibers kept for fan-outs' children",
        default: |o| o.child_reserve.to_string(),
        set: |o, v| count(v, 0, MAX_FIBERS).map(|n| o.child_reserve = n),
    },
    Flag {
        name: "monitor-fibers",
        value: "N",
        help: "fibers of their own for /readyz and monitoring routes, off the request limit",
        default: |o| o.monitor_fibers.to_string(),
        set: |o, v| count(v, 1, MAX_MONITOR_FIBERS).map(|n| o.monitor_fibers = n),
    },
    Flag {
        name: "blocking-threads",
        value: "N",
        help: "threads that run blocking calls (fiber_pool::blocking)",
        default: |o| o.blocking.threads.to_string(),
        set: |o, v| {
            count(v, 1, fiber_pool::blocking::MAX_BLOCKING_THREADS).map(|n| o.blocking.threads = n)
        },
    },
    Flag {
        name: "blocking-queue",
        value: "N",
        help: "blocking calls that may wait for a thread; more fail at once (503)",
        default: |o| o.blocking.queue.to_string(),
        set: |o, v| count(v, 0, fiber_pool::config::MAX_QUEUE).map(|n| o.blocking.queue = n),
    },
    Flag {
        name: "threads",
        value: "N",
        help: "scheduler threads: a request's fiber runs on one of them (default: the \
               number of cores)",
        default: |o| o.threads.to_string(),
        set: |o, v| count(v, 1, MAX_THREADS).map(|n| o.threads = n),
    },
    Flag {
        name: "processes",
        value: "N",
        help: "worker processes behind the port, run by the supervisor",
        default: |o| o.processes.to_string(),
        set: |o, v| count(v, 1, crate::supervisor::MAX_PROCESSES).map(|n| o.processes = n),
    },
    Flag {
        name: "supervisor",
        value: "on|off",
        help: "run the workers under a supervisor that replaces a broken or dead one \
               (off: serve in this process alone)",
        default: |o| on_off(o.supervise).into(),
        set: |o, v| switch(v).map(|on| o.supervise = on),
    },
    Flag {
        name: "access-log",
        value: "on|off",
        help: "an access line per request on stderr",
        default: |o| on_off(o.access_log).into(),
        set: |o, v| switch(v).map(|on| o.access_log = on),
    },
    Flag {
        name: "shutdown-grace",
        value: "SECS",
        help: "seconds in-flight requests get after SIGTERM or Ctrl-C",
        default: |o| o.shutdown_grace.as_secs_f64().to_string(),
        set: |o, v| seconds(v).map(|d| o.shutdown_grace = d),
    },
    Flag {
        name: "max-connections",
        value: "N",
        help: "open client connections; more get a 503",
        default: |o| o.http.max_connections.to_string(),
        set: |o, v| count(v, 1, usize::MAX).map(|n| o.http.max_connections = n),
    },
    Flag {
        name: "max-body",
        value: "SIZE",
        help: "largest request body; more gets a 413",
        default: |o| ByteSize(o.http.max_body_bytes).to_string(),
        set: |o, v| v.parse::<ByteSize>().map(|b| o.http.max_body_bytes = b.0),
    },
    Flag {
        name: "stall-warn",
        value: "SECS",
        help: "seconds a handler may hold its thread before the stall is logged",
        default: |o| o.watchdog.stall_warn.as_secs_f64().to_string(),
        set: |o, v| seconds(v).map(|d| o.watchdog.stall_warn = d),
    },
    Flag {
        name: "stall-limit",
        value: "SECS",
        help: "seconds a handler may hold its thread before the process is replaced",
        default: |o| o.watchdog.stall_limit.as_secs_f64().to_string(),
        set: |o, v| seconds(v).map(|d| o.watchdog.stall_limit = d),
    },
    Flag {
        name: "overflow-limit",
        value: "N",
        help: "caught stack overflows after which the process is replaced (0: never)",
        default: |o| o.watchdog.overflow_limit.to_string(),
        set: |o, v| count(v, 0, usize::MAX).map(|n| o.watchdog.overflow_limit = n as u64),
    },
];

fn count(v: &str, min: usize, max: usize) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ if max == usize::MAX => Err(format!("'{v}' is not a whole number of at least {min}")),
        _ => Err(format!("'{v}' is not a whole number from {min} to {max}")),
    }
}

fn seconds(v: &str) -> Result<Duration, String> {
    match v.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && (0.0..=MAX_WAIT.as_secs_f64()).contains(&s) => {
            Ok(Duration::from_secs_f64(s))
        }
        _ => Err(format!(
            "'{v}' is not a number of seconds from 0 to {}",
            MAX_WAIT.as_secs()
        )),
    }
}

pub(crate) fn switch(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err(format!("'{v}' is not a switch: write on or off")),
    }
}

const fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

/// Whether `name` is one of the framework's flags.
pub(crate) fn is_framework_flag(name: &str) -> bool {
    FLAGS.iter().any(|f| f.name == name)
}

impl Options {
    /// The options the environment and this process's command line give, over the
    /// defaults, for an app with no flags of its own. `--help` prints every flag and
    /// exits.
    pub fn from_env_and_args() -> Result<Options, Error> {
        Options::from_env_and_args_with(&AppFlags::new()).map(|(options, _)| options)
    }

    /// [`from_env_and_args`](Self::from_env_and_args) for an app with flags of its
    /// own: the framework's options and the app's values. `--help` prints both tables
    /// and exits.
    pub fn from_env_and_args_with(app: &AppFlags) -> Result<(Options, AppArgs), Error> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if args.iter().any(|a| a == "--help" || a == "-h") {
            println!("{}", Options::help_with(app));
            std::process::exit(0);
        }
        Options::parse(app, args, |name| std::env::var(name).ok())
    }

    /// The framework's options and the app's values from command-line `args`
    /// (`--fibers 10`, `--fibers=10`, in order) over what `var` gives for each flag's
    /// variable, over the defaults.
    pub fn parse<I: IntoIterator<Item = String>>(
        app: &AppFlags,
        args: I,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<(Options, AppArgs), Error> {
        let mut opts = Options {
            name: app.name().to_string(),
            ..Options::default()
        };
        let mut values = AppArgs::defaults(app);
        for flag in FLAGS {
            let name = app.env_name(flag.name);
            if let Some(value) = var(&name).filter(|v| !v.is_empty()) {
                (flag.set)(&mut opts, &value).map_err(|why| Error::Option { name, why })?;
            }
        }
        for flag in &app.flags {
            let name = app.env_name(flag.name);
            if let Some(value) = var(&name).filter(|v| !v.is_empty()) {
                values.set_from_env(flag.name, value, name);
            }
        }
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let Some(body) = arg.strip_prefix("--") else {
                return Err(Error::Option {
                    name: arg.clone(),
                    why: "not a flag: flags start with -- (see --help)".into(),
                });
            };
            let (name, inline) = match body.split_once('=') {
                Some((name, value)) => (name, Some(value.to_string())),
                None => (body, None),
            };
            let ours = FLAGS.iter().find(|f| f.name == name);
            let theirs = app.get(name);
            let shown = match (ours, theirs) {
                (Some(f), _) => f.value,
                (None, Some(f)) => f.value,
                (None, None) => {
                    return Err(Error::Option {
                        name: format!("--{name}"),
                        why: renamed(name)
                            .unwrap_or("unknown flag (--help lists them)")
                            .into(),
                    })
                }
            };
            let Some(value) = inline.or_else(|| args.next()) else {
                return Err(Error::Option {
                    name: format!("--{name}"),
                    why: format!("needs a value: --{name} {shown}"),
                });
            };
            match (ours, theirs) {
                (Some(flag), _) => (flag.set)(&mut opts, &value).map_err(|why| Error::Option {
                    name: format!("--{name}"),
                    why,
                })?,
                (None, Some(flag)) => values.set_from_flag(flag.name, value),
                (None, None) => unreachable!("refused above"),
            }
        }
        opts.check()?;
        Ok((opts, values))
    }

    /// What no single flag can check: the stall limits' order.
    fn check(&self) -> Result<(), Error> {
        let w = self.watchdog;
        if w.stall_warn < MIN_STALL_WARN || w.stall_limit < w.stall_warn {
            return Err(Error::Option {
                name: "--stall-warn".into(),
                why: format!(
                    "must be at least {MIN_STALL_WARN:?}, and --stall-limit at least \
                     --stall-warn; got --stall-warn {:?} and --stall-limit {:?}",
                    w.stall_warn, w.stall_limit
                ),
            });
        }
        Ok(())
    }

    /// Every flag, the app's and the framework's, its variable, its default and what
    /// it means.
    pub fn help_with(app: &AppFlags) -> String {
        let defaults = Options::default();
        let entry = |name: &str, value: &str, default: Option<String>, help: &str| {
            let default = default.map_or_else(|| "no default".into(), |d| format!("default {d}"));
            format!(
                "  --{name} {value}  ({}, {default})\n      {help}\n",
                app.env_name(name)
            )
        };
        let mut out = String::new();
        if !app.flags.is_empty() {
            out.push_str(&format!(
                "Options of {} (each also an environment variable):\n",
                app.name()
            ));
            for f in &app.flags {
                out.push_str(&entry(f.name, f.value, f.default.clone(), f.help));
            }
        }
        out.push_str("Options of the server (each also an environment variable):\n");
        for f in FLAGS {
            out.push_str(&entry(
                f.name,
                f.value,
                Some((f.default)(&defaults)),
                f.help,
            ));
        }
        out
    }

    /// The fiber pool these options ask for. Every overflowed stack is quarantined
    /// (never reused: something may still point into its abandoned frames) and its
    /// fiber takes a spare: the pool keeps as many spares as overflows the watchdog
    /// lets this process take (`--overflow-limit`), at least the pool's default;
    /// spares are address space only until used.
    pub(crate) fn pool_config(&self) -> fiber_pool::PoolConfig {
        let defaults = fiber_pool::PoolConfig::default();
        let limit = usize::try_from(self.watchdog.overflow_limit).unwrap_or(usize::MAX);
        fiber_pool::PoolConfig {
            size: self.fibers,
            stack_size: self.stack_size,
            queue: self.queue,
            wait_timeout: Some(self.fiber_wait),
            spare_stacks: defaults.spare_stacks.max(limit),
            max_children_per_scope: self.scope_children,
            child_reserve: self.child_reserve,
            ..defaults
        }
    }

    /// The monitoring routes' pool: `monitor_fibers` fibers of the request fibers'
    /// stack size and wait, with a short queue, no children's reserve, and spares as
    /// the request pool's (an overflow there is quarantined the same way).
    pub(crate) fn monitor_pool_config(&self) -> fiber_pool::PoolConfig {
        fiber_pool::PoolConfig {
            size: self.monitor_fibers,
            queue: self.monitor_fibers * MONITOR_QUEUE_PER_FIBER,
            child_reserve: 0,
            ..self.pool_config()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Options, Error> {
        let app = AppFlags::named("app");
        Options::parse(&app, list.iter().map(|s| s.to_string()), |_| None).map(|(o, _)| o)
    }

    #[test]
    fn flags_set_their_fields_in_both_spellings() {
        let o = args(&[
            "--bind",
            "127.0.0.1:0",
            "--fibers=10",
            "--stack-size",
            "64KiB",
            "--supervisor",
            "off",
            "--access-log=off",
            "--max-body",
            "1k",
        ])
        .unwrap();
        assert_eq!(o.bind.port(), 0);
        assert_eq!((o.fibers, o.stack_size), (10, 65536));
        assert!(!o.supervise && !o.access_log);
        assert_eq!(o.http.max_body_bytes, 1024);
        assert_eq!(o.name, "app");
    }

    #[test]
    fn bad_values_and_unknown_flags_are_named() {
        let e = |list: &[&str]| args(list).unwrap_err().to_string();
        assert_eq!(
            e(&["--fibers", "0"]),
            "--fibers: '0' is not a whole number from 1 to 100000"
        );
        assert!(e(&["--stack-size", "lots"]).starts_with("--stack-size: 'lots' is not a size"));
        assert!(e(&["--bind", "here"]).contains("write IP:PORT"));
        assert_eq!(
            e(&["--colour", "red"]),
            "--colour: unknown flag (--help lists them)"
        );
        assert_eq!(e(&["--fibers"]), "--fibers: needs a value: --fibers N");
        assert!(e(&["--workers", "2"]).contains("is --threads now"));
        assert!(e(&["--supervisor", "maybe"]).contains("write on or off"));
        assert!(e(&["--stall-warn", "5", "--stall-limit", "1"]).contains("--stall-limit at least"));
        assert!(e(&["serve"]).contains("not a flag"));
    }

    #[test]
    fn the_environment_sets_what_flags_do_not() {
        let app = AppFlags::named("todo_api").flag("db-pool", "N", "connections", Some("10"));
        let env = |name: &str| match name {
            "TODO_API_FIBERS" => Some("7".to_string()),
            "TODO_API_QUEUE" => Some("3".to_string()),
            "TODO_API_DB_POOL" => Some("many".to_string()),
            _ => None,
        };
        let (o, values) = Options::parse(&app, ["--fibers", "9"].map(String::from), env).unwrap();
        assert_eq!((o.fibers, o.queue), (9, 3));
        let e = values.get::<usize>("db-pool").unwrap_err().to_string();
        assert!(e.starts_with("TODO_API_DB_POOL: 'many'"), "{e}");
        let e = Options::parse(&app, [], |n| {
            (n == "TODO_API_THREADS").then(|| "none".into())
        })
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("TODO_API_THREADS: 'none'"), "{e}");
        let (_, values) =
            Options::parse(&app, ["--db-pool=4"].map(String::from), |_| None).unwrap();
        assert_eq!(values.get::<usize>("db-pool").unwrap(), 4);
        let help = Options::help_with(&app);
        assert!(
            help.contains("--stack-size SIZE  (TODO_API_STACK_SIZE, default 128KiB)"),
            "{help}"
        );
        assert!(
            help.contains("--db-pool N  (TODO_API_DB_POOL, default 10)"),
            "{help}"
        );
        assert!(
            help.contains("--supervisor on|off  (TODO_API_SUPERVISOR, default on)"),
            "{help}"
        );
    }
}
