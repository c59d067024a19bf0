//! TechEmpower's six tests on fiber_web + fiber_mysql, held to the rules of
//! FrameworkBenchmarks' `toolset/test_types`: `/json`, `/plaintext`, `/db`,
//! `/queries?queries=N`, `/fortunes`, `/updates?queries=N`. Every response carries
//! `Server` and `Date` and keeps its connection; each of a request's queries is its own
//! prepared statement on a fiber that waits for MySQL without holding its thread.
//! `/json` and `/plaintext` never wait, so they run on the connection's coroutine
//! (`on_carrier`), as may_minihttp runs every handler, and skip the fiber's switches.
//!
//! Run: DATABASE_URL=mysql://user:pass@127.0.0.1:3306/db \
//!      target/release/examples/techempower --bind 127.0.0.1:8080 --setup on
//! (`--setup on` makes and fills the `World` and `Fortune` tables first, from
//! `examples/techempower.sql`.) `compare bench --tfb` measures it beside axum and raw
//! may_minihttp.
#![forbid(unsafe_code)]

use fiber_mysql::{Pool, PoolConfig, PooledConn, Value};
use fiber_web::html::push_escaped_html;
use fiber_web::{App, AppFlags, Json, Options, Request, Response};
use rand::Rng;
use serde::Serialize;
use std::fmt::Write as _;

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

/// The tables and their rows, one statement per paragraph.
const SETUP_SQL: &str = include_str!("techempower.sql");
const HELLO: &str = "Hello, World!";

#[derive(Serialize)]
struct Message {
    message: &'static str,
}

#[derive(Serialize)]
struct World {
    id: i32,
    #[serde(rename = "randomNumber")]
    random_number: i32,
}

/// A `World` id or random number: 1 to 10,000.
fn random(rng: &mut impl Rng) -> i32 {
    rng.gen_range(1..=10_000)
}

/// The rules' `queries`: 1 to 500; missing, empty, zero or not a number is 1.
fn queries(req: &Request) -> usize {
    let asked = req.query_param("queries").and_then(|n| n.parse().ok());
    asked.unwrap_or(1).clamp(1, 500)
}

/// `n` random rows, each read by its own query; the queries pipelined (one round
/// trip for them all).
fn worlds(db: &mut PooledConn, n: usize) -> Result<Vec<World>, Response> {
    // Held across the queries: the fiber stays on its thread, so the thread's
    // generator is safe to keep.
    let mut rng = rand::thread_rng();
    let ids: Vec<i32> = (0..n).map(|_| random(&mut rng)).collect();
    let sql = "SELECT id, randomNumber FROM World WHERE id = ?";
    let rows = db.exec_many(sql, ids.iter().map(|&id| (id,)))?;
    let numbers = rows
        .iter()
        .map(|r| r.rows.first().and_then(|r| r.get(1)).unwrap_or(0));
    let found = ids.into_iter().zip(numbers);
    Ok(found
        .map(|(id, random_number)| World { id, random_number })
        .collect())
}

fn json(_: &Pool, _: &Request) -> Json<Message> {
    Json(Message { message: HELLO })
}

fn plaintext(_: &Pool, _: &Request) -> Response {
    Response::text(200, HELLO)
}

fn db(pool: &Pool, _: &Request) -> Result<Json<World>, Response> {
    let mut found = worlds(&mut *pool.checkout()?, 1)?;
    Ok(Json(found.remove(0)))
}

fn query(pool: &Pool, req: &Request) -> Result<Json<Vec<World>>, Response> {
    Ok(Json(worlds(&mut *pool.checkout()?, queries(req))?))
}

/// Read, give each row a new random number, write them back in one statement (sorted
/// by id, so that two requests lock their rows in the same order), answer.
fn updates(pool: &Pool, req: &Request) -> Result<Json<Vec<World>>, Response> {
    let mut db = pool.checkout()?;
    let mut found = worlds(&mut db, queries(req))?;
    let mut rng = rand::thread_rng();
    for world in &mut found {
        world.random_number = random(&mut rng);
    }
    let mut sorted: Vec<&World> = found.iter().collect();
    sorted.sort_by_key(|w| w.id);
    let mut sql = String::from("UPDATE World SET randomNumber = CASE id");
    sql.push_str(&" WHEN ? THEN ?".repeat(sorted.len()));
    sql.push_str(" ELSE randomNumber END WHERE id IN (?");
    sql.push_str(&",?".repeat(sorted.len() - 1));
    sql.push(')');
    let pairs = sorted.iter().flat_map(|w| [w.id, w.random_number]);
    let ids = sorted.iter().map(|w| w.id);
    let params: Vec<Value> = pairs.chain(ids).map(Value::from).collect();
    db.exec(&sql, params)?;
    Ok(Json(found))
}

/// Every fortune and one added now, sorted by message, each escaped, in one buffer.
fn fortunes(pool: &Pool, _: &Request) -> Result<Response, Response> {
    let rows = pool
        .checkout()?
        .exec("SELECT id, message FROM Fortune", ())?;
    let mut all: Vec<(i32, String)> = rows
        .rows
        .into_iter()
        .map(|mut r| (r.take(0).unwrap_or(0), r.take(1).unwrap_or_default()))
        .collect();
    all.push((0, "Additional fortune added at request time.".into()));
    all.sort_by(|a, b| a.1.cmp(&b.1));
    let mut page = String::with_capacity(1400);
    page.push_str("<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table>");
    page.push_str("<tr><th>id</th><th>message</th></tr>");
    for (id, message) in &all {
        let _ = write!(page, "<tr><td>{id}</td><td>");
        push_escaped_html(&mut page, message);
        page.push_str("</td></tr>");
    }
    page.push_str("</table></body></html>");
    Ok(Response::html(200, page))
}

fn main() -> Result<(), fiber_web::Error> {
    let flags = AppFlags::new()
        .flag("db-pool", "N", "MySQL connections in the pool", Some("8"))
        .flag("setup", "on|off", "fill World and Fortune", Some("off"));
    let (options, args) = Options::from_env_and_args_with(&flags)?;
    let (size, setup): (usize, bool) = (args.get("db-pool")?, args.switch("setup")?);
    fiber_web::serve(options, move |_| {
        // From the environment, never argv: the URL holds a password.
        let url = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL=mysql://...")?;
        let pool = Pool::new(PoolConfig::new(fiber_mysql::Opts::from_url(&url)?, size))?;
        if setup {
            let mut conn = pool.get()?;
            for sql in SETUP_SQL.split(";\n").filter(|s| !s.trim().is_empty()) {
                conn.query(sql)?;
            }
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
            App::new(pool)
                .default_header("Server", "fiber_web")
                .get("/json", json)
                .on_carrier()
                .get("/plaintext", plaintext)
                .on_carrier()
                .get("/db", db)
                .get("/queries", query)
                .get("/fortunes", fortunes)
                .get("/updates", updates),
        )
    })
}
