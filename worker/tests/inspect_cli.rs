//! `harch-worker inspect`: the page it writes embeds exactly the figures `show --json` prints,
//! `--library` writes a page per bundled model and an index, and bad input is a usage error
//! that writes nothing. (The pages in a browser: harch-inspect's tests/browser.rs.)

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_harch-worker"))
        .current_dir(root())
        .env("HARCH_INVENTORY_CACHE", "off")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

#[test]
fn the_page_embeds_the_figures_show_prints() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("dsv3.html");
    let (code, stdout, err) = run(&[
        "inspect",
        "deepseek-ai/DeepSeek-V3",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let page = json(&stdout);
    let (code, show, err) = run(&["show", "deepseek-ai/DeepSeek-V3", "--json"]);
    assert_eq!(code, 0, "{err}");
    let show = json(&show);
    let figures = page["figures"].as_object().unwrap();
    assert!(figures.len() >= 15, "{figures:?}");
    for (k, v) in figures {
        assert_eq!(&show[k], v, "{k}: the page and show disagree");
    }
    assert_eq!(page["valid"], true);
    let html = std::fs::read_to_string(&out).unwrap();
    assert_eq!(page["bytes"], html.len());
    assert!(html.len() <= 2 << 20, "{} bytes", html.len());
    // Self-contained: no resource is fetched when the page is viewed (the SVG namespace URI is
    // a name, not a fetch).
    for needle in [
        "<script src",
        "<link rel=\"stylesheet\"",
        "src=\"http",
        "href=\"http",
        "url(http",
        "@import",
        "fetch(",
        "XMLHttpRequest",
    ] {
        assert!(!html.contains(needle), "the page refers to {needle}");
    }
}

#[test]
fn the_library_site_has_a_page_per_bundled_model_and_an_index() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("site");
    let (code, stdout, err) = run(&[
        "inspect",
        "--library",
        "--out",
        dir.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v = json(&stdout);
    let pages = v["pages"].as_array().unwrap();
    assert!(pages.len() >= 7, "{v}");
    let index = std::fs::read_to_string(dir.join("index.html")).unwrap();
    for p in pages {
        let file = PathBuf::from(p["file"].as_str().unwrap());
        assert!(file.is_file(), "{file:?}");
        let name = file.file_name().unwrap().to_str().unwrap();
        assert!(
            index.contains(&format!("href=\"{name}\"")),
            "index links {name}"
        );
        assert_eq!(p["valid"], true, "{p}");
    }
}

#[test]
fn bad_input_is_a_usage_error_that_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x.html");
    let (code, stdout, _) = run(&["inspect", "--json"]);
    assert_eq!(code, 2, "{stdout}");
    assert_eq!(json(&stdout)["kind"], "usage", "{stdout}");
    let (code, _, err) = run(&[
        "inspect",
        "no-such-org/no-such-model",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_ne!(code, 0, "{err}");
    assert!(!out.exists());
}

/// The data document a page embeds.
fn embedded(html: &str) -> serde_json::Value {
    let start = html.find("id=\"harch-data\">").unwrap() + "id=\"harch-data\">".len();
    let end = start + html[start..].find("</script>").unwrap();
    json(&html[start..end])
}

#[test]
fn the_deployment_panel_carries_what_analyze_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("d.html");
    let deployment = ["--gpu", "B200", "--layout", "attn=dp8,moe=ep8"];
    let mut args = vec![
        "inspect",
        "deepseek-ai/DeepSeek-V3",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(deployment);
    let (code, _, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    let data = embedded(&std::fs::read_to_string(&out).unwrap());
    let mut args = vec!["analyze", "deepseek-ai/DeepSeek-V3", "--json"];
    args.extend(deployment);
    let (_, analyze, err) = run(&args);
    let analyze = json(&analyze);
    for k in [
        "verdict",
        "weights_bytes_per_gpu",
        "kv_bytes_per_request",
        "max_decode_requests",
    ] {
        assert!(!analyze[k].is_null(), "analyze answers {k}: {err}");
        assert_eq!(data["deployment"][k], analyze[k], "{k}");
    }
    // The sweep the panel plots: analyze's own sweep of the same deployment, and its plot.
    let sweep = &data["deployment"]["sweep"];
    assert_eq!(sweep["spec"], "batch=1,2,...,256");
    assert!(sweep["svg"].as_str().unwrap().contains("<svg"), "{sweep}");
    let mut args = vec![
        "analyze",
        "deepseek-ai/DeepSeek-V3",
        "--sweep",
        "batch=1,2,...,256",
        "--csv",
        "-",
    ];
    args.extend(deployment);
    let (_, csv, err) = run(&args);
    assert_eq!(sweep["csv"].as_str().unwrap(), csv, "{err}");
}
