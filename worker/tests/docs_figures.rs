//! Figures the documentation states that the code can compute: prompt sizes (README,
//! docs/ablation.md), default budgets (queue.toml's derived agent-stage timeout, ablation.md's
//! turn cap, docs/queue.md's retry budgets), and the README's build times (measured once, in
//! docs/benchmarks.md; the README repeats them). A figure that drifted fails here with the
//! value it should be; `HARCH_UPDATE_DOCS=1 cargo test -p harch-worker --test it docs_figures::`
//! writes the computed values into the files (review the diff).
//!
//! Needs the forward source (scripts/fetch-transformers-src, or HARCH_TRANSFORMERS_SRC): prompts
//! include it.

use std::path::PathBuf;
use std::process::Command;

use harch_worker::net::{BUDGET_ENV, Budget};
use harch_worker::queue::config::{DEFAULT_TOML, Settings};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `128321` → `128,321`.
fn grouped(n: usize) -> String {
    harch_worker::text::group_digits(n as i128)
}

/// (bytes, estimated tokens) of the generate prompt `prompt` prints for `model`.
fn prompt_size(model: &str, ablation: bool) -> (usize, usize) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_harch-worker"));
    c.args(["prompt", model, "--size-only", "--json"])
        .current_dir(root())
        .env("HARCH_INVENTORY_CACHE", "off");
    if ablation {
        c.arg("--ablation");
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let size = &v["size"];
    (
        size["bytes"].as_u64().unwrap() as usize,
        size["est_tokens"].as_u64().unwrap() as usize,
    )
}

/// One documentation file whose figures are checked (or, in update mode, rewritten).
struct Doc {
    path: PathBuf,
    text: String,
    changed: bool,
}

impl Doc {
    fn open(rel: &str) -> Doc {
        let path = root().join(rel);
        let text = std::fs::read_to_string(&path).unwrap();
        Doc {
            path,
            text,
            changed: false,
        }
    }

    /// The text between `before` and the next `after` must be `want`.
    fn figure(&mut self, before: &str, after: &str, want: &str, wrong: &mut Vec<String>) {
        let name = self
            .path
            .strip_prefix(root())
            .unwrap()
            .display()
            .to_string();
        let Some(at) = self.text.find(before) else {
            wrong.push(format!(
                "{name}: no `{before}` (the figure's context moved?)"
            ));
            return;
        };
        let start = at + before.len();
        let Some(len) = self.text[start..].find(after) else {
            wrong.push(format!("{name}: no `{after}` after `{before}`"));
            return;
        };
        let have = &self.text[start..start + len];
        if have != want {
            wrong.push(format!(
                "{name}: `{before}{have}{after}` should say `{want}`"
            ));
            self.text.replace_range(start..start + len, want);
            self.changed = true;
        }
    }

    fn save(&self, update: bool) {
        if update && self.changed {
            std::fs::write(&self.path, &self.text).unwrap();
        }
    }
}

fn settle(docs: &[Doc], wrong: Vec<String>) {
    let update = std::env::var("HARCH_UPDATE_DOCS").is_ok_and(|v| v == "1");
    for d in docs {
        d.save(update);
    }
    assert!(
        update || wrong.is_empty(),
        "figures drifted (HARCH_UPDATE_DOCS=1 rewrites them):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn prompt_sizes_and_the_budgets_they_imply_are_the_computed_ones() {
    let mut wrong = Vec::new();
    let mut readme = Doc::open("README.md");
    let (bytes, tokens) = prompt_size("deepseek-ai/DeepSeek-V3", false);
    readme.figure(
        "DeepSeek-V3's is ",
        " tokens;",
        &format!("{} bytes (~{}", grouped(bytes), grouped(tokens)),
        &mut wrong,
    );

    let mut ablation = Doc::open("docs/ablation.md");
    let models = [
        "meta-llama/Llama-3.1-8B",
        "Qwen/Qwen3-8B",
        "Qwen/Qwen3-30B-A3B",
        "Qwen/Qwen3-Next-80B-A3B",
        "deepseek-ai/DeepSeek-V2-Lite",
        "deepseek-ai/DeepSeek-V3",
        "openai/gpt-oss-20b",
    ];
    let mut gpt_oss = 0;
    for model in models {
        let (bytes, tokens) = prompt_size(model, true);
        if model == "openai/gpt-oss-20b" {
            gpt_oss = tokens;
        }
        ablation.figure(
            &format!("| {model} | "),
            " |\n",
            &format!("{} | {}", grouped(bytes), grouped(tokens)),
            &mut wrong,
        );
    }
    let settings = Settings::parse(DEFAULT_TOML, "the built-in queue.toml").unwrap();
    let turns = settings.agent.max_turns as usize;
    ablation.figure(
        "the fake's 6 turns, ~",
        " input tokens.",
        &format!(
            "{:.1}k × 6 ≈ {}k",
            gpt_oss as f64 / 1000.0,
            (gpt_oss * 6 + 500) / 1000
        ),
        &mut wrong,
    );
    ablation.figure(
        "`agent.max_turns` (default ",
        " input tokens for gpt-oss",
        &format!("{turns}: up to ~{:.1}M", (gpt_oss * turns) as f64 / 1e6),
        &mut wrong,
    );
    settle(&[readme, ablation], wrong);
}

#[test]
fn default_budgets_are_the_ones_the_code_applies() {
    let mut wrong = Vec::new();
    let settings = Settings::parse(DEFAULT_TOML, "the built-in queue.toml").unwrap();
    let mut toml = Doc::open("queue.toml");
    let secs = settings.agent_stage_timeout_s();
    let (h, m) = (secs / 3600, secs % 3600 / 60);
    toml.figure(
        "(agent.timeout_s + 60) + 120 (",
        " on these defaults)",
        &format!("{h} h {m} min"),
        &mut wrong,
    );
    // docs/queue.md's table of retry budgets: every variable, with its default.
    let mut queue = Doc::open("docs/queue.md");
    let mut budget = Budget::default();
    for (var, field) in BUDGET_ENV {
        let default = *field(&mut budget);
        queue.figure(
            &format!("| `{var}` | "),
            " |",
            &default.to_string(),
            &mut wrong,
        );
    }
    settle(&[toml, queue], wrong);
}

#[test]
fn the_readme_build_times_are_the_measured_ones() {
    let bench = std::fs::read_to_string(root().join("docs/benchmarks.md")).unwrap();
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut checked = 0;
    for (command, readme_says) in [
        ("`cargo test --workspace --no-run`", "the test build"),
        ("`cargo install --path worker", "release install"),
    ] {
        // The newest measurement: the last table row of that command, its "after" column.
        let row = bench
            .lines()
            .rfind(|l| l.starts_with(&format!("| {command}")))
            .unwrap_or_else(|| panic!("docs/benchmarks.md has no row for {command}"));
        let after = row.split('|').nth(3).unwrap().trim();
        let time = after.split(" (").next().unwrap();
        let at = readme
            .find(readme_says)
            .unwrap_or_else(|| panic!("README.md does not state {readme_says}"));
        let sentence: String = readme[at..].chars().take(120).collect();
        assert!(
            sentence.contains(time),
            "README.md's {readme_says} should say {time} (docs/benchmarks.md: {row})"
        );
        checked += 1;
    }
    assert_eq!(checked, 2);
}
