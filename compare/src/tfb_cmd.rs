//! `compare tfb`: one of the rig's TechEmpower servers (`compare::tfb`) on
//! `DATABASE_URL`'s database, with `--setup` to make its tables first.

use std::net::SocketAddr;

use clap::Args;

use compare::Runtime;

/// The flags of `compare tfb`.
#[derive(Args, Debug, Clone)]
pub struct TfbArgs {
    /// async (axum + mysql_async) or minihttp (raw may_minihttp + fiber_mysql).
    #[arg(long)]
    pub runtime: Runtime,
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// MySQL connections in the pool.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub pool: u64,
    /// Worker threads (tokio's or may's).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub threads: u64,
    /// Make TechEmpower's World and Fortune tables (examples/techempower.sql) first.
    #[arg(long)]
    pub setup: bool,
}

/// Serve until the process ends.
pub fn run(args: &TfbArgs) -> Result<(), String> {
    let url = std::env::var("DATABASE_URL").map_err(|_| {
        "set DATABASE_URL=mysql://user:pass@host:port/db (not in argv: it holds a password)"
    })?;
    let opts = fiber_mysql::Opts::from_url(&url).map_err(|e| format!("DATABASE_URL: {e}"))?;
    if args.setup {
        let mut conn =
            fiber_mysql::Conn::connect(&opts).map_err(|e| format!("cannot reach MySQL: {e}"))?;
        for sql in compare::tfb::setup_statements() {
            conn.query(sql)
                .map_err(|e| format!("setting up the tables: {e}"))?;
        }
    }
    let (pool, threads) = (args.pool as usize, args.threads as usize);
    let banner = |addr: SocketAddr| {
        fiber_web::rig::banner(&format!(
            "compare tfb: listening on http://{addr} | runtime {}, {threads} threads, a MySQL pool of {pool}",
            args.runtime
        ));
    };
    match args.runtime {
        Runtime::Async => {
            let listener = std::net::TcpListener::bind(args.bind)
                .map_err(|e| format!("cannot listen on {} (--bind): {e}", args.bind))?;
            banner(listener.local_addr().map_err(|e| e.to_string())?);
            compare::tfb::axum::serve(listener, &opts, pool, threads)
        }
        Runtime::Minihttp => compare::tfb::mini::serve(args.bind, &opts, pool, threads, banner),
        Runtime::Fibers => Err("the fiber_web server is examples/techempower".into()),
    }
}
