//! The pull request body: what a maintainer needs to review a bot's spec in minutes. Every
//! number comes from the provenance record, which copied it from the engine's evaluation and the
//! validation report; nothing here computes a quantity. Agent-written text is escaped (`md`).

use std::fmt::Write;

use super::md::{cell, code};
use super::prepared::{BaseFacts, Prepared};
use super::review::ReviewStatus;
use harch_jobs::text::group_digits;

/// GitHub refuses bodies over 65,536 characters; stay clear of it.
pub const MAX_BODY_CHARS: usize = 60_000;

/// Rows of a long table shown in the body before the rest is left to the provenance file.
const COMPACT_ROWS: usize = 40;

pub fn render(p: &Prepared, base: &BaseFacts, draft_reasons: &[String]) -> String {
    let full = render_with(p, base, draft_reasons, false);
    if full.chars().count() <= MAX_BODY_CHARS {
        return full;
    }
    let compact = render_with(p, base, draft_reasons, true);
    if compact.chars().count() <= MAX_BODY_CHARS {
        return compact;
    }
    // Still too long (enormous diagrams): cut at a line and point at the provenance file.
    let note = format!(
        "\n\n…the body was cut at GitHub's size limit; everything is in `{}`.\n",
        p.provenance_path
    );
    let mut out = String::new();
    for line in compact.lines() {
        if out.chars().count() + line.chars().count() + note.len() + 8 > MAX_BODY_CHARS {
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    // Close a fence the cut left open, so the note renders as text.
    if out.matches("```").count() % 2 == 1 {
        out.push_str("```\n");
    }
    out.push_str(&note);
    out
}

fn render_with(p: &Prepared, base: &BaseFacts, draft_reasons: &[String], compact: bool) -> String {
    let pv = &p.provenance;
    let mut b = String::new();
    let _ = writeln!(
        b,
        "<!-- harch:publish model={} spec={} -->",
        cell(&p.model_id, 200),
        cell(&p.spec_key, 200)
    );
    if !draft_reasons.is_empty() {
        b.push_str("> [!WARNING]\n> **Draft: not ready to merge.**\n");
        for r in draft_reasons {
            let _ = writeln!(b, "> - {}", cell(r, 500));
        }
        b.push('\n');
    }
    let _ = writeln!(
        b,
        "## {}: {} spec{}\n",
        cell(&p.model_id, 200),
        code(&p.spec_name, 80),
        if base.new_spec {
            " (new architecture)"
        } else {
            ""
        }
    );
    if !p.spec_summary.trim().is_empty() {
        let _ = writeln!(b, "{}\n", cell(&p.spec_summary, 400));
    }
    let truth = &pv.truth;
    let rev = match &truth.revision {
        Some(r) => format!(" at `{}`", cell(r, 64)),
        None => " (revision not recorded)".to_string(),
    };
    let _ = writeln!(
        b,
        "Checked against the checkpoint of `{}`{rev}: {} tensors, {} bytes (truth from {}). Spec from {}.\n",
        cell(&p.model_id, 200),
        group_digits(pv.validate.checkpoint_tensors as i128),
        group_digits(pv.validate.checkpoint_bytes),
        cell(
            if truth.origin.is_empty() {
                "local files"
            } else {
                &truth.origin
            },
            40
        ),
        match p.spec_origin.as_str() {
            "library" => "the harch library".to_string(),
            other => format!("the {} stage", cell(other, 20)),
        }
    );

    summary_table(&mut b, p);
    guards(&mut b, p, compact);
    review(&mut b, p, compact);
    diagrams(&mut b, p, base, compact);
    agents(&mut b, p);

    b.push_str("### Reproduce\n\nFrom a checkout of this branch, with `harch-worker` built from the spec repository:\n\n```sh\n");
    for c in &pv.reproduce {
        let _ = writeln!(b, "{c}");
    }
    b.push_str("```\n\n");
    let _ = writeln!(
        b,
        "---\n<sub>Provenance: `{}` · job `{}` · harch {} · how to review a harch pull request: docs/publishing.md</sub>",
        p.provenance_path,
        cell(&pv.job.id, 40),
        cell(&pv.job.harch_version, 20)
    );
    b
}

fn summary_table(b: &mut String, p: &Prepared) {
    let f = &p.provenance.figures;
    let v = &p.provenance.validate;
    let bytes = if v.byte_diff == 0 && f.weight_bytes == v.checkpoint_bytes {
        format!("{} = checkpoint ✓", group_digits(f.weight_bytes))
    } else {
        format!(
            "{} ≠ checkpoint {} ✗",
            group_digits(f.weight_bytes),
            group_digits(v.checkpoint_bytes)
        )
    };
    b.push_str("### Summary\n\n| | |\n|---|---:|\n");
    let rows = [
        (
            "Parameters, total".to_string(),
            "params_total",
            group_digits(f.params_total),
        ),
        (
            "Parameters, active per token (embedding excluded)".to_string(),
            "params_active",
            group_digits(f.params_active),
        ),
        ("Weight bytes".to_string(), "weight_bytes", bytes),
        (
            "KV cache bytes per token".to_string(),
            "kv_bytes_per_token",
            group_digits(f.kv_bytes_per_token),
        ),
        (
            "State bytes per sequence".to_string(),
            "state_bytes_per_sequence",
            group_digits(f.state_bytes_per_sequence),
        ),
        (
            format!(
                "Decode FLOPs per token (context {})",
                group_digits(f.context)
            ),
            "decode_flops_per_token",
            group_digits(f.decode_flops_per_token),
        ),
    ];
    for (k, q, v) in rows {
        // A figure a declared gap affects says so in its cell.
        let label = p
            .declared_gap
            .as_ref()
            .and_then(|g| g.label(&[q]))
            .map(|l| format!(" ⚠ {}", cell(&l, 200)))
            .unwrap_or_default();
        let _ = writeln!(b, "| {k} | {v}{label} |");
    }
    if f.params_mtp != 0 {
        let _ = writeln!(
            b,
            "| Parameters in MTP layers | {} |",
            group_digits(f.params_mtp)
        );
    }
    b.push('\n');
    if !f.groups.is_empty() {
        b.push_str("| stack | block | layers | params | KV bytes / token | state bytes / seq |\n|---|---|---|---:|---:|---:|\n");
        for g in &f.groups {
            let _ = writeln!(
                b,
                "| {} | {} | {} ({}) | {} | {} | {} |",
                code(&g.stack, 60),
                code(&g.block, 60),
                cell(&g.layers, 80),
                g.count,
                group_digits(g.params),
                group_digits(g.kv_bytes_per_token),
                group_digits(g.state_bytes_per_sequence)
            );
        }
        b.push('\n');
    }
}

fn guards(b: &mut String, p: &Prepared, compact: bool) {
    let v = &p.provenance.validate;
    let _ = writeln!(
        b,
        "### Guards\n\n`validate` with every guard: **{}**, {} errors, {} warnings.\n\n| guard | result |\n|---|---|",
        if v.valid { "valid" } else { "invalid" },
        v.errors,
        v.warnings.len()
    );
    for g in &v.guards {
        let detail = if g == "weight" {
            format!(
                "✓ {} of {} checkpoint tensors claimed, {} bytes difference",
                group_digits(v.matched_tensors as i128),
                group_digits(v.checkpoint_tensors as i128),
                group_digits(v.byte_diff)
            )
        } else {
            "✓".to_string()
        };
        let _ = writeln!(b, "| {g} | {detail} |");
    }
    b.push('\n');
    if !v.warnings.is_empty() {
        let shown = if compact {
            0
        } else {
            COMPACT_ROWS.min(v.warnings.len())
        };
        if shown > 0 {
            b.push_str("Warnings (not blocking):\n\n");
            for w in &v.warnings[..shown] {
                let _ = writeln!(b, "- `{}` {}", cell(&w.code, 10), cell(&w.message, 300));
            }
        }
        if shown < v.warnings.len() {
            let _ = writeln!(
                b,
                "\n{} warnings listed in `{}` (`validate.warnings`).",
                v.warnings.len() - shown,
                p.provenance_path
            );
        }
        b.push('\n');
    }
}

fn mark(verdict: &str) -> &'static str {
    match verdict {
        "verified" => "✓ verified",
        "contradicted" => "✗ contradicted",
        "unverified" => "? unverified",
        _ => "? unchecked",
    }
}

fn review(b: &mut String, p: &Prepared, compact: bool) {
    let r = &p.provenance.review;
    b.push_str("### Review\n\n");
    match r.status {
        ReviewStatus::NotReviewed => {
            b.push_str("**Not reviewed**: no review stage completed for this job. Check the spec against the forward source yourself before merging.\n\n");
            return;
        }
        s => {
            let verified = r.mapping.iter().filter(|m| m.verdict == "verified").count();
            let _ = writeln!(
                b,
                "Verdict: **{}**. {verified} of {} mapping rows verified by the evidence checker; {} defects.\n",
                s.label(),
                r.mapping.len(),
                r.defects.len()
            );
        }
    }
    if !r.mapping.is_empty() {
        let rows: Vec<(usize, &super::review::MappingRow)> = if compact {
            r.mapping
                .iter()
                .enumerate()
                .filter(|(_, m)| m.verdict != "verified" || m.status != "consistent")
                .take(COMPACT_ROWS)
                .collect()
        } else {
            r.mapping.iter().enumerate().collect()
        };
        b.push_str(
            "| # | forward step | spec node | reviewer | evidence |\n|---:|---|---|---|---|\n",
        );
        for (i, m) in &rows {
            let _ = writeln!(
                b,
                "| {} | {} | {} | {} | {} |",
                i + 1,
                cell(&m.step, 160),
                m.node.as_deref().map_or("—".to_string(), |n| code(n, 100)),
                cell(&m.status, 20),
                mark(&m.verdict)
            );
        }
        if rows.len() < r.mapping.len() {
            let open_left = r.open_rows().len() - rows.len();
            let _ = writeln!(
                b,
                "\n{} more rows in `{}` (`review.mapping`), {}.",
                r.mapping.len() - rows.len(),
                p.provenance_path,
                if open_left == 0 {
                    "all verified and consistent".to_string()
                } else {
                    format!("{open_left} of them not verified")
                }
            );
        }
        b.push('\n');
    }
    if !r.defects.is_empty() {
        b.push_str("| defect | where | evidence |\n|---|---|---|\n");
        for d in r.defects.iter().take(COMPACT_ROWS) {
            let _ = writeln!(
                b,
                "| {} | {} | {} |",
                cell(&d.title, 160),
                d.place.as_deref().map_or("—".to_string(), |n| code(n, 100)),
                mark(&d.verdict)
            );
        }
        b.push('\n');
    }
}

fn diagrams(b: &mut String, p: &Prepared, base: &BaseFacts, compact: bool) {
    let _ = writeln!(b, "### Model\n\n```mermaid\n{}```\n", p.model_diagram);
    let _ = writeln!(
        b,
        "Inspector page: [`{0}`]({0}) on this branch — one self-contained HTML file (overview, architecture graph opened layer by layer, breakdown, cost lens); download it and open it in a browser.\n",
        p.page_path
    );
    if p.component_diagrams.is_empty() {
        return;
    }
    b.push_str("### New components\n\n");
    for (name, diagram) in &p.component_diagrams {
        let path = p.drafts.get(name).map(String::as_str).unwrap_or("");
        let state = if base.new_drafts.contains(name) {
            "new draft"
        } else {
            "draft already in the base branch"
        };
        let _ = writeln!(b, "#### {} ({state}, `{path}`)\n", code(name, 80));
        if compact && diagram.len() > 4_000 {
            let _ = writeln!(b, "Diagram left out for size; see `{path}`.\n");
        } else {
            let _ = writeln!(b, "```mermaid\n{diagram}```\n");
        }
    }
}

fn agents(b: &mut String, p: &Prepared) {
    let agents = &p.provenance.agents;
    b.push_str("### Agents\n\n");
    if agents.is_empty() {
        b.push_str("No agent worked on this spec (it comes from the harch library).\n\n");
        return;
    }
    b.push_str("| stage | backend | model | attempts | turns | tokens in / out | cost | time |\n|---|---|---|---:|---:|---:|---:|---:|\n");
    let (mut turns, mut tin, mut tout, mut cost) = (0u64, 0u64, 0u64, 0f64);
    for a in agents {
        turns += a.turns;
        tin += a.input_tokens;
        tout += a.output_tokens;
        cost += a.cost_usd;
        let _ = writeln!(
            b,
            "| {} | {} | {} | {} | {} | {} / {} | {} | {} s |",
            a.stage,
            a.backend
                .as_deref()
                .map_or("—".to_string(), |x| code(x, 40)),
            a.model.as_deref().map_or("—".to_string(), |x| code(x, 60)),
            a.attempts,
            a.turns,
            group_digits(a.input_tokens as i128),
            group_digits(a.output_tokens as i128),
            dollars(a.cost_usd),
            a.wall_ms / 1000
        );
    }
    if agents.len() > 1 {
        let _ = writeln!(
            b,
            "| total | | | | {turns} | {} / {} | {} | |",
            group_digits(tin as i128),
            group_digits(tout as i128),
            dollars(cost)
        );
    }
    b.push('\n');
}

/// Cents hide what small runs cost: four decimals under a dollar.
fn dollars(v: f64) -> String {
    if v < 1.0 {
        format!("${v:.4}")
    } else {
        format!("${v:.2}")
    }
}
