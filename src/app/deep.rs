//! `/deep?depth=N&frame=B`: recurse N levels with frames of about B bytes, as nested
//! templates would, so that any fiber stack can be pushed past its limit on purpose.
//! The recursion holds nothing (no lock, no Once), and says so before each call
//! (`fiber_pool::reserve_stack`): its overflows strike at a declared safe point, so the
//! process goes on serving and is not replaced for them.

use std::hint::black_box;

use crate::app::AppState;
use fiber_web::{Request, Response};

/// Most levels accepted.
pub const MAX_DEPTH: usize = 100_000;
/// Largest frame accepted, in bytes.
pub const MAX_FRAME: usize = 64 * 1024;
/// Stack one padding call takes in a release build: its array plus its frame (return
/// address, saved registers, spilled arguments). Debug builds take about twice this.
const CALL_BYTES: usize = 256;
/// Bytes of array in one padding call.
const PAD: usize = CALL_BYTES - 64;
/// Stack checked for before each next call (a debug build's call takes about twice a
/// release build's): the recursion holds nothing, so it says so, and an overflow
/// strikes at that check, a declared safe point, rather than inside a frame.
const NEXT_CALL_MARGIN: usize = 4 * CALL_BYTES;

/// Read `depth` (default 10) and `frame` (default 256) within their bounds.
pub fn parse(depth: Option<&str>, frame: Option<&str>) -> Result<(usize, usize), String> {
    let num = |name: &str, raw: Option<&str>, default: usize, max: usize| match raw {
        None => Ok(default),
        Some(raw) => match raw.parse::<usize>() {
            Ok(n) if n <= max => Ok(n),
            _ => Err(format!(
                "{name} must be a whole number from 0 to {max}; got '{raw}'"
            )),
        },
    };
    Ok((
        num("depth", depth, 10, MAX_DEPTH)?,
        num("frame", frame, 256, MAX_FRAME)?,
    ))
}

/// `GET /deep?depth=N&frame=B`.
pub fn deep(_state: &AppState, req: &Request) -> Response {
    let (depth, frame) = match parse(
        req.query_param("depth").as_deref(),
        req.query_param("frame").as_deref(),
    ) {
        Ok(v) => v,
        Err(why) => return Response::error(400, why),
    };
    let sum = level(depth, frame);
    Response::text(200, format!("depth {depth} frame {frame} checksum {sum}"))
}

/// One level: about `frame` bytes of stack, then the next level.
#[inline(never)]
pub fn level(depth: usize, frame: usize) -> u64 {
    if depth == 0 {
        return 0;
    }
    fiber_pool::reserve_stack(NEXT_CALL_MARGIN);
    pad(frame.div_ceil(CALL_BYTES), depth, frame)
}

/// `calls` nested calls of PAD bytes each; the innermost goes one level deeper.
#[inline(never)]
fn pad(calls: usize, depth: usize, frame: usize) -> u64 {
    let mut buf = [0u8; PAD];
    buf[calls % PAD] = depth as u8;
    // Through a reference, so the array stays in this frame (no copy into another).
    black_box(&mut buf);
    fiber_pool::reserve_stack(NEXT_CALL_MARGIN);
    let below = if calls <= 1 {
        level(depth - 1, frame)
    } else {
        pad(calls - 1, depth, frame)
    };
    below.wrapping_add(buf[calls % PAD] as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_bounded() {
        assert_eq!(parse(None, None), Ok((10, 256)));
        assert_eq!(parse(Some("5"), Some("1024")), Ok((5, 1024)));
        assert!(parse(Some("-1"), None).unwrap_err().contains("depth"));
        assert!(parse(Some("100001"), None).is_err());
        assert!(parse(None, Some("65537")).unwrap_err().contains("frame"));
    }

    #[test]
    fn recursion_returns() {
        assert_eq!(level(0, 256), 0);
        assert!(level(3, 300) > 0);
    }
}
