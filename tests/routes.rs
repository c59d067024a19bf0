//! Every route of the demo, over the wire, against a real MariaDB.

mod common;

use common::{get, serve};

#[test]
fn widgets_answers_oh_hai_after_its_query() {
    let app = serve(|_| {});
    let r = get(app.addr(), "/widgets?sleep=0.05");
    assert_eq!((r.status, r.body.as_str()), (200, "Oh hai"));
    let start = std::time::Instant::now();
    let r = get(app.addr(), "/widgets?sleep=0.3");
    assert_eq!(r.status, 200);
    assert!(
        start.elapsed().as_secs_f64() >= 0.3,
        "the query really slept"
    );
}

#[test]
fn a_bad_sleep_value_is_a_400_that_says_what_is_allowed() {
    let app = serve(|_| {});
    for bad in ["abc", "-1", "11", "1%3Bdrop%20table%20tweets"] {
        let r = get(app.addr(), &format!("/widgets?sleep={bad}"));
        assert_eq!(r.status, 400, "{bad}");
        assert!(r.body.contains("from 0 to 10"), "{bad}: {}", r.body);
    }
}

#[test]
fn widgets_http_calls_widgets_on_the_same_server() {
    let app = serve(|_| {});
    let r = get(app.addr(), "/widgets/http");
    assert_eq!((r.status, r.body.as_str()), (200, "Oh hai"));
    let stats = get(app.addr(), "/stats");
    let v: serde_json::Value = serde_json::from_str(&stats.body).unwrap();
    assert!(v["http_client"]["requests"].as_u64().unwrap() >= 1);
    assert!(
        v["fibers"]["routes"]["widgets"]["runs"].as_u64().unwrap() >= 1,
        "inner call ran"
    );
}

#[test]
fn twitter_renders_the_upstream_texts_joined_by_br() {
    let app = serve(|_| {});
    let r = get(app.addr(), "/twitter");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("Content-Type").unwrap().starts_with("text/html"));
    let texts: Vec<&str> = r.body.split("</br>").collect();
    assert!(texts.len() >= 5, "{}", r.body);
    assert!(
        texts.iter().all(|t| t.to_lowercase().contains("rails 3")),
        "{}",
        r.body
    );
}

#[test]
fn upstream_search_filters_with_a_parameter_and_keeps_payloads_as_text() {
    let app = serve(|_| {});
    let r = get(app.addr(), "/upstream/search.json?q=fiber");
    assert_eq!(r.status, 200);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    let results = v["results"].as_array().unwrap();
    assert!(!results.is_empty());
    assert!(results
        .iter()
        .all(|t| t["text"].as_str().unwrap().to_lowercase().contains("fiber")));
    // LIKE wildcards in q match themselves.
    let r = get(app.addr(), "/upstream/search.json?q=100%25_");
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        v["results"].as_array().unwrap().len(),
        0,
        "'100%_' is not in any tweet"
    );
    let r = get(app.addr(), "/upstream/search.json?q=100%25");
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["results"].as_array().unwrap().len(), 1);
    // Classic injection payloads find nothing and break nothing.
    for payload in [
        "%27%20OR%20%271%27%3D%271",
        "%27%3B%20DROP%20TABLE%20tweets%3B%20--",
        "%22%20OR%201%3D1%20--%20",
        "%5C%27%20OR%201%3D1%20%23",
    ] {
        let r = get(app.addr(), &format!("/upstream/search.json?q={payload}"));
        assert_eq!(r.status, 200, "{payload}: {}", r.body);
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["results"].as_array().unwrap().len(), 0, "{payload}");
    }
    let r = get(app.addr(), "/upstream/search.json?q=rails");
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert!(
        v["results"].as_array().unwrap().len() >= 5,
        "the table survived"
    );
}

#[test]
fn stats_show_every_pool_and_uptime() {
    let app = serve(|c| {
        c.web.fibers = 7;
        c.db_pool = 3;
    });
    get(app.addr(), "/widgets?sleep=0");
    let r = get(app.addr(), "/stats");
    assert_eq!(r.status, 200);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["fibers"]["size"], 7);
    assert_eq!(v["db"]["size"], 3);
    assert!(v["fibers"]["completed"].as_u64().unwrap() >= 1);
    assert!(
        v["fibers"]["routes"]["widgets"]["peak_stack_bytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    for key in ["in_use", "idle", "waiting", "total_waits", "total_wait_ms"] {
        assert!(v["db"].get(key).is_some(), "db.{key}");
    }
    assert!(v["http_client"].is_object());
    assert!(v["http_server"]["responses"]["2xx"].as_u64().unwrap() >= 1);
    assert!(v["uptime_secs"].as_f64().unwrap() >= 0.0);
}

#[test]
fn healthz_hello_unknown_paths_and_wrong_methods() {
    let app = serve(|_| {});
    let r = get(app.addr(), "/healthz");
    assert_eq!((r.status, r.body.as_str()), (200, "ok"));
    let r = get(app.addr(), "/hello");
    assert_eq!((r.status, r.body.as_str()), (200, "Hello, World!"));
    let r = get(app.addr(), "/nope");
    assert_eq!(r.status, 404);
    assert!(r.body.contains("/nope"));
    let raw = common::raw(
        app.addr(),
        b"POST /widgets HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    let r = common::parse(&raw).unwrap();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("Allow"), Some("GET, HEAD"));
}
