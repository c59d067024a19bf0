//! TechEmpower's six tests on axum + mysql_async, written as a tokio team writes them:
//! `axum::serve`, handlers that take the pool as `State`, prepared statements through
//! `exec_first` (mysql_async caches them per connection), one batched `UPDATE`.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::header::{CONTENT_TYPE, SERVER};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt as _;
use axum::Router;
use mysql_async::prelude::Queryable;

use super::{fortunes_page, queries, random_ids, update_params, update_sql, World, HELLO};

/// The value of every response's `Server` header.
const SERVER_NAME: HeaderValue = HeaderValue::from_static("axum");

type Db = Arc<mysql_async::Pool>;

/// Serve on `listener` with `threads` tokio workers and a pool of `pool` connections to
/// `opts`' database, until the process ends.
pub fn serve(
    listener: std::net::TcpListener,
    opts: &fiber_mysql::Opts,
    pool: usize,
    threads: usize,
) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the tokio runtime: {e}"))?;
    let db: Db = Arc::new(mysql_async::Pool::new(crate::twin::db::async_opts(
        opts, pool,
    )));
    runtime.block_on(async move {
        // Open every connection before the first request, as the other servers do.
        let conns: Vec<_> = futures_util::future::try_join_all((0..pool).map(|_| db.get_conn()))
            .await
            .map_err(|e| format!("cannot open the MySQL pool: {e}"))?;
        drop(conns);
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("cannot use the listener: {e}"))?;
        // TCP_NODELAY on every connection, as the other two servers set it: without
        // it a pipelined batch's answers wait on the client's delayed ACK (40 ms).
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| format!("cannot use the listener: {e}"))?
            .tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
        let app = Router::new()
            .route("/json", get(json))
            .route("/plaintext", get(plaintext))
            .route("/db", get(db_one))
            .route("/queries", get(db_many))
            .route("/fortunes", get(fortunes))
            .route("/updates", get(updates))
            .with_state(db);
        axum::serve(listener, app)
            .await
            .map_err(|e| format!("the server failed: {e}"))
    })
}

/// A response with `Server` and `content_type`.
fn reply(content_type: &'static str, body: impl Into<axum::body::Body>) -> Response {
    let mut resp = Response::new(body.into());
    let headers = resp.headers_mut();
    headers.insert(SERVER, SERVER_NAME);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

fn json_reply(value: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => reply("application/json", body),
        Err(e) => failed(e),
    }
}

fn failed(e: impl std::fmt::Display) -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
}

async fn json() -> Response {
    #[derive(serde::Serialize)]
    struct Message {
        message: &'static str,
    }
    json_reply(&Message { message: HELLO })
}

async fn plaintext() -> Response {
    reply("text/plain", HELLO)
}

async fn read_worlds(
    conn: &mut mysql_async::Conn,
    ids: &[i32],
) -> Result<Vec<World>, mysql_async::Error> {
    let mut worlds = Vec::with_capacity(ids.len());
    for &id in ids {
        let row: Option<(i32, i32)> = conn
            .exec_first("SELECT id, randomNumber FROM World WHERE id = ?", (id,))
            .await?;
        let (id, random_number) = row.unwrap_or((id, 0));
        worlds.push(World { id, random_number });
    }
    Ok(worlds)
}

/// The worlds of `ids`, read on one connection.
async fn worlds(db: &Db, ids: &[i32]) -> Result<Vec<World>, mysql_async::Error> {
    read_worlds(&mut db.get_conn().await?, ids).await
}

async fn db_one(State(db): State<Db>) -> Response {
    match worlds(&db, &random_ids(1)).await {
        Ok(worlds) => json_reply(&worlds[0]),
        Err(e) => failed(e),
    }
}

async fn db_many(State(db): State<Db>, RawQuery(q): RawQuery) -> Response {
    let n = queries(q.as_deref().unwrap_or(""));
    match worlds(&db, &random_ids(n)).await {
        Ok(worlds) => json_reply(&worlds),
        Err(e) => failed(e),
    }
}

async fn fortunes(State(db): State<Db>) -> Response {
    let rows = async {
        let mut conn = db.get_conn().await?;
        conn.exec::<(i32, String), _, _>("SELECT id, message FROM Fortune", ())
            .await
    };
    match rows.await {
        Ok(rows) => reply("text/html; charset=utf-8", fortunes_page(rows)),
        Err(e) => failed(e),
    }
}

async fn updates(State(db): State<Db>, RawQuery(q): RawQuery) -> Response {
    let n = queries(q.as_deref().unwrap_or(""));
    let done = async {
        let mut conn = db.get_conn().await?;
        let mut worlds = read_worlds(&mut conn, &random_ids(n)).await?;
        for (w, number) in worlds.iter_mut().zip(random_ids(n)) {
            w.random_number = number;
        }
        conn.exec_drop(update_sql(n), update_params(&worlds))
            .await?;
        Ok::<_, mysql_async::Error>(worlds)
    };
    match done.await {
        Ok(worlds) => json_reply(&worlds),
        Err(e) => failed(e),
    }
}
