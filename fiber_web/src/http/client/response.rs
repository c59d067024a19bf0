//! [`ClientResponse`]: a whole response as the client read it (status, headers, the
//! de-chunked body), and what callers ask of it.

use std::borrow::Cow;

/// A whole response.
#[derive(Debug)]
pub struct ClientResponse {
    /// The status code.
    pub status: u16,
    /// The headers in the order received, names lower-cased, values trimmed.
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked; empty for HEAD, 204 and 304).
    pub body: Vec<u8>,
}

impl ClientResponse {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body decoded as JSON into `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.body)
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_by_any_case_and_the_body_as_json() {
        let r = ClientResponse {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body: br#"{"n":3}"#.to_vec(),
        };
        assert_eq!(r.header("Content-Type"), Some("application/json"));
        assert_eq!(r.header("etag"), None);
        #[derive(serde::Deserialize)]
        struct N {
            n: u32,
        }
        assert_eq!(r.json::<N>().unwrap().n, 3);
        assert!(r.json::<Vec<u8>>().is_err());
        assert!(r.is_success());
        assert_eq!(r.text(), r#"{"n":3}"#);
    }
}
