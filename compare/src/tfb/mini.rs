//! TechEmpower's six tests on raw may_minihttp + fiber_mysql: one may coroutine per
//! connection running the handler straight through (no fiber pool, no guard pages),
//! may_minihttp's own pipelined writes, `Server` and `Date`; the database through a
//! fiber_mysql pool of plain connections (`Pool::get`, no `Lent`), its prepared
//! statements, one batched `UPDATE`.

use std::io;

use may_minihttp::{HttpService, Request, Response};

use super::{fortunes_page, queries, random_ids, update_params, update_sql, World, HELLO};

const JSON: &str = "Content-Type: application/json";

/// The service each connection gets: the shared pool.
#[derive(Clone)]
struct Tfb {
    db: fiber_mysql::Pool,
}

/// Serve on `bind` with `threads` may workers and a pool of `pool` connections to
/// `opts`' database, until the process ends; `ready` gets the address it listens on.
pub fn serve(
    bind: std::net::SocketAddr,
    opts: &fiber_mysql::Opts,
    pool: usize,
    threads: usize,
    ready: impl FnOnce(std::net::SocketAddr),
) -> Result<(), String> {
    may::config().set_workers(threads);
    let db = fiber_mysql::Pool::new(fiber_mysql::PoolConfig::new(opts.clone(), pool))
        .map_err(|e| format!("cannot open the MySQL pool: {e}"))?;
    let (addr, accept) = crate::mini::listen(bind, Tfb { db }).map_err(|e| e.to_string())?;
    ready(addr);
    accept
        .join()
        .map_err(|_| "the server's accept loop panicked".to_string())
}

/// The rows of `ids`, each read by its own statement, pipelined (`exec_many`: one
/// round trip for them all, as may-minihttp's own TFB entry pipelines its queries).
fn worlds(conn: &mut fiber_mysql::PooledConn, ids: &[i32]) -> fiber_mysql::Result<Vec<World>> {
    let found = conn.exec_many(
        "SELECT id, randomNumber FROM World WHERE id = ?",
        ids.iter().map(|&id| (id,)),
    )?;
    Ok(ids
        .iter()
        .zip(&found)
        .map(|(&id, r)| World {
            id,
            random_number: r.rows.first().and_then(|r| r.get::<i32, _>(1)).unwrap_or(0),
        })
        .collect())
}

fn json(rsp: &mut Response, value: &impl serde::Serialize) -> io::Result<()> {
    let body = serde_json::to_vec(value).map_err(io::Error::other)?;
    rsp.header(JSON).body_vec(body);
    Ok(())
}

fn db_failed(rsp: &mut Response, e: fiber_mysql::Error) -> io::Result<()> {
    rsp.status_code(500, "Internal Server Error")
        .body_vec(e.to_string().into_bytes());
    Ok(())
}

impl HttpService for Tfb {
    fn call(&mut self, req: Request, rsp: &mut Response) -> io::Result<()> {
        let (path, query) = req.path().split_once('?').unwrap_or((req.path(), ""));
        match path {
            "/json" => {
                #[derive(serde::Serialize)]
                struct Message {
                    message: &'static str,
                }
                json(rsp, &Message { message: HELLO })
            }
            "/plaintext" => {
                rsp.header("Content-Type: text/plain").body(HELLO);
                Ok(())
            }
            "/db" | "/queries" | "/updates" => {
                let n = if path == "/db" { 1 } else { queries(query) };
                let update = path == "/updates";
                let done = self.db.get().and_then(|mut conn| {
                    let mut found = worlds(&mut conn, &random_ids(n))?;
                    if update {
                        for (w, number) in found.iter_mut().zip(random_ids(n)) {
                            w.random_number = number;
                        }
                        let params: Vec<fiber_mysql::Value> =
                            update_params(&found).into_iter().map(Into::into).collect();
                        conn.exec(&update_sql(n), params)?;
                    }
                    Ok(found)
                });
                match done {
                    Ok(found) if path == "/db" => json(rsp, &found[0]),
                    Ok(found) => json(rsp, &found),
                    Err(e) => db_failed(rsp, e),
                }
            }
            "/fortunes" => {
                let rows = self
                    .db
                    .get()
                    .and_then(|mut conn| conn.exec("SELECT id, message FROM Fortune", ()));
                match rows {
                    Ok(found) => {
                        let fortunes = found
                            .rows
                            .into_iter()
                            .map(|mut r| {
                                let id = r.take::<i32, _>(0).unwrap_or(0);
                                (id, r.take::<String, _>(1).unwrap_or_default())
                            })
                            .collect();
                        rsp.header("Content-Type: text/html; charset=utf-8")
                            .body_vec(fortunes_page(fortunes).into_bytes());
                        Ok(())
                    }
                    Err(e) => db_failed(rsp, e),
                }
            }
            _ => {
                rsp.status_code(404, "Not Found");
                Ok(())
            }
        }
    }
}
