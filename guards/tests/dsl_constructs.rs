//! The DSL constructs that new architectures need, against small synthetic checkpoints built in
//! the test from a written-out tensor list and config (`tests/dsl/<case>.yaml`, one or two
//! layers each): each case's spec, written with the library plus its own drafts, validates with
//! every guard on, and its numbers are what the checkpoint and config say. Each mutation in
//! `tests/dsl/mutations.yaml` (a wrong buffer shape, a buffer declared a parameter, a wrong
//! decay shape, a wrong rename, a NoPE layer given rope, ...) is rejected by the intended guard
//! with the intended code, and by nothing unrelated.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use harch_engine::Repo;
use harch_engine::load::parse_yaml;
use harch_guards::truth::{Dtype, Inventory, TensorInfo, Truth};
use harch_guards::{GuardSet, Report, validate};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    config: serde_json::Value,
    /// One tensor per line: `name DTYPE [d0, d1, ...]`.
    tensors: String,
    sources: BTreeMap<String, String>,
    /// Spec files, keyed by their path under the repository root.
    files: BTreeMap<String, String>,
    expect: Expect,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    #[serde(default)]
    kv_bytes_per_token: i128,
    #[serde(default)]
    state_bytes_per_sequence: i128,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Mutation {
    name: String,
    case: String,
    file: String,
    find: String,
    replace: String,
    guard: String,
    code: String,
    #[serde(default)]
    also: Vec<String>,
    /// Text the rejecting diagnostic's hint must contain (the help points the right way).
    hint: Option<String>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn library_files() -> BTreeMap<String, String> {
    let root = root();
    let mut files = BTreeMap::new();
    let mut dirs = vec![root.join("specs")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                let rel = p
                    .strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                files.insert(rel, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    files
}

fn case(name: &str) -> Case {
    let file = format!("tests/dsl/{name}.yaml");
    let text = std::fs::read_to_string(root().join(&file)).unwrap();
    parse_yaml(&file, &text).unwrap_or_else(|e| panic!("{e}"))
}

fn inventory(list: &str) -> Inventory {
    let tensors: Vec<TensorInfo> = list
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (name, rest) = l.trim().split_once(' ').expect("name DTYPE [shape]");
            let (dtype, shape) = rest.trim().split_once(' ').expect("DTYPE [shape]");
            let shape = shape
                .trim()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .split(',')
                .map(|d| d.trim().parse().expect("an axis"))
                .collect();
            TensorInfo {
                name: name.to_string(),
                dtype: Dtype::parse(dtype).expect("a safetensors dtype"),
                shape,
                shard: None,
            }
        })
        .collect();
    Inventory::from_tensors(tensors, None)
}

/// The case's truth, and the repository: the library plus the case's spec files, patched.
fn setup(c: &Case, patch: Option<&Mutation>) -> (Repo, Truth, String) {
    let mut files = library_files();
    for (k, v) in &c.files {
        files.insert(k.clone(), v.clone());
    }
    if let Some(m) = patch {
        let text = files
            .get_mut(&m.file)
            .unwrap_or_else(|| panic!("{}: no file {}", m.name, m.file));
        assert_eq!(
            text.matches(&m.find).count(),
            1,
            "{}: `find` must occur exactly once in {}",
            m.name,
            m.file
        );
        *text = text.replacen(&m.find, &m.replace, 1);
    }
    let model = c
        .files
        .keys()
        .find(|k| k.contains("/models/"))
        .expect("a case has a model spec")
        .clone();
    let truth = Truth {
        config: c.config.clone(),
        inventory: inventory(&c.tensors),
        sources: c.sources.clone(),
        model_id: None,
        revision: None,
    };
    (Repo::from_files(files), truth, model)
}

fn run(c: &Case, patch: Option<&Mutation>) -> (Report, Option<harch_engine::Analysis>) {
    let (repo, truth, model) = setup(c, patch);
    assert!(repo.file_errors.is_empty(), "{:?}", repo.file_errors);
    validate(&repo, &model, &truth, &GuardSet::all())
}

const CASES: &[&str] = &[
    "kda_hybrid",
    "rotary_buffers",
    "moe_renamed",
    "nope_layers",
    "shared_selection",
];

#[test]
fn every_case_validates_and_counts_what_the_checkpoint_holds() {
    for name in CASES {
        let c = case(name);
        let (r, a) = run(&c, None);
        assert!(r.valid, "{name} is invalid: {:#?}", r.errors);
        assert!(r.warnings.is_empty(), "{name}: {:#?}", r.warnings);
        let a = a.unwrap();
        let inv = inventory(&c.tensors);
        assert_eq!(r.summary.byte_diff, 0, "{name}");
        assert_eq!(a.weight_bytes().v, inv.total_bytes() as i128, "{name}");
        assert_eq!(
            a.weight_tensors().v,
            inv.len() as i128,
            "{name}: every tensor, buffers too, is claimed"
        );
        // Buffers are stored but are not parameters: the parameters are the other tensors.
        let params: u128 = inv
            .iter()
            .filter(|t| !t.name.ends_with("inv_freq"))
            .map(|t| t.numel())
            .sum();
        assert_eq!(a.params_total().v, params as i128, "{name}");
        assert_eq!(
            a.kv_bytes_per_token().v,
            c.expect.kv_bytes_per_token,
            "{name}"
        );
        assert_eq!(
            a.state_bytes_per_sequence().v,
            c.expect.state_bytes_per_sequence,
            "{name}"
        );
        for n in a.nodes.iter().filter(|n| n.op == "buffer") {
            assert_eq!((n.params.v, n.flops_fixed.v), (0, 0), "{name}: {}", n.id);
        }
    }
}

#[test]
fn kda_decay_is_per_key_channel_and_its_state_per_head() {
    let (_, a) = run(&case("kda_hybrid"), None);
    let a = a.unwrap();
    let g = a.node("layers[kda].attention.g").expect("the decay gate");
    let shape: Vec<i128> = g
        .shape
        .iter()
        .filter_map(|x| x.dim())
        .map(|q| q.v)
        .collect();
    assert_eq!(shape, vec![4, 8], "one decay per head and key channel");
    let core = a.node("layers[kda].attention.core").unwrap();
    // 8 * heads * d_k * d_v
    assert_eq!(core.flops_fixed.v, 8 * 4 * 8 * 8);
    let state = core.args.get("__state_elements").and_then(|v| v.int);
    assert_eq!(state, Some(4 * 8 * 8), "state [heads, d_k, d_v]");
    // A_log [1, 1, heads, 1] is a parameter of the layer.
    let a_log = a
        .weights
        .iter()
        .find(|w| w.name.ends_with("A_log"))
        .unwrap();
    let dims: Vec<i128> = a_log.logical.iter().map(|q| q.v).collect();
    assert_eq!(dims, vec![1, 1, 4, 1]);
    assert_eq!(a_log.name, "model.layers.{i}.self_attn.A_log");
}

#[test]
fn mutations_are_rejected_by_the_intended_guards() {
    let file = "tests/dsl/mutations.yaml";
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let muts: Vec<Mutation> = parse_yaml(file, &text).unwrap_or_else(|e| panic!("{e}"));
    let mut failures = Vec::new();
    for m in &muts {
        let (r, _) = run(&case(&m.case), Some(m));
        let want = format!("{}:{}", m.guard, m.code);
        let got: Vec<String> = r
            .errors
            .iter()
            .map(|e| format!("{}:{}", e.guard, e.code))
            .collect();
        let hit = r
            .errors
            .iter()
            .find(|e| e.guard == m.guard && e.code == m.code);
        let Some(hit) = hit else {
            failures.push(format!("{}: wanted {want}, got {got:?}", m.name));
            continue;
        };
        let unrelated: Vec<&String> = got
            .iter()
            .filter(|g| **g != want && !m.also.iter().any(|a| g.ends_with(&format!(":{a}"))))
            .collect();
        if !unrelated.is_empty() {
            failures.push(format!(
                "{}: also rejected by {unrelated:?}: {:#?}",
                m.name, r.errors
            ));
        }
        if let Some(h) = &m.hint {
            let says = hit.hint.as_deref().unwrap_or("");
            if !says.contains(h.as_str()) {
                failures.push(format!("{}: hint `{says}` does not mention `{h}`", m.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
