//! Mermaid diagrams for the pull request: the model (its top-level graph, each stack drawn as its
//! layer schedule by block type) and each new component (its nodes and `in:` edges). Drawn from
//! the loaded IR and the evaluation's layer groups, so a new architecture needs no code here.
//! Every label is spec text an agent wrote: it is escaped so it cannot end the block.

use std::collections::BTreeSet;
use std::fmt::Write;

use harch_engine::ModelIr;
use harch_engine::analysis::GroupSummary;
use harch_engine::ir::{ComponentIr, NodeIr, NodeKind};

/// The model: inputs, top-level nodes in dataflow order, stacks as subgraphs with one box per
/// block type (its count, layer ranges, template and fills).
pub fn model(ir: &ModelIr, groups: &[GroupSummary]) -> String {
    let mut out = String::from("flowchart TD\n");
    let ids: BTreeSet<&str> = ir.graph.iter().map(|n| n.id.as_str()).collect();
    inputs(&mut out, &ir.graph, &ids, "  ");
    for n in &ir.graph {
        let id = node_id(&n.id);
        match &n.kind {
            NodeKind::Stack(_) => {
                let mine: Vec<&GroupSummary> = groups.iter().filter(|g| g.stack == n.id).collect();
                let layers: usize = mine.iter().map(|g| g.count).sum();
                let role = n
                    .role
                    .as_deref()
                    .map(|r| format!(" · role {r}"))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "  subgraph {id}[\"{}\"]",
                    label(&format!(
                        "{} · {layers} layer{}{role}",
                        n.id,
                        if layers == 1 { "" } else { "s" }
                    ))
                );
                out.push_str("    direction LR\n");
                for g in &mine {
                    let block = ir.blocks.get(&g.block);
                    let mut text = format!("{} × {}<br/>layers {}", g.block, g.count, g.layers);
                    if let Some(b) = block {
                        let fills: Vec<String> = b
                            .fills
                            .iter()
                            .map(|(slot, f)| format!("{slot}: {}", f.name))
                            .collect();
                        text.push_str(&format!("<br/>{}", b.template));
                        if !fills.is_empty() {
                            text.push_str(&format!("({})", fills.join(", ")));
                        }
                    }
                    let _ = writeln!(
                        out,
                        "    {}[\"{}\"]",
                        node_id(&format!("{}__{}", n.id, g.block)),
                        label(&text)
                    );
                }
                out.push_str("  end\n");
            }
            _ => {
                let _ = writeln!(out, "  {id}[\"{}\"]", label(&node_text(n)));
            }
        }
    }
    edges(&mut out, &ir.graph, "  ");
    for o in &ir.outputs {
        let _ = writeln!(
            out,
            "  {} --> out_{}([\"output\"])",
            node_id(o),
            sanitize(o)
        );
    }
    out
}

/// A component: its inputs, nodes (ops, nested components, slots) and outputs.
pub fn component(c: &ComponentIr) -> String {
    let mut out = String::from("flowchart TD\n");
    let ids: BTreeSet<&str> = c.nodes.iter().map(|n| n.id.as_str()).collect();
    inputs(&mut out, &c.nodes, &ids, "  ");
    for n in &c.nodes {
        let _ = writeln!(out, "  {}[\"{}\"]", node_id(&n.id), label(&node_text(n)));
    }
    edges(&mut out, &c.nodes, "  ");
    for o in &c.outputs {
        if ids.contains(o.as_str()) {
            let _ = writeln!(
                out,
                "  {} --> out_{}([\"output\"])",
                node_id(o),
                sanitize(o)
            );
        }
    }
    out
}

fn node_text(n: &NodeIr) -> String {
    let what = match &n.kind {
        NodeKind::Op(op) => op.name.to_string(),
        NodeKind::Component { name, .. } => format!("component {name}"),
        NodeKind::Slot(s) => format!("slot {s}"),
        NodeKind::Stack(_) => "stack".to_string(),
    };
    let count = n
        .instances
        .as_ref()
        .map(|_| " · per instance".to_string())
        .unwrap_or_default();
    format!("{}<br/>{what}{count}", n.id)
}

/// Stadium nodes for inputs that no node of the graph produces (`input_ids`, a component's
/// `x`).
fn inputs(out: &mut String, nodes: &[NodeIr], ids: &BTreeSet<&str>, indent: &str) {
    let mut seen = BTreeSet::new();
    for n in nodes {
        for i in &n.inputs {
            if !ids.contains(i.as_str()) && seen.insert(i.clone()) {
                let _ = writeln!(out, "{indent}{}([\"{}\"])", node_id(i), label(i));
            }
        }
    }
}

fn edges(out: &mut String, nodes: &[NodeIr], indent: &str) {
    for n in nodes {
        for i in &n.inputs {
            let _ = writeln!(out, "{indent}{} --> {}", node_id(i), node_id(&n.id));
        }
    }
}

/// A Mermaid node id: letters, digits and `_` only, prefixed so no id is a keyword (`end`).
fn node_id(s: &str) -> String {
    format!("n_{}", sanitize(s))
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Label text inside `["…"]`: Mermaid entity codes for quotes and angle brackets, no backticks
/// (they would start a Markdown string, and three would end the fenced block), no newlines;
/// `<br/>` is the one line break kept.
fn label(s: &str) -> String {
    let marked = s.replace("<br/>", "\u{1}");
    let mut out = String::new();
    for c in marked.chars().take(300) {
        match c {
            '\u{1}' => out.push_str("<br/>"),
            '"' => out.push_str("#quot;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            '`' => out.push('\''),
            '#' => out.push_str("#35;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_cannot_break_out() {
        let l = label("a\"]\n```\n<script>#");
        assert!(!l.contains('"'));
        assert!(!l.contains('`'));
        assert!(!l.contains('\n'));
        assert!(!l.contains('<'));
        assert_eq!(label("x<br/>y"), "x<br/>y");
        assert_eq!(node_id("layers.end"), "n_layers_end");
    }
}
