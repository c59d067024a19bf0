//! Status codes: the status line of each, whole, and which carry no body.
//!
//! Every code RFC 9110 (section 15) defines, and the ones registered beside it that
//! servers send: 103 (RFC 8297), 207/208/226/422-424/507/508 (WebDAV, delta encoding),
//! 428, 429, 431 and 511 (RFC 6585), 451 (RFC 7725). Any other code in 100-999 goes out
//! with an empty reason phrase, which RFC 9112 section 4 allows: clients read the code.

/// `HTTP/1.1 <code> <reason>\r\n`, whole: one copy per response, no decimal formatting.
/// `None` for a code this table does not name.
pub(crate) fn status_line(status: u16) -> Option<&'static str> {
    Some(match status {
        100 => "HTTP/1.1 100 Continue\r\n",
        101 => "HTTP/1.1 101 Switching Protocols\r\n",
        103 => "HTTP/1.1 103 Early Hints\r\n",
        200 => "HTTP/1.1 200 OK\r\n",
        201 => "HTTP/1.1 201 Created\r\n",
        202 => "HTTP/1.1 202 Accepted\r\n",
        203 => "HTTP/1.1 203 Non-Authoritative Information\r\n",
        204 => "HTTP/1.1 204 No Content\r\n",
        205 => "HTTP/1.1 205 Reset Content\r\n",
        206 => "HTTP/1.1 206 Partial Content\r\n",
        207 => "HTTP/1.1 207 Multi-Status\r\n",
        208 => "HTTP/1.1 208 Already Reported\r\n",
        226 => "HTTP/1.1 226 IM Used\r\n",
        300 => "HTTP/1.1 300 Multiple Choices\r\n",
        301 => "HTTP/1.1 301 Moved Permanently\r\n",
        302 => "HTTP/1.1 302 Found\r\n",
        303 => "HTTP/1.1 303 See Other\r\n",
        304 => "HTTP/1.1 304 Not Modified\r\n",
        305 => "HTTP/1.1 305 Use Proxy\r\n",
        307 => "HTTP/1.1 307 Temporary Redirect\r\n",
        308 => "HTTP/1.1 308 Permanent Redirect\r\n",
        400 => "HTTP/1.1 400 Bad Request\r\n",
        401 => "HTTP/1.1 401 Unauthorized\r\n",
        402 => "HTTP/1.1 402 Payment Required\r\n",
        403 => "HTTP/1.1 403 Forbidden\r\n",
        404 => "HTTP/1.1 404 Not Found\r\n",
        405 => "HTTP/1.1 405 Method Not Allowed\r\n",
        406 => "HTTP/1.1 406 Not Acceptable\r\n",
        407 => "HTTP/1.1 407 Proxy Authentication Required\r\n",
        408 => "HTTP/1.1 408 Request Timeout\r\n",
        409 => "HTTP/1.1 409 Conflict\r\n",
        410 => "HTTP/1.1 410 Gone\r\n",
        411 => "HTTP/1.1 411 Length Required\r\n",
        412 => "HTTP/1.1 412 Precondition Failed\r\n",
        413 => "HTTP/1.1 413 Content Too Large\r\n",
        414 => "HTTP/1.1 414 URI Too Long\r\n",
        415 => "HTTP/1.1 415 Unsupported Media Type\r\n",
        416 => "HTTP/1.1 416 Range Not Satisfiable\r\n",
        417 => "HTTP/1.1 417 Expectation Failed\r\n",
        421 => "HTTP/1.1 421 Misdirected Request\r\n",
        422 => "HTTP/1.1 422 Unprocessable Content\r\n",
        423 => "HTTP/1.1 423 Locked\r\n",
        424 => "HTTP/1.1 424 Failed Dependency\r\n",
        425 => "HTTP/1.1 425 Too Early\r\n",
        426 => "HTTP/1.1 426 Upgrade Required\r\n",
        428 => "HTTP/1.1 428 Precondition Required\r\n",
        429 => "HTTP/1.1 429 Too Many Requests\r\n",
        431 => "HTTP/1.1 431 Request Header Fields Too Large\r\n",
        451 => "HTTP/1.1 451 Unavailable For Legal Reasons\r\n",
        500 => "HTTP/1.1 500 Internal Server Error\r\n",
        501 => "HTTP/1.1 501 Not Implemented\r\n",
        502 => "HTTP/1.1 502 Bad Gateway\r\n",
        503 => "HTTP/1.1 503 Service Unavailable\r\n",
        504 => "HTTP/1.1 504 Gateway Timeout\r\n",
        505 => "HTTP/1.1 505 HTTP Version Not Supported\r\n",
        506 => "HTTP/1.1 506 Variant Also Negotiates\r\n",
        507 => "HTTP/1.1 507 Insufficient Storage\r\n",
        508 => "HTTP/1.1 508 Loop Detected\r\n",
        510 => "HTTP/1.1 510 Not Extended\r\n",
        511 => "HTTP/1.1 511 Network Authentication Required\r\n",
        _ => return None,
    })
}

/// The reason phrase of `status` (`Created` for 201), or `""` for a code not named.
pub(crate) fn reason(status: u16) -> &'static str {
    status_line(status)
        .and_then(|line| line.get(13..line.len() - 2))
        .unwrap_or("")
}

/// The status a response goes out with: its own when it is a three-digit code (RFC 9110
/// section 15), else the 500 it is (a handler's bug: `Response::text(2001, ..)`).
pub(crate) fn on_the_wire(status: u16) -> u16 {
    if (100..1000).contains(&status) {
        status
    } else {
        500
    }
}

/// Whether a response with `status` has no body and no `Content-Length` (RFC 9110
/// section 8.6: a server MUST NOT send Content-Length in a 1xx or 204 response; a 304
/// has no body, and here no Content-Length either, since the length of the
/// representation it stands for is not known to the response).
pub(crate) fn has_no_body(status: u16) -> bool {
    (100..200).contains(&status) || status == 204 || status == 304
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_line_is_well_formed_and_reasons_come_from_it() {
        for code in 100..1000u16 {
            if let Some(line) = status_line(code) {
                assert!(line.starts_with(&format!("HTTP/1.1 {code} ")), "{line}");
                assert!(line.ends_with("\r\n") && line.len() > 15, "{line:?}");
                assert!(!reason(code).is_empty() && !reason(code).contains('\r'));
            } else {
                assert_eq!(reason(code), "");
            }
        }
        for (code, said) in [
            (201, "Created"),
            (204, "No Content"),
            (308, "Permanent Redirect"),
            (409, "Conflict"),
            (415, "Unsupported Media Type"),
            (422, "Unprocessable Content"),
            (429, "Too Many Requests"),
        ] {
            assert_eq!(reason(code), said);
        }
        // Every code of RFC 9110 section 15 is named.
        for code in [
            100, 101, 200, 201, 202, 203, 204, 205, 206, 300, 301, 302, 303, 304, 305, 307, 308,
            400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416,
            417, 421, 422, 426, 500, 501, 502, 503, 504, 505,
        ] {
            assert!(status_line(code).is_some(), "{code}");
        }
    }
}
