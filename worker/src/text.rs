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

#[cfg(test)]
mod tests {
    #[test]
    fn digits_are_grouped_by_thousands() {
        assert_eq!(super::group_digits(0), "0");
        assert_eq!(super::group_digits(1234567), "1,234,567");
        assert_eq!(super::group_digits(-1000), "-1,000");
    }
}
