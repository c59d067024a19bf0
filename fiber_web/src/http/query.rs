//! Reading a query string: one rule for both runtimes. The fiber server's
//! [`Request::query_param`](crate::http::Request::query_param) and the async twin's
//! handlers (axum's raw query) both call [`query_param`], so `?q=rails+3` means the
//! same on either.

/// The first value of parameter `name` in `query` (the part after `?`), form-decoded
/// by `form_urlencoded` (`+` is a space, `%41` is `A`); a name without `=` has the
/// empty value.
pub fn query_param(query: &str, name: &str) -> Option<String> {
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::query_param;

    #[test]
    fn the_first_value_form_decoded() {
        let q = "q=rails+3&sleep=0.5&e=%41&flag&q=second";
        assert_eq!(query_param(q, "q").as_deref(), Some("rails 3"));
        assert_eq!(query_param(q, "sleep").as_deref(), Some("0.5"));
        assert_eq!(query_param(q, "e").as_deref(), Some("A"));
        assert_eq!(query_param(q, "flag").as_deref(), Some(""));
        assert_eq!(query_param(q, "missing"), None);
        assert_eq!(query_param("", "q"), None);
    }
}
