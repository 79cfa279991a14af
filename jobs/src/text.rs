//! Small text formatting shared by the commands and the pull request body.

/// `1234567` → `1,234,567`.
pub fn group_digits(v: i128) -> String {
    let s = v.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0 { format!("-{out}") } else { out }
}

/// `1 error`, `2 errors`: a count and its noun.
pub fn plural(n: impl Into<u64>, noun: &str) -> String {
    match n.into() {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}

/// A process's end as people say it: `exit 1`, `killed by signal 9`, `no exit status`.
pub fn exit_status(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        (None, None) => "no exit status".into(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn digits_are_grouped_by_thousands() {
        assert_eq!(super::group_digits(0), "0");
        assert_eq!(super::group_digits(1234567), "1,234,567");
        assert_eq!(super::group_digits(-1000), "-1,000");
    }

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(super::plural(1u32, "error"), "1 error");
        assert_eq!(super::plural(0u32, "error"), "0 errors");
        assert_eq!(super::exit_status(Some(1), None), "exit 1");
        assert_eq!(super::exit_status(None, Some(9)), "killed by signal 9");
    }
}
