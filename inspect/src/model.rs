//! What a page shows of one model, collected from one validation and one symbolic evaluation:
//! the verdict against its truth, the figures `show --json` prints, the dims and what config
//! key each binds, the layer groups, the graph's scopes and the cost lens's formulas.

use std::collections::BTreeMap;

use harch_engine::analysis::REPORT_CONTEXT;
use harch_engine::q::Sym;
use harch_engine::{Analysis, EvalOptions, ModelIr, Q, Repo};
use harch_guards::GuardSet;
use harch_guards::truth::Truth;
use harch_library::subject::Subject;
use serde::Serialize;

use crate::graph::{self, Scope};

#[derive(Clone, Debug, Serialize)]
pub struct ModelData {
    /// The model id or spec name the page was asked for.
    pub title: String,
    /// The spec's `model:` name.
    pub spec: String,
    pub summary: String,
    pub model_type: Option<String>,
    pub architectures: Vec<String>,
    /// Where the truth came from.
    pub truth: String,
    pub verdict: Verdict,
    /// The engine's summary, as `show --json` prints it (no figures when the spec does not
    /// evaluate).
    pub figures: Option<serde_json::Value>,
    /// The checkpoint's own byte count (the safetensors headers), beside the spec's.
    pub checkpoint_bytes: Option<i128>,
    /// `max_position_embeddings` as config.json states it.
    pub context_limit: Option<i128>,
    pub dims: Vec<DimInfo>,
    pub groups: Vec<GroupInfo>,
    pub scopes: Vec<Scope>,
    pub lens: Lens,
    /// Every atom the embedded formulas name (dims, `layers(block)`, ...) and its value; the
    /// page binds `ctx` itself.
    pub bindings: BTreeMap<String, i128>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub valid: bool,
    /// `load` or `evaluation` when the check stopped before every guard ran.
    pub stopped_at: Option<String>,
    pub errors: Vec<Problem>,
    pub warnings: usize,
    /// A valid spec's declared gap, as one line, and the quantities it leaves unverified.
    pub declared_gap: Option<String>,
    pub unverified: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Problem {
    pub code: String,
    pub guard: String,
    pub message: String,
    pub hint: Option<String>,
    /// `file:line:column` and the node, as far as known.
    pub at: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct DimInfo {
    pub symbol: String,
    pub value: i128,
    pub kind: String,
    pub summary: String,
    /// The expression the spec binds it to (`config.hidden_size`).
    pub binds: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupInfo {
    /// `stack[block]`, the graph node of the group.
    pub id: String,
    pub stack: String,
    pub block: String,
    pub layers: String,
    pub count: usize,
    pub params: i128,
    pub kv_bytes_per_token: i128,
    pub state_bytes_per_sequence: i128,
    pub top_role: Option<String>,
    pub fills: Vec<Fill>,
}

/// What fills a slot of a group's block template, and the dims that component reads.
#[derive(Clone, Debug, Serialize)]
pub struct Fill {
    pub slot: String,
    pub component: String,
    pub role: String,
    pub summary: String,
    pub dims: Vec<(String, i128)>,
}

/// The cost lens: formulas of the context (`ctx`) the page's slider evaluates.
#[derive(Clone, Debug, Serialize)]
pub struct Lens {
    /// The context the embedded values are at.
    pub context: i128,
    pub max_context: i128,
    pub total: LensRow,
    /// One row per top-level node (embedding, each layer group, norm, head, MTP).
    pub parts: Vec<LensRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LensRow {
    pub id: String,
    pub params: i128,
    /// Cache bytes one sequence holds at `ctx`, and its value at `Lens::context`.
    pub kv_formula: String,
    pub kv: i128,
    /// FLOPs of one decode step at `ctx`, and its value at `Lens::context`.
    pub flops_formula: String,
    pub flops: i128,
}

/// Validates the subject with every guard and evaluates it once with formulas: everything a
/// page shows. A spec that does not load or evaluate still gives its verdict and errors.
pub fn collect(title: &str, s: &Subject) -> anyhow::Result<ModelData> {
    collect_from(
        title,
        &s.target.repo,
        &s.target.model,
        &s.truth,
        &s.truth_origin,
    )
}

/// [`collect`] for model `model` of `repo` against `truth` (read from `origin`), as the publish
/// stage holds them.
pub fn collect_from(
    title: &str,
    repo: &Repo,
    model: &str,
    truth: &Truth,
    origin: &str,
) -> anyhow::Result<ModelData> {
    let (mut report, _) = harch_guards::validate(repo, model, truth, &GuardSet::all());
    let gap = harch_library::declared_gap::validate_with_gap(repo, model, truth, &mut report);
    let verdict = Verdict {
        valid: report.valid,
        stopped_at: report.stopped_at.map(str::to_string),
        errors: report
            .errors
            .iter()
            .map(|d| Problem {
                code: d.code.to_string(),
                guard: d.guard.to_string(),
                message: d.message.clone(),
                hint: d.hint.clone(),
                at: at(&d.location),
            })
            .collect(),
        warnings: report.warnings.len(),
        declared_gap: gap
            .as_ref()
            .filter(|_| report.valid)
            .map(harch_library::declared_gap::line),
        unverified: gap.map(|g| g.affects).unwrap_or_default(),
    };
    let config = &truth.config;
    let text = config.get("text_config").unwrap_or(config);
    let int_key = |k: &str| {
        text.get(k)
            .or_else(|| config.get(k))
            .and_then(serde_json::Value::as_i64)
            .map(i128::from)
    };
    let mut data = ModelData {
        title: title.to_string(),
        spec: model.to_string(),
        summary: String::new(),
        model_type: config
            .get("model_type")
            .and_then(|v| v.as_str())
            .map(str::to_string),
        architectures: harch_library::subject::architectures(config),
        truth: origin.to_string(),
        verdict,
        figures: None,
        checkpoint_bytes: (!truth.inventory.is_empty())
            .then(|| truth.inventory.total_bytes() as i128),
        context_limit: int_key("max_position_embeddings"),
        dims: vec![],
        groups: vec![],
        scopes: vec![],
        lens: Lens {
            context: REPORT_CONTEXT,
            max_context: REPORT_CONTEXT,
            total: LensRow::empty(""),
            parts: vec![],
        },
        bindings: BTreeMap::new(),
    };
    // A spec that does not evaluate has errors and no figures.
    let Ok(ir) = repo.load_model(model) else {
        return Ok(data);
    };
    let a = harch_engine::evaluate(&ir, config, EvalOptions { symbolic: true });
    data.summary = ir.summary.clone();
    if !a.errors.is_empty() {
        return Ok(data);
    }
    data.figures = Some(serde_json::to_value(a.summary())?);
    data.dims = dims(&ir, &a);
    data.groups = groups(&ir, &a);
    data.scopes = graph::scopes(&a);
    data.lens = lens(&a, data.context_limit, &data.scopes);
    let mut atoms = std::collections::BTreeSet::new();
    for f in formulas(&data) {
        collect_atoms(f, &mut atoms);
    }
    data.bindings = bindings(&a, &atoms);
    Ok(data)
}

fn at(l: &harch_engine::Location) -> String {
    let mut s = l.file.clone().unwrap_or_default();
    if l.line > 0 {
        s.push_str(&format!(":{}:{}", l.line, l.column));
    }
    if let Some(n) = &l.node {
        s.push_str(&format!(" ({n})"));
    }
    s
}

fn dims(ir: &ModelIr, a: &Analysis) -> Vec<DimInfo> {
    ir.dims
        .iter()
        .filter_map(|b| {
            let value = a.dims.get(&b.name)?.v;
            let def = ir.dim_table.get(&b.name);
            Some(DimInfo {
                symbol: b.name.clone(),
                value,
                kind: def.map(|d| d.kind.clone()).unwrap_or_default(),
                summary: def.map(|d| d.summary.clone()).unwrap_or_default(),
                binds: b.raw.clone(),
            })
        })
        .collect()
}

fn groups(ir: &ModelIr, a: &Analysis) -> Vec<GroupInfo> {
    let sum = a.summary();
    sum.groups
        .iter()
        .zip(&a.groups)
        .map(|(g, row)| {
            let fills = ir
                .blocks
                .get(&g.block)
                .map(|b| {
                    b.fills
                        .iter()
                        .map(|(slot, f)| {
                            let c = ir.component(&f.name);
                            Fill {
                                slot: slot.clone(),
                                component: f.name.clone(),
                                role: c.map(|c| c.role.clone()).unwrap_or_else(|| "block".into()),
                                summary: c.map(|c| c.summary.clone()).unwrap_or_default(),
                                dims: c
                                    .map(|c| {
                                        c.dims
                                            .iter()
                                            .filter_map(|d| Some((d.clone(), a.dims.get(d)?.v)))
                                            .collect()
                                    })
                                    .unwrap_or_default(),
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            GroupInfo {
                id: format!("{}[{}]", g.stack, g.block),
                stack: g.stack.clone(),
                block: g.block.clone(),
                layers: g.layers.clone(),
                count: g.count,
                params: g.params,
                kv_bytes_per_token: g.kv_bytes_per_token,
                state_bytes_per_sequence: g.state_bytes_per_sequence,
                top_role: row.top_role.clone(),
                fills,
            }
        })
        .collect()
}

impl LensRow {
    fn empty(id: &str) -> LensRow {
        LensRow {
            id: id.into(),
            params: 0,
            kv_formula: "0".into(),
            kv: 0,
            flops_formula: "0".into(),
            flops: 0,
        }
    }
}

fn lens(a: &Analysis, context_limit: Option<i128>, scopes: &[Scope]) -> Lens {
    let ctx = Q::atom("ctx", REPORT_CONTEXT, true);
    let row = |id: &str, params: i128, keep: &dyn Fn(&str) -> bool| {
        let kv = a.cache_bytes_of_ctx(&ctx, |n| keep(&n.id));
        let flops = a.decode_flops_of_ctx(&ctx, |n| keep(&n.id));
        LensRow {
            id: id.into(),
            params,
            kv_formula: kv.formula(),
            kv: kv.v,
            flops_formula: flops.formula(),
            flops: flops.v,
        }
    };
    let parts = scopes
        .iter()
        .find(|s| s.id.is_empty())
        .map(|root| {
            root.nodes
                .iter()
                .filter(|n| n.kind != "io")
                .map(|n| row(&n.id, n.params, &|id| graph::under(id, &n.id)))
                .collect()
        })
        .unwrap_or_default();
    Lens {
        context: REPORT_CONTEXT,
        max_context: context_limit.unwrap_or(REPORT_CONTEXT).max(REPORT_CONTEXT),
        total: row("", a.params_total().v, &|_| true),
        parts,
    }
}

/// Every formula text the page may evaluate or show.
fn formulas(d: &ModelData) -> Vec<&str> {
    let mut out = vec![
        d.lens.total.kv_formula.as_str(),
        d.lens.total.flops_formula.as_str(),
    ];
    for p in &d.lens.parts {
        out.push(&p.kv_formula);
        out.push(&p.flops_formula);
    }
    for s in &d.scopes {
        for n in &s.nodes {
            out.push(&n.params_formula);
            out.push(&n.flops_formula);
            for c in &n.caches {
                out.push(&c.formula);
            }
        }
    }
    out
}

/// The atom names of a formula's text, as the page's evaluator reads them (a name followed by
/// a parenthesis that is not a call is an atom such as `layers(moe)`).
fn collect_atoms(text: &str, out: &mut std::collections::BTreeSet<String>) {
    for (name, _) in crate::formula::names(text) {
        if name != "ctx" {
            out.insert(name);
        }
    }
}

/// Values of the atoms the engine's formulas name: its dims, and the counts it writes as
/// atoms — a group's layers, a recurrent state's elements, an image's patches. The formulas
/// themselves carry no values, so each is read where the walk recorded it.
fn bindings(a: &Analysis, atoms: &std::collections::BTreeSet<String>) -> BTreeMap<String, i128> {
    // A quantity whose whole formula is one atom carries that atom's value (a group's row
    // count is `layers(moe)`, a recurrent state's elements `state(layers[linear_moe].attention.core)`).
    let mut alone: BTreeMap<String, i128> = BTreeMap::new();
    let mut note = |q: &Q| {
        if let Some(s) = &q.f
            && let Sym::Atom(name) = &**s
        {
            alone.entry(name.to_string()).or_insert(q.v);
        }
    };
    for n in &a.nodes {
        for q in [
            &n.count,
            &n.active,
            &n.params,
            &n.flops_fixed,
            &n.flops_per_ctx,
        ] {
            note(q);
        }
        n.window.iter().chain(&n.selected).for_each(&mut note);
        if let Some(p) = &n.per_image {
            note(&p.positions);
        }
    }
    for c in &a.caches {
        note(&c.elements);
        note(&c.count);
        c.window.iter().for_each(&mut note);
    }
    for w in &a.weights {
        note(&w.count);
    }
    let mut out = BTreeMap::new();
    for name in atoms {
        let v = if let Some(q) = a.dims.get(name) {
            Some(q.v)
        } else if let Some(v) = alone.get(name) {
            Some(*v)
        } else if let Some(b) = inner(name, "layers") {
            a.groups
                .iter()
                .find(|g| g.block == b)
                .map(|g| g.layers.len() as i128)
        } else if let Some(node) = inner(name, "state") {
            a.caches.iter().find_map(|c| {
                let row = &a.nodes[c.node];
                let last = row.id.rsplit('.').next().unwrap_or(&row.id);
                (last == node)
                    .then(|| row.args.get("__state_elements").and_then(|x| x.int))
                    .flatten()
            })
        } else if let Some(input) = inner(name, "patches") {
            a.images
                .iter()
                .find(|i| i.input == input)
                .map(|i| i.patches)
        } else {
            None
        };
        if let Some(v) = v {
            out.insert(name.clone(), v);
        }
    }
    out
}

fn inner<'a>(name: &'a str, head: &str) -> Option<&'a str> {
    name.strip_prefix(head)?
        .strip_prefix('(')?
        .strip_suffix(')')
}
