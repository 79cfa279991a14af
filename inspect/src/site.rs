//! `inspect --library`: a static site of every library model (one page each) and an index
//! page listing them with their verdict and headline figures, what a spec repository publishes
//! on its Pages.

use std::path::Path;

use crate::html::escape;
use crate::model::ModelData;

/// The file name of a model's page (`deepseek-ai__DeepSeek-V3.html`).
pub fn page_file(title: &str) -> String {
    let safe: String = title
        .replace('/', "__")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-._".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}.html")
}

fn figure(m: &ModelData, k: &str) -> String {
    m.figures
        .as_ref()
        .and_then(|f| f.get(k))
        .and_then(|v| v.as_i64())
        .map(|v| harch_engine::text::group_digits(v as i128))
        .unwrap_or_else(|| "—".into())
}

/// The index page: one row per model, linking its page.
pub fn index(models: &[ModelData]) -> String {
    let style = include_str!("../assets/page.css");
    let mut rows = String::new();
    for m in models {
        let verdict = if m.verdict.valid {
            if m.verdict.declared_gap.is_some() {
                "valid, declared gap"
            } else {
                "valid"
            }
        } else {
            "INVALID"
        };
        rows.push_str(&format!(
            "<tr><td><a href=\"{}\">{}</a></td><td>{}</td><td class=\"{}\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
            escape(&page_file(&m.title)),
            escape(&m.title),
            escape(m.model_type.as_deref().unwrap_or("")),
            if m.verdict.valid { "ok" } else { "bad" },
            verdict,
            figure(m, "params_total"),
            figure(m, "params_active"),
            figure(m, "weight_bytes"),
            figure(m, "kv_bytes_per_token"),
        ));
    }
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>harch Inspector — library</title><style>{style}</style></head>\n<body><header><h1>harch Inspector — the spec library</h1><p>Every model the library has a bundled snapshot of, validated against it; each page is one self-contained file.</p></header><main><table class=\"figures\" id=\"library\"><thead><tr><th>model</th><th>model_type</th><th>verdict</th><th>params total</th><th>params active</th><th>weight bytes</th><th>KV bytes / token</th></tr></thead><tbody>\n{rows}</tbody></table></main></body></html>\n"
    )
}

/// Writes `dir/index.html` and each model's page; returns the files written.
pub fn write(dir: &Path, pages: &[(ModelData, String)]) -> anyhow::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut out = Vec::new();
    for (m, html) in pages {
        let p = dir.join(page_file(&m.title));
        write_file(&p, html)?;
        out.push(p);
    }
    let models: Vec<ModelData> = pages.iter().map(|(m, _)| m.clone()).collect();
    let p = dir.join("index.html");
    write_file(&p, &index(&models))?;
    out.push(p);
    Ok(out)
}

/// Written whole or not at all (harch-files' temp file and rename).
pub fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    harch_files::write_atomic(path, text.as_bytes())
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
}
