//! A JSON API of todos in MySQL on fiber_web: list, create, show and delete; `/summary`
//! calls two upstreams at once (`fiber_web::fan_out`); `/backup` writes a file with
//! `std::fs` on `fiber_pool::blocking`'s threads, not the fiber's worker. Every handler
//! is plain code on a guarded fiber; a bad request gets a status saying what to send.
//!
//! Run: DATABASE_URL=mysql://user:pass@127.0.0.1:3306/db \
//!      cargo run --release --example todo_api -- --bind 127.0.0.1:3005
//! Try: curl -i -H 'Content-Type: application/json' -d '{"title":"milk"}' localhost:3005/todos
#![forbid(unsafe_code)]

use fiber_mysql::{Pool, PoolConfig, Row};
use fiber_web::client::{HttpClient, Url};
use fiber_web::RequestId;
use fiber_web::{fan_out, App, Json, Options, Request, Response};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

/// Longest title accepted, in characters (the column's size).
const MAX_TITLE: usize = 200;

const SCHEMA: &str = "create table if not exists todos (
    id bigint unsigned not null auto_increment primary key,
    title varchar(200) not null)";

struct Todos {
    db: Pool,
    http: HttpClient,
    /// This server's own `/todos` and `/healthz`: the two "upstreams" of `/summary`.
    upstreams: [Url; 2],
}

#[derive(Serialize, Deserialize)]
struct Todo {
    id: u64,
    title: String,
}

#[derive(Deserialize)]
struct NewTodo {
    title: String,
}

fn todo(row: &Row) -> Todo {
    Todo {
        id: row.get(0).unwrap_or_default(),
        title: row.get(1).unwrap_or_default(),
    }
}

/// `GET /todos`: every todo, oldest first.
fn list(app: &Todos, _: &Request) -> Result<Json<Vec<Todo>>, Response> {
    let mut db = app.db.checkout()?;
    let rows = db.query("select id, title from todos order by id")?;
    Ok(Json(rows.rows.iter().map(todo).collect()))
}

/// `POST /todos` with `{"title": "..."}`: 201 with the row and its `Location`.
fn create(app: &Todos, req: &Request) -> Result<Response, Response> {
    let new: NewTodo = req.json()?;
    let title = new.title.trim();
    if title.is_empty() || title.chars().count() > MAX_TITLE {
        let why = format!(
            "title must be 1 to {MAX_TITLE} characters, not {:?}",
            new.title
        );
        return Err(Response::error(422, why));
    }
    let mut db = app.db.checkout()?;
    let done = db.exec("insert into todos (title) values (?)", (title,))?;
    let id = done.last_insert_id.unwrap_or_default();
    let todo = Todo {
        id,
        title: title.into(),
    };
    Ok(Response::json(201, &todo).header("Location", format!("/todos/{id}")))
}

/// `GET /todos/{id}`: the todo, or 404.
fn show(app: &Todos, req: &Request) -> Result<Json<Todo>, Response> {
    let id: u64 = req.param("id")?;
    let mut db = app.db.checkout()?;
    let found = db.exec("select id, title from todos where id = ?", (id,))?;
    match found.rows.first() {
        Some(row) => Ok(Json(todo(row))),
        None => Err(Response::error(404, format!("no todo {id}"))),
    }
}

/// `DELETE /todos/{id}`: 204, or 404 when there was none.
fn remove(app: &Todos, req: &Request) -> Result<Response, Response> {
    let id: u64 = req.param("id")?;
    let mut db = app.db.checkout()?;
    let done = db.exec("delete from todos where id = ?", (id,))?;
    if done.affected_rows == 0 {
        return Err(Response::error(404, format!("no todo {id}")));
    }
    Ok(Response::no_content())
}

/// `GET /summary`: the count of todos from one upstream and the health of another,
/// both asked at once, each on a child fiber.
fn summary(app: &Todos, _: &Request) -> Result<Json<serde_json::Value>, Response> {
    let [todos, health] = &app.upstreams;
    let got = |url: &Url| {
        app.http
            .get(url)
            .map_err(|e| Response::error(e.gateway_status(), format!("GET {url}: {e}")))
    };
    let (listed, healthy) = fan_out::scope(|s| {
        let (a, b) = (s.spawn(|| got(todos)), s.spawn(|| got(health)));
        (a.join(), b.join())
    });
    let todos: Vec<Todo> = serde_json::from_slice(&listed?.body)
        .map_err(|e| Response::error(502, format!("GET {todos}: not a list of todos: {e}")))?;
    let health = String::from_utf8_lossy(&healthy?.body).trim().to_string();
    Ok(Json(
        serde_json::json!({ "todos": todos.len(), "health": health }),
    ))
}

/// `POST /backup`: every todo, as JSON, into `$TODO_BACKUP` (default
/// `todos-backup.json`), mode 0600, written by `std::fs` on the blocking pool.
fn backup(app: &Todos, req: &Request) -> Result<Json<serde_json::Value>, Response> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    let Json(all) = list(app, req)?;
    let path = std::env::var_os("TODO_BACKUP").unwrap_or_else(|| "todos-backup.json".into());
    let text = serde_json::to_vec(&all).map_err(|e| Response::error(500, e.to_string()))?;
    let (mut file, saved) = (std::fs::OpenOptions::new(), all.len());
    file.write(true).create(true).truncate(true).mode(0o600);
    fiber_pool::blocking(move || file.open(path)?.write_all(&text))?
        .map_err(|e| Response::error(500, format!("writing the backup: {e}")))?;
    Ok(Json(serde_json::json!({ "saved": saved })))
}

fn main() -> Result<(), fiber_web::Error> {
    fiber_web::serve(Options::from_env_and_args()?, |started| {
        let url = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL=mysql://...")?;
        let db = Pool::new(PoolConfig::new(fiber_mysql::Opts::from_url(&url)?, 10))?;
        db.get()?.query(SCHEMA)?;
        let own = |path: &str| Url::parse(&format!("http://{}{path}", started.addr()));
        let state = Todos {
            db,
            http: HttpClient::new(Default::default()),
            upstreams: [own("/todos")?, own("/healthz")?],
        };
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
            App::new(state)
                .get("/todos", list)
                .post("/todos", create)
                .get("/todos/{id}", show)
                .delete("/todos/{id}", remove)
                .get("/summary", summary)
                .limit(8, Duration::from_secs(5), "it calls back into this server")
                .post("/backup", backup)
                .request_ids(RequestId::default())
                .readiness(|app| app.db.ping().map_err(|e| e.to_string())),
        )
    })
}
