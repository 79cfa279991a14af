//! The review checker against real facts: Qwen3-Next-80B-A3B's config and tensor inventory
//! (the bundled snapshot), its forward source from the pinned transformers wheel, and the node
//! paths of the library spec evaluated against that config. True claims are verified,
//! fabricated ones contradicted with the truth, unbacked numbers leave a conclusion unverified,
//! malformed reports are located errors, and `harch-worker evidence` exits as documented.
//!
//! Needs the forward source (scripts/fetch-transformers-src, or HARCH_TRANSFORMERS_SRC).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use harch_guards::truth::Truth;
use harch_review::{
    Checked, Decision, Facts, SpecNodes, Standing, WorkOrder, check, code, parse_report,
    work_orders,
};
use harch_worker::{snapshot, source, specs, subject};

const MODEL: &str = "Qwen/Qwen3-Next-80B-A3B";
const SRC: &str = "modeling_qwen3_next.py";

struct Job {
    truth: Truth,
    nodes: SpecNodes,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn job() -> &'static Job {
    static JOB: OnceLock<Job> = OnceLock::new();
    JOB.get_or_init(|| {
        let mut truth = snapshot::load_snapshot(MODEL).expect("bundled snapshot");
        truth.sources = source::resolve_native(&truth.config)
            .expect("run scripts/fetch-transformers-src (or set HARCH_TRANSFORMERS_SRC)")
            .files;
        let repo = specs::read_repo(&root(), &[]).unwrap();
        let model = subject::library_model(&repo, &truth.config)
            .unwrap()
            .to_string();
        let ir = repo.load_model(&model).unwrap();
        let a = harch_engine::evaluate(&ir, &truth.config, Default::default());
        assert!(a.errors.is_empty());
        Job {
            nodes: SpecNodes::from_analysis(&a),
            truth,
        }
    })
}

fn source_text() -> &'static str {
    &job().truth.sources[SRC]
}

/// `modeling_qwen3_next.py:A-B` for the `nth` (0-based) occurrence of consecutive lines, found
/// in the real file so the citations follow the pinned source.
fn at(first_line: &str, lines: usize, nth: usize) -> String {
    let all: Vec<&str> = source_text().lines().collect();
    let start = all
        .iter()
        .enumerate()
        .filter(|(_, l)| l.trim() == first_line)
        .map(|(i, _)| i + 1)
        .nth(nth)
        .unwrap_or_else(|| panic!("`{first_line}` is not in {SRC}"));
    if lines == 1 {
        format!("{SRC}:{start}")
    } else {
        format!("{SRC}:{start}-{}", start + lines - 1)
    }
}

fn checked(yaml: &str) -> Checked {
    let j = job();
    let report = parse_report("review.yaml", yaml, &j.nodes)
        .unwrap_or_else(|e| panic!("report errors: {e:#?}\n{yaml}"));
    check(&report, &Facts::from_truth(&j.truth))
}

fn errors(yaml: &str) -> Vec<harch_guards::Diagnostic> {
    parse_report("review.yaml", yaml, &job().nodes).expect_err("a malformed report")
}

/// A review of the Qwen3-Next spec whose every claim is true.
fn true_review() -> String {
    let l2 = at("query = l2norm(query, dim=-1, eps=1e-6)", 2, 1);
    let scaling = at("self.scaling = self.head_dim**-0.5", 1, 0);
    let gate = at(
        "shared_expert_output = F.sigmoid(self.shared_expert_gate(hidden_states)) * shared_expert_output",
        1,
        0,
    );
    let topk = at(
        "routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)",
        1,
        0,
    );
    format!(
        r#"verdict: PASS
mapping:
  - step: "q/k L2 normalisation before the delta rule"
    node: "layers[linear_moe].attention.q_l2"
    status: consistent
    evidence:
      - 'src: {l2} "query = l2norm(query, dim=-1, eps=1e-6) key = l2norm(key, dim=-1, eps=1e-6)"'
      - "cfg: linear_num_key_heads = 16"
      - "ckpt: model.layers.X.linear_attn.in_proj_qkvz.weight = [12288, 2048] BF16"
  - step: "attention scores scaled by head_dim**-0.5 with head_dim 256"
    node: "layers[full_moe].attention"
    status: consistent
    evidence:
      - 'src: truth/source/{scaling} "self.scaling = self.head_dim**-0.5"'
      - "cfg: head_dim = 256.0"
      - "ckpt: model.layers.3.self_attn.q_norm.weight = [256]"
  - step: "router picks the top 10 of 512 experts in each of 48 layers"
    node: "layers[full_moe].ffn"
    status: consistent
    evidence:
      - 'src: {topk} "torch.topk(routing_weights, self.top_k, dim=-1)"'
      - "cfg: num_experts_per_tok = 10"
      - "count: model.layers.X.mlp.experts = 512"
      - "count: model.layers = 48"
  - step: "the shared expert is gated by a sigmoid"
    node: "layers[linear_moe].ffn"
    status: consistent
    evidence:
      - 'src: {gate} "F.sigmoid(self.shared_expert_gate(hidden_states))"'
      - "ckpt: model.layers.X.mlp.shared_expert_gate.weight = [1, 2048]"
  - step: "one MTP layer, RMSNorm eps 1e-6, rope theta 1e7 on a quarter of the head"
    node: "mtp_layers"
    status: consistent
    evidence:
      - "count: mtp.layers = 1"
      - "cfg: rms_norm_eps = 0.000001"
      - "cfg: rope_theta = 1e7"
      - "cfg: partial_rotary_factor = 0.25"
      - cfg: mlp_only_layers = []
defects: []
"#
    )
}

#[test]
fn a_review_whose_claims_all_hold_is_recorded_pass() {
    let c = checked(&true_review());
    for r in &c.mapping {
        assert_eq!(
            r.judgement.standing,
            Standing::Verified,
            "{}: {}",
            r.row.step,
            r.judgement.why
        );
        assert!(
            r.judgement
                .claims
                .iter()
                .all(|c| c.holds && c.truth.is_none())
        );
    }
    assert_eq!(c.claims, 17);
    assert_eq!(c.claims_holding, 17);
    assert_eq!(c.rows.verified, 5);
    assert_eq!((c.said, c.recorded), (Decision::Pass, Decision::Pass));
    assert!(c.reasons.is_empty(), "{:?}", c.reasons);
    assert!(c.passed());
}

/// Each fabricated claim sits next to a true one in a defect: the defect is contradicted, and
/// the check names the false claim and what the facts are.
#[test]
fn fabricated_claims_are_contradicted_with_the_truth() {
    let n_lines = source_text().lines().count();
    let l2 = at("query = l2norm(query, dim=-1, eps=1e-6)", 2, 1);
    let scaling = at("self.scaling = self.head_dim**-0.5", 1, 0);
    let scaling_line: usize = scaling.rsplit(':').next().unwrap().parse().unwrap();
    let cases: Vec<(String, String)> = vec![
        // A real statement cited at the wrong lines: the facts say where it is.
        (
            format!(
                r#"src: {SRC}:{}-{} "self.scaling = self.head_dim**-0.5""#,
                scaling_line + 3,
                scaling_line + 4
            ),
            format!("the quote is at line {scaling_line}"),
        ),
        // A statement the source does not make.
        (
            format!(r#"src: {l2} "query = query / query.norm(dim=-1)""#),
            format!("the quote is nowhere in {SRC}"),
        ),
        // Lines past the end of the file.
        (
            format!(
                r#"src: {SRC}:{}-{} "return x""#,
                n_lines + 1,
                n_lines + 2
            ),
            format!("{SRC} has {n_lines} lines"),
        ),
        // A file that is not staged for this job.
        (
            r#"src: modeling_qwen3.py:10 "import torch""#.into(),
            "no staged source file `modeling_qwen3.py`".into(),
        ),
        // A window from the model card: config.json has no such key.
        (
            "cfg: sliding_window = 128".into(),
            "config.json has no `sliding_window`".into(),
        ),
        (
            "cfg: num_experts_per_tok = 8".into(),
            "config.json has num_experts_per_tok = 10".into(),
        ),
        (
            "cfg: num_expert = 512".into(),
            "did you mean `num_experts`?".into(),
        ),
        (
            "cfg: mlp_only_layers[0] = 3".into(),
            "`mlp_only_layers` has 0 elements".into(),
        ),
        (
            "cfg: hidden_act = gelu".into(),
            "config.json has hidden_act = \"silu\"".into(),
        ),
        // Wrong shape, wrong dtype, a tensor that does not exist.
        (
            "ckpt: model.layers.3.self_attn.q_proj.weight = [4096, 2048]".into(),
            "model.layers.3.self_attn.q_proj.weight is BF16 [8192, 2048]".into(),
        ),
        (
            "ckpt: model.layers.3.self_attn.q_proj.weight = [8192, 2048] F32".into(),
            "model.layers.3.self_attn.q_proj.weight is BF16 [8192, 2048]".into(),
        ),
        (
            "ckpt: model.layers.0.self_attn.q_proj.weight = [8192, 2048]".into(),
            "no tensor named model.layers.0.self_attn.q_proj.weight; under model.layers.0.… there are"
                .into(),
        ),
        (
            "ckpt: model.layers.X.mlp.experts.X.down_proj.weight = [512, 2048]".into(),
            "24576 of the 24576 tensors matching model.layers.X.mlp.experts.X.down_proj.weight differ: model.layers.{0-47}.mlp.experts.{0-511}.down_proj.weight BF16 [2048, 512]"
                .into(),
        ),
        // An MTP layer count the checkpoint does not have; a prefix with nothing under it.
        (
            "count: mtp.layers = 3".into(),
            "mtp.layers has 1 distinct indices".into(),
        ),
        (
            "count: model.mtp.layers = 3".into(),
            "no tensor is named model.mtp.layers.<index>.…: the count is 0".into(),
        ),
        (
            "count: model.layers.X.mlp.experts = 256".into(),
            "model.layers.0.mlp.experts has 512".into(),
        ),
    ];
    for (claim, truth) in cases {
        let yaml = format!(
            r#"verdict: NO_PASS
mapping:
  - step: "final norm"
    node: norm
    status: consistent
    evidence: ["ckpt: model.norm.weight = [2048]"]
defects:
  - title: "a finding"
    where: "layers[linear_moe].attention"
    fix: "change it"
    evidence:
      - "cfg: hidden_size = 2048"
      - '{}'
"#,
            claim.replace('\'', "''")
        );
        let c = checked(&yaml);
        let d = &c.defects[0].judgement;
        assert_eq!(d.standing, Standing::Contradicted, "{claim}");
        assert!(d.claims[0].holds, "{claim}");
        let bad = &d.claims[1];
        assert!(!bad.holds, "{claim} should not hold");
        let t = bad.truth.as_deref().unwrap();
        assert!(t.contains(&truth), "{claim}\n  truth: {t}\n  want: {truth}");
        assert!(d.why.contains(&claim), "{}", d.why);
        assert_eq!(c.recorded, Decision::NoPass);
    }
}

#[test]
fn a_pass_with_fabricated_evidence_is_recorded_no_pass() {
    // The writeup's case: a window taken from the model card, stated as PASS.
    let yaml = true_review().replace(
        r#"      - "cfg: num_experts_per_tok = 10""#,
        r#"      - "cfg: num_experts_per_tok = 10"
      - "cfg: sliding_window = 1024""#,
    );
    let c = checked(&yaml);
    assert_eq!(c.said, Decision::Pass);
    assert_eq!(c.recorded, Decision::NoPass);
    assert_eq!(c.rows.contradicted, 1);
    assert!(
        c.reasons.iter().any(|r| r.contains("is contradicted")
            && r.contains("`cfg: sliding_window = 1024` does not hold")),
        "{:?}",
        c.reasons
    );
}

#[test]
fn numbers_no_claim_backs_leave_a_conclusion_unverified() {
    let yaml = r#"verdict: NO_PASS
mapping:
  - step: "router picks the top 10 of 512 experts"
    node: "layers[full_moe].ffn"
    status: consistent
    evidence: ["cfg: num_experts = 512"]
  - step: "final norm before lm_head"
    node: norm
    status: consistent
    evidence: []
defects:
  - title: "the full-attention window is 1024 in the spec"
    where: "layers[full_moe].attention"
    fix: "bind the window to config.max_position_embeddings"
    evidence: ["cfg: max_position_embeddings = 262144"]
  - title: "the MTP block has its own norm"
    where: "mtp_norm"
    fix: "set its eps to 1e-6"
    evidence: ["ckpt: mtp.norm.weight = [2048]"]
"#;
    let c = checked(yaml);
    let row = &c.mapping[0].judgement;
    assert_eq!(row.standing, Standing::Unverified);
    assert_eq!(row.unbacked, ["10"]);
    assert!(
        row.why.contains("no holding claim states `10`"),
        "{}",
        row.why
    );
    let bare = &c.mapping[1].judgement;
    assert_eq!(bare.standing, Standing::Unverified);
    assert_eq!(bare.why, "it cites no evidence");
    // A number about the spec itself, and one in the fix text: neither is backed.
    assert_eq!(c.defects[0].judgement.standing, Standing::Unverified);
    assert_eq!(c.defects[0].judgement.unbacked, ["1024"]);
    assert_eq!(c.defects[1].judgement.unbacked, ["0.000001"]);

    // The same conclusions, backed: verified.
    let backed = yaml
        .replace(
            r#"evidence: ["cfg: num_experts = 512"]"#,
            r#"evidence: ["cfg: num_experts = 512", "cfg: num_experts_per_tok = 10"]"#,
        )
        .replace(
            r#"evidence: ["ckpt: mtp.norm.weight = [2048]"]"#,
            r#"evidence: ["ckpt: mtp.norm.weight = [2048]", "cfg: rms_norm_eps = 1e-06"]"#,
        );
    let c = checked(&backed);
    assert_eq!(c.mapping[0].judgement.standing, Standing::Verified);
    assert_eq!(c.defects[1].judgement.standing, Standing::Verified);
}

#[test]
fn malformed_reports_are_located_errors() {
    let row = |extra: &str| {
        format!(
            "verdict: PASS\nmapping:\n  - step: \"final norm\"\n    node: norm\n{extra}defects: []\n"
        )
    };
    // A missing field.
    let e = errors(&row("    evidence: []\n"));
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].code, code::SHAPE);
    assert!(e[0].message.contains("status"), "{}", e[0].message);
    assert!(e[0].location.line >= 3, "{:?}", e[0].location);
    // An unknown field (a typo would otherwise drop the evidence silently).
    let e = errors(&row("    status: consistent\n    evidences: []\n"));
    assert_eq!(e[0].code, code::SHAPE);
    assert!(e[0].message.contains("evidences"), "{}", e[0].message);
    // An unknown verdict, at its line and column.
    let e = errors(&true_review().replace("verdict: PASS", "verdict: LGTM"));
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].code, code::VERDICT);
    assert_eq!((e[0].location.line, e[0].location.column), (1, 10));
    assert!(e[0].hint.as_deref().unwrap().contains("NO_PASS"));
    // A node path the spec does not have, with the closest one it does.
    let e = errors(&true_review().replace(
        "layers[linear_moe].attention.q_l2",
        "layers[linear].attention.q_l2",
    ));
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].code, code::NODE);
    assert_eq!(e[0].location.node.as_deref(), Some("mapping[0].node"));
    assert_eq!(e[0].location.line, 4);
    assert!(
        e[0].hint
            .as_deref()
            .unwrap()
            .contains("did you mean `layers[linear_moe].attention.q_l2`?"),
        "{:?}",
        e[0].hint
    );
    // Several problems at once: all reported, each where it is.
    let yaml = r#"verdict: PASS
mapping:
  - step: "q/k norm"
    node: null
    status: consistent
    evidence:
      - "cfg: head_dim = 256"
      - "the source says so"
  - step: ""
    node: "layers[full_moe].attention"
    status: fine
    evidence: []
defects: []
"#;
    let e = errors(yaml);
    let got: Vec<(&str, u32, Option<&str>)> = e
        .iter()
        .map(|d| (d.code, d.location.line, d.location.node.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            (code::NO_NODE, 4, Some("mapping[0].node")),
            (code::GRAMMAR, 8, Some("mapping[0].evidence[1]")),
            (code::EMPTY_TEXT, 9, Some("mapping[1].step")),
            (code::STATUS, 11, Some("mapping[1].status")),
        ]
    );
    assert!(e.iter().all(|d| d.guard == "review" && d.hint.is_some()));
    // No mapping at all.
    let e = errors("verdict: NO_PASS\nmapping: []\ndefects: []\n");
    assert_eq!(e[0].code, code::EMPTY_MAPPING);
    // Not YAML.
    let e = errors("verdict: [PASS\n");
    assert_eq!(e[0].code, code::SHAPE);
}

#[test]
fn unquoted_evidence_lines_read_as_claims() {
    // `- cfg: a = 1` is a one-entry map in YAML; it is read back as the line the agent meant.
    let yaml = "verdict: PASS\nmapping:\n  - step: \"final norm\"\n    node: norm\n    status: consistent\n    evidence:\n      - ckpt: model.norm.weight = [2048] BF16\n      - cfg: rms_norm_eps = 1e-06\ndefects: []\n";
    let c = checked(yaml);
    assert_eq!(c.mapping[0].judgement.standing, Standing::Verified);
    assert_eq!(
        c.mapping[0].judgement.claims[0].text,
        "ckpt: model.norm.weight = [2048] BF16"
    );
    assert_eq!(c.recorded, Decision::Pass);
}

#[test]
fn work_orders_carry_only_verified_fixes() {
    let scaling = at("self.scaling = self.head_dim**-0.5", 1, 0);
    let yaml = format!(
        r#"verdict: NO_PASS
mapping:
  - step: "attention scores scaled by head_dim**-0.5"
    node: "layers[full_moe].attention"
    status: inconsistent
    evidence: ['src: {scaling} "self.scaling = self.head_dim**-0.5"']
  - step: "the MTP layers"
    node: mtp_layers
    status: missing
    evidence: ["count: mtp.layers = 5"]
defects:
  - title: "q/k norms are missing in full attention"
    where: "layers[full_moe].attention"
    fix: "add rmsnorm on q and k per head before rope"
    evidence: ["ckpt: model.layers.X.self_attn.q_norm.weight = [256]", "ckpt: model.layers.X.self_attn.k_norm.weight = [256]"]
  - title: "the sliding window is 1024"
    where: "layers[full_moe].attention.cache"
    fix: "XYZZY set window to 1024"
    evidence: ["cfg: max_position_embeddings = 262144"]
  - title: "there are 5 MTP layers"
    where: "mtp_layers"
    fix: "PLUGH repeat the MTP block 5 times"
    evidence: ["count: mtp.layers = 5"]
"#
    );
    let c = checked(&yaml);
    let stale = harch_guards::Diagnostic::new(
        "weight",
        "W001",
        "checkpoint tensor mtp.fc.weight is claimed by no spec node",
        harch_engine::Location::in_file("specs/models/qwen3_next.yaml"),
    );
    let load = harch_guards::Diagnostic::new(
        "load",
        "L002",
        "unknown op `rmsnorn`",
        harch_engine::Location::at("specs/models/qwen3_next.yaml", 12, 5),
    );
    let orders = work_orders(Some(&c), &[stale, load]);
    let kinds: Vec<&str> = orders
        .iter()
        .map(|o| match o {
            WorkOrder::Load { .. } => "load",
            WorkOrder::Validate { .. } => "validate",
            WorkOrder::Defect { .. } => "defect",
            WorkOrder::Step { .. } => "step",
            WorkOrder::Check { .. } => "check",
            WorkOrder::Disputed { .. } => "disputed",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "load", "validate", "defect", "step", "check", "disputed", "disputed"
        ]
    );
    let WorkOrder::Defect { fix, evidence, .. } = &orders[2] else {
        panic!()
    };
    assert_eq!(fix, "add rmsnorm on q and k per head before rope");
    assert_eq!(evidence.len(), 2);
    assert_eq!(
        orders[4],
        WorkOrder::Check {
            title: "the sliding window is 1024".into(),
            where_: "layers[full_moe].attention.cache".into()
        }
    );
    let all = serde_json::to_string(&orders).unwrap()
        + &orders.iter().map(|o| o.to_string()).collect::<String>();
    assert!(!all.contains("XYZZY"), "an unverified fix leaked: {all}");
    assert!(!all.contains("PLUGH"), "a contradicted fix leaked: {all}");
    assert!(!all.contains("5 MTP"), "a contradicted title leaked: {all}");
    assert!(
        orders[0]
            .to_string()
            .contains("L002 [load] specs/models/qwen3_next.yaml:12:5")
    );
}

// ---- the command line ----

fn evidence(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_harch-worker"))
        .current_dir(root())
        .arg("evidence")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// The truth directory a job would have: written from the bundled snapshot, with the forward
/// source staged under source/.
fn truth_dir(dir: &Path) -> PathBuf {
    let out = dir.join("truth");
    let meta = harch_worker::truth_dir::TruthMeta {
        model_id: MODEL.into(),
        ..Default::default()
    };
    harch_worker::truth_dir::write_from_truth(&out, &job().truth, &meta).unwrap();
    out
}

#[test]
fn the_evidence_command_prints_every_claim_and_exits_by_the_recorded_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let truth = truth_dir(dir.path());
    let t = truth.to_str().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, true_review()).unwrap();
    let (code, out, err) = evidence(&[good.to_str().unwrap(), "--truth", t]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.matches("holds").count(), 17, "{out}");
    assert!(out.contains("the review says PASS; recorded PASS"), "{out}");

    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        true_review().replace("count: mtp.layers = 1", "count: mtp.layers = 3"),
    )
    .unwrap();
    let (code, out, _) = evidence(&[bad.to_str().unwrap(), "--truth", t]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FALSE"), "{out}");
    assert!(
        out.contains("facts: mtp.layers has 1 distinct indices"),
        "{out}"
    );
    assert!(out.contains("recorded NO_PASS"), "{out}");

    let (code, out, _) = evidence(&[bad.to_str().unwrap(), "--truth", t, "--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["recorded"], "NO_PASS");
    assert_eq!(v["said"], "PASS");
    assert_eq!(v["nodes_checked"], true);
    assert_eq!(v["claims"], 17);
    assert_eq!(v["claims_holding"], 16);
    let row = &v["mapping"][4];
    assert_eq!(row["standing"], "contradicted");
    let claim = &row["claims"][0];
    assert_eq!(claim["text"], "count: mtp.layers = 3");
    assert_eq!(claim["holds"], false);
    assert_eq!(claim["truth"], "mtp.layers has 1 distinct indices");

    // A malformed report: its errors, located, and exit 1.
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, "verdict: MAYBE\nmapping: []\ndefects: []\n").unwrap();
    let (code, out, _) = evidence(&[broken.to_str().unwrap(), "--truth", t, "--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["recorded"], "NO_PASS");
    assert_eq!(v["errors"][0]["code"], "E002");
    assert_eq!(v["errors"][0]["location"]["line"], 1);
    let (code, out, _) = evidence(&[broken.to_str().unwrap(), "--truth", t]);
    assert_eq!(code, 1);
    assert!(out.contains("E002 [review]"), "{out}");

    // A spec named explicitly: its node paths are the ones rows must name.
    let (code, out, err) = evidence(&[
        good.to_str().unwrap(),
        "--truth",
        t,
        "--spec",
        "specs/models/llama.yaml",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("E005"), "{out}");

    // Usage errors.
    let (code, _, err) = evidence(&[good.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = evidence(&["/nonexistent/review.yaml", "--truth", t]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/review.yaml"), "{err}");
    let (code, _, err) = evidence(&[good.to_str().unwrap(), "--truth", "/nonexistent"]);
    assert_eq!(code, 2);
    assert!(err.contains("truth directory"), "{err}");
}

#[test]
fn a_checked_review_survives_a_round_trip_through_json() {
    // The stage keeps the checked review as a job artifact and reads it back for the fix round
    // and the next review's prompt.
    let c = checked(&true_review().replace("count: mtp.layers = 1", "count: mtp.layers = 3"));
    let json = serde_json::to_string(&c).unwrap();
    let back: Checked = serde_json::from_str(&json).unwrap();
    assert_eq!(back, c);
    let orders = work_orders(Some(&c), &[]);
    let back: Vec<WorkOrder> =
        serde_json::from_str(&serde_json::to_string(&orders).unwrap()).unwrap();
    assert_eq!(back, orders);
}

/// Review prompts for every library model (numbered forward source, node paths, tensor list)
/// stay well inside a 200k-token window. Prints each size:
/// `cargo test -p harch-worker --test it evidence::review_prompts -- --nocapture`.
#[test]
fn review_prompts_of_library_models_fit_half_a_200k_window() {
    let repo = specs::read_repo(&root(), &[]).unwrap();
    for id in snapshot::snapshot_ids() {
        let mut truth = snapshot::load_snapshot(id).unwrap();
        truth.sources = source::resolve_native(&truth.config)
            .expect("run scripts/fetch-transformers-src")
            .files;
        let model = subject::library_model(&repo, &truth.config)
            .unwrap()
            .to_string();
        let ir = repo.load_model(&model).unwrap();
        let a = harch_engine::evaluate(&ir, &truth.config, Default::default());
        let node_paths: Vec<String> = a.nodes.iter().map(|n| n.id.clone()).collect();
        let spec_path = format!("specs/models/{model}.yaml");
        let spec_text = std::fs::read_to_string(root().join(&spec_path)).unwrap();
        let p = harch_prompts::render_review(&harch_prompts::ReviewInput {
            model_id: id,
            spec_path: &spec_path,
            spec_text: &spec_text,
            drafts: &[],
            truth: &truth,
            report_path: "review.yaml",
            node_paths: &node_paths,
            previous: None,
            report_errors: None,
            notes: None,
            unverified: &[],
        })
        .unwrap();
        println!(
            "{id}: {} node paths; review prompt {}",
            node_paths.len(),
            p.size
        );
        assert!(p.size.est_tokens < 100_000, "{id}: {}", p.size);
        assert!(p.text.contains(&node_paths[node_paths.len() / 2]));
    }
}
