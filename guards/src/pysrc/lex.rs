//! Python's tokens, as far as the guards need them: names, numbers, strings (any prefix, triple
//! quotes), operators, comments skipped, and the logical-line structure (bracket depth and
//! backslash continuation). Every token keeps its byte span in the source, so a statement's text
//! is a slice of what the author wrote.
//!
//! The source is hostile input: the lexer never panics, reads at most [`MAX_BYTES`] and keeps at
//! most [`MAX_TOKENS`] tokens; past either bound the rest of the file is not read.

/// Bytes of one file that are read.
pub const MAX_BYTES: usize = 8 << 20;
/// Tokens of one file that are kept.
pub const MAX_TOKENS: usize = 2_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tok {
    Name,
    Number,
    Str,
    Op,
    /// The end of a logical line.
    Newline,
}

#[derive(Clone, Copy, Debug)]
pub struct Token {
    pub kind: Tok,
    pub start: u32,
    pub end: u32,
    /// 1-based physical line of the token's start.
    pub line: u32,
}

/// A logical line: its tokens, the indentation (columns) of its first physical line, and its
/// first and last physical lines.
pub struct Logical {
    pub tokens: std::ops::Range<usize>,
    pub indent: u32,
    pub first_line: u32,
    pub last_line: u32,
}

const OPS3: [&str; 5] = ["**=", "//=", ">>=", "<<=", "..."];
const OPS2: [&str; 19] = [
    "==", "!=", "<=", ">=", "//", "**", "->", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "@=",
    ":=", "<<", ">>",
];

/// The tokens of `text` and its logical lines.
pub fn lex(text: &str) -> (Vec<Token>, Vec<Logical>) {
    let end = floor_char_boundary(text, text.len().min(MAX_BYTES));
    let b = &text.as_bytes()[..end];
    let mut toks: Vec<Token> = Vec::new();
    let mut lines: Vec<Logical> = Vec::new();
    let (mut i, mut line, mut depth) = (0usize, 1u32, 0i32);
    let mut line_start = 0usize;
    // The logical line being read: (first token, indent, first physical line).
    let mut open: Option<(usize, u32, u32)> = None;
    let close = |toks: &mut Vec<Token>,
                 lines: &mut Vec<Logical>,
                 open: &mut Option<(usize, u32, u32)>,
                 at: usize,
                 line: u32| {
        if let Some((first, indent, first_line)) = open.take() {
            let last_line = toks.last().map(|t| t.line).unwrap_or(line);
            toks.push(Token {
                kind: Tok::Newline,
                start: at as u32,
                end: at as u32,
                line,
            });
            lines.push(Logical {
                tokens: first..toks.len() - 1,
                indent,
                first_line,
                last_line,
            });
        }
    };
    while i < b.len() && toks.len() < MAX_TOKENS {
        let c = b[i];
        match c {
            b'\n' => {
                if depth <= 0 {
                    depth = 0;
                    close(&mut toks, &mut lines, &mut open, i, line);
                }
                i += 1;
                line += 1;
                line_start = i;
                continue;
            }
            b'\\' if b.get(i + 1) == Some(&b'\n') => {
                i += 2;
                line += 1;
                line_start = i;
                continue;
            }
            b'\\' if b.get(i + 1) == Some(&b'\r') && b.get(i + 2) == Some(&b'\n') => {
                i += 3;
                line += 1;
                line_start = i;
                continue;
            }
            b' ' | b'\t' | b'\r' | b'\x0c' => {
                i += 1;
                continue;
            }
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            _ => {}
        }
        if open.is_none() {
            let indent = b[line_start..i]
                .iter()
                .map(|&c| if c == b'\t' { 8 } else { 1 })
                .sum();
            open = Some((toks.len(), indent, line));
        }
        let start = i;
        let start_line = line;
        let kind = if let Some(q) = string_start(b, i) {
            i = string_end(b, q, &mut line);
            Tok::Str
        } else if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80) {
                i += 1;
            }
            Tok::Name
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            while i < b.len()
                && (b[i].is_ascii_alphanumeric()
                    || b[i] == b'.'
                    || b[i] == b'_'
                    || ((b[i] == b'+' || b[i] == b'-') && matches!(b[i - 1], b'e' | b'E')))
            {
                i += 1;
            }
            Tok::Number
        } else {
            let rest = &b[i..];
            let n = if OPS3.iter().any(|o| rest.starts_with(o.as_bytes())) {
                3
            } else if OPS2.iter().any(|o| rest.starts_with(o.as_bytes())) {
                2
            } else {
                1
            };
            match c {
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => depth -= 1,
                _ => {}
            }
            i += n;
            Tok::Op
        };
        let i_end = i.min(b.len());
        toks.push(Token {
            kind,
            start: start as u32,
            end: i_end as u32,
            line: start_line,
        });
        if b[start..i_end].contains(&b'\n') {
            line_start = start
                + b[start..i_end]
                    .iter()
                    .rposition(|&c| c == b'\n')
                    .unwrap_or(0)
                + 1;
        }
    }
    close(&mut toks, &mut lines, &mut open, b.len(), line);
    (toks, lines)
}

fn floor_char_boundary(s: &str, mut at: usize) -> usize {
    while at > 0 && !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// A string literal starting at `i` (after any of Python's prefixes): the index of its opening
/// quote run and the quote (`"`, `'`, `"""` or `'''`) as (position, quote byte, triple).
fn string_start(b: &[u8], i: usize) -> Option<(usize, u8, bool)> {
    let mut j = i;
    while j < b.len()
        && j - i < 3
        && matches!(b[j], b'r' | b'R' | b'b' | b'B' | b'f' | b'F' | b'u' | b'U')
    {
        j += 1;
    }
    let q = *b.get(j)?;
    if q != b'"' && q != b'\'' {
        return None;
    }
    let triple = b.get(j + 1) == Some(&q) && b.get(j + 2) == Some(&q);
    Some((j, q, triple))
}

/// The index just past the string literal that opens at `q`.
fn string_end(b: &[u8], (j, q, triple): (usize, u8, bool), line: &mut u32) -> usize {
    let mut i = if triple { j + 3 } else { j + 1 };
    while i < b.len() {
        match b[i] {
            b'\\' => {
                if b.get(i + 1) == Some(&b'\n') {
                    *line += 1;
                }
                i += 2;
                continue;
            }
            b'\n' if !triple => return i, // an unterminated string ends with its line
            b'\n' => *line += 1,
            c if c == q => {
                if !triple {
                    return i + 1;
                }
                if b.get(i + 1) == Some(&q) && b.get(i + 2) == Some(&q) {
                    return i + 3;
                }
            }
            _ => {}
        }
        i += 1;
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(src: &str) -> Vec<Vec<&str>> {
        let (t, l) = lex(src);
        l.iter()
            .map(|l| {
                t[l.tokens.clone()]
                    .iter()
                    .map(|t| &src[t.start as usize..t.end as usize])
                    .collect()
            })
            .collect()
    }

    #[test]
    fn logical_lines_join_brackets_and_continuations() {
        let src = "x = f(a,\n      b)  # c ( \ny = 1 + \\\n  2\n\"\"\"doc (\n\"\"\"\nz //= 3\n";
        assert_eq!(
            texts(src),
            vec![
                vec!["x", "=", "f", "(", "a", ",", "b", ")"],
                vec!["y", "=", "1", "+", "2"],
                vec!["\"\"\"doc (\n\"\"\""],
                vec!["z", "//=", "3"],
            ]
        );
        let (_, l) = lex(src);
        assert_eq!((l[0].first_line, l[0].last_line), (1, 2));
        assert_eq!(l[3].first_line, 7);
    }

    #[test]
    fn prefixed_strings_and_numbers() {
        assert_eq!(
            texts("a = rb'x)' + f\"{y}\" + 1e-6 + 0x1F\n"),
            vec![vec![
                "a", "=", "rb'x)'", "+", "f\"{y}\"", "+", "1e-6", "+", "0x1F"
            ]]
        );
    }
}
