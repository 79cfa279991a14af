//! Markdown for text that agents wrote (summaries, review steps, node paths): hostile input that
//! must not break a table, open a fence, inject HTML or links, or mention people.

/// One table cell / inline span: a single line, at most `max` characters, with everything that
/// Markdown or HTML would interpret escaped and `@mentions` defused.
pub fn cell(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (n, c) in s.chars().enumerate() {
        if n == max {
            out.push('…');
            break;
        }
        match c {
            '\n' | '\r' | '\t' => out.push(' '),
            c if c.is_control() => {}
            '|' => out.push_str("\\|"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            // A zero-width space after `@` keeps GitHub from notifying anyone.
            '@' => out.push_str("@\u{200b}"),
            // Links, images and code spans; emphasis is harmless and stays readable.
            '\\' | '`' | '[' | ']' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// Inline code for identifiers (node paths, file names): backticks inside are replaced, so the
/// span cannot be closed early.
pub fn code(s: &str, max: usize) -> String {
    let mut t: String = s
        .chars()
        .filter(|c| !c.is_control())
        .map(|c| if c == '`' { '\'' } else { c })
        .take(max)
        .collect();
    if s.chars().count() > max {
        t.push('…');
    }
    if t.is_empty() {
        return "—".into();
    }
    format!("`{t}`")
}

/// A word for a shell command line: left alone when it is plainly safe, single-quoted otherwise.
pub fn shell_word(s: &str) -> String {
    let safe = !s.is_empty()
        && s.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':' | '@' | '=')
        });
    if safe {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_stays_in_its_cell() {
        let s = cell("a | b\n<img src=x> @octocat `x` [l](http://e)", 200);
        assert!(!s.contains('\n'));
        assert!(!s.contains(" | "));
        assert!(!s.contains("<img"));
        assert!(!s.contains("@octocat"));
        assert!(s.contains("\\[l\\]"));
        assert_eq!(cell("abcdef", 3), "abc…");
        assert_eq!(code("a`b", 10), "`a'b`");
        assert_eq!(code("", 10), "—");
        assert_eq!(shell_word("org/name"), "org/name");
        assert_eq!(shell_word("a b'c"), r"'a b'\''c'");
    }
}
