//! Fuzzing the spec loader, the expression parser and the evaluation: random and mutated input
//! (including mutations of the library specs) gives errors, never a panic. Failing seeds are
//! kept in `fuzz.proptest-regressions` next to this file and replayed first.

use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use harch_engine::analysis::QUANTITIES;
use harch_engine::expr::{self, Env, EvalError};
use harch_engine::{EvalOptions, Q, Repo, evaluate};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};

struct Library {
    files: BTreeMap<String, String>,
    configs: Vec<(String, serde_json::Value)>,
}

fn library() -> &'static Library {
    static LIB: OnceLock<Library> = OnceLock::new();
    LIB.get_or_init(|| Library {
        files: support::library_files(),
        configs: support::snapshot_configs(),
    })
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::SourceParallel(
            "proptest-regressions",
        ))),
        ..Config::default()
    }
}

/// Load every model of the repo and evaluate it against the config it serves (plainly and with
/// formulas); every derived quantity of a clean evaluation is computed too.
fn exercise(repo: &Repo, configs: &[(String, serde_json::Value)]) {
    let names: Vec<String> = repo.model_names().iter().map(|s| s.to_string()).collect();
    for name in names {
        let Ok(ir) = repo.load_model(&name) else {
            continue;
        };
        let config = support::config_for(configs, &ir.architectures)
            .unwrap_or(&configs[0].1)
            .clone();
        for symbolic in [false, true] {
            let a = evaluate(&ir, &config, EvalOptions { symbolic });
            if a.ok() {
                let _ = a.summary();
                for q in QUANTITIES {
                    let _ = a.quantity(q, 131_072);
                }
                let _ = a.cache_bytes_at(1 << 20);
            }
        }
    }
}

// ------------------------------------------------------------------ expressions

/// Tokens the expression grammar knows, plus ones that stress it.
const EXPR_TOKENS: &[&str] = &[
    "d_model",
    "n_heads",
    "i",
    "unknown_dim",
    "config.hidden_size",
    "config.layer_types",
    "config.layer_types[i]",
    "config.missing.key",
    "config.rope_scaling",
    "config.0",
    "0",
    "1",
    "-1",
    "3",
    "4096",
    "1_000",
    "0.25",
    "1e5",
    "170141183460469231731687303715884105727",
    "170141183460469231731687303715884105728",
    "99999999999999999999",
    "'full'",
    "\"x\"",
    "'",
    "true",
    "false",
    "[]",
    "[",
    "]",
    "(",
    ")",
    ",",
    ".",
    "+",
    "-",
    "*",
    "/",
    "%",
    "??",
    "||",
    "&&",
    "==",
    "!=",
    "<",
    ">=",
    "!",
    "ceil_div(",
    "floor_div(",
    "min(",
    "max(",
    "len(",
    "contains(",
    "count(",
    "nosuch(",
    "é",
    "\u{0}",
];

struct FuzzEnv {
    names: HashMap<&'static str, Q>,
    config: serde_json::Value,
    symbolic: bool,
}

impl Env for FuzzEnv {
    fn name(&self, name: &str) -> Result<Q, EvalError> {
        self.names
            .get(name)
            .cloned()
            .ok_or_else(|| EvalError::UnknownName(name.into()))
    }
    fn config(&self) -> &serde_json::Value {
        &self.config
    }
    fn symbolic(&self) -> bool {
        self.symbolic
    }
}

fn env(symbolic: bool) -> FuzzEnv {
    FuzzEnv {
        names: HashMap::from([
            ("d_model", Q::atom("d_model", 4096, symbolic)),
            ("n_heads", Q::atom("n_heads", 32, symbolic)),
            ("i", Q::atom("i", i128::MAX, symbolic)),
        ]),
        config: serde_json::json!({
            "hidden_size": 4096,
            "layer_types": ["full", "sliding", 3, null, -1],
            "rope_scaling": { "type": "yarn", "factor": 0.5 },
            "0": i64::MIN,
            "big": u64::MAX,
            "tiny": -1.0e300
        }),
        symbolic,
    }
}

fn eval_every_way(src: &str) {
    if let Ok(e) = expr::parse(src) {
        for symbolic in [false, true] {
            let env = env(symbolic);
            let _ = expr::eval(&e, &env);
            let _ = expr::eval_int(&e, &env).map(|q| q.formula());
            let _ = expr::eval_bool(&e, &env);
        }
    }
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn expression_parser_never_panics_on_any_text(src in "\\PC{0,80}") {
        eval_every_way(&src);
    }

    #[test]
    fn expressions_built_from_tokens_never_panic(
        toks in prop::collection::vec(prop::sample::select(EXPR_TOKENS), 0..24),
        spaced in any::<bool>(),
    ) {
        let src = toks.join(if spaced { " " } else { "" });
        eval_every_way(&src);
    }

    #[test]
    fn arithmetic_on_extreme_integers_never_panics(
        a in prop::sample::select(&[i128::MIN, i128::MIN + 1, -1, 0, 1, 2, i128::MAX - 1, i128::MAX][..]),
        b in prop::sample::select(&[i128::MIN, -1, 0, 1, 3, i128::MAX][..]),
        op in prop::sample::select(&["+", "-", "*", "/", "%", "<", "==", "??"][..]),
        f in prop::sample::select(&["ceil_div", "floor_div", "min", "max"][..]),
    ) {
        // Literals cannot be negative or exceed i128::MAX in the text, so build them by arithmetic.
        let lit = |v: i128| -> String {
            match v {
                i128::MIN => format!("(0 - {} - 1)", i128::MAX),
                v if v < 0 => format!("(0 - {})", v.unsigned_abs()),
                v => v.to_string(),
            }
        };
        eval_every_way(&format!("{} {op} {}", lit(a), lit(b)));
        eval_every_way(&format!("{f}({}, {})", lit(a), lit(b)));
        eval_every_way(&format!("-({})", lit(a)));
    }
}

// ------------------------------------------------------------------ specs

/// Values a mutation may drop into a spec in place of a word.
const SPEC_TOKENS: &[&str] = &[
    "0",
    "-1",
    "1",
    "7",
    "100000000000000000000",
    "170141183460469231731687303715884105727",
    "\"d_model * d_model * d_model * d_model * d_model * d_model * d_model * d_model * d_model\"",
    "\"d_model / 0\"",
    "\"ceil_div(d_model, 0)\"",
    "\"0 - d_model\"",
    "config.nope",
    "config.layer_types",
    "config.hidden_size",
    "d_model",
    "n_heads",
    "n_kv_heads",
    "d_head",
    "n_layers",
    "n_experts",
    "top_k",
    "i",
    "linear",
    "head_split",
    "head_merge",
    "attention_score",
    "attention_apply",
    "concat",
    "slice",
    "add",
    "embedding",
    "gated_delta_rule",
    "grouped_linear",
    "router",
    "moe_combine",
    "swiglu_mlp",
    "gqa_attention",
    "mla_attention",
    "pre_norm_block",
    "moe",
    "dense",
    "window",
    "constant",
    "per_token",
    "mxfp4",
    "fp8_block128",
    "true",
    "false",
    "null",
    "~",
    "[]",
    "{}",
    "[x, x]",
    "{ a: 1 }",
    "&a",
    "*a",
    "!!binary",
    "'",
    "\"",
    "\t",
    ":",
    "- ",
    "#",
    "|",
    ">",
];

#[derive(Clone, Debug)]
enum Mutation {
    DeleteLine(usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    ReplaceWord(usize, usize, &'static str),
    InsertChar(usize, char),
    DeleteChar(usize),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let idx = 0usize..10_000;
    prop_oneof![
        idx.clone().prop_map(Mutation::DeleteLine),
        idx.clone().prop_map(Mutation::DuplicateLine),
        (idx.clone(), idx.clone()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        (idx.clone(), 0usize..16, prop::sample::select(SPEC_TOKENS))
            .prop_map(|(l, w, t)| Mutation::ReplaceWord(l, w, t)),
        (
            idx.clone(),
            prop::sample::select(
                &[
                    ' ', ':', '{', '}', '[', ']', ',', '-', '"', '\'', '\n', '\t', '*', '&', '!',
                    '%', '#', '0', 'x', 'é'
                ][..]
            )
        )
            .prop_map(|(p, c)| Mutation::InsertChar(p, c)),
        idx.clone().prop_map(Mutation::DeleteChar),
        idx.prop_map(Mutation::Truncate),
    ]
}

fn apply(text: &str, m: &Mutation) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let n = lines.len().max(1);
    let chars: Vec<char> = text.chars().collect();
    let c = chars.len().max(1);
    match m {
        Mutation::DeleteLine(i) if !lines.is_empty() => {
            lines.remove(i % n);
        }
        Mutation::DuplicateLine(i) if !lines.is_empty() => {
            let l = lines[i % n].clone();
            lines.insert(i % n, l);
        }
        Mutation::SwapLines(a, b) if !lines.is_empty() => lines.swap(a % n, b % n),
        Mutation::ReplaceWord(l, w, t) if !lines.is_empty() => {
            let line = &lines[l % n];
            let words: Vec<(usize, usize)> = word_spans(line);
            if !words.is_empty() {
                let (s, e) = words[w % words.len()];
                lines[l % n] = format!("{}{t}{}", &line[..s], &line[e..]);
            }
        }
        Mutation::InsertChar(p, ch) => {
            let mut v = chars.clone();
            v.insert(p % (chars.len() + 1), *ch);
            return v.into_iter().collect();
        }
        Mutation::DeleteChar(p) if !chars.is_empty() => {
            let mut v = chars.clone();
            v.remove(p % c);
            return v.into_iter().collect();
        }
        Mutation::Truncate(p) => return chars[..p % c].iter().collect(),
        _ => {}
    }
    lines.join("\n")
}

/// Byte spans of the identifier-like words of a line.
fn word_spans(line: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, ch) in line.char_indices() {
        let w = ch.is_ascii_alphanumeric() || ch == '_' || ch == '.';
        match (w, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, line.len()));
    }
    out
}

/// Files the spec mutations target: model specs, components, quant schemes, the arch tables.
fn targets() -> Vec<String> {
    library().files.keys().cloned().collect()
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn mutated_library_files_never_panic(
        file in any::<prop::sample::Index>(),
        muts in prop::collection::vec(mutation(), 1..6),
    ) {
        let lib = library();
        let targets = targets();
        let key = file.get(&targets).clone();
        let mut text = lib.files[&key].clone();
        for m in &muts {
            text = apply(&text, m);
        }
        let mut files = lib.files.clone();
        files.insert(key.clone(), text);
        // Mutating a component or an arch table touches every model; a model spec only itself.
        if key.contains("/models/") {
            files.retain(|k, _| !k.contains("/models/") || *k == key);
        }
        exercise(&Repo::from_files(files), &lib.configs);
    }

    #[test]
    fn random_yaml_as_a_model_spec_never_panics(
        body in prop::collection::vec(prop::sample::select(SPEC_TOKENS), 0..40),
        seps in prop::collection::vec(prop::sample::select(&["\n", " ", ": ", "\n  ", ", "][..]), 40),
    ) {
        let lib = library();
        let mut text = String::from("model: fuzz\nsummary: s\narchitectures: [LlamaForCausalLM]\n");
        for (t, s) in body.iter().zip(&seps) {
            text.push_str(t);
            text.push_str(s);
        }
        let mut files: BTreeMap<String, String> = lib
            .files
            .iter()
            .filter(|(k, _)| !k.contains("/models/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        files.insert("specs/models/fuzz.yaml".into(), text);
        exercise(&Repo::from_files(files), &lib.configs);
    }

    #[test]
    fn library_specs_against_mutated_configs_never_panic(
        model in any::<prop::sample::Index>(),
        key in prop::sample::select(&[
            "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "num_hidden_layers", "intermediate_size", "vocab_size", "layer_types",
            "sliding_window", "n_routed_experts", "num_experts", "num_experts_per_tok",
            "kv_lora_rank", "qk_rope_head_dim", "first_k_dense_replace", "mlp_only_layers",
            "full_attention_interval", "linear_num_value_heads", "partial_rotary_factor",
            "rope_scaling", "num_nextn_predict_layers", "moe_intermediate_size",
        ][..]),
        value in prop_oneof![
            Just(serde_json::json!(null)),
            Just(serde_json::json!(0)),
            Just(serde_json::json!(-1)),
            Just(serde_json::json!(3)),
            Just(serde_json::json!(1_000_001)),
            Just(serde_json::json!(u64::MAX)),
            Just(serde_json::json!(i64::MIN)),
            Just(serde_json::json!(0.5)),
            Just(serde_json::json!(1e300)),
            Just(serde_json::json!("full_attention")),
            Just(serde_json::json!([])),
            Just(serde_json::json!(["sliding_attention", 1, null])),
            Just(serde_json::json!({ "rope_type": 7 })),
        ],
    ) {
        let lib = library();
        let (_, base) = model.get(&lib.configs);
        let mut config = base.clone();
        config[key] = value;
        let files = lib.files.clone();
        let repo = Repo::from_files(files);
        for name in repo.model_names() {
            let Ok(ir) = repo.load_model(name) else { continue };
            if support::config_for(&lib.configs, &ir.architectures) != Some(base) {
                continue;
            }
            let a = evaluate(&ir, &config, EvalOptions::default());
            if a.ok() {
                let _ = a.summary();
            }
        }
    }
}

/// Values a dim binding may be replaced with: edge sizes that keep the YAML and the expression
/// valid, so the spec gets past loading and the walk meets them.
const DIM_VALUES: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "7",
    "\"0 - 1\"",
    "\"0 - 170141183460469231731687303715884105727 - 1\"",
    "100000000000000000000",
    "10000000000000000000000000000000000000",
    "170141183460469231731687303715884105727",
    "\"d_model * d_model * d_model\"",
    "\"d_model / 3\"",
    "config.nope",
    "config.layer_types",
    "true",
];

/// Line indices of `  name: value` entries under a model spec's top-level `dims:`.
fn dim_lines(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut inside = false;
    for (i, l) in text.lines().enumerate() {
        if !l.starts_with(' ') {
            inside = l.trim_end() == "dims:";
        } else if inside && l.starts_with("  ") && !l.starts_with("   ") && l.contains(':') {
            out.push(i);
        }
    }
    out
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn library_specs_with_edge_dims_never_panic(
        model in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), prop::sample::select(DIM_VALUES)), 1..4),
    ) {
        let lib = library();
        let models: Vec<&String> = lib.files.keys().filter(|k| k.contains("/models/")).collect();
        let key = (*model.get(&models)).clone();
        let mut lines: Vec<String> = lib.files[&key].lines().map(str::to_string).collect();
        let dims = dim_lines(&lib.files[&key]);
        prop_assume!(!dims.is_empty());
        for (at, value) in &edits {
            let i = *at.get(&dims);
            let name = lines[i].split(':').next().unwrap_or_default().to_string();
            lines[i] = format!("{name}: {value}");
        }
        let mut files = lib.files.clone();
        files.retain(|k, _| !k.contains("/models/") || *k == key);
        files.insert(key, lines.join("\n"));
        exercise(&Repo::from_files(files), &lib.configs);
    }
}

#[test]
fn the_unmutated_library_evaluates_cleanly() {
    // The fuzz targets start from a library that works; otherwise mutations test nothing.
    let lib = library();
    let repo = Repo::from_files(lib.files.clone());
    assert!(repo.file_errors.is_empty(), "{:?}", repo.file_errors);
    assert_eq!(repo.model_names().len(), lib.configs.len());
    for name in repo.model_names() {
        let ir = repo
            .load_model(name)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let config = support::config_for(&lib.configs, &ir.architectures)
            .unwrap_or_else(|| panic!("{name}: no bundled config"));
        let a = evaluate(&ir, config, EvalOptions::default());
        assert!(a.ok(), "{name}: {:?}", a.errors);
    }
}
