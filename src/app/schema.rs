//! The demo's tables and seed rows, created at start on the private MariaDB, and on an
//! external server when missing.

/// Statements run once at start; each is idempotent.
pub fn init_sql() -> Vec<String> {
    let mut sql = vec!["create table if not exists tweets (\
           id int unsigned not null auto_increment primary key, \
           text varchar(280) not null, \
           created_at datetime not null, \
           key by_created (created_at)\
         ) engine=InnoDB default charset=utf8mb4"
        .to_string()];
    let rows: Vec<String> = SEED_TWEETS
        .iter()
        .enumerate()
        .map(|(i, text)| {
            format!(
                "({}, '{}', '2011-03-{:02} 12:00:00')",
                i + 1,
                text.replace('\\', "\\\\").replace('\'', "''"),
                1 + i % 28
            )
        })
        .collect();
    // `insert ignore` with fixed ids keeps a restart from seeding twice.
    sql.push(format!(
        "insert ignore into tweets (id, text, created_at) values {}",
        rows.join(", ")
    ));
    sql
}

/// Seed rows: constants of ours, so formatting them into SQL is safe.
const SEED_TWEETS: &[&str] = &[
    "Upgrading to rails 3 this weekend, wish me luck",
    "rails 3 + EventMachine + fibers: one process, many slow queries",
    "Is anyone running rails 3 on Ruby 1.9.2 fibers in production?",
    "em-synchrony makes rails 3 look synchronous and run concurrently",
    "Rack::FiberPool with 100 fibers and rails 3, ab -c 220 holds up",
    "rails 3 asset pipeline blew my fiber stack :(",
    "Thin + rails 3 + mysql2 async: 186 req/s on one-second queries",
    "The database is the throttle, not the app server (rails 3 async)",
    "Reading the rails 3 release notes again",
    "fibers have 4k stacks, careful with deep rails 3 templates",
    "Benchmarking rails 3 with ab, results look great",
    "rails 3 and the async-rails demo, nice trick",
    "Coffee first, then rails 3",
    "No rails here, just a tweet about the weather",
    "Testing 100% of the _underscored_ edge cases",
];
