//! Names a repository hands us (index shard names, `auto_map` module files, API siblings) are
//! input, not paths we chose: each becomes a URL segment and a file name under the staging
//! directory, so each must be a plain relative path inside the repository.

/// Why `name` is not a plain relative path, or Ok. Refused: empty names, absolute paths,
/// `.`/`..` or empty segments, backslashes (a separator elsewhere), NUL and other control
/// characters, and names longer than the Hub allows.
pub fn check_repo_path(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("it is empty");
    }
    if name.len() > 1024 {
        return Err("it is longer than 1024 bytes");
    }
    if name.starts_with('/') {
        return Err("it is absolute");
    }
    if name.contains('\\') {
        return Err("it holds a backslash");
    }
    if name.chars().any(char::is_control) {
        return Err("it holds a control character");
    }
    for segment in name.split('/') {
        match segment {
            "" => return Err("it has an empty segment (`//` or a trailing `/`)"),
            "." | ".." => return Err("it has a `.` or `..` segment"),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_pass_and_escapes_are_refused() {
        for ok in [
            "model-00001-of-00163.safetensors",
            "sub/dir/modeling_x.py",
            "a..b.safetensors",
            ".hidden",
        ] {
            assert_eq!(check_repo_path(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../b",
            "a/./b",
            "a//b",
            "a/",
            "a\\..\\b",
            "a\0b",
            "a\nb",
            "..",
        ] {
            assert!(check_repo_path(bad).is_err(), "{bad:?}");
        }
    }
}
