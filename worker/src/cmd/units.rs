//! How the text output writes figures: human units by default (684.49 B parameters, 641.29
//! GiB, 143.02 GFLOP), exact integers with `--bytes` on the commands that print figures. JSON
//! is always exact.

use std::sync::atomic::{AtomicBool, Ordering};

static EXACT: AtomicBool = AtomicBool::new(false);

/// `--bytes`: every figure of this command's text output as its exact integer.
pub fn set_exact(exact: bool) {
    EXACT.store(exact, Ordering::Relaxed);
}

pub fn exact() -> bool {
    EXACT.load(Ordering::Relaxed)
}

fn digits(v: i128) -> String {
    harch_worker::text::group_digits(v)
}

fn scaled(v: i128, steps: &[(f64, &str)], unit: &str) -> String {
    let x = v as f64;
    for (scale, prefix) in steps {
        if x.abs() >= *scale {
            return format!("{:.2} {prefix}{unit}", x / scale);
        }
    }
    format!("{} {unit}", digits(v)).trim_end().to_string()
}

/// A count of things (parameters, tensors, tokens): `684.49 B`, `1.75 M`; digits below 10,000.
pub fn count(v: i128) -> String {
    if exact() || v.abs() < 10_000 {
        return digits(v);
    }
    scaled(v, &[(1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")], "")
}

/// FLOPs: `143.02 GFLOP`.
pub fn flops(v: i128) -> String {
    if exact() {
        return digits(v);
    }
    scaled(
        v,
        &[
            (1e18, "E"),
            (1e15, "P"),
            (1e12, "T"),
            (1e9, "G"),
            (1e6, "M"),
            (1e3, "K"),
        ],
        "FLOP",
    )
}

/// Bytes in binary units: `641.29 GiB`, `68.62 KiB`, `512 B`.
pub fn bytes(v: i128) -> String {
    if exact() {
        return digits(v);
    }
    super::verdict::human_bytes(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_in_human_units() {
        assert_eq!(count(684_489_845_504), "684.49 B");
        assert_eq!(count(9_999), "9,999");
        assert_eq!(flops(143_020_185_392), "143.02 GFLOP");
        assert_eq!(bytes(70_272), "68.62 KiB");
        assert_eq!(bytes(512), "512 B");
    }
}
