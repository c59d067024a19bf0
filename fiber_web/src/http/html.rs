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
/// each value without an allocation of its own. Runs of plain text are copied whole,
/// found byte by byte: the five characters are ASCII, and in UTF-8 no byte of another
/// character equals an ASCII one, so a byte scan finds exactly them (a scan by `char`
/// decoded every character first, and cost several times more).
pub fn push_escaped_html(out: &mut String, s: &str) {
    let mut plain = 0;
    for (at, &b) in s.as_bytes().iter().enumerate() {
        let entity = match b {
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'&' => "&amp;",
            b'"' => "&quot;",
            b'\'' => "&#39;",
            _ => continue,
        };
        // `at` is an ASCII byte's index: a character boundary on both sides.
        out.push_str(&s[plain..at]);
        out.push_str(entity);
        plain = at + 1;
    }
    out.push_str(&s[plain..]);
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
}
