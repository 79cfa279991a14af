//! The gap report: how a generate agent says that the DSL cannot express this model, or that a
//! guard's rule is wrong for it, instead of bending the spec until its numbers lie or looping
//! until its attempts run out. The report is a claim like any other: its evidence (source
//! lines, config keys, tensors, in the review's grammar) is checked against this job's truth,
//! and only a report whose every claim holds stops the loop.
//!
//! ```yaml
//! # specs/models/<model_type>.gap.yaml
//! kind: dsl_gap              # or disputed_guard
//! summary: "the decay is per key channel; delta_gate takes one per head"
//! needs: "a decay gate over [heads, d_k]"     # dsl_gap: what the DSL would need
//! code: W001                 # disputed_guard: the code disputed (the last validation raised it)
//! evidence:
//!   - 'src: modeling_kimi.py:120 "self.A_log = torch.nn.Parameter("'
//!   - 'ckpt: model.layers.X.self_attn.A_log = [1, 1, 32, 1] F32'
//! ```

use harch_engine::diag::Location;
use harch_guards::Diagnostic;
use serde::{Deserialize, Serialize};

use crate::claim::{Claim, clip, parse_claim};
use crate::facts::Facts;

/// The guard name gap diagnostics carry.
pub const GUARD: &str = "gap";

/// Gap report codes (documented in docs/dsl.md).
pub mod code {
    /// Not YAML, or not the report's shape; an unknown kind; an empty summary.
    pub const SHAPE: &str = "G001";
    /// No evidence, or an evidence line outside the grammar.
    pub const EVIDENCE: &str = "G002";
    /// Evidence the truth contradicts.
    pub const CONTRADICTED: &str = "G003";
    /// A disputed guard code the last validation did not raise (or none named).
    pub const NOT_RAISED: &str = "G004";
}

/// A report larger than this is refused (a gap report is a dozen lines).
pub const MAX_GAP_BYTES: usize = 64 << 10;
const MAX_EVIDENCE: usize = 200;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GapKind {
    /// The DSL cannot say what the model does.
    DslGap,
    /// A guard rejects what the model really does.
    DisputedGuard,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GapDef {
    kind: String,
    summary: String,
    #[serde(default)]
    needs: Option<String>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    evidence: Vec<String>,
    #[serde(default)]
    affects: Vec<String>,
}

/// A gap report whose every claim holds: what the worker records in the job.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Gap {
    pub kind: GapKind,
    pub summary: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    pub evidence: Vec<Claim>,
    /// The engine quantities (`harch_engine::analysis::QUANTITIES`) the gap makes unverified:
    /// every figure derived from one of them is labelled so wherever it appears.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub affects: Vec<String>,
}

impl Gap {
    /// Whether the gap makes engine quantity `name` unverified.
    pub fn affects(&self, name: &str) -> bool {
        self.affects.iter().any(|a| a == name)
    }

    /// The label a figure derived from `quantities` carries, when the gap affects any of them.
    pub fn label(&self, quantities: &[&str]) -> Option<String> {
        quantities
            .iter()
            .any(|q| self.affects(q))
            .then(|| format!("unverified (declared gap: {})", clip(&self.summary, 80)))
    }

    /// One line for logs, the job's error and `status`.
    pub fn line(&self) -> String {
        let what = match self.kind {
            GapKind::DslGap => "a DSL gap".to_string(),
            GapKind::DisputedGuard => {
                format!("a disputed guard ({})", self.code.as_deref().unwrap_or("?"))
            }
        };
        let needs = self
            .needs
            .as_deref()
            .map(|n| format!("; needs: {}", clip(n, 200)))
            .unwrap_or_default();
        format!(
            "the agent reports {what}: {}{needs} ({} evidence claims verified)",
            clip(&self.summary, 300),
            self.evidence.len()
        )
    }
}

/// Checks the gap report next to a spec whose validation raised `raised`. A spec that
/// validates with a gap report is "valid with a declared gap": the report must then be a
/// `dsl_gap` that names the numbers it affects, which everything that shows them labels.
pub fn check_declared(
    file: &str,
    text: &str,
    facts: &Facts,
    raised: &[&str],
) -> Result<Gap, Vec<Diagnostic>> {
    let gap = check_gap(file, text, facts, raised)?;
    if raised.is_empty() && gap.affects.is_empty() {
        return Err(vec![
            Diagnostic::new(
                GUARD,
                code::SHAPE,
                "the spec validates and its gap report names no number it affects".to_string(),
                Location::in_file(file),
            )
            .hint(format!(
                "affects: the quantities the spec cannot state right, from {}",
                harch_engine::analysis::QUANTITIES.join(", ")
            )),
        ]);
    }
    Ok(gap)
}

/// Parses and checks a gap report. `raised` are the codes the last validation of the spec
/// raised (a disputed guard must be one of them). Errors are located diagnostics, like
/// validate's, so the agent can fix the report.
pub fn check_gap(
    file: &str,
    text: &str,
    facts: &Facts,
    raised: &[&str],
) -> Result<Gap, Vec<Diagnostic>> {
    let at = Location::in_file(file);
    let d = |code: &'static str, msg: String, hint: &str| {
        Diagnostic::new(GUARD, code, msg, at.clone()).hint(hint.to_string())
    };
    if text.len() > MAX_GAP_BYTES {
        return Err(vec![d(
            code::SHAPE,
            format!("the gap report is over {MAX_GAP_BYTES} bytes"),
            "a gap report is a summary and a few evidence lines",
        )]);
    }
    let def: GapDef = match harch_engine::load::parse_yaml(file, text) {
        Ok(d) => d,
        Err(e) => {
            return Err(vec![
                Diagnostic::new(GUARD, code::SHAPE, e.message, e.location).hint(
                    "fields: kind (dsl_gap | disputed_guard), summary, needs, code, evidence",
                ),
            ]);
        }
    };
    let mut errors = Vec::new();
    let kind = match def.kind.as_str() {
        "dsl_gap" => Some(GapKind::DslGap),
        "disputed_guard" => Some(GapKind::DisputedGuard),
        other => {
            errors.push(d(
                code::SHAPE,
                format!("gap kind `{other}` is neither dsl_gap nor disputed_guard"),
                "dsl_gap: the DSL cannot say it; disputed_guard: a guard's rule is wrong here",
            ));
            None
        }
    };
    if def.summary.trim().is_empty() {
        errors.push(d(
            code::SHAPE,
            "the gap report has an empty summary".into(),
            "say in one sentence what the model does that the spec cannot",
        ));
    }
    if kind == Some(GapKind::DisputedGuard) {
        match def.code.as_deref() {
            Some(c) if raised.contains(&c) => {}
            Some(c) => errors.push(d(
                code::NOT_RAISED,
                format!("the report disputes {c}, which the last validation did not raise"),
                "dispute a code validate reports for this spec (run validate)",
            )),
            None => errors.push(d(
                code::NOT_RAISED,
                "a disputed_guard report names no `code`".into(),
                "code: the error code you dispute, e.g. W001",
            )),
        }
    }
    for a in &def.affects {
        if !harch_engine::analysis::QUANTITIES.contains(&a.as_str()) {
            errors.push(d(
                code::SHAPE,
                format!(
                    "`affects` names `{}`, which is no quantity of the engine",
                    clip(a, 80)
                ),
                &format!(
                    "affects: a list of {}",
                    harch_engine::analysis::QUANTITIES.join(", ")
                ),
            ));
        }
    }
    if def.evidence.is_empty() {
        errors.push(d(
            code::EVIDENCE,
            "the gap report cites no evidence".into(),
            "evidence: src:, cfg:, ckpt: or count: lines showing what the model does",
        ));
    }
    let mut claims = Vec::new();
    for line in def.evidence.iter().take(MAX_EVIDENCE) {
        match parse_claim(line) {
            Err(e) => errors.push(d(
                code::EVIDENCE,
                format!("evidence `{}`: {}", clip(line, 120), e.message),
                &e.hint,
            )),
            Ok(c) => {
                let r = facts.check(&c);
                if r.holds {
                    claims.push(c);
                } else {
                    errors.push(d(
                        code::CONTRADICTED,
                        format!(
                            "evidence `{}` does not hold: {}",
                            clip(line, 120),
                            r.truth.unwrap_or_default()
                        ),
                        "cite what the truth says, verbatim",
                    ));
                }
            }
        }
    }
    match kind {
        Some(kind) if errors.is_empty() => Ok(Gap {
            kind,
            summary: def.summary,
            needs: def.needs,
            code: def.code,
            evidence: claims,
            affects: def.affects,
        }),
        _ => Err(errors),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use harch_guards::truth::{Dtype, Inventory, TensorInfo};
    use std::collections::BTreeMap;

    fn truth() -> (serde_json::Value, Inventory, BTreeMap<String, String>) {
        let config = serde_json::json!({ "linear_attn_config": { "head_dim": 128 } });
        let inv = Inventory::from_tensors(
            [TensorInfo {
                name: "model.layers.0.self_attn.A_log".into(),
                dtype: Dtype::F32,
                shape: [1, 1, 32, 1].into_iter().collect(),
                shard: None,
            }],
            None,
        );
        let src = BTreeMap::from([(
            "modeling_kimi.py".to_string(),
            "class A:\n    g = fused_kda_gate(g, self.A_log)\n".to_string(),
        )]);
        (config, inv, src)
    }

    #[test]
    fn verified_evidence_makes_a_gap_and_anything_else_goes_back_coded() {
        let (c, i, s) = truth();
        let facts = Facts::new(&c, &i, &s);
        let good = r#"
kind: dsl_gap
summary: "decay per key channel"
needs: "a [heads, d_k] decay"
evidence:
  - 'src: modeling_kimi.py:2 "g = fused_kda_gate(g, self.A_log)"'
  - 'ckpt: model.layers.X.self_attn.A_log = [1, 1, 32, 1] F32'
  - 'cfg: linear_attn_config.head_dim = 128'
"#;
        let gap = check_gap("g.yaml", good, &facts, &[]).unwrap();
        assert_eq!((gap.kind, gap.evidence.len()), (GapKind::DslGap, 3));
        assert!(gap.line().contains("3 evidence claims verified"));

        let codes = |text: &str, raised: &[&str]| -> Vec<&'static str> {
            check_gap("g.yaml", text, &facts, raised)
                .unwrap_err()
                .iter()
                .map(|d| d.code)
                .collect()
        };
        let wrong = good.replace("128", "64");
        assert_eq!(codes(&wrong, &[]), vec![code::CONTRADICTED]);
        let disputed = good.replace("kind: dsl_gap", "kind: disputed_guard\ncode: W001");
        assert_eq!(codes(&disputed, &["S002"]), vec![code::NOT_RAISED]);
        assert!(check_gap("g.yaml", &disputed, &facts, &["W001"]).is_ok());
        assert_eq!(
            codes("kind: gap\nsummary: x\nevidence: []\n", &[]),
            vec![code::SHAPE, code::EVIDENCE]
        );
        assert_eq!(codes("kind: [", &[]), vec![code::SHAPE]);
        let bad_line = good.replace("'cfg: linear", "'config: linear");
        assert_eq!(codes(&bad_line, &[]), vec![code::EVIDENCE]);
    }
}
