//! Forward source for architectures native to transformers, found locally (the project never
//! commits third-party modeling code). Search order, keyed by config `model_type`:
//!
//! 1. the truth directory's own `source/` (read by `truth_dir::load_truth_dir`, not here);
//! 2. `$HARCH_TRANSFORMERS_SRC/models/<model_type>/`, else the checkout's
//!    `.cache/transformers/<version>/models/<model_type>/` for each pinned version in order, the
//!    first that has the model type (filled by `scripts/fetch-transformers-src`), the checkout
//!    being the one the running binary sits in (`<checkout>/target/...`), else the one it was
//!    built from, never the current directory;
//! 3. the `transformers` package of the local Python, if one is installed.
//!
//! Remote code (config `auto_map`) is not native: the Hub fetcher takes it from the model repo.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The transformers releases whose modeling files the project reads, in the order a model type
/// is looked up: 4.57.6 describes the 2025 architectures the library was verified against, 5.23.0
/// the 2026 ones (DeepSeek-V3.2/V4, Qwen3.5, Kimi-K2.5/K2.6, MiniMax-M3) that 4.57.6 lacks. A model
/// type takes the first release that has it, so adding a release never changes an existing one's
/// source. `scripts/fetch-transformers-src` fetches the same list (a test keeps them in step).
pub const TRANSFORMERS_VERSIONS: &[&str] = &["4.57.6", "5.23.0"];

pub const SRC_ENV: &str = "HARCH_TRANSFORMERS_SRC";

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceSet {
    /// File name → text (`modeling_llama.py`, `configuration_llama.py`).
    pub files: BTreeMap<String, String>,
    /// Where they came from, for truth.json.
    pub origin: String,
}

/// The config's `model_type` as a transformers package directory name.
pub fn model_type_dir(config: &serde_json::Value) -> Option<String> {
    let t = config.get("model_type")?.as_str()?;
    let dir = t.replace('-', "_");
    // A model_type is a Python identifier; anything else must not become a path.
    if dir.is_empty() || !dir.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    Some(dir)
}

/// True when the config points at remote code (`auto_map`), which only the repo can provide.
pub fn needs_remote_code(config: &serde_json::Value) -> bool {
    config.get("auto_map").is_some_and(|m| m.is_object())
}

/// Module files named by `auto_map` (`"modeling_deepseek.DeepseekV3ForCausalLM"` →
/// `modeling_deepseek.py`). References into other repos (`org/repo--module.Class`) are skipped.
/// A reference whose module is not a dotted Python name (`../../x.Model`, `.x.Model`) is
/// returned as an error naming it: it would become a path outside the repository.
pub fn auto_map_files(config: &serde_json::Value) -> Result<Vec<String>, BadReference> {
    let mut out: Vec<String> = Vec::new();
    let Some(map) = config.get("auto_map").and_then(|m| m.as_object()) else {
        return Ok(out);
    };
    let mut refs: Vec<&str> = Vec::new();
    for v in map.values() {
        match v {
            serde_json::Value::String(s) => refs.push(s),
            serde_json::Value::Array(a) => refs.extend(a.iter().filter_map(|x| x.as_str())),
            _ => {}
        }
    }
    for r in refs {
        if r.contains("--") {
            continue;
        }
        let bad = || BadReference {
            reference: r.to_string(),
        };
        let (module, _class) = r.rsplit_once('.').ok_or_else(bad)?;
        let python_name = |part: &str| {
            !part.is_empty()
                && !part.starts_with(|c: char| c.is_ascii_digit())
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if !module.split('.').all(python_name) {
            return Err(bad());
        }
        let file = format!("{}.py", module.replace('.', "/"));
        if !out.contains(&file) {
            out.push(file);
        }
    }
    out.sort();
    Ok(out)
}

/// An `auto_map` entry that names no module file inside the repository.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "auto_map names `{reference}`, which is not `module.Class` with a dotted Python module name inside the repository"
)]
pub struct BadReference {
    pub reference: String,
}

/// Finds the native modeling and configuration files for the config's `model_type`.
pub fn resolve_native(config: &serde_json::Value) -> Option<SourceSet> {
    let model_type = model_type_dir(config)?;
    for (root, origin) in source_roots() {
        if let Some(mut files) = read_model_dir(&root.join("models").join(&model_type)) {
            add_conversion_renames(&root, &model_type, &mut files);
            return Some(SourceSet { files, origin });
        }
    }
    let (root, version) = python_transformers()?;
    let files = read_model_dir(&root.join("models").join(&model_type))?;
    Some(SourceSet {
        files,
        origin: format!("transformers {version} (local Python)"),
    })
}

/// Where transformers trees are looked for, in order, with the origin each reports. The
/// binary's own location decides, never the current directory: a worker started anywhere (a
/// service, a job directory) finds the same source.
fn source_roots() -> Vec<(PathBuf, String)> {
    let mut roots: Vec<(PathBuf, String)> = Vec::new();
    if let Some(dir) = std::env::var_os(SRC_ENV).filter(|d| !d.is_empty()) {
        roots.push((PathBuf::from(dir), format!("${SRC_ENV}")));
    }
    let cached = |checkout: &Path, roots: &mut Vec<(PathBuf, String)>| {
        for version in TRANSFORMERS_VERSIONS {
            roots.push((
                checkout.join(".cache/transformers").join(version),
                format!("transformers {version} (cached wheel)"),
            ));
        }
    };
    // `<checkout>/target/<profile>/harch-worker` (or `.../deps/<test>`): the checkout it sits in.
    if let Ok(exe) = std::env::current_exe()
        && let Some(checkout) = exe.ancestors().skip(1).find(|d| is_checkout(d))
    {
        cached(checkout, &mut roots);
    }
    // The checkout it was built from, for a binary copied elsewhere.
    if let Some(built) = Path::new(env!("CARGO_MANIFEST_DIR")).parent()
        && is_checkout(built)
        && !roots.iter().any(|(r, _)| r.starts_with(built))
    {
        cached(built, &mut roots);
    }
    roots
}

fn is_checkout(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]"))
}

/// The places [`resolve_native`] looks, for messages.
pub fn search_description() -> String {
    let mut places: Vec<String> = source_roots()
        .iter()
        .map(|(root, _)| root.display().to_string())
        .collect();
    places.push("the local Python's transformers".into());
    places.join(", ")
}

/// Transformers 5 renames some checkpoints' tensors at load (`conversion_mapping.py`): the
/// model type's entry rides along with the sources, so the guards look modules up under the
/// names the modules have.
fn add_conversion_renames(root: &Path, model_type: &str, files: &mut BTreeMap<String, String>) {
    use harch_guards::conversion::{CONVERSION_FILE, model_entry};
    if let Ok(text) = std::fs::read_to_string(root.join(CONVERSION_FILE))
        && let Some(entry) = model_entry(&text, model_type)
    {
        files.insert(CONVERSION_FILE.to_string(), entry.to_string());
    }
}

fn read_model_dir(dir: &Path) -> Option<BTreeMap<String, String>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // Flax and TensorFlow ports are not the PyTorch forward the specs describe.
        let port = name.starts_with("modeling_flax_") || name.starts_with("modeling_tf_");
        let wanted = (name.starts_with("modeling_") || name.starts_with("configuration_"))
            && name.ends_with(".py")
            && !port;
        if wanted && let Ok(text) = std::fs::read_to_string(entry.path()) {
            files.insert(name, text);
        }
    }
    files
        .keys()
        .any(|k| k.starts_with("modeling_"))
        .then_some(files)
}

/// The installed transformers package directory and version, asked of `python3`.
fn python_transformers() -> Option<(PathBuf, String)> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import os, transformers; print(os.path.dirname(transformers.__file__)); print(transformers.__version__)",
        ])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let mut lines = text.lines();
    let dir = PathBuf::from(lines.next()?);
    let version = lines.next()?.to_string();
    Some((dir, version))
}

/// The job's truth: the truth dir, with native forward source when it has none.
pub fn load_truth(truth_dir: &Path) -> anyhow::Result<harch_guards::truth::Truth> {
    use anyhow::Context as _;
    let mut truth = crate::truth_dir::load_truth_dir(truth_dir)
        .with_context(|| format!("reading truth directory {}", truth_dir.display()))?;
    if truth.sources.is_empty()
        && let Some(set) = resolve_native(&truth.config)
    {
        truth.sources = set.files;
    }
    Ok(truth)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_map_names_module_files() {
        let config = serde_json::json!({"auto_map": {
            "AutoConfig": "configuration_deepseek.DeepseekV3Config",
            "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM",
            "AutoTokenizer": ["tokenization_x.Tok", null],
            "AutoModel": "other/repo--modeling_y.Y",
        }});
        assert!(needs_remote_code(&config));
        assert_eq!(
            auto_map_files(&config).unwrap(),
            [
                "configuration_deepseek.py",
                "modeling_deepseek.py",
                "tokenization_x.py"
            ]
        );
    }

    #[test]
    fn auto_map_references_outside_the_repo_are_errors() {
        for bad in [
            "../../x.Model",
            ".x.Model",
            "a..b.Model",
            "NoDot",
            "a/b.Model",
            "1x.Model",
        ] {
            let config = serde_json::json!({"auto_map": {"AutoModel": bad}});
            assert_eq!(
                auto_map_files(&config),
                Err(BadReference {
                    reference: bad.into()
                }),
                "{bad}"
            );
        }
        let nested = serde_json::json!({"auto_map": {"AutoModel": "pkg.modeling_x.X"}});
        assert_eq!(auto_map_files(&nested).unwrap(), ["pkg/modeling_x.py"]);
    }

    #[test]
    fn model_type_must_be_an_identifier() {
        assert_eq!(
            model_type_dir(&serde_json::json!({"model_type": "xlm-roberta"})).as_deref(),
            Some("xlm_roberta")
        );
        assert_eq!(
            model_type_dir(&serde_json::json!({"model_type": "../etc"})),
            None
        );
    }

    #[test]
    fn the_fetch_script_pins_the_same_releases() {
        let script = include_str!("../../scripts/fetch-transformers-src");
        let pinned = script
            .lines()
            .find_map(|l| l.strip_prefix("PINNED=("))
            .and_then(|l| l.strip_suffix(')'))
            .expect("scripts/fetch-transformers-src has a PINNED=(...) line");
        assert_eq!(
            pinned.split_whitespace().collect::<Vec<_>>(),
            TRANSFORMERS_VERSIONS
        );
    }

    #[test]
    fn reads_a_transformers_tree_from_the_env_dir() {
        let dir = tempfile::tempdir().unwrap();
        let models = dir.path().join("models/llama");
        std::fs::create_dir_all(&models).unwrap();
        std::fs::write(models.join("modeling_llama.py"), "class LlamaModel: ...").unwrap();
        std::fs::write(models.join("configuration_llama.py"), "x = 1").unwrap();
        std::fs::write(models.join("__init__.py"), "").unwrap();
        let files = read_model_dir(&models).unwrap();
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            ["configuration_llama.py", "modeling_llama.py"]
        );
        assert_eq!(read_model_dir(&dir.path().join("models/none")), None);
    }
}
