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
    // The TTFT is the images' encoding and the prefill: the encoder's FLOPs (one GPU here)
    // and its weights (446,571,248 BF16 parameters) from the spec, decode untouched.
    let e = &a["encode"];
    assert_eq!(e["flops_per_gpu"], 2 * 2_613_107_589_120i64);
    assert_eq!(e["weight_bytes_per_gpu"], 2 * 446_571_248i64);
    assert_eq!(
        (e["images_per_request"].as_i64(), e["gpus"].as_i64()),
        (Some(2), Some(1))
    );
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    assert!(f(&e["bound_s"]) > 0.0 && f(&e["estimate_s"]) >= f(&e["bound_s"]));
    assert_eq!(
        f(&a["ttft_bound_s"]),
        f(&a["prefill"]["bound_s"]) + f(&e["bound_s"])
    );
    assert_eq!(
        f(&a["ttft_estimate_s"]),
        f(&a["prefill"]["estimate_s"]) + f(&e["estimate_s"])
    );
    assert_eq!(a["labels"]["encode.bound_s"], "bound");
    assert!(b.get("encode").is_none());
    assert_eq!(f(&b["ttft_bound_s"]), f(&b["prefill"]["bound_s"]));
    assert_eq!(a["decode"], b["decode"]);
    assert_eq!(a["tpot_bound_s"], b["tpot_bound_s"]);
    // Two tensor-parallel GPUs split the encoding between them.
    let mut tp2 = base.to_vec();
    tp2[5] = "2";
    tp2[7] = "attn=tp2";
    tp2.extend(["--input", "1000", "--images", "2"]);
    let (code, out, err) = run(&tp2);
    assert_eq!(code, 0, "{err}");
    let t: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(t["encode"]["gpus"], 2);
    assert_eq!(t["encode"]["flops_per_gpu"], 2_613_107_589_120i64);
    // The text report shows both parts.
    let mut text = base[..base.len() - 1].to_vec();
    text.extend(["--input", "1000", "--images", "2"]);
    let (code, out, err) = run(&text);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("encode images"), "{out}");
    assert!(out.contains("(encode + prefill)"), "{out}");
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

#[test]
fn show_counts_a_video_where_the_tower_takes_one() {
    // MiniMax-M3 encodes a video as one sequence: 16 frames of 448 x 448 are 8 temporal
    // patches of 32 x 32 (its count from the source's shapes is in tests/minimax_m3.rs).
    let (code, out, err) = run(&[
        "show",
        "MiniMaxAI/MiniMax-M3",
        "--json",
        "--video",
        "16x448x448",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let e = &v["encoders"][0];
    assert_eq!(
        (e["frames"].as_i64(), e["patches"].as_i64()),
        (Some(16), Some(8_192))
    );
    assert_eq!(e["tokens_per_image"], 2_048);
    assert_eq!(e["flops_per_image"], 23_037_200_039_936i64);
    let (code, out, err) = run(&["show", "MiniMaxAI/MiniMax-M3", "--video", "16x448x448"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("at 16 frames of 448x448 (8,192 patches, 2,048 tokens per video)"),
        "{out}"
    );
    // Frames that are not whole temporal patches: a located error at the input.
    let (code, _, err) = run(&["show", "MiniMaxAI/MiniMax-M3", "--video", "15x448x448"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("15 frames are not a whole number of 2-frame patches"),
        "{err}"
    );
    assert!(err.contains("inputs.pixel_values"), "{err}");
    // Qwen3.5's tower attends frame by frame, which the spec does not say: no video count.
    let (code, _, err) = run(&["show", "Qwen/Qwen3.5-35B-A3B", "--video", "4x448x448"]);
    assert_ne!(code, 0);
    assert!(err.contains("takes no video"), "{err}");
    let (code, _, err) = run(&["show", "MiniMaxAI/MiniMax-M3", "--video", "448x448"]);
    assert_ne!(code, 0);
    assert!(err.contains("FRAMESxHEIGHTxWIDTH"), "{err}");
}
