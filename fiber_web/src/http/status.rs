//! Status codes by name (`status::CREATED` is 201), the status line of each, whole, and
//! which carry no body.
//!
//! Every code RFC 9110 (section 15) defines, named as it names them, and the ones
//! registered beside it that servers send: 103 (RFC 8297), 207/208/226/422-424/507/508
//! (WebDAV, delta encoding), 428, 429, 431 and 511 (RFC 6585), 451 (RFC 7725). The
//! constants are plain `u16`s, so a bare number works wherever a name does. Any other
//! code in 100-999 goes out with an empty reason phrase, which RFC 9112 section 4
//! allows: clients read the code.

/// 100 Continue.
pub const CONTINUE: u16 = 100;
/// 101 Switching Protocols.
pub const SWITCHING_PROTOCOLS: u16 = 101;
/// 103 Early Hints.
pub const EARLY_HINTS: u16 = 103;
/// 200 OK.
pub const OK: u16 = 200;
/// 201 Created.
pub const CREATED: u16 = 201;
/// 202 Accepted.
pub const ACCEPTED: u16 = 202;
/// 203 Non-Authoritative Information.
pub const NON_AUTHORITATIVE_INFORMATION: u16 = 203;
/// 204 No Content.
pub const NO_CONTENT: u16 = 204;
/// 205 Reset Content.
pub const RESET_CONTENT: u16 = 205;
/// 206 Partial Content.
pub const PARTIAL_CONTENT: u16 = 206;
/// 207 Multi-Status.
pub const MULTI_STATUS: u16 = 207;
/// 208 Already Reported.
pub const ALREADY_REPORTED: u16 = 208;
/// 226 IM Used.
pub const IM_USED: u16 = 226;
/// 300 Multiple Choices.
pub const MULTIPLE_CHOICES: u16 = 300;
/// 301 Moved Permanently.
pub const MOVED_PERMANENTLY: u16 = 301;
/// 302 Found.
pub const FOUND: u16 = 302;
/// 303 See Other.
pub const SEE_OTHER: u16 = 303;
/// 304 Not Modified.
pub const NOT_MODIFIED: u16 = 304;
/// 305 Use Proxy.
pub const USE_PROXY: u16 = 305;
/// 307 Temporary Redirect.
pub const TEMPORARY_REDIRECT: u16 = 307;
/// 308 Permanent Redirect.
pub const PERMANENT_REDIRECT: u16 = 308;
/// 400 Bad Request.
pub const BAD_REQUEST: u16 = 400;
/// 401 Unauthorized.
pub const UNAUTHORIZED: u16 = 401;
/// 402 Payment Required.
pub const PAYMENT_REQUIRED: u16 = 402;
/// 403 Forbidden.
pub const FORBIDDEN: u16 = 403;
/// 404 Not Found.
pub const NOT_FOUND: u16 = 404;
/// 405 Method Not Allowed.
pub const METHOD_NOT_ALLOWED: u16 = 405;
/// 406 Not Acceptable.
pub const NOT_ACCEPTABLE: u16 = 406;
/// 407 Proxy Authentication Required.
pub const PROXY_AUTHENTICATION_REQUIRED: u16 = 407;
/// 408 Request Timeout.
pub const REQUEST_TIMEOUT: u16 = 408;
/// 409 Conflict.
pub const CONFLICT: u16 = 409;
/// 410 Gone.
pub const GONE: u16 = 410;
/// 411 Length Required.
pub const LENGTH_REQUIRED: u16 = 411;
/// 412 Precondition Failed.
pub const PRECONDITION_FAILED: u16 = 412;
/// 413 Content Too Large.
pub const CONTENT_TOO_LARGE: u16 = 413;
/// 414 URI Too Long.
pub const URI_TOO_LONG: u16 = 414;
/// 415 Unsupported Media Type.
pub const UNSUPPORTED_MEDIA_TYPE: u16 = 415;
/// 416 Range Not Satisfiable.
pub const RANGE_NOT_SATISFIABLE: u16 = 416;
/// 417 Expectation Failed.
pub const EXPECTATION_FAILED: u16 = 417;
/// 421 Misdirected Request.
pub const MISDIRECTED_REQUEST: u16 = 421;
/// 422 Unprocessable Content.
pub const UNPROCESSABLE_CONTENT: u16 = 422;
/// 423 Locked.
pub const LOCKED: u16 = 423;
/// 424 Failed Dependency.
pub const FAILED_DEPENDENCY: u16 = 424;
/// 425 Too Early.
pub const TOO_EARLY: u16 = 425;
/// 426 Upgrade Required.
pub const UPGRADE_REQUIRED: u16 = 426;
/// 428 Precondition Required.
pub const PRECONDITION_REQUIRED: u16 = 428;
/// 429 Too Many Requests.
pub const TOO_MANY_REQUESTS: u16 = 429;
/// 431 Request Header Fields Too Large.
pub const REQUEST_HEADER_FIELDS_TOO_LARGE: u16 = 431;
/// 451 Unavailable For Legal Reasons.
pub const UNAVAILABLE_FOR_LEGAL_REASONS: u16 = 451;
/// 500 Internal Server Error.
pub const INTERNAL_SERVER_ERROR: u16 = 500;
/// 501 Not Implemented.
pub const NOT_IMPLEMENTED: u16 = 501;
/// 502 Bad Gateway.
pub const BAD_GATEWAY: u16 = 502;
/// 503 Service Unavailable.
pub const SERVICE_UNAVAILABLE: u16 = 503;
/// 504 Gateway Timeout.
pub const GATEWAY_TIMEOUT: u16 = 504;
/// 505 HTTP Version Not Supported.
pub const HTTP_VERSION_NOT_SUPPORTED: u16 = 505;
/// 506 Variant Also Negotiates.
pub const VARIANT_ALSO_NEGOTIATES: u16 = 506;
/// 507 Insufficient Storage.
pub const INSUFFICIENT_STORAGE: u16 = 507;
/// 508 Loop Detected.
pub const LOOP_DETECTED: u16 = 508;
/// 510 Not Extended.
pub const NOT_EXTENDED: u16 = 510;
/// 511 Network Authentication Required.
pub const NETWORK_AUTHENTICATION_REQUIRED: u16 = 511;

/// `HTTP/1.1 <code> <reason>\r\n`, whole: one copy per response, no decimal formatting.
/// `None` for a code this table does not name.
pub(crate) fn status_line(status: u16) -> Option<&'static str> {
    Some(match status {
        CONTINUE => "HTTP/1.1 100 Continue\r\n",
        SWITCHING_PROTOCOLS => "HTTP/1.1 101 Switching Protocols\r\n",
        EARLY_HINTS => "HTTP/1.1 103 Early Hints\r\n",
        OK => "HTTP/1.1 200 OK\r\n",
        CREATED => "HTTP/1.1 201 Created\r\n",
        ACCEPTED => "HTTP/1.1 202 Accepted\r\n",
        NON_AUTHORITATIVE_INFORMATION => "HTTP/1.1 203 Non-Authoritative Information\r\n",
        NO_CONTENT => "HTTP/1.1 204 No Content\r\n",
        RESET_CONTENT => "HTTP/1.1 205 Reset Content\r\n",
        PARTIAL_CONTENT => "HTTP/1.1 206 Partial Content\r\n",
        MULTI_STATUS => "HTTP/1.1 207 Multi-Status\r\n",
        ALREADY_REPORTED => "HTTP/1.1 208 Already Reported\r\n",
        IM_USED => "HTTP/1.1 226 IM Used\r\n",
        MULTIPLE_CHOICES => "HTTP/1.1 300 Multiple Choices\r\n",
        MOVED_PERMANENTLY => "HTTP/1.1 301 Moved Permanently\r\n",
        FOUND => "HTTP/1.1 302 Found\r\n",
        SEE_OTHER => "HTTP/1.1 303 See Other\r\n",
        NOT_MODIFIED => "HTTP/1.1 304 Not Modified\r\n",
        USE_PROXY => "HTTP/1.1 305 Use Proxy\r\n",
        TEMPORARY_REDIRECT => "HTTP/1.1 307 Temporary Redirect\r\n",
        PERMANENT_REDIRECT => "HTTP/1.1 308 Permanent Redirect\r\n",
        BAD_REQUEST => "HTTP/1.1 400 Bad Request\r\n",
        UNAUTHORIZED => "HTTP/1.1 401 Unauthorized\r\n",
        PAYMENT_REQUIRED => "HTTP/1.1 402 Payment Required\r\n",
        FORBIDDEN => "HTTP/1.1 403 Forbidden\r\n",
        NOT_FOUND => "HTTP/1.1 404 Not Found\r\n",
        METHOD_NOT_ALLOWED => "HTTP/1.1 405 Method Not Allowed\r\n",
        NOT_ACCEPTABLE => "HTTP/1.1 406 Not Acceptable\r\n",
        PROXY_AUTHENTICATION_REQUIRED => "HTTP/1.1 407 Proxy Authentication Required\r\n",
        REQUEST_TIMEOUT => "HTTP/1.1 408 Request Timeout\r\n",
        CONFLICT => "HTTP/1.1 409 Conflict\r\n",
        GONE => "HTTP/1.1 410 Gone\r\n",
        LENGTH_REQUIRED => "HTTP/1.1 411 Length Required\r\n",
        PRECONDITION_FAILED => "HTTP/1.1 412 Precondition Failed\r\n",
        CONTENT_TOO_LARGE => "HTTP/1.1 413 Content Too Large\r\n",
        URI_TOO_LONG => "HTTP/1.1 414 URI Too Long\r\n",
        UNSUPPORTED_MEDIA_TYPE => "HTTP/1.1 415 Unsupported Media Type\r\n",
        RANGE_NOT_SATISFIABLE => "HTTP/1.1 416 Range Not Satisfiable\r\n",
        EXPECTATION_FAILED => "HTTP/1.1 417 Expectation Failed\r\n",
        MISDIRECTED_REQUEST => "HTTP/1.1 421 Misdirected Request\r\n",
        UNPROCESSABLE_CONTENT => "HTTP/1.1 422 Unprocessable Content\r\n",
        LOCKED => "HTTP/1.1 423 Locked\r\n",
        FAILED_DEPENDENCY => "HTTP/1.1 424 Failed Dependency\r\n",
        TOO_EARLY => "HTTP/1.1 425 Too Early\r\n",
        UPGRADE_REQUIRED => "HTTP/1.1 426 Upgrade Required\r\n",
        PRECONDITION_REQUIRED => "HTTP/1.1 428 Precondition Required\r\n",
        TOO_MANY_REQUESTS => "HTTP/1.1 429 Too Many Requests\r\n",
        REQUEST_HEADER_FIELDS_TOO_LARGE => "HTTP/1.1 431 Request Header Fields Too Large\r\n",
        UNAVAILABLE_FOR_LEGAL_REASONS => "HTTP/1.1 451 Unavailable For Legal Reasons\r\n",
        INTERNAL_SERVER_ERROR => "HTTP/1.1 500 Internal Server Error\r\n",
        NOT_IMPLEMENTED => "HTTP/1.1 501 Not Implemented\r\n",
        BAD_GATEWAY => "HTTP/1.1 502 Bad Gateway\r\n",
        SERVICE_UNAVAILABLE => "HTTP/1.1 503 Service Unavailable\r\n",
        GATEWAY_TIMEOUT => "HTTP/1.1 504 Gateway Timeout\r\n",
        HTTP_VERSION_NOT_SUPPORTED => "HTTP/1.1 505 HTTP Version Not Supported\r\n",
        VARIANT_ALSO_NEGOTIATES => "HTTP/1.1 506 Variant Also Negotiates\r\n",
        INSUFFICIENT_STORAGE => "HTTP/1.1 507 Insufficient Storage\r\n",
        LOOP_DETECTED => "HTTP/1.1 508 Loop Detected\r\n",
        NOT_EXTENDED => "HTTP/1.1 510 Not Extended\r\n",
        NETWORK_AUTHENTICATION_REQUIRED => "HTTP/1.1 511 Network Authentication Required\r\n",
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
