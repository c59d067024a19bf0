//! A verifier of TechEmpower's six tests, written from the rules of FrameworkBenchmarks'
//! `toolset/test_types` (json, plaintext, db, query, fortune, update), run over a socket
//! against any of the three servers: the fiber_web example (`tests/techempower.rs`) and
//! the rig's axum and raw may_minihttp servers (`compare/tests/tfb.rs`). Each check
//! panics naming the test, the request and what the rule wants.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::{parse_one, Resp};

/// A kept-alive connection: requests go out one after another on it, as TFB's load
/// generator sends them; a response with `Connection: close` fails the rule.
pub struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    /// Send `GET path` `depth` times in one write (pipelined), and read as many answers.
    pub fn pipelined(&mut self, path: &str, depth: usize) -> Vec<Resp> {
        let one = format!("GET {path} HTTP/1.1\r\nHost: tfb-server\r\nAccept: */*\r\n\r\n");
        self.stream.write_all(one.repeat(depth).as_bytes()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut got = Vec::new();
        while got.len() < depth {
            if let Some((resp, used)) = parse_one(&self.buf) {
                self.buf.drain(..used);
                got.push(resp);
                continue;
            }
            assert!(
                Instant::now() < deadline,
                "GET {path}: {} of {depth} answers",
                got.len()
            );
            let mut chunk = [0u8; 64 * 1024];
            let n = self.stream.read(&mut chunk).unwrap();
            assert!(
                n > 0,
                "GET {path}: the server closed a kept-alive connection"
            );
            self.buf.extend_from_slice(&chunk[..n]);
        }
        got
    }

    /// `GET path`, checked against the rules every test shares.
    pub fn get(&mut self, path: &str) -> Resp {
        let resp = self.pipelined(path, 1).remove(0);
        common_rules(path, &resp);
        resp
    }
}

/// Every response: 200, `Server` and a current `Date`, a Content-Length, kept alive.
fn common_rules(path: &str, resp: &Resp) {
    assert_eq!(resp.status, 200, "GET {path}: {resp:?}");
    assert!(
        resp.header("server").is_some_and(|s| !s.is_empty()),
        "GET {path}: no Server: {resp:?}"
    );
    let date = resp
        .header("date")
        .unwrap_or_else(|| panic!("GET {path}: no Date: {resp:?}"));
    assert!(
        date.ends_with(" GMT") && date.len() == 29,
        "GET {path}: Date {date:?}"
    );
    assert!(
        resp.header("content-length").is_some(),
        "GET {path}: no Content-Length"
    );
    let closes = resp
        .header("connection")
        .is_some_and(|c| c.eq_ignore_ascii_case("close"));
    assert!(!closes, "GET {path}: the connection was not kept alive");
}

fn content_type(path: &str, resp: &Resp, want: &str) {
    let got = resp
        .header("content-type")
        .unwrap_or("")
        .to_ascii_lowercase();
    assert!(
        got.starts_with(want),
        "GET {path}: Content-Type {got:?}, want {want}"
    );
}

/// A `World` row as the rules want it: `{"id":N,"randomNumber":N}`, both 1 to 10,000.
fn world(path: &str, value: &serde_json::Value) -> (i64, i64) {
    let object = value
        .as_object()
        .unwrap_or_else(|| panic!("GET {path}: {value} is no object"));
    assert_eq!(object.len(), 2, "GET {path}: {value} has other keys");
    let field = |key: &str| {
        let n = object.get(key).and_then(|v| v.as_i64());
        let n = n.unwrap_or_else(|| panic!("GET {path}: {value} has no number {key}"));
        assert!(
            (1..=10_000).contains(&n),
            "GET {path}: {key} {n} is not 1 to 10,000"
        );
        n
    };
    (field("id"), field("randomNumber"))
}

fn json_body(path: &str, resp: &Resp) -> serde_json::Value {
    content_type(path, resp, "application/json");
    serde_json::from_str(&resp.body).unwrap_or_else(|e| panic!("GET {path}: {e}: {}", resp.body))
}

/// The rows of `/queries` or `/updates` with `param`: `want` of them.
fn worlds(client: &mut Client, route: &str, param: &str, want: usize) -> Vec<(i64, i64)> {
    let path = format!("{route}?queries={param}");
    let body = json_body(&path, &client.get(&path));
    let rows = body
        .as_array()
        .unwrap_or_else(|| panic!("GET {path}: {body} is no array"));
    assert_eq!(rows.len(), want, "GET {path}: {} rows", rows.len());
    rows.iter().map(|r| world(&path, r)).collect()
}

/// Every rule of the six tests against `addr`; `db` reads the server's database (the
/// fortunes it holds, the rows `/updates` wrote).
pub fn verify(addr: SocketAddr, db: &fiber_mysql::Opts) {
    let mut client = Client::connect(addr);

    let resp = client.get("/json");
    assert_eq!(
        json_body("/json", &resp),
        serde_json::json!({"message": "Hello, World!"})
    );

    for resp in client.pipelined("/plaintext", 16) {
        common_rules("/plaintext (16 pipelined)", &resp);
        content_type("/plaintext", &resp, "text/plain");
        assert_eq!(resp.body, "Hello, World!");
    }

    world("/db", &json_body("/db", &client.get("/db")));

    for (param, want) in [
        ("", 1),
        ("0", 1),
        ("foo", 1),
        ("1", 1),
        ("20", 20),
        ("501", 500),
    ] {
        worlds(&mut client, "/queries", param, want);
    }
    // Random rows: twenty reads that all gave one id would be no random read.
    let ids: std::collections::HashSet<i64> = worlds(&mut client, "/queries", "20", 20)
        .iter()
        .map(|w| w.0)
        .collect();
    assert!(
        ids.len() > 1,
        "/queries?queries=20 read one id twenty times"
    );

    fortunes(&mut client, db);

    let mut conn = fiber_mysql::Conn::connect(db).expect("the server's database");
    for (param, want) in [("foo", 1), ("5", 5), ("501", 500)] {
        let rows = worlds(&mut client, "/updates", param, want);
        // What the database holds now is what the answer said (an id read twice was
        // given two numbers, and the batch keeps one of them).
        let mut given: std::collections::HashMap<i64, Vec<i64>> = Default::default();
        for (id, number) in rows {
            given.entry(id).or_default().push(number);
        }
        for (id, numbers) in given {
            let found = conn
                .exec("SELECT randomNumber FROM World WHERE id = ?", (id,))
                .unwrap();
            let stored: i64 = found.rows[0].get(0).unwrap();
            assert!(
                numbers.contains(&stored),
                "/updates?queries={param}: World {id} holds {stored}, answered {numbers:?}"
            );
        }
    }
}

/// `/fortunes`: every row of `Fortune` and the one added at request time, sorted by
/// message, each escaped, in the rules' page, as UTF-8 HTML.
fn fortunes(client: &mut Client, db: &fiber_mysql::Opts) {
    let resp = client.get("/fortunes");
    content_type("/fortunes", &resp, "text/html");
    assert!(
        resp.header("content-type")
            .unwrap()
            .to_ascii_lowercase()
            .contains("charset=utf-8"),
        "/fortunes: not declared UTF-8"
    );
    let mut conn = fiber_mysql::Conn::connect(db).expect("the server's database");
    let rows = conn.query("SELECT id, message FROM Fortune").unwrap();
    let mut want: Vec<(i64, String)> = rows
        .rows
        .iter()
        .map(|r| (r.get(0).unwrap(), r.get(1).unwrap()))
        .collect();
    assert!(
        want.iter().any(|(_, m)| m.contains("フレームワーク")),
        "the table lacks the Japanese fortune"
    );
    want.push((0, "Additional fortune added at request time.".into()));
    want.sort_by(|a, b| a.1.cmp(&b.1));

    let body = &resp.body;
    let head = "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table>\
                <tr><th>id</th><th>message</th></tr>";
    assert!(
        body.starts_with(head),
        "/fortunes: not the rules' page: {body}"
    );
    assert!(
        body.ends_with("</table></body></html>"),
        "/fortunes: {body}"
    );
    let rows: Vec<(i64, String)> = body[head.len()..]
        .split("<tr>")
        .filter(|row| !row.is_empty())
        .map(|row| {
            let cells = row
                .trim_end_matches("</table></body></html>")
                .trim_end_matches("</tr>");
            let (id, message) = cells
                .strip_prefix("<td>")
                .and_then(|c| c.strip_suffix("</td>"))
                .and_then(|c| c.split_once("</td><td>"))
                .unwrap_or_else(|| panic!("/fortunes: a row not in the rules' shape: {row}"));
            assert!(
                !message.contains(['<', '>', '"']),
                "/fortunes: not escaped: {message}"
            );
            (id.parse().unwrap(), unescape(message))
        })
        .collect();
    assert_eq!(rows, want, "/fortunes: the rows, sorted by message");
}

/// HTML's entities back to text (the rules let a server write `'` as `&#39;` or
/// `&#x27;`).
fn unescape(text: &str) -> String {
    let mut out = text.to_string();
    for (entity, c) in [
        ("&lt;", "<"),
        ("&gt;", ">"),
        ("&quot;", "\""),
        ("&#39;", "'"),
        ("&#x27;", "'"),
    ] {
        out = out.replace(entity, c);
    }
    out.replace("&amp;", "&")
}
