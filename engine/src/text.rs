//! Numbers as messages and pages print them.

/// `671026419200` → `671,026,419,200`.
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
    fn digits_are_grouped_by_three() {
        assert_eq!(super::group_digits(671_026_419_200), "671,026,419,200");
        assert_eq!(super::group_digits(-1_000), "-1,000");
        assert_eq!(super::group_digits(999), "999");
    }
}
