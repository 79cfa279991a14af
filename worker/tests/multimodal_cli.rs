//! `show` and `analyze` on a vision-language checkpoint: the text model and the encoder apart,
//! an image resolution chosen on the command line, images in the prompt.

use crate::harch_cli;

use harch_cli::run;

#[test]
fn show_reports_the_text_model_and_the_encoder_apart() {
    let (code, out, err) = run(&[
        "show",
        "Qwen/Qwen3.5-35B-A3B",
        "--json",
        "--image",
        "448x448",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["params_total"], 35_951_822_704i64);
    assert_eq!(v["params_text"], 35_505_251_456i64);
    assert_eq!(v["params_active"], 2_946_429_568i64);
    let e = &v["encoders"][0];
    assert_eq!(e["input"], "pixel_values");
    assert_eq!(
        (e["height"].as_i64(), e["width"].as_i64()),
        (Some(448), Some(448))
    );
    assert_eq!(e["tokens_per_image"], 196);
    assert_eq!(e["params"], 446_571_248);
    // The default resolution is the learned position grid's (48 x 48 patches).
    let (code, out, err) = run(&["show", "Qwen/Qwen3.5-35B-A3B"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("encoder of `pixel_values` at 768x768 (2,304 patches, 576 tokens per image)"),
        "{out}"
    );
    // A resolution that is not whole patches is a located error, not a number.
    let (code, _, err) = run(&["show", "Qwen/Qwen3.5-35B-A3B", "--image", "450x448"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("not a whole number of 16-pixel patches"),
        "{err}"
    );
    let (code, _, err) = run(&["show", "Qwen/Qwen3.5-35B-A3B", "--image", "big"]);
    assert_ne!(code, 0);
    assert!(err.contains("HEIGHTxWIDTH"), "{err}");
}

#[test]
fn analyze_counts_images_in_the_prompt() {
    let base = [
        "analyze",
        "Qwen/Qwen3.5-35B-A3B",
        "--gpu",
        "H200",
        "--gpus",
        "1",
        "--layout",
        "attn=tp1",
        "--output",
        "256",
        "--json",
    ];
    let with_images = {
        let mut a = base.to_vec();
        a.extend(["--input", "1000", "--images", "2"]);
        run(&a)
    };
    let as_tokens = {
        let mut a = base.to_vec();
        a.extend(["--input", "2152"]);
        run(&a)
    };
    assert_eq!(with_images.0, as_tokens.0, "{}", with_images.2);
    let (a, b): (serde_json::Value, serde_json::Value) = (
        serde_json::from_str(&with_images.1).unwrap(),
        serde_json::from_str(&as_tokens.1).unwrap(),
    );
    // Two 768 x 768 images fill 2 x 576 prompt tokens; their encoding is reported beside.
    assert_eq!(a["images"]["prompt_tokens"], 1_152);
    assert_eq!(
        a["images"]["encode_flops_per_request"],
        2 * 2_613_107_589_120i64
    );
    assert!(b.get("images").is_none());
    assert_eq!(a["prefill"], b["prefill"]);
    assert_eq!(a["kv_bytes_per_request"], b["kv_bytes_per_request"]);
    let (code, _, err) = run(&[
        "analyze",
        "meta-llama/Llama-3.1-8B",
        "--gpu",
        "H200",
        "--images",
        "1",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("has no image input"), "{err}");
}
