//! `/twitter`: a sub-app with its own router, mounted at a prefix. It GETs the
//! upstream JSON API (`{"results":[{"text":...}]}`) and renders the texts joined by
//! `</br>`, as the original demo did with the Twitter search API.

use crate::app::{upstream_error, AppState};
use fiber_web::client::{ClientResponse, Url};
use fiber_web::html::escape_html;
use fiber_web::{Request, Response, Routes};

/// The sub-app's routes, written without knowing where they are mounted.
pub fn routes() -> Routes<AppState> {
    Routes::new().get("/", index).named("twitter")
}

/// `GET /twitter`: the upstream's texts, HTML-escaped, joined by `</br>`.
pub fn index(state: &AppState, _req: &Request) -> Response {
    page(&state.upstream, state.http.get(&state.upstream))
}

/// What `/twitter` answers for the outcome of its upstream call (shared with the
/// twin): the rendered texts, or a 502 (504 on a timeout) naming the upstream.
pub fn page(url: &Url, got: Result<ClientResponse, fiber_web::Error>) -> Response {
    let resp = match got {
        Ok(resp) => resp,
        Err(e) => return upstream_error(url, &e),
    };
    if resp.status != 200 {
        return Response::error(502, format!("GET {url} answered {}, not 200", resp.status));
    }
    match render(&resp.body) {
        Ok(html) => Response::html(200, html),
        Err(why) => Response::error(502, format!("GET {url} returned {why}")),
    }
}

/// Decode `{"results":[{"text":...}]}` and join the escaped texts with `</br>`.
pub fn render(body: &[u8]) -> Result<String, String> {
    #[derive(serde::Deserialize)]
    struct Search {
        results: Vec<Tweet>,
    }
    #[derive(serde::Deserialize)]
    struct Tweet {
        text: String,
    }
    let search: Search = serde_json::from_slice(body)
        .map_err(|e| format!("JSON that is not {{\"results\":[{{\"text\":...}}]}}: {e}"))?;
    Ok(search
        .results
        .iter()
        .map(|t| escape_html(&t.text))
        .collect::<Vec<_>>()
        .join("</br>"))
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn texts_are_joined_and_escaped() {
        let body = br#"{"results":[{"text":"rails 3 <b>rocks</b>"},{"text":"fibers & rails 3"}]}"#;
        assert_eq!(
            render(body).unwrap(),
            "rails 3 &lt;b&gt;rocks&lt;/b&gt;</br>fibers &amp; rails 3"
        );
        assert_eq!(render(br#"{"results":[]}"#).unwrap(), "");
    }

    #[test]
    fn other_json_is_an_error_that_shows_the_expected_shape() {
        let e = render(b"{\"statuses\":[]}").unwrap_err();
        assert!(e.contains("results"), "{e}");
        assert!(render(b"<html>").is_err());
    }
}
