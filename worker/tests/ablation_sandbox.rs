//! An ablation run's workspace is decontaminated, for each of the seven library models: the
//! target's own spec, every other model spec and the library components of the target's kinds
//! are absent from the workspace and the prompt, and a process in the real sandbox cannot read
//! them, neither where the workspace would hold them nor where the project keeps them; the
//! generic building blocks and the target's truth stay readable.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use harch_sandbox::{RunOptions, Workspace};
use harch_worker::pipeline::stages::generate::{
    self, Decontaminated, StageRequest, decontaminate, removed_component_names,
};
use harch_worker::queue::config::{DEFAULT_TOML, Settings};
use harch_worker::queue::record::AblationRun;
use harch_worker::{snapshot, specs, subject, truth_dir};

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn all_specs() -> BTreeMap<String, String> {
    specs::read_spec_files(&project_root()).unwrap()
}

fn decontaminated(id: &str) -> Decontaminated {
    let truth = snapshot::load_snapshot(id).unwrap();
    decontaminate(&all_specs(), &subject::architectures(&truth.config)).unwrap()
}

fn removed(d: &Decontaminated) -> Vec<&str> {
    d.removed.iter().map(|r| r.path.as_str()).collect()
}

#[test]
fn every_model_spec_and_the_targets_kinds_are_removed_generic_blocks_stay() {
    let all = all_specs();
    let ids = snapshot::snapshot_ids();
    // Everything under specs/models/ goes, gap reports too (they name the model's gaps).
    let models: Vec<&String> = all
        .keys()
        .filter(|k| k.starts_with("specs/models/"))
        .collect();
    let specs = models
        .iter()
        .filter(|k| harch_engine::load::is_model_spec_path(k))
        .count();
    assert!(specs < models.len(), "a library spec keeps a gap report");
    // One bundled snapshot per library model spec.
    assert_eq!(ids.len(), specs, "{ids:?}");
    for id in ids {
        let d = decontaminated(id);
        let gone = removed(&d);
        for m in &models {
            assert!(gone.contains(&m.as_str()), "{id}: {m} not removed");
        }
        let target = d.target.clone().expect("a library model");
        assert!(
            d.removed
                .iter()
                .any(|r| r.path == target && r.why.contains("own"))
        );
        // Every non-template component the target uses is removed, with its whole kind.
        let repo = harch_engine::Repo::from_files(all.clone());
        let ir = repo
            .load_model(target.trim_start_matches("specs/models/"))
            .unwrap();
        let names = removed_component_names(&d, &all);
        for c in ir.components.keys() {
            let (def, _) = repo.component_def(c).unwrap();
            if def.slots.is_empty() {
                assert!(names.contains(c), "{id}: uses {c}, which stayed");
                for other in repo.component_names() {
                    let (o, _) = repo.component_def(other).unwrap();
                    if o.role == def.role {
                        assert!(names.contains(other), "{id}: {other} is of {c}'s kind");
                    }
                }
            } else {
                assert!(!names.contains(c), "{id}: the template {c} is generic");
            }
        }
        assert!(d.library.keys().any(|k| k.starts_with("specs/arch/")));
        assert!(d.library.keys().any(|k| k.starts_with("specs/quant/")));
        for key in d.library.keys() {
            assert!(!gone.contains(&key.as_str()));
        }
    }
    // The issue's example: a model with MLA loses every MLA component.
    let names = removed_component_names(&decontaminated("deepseek-ai/DeepSeek-V3"), &all);
    assert!(names.contains("mla_attention") && names.contains("mla_attention_absorbed"));
    assert!(!names.contains("pre_norm_block"));
    // And a dense model keeps the MoE components, which are not its kind (unless they nest
    // its removed dense FFN).
    let llama = decontaminated("meta-llama/Llama-3.1-8B");
    assert!(
        llama
            .library
            .contains_key("specs/components/library/moe_ffn_grouped.yaml")
    );
}

/// Stages the ablation workspace of `id` as the generate stage does and returns it with the
/// decontamination and the prompt.
fn stage(id: &str, tmp: &Path) -> (Workspace, Decontaminated, String, Vec<String>) {
    let truth = snapshot::load_snapshot(id).unwrap();
    let truth_path = tmp.join("truth");
    let meta = truth_dir::TruthMeta {
        model_id: id.into(),
        origin: "snapshot".into(),
        ..Default::default()
    };
    truth_dir::write_from_truth(&truth_path, &truth, &meta).unwrap();
    let mut settings = Settings::parse(DEFAULT_TOML, "default").unwrap().agent;
    settings.require_landlock = harch_sandbox::testing::require_landlock();
    settings.sandbox_user = "nobody".into();
    let run = AblationRun {
        tier: "weight".into(),
        guards: vec!["weight".into()],
        seed: 1,
    };
    let staged = generate::prepare(&StageRequest {
        model_id: id,
        truth_dir: &truth_path,
        spec_root: &project_root(),
        work: &tmp.join("work"),
        exclude_library_spec: true,
        settings: &settings,
        ablation: Some(&run),
        agent_bin: None,
        worker_exe: Some(env!("CARGO_BIN_EXE_harch-worker").into()),
    })
    .unwrap();
    let ws = staged.workspace().unwrap();
    let prompt = harch_prompts::render_generate(&harch_prompts::GenerateInput::new(
        id,
        &staged.truth,
        &staged.prompt_repo,
        &staged.spec_path(),
    ))
    .unwrap()
    .text;
    let repo = &staged.prompt_repo;
    assert!(
        repo.model_names().is_empty(),
        "{id}: {:?}",
        repo.model_names()
    );
    let shown = repo
        .component_names()
        .iter()
        .map(|s| s.to_string())
        .collect();
    (ws, staged.decontamination.unwrap(), prompt, shown)
}

#[tokio::test]
async fn nothing_removed_is_readable_from_the_sandbox_for_any_library_model() {
    if !harch_sandbox::testing::landlock_available() {
        return;
    }
    let all = all_specs();
    let root = project_root().canonicalize().unwrap();
    for id in snapshot::snapshot_ids() {
        let tmp = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let (ws, d, prompt, shown) = stage(id, tmp.path());
        let names = removed_component_names(&d, &all);
        assert!(
            shown.iter().all(|c| !names.contains(c)),
            "{id}: the prompt's library shows {shown:?}"
        );

        // Not in the workspace, not in the prompt.
        let specs_dir = ws.specs_dir();
        for r in &d.removed {
            let file = Path::new(&r.path).file_name().unwrap();
            for dir in ["components/library", "models", "examples"] {
                assert!(
                    !specs_dir.join(dir).join(file).exists(),
                    "{id}: {} staged",
                    r.path
                );
            }
        }
        // No removed component's definition (its top-level `component:` line; the DSL
        // reference's excerpts nest or annotate theirs).
        for n in &names {
            assert!(
                !prompt.contains(&format!("\ncomponent: {n}\n")),
                "{id}: {n} in the prompt"
            );
        }

        // The sandbox cannot read any removed file at the project's own paths, nor find a
        // removed component's definition anywhere it can read in its job dir; it can read
        // the generic building blocks and the truth (so the probe itself works).
        let mut script = String::from("set -u\n");
        for r in &d.removed {
            let abs = root.join(&r.path);
            script.push_str(&format!(
                "if cat '{}' >/dev/null 2>&1; then echo 'READ {}'; fi\n",
                abs.display(),
                r.path
            ));
        }
        for n in &names {
            script.push_str(&format!(
                "if grep -rqs '^component: {n}$' '{}' '{}'; then echo 'FOUND {n}'; fi\n",
                ws.job_dir().display(),
                ws.job_dir().parent().unwrap().display()
            ));
        }
        script.push_str(
            "ls specs/models specs/components/library >/dev/null 2>&1 || echo 'NO LISTING'\n",
        );
        script.push_str(&format!(
            "ls '{}' >/dev/null 2>&1 && echo 'LISTED PROJECT'\n",
            root.join("specs").display()
        ));
        script.push_str("cat truth/config.json >/dev/null && echo 'TRUTH OK'\n");
        for key in d.kept_components() {
            let file = Path::new(&key).file_name().unwrap().to_string_lossy();
            script.push_str(&format!(
                "cat specs/components/library/{file} >/dev/null && echo 'KEPT OK {file}'\n"
            ));
        }
        let mut cmd = ws.command("/bin/sh");
        cmd.args(["-c", &script]);
        let report = cmd
            .run(&RunOptions::new(
                &ws.logs_dir(),
                "probe",
                Duration::from_secs(60),
            ))
            .await
            .unwrap();
        let out = std::fs::read_to_string(&report.stdout_path).unwrap();
        assert!(report.landlock_enforced, "{id}: Landlock not enforced");
        assert!(!out.contains("READ "), "{id}: {out}");
        assert!(!out.contains("FOUND "), "{id}: {out}");
        assert!(!out.contains("LISTED PROJECT"), "{id}: {out}");
        assert!(!out.contains("NO LISTING"), "{id}: {out}");
        assert!(out.contains("TRUTH OK"), "{id}: {out}");
        assert_eq!(
            out.matches("KEPT OK").count(),
            d.kept_components().len(),
            "{id}: {out}"
        );
        assert!(
            !d.kept_components().is_empty(),
            "{id}: nothing generic stayed"
        );
        // A control: outside the sandbox the same project files are readable.
        assert!(d.removed.iter().all(|r| root.join(&r.path).is_file()));
    }
}

/// The bypass of an ablation's tier: an agent that reads its `validate` wrapper runs the worker
/// itself with its own environment (`HARCH_ROOT`, `HARCH_VALIDATE_GUARDS`) and flags. In the
/// sandbox the unsealed binary cannot be run at all, and the sealed copy runs the stage's tier
/// (`weight`) whatever it is told: with another environment and `--tier all`, copied into
/// TMPDIR, started through the dynamic loader. It runs nothing but `validate`.
#[tokio::test]
async fn the_tier_holds_whatever_environment_the_agent_sets() {
    if !harch_sandbox::testing::landlock_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (ws, _, _, _) = stage("meta-llama/Llama-3.1-8B", tmp.path());
    let spec = ws.specs_dir().join("models/llama.yaml");
    std::fs::write(&spec, "model: broken\n").unwrap();
    let unsealed = env!("CARGO_BIN_EXE_harch-worker");
    let sealed = tmp.path().join("work/sealed-bin/harch-worker");
    assert!(sealed.is_file());
    let every = harch_guards::tiers::GUARDS.join(",");
    let bypass = format!(
        "HARCH_ROOT='{root}' HARCH_VALIDATE_GUARDS='{every}' HARCH_VALIDATE_SPEC=/dev/null",
        root = ws.root().display(),
    );
    let script = format!(
        r#"set -u
{bypass} '{unsealed}' validate --json --truth truth >"$TMPDIR/unsealed.json" 2>&1
echo "unsealed rc=$?"
{bypass} '{sealed}' validate --json --tier all --truth truth >"$TMPDIR/sealed.json"
cp '{sealed}' "$TMPDIR/copy" && chmod 755 "$TMPDIR/copy"
{bypass} "$TMPDIR/copy" validate --json --guards '{every}' --truth truth >"$TMPDIR/copy.json"
for ld in /lib64/ld-linux-x86-64.so.2 /lib/ld-linux-aarch64.so.1; do
  if [ -e "$ld" ]; then {bypass} "$ld" '{sealed}' validate --json --tier all --truth truth >"$TMPDIR/loader.json"; fi
done
{bypass} '{sealed}' show llama >/dev/null 2>&1
echo "show rc=$?"
"#,
        sealed = sealed.display()
    );
    let mut cmd = ws.command("/bin/sh");
    cmd.args(["-c", &script]);
    let report = cmd
        .run(&RunOptions::new(
            &ws.logs_dir(),
            "bypass",
            Duration::from_secs(120),
        ))
        .await
        .unwrap();
    assert!(report.landlock_enforced);
    let out = std::fs::read_to_string(&report.stdout_path).unwrap()
        + &std::fs::read_to_string(&report.stderr_path).unwrap_or_default();
    let unsealed_rc: i32 = out
        .lines()
        .find_map(|l| l.strip_prefix("unsealed rc="))
        .unwrap()
        .parse()
        .unwrap();
    // 126: found but not executable (Landlock refused it).
    assert_eq!(unsealed_rc, 126, "{out}");
    assert!(out.contains("show rc=2"), "{out}");
    let mut seen = 0;
    for name in ["sealed.json", "copy.json", "loader.json"] {
        let Ok(text) = std::fs::read_to_string(ws.tmp().join(name)) else {
            continue;
        };
        seen += 1;
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}: {text}"));
        // The spec does not load, so the tier's guards are the ones not run.
        assert_eq!(v["valid"], false, "{name}: {text}");
        assert_eq!(
            v["not_run"],
            serde_json::json!(["weight"]),
            "{name}: {text}"
        );
        // The spec checked is the stage's, not one the environment named.
        assert_eq!(
            v["errors"][0]["location"]["file"], "specs/models/llama.yaml",
            "{name}: {text}"
        );
    }
    assert!(seen >= 2, "{out}");
    // A control: outside the sandbox the same bypass runs every guard.
    let o = std::process::Command::new(unsealed)
        .current_dir(ws.root())
        .env("HARCH_ROOT", ws.root())
        .env("HARCH_VALIDATE_SPEC", &spec)
        .args(["validate", "--json", "--truth", "truth"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["not_run"].as_array().map(Vec::len),
        Some(harch_guards::tiers::GUARDS.len()),
        "{v}"
    );
}
