//! Text inside markup: one escape for every page an app writes (the demo's `/twitter`,
//! TechEmpower's fortunes, the bench's SVG chart), so that data is never read as
//! markup. [`push_escaped_html`] builds a page row by row in one buffer.

/// Escape text for HTML or XML (SVG): `<`, `>`, `&` and both quotes, so that it is
/// safe in element text and in attribute values alike.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_escaped_html(&mut out, s);
    out
}

/// [`escape_html`] appended to `out`: a page built row by row in one buffer escapes
/// each value without an allocation of its own. Runs of plain text are copied whole.
/// They are found 16 bytes at a time: the five characters are ASCII, and in UTF-8 no
/// byte of another character equals an ASCII one, so a byte compare finds exactly
/// them, and the compiler does sixteen such compares in a few vector instructions.
/// Only a piece with one of them in it is walked byte by byte. (A walk of every byte
/// cost about 10 instructions per byte of a TechEmpower fortune; a scan by `char`
/// decoded every character first, and cost several times more.)
pub fn push_escaped_html(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len());
    // `plain` starts the run not copied yet.
    let mut plain = 0;
    for (n, piece) in bytes.chunks(CHUNK).enumerate() {
        let clean = match <&[u8; CHUNK]>::try_from(piece) {
            Ok(whole) => !has_markup(whole),
            Err(_) => {
                // The last piece, short: the zeros after it are no markup.
                let mut padded = [0; CHUNK];
                padded[..piece.len()].copy_from_slice(piece);
                !has_markup(&padded)
            }
        };
        if clean {
            continue;
        }
        for (i, &b) in piece.iter().enumerate() {
            let Some(entity) = entity(b) else { continue };
            // `at` is an ASCII byte's index: a character boundary on both sides.
            let at = n * CHUNK + i;
            out.push_str(&s[plain..at]);
            out.push_str(entity);
            plain = at + 1;
        }
    }
    out.push_str(&s[plain..]);
}

/// Bytes [`push_escaped_html`] looks at together.
const CHUNK: usize = 16;

/// Whether `chunk` holds one of the five characters: a fixed-size array and compares
/// joined by `|`, not `||` or a `match`, so that its bytes are compared side by side.
#[inline(always)]
fn has_markup(chunk: &[u8; CHUNK]) -> bool {
    let mut found = [false; CHUNK];
    for (f, &b) in found.iter_mut().zip(chunk) {
        *f = (b == b'<') | (b == b'>') | (b == b'&') | (b == b'"') | (b == b'\'');
    }
    found.iter().fold(false, |any, &f| any | f)
}

/// The entity that stands for `b`, if it is one of the five characters.
#[inline(always)]
fn entity(b: u8) -> Option<&'static str> {
    match b {
        b'<' => Some("&lt;"),
        b'>' => Some("&gt;"),
        b'&' => Some("&amp;"),
        b'"' => Some("&quot;"),
        b'\'' => Some("&#39;"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{escape_html, push_escaped_html};

    #[test]
    fn markup_characters_become_entities() {
        assert_eq!(
            escape_html(r#"<b a="x">R&D's</b>"#),
            "&lt;b a=&quot;x&quot;&gt;R&amp;D&#39;s&lt;/b&gt;"
        );
        assert_eq!(escape_html("plain"), "plain");
        assert_eq!(escape_html("フレームワーク<"), "フレームワーク&lt;");
        let mut page = String::from("<td>");
        push_escaped_html(&mut page, "a&b");
        assert_eq!(page, "<td>a&amp;b");
    }

    /// Every place a character can take in and across the chunks that are scanned
    /// together, in text of every length around them, ASCII and not: the result is
    /// the one of a plain walk of the characters.
    #[test]
    fn every_character_is_escaped_wherever_it_falls() {
        let slow = |s: &str| -> String {
            s.chars()
                .map(|c| match c {
                    '<' => "&lt;".to_string(),
                    '>' => "&gt;".to_string(),
                    '&' => "&amp;".to_string(),
                    '"' => "&quot;".to_string(),
                    '\'' => "&#39;".to_string(),
                    c => c.to_string(),
                })
                .collect()
        };
        for filler in ["a", "é", "フ"] {
            for len in 0..40 {
                let base: String = filler.repeat(len);
                assert_eq!(escape_html(&base), base, "{len} x {filler}");
                for c in ['<', '>', '&', '"', '\''] {
                    for at in 0..=len {
                        let mut s: String = filler.repeat(at);
                        s.push(c);
                        s.push_str(&filler.repeat(len - at));
                        s.push(c);
                        assert_eq!(escape_html(&s), slow(&s), "{s}");
                    }
                }
            }
        }
    }
}
