//! Bounded quoting of user input in messages, as the server writes it (so local and
//! server messages read the same): at most 200 UTF-8 bytes of a value, cut on a
//! character boundary, quoted the way Python's `repr` quotes a string.

/// Most UTF-8 bytes of one user-supplied value quoted in a message or field.
pub const QUOTE_LIMIT: usize = 200;

const ELLIPSIS: &str = "…";

fn cut(text: &str, limit: usize) -> &str {
    let mut end = limit.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` cut to at most `limit` UTF-8 bytes followed by `…` when it was longer;
/// unchanged when it fits (the bare value, for a field name such as `custom[KEY]`).
pub fn clip(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        text.to_string()
    } else {
        format!("{}{ELLIPSIS}", cut(text, limit))
    }
}

/// `text` quoted for a message: `'abc'` when it has at most `limit` UTF-8 bytes, else its
/// first `limit` bytes, an ellipsis inside the quotes and its full length:
/// `'xxxx…' (10240 bytes)`.
pub fn quote(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return repr(text);
    }
    let shown = repr(cut(text, limit));
    let (body, last) = shown.split_at(shown.len() - 1);
    format!("{body}{ELLIPSIS}{last} ({} bytes)", text.len())
}

/// Python's `repr` of a string: single quotes unless the text holds a `'` and no `"`;
/// backslash, the quote, `\t`, `\n`, `\r` escaped, other non-printable characters as
/// `\xhh`, `\uhhhh` or `\Uhhhhhhhh`.
pub fn repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !printable(c) => {
                let n = c as u32;
                if n < 0x100 {
                    out.push_str(&format!("\\x{n:02x}"));
                } else if n < 0x10000 {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `str.isprintable` for one character, for the characters a name or key
/// realistically holds: control characters, separators other than the space, format
/// characters and private-use code points are not printable. (Unassigned code points,
/// which Python also escapes, are printed as they are.)
fn printable(c: char) -> bool {
    let n = c as u32;
    !(c.is_control()
        || matches!(n, 0xA0 | 0xAD | 0x1680 | 0x2000..=0x200F | 0x2028..=0x202F | 0x205F..=0x2064
                      | 0x2066..=0x206F | 0x3000 | 0xFEFF | 0xFFF9..=0xFFFB | 0xE000..=0xF8FF
                      | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x110BD | 0x1D173..=0x1D17A
                      | 0xE0001 | 0xE0020..=0xE007F | 0xF0000..=0x10FFFF))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_quotes_and_escapes_like_python() {
        assert_eq!(repr("abc"), "'abc'");
        assert_eq!(repr("it's"), "\"it's\"");
        assert_eq!(repr("'\""), "'\\'\"'");
        assert_eq!(repr("a\tb\n\\"), "'a\\tb\\n\\\\'");
        assert_eq!(repr("\x00\x7f\u{85}"), "'\\x00\\x7f\\x85'");
        assert_eq!(repr("é€😀"), "'é€😀'");
        assert_eq!(repr("\u{a0}\u{2028}"), "'\\xa0\\u2028'");
    }

    #[test]
    fn long_values_are_cut_on_a_character_boundary_with_their_length() {
        let long = "k".repeat(10_240);
        assert_eq!(quote(&long, QUOTE_LIMIT), format!("'{}…' (10240 bytes)", "k".repeat(200)));
        assert_eq!(clip(&long, QUOTE_LIMIT), format!("{}…", "k".repeat(200)));
        let e = "é".repeat(101); // 202 bytes: cut to 100 characters (200 bytes)
        assert_eq!(clip(&e, QUOTE_LIMIT), format!("{}…", "é".repeat(100)));
        assert_eq!(clip(&"€".repeat(67), QUOTE_LIMIT), format!("{}…", "€".repeat(66)));
        assert_eq!(quote("short", QUOTE_LIMIT), "'short'");
        assert_eq!(clip(&"k".repeat(200), QUOTE_LIMIT), "k".repeat(200));
    }
}
