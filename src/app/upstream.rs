//! `/upstream/search.json?q=...`: the default upstream of `/twitter`, the newest rows
//! of the seeded `tweets` table that contain `q`, as `{"results":[{"text":...}]}`.
//! `q` reaches MySQL only as a statement parameter.

use crate::app::{db_error, AppState};
use fiber_web::{Request, Response};

/// Longest `q` accepted, in characters.
pub const MAX_QUERY_CHARS: usize = 200;

/// The statement behind a search: `q` is a parameter, with LIKE's wildcards escaped by
/// [`like_pattern`] so that `%` and `_` in `q` match themselves. Its `limit 20` is the
/// one home of how many rows a search returns (both runtimes run this statement).
pub const SEARCH_SQL: &str = "select text from tweets where text like ? escape '!' \
                              order by created_at desc, id desc limit 20";

/// `%q%` with `!`, `%` and `_` escaped by `!`.
pub fn like_pattern(q: &str) -> String {
    let mut p = String::with_capacity(q.len() + 2);
    p.push('%');
    for c in q.chars() {
        if matches!(c, '!' | '%' | '_') {
            p.push('!');
        }
        p.push(c);
    }
    p.push('%');
    p
}

/// Check `q` (absent means every tweet).
pub fn parse_query(raw: Option<String>) -> Result<String, String> {
    let q = raw.unwrap_or_default();
    if q.chars().count() > MAX_QUERY_CHARS {
        return Err(format!(
            "q is too long: at most {MAX_QUERY_CHARS} characters"
        ));
    }
    Ok(q)
}

/// `GET /upstream/search.json?q=rails+3`.
pub fn search(state: &AppState, req: &Request) -> Response {
    let q = match parse_query(req.query_param("q")) {
        Ok(q) => q,
        Err(why) => return Response::error(400, why),
    };
    let rows = state
        .db
        .checkout()
        .and_then(|mut conn| conn.exec(SEARCH_SQL, (like_pattern(&q),)));
    match rows {
        Ok(result) => {
            let texts: Vec<serde_json::Value> = result
                .rows
                .iter()
                .map(|row| serde_json::json!({ "text": row.get::<String, _>(0).unwrap_or_default() }))
                .collect();
            Response::json(200, &serde_json::json!({ "results": texts }))
        }
        Err(e) => db_error(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_wildcards_in_q_match_themselves() {
        assert_eq!(like_pattern("rails 3"), "%rails 3%");
        assert_eq!(like_pattern("100%_!"), "%100!%!_!!%");
    }

    #[test]
    fn q_is_bounded() {
        assert_eq!(parse_query(None).unwrap(), "");
        assert!(parse_query(Some("x".repeat(MAX_QUERY_CHARS + 1))).is_err());
    }
}
