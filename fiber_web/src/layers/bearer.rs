//! `Authorization: Bearer <token>` (RFC 6750) required on every request the app
//! serves: a request without it, or with a token not among the allowed ones, gets a
//! 401 with `WWW-Authenticate: Bearer` and is not run. Tokens are compared in time
//! independent of where they differ, so the answer's timing does not tell a guesser
//! how much of a token was right.

use crate::http::{Problem, Request, Response};
use crate::layer::{Layer, Next};

/// The bearer-token layer; see the module's header.
pub struct BearerAuth {
    tokens: Vec<Vec<u8>>,
    realm: String,
}

impl std::fmt::Debug for BearerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens: a Debug print ends up in logs.
        f.debug_struct("BearerAuth")
            .field("tokens", &self.tokens.len())
            .field("realm", &self.realm)
            .finish()
    }
}

impl BearerAuth {
    /// Accept any of `tokens` (read them from the environment or a file, never from
    /// argv, which every local user can read). Empty tokens are ignored: with none
    /// left, every request is refused.
    pub fn new<I, T>(tokens: I) -> BearerAuth
    where
        I: IntoIterator<Item = T>,
        T: Into<String>,
    {
        BearerAuth {
            tokens: tokens
                .into_iter()
                .map(|t| t.into().into_bytes())
                .filter(|t| !t.is_empty())
                .collect(),
            realm: "api".into(),
        }
    }

    /// The realm named in `WWW-Authenticate` (default `api`).
    pub fn realm(mut self, realm: impl Into<String>) -> BearerAuth {
        self.realm = realm.into();
        self
    }

    fn accepts(&self, sent: &[u8]) -> bool {
        // Every token is compared, whatever matched: the time does not say which.
        self.tokens
            .iter()
            .fold(false, |ok, token| same(token, sent) | ok)
    }
}

/// Whether `a` and `b` are equal, in time that depends on their lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

impl<S> Layer<S> for BearerAuth {
    fn call(&self, state: &S, req: &mut Request, next: Next<'_, S>) -> Response {
        let sent = req.header("authorization").and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
        match sent {
            Some(token) if self.accepts(token.as_bytes()) => next.run(state, req),
            Some(_) => Response::from(Problem::new(
                401,
                "invalid-token",
                "the bearer token is not valid: send a valid one",
            ))
            .header(
                "WWW-Authenticate",
                format!("Bearer realm=\"{}\", error=\"invalid_token\"", self.realm),
            ),
            None => Response::from(Problem::new(
                401,
                "authentication-required",
                "authentication required: send Authorization: Bearer <token>",
            ))
            .header(
                "WWW-Authenticate",
                format!("Bearer realm=\"{}\"", self.realm),
            ),
        }
    }
}
