//! The headers a server puts on every response (`App::default_header`: a `Server`
//! header, a security policy), kept with their wire form rendered once, when the app
//! is built: a response that sets none of their names gets them all in one copy.

use std::borrow::Cow;

/// A server's default headers, in the order they were added, with their lines.
#[derive(Clone, Debug, Default)]
pub(crate) struct DefaultHeaders {
    headers: Vec<(&'static str, Cow<'static, str>)>,
    /// Every header as `Name: value\r\n`, one after the other.
    lines: Vec<u8>,
    /// Where each header's line ends in `lines`.
    ends: Vec<usize>,
}

/// A service's headers when it has none.
static NONE: DefaultHeaders = DefaultHeaders {
    headers: Vec::new(),
    lines: Vec::new(),
    ends: Vec::new(),
};

impl DefaultHeaders {
    /// No default headers.
    pub(crate) fn none() -> &'static DefaultHeaders {
        &NONE
    }

    /// Add header `name` with `value` after those added before.
    pub(crate) fn push(&mut self, name: &'static str, value: Cow<'static, str>) {
        for piece in [name.as_bytes(), b": ", value.as_bytes(), b"\r\n"] {
            self.lines.extend_from_slice(piece);
        }
        self.ends.push(self.lines.len());
        self.headers.push((name, value));
    }

    /// Every header as (name, value), in the order added.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &(&'static str, Cow<'static, str>)> {
        self.headers.iter()
    }

    /// Bytes [`write_into`](Self::write_into) writes at most.
    pub(crate) fn wire_len(&self) -> usize {
        self.lines.len()
    }

    /// Append to `out` the line of every header whose name `own` does not claim (a
    /// response that set a header of that name itself), in one copy when it claims
    /// none of them.
    pub(crate) fn write_into(&self, out: &mut Vec<u8>, own: impl Fn(&str) -> bool) {
        if !self.headers.iter().any(|(name, _)| own(name)) {
            out.extend_from_slice(&self.lines);
            return;
        }
        let mut start = 0;
        for ((name, _), &end) in self.headers.iter().zip(&self.ends) {
            if !own(name) {
                out.extend_from_slice(&self.lines[start..end]);
            }
            start = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_written_but_for_the_names_the_response_claims() {
        let mut defaults = DefaultHeaders::default();
        defaults.push("Server", Cow::Borrowed("app"));
        defaults.push("X-Frame-Options", Cow::Owned("DENY".into()));
        let written = |own: &dyn Fn(&str) -> bool| {
            let mut out = Vec::new();
            defaults.write_into(&mut out, own);
            String::from_utf8(out).unwrap()
        };
        let all = "Server: app\r\nX-Frame-Options: DENY\r\n";
        assert_eq!(written(&|_| false), all);
        assert_eq!(defaults.wire_len(), all.len());
        assert_eq!(written(&|n| n == "Server"), "X-Frame-Options: DENY\r\n");
        assert_eq!(written(&|n| n == "X-Frame-Options"), "Server: app\r\n");
        assert_eq!(written(&|_| true), "");
        assert_eq!(DefaultHeaders::none().wire_len(), 0);
        let names: Vec<_> = defaults.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["Server", "X-Frame-Options"]);
    }
}
