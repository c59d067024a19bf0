//! The chunked transfer coding of request bodies (RFC 9112 section 7.1), decoded
//! incrementally from the connection's buffer within the same limits as a
//! Content-Length body.
//!
//! ```text
//! chunked-body = *chunk  last-chunk  trailer-section  CRLF
//! chunk        = chunk-size [ chunk-ext ] CRLF  chunk-data  CRLF
//! last-chunk   = 1*("0") [ chunk-ext ] CRLF
//! ```
//! Every byte the client controls is bounded: the decoded body by `max_body_bytes`
//! (413, checked when a chunk's size is read, before its data), a chunk-size line with
//! its extensions by `max_header_bytes` (400), the trailer section by
//! `max_header_bytes` and `max_headers` (431, like a head). Extensions and trailer
//! fields are read and discarded (section 7.1.1 and 7.1.2 allow it). Chunk framing
//! lines must end in CRLF: a bare LF inside a body is where a proxy and a server may
//! disagree about where the body ends, so it is a 400. The time limit is the
//! connection loop's (`body_timeout` for the whole body).

use crate::config::HttpLimits;
use crate::http::HttpError;

/// Where the decoder is in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expecting a chunk-size line.
    Size,
    /// Inside chunk data, this many bytes left.
    Data(usize),
    /// Expecting the CRLF that ends a chunk's data.
    DataEnd,
    /// After the last chunk: trailer fields up to an empty line.
    Trailers,
    Done,
}

/// An incremental decoder: feed it the bytes after the head as they arrive.
#[derive(Debug)]
pub struct Decoder {
    state: State,
    body: Vec<u8>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            state: State::Size,
            body: Vec::new(),
        }
    }
}

impl Decoder {
    /// Decode what `buf` holds and remove it from `buf`; `Ok(true)` once the whole
    /// body and its trailers are in (bytes after it, a pipelined request, stay in
    /// `buf`). `Ok(false)`: more bytes are needed.
    pub fn feed(&mut self, buf: &mut Vec<u8>, limits: &HttpLimits) -> Result<bool, HttpError> {
        let mut at = 0;
        let result = self.decode(buf, &mut at, limits);
        buf.drain(..at);
        result
    }

    /// The decoded body (call once `feed` returned `Ok(true)`).
    pub fn into_body(self) -> Vec<u8> {
        self.body
    }

    fn decode(
        &mut self,
        buf: &[u8],
        at: &mut usize,
        limits: &HttpLimits,
    ) -> Result<bool, HttpError> {
        loop {
            let rest = &buf[*at..];
            match self.state {
                State::Done => return Ok(true),
                State::Size => {
                    let Some(line) = crlf_line(rest, limits.max_header_bytes, "chunk-size line")?
                    else {
                        return Ok(false);
                    };
                    let size = chunk_size(&rest[..line])?;
                    *at += line + 2;
                    if size > limits.max_body_bytes - self.body.len() {
                        return Err(HttpError::BodyTooLarge {
                            limit: limits.max_body_bytes,
                        });
                    }
                    self.state = if size == 0 {
                        State::Trailers
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(left) => {
                    if rest.is_empty() {
                        return Ok(false);
                    }
                    let n = left.min(rest.len());
                    self.body.extend_from_slice(&rest[..n]);
                    *at += n;
                    self.state = if n == left {
                        State::DataEnd
                    } else {
                        State::Data(left - n)
                    };
                }
                State::DataEnd => match rest {
                    [b'\r', b'\n', ..] => {
                        *at += 2;
                        self.state = State::Size;
                    }
                    [] | [b'\r'] => return Ok(false),
                    _ => {
                        return Err(HttpError::Malformed(
                            "chunk data is not followed by CRLF: the chunk is longer than its \
                             size says"
                                .into(),
                        ))
                    }
                },
                State::Trailers => {
                    let mut fields = vec![httparse::EMPTY_HEADER; limits.max_headers];
                    match httparse::parse_headers(rest, &mut fields) {
                        Ok(httparse::Status::Complete((n, _))) if n <= limits.max_header_bytes => {
                            *at += n;
                            self.state = State::Done;
                        }
                        Ok(httparse::Status::Partial) if rest.len() <= limits.max_header_bytes => {
                            return Ok(false)
                        }
                        Ok(_) => {
                            return Err(HttpError::HeadTooLarge {
                                limit: limits.max_header_bytes,
                            })
                        }
                        Err(httparse::Error::TooManyHeaders) => {
                            return Err(HttpError::TooManyHeaders {
                                limit: limits.max_headers,
                            })
                        }
                        Err(e) => {
                            return Err(HttpError::Malformed(format!(
                                "bad trailer section after the last chunk: {e}"
                            )))
                        }
                    }
                }
            }
        }
    }
}

/// The length of the line at the start of `rest` without its CRLF, `None` if it has not
/// all arrived; longer than `max` or ended by a bare LF is a 400.
fn crlf_line(rest: &[u8], max: usize, what: &str) -> Result<Option<usize>, HttpError> {
    match rest.iter().take(max + 2).position(|&b| b == b'\n') {
        Some(lf) if lf > 0 && rest[lf - 1] == b'\r' => Ok(Some(lf - 1)),
        Some(_) => Err(HttpError::Malformed(format!(
            "a {what} in a chunked body ends in a bare LF: end it with CRLF"
        ))),
        None if rest.len() < max + 2 => Ok(None),
        None => Err(HttpError::Malformed(format!(
            "a {what} in a chunked body is longer than {max} bytes"
        ))),
    }
}

/// Whether `ext` is a `chunk-ext` (RFC 9112 7.1.1):
/// `*( BWS ";" BWS token [ BWS "=" BWS ( token / quoted-string ) ] )`. A quoted string
/// must close on its line and holds no CR, LF or control byte (section 5.6.4): a
/// recipient that read an unclosed one differently from a proxy in front would see
/// another request in the body.
fn chunk_ext_ok(ext: &[u8]) -> bool {
    fn is_tchar(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
    }
    fn skip_ws(ext: &[u8], mut at: usize) -> usize {
        while at < ext.len() && (ext[at] == b' ' || ext[at] == b'\t') {
            at += 1;
        }
        at
    }
    fn token_end(ext: &[u8], at: usize) -> usize {
        at + ext[at..].iter().take_while(|&&b| is_tchar(b)).count()
    }
    let mut at = skip_ws(ext, 0);
    while at < ext.len() {
        if ext[at] != b';' {
            return false;
        }
        at = skip_ws(ext, at + 1);
        let name_end = token_end(ext, at);
        if name_end == at {
            return false;
        }
        at = skip_ws(ext, name_end);
        if at < ext.len() && ext[at] == b'=' {
            at = skip_ws(ext, at + 1);
            if at < ext.len() && ext[at] == b'"' {
                at += 1;
                loop {
                    match ext.get(at) {
                        None => return false, // never closed
                        Some(b'"') => break,
                        Some(b'\\') => match ext.get(at + 1) {
                            Some(&b) if b == b'\t' || (b' '..0x7f).contains(&b) => at += 2,
                            _ => return false,
                        },
                        Some(&b) if b == b'\t' || (b' '..0x7f).contains(&b) => at += 1,
                        Some(_) => return false,
                    }
                }
                at += 1;
            } else {
                let value_end = token_end(ext, at);
                if value_end == at {
                    return false;
                }
                at = value_end;
            }
            at = skip_ws(ext, at);
        }
    }
    true
}

/// `chunk-size [ chunk-ext ]`: hex digits, then extensions as RFC 9112 7.1.1 writes
/// them ([`chunk_ext_ok`]).
fn chunk_size(line: &[u8]) -> Result<usize, HttpError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(HttpError::Malformed(format!(
            "chunk size '{}' is not a hexadecimal number",
            String::from_utf8_lossy(line)
        )));
    }
    if !chunk_ext_ok(&line[digits..]) {
        return Err(HttpError::Malformed(format!(
            "chunk size line '{}' is not 'HEX[;name[=value]]...' (a value a token or a \
             closed quoted string)",
            String::from_utf8_lossy(line)
        )));
    }
    line[..digits].iter().try_fold(0usize, |n, &d| {
        n.checked_mul(16)
            .and_then(|n| n.checked_add((d as char).to_digit(16).unwrap_or(0) as usize))
            .ok_or_else(|| {
                HttpError::Malformed(format!(
                    "chunk size {} overflows",
                    String::from_utf8_lossy(&line[..digits])
                ))
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `input` in pieces of `step` bytes; the body and what was left of the
    /// piece that completed it (`Err(0)`: never complete).
    fn decode(input: &[u8], step: usize, limits: &HttpLimits) -> Result<(Vec<u8>, Vec<u8>), u16> {
        let mut d = Decoder::default();
        let mut buf = Vec::new();
        for piece in input.chunks(step.max(1)) {
            buf.extend_from_slice(piece);
            if d.feed(&mut buf, limits).map_err(|e| e.status())? {
                return Ok((d.into_body(), buf));
            }
        }
        Err(0)
    }

    #[test]
    fn bodies_decode_whole_or_a_byte_at_a_time() {
        let l = HttpLimits::default();
        let input = b"3;name=val\r\nabc\r\nA ; a ; q = \"s; \\\"t\\\" \" ;z\r\n0123456789\r\n0;end\r\nX-T: 1\r\n\r\nGET";
        for step in [1, 2, 7, input.len()] {
            let (body, _) = decode(input, step, &l).unwrap();
            assert_eq!(body, b"abc0123456789", "step {step}");
        }
        let (_, rest) = decode(input, input.len(), &l).unwrap();
        assert_eq!(rest, b"GET");
        assert_eq!(decode(b"0\r\n\r\n", 1, &l).unwrap().0, b"");
    }

    #[test]
    fn bad_framing_is_refused() {
        let l = HttpLimits::default();
        for (input, status) in [
            (&b"x\r\n"[..], 400),
            (b"3\nabc\r\n0\r\n\r\n", 400),
            (b"3\r\nabcd\r\n0\r\n\r\n", 400),
            (b"3 junk\r\nabc\r\n", 400),
            // A quoted extension value that never closes: what follows must not be
            // read as body (or as the next request).
            (b"3;a=\"open\r\nabc\r\n0\r\n\r\n", 400),
            (b"3;a=\"x\\\"\r\nabc\r\n0\r\n\r\n", 400),
            (b"3;=v\r\nabc\r\n0\r\n\r\n", 400),
            (b"3;a=\r\nabc\r\n0\r\n\r\n", 400),
            (b"3;a b\r\nabc\r\n0\r\n\r\n", 400),
            (b"3;a=\"x\"y\r\nabc\r\n0\r\n\r\n", 400),
            (b"10000000000000000\r\n", 400),
            (b"fffffffffffffff\r\n", 413),
        ] {
            assert_eq!(
                decode(input, input.len(), &l).map(|_| ()),
                Err(status),
                "{}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn limits_bound_the_body_the_size_line_and_the_trailers() {
        let l = HttpLimits {
            max_body_bytes: 4,
            max_header_bytes: 32,
            max_headers: 2,
            ..HttpLimits::default()
        };
        assert!(decode(b"2\r\nab\r\n2\r\ncd\r\n0\r\n\r\n", 3, &l).is_ok());
        assert_eq!(
            decode(b"2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n", 3, &l).map(|_| ()),
            Err(413)
        );
        let long_ext = format!("1;{}\r\n", "e".repeat(40));
        assert_eq!(
            decode(long_ext.as_bytes(), 1, &l).map(|_| ()),
            Err(400),
            "an endless extension"
        );
        let big_trailer = format!("0\r\nX: {}\r\n\r\n", "t".repeat(40));
        assert_eq!(decode(big_trailer.as_bytes(), 5, &l).map(|_| ()), Err(431));
        assert_eq!(
            decode(b"0\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", 100, &l).map(|_| ()),
            Err(431)
        );
    }
}
