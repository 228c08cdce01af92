//! Escaping for the portal's HTML: every value that came from anyone
//! (names, errors, URLs) goes through `esc` before it is written into a
//! page, as text or as an attribute value.

/// `s` as HTML text or attribute value.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
