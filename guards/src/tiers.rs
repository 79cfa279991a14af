//! Which guards run. Ablation runs switch blocking guards off tier by tier; a named tier list
//! goes from `off` to `all`.

/// Every blocking guard, in tier order.
pub const GUARDS: &[&str] = &[
    "weight",
    "packing",
    "shape",
    "analysis",
    "schedule",
    "structural",
    "axiom",
    "source",
    "semantic",
];

/// Tier names, 0 to `GUARDS.len()`: tier N runs the first N guards and is named after the last
/// of them, except tier 0 (`off`) and the last tier (`all`).
pub fn tier_names() -> Vec<&'static str> {
    let last = GUARDS.len();
    (0..=last)
        .map(|n| match n {
            0 => "off",
            n if n == last => "all",
            n => GUARDS[n - 1],
        })
        .collect()
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardSet {
    on: Vec<&'static str>,
}

impl Default for GuardSet {
    fn default() -> Self {
        GuardSet::all()
    }
}

impl GuardSet {
    pub fn all() -> GuardSet {
        GuardSet {
            on: GUARDS.to_vec(),
        }
    }

    /// A tier by number (0-9) or name (`off`, `weight`, ..., `all`).
    pub fn tier(t: &str) -> Result<GuardSet, String> {
        let n = match t.parse::<usize>() {
            Ok(n) => n,
            Err(_) => tier_names().iter().position(|x| *x == t).ok_or_else(|| {
                format!(
                    "unknown tier `{t}`; tiers: {} (or 0-{})",
                    tier_names().join(", "),
                    GUARDS.len()
                )
            })?,
        };
        if n > GUARDS.len() {
            return Err(format!("tier {n} is past the last tier {}", GUARDS.len()));
        }
        Ok(GuardSet {
            on: GUARDS[..n].to_vec(),
        })
    }

    /// A comma-separated list of guard names.
    pub fn list(s: &str) -> Result<GuardSet, String> {
        let mut on = Vec::new();
        for name in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            match GUARDS.iter().find(|g| **g == name) {
                Some(g) => {
                    if !on.contains(g) {
                        on.push(*g);
                    }
                }
                None => {
                    return Err(format!(
                        "unknown guard `{name}`; guards: {}",
                        GUARDS.join(", ")
                    ));
                }
            }
        }
        on.sort_by_key(|g| GUARDS.iter().position(|x| x == g));
        Ok(GuardSet { on })
    }

    pub fn has(&self, g: &str) -> bool {
        self.on.contains(&g)
    }

    pub fn names(&self) -> &[&'static str] {
        &self.on
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_are_cumulative() {
        assert!(GuardSet::tier("off").unwrap().names().is_empty());
        assert_eq!(
            GuardSet::tier("packing").unwrap().names(),
            &["weight", "packing"]
        );
        assert_eq!(GuardSet::tier("all").unwrap().names().len(), 9);
        assert_eq!(
            GuardSet::tier("3").unwrap().names(),
            &["weight", "packing", "shape"]
        );
        assert!(GuardSet::tier("10").is_err());
        assert_eq!(
            GuardSet::list("source,weight").unwrap().names(),
            &["weight", "source"]
        );
        assert!(GuardSet::list("wieght").is_err());
        assert_eq!(
            tier_names(),
            [
                "off",
                "weight",
                "packing",
                "shape",
                "analysis",
                "schedule",
                "structural",
                "axiom",
                "source",
                "all"
            ]
        );
        assert_eq!(GuardSet::tier("axiom").unwrap().names().len(), 7);
    }
}
