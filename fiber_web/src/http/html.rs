//! Text inside markup: one escape for every page and picture we write (the `/twitter`
//! page, the bench's SVG chart), so that data is never read as markup.

/// Escape text for HTML or XML (SVG): `<`, `>`, `&` and both quotes, so that it is
/// safe in element text and in attribute values alike.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape_html;

    #[test]
    fn markup_characters_become_entities() {
        assert_eq!(
            escape_html(r#"<b a="x">R&D's</b>"#),
            "&lt;b a=&quot;x&quot;&gt;R&amp;D&#39;s&lt;/b&gt;"
        );
        assert_eq!(escape_html("plain"), "plain");
    }
}
