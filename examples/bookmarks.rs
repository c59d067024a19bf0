//! A bookmarks service on fiber_web and fiber_mysql, the public API only: an API-key
//! layer on the `/bookmarks` group that puts the caller's `User` on the request (an
//! extension), a route layer that lets only admins delete, rows read into structs
//! (`#[derive(FromRow)]`), one `insert` helper that takes a checkout or a transaction
//! (`Queryable`), an optimistic-version PATCH and an all-or-nothing import in
//! transactions, and every error as `application/problem+json` with the request id
//! when the client asks for JSON.
//!
//! Run: DATABASE_URL=mysql://user:pass@127.0.0.1:3306/db BOOKMARKS_KEYS=k1:ada:admin,k2:bob \
//!      cargo run --release --example bookmarks -- --bind 127.0.0.1:3006
//! Try: curl -H 'Authorization: Bearer k1' -H 'Accept: application/json' localhost:3006/bookmarks/x
#![forbid(unsafe_code)]

use std::collections::HashMap;

use fiber_mysql::{FromRow, Pool, PoolConfig, Queryable};
use fiber_web::layers::Next;
use fiber_web::{App, Json, Location, Options, Problem, Request, RequestId, Response, Routes};
use serde::{Deserialize, Serialize};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

const SCHEMA: &str = "create table if not exists bookmarks (\
    id bigint unsigned not null auto_increment primary key, owner varchar(64) not null, \
    url varchar(500) not null, title varchar(200) not null, version int unsigned not null \
    default 1, unique key owner_url (owner, url))";

struct Service {
    db: Pool,
    keys: HashMap<String, User>, // API key -> who it is
}

#[derive(Clone)]
struct User {
    name: String,
    admin: bool,
}

#[derive(Serialize, FromRow)]
struct Bookmark {
    id: u64,
    url: String,
    title: String,
    version: u32,
}

#[derive(Deserialize)]
struct NewBookmark {
    url: String,
    title: String,
}

#[derive(Deserialize)]
struct Rename {
    title: String,
    version: u32,
}

type Answer<T> = Result<T, Response>;

/// The `/bookmarks` group's layer: a known `Authorization: Bearer KEY`, or a 401.
fn api_key(svc: &Service, req: &mut Request, next: Next<'_, Service>) -> Response {
    let key = req
        .header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "));
    match key.and_then(|k| svc.keys.get(k)).cloned() {
        Some(user) => {
            req.extensions_mut().insert(user);
            next.run(svc, req)
        }
        None => Problem::new(
            401,
            "unauthorized",
            "send Authorization: Bearer <your API key>",
        )
        .into(),
    }
}

/// The delete route's layer: admins only.
fn admins_only(svc: &Service, req: &mut Request, next: Next<'_, Service>) -> Response {
    match req.extensions().get::<User>() {
        Some(user) if user.admin => next.run(svc, req),
        _ => Problem::new(403, "forbidden", "only an admin may delete bookmarks").into(),
    }
}

fn user(req: &Request) -> &User {
    req.extensions()
        .get()
        .expect("the api_key layer runs first")
}

fn not_found(id: u64) -> Response {
    Problem::new(404, "not-found", format!("no bookmark {id} of yours")).into()
}

/// Insert one bookmark of `owner`'s, through a checkout or inside a transaction: a
/// URL the owner already saved is a 409 naming the field.
fn insert(db: &mut impl Queryable, owner: &str, new: &NewBookmark) -> Answer<u64> {
    let sql = "insert into bookmarks (owner, url, title) values (?, ?, ?)";
    match db.exec(sql, (owner, &new.url, &new.title)) {
        Ok(done) => Ok(done.last_insert_id.unwrap_or_default()),
        Err(fiber_mysql::Error::Server { code: 1062, .. }) => {
            let duplicate = Problem::new(409, "duplicate", "you already saved this url");
            Err(duplicate.with_field("url", Location::Body).into())
        }
        Err(e) => Err(e.into()),
    }
}

fn find(db: &mut impl Queryable, owner: &str, id: u64, lock: &str) -> Answer<Bookmark> {
    let sql =
        format!("select id, url, title, version from bookmarks where owner = ? and id = ?{lock}");
    db.exec_first(&sql, (owner, id))?
        .ok_or_else(|| not_found(id))
}

fn list(svc: &Service, req: &Request) -> Answer<Json<Vec<Bookmark>>> {
    let sql = "select id, url, title, version from bookmarks where owner = ? order by id";
    Ok(Json(svc.db.checkout()?.exec_as(sql, (&user(req).name,))?))
}

fn create(svc: &Service, req: &Request) -> Answer<Response> {
    let new: NewBookmark = req.json()?;
    let owner = &user(req).name;
    let mut db = svc.db.checkout()?;
    let id = insert(&mut db, owner, &new)?;
    let saved = find(&mut db, owner, id, "")?;
    Ok(Response::json(201, &saved).header("Location", format!("/bookmarks/{id}")))
}

fn show(svc: &Service, req: &Request) -> Answer<Json<Bookmark>> {
    let id = req.param("id")?;
    Ok(Json(find(
        &mut svc.db.checkout()?,
        &user(req).name,
        id,
        "",
    )?))
}

/// `PATCH /bookmarks/{id}` with `{"title", "version"}`: renamed only if `version` is
/// still the stored one (else a 409 with the current version), in a transaction.
fn rename(svc: &Service, req: &Request) -> Answer<Json<Bookmark>> {
    let (id, change): (u64, Rename) = (req.param("id")?, req.json()?);
    let owner = &user(req).name;
    svc.db.checkout()?.transaction(|tx| {
        let found = find(tx, owner, id, " for update")?;
        if found.version != change.version {
            let stale = format!("bookmark {id} is at version {}: reload it", found.version);
            return Err(Problem::new(409, "stale-version", stale)
                .with_field("version", Location::Body)
                .into());
        }
        let sql = "update bookmarks set title = ?, version = version + 1 where id = ?";
        tx.exec(sql, (&change.title, id))?;
        Ok(Json(find(tx, owner, id, "")?))
    })
}

/// `POST /bookmarks/import` with a list: all saved, or none (a duplicate rolls back).
fn import(svc: &Service, req: &Request) -> Answer<Json<serde_json::Value>> {
    let all: Vec<NewBookmark> = req.json()?;
    let owner = &user(req).name;
    svc.db.checkout()?.transaction(|tx| {
        let ids = all
            .iter()
            .map(|new| insert(tx, owner, new))
            .collect::<Answer<Vec<_>>>()?;
        Ok(Json(serde_json::json!({ "imported": ids.len() })))
    })
}

fn remove(svc: &Service, req: &Request) -> Answer<Response> {
    let id = req.param("id")?;
    let sql = "delete from bookmarks where id = ?";
    match svc.db.checkout()?.exec(sql, (id,))?.affected_rows {
        0 => Err(not_found(id)),
        _ => Ok(Response::no_content()),
    }
}

/// `BOOKMARKS_KEYS=key:name[:admin],...`.
fn keys(spec: &str) -> HashMap<String, User> {
    let entry = |e: &str| {
        let mut parts = e.split(':');
        let (key, name) = (parts.next()?, parts.next()?);
        let admin = parts.next() == Some("admin");
        Some((
            key.to_string(),
            User {
                name: name.to_string(),
                admin,
            },
        ))
    };
    spec.split(',').filter_map(entry).collect()
}

fn main() -> Result<(), fiber_web::Error> {
    fiber_web::serve(Options::from_env_and_args()?, |_| {
        let url = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL=mysql://...")?;
        let db = Pool::new(PoolConfig::new(fiber_mysql::Opts::from_url(&url)?, 10))?;
        db.get()?.query(SCHEMA)?;
        let keys = keys(&std::env::var("BOOKMARKS_KEYS").unwrap_or_default());
        let bookmarks = Routes::new()
            .get("/", list)
            .post("/", create)
            .post("/import", import)
            .get("/{id}", show)
            .patch("/{id}", rename)
            .delete("/{id}", remove)
            .route_layer(admins_only)
            .layer(api_key);
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
            App::new(Service { db, keys })
                .nest("/bookmarks", bookmarks)
                .request_ids(RequestId::default())
                .readiness(|svc| svc.db.ping().map_err(|_| "the database is down".into())),
        )
    })
}
