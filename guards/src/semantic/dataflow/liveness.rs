//! Dead nodes (M070–M071): every node's value must reach an output of the model (its outputs,
//! the end of a multi-token prediction module, a decode variant's result, a stream). A weight
//! that matches the checkpoint but feeds nothing is a wiring mistake that the byte count cannot
//! see; a dead computation inflates FLOPs.

use std::collections::{BTreeMap, BTreeSet};

use harch_engine::Analysis;

use super::{Findings, code, instance_of, local_id, thousands};
use crate::report::Diagnostic;

pub fn check(a: &Analysis) -> Vec<Diagnostic> {
    let dead: BTreeSet<usize> = a.dead_nodes().into_iter().collect();
    let mut f = Findings::default();
    let mut weights: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for w in &a.weights {
        if dead.contains(&w.node) {
            weights.entry(w.node).or_default().push(&w.name);
        }
    }
    for region in regions(a, &dead) {
        let head = region[0];
        let inst = instance_of(&a.nodes[head].id);
        let names: Vec<String> = region
            .iter()
            .map(|&r| format!("`{}`", local_id(&a.nodes[r].id, inst)))
            .collect();
        let rest = if names.len() > 1 {
            format!(" (with {}, which only it feeds)", names[1..].join(", "))
        } else {
            String::new()
        };
        let weighted: Vec<usize> = region
            .iter()
            .copied()
            .filter(|r| weights.contains_key(r))
            .collect();
        if let Some(&w) = weighted.first() {
            let n = &a.nodes[w];
            let params: i128 = weighted.iter().map(|&r| a.nodes[r].params.v).sum();
            let tensors = weighted
                .iter()
                .flat_map(|r| weights[r].iter())
                .map(|t| format!("`{t}`"))
                .collect::<Vec<_>>()
                .join(", ");
            f.push(
                code::DEAD_WEIGHTS,
                inst,
                &n.loc,
                format!(
                    "`{}` holds weights ({tensors}; {} parameters{}) but its value reaches no output of the model{rest}",
                    local_id(&n.id, inst),
                    thousands(params),
                    if n.count.v > 1 {
                        format!(" in each of {} copies", thousands(n.count.v))
                    } else {
                        String::new()
                    }
                ),
                "wire it where forward() uses it (the node that consumes it in the source takes it in its `in:`); a weight the source never uses is not part of the forward pass".into(),
            );
        } else {
            let n = &a.nodes[head];
            f.push(
                code::DEAD_NODE,
                inst,
                &n.loc,
                format!(
                    "`{}` computes a value that reaches no output of the model{rest}",
                    local_id(&n.id, inst)
                ),
                "wire it where forward() uses it, or remove it if forward() does not compute it (dead nodes still count FLOPs)".into(),
            );
        }
    }
    f.finish()
}

/// Dead rows grouped by the edges between them, each group led by its upstream-most row
/// (the one no other dead row feeds), so one mistake is one finding.
fn regions(a: &Analysis, dead: &BTreeSet<usize>) -> Vec<Vec<usize>> {
    let mut parent: BTreeMap<usize, usize> = dead.iter().map(|&r| (r, r)).collect();
    fn find(p: &mut BTreeMap<usize, usize>, x: usize) -> usize {
        let mut r = x;
        while p[&r] != r {
            r = p[&r];
        }
        p.insert(x, r);
        r
    }
    for &r in dead {
        for &i in a.nodes[r].inputs.iter().flatten() {
            if dead.contains(&i) {
                let (x, y) = (find(&mut parent, r), find(&mut parent, i));
                parent.insert(x.max(y), x.min(y));
            }
        }
    }
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &r in dead {
        let root = find(&mut parent, r);
        groups.entry(root).or_default().push(r);
    }
    groups.into_values().collect()
}
