//! A guard-tier ablation end to end, through the real `harch-worker` binary: `ablate` queues
//! gpt-oss at tiers off, weight and all, two seeds each; `run --once` runs them with the fake
//! Claude Code of tests/fixtures/agents (scenario `ablation`) in decontaminated workspaces;
//! `ablate report` collects them. The fake writes a spec with a wrong expert shape and a wrong
//! sliding window, runs the REAL `validate` staged on its PATH, fixes what that validate
//! reports and claims success. So at `off` nothing is fixed, at `weight` the shape is, and only
//! at `all` the window too: pass rates 0%, 0%, 100%; false self-pass rates 100%, 100%, 0%.
//!
//! `HARCH_WRITE_ABLATION_SAMPLE=1` also writes the report into docs/ablation-sample/.
//! Needs gpt-oss's forward source (scripts/fetch-transformers-src); Landlock as the other
//! agent tests.

use crate::agent_env;

use std::path::Path;

use agent_env::{Env, project_root};

const GPT_OSS: &str = "openai/gpt-oss-20b";

fn ablation_env() -> Env {
    let env = Env::new("claude", "ablation");
    let agents = env.tmp.path().join("agents");
    // What the fake "remembers": the target's spec and the components the decontamination
    // removes, kept beside the CLI (the agent's own installation, readable in the sandbox).
    for (src, name) in [
        ("specs/models/gpt_oss.yaml", "gpt_oss.yaml"),
        (
            "specs/components/library/gqa_attention.yaml",
            "gqa_attention.yaml",
        ),
        (
            "specs/components/library/moe_ffn_grouped.yaml",
            "moe_ffn_grouped.yaml",
        ),
    ] {
        std::fs::copy(project_root().join(src), agents.join(name)).unwrap();
    }
    env.set("HARCH_AGENT_ATTEMPTS", "1")
}

fn ablate(env: &Env, out: &Path) -> String {
    let o = env.run(&[
        "ablate",
        "--models",
        GPT_OSS,
        "--tiers",
        "off,weight,all",
        "--seeds",
        "2",
        "--agent",
        "claude",
        "--offline",
        "--out",
        out.to_str().unwrap(),
    ]);
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn csv_rows(text: &str) -> Vec<csv::StringRecord> {
    csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .from_reader(text.as_bytes())
        .records()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn tier_dependent_fake_agents_give_exactly_the_implied_rates() {
    if !harch_sandbox::testing::landlock_available() {
        return;
    }
    let env = ablation_env();
    let out = env.tmp.path().join("ablation");
    let said = ablate(&env, &out);
    assert!(
        said.contains("6 runs planned, 0 finished, 0 in flight, 6 queued now"),
        "{said}"
    );
    env.run(&["run", "--once", "--concurrency", "1"]);

    let report = env.run(&["ablate", "report", out.to_str().unwrap()]);
    let md = String::from_utf8(report.stdout).unwrap();
    let tiers = std::fs::read_to_string(out.join("tiers.csv")).unwrap();
    assert!(tiers.starts_with("# agent: claude\n"), "{tiers}");
    for key in [
        "# prompt template hash: ",
        "# harch version: ",
        "# guard set: weight, packing",
    ] {
        assert!(tiers.contains(key), "{tiers}");
    }
    let rows = csv_rows(&tiers);
    let by_tier = |t: &str| rows.iter().find(|r| &r[0] == t).unwrap().clone();
    // tier, finished, pass rate, false self-pass rate
    for (tier, pass, fsp) in [
        ("off", "0.0000", "1.0000"),
        ("weight", "0.0000", "1.0000"),
        ("all", "1.0000", "0.0000"),
    ] {
        let r = by_tier(tier);
        assert_eq!((&r[3], &r[5], &r[7]), ("2", pass, fsp), "{tier}: {tiers}");
    }
    // The error classes say what each tier let through: both mistakes at off, only the
    // window once the weight guard is on.
    let off = by_tier("off")[8].to_string();
    assert!(
        off.contains("weight:") && off.contains("structural:"),
        "{off}"
    );
    let weight = by_tier("weight")[8].to_string();
    assert!(
        !weight.contains("weight:") && weight.contains("structural:"),
        "{weight}"
    );
    assert_eq!(&by_tier("all")[8], "");
    // The fake's accounting: 7 turns... whatever it reported, summed per run, is in the report.
    assert_eq!(&by_tier("all")[11], "0.0125", "{tiers}");
    assert!(
        md.contains("| off | none | 2/2 | 0% (0) | 100% (2) |"),
        "{md}"
    );
    assert!(md.contains("| all | weight, packing"), "{md}");
    let svg = std::fs::read_to_string(out.join("report.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("false self-pass"),
        "{}",
        &svg[..200]
    );

    // Each run's record: the claim, both verdicts, the decontamination.
    let runs = std::fs::read_to_string(out.join("runs.csv")).unwrap();
    let runs = csv_rows(&runs);
    assert_eq!(runs.len(), 6);
    for r in &runs {
        assert_eq!((&r[4], &r[5], &r[6]), ("true", "true", "true"), "{r:?}");
    }
    let rec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join("runs/openai__gpt-oss-20b/weight/seed-1.json")).unwrap(),
    )
    .unwrap();
    let removed: Vec<&str> = rec["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    for p in [
        "specs/models/gpt_oss.yaml",
        "specs/models/llama.yaml",
        "specs/components/library/gqa_attention.yaml",
        "specs/components/library/moe_ffn_grouped.yaml",
        "specs/components/library/mla_attention.yaml",
    ] {
        assert!(removed.contains(&p), "{p} not removed: {removed:?}");
    }
    assert_eq!(rec["guards"], serde_json::json!(["weight"]));
    assert_eq!(rec["full_valid"], false);
    assert!(rec["byte_gap"].is_i64());
    assert_eq!(rec["full_errors"].get("weight"), None, "{rec:#}");

    // Resuming queues nothing: every run has its record.
    let said = ablate(&env, &out);
    assert!(
        said.contains("6 runs planned, 6 finished, 0 in flight, 0 queued now"),
        "{said}"
    );

    if std::env::var_os("HARCH_WRITE_ABLATION_SAMPLE").is_some() {
        let sample = project_root().join("docs/ablation-sample");
        std::fs::create_dir_all(&sample).unwrap();
        env.run(&["ablate", "report", "--sample", out.to_str().unwrap()]);
        for f in ["runs.csv", "tiers.csv", "report.md", "report.svg"] {
            std::fs::copy(out.join(f), sample.join(f)).unwrap();
        }
    }
}
