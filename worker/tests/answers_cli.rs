//! Answers a person can act on (issue 29): `analyze` opens with a verdict and exits by it,
//! `plan` names layouts, inputs are taken as people type them (did-you-mean, `32K`, GPU
//! aliases), what-if runs say so.

use crate::harch_cli;

use harch_cli::{json, root, run};

use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn a_deployment_that_does_not_fit_says_what_overflows_and_gives_no_throughput() {
    let (code, out, err) = run(&["analyze", "Qwen/Qwen3-Next-80B-A3B", "--gpu", "H200"]);
    assert_eq!(code, 1, "{out}{err}");
    let first = out.lines().next().unwrap();
    assert!(
        first.starts_with("DOES NOT FIT: Qwen/Qwen3-Next-80B-A3B on 1 × H200"),
        "{out}"
    );
    assert!(
        out.contains("weights need 148.41 GiB per GPU; the usable memory is 126.90 GiB")
            && out.contains("21.51 GiB over"),
        "{out}"
    );
    assert!(!out.contains("tokens/s per GPU "), "no throughput: {out}");
    let (code, out, _) = run(&[
        "analyze",
        "Qwen/Qwen3-Next-80B-A3B",
        "--gpu",
        "H200",
        "--json",
    ]);
    assert_eq!(code, 1);
    let v = json(&out);
    assert_eq!(v["status"], "DOES_NOT_FIT");
    assert_eq!(v["verdict"], "DOES_NOT_FIT");
    assert_eq!(v["overflows"][0]["what"], "weights");
    assert_eq!(v["overflows"][0]["over"], 23_090_945_127i64);
    assert!(v["tokens_per_s_per_gpu_estimate"].is_null());
    assert_eq!(v["decode"]["status"], "DOES_NOT_FIT");
    // A batch larger than the budget holds does not fit either.
    let (code, out, _) = run(&[
        "analyze",
        "Qwen/Qwen3-8B",
        "--gpu",
        "H100",
        "--batch",
        "100000",
        "--json",
    ]);
    assert_eq!(code, 1);
    assert_eq!(json(&out)["overflows"][0]["what"], "decode_batch");
}

#[test]
fn a_deployment_that_fits_says_so_first_and_exits_zero() {
    let (code, out, err) = run(&[
        "analyze",
        "deepseek-ai/DeepSeek-V3",
        "--gpu",
        "B200",
        "--gpus",
        "8",
        "--layout",
        "attn=dp8,moe=ep8",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("FITS: deepseek-ai/DeepSeek-V3 on 8 × B200"),
        "{out}"
    );
    let (_, out, _) = run(&["analyze", "Qwen/Qwen3-8B", "--gpu", "H100", "--json"]);
    let v = json(&out);
    assert_eq!(
        (v["status"].as_str(), v["verdict"].as_str()),
        (Some("ok"), Some("FITS"))
    );
    assert_eq!(v["verified"], true);
    assert!(v["validation_errors"].as_array().unwrap().is_empty());
}

#[test]
fn gpus_without_a_layout_is_an_error_naming_the_choices() {
    let (code, out, err) = run(&[
        "analyze",
        "deepseek-ai/DeepSeek-V3",
        "--gpu",
        "H100",
        "--gpus",
        "8",
    ]);
    assert_eq!(code, 2, "{out}");
    for want in [
        "attn=tp8",
        "attn=dp8",
        "attn=dp8,moe=ep8",
        "pp=2",
        "harch-worker plan",
    ] {
        assert!(err.contains(want), "missing {want}: {err}");
    }
}

fn broken_llama(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(root().join("specs/models/llama.yaml")).unwrap();
    let broken = text.replacen(
        "n_vocab: config.vocab_size",
        "n_vocab: \"config.vocab_size - 1\"",
        1,
    );
    assert_ne!(text, broken);
    let p = dir.join("llama_broken.yaml");
    std::fs::write(&p, broken).unwrap();
    p
}

#[test]
fn a_spec_that_does_not_validate_is_not_verified_and_exits_one_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let spec = broken_llama(dir.path());
    let spec = spec.to_str().unwrap();
    let (code, out, _) = run(&["analyze", spec, "--gpu", "H100"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with("NOT VERIFIED: the spec does not validate"),
        "{out}"
    );
    assert!(out.contains("W003"), "the errors are named: {out}");
    let (code, out, _) = run(&["analyze", spec, "--gpu", "H100", "--json"]);
    assert_eq!(code, 1);
    let v = json(&out);
    assert_eq!(v["status"], "NOT_VERIFIED");
    assert_eq!(v["verified"], false);
    assert_eq!(v["labels"]["weights_bytes_per_gpu"], "exact, unverified");
    assert!(!v["validation_errors"].as_array().unwrap().is_empty());
    let (code, out, _) = run(&["analyze", spec, "--gpu", "H100", "--unverified"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("NOT VERIFIED"), "still labelled: {out}");
}

#[test]
fn weights_without_a_rate_run_at_the_next_precision_the_gpu_has() {
    let (code, out, err) = run(&["analyze", "openai/gpt-oss-20b", "--gpu", "H100"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("note: fp4 weights run at fp8: H100 SXM has no fp4 rate"),
        "{out}"
    );
    let (_, out, _) = run(&["analyze", "openai/gpt-oss-20b", "--gpu", "H100", "--json"]);
    assert_eq!(
        json(&out)["assumptions"]["precision_fallbacks"]["fp4"],
        "fp8"
    );
}

#[test]
fn mistyped_names_get_a_did_you_mean() {
    let (code, _, err) = run(&["analyze", "Qwen/Qwen3-8B", "--gpu", "h10"]);
    assert_eq!(code, 2);
    assert!(err.contains("did you mean `H100 SXM`?"), "{err}");
    // Model ids are matched as the Hub matches them: case-insensitively.
    let (code, out, err) = run(&["show", "qwen/qwen3-8b", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["params_total"], 8_190_735_360i64);
    let (code, _, err) = run(&["analyze", "deepseek-ai/DeepSeek-V2", "--gpu", "H200"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("fetch it first (`harch-worker fetch deepseek-ai/DeepSeek-V2 --out DIR`)")
            && err.contains("did you mean the bundled `deepseek-ai/DeepSeek-V2-Lite`?"),
        "{err}"
    );
    // A bundled model's name alone is that model; a near miss is a did-you-mean.
    let (code, out, err) = run(&[
        "analyze",
        "DeepSeek-v3",
        "--gpu",
        "B200",
        "--layout",
        "attn=dp8,moe=ep8",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(spec deepseek_v3)"), "{out}");
    let (code, _, err) = run(&["analyze", "DeepSek-V3", "--gpu", "H200"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("did you mean `deepseek-ai/DeepSeek-V3`?"),
        "{err}"
    );
    let (code, _, err) = run(&[
        "analyze",
        "Qwen/Qwen3-8B",
        "--gpu",
        "H100",
        "--layout",
        "attn=tq8",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("unknown degree") && err.contains("tp (tensor)"),
        "{err}"
    );
}

#[test]
fn counts_take_suffixes() {
    let (code, out, err) = run(&[
        "analyze",
        "Qwen/Qwen3-8B",
        "--gpu",
        "H100",
        "--input",
        "32K",
        "--output",
        "1k",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["assumptions"]["decode_context"], 32_768 + 1_000);
    let (code, _, err) = run(&[
        "analyze",
        "Qwen/Qwen3-8B",
        "--gpu",
        "H100",
        "--context",
        "32 K",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("e.g. 32K"), "{err}");
}

#[test]
fn plan_names_the_smallest_layout_that_fits_and_each_is_what_analyze_says() {
    let (code, out, err) = run(&[
        "plan",
        "deepseek-ai/DeepSeek-V3",
        "--gpu",
        "h100",
        "--max-gpus",
        "32",
        "--price",
        "2.5",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    let eight = v["by_gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["gpus"] == 8)
        .unwrap();
    assert_eq!(eight["fitting"], 0, "one node does not fit: {v}");
    assert_eq!(v["smallest"]["gpus"], 16);
    for pick in [
        "smallest",
        "best_tokens_per_s_per_gpu",
        "best_usd_per_million_tokens",
    ] {
        let c = &v[pick];
        let gpus = c["gpus"].to_string();
        let layout = c["layout"].as_str().unwrap();
        let (code, out, err) = run(&[
            "analyze",
            "deepseek-ai/DeepSeek-V3",
            "--gpu",
            "h100",
            "--gpus",
            &gpus,
            "--layout",
            layout,
            "--json",
        ]);
        assert_eq!(code, 0, "{err}");
        let a = json(&out);
        for (p, q) in [
            ("weights_bytes_per_gpu", "weights_bytes_per_gpu"),
            ("max_decode_requests", "max_decode_requests"),
            ("tpot_bound_s", "tpot_bound_s"),
            ("tpot_estimate_s", "tpot_estimate_s"),
            ("ttft_estimate_s", "ttft_estimate_s"),
            (
                "tokens_per_s_per_gpu_estimate",
                "tokens_per_s_per_gpu_estimate",
            ),
        ] {
            assert_eq!(c[p], a[q], "{pick} {layout}: {p}");
        }
    }
    let (code, out, err) = run(&[
        "plan",
        "deepseek-ai/DeepSeek-V3",
        "--gpu",
        "h100",
        "--max-gpus",
        "32",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("does not fit on 1, 2, 4, 8 GPUs"), "{out}");
    assert!(
        out.contains("smallest that fits:\n  16 GPUs (2 nodes)"),
        "{out}"
    );
}

#[test]
fn plan_on_one_gpu_names_the_batch_the_kv_budget_holds() {
    let (code, out, err) = run(&["plan", "Qwen/Qwen3-8B", "--gpu", "h100", "--max-gpus", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("smallest that fits:\n  1 GPUs (1 node)"),
        "{out}"
    );
    assert!(
        out.contains("201 decode requests per replica (batch 201)"),
        "{out}"
    );
    let (code, out, _) = run(&[
        "plan",
        "deepseek-ai/DeepSeek-V3",
        "--gpu",
        "h100",
        "--max-gpus",
        "8",
    ]);
    assert_eq!(code, 1, "no layout of one node fits: {out}");
    assert!(
        out.contains("DOES NOT FIT: no layout of up to 8 GPUs fits"),
        "{out}"
    );
    let (code, _, err) = run(&[
        "plan",
        "Qwen/Qwen3-8B",
        "--gpu",
        "h100",
        "--layout",
        "attn=tp2",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("plan searches layouts"), "{err}");
}

#[test]
fn what_if_runs_are_labelled_and_change_what_they_say() {
    let base = |extra: &[&str]| {
        let mut a = vec!["analyze", "Qwen/Qwen3-8B", "--gpu", "h100", "--json"];
        a.extend(extra);
        let (code, out, err) = run(&a);
        assert_eq!(code, 0, "{err}");
        json(&out)
    };
    let v = base(&[]);
    assert_eq!(v["what_if"], serde_json::json!([]));
    assert_eq!(v["labels"]["kv_bytes_per_request"], "exact");
    let f = base(&["--kv-dtype", "fp8"]);
    // 36 layers × 8 KV heads × 128 × 2 (K, V) × 2,048 tokens at one byte instead of two.
    assert_eq!(v["kv_bytes_per_request"], 301_989_888);
    assert_eq!(f["kv_bytes_per_request"], 150_994_944);
    assert_eq!(f["weights_bytes_per_gpu"], v["weights_bytes_per_gpu"]);
    assert_eq!(f["what_if"][0]["what"], "kv_dtype=fp8");
    assert_eq!(f["labels"]["kv_bytes_per_request"], "exact, what-if");
    let w = base(&["--weights", "fp8"]);
    assert!(w["weights_bytes_per_gpu"].as_i64() < v["weights_bytes_per_gpu"].as_i64());
    let (code, out, _) = run(&[
        "analyze",
        "Qwen/Qwen3-8B",
        "--gpu",
        "h100",
        "--kv-dtype",
        "fp8",
    ]);
    assert_eq!(code, 0);
    assert!(out.starts_with("WHAT-IF: kv_dtype=fp8"), "{out}");
    let (code, _, err) = run(&[
        "analyze",
        "Qwen/Qwen3-8B",
        "--gpu",
        "h100",
        "--kv-dtype",
        "int3",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("one of fp8"), "{err}");
}

#[test]
fn compare_puts_models_side_by_side_with_and_without_a_gpu() {
    let (code, out, err) = run(&["compare", "Llama-3.1-8B", "Qwen3-8B"]);
    assert_eq!(code, 0, "{err}");
    let row = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row {name}: {out}"))
            .split_whitespace()
            .skip(1)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(row("n_layers"), "32 36");
    assert_eq!(row("kv_bytes_per_token"), "128.00 KiB 144.00 KiB");
    assert_eq!(row("context_limit"), "131,072 40,960");
    let (code, out, err) = run(&[
        "compare",
        "Llama-3.1-8B",
        "Qwen3-8B",
        "--gpu",
        "h100",
        "--bytes",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    let fig = |name: &str| {
        v["figures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no {name}: {v}"))["values"]
            .clone()
    };
    assert_eq!(
        fig("kv_bytes_per_token"),
        serde_json::json!([131_072, 147_456])
    );
    assert_eq!(fig("max_decode_requests"), serde_json::json!([228, 201]));
    assert_eq!(fig("verdict"), serde_json::json!(["FITS", "FITS"]));
    // The same figures analyze gives for each.
    let (_, out, _) = run(&["analyze", "Qwen/Qwen3-8B", "--gpu", "h100", "--json"]);
    assert_eq!(fig("tpot_estimate_s")[1], json(&out)["tpot_estimate_s"]);
    let (code, _, _) = run(&["compare", "Qwen3-8B"]);
    assert_eq!(code, 2, "one model is nothing to compare");
}

#[test]
fn show_names_the_dims_by_symbol_and_the_context_of_each_flops_figure() {
    let (code, out, err) = run(&["show", "deepseek-ai/DeepSeek-V3"]);
    assert_eq!(code, 0, "{err}");
    for want in [
        "  n_layers                           61   decoder layers of the main stack",
        "  d_kv_lora                         512",
        "  n_experts                         256",
        "  top_k                               8",
        "  context_limit                  163840   config.json",
        "(one token attending 4096 positions)",
        "(one sequence of 4096 tokens, logits at every position)",
    ] {
        assert!(out.contains(want), "missing `{want}`:\n{out}");
    }
    assert!(!out.contains("@ctx"), "{out}");
    let (_, out, _) = run(&["show", "Qwen/Qwen3-8B", "--json"]);
    let v = json(&out);
    let dims = v["dims"].as_array().unwrap();
    assert!(
        dims.iter()
            .any(|d| d["symbol"] == "n_kv_heads" && d["value"] == 8)
    );
    assert_eq!(v["architecture"]["context_limit"], 40_960);
}

#[test]
fn models_lists_specs_their_architectures_and_snapshots() {
    let (code, out, err) = run(&["models", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    let qwen3 = v["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["spec"] == "qwen3")
        .unwrap()
        .clone();
    assert_eq!(
        qwen3["architectures"],
        serde_json::json!(["Qwen3ForCausalLM"])
    );
    assert_eq!(qwen3["snapshots"], serde_json::json!(["Qwen/Qwen3-8B"]));
    // A checkpoint of a library architecture without a snapshot: offline, what to run.
    let (code, _, err) = run(&["show", "Qwen/Qwen3-32B"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("harch-worker fetch Qwen/Qwen3-32B --out DIR") && err.contains("--truth DIR"),
        "{err}"
    );
}

/// One naming scheme in the JSON: seconds end in `_s`, fractions in `_fraction`, counts are
/// integers, `errors` is an array.
#[test]
fn json_names_say_their_units() {
    let (_, out, _) = run(&["analyze", "Qwen/Qwen3-8B", "--gpu", "h100", "--json"]);
    let v = json(&out);
    let split = &v["decode"]["estimate_split"];
    let sum: f64 = [
        "compute_fraction",
        "memory_fraction",
        "communication_fraction",
    ]
    .iter()
    .map(|k| split[k].as_f64().unwrap())
    .sum();
    assert!((sum - 1.0).abs() < 1e-9, "{split}");
    assert!(split.get("memory_s").is_none());
    for k in [
        "max_decode_requests",
        "weights_bytes_per_gpu",
        "prefill_batch_cap",
    ] {
        assert!(v[k].is_i64(), "{k} is a count: {}", v[k]);
    }
    assert!(v["validation_errors"].is_array());
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("s.csv");
    let (code, _, err) = run(&[
        "analyze",
        "Qwen/Qwen3-8B",
        "--gpu",
        "h100",
        "--sweep",
        "context=1024,2048",
        "--csv",
        csv.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let head = std::fs::read_to_string(&csv).unwrap();
    let cols: Vec<&str> = head.lines().next().unwrap().split(',').collect();
    let mut unique = cols.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), cols.len(), "a column twice: {cols:?}");
}

#[test]
fn a_cache_total_is_explained_one_labelled_term_per_entry_with_every_atom() {
    let (code, out, err) = run(&["explain", "openai/gpt-oss-20b", "kv_bytes_per_token"]);
    assert_eq!(code, 0, "{err}");
    for want in [
        "layers[full]: 24,576  (2 entries)",
        "layers[full].attention.k_rope (key, BF16): n_kv_heads * d_head * 2 * layers(full) = 12,288",
        "layers[full].attention.v_heads (value, BF16):",
        "  layers(full) = 12",
    ] {
        assert!(out.contains(want), "missing `{want}`:\n{out}");
    }
    let (code, out, _) = run(&[
        "explain",
        "Qwen/Qwen3-Next-80B-A3B",
        "state_bytes_per_sequence",
        "--json",
    ]);
    assert_eq!(code, 0);
    let v = json(&out);
    let terms = v["terms"].as_array().unwrap();
    let sum: i64 = terms.iter().map(|t| t["value"].as_i64().unwrap()).sum();
    assert_eq!(v["value"].as_i64().unwrap(), sum);
    assert_eq!(
        v["where"]["state(layers[linear_moe].attention.core)"],
        524_288
    );
    assert_eq!(v["where"]["conv_kernel"], 4);
    let (code, out, _) = run(&[
        "explain",
        "openai/gpt-oss-20b",
        "kv_bytes_per_token",
        "--full",
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("whole expression: "), "{out}");
}

#[test]
fn a_figure_of_a_deployment_that_does_not_fit_is_explained_as_such() {
    let (code, out, _) = run(&[
        "explain",
        "Qwen/Qwen3-Next-80B-A3B",
        "decode.estimate_s",
        "--gpu",
        "H200",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("DOES NOT FIT") && out.contains("21.51 GiB over"),
        "{out}"
    );
    let (code, out, _) = run(&[
        "explain",
        "Qwen/Qwen3-Next-80B-A3B",
        "decode.estimate_s",
        "--gpu",
        "H200",
        "--json",
    ]);
    assert_eq!(code, 1);
    assert_eq!(json(&out)["status"], "DOES_NOT_FIT");
}

#[test]
fn plan_keeps_only_layouts_that_meet_a_latency_target() {
    let (code, out, _) = run(&[
        "plan",
        "Qwen/Qwen3-8B",
        "--gpu",
        "h100",
        "--max-gpus",
        "8",
        "--max-tpot",
        "1us",
        "--json",
    ]);
    assert_eq!(code, 1, "no layout decodes in a microsecond: {out}");
    assert!(json(&out)["smallest"].is_null());
    let (code, out, err) = run(&[
        "plan",
        "Qwen/Qwen3-8B",
        "--gpu",
        "h100",
        "--max-gpus",
        "8",
        "--max-tpot",
        "1s",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert!(v["smallest"]["tpot_estimate_s"].as_f64().unwrap() <= 1.0);
    assert_eq!(v["max_tpot_s"], 1.0);
}

#[test]
fn a_model_that_is_not_bundled_is_answered_from_the_truth_fetch_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_harch-worker"))
            .current_dir(dir.path())
            .env("HARCH_ROOT", root())
            .env("HARCH_INVENTORY_CACHE", "off")
            .env("HF_HUB_OFFLINE", "1")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    // Offline and never fetched: what to run.
    let (code, _, err) = cmd(&["show", "someone/Qwen3-8B-copy"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("harch-worker fetch someone/Qwen3-8B-copy --out DIR"),
        "{err}"
    );
    // A truth directory where `fetch` puts one by default (here written from the bundled
    // snapshot of a checkpoint of the same architecture) is found and used.
    let (code, _, err) = cmd(&[
        "fetch",
        "Qwen/Qwen3-8B",
        "--offline",
        "--out",
        ".harch/truth/someone__Qwen3-8B-copy",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cmd(&["show", "someone/Qwen3-8B-copy", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["params_total"], 8_190_735_360i64);
    let (code, out, err) = cmd(&["analyze", "someone/Qwen3-8B-copy", "--gpu", "h100"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("FITS: someone/Qwen3-8B-copy"), "{out}");
}
