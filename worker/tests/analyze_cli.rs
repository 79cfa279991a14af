//! `harch-worker analyze` and `explain` of deployment figures as a user runs them: the JSON
//! fields, the human table, exit codes, sweeps written as CSV and SVG.

use crate::harch_cli;

use harch_cli::run;

const ANCHOR: &[&str] = &[
    "deepseek-ai/DeepSeek-V3",
    "--gpu",
    "B200",
    "--gpus",
    "8",
    "--layout",
    "attn=dp8,moe=ep8",
    "--input",
    "1024",
    "--output",
    "1024",
];

#[test]
fn the_anchor_as_json_has_the_issue_fields() {
    let mut args = vec!["analyze"];
    args.extend(ANCHOR);
    args.push("--json");
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["weights_bytes_per_gpu"], 100_840_747_360i64);
    assert_eq!(v["kv_bytes_per_request"], 143_917_056);
    assert_eq!(v["max_decode_requests"], 507);
    assert!(v["prefill_batch_cap"].as_i64().unwrap() > 0);
    for phase in ["prefill", "decode"] {
        let p = &v[phase];
        assert_eq!(p["status"], "ok");
        let (b, e) = (
            p["bound_s"].as_f64().unwrap(),
            p["estimate_s"].as_f64().unwrap(),
        );
        assert!(0.0 < b && b <= e, "{phase}: {b} {e}");
        assert!(["compute", "memory", "communication"].contains(&p["bound_by"].as_str().unwrap()));
    }
    assert_eq!(v["labels"]["decode.estimate_s"], "estimate");
    assert_eq!(v["labels"]["decode.bound_s"], "bound");
    assert_eq!(v["hardware"]["hbm_bandwidth"]["value"], 7.7e12);
    assert!(
        v["hardware"]["memory"]["source"]
            .as_str()
            .unwrap()
            .contains("HGX B200")
    );
    assert!(
        v["decode"].get("ops").is_none(),
        "per-op rows only with --ops"
    );
}

#[test]
fn the_human_table_names_what_bounds_each_phase() {
    let mut args = vec!["analyze"];
    args.extend(ANCHOR);
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    for want in [
        "weights                       93.92 GiB",
        "KV per request               137.25 MiB",
        "max decode requests                 507",
        "prefill (TTFT)",
        "decode (TPOT)",
        "tokens/s per GPU",
        "dispatch",
        "HGX B200",
    ] {
        assert!(out.contains(want), "missing `{want}` in\n{out}");
    }
}

#[test]
fn explain_shows_the_terms_of_a_deployment_figure() {
    let mut args = vec!["explain", "deepseek-ai/DeepSeek-V3", "decode.estimate_s"];
    args.extend(&ANCHOR[1..]);
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("decode.estimate_s = Σ rows max(compute, memory, communication)"),
        "{out}"
    );
    assert!(
        out.contains("[estimate]") && out.contains("terms") && out.contains("all-to-all"),
        "{out}"
    );
    // Without a GPU, the figure cannot be computed; the message says what to add.
    let (code, _, err) = run(&["explain", "deepseek-ai/DeepSeek-V3", "decode.estimate_s"]);
    assert_eq!(code, 2);
    assert!(err.contains("give --gpu"), "{err}");
}

#[test]
fn a_missing_hardware_figure_exits_three_and_names_it() {
    // One precision for every op, one the H100's datasheet has no rate for.
    let (code, out, _) = run(&[
        "analyze",
        "openai/gpt-oss-20b",
        "--gpu",
        "H100 SXM",
        "--compute-precision",
        "fp4",
        "--json",
    ]);
    assert_eq!(code, 3);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"], "INSUFFICIENT_EVIDENCE");
    assert_eq!(v["decode"]["missing"][0], "H100 SXM: peak_flops.fp4");
    assert!(v["weights_bytes_per_gpu"].as_i64().unwrap() > 0);
}

#[test]
fn bad_layouts_and_gpus_are_clear_usage_errors() {
    let analyze = |gpu: &str, gpus: &str, layout: &str| {
        let args = [
            "analyze",
            "deepseek-ai/DeepSeek-V3",
            "--gpu",
            gpu,
            "--gpus",
            gpus,
        ];
        run(&[&args[..], &["--layout", layout]].concat())
    };
    let (code, _, err) = analyze("B200", "8", "attn=tp3");
    assert_eq!(code, 2);
    assert!(err.contains("attn") && err.contains("8"), "{err}");
    let (code, _, err) = analyze("B200", "6", "attn=tp6");
    assert_eq!(code, 2);
    assert!(
        err.contains("degree 6 neither divides nor is a multiple of"),
        "{err}"
    );
    let (code, _, err) = analyze("TPU", "8", "attn=tp8");
    assert_eq!(code, 2);
    assert!(err.contains("B200") && err.contains("MI300X"), "{err}");
}

#[test]
fn a_sweep_writes_csv_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let (csv, svg) = (dir.path().join("ep.csv"), dir.path().join("ep.svg"));
    let sweep = |values: &str| {
        run(&[
            "analyze",
            "deepseek-ai/DeepSeek-V3",
            "--gpu",
            "B200",
            "--layout",
            "attn=dp8,moe=ep8",
            "--sweep",
            values,
            "--csv",
            csv.to_str().unwrap(),
            "--svg",
            svg.to_str().unwrap(),
        ])
    };
    let (code, out, err) = sweep("context=4096,...,262144");
    assert_eq!(code, 2, "`4096,...` needs two values: {out}{err}");
    assert!(err.contains("two values"), "{err}");
    assert!(!csv.exists() && !svg.exists());
    let (code, out, err) = sweep("context=4096,8192,...,262144");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("* past the published context limit (163,840)"),
        "{out}"
    );
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv.lines().count(), 1 + 7);
    assert!(
        csv.lines().last().unwrap().contains(",true,"),
        "262144 is an extrapolation: {csv}"
    );
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("extrapolation"));
}
