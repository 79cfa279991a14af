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
/// A composite config's sub-configs (`text_config.auto_map`: Kimi-K2.5/K2.6's DeepSeek text
/// model) name their own module files too.
pub fn auto_map_files(config: &serde_json::Value) -> Result<Vec<String>, BadReference> {
    let mut out: Vec<String> = Vec::new();
    let mut maps: Vec<&serde_json::Map<String, serde_json::Value>> = Vec::new();
    maps.extend(config.get("auto_map").and_then(|m| m.as_object()));
    for sub in config.as_object().into_iter().flat_map(|o| o.values()) {
        maps.extend(sub.get("auto_map").and_then(|m| m.as_object()));
    }
    let mut refs: Vec<&str> = Vec::new();
    for v in maps.iter().flat_map(|m| m.values()) {
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

/// Finds the native modeling and configuration files for the config's `model_type`, with those
/// of the models its sub-configs build (see [`sub_model_types`]) from the same release.
pub fn resolve_native(config: &serde_json::Value) -> Option<SourceSet> {
    let model_type = model_type_dir(config)?;
    for (root, origin) in source_roots() {
        if let Some(mut files) = read_model_dir(&root.join("models").join(&model_type)) {
            add_conversion_renames(&root, &model_type, &mut files);
            return Some(SourceSet {
                files: with_sub_models(&root, config, files),
                origin,
            });
        }
    }
    let (root, version) = python_transformers()?;
    let files = read_model_dir(&root.join("models").join(&model_type))?;
    Some(SourceSet {
        files: with_sub_models(&root, config, files),
        origin: format!("transformers {version} (local Python)"),
    })
}

/// `files` plus the modeling files of every sub-model type found in `root`; a file the parent
/// already has is kept as it is.
fn with_sub_models(
    root: &Path,
    config: &serde_json::Value,
    mut files: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    for sub in sub_model_types(config, &files, |t| root.join("models").join(t).is_dir()) {
        for (name, text) in read_model_dir(&root.join("models").join(&sub)).unwrap_or_default() {
            files.entry(name).or_insert(text);
        }
    }
    files
}

/// The model types a composite config's sub-configs (`text_config`, `vision_config`, …) build
/// (`AutoModel.from_config(config.text_config)`), other than the config's own, each as a
/// package directory name. A sub-config's `model_type` is taken as written when `exists` says
/// the release has it; otherwise the parent's configuration code decides, as transformers does
/// at load: a statement that rewrites that model type (`== "kimi_k2"` … `["model_type"] =
/// "deepseek_v3"`), else the sub-config's declared default (`"text_config":
/// SubConfigSpec(..., model_type="deepseek_v3")`).
pub fn sub_model_types(
    config: &serde_json::Value,
    parent_files: &BTreeMap<String, String>,
    exists: impl Fn(&str) -> bool,
) -> Vec<String> {
    let own = model_type_dir(config);
    let configuration: Vec<&str> = parent_files
        .iter()
        .filter(|(name, _)| name.starts_with("configuration_"))
        .map(|(_, text)| text.as_str())
        .collect();
    let mut out: Vec<String> = Vec::new();
    let Some(map) = config.as_object() else {
        return out;
    };
    for (key, sub) in map {
        let Some(written) = sub.is_object().then(|| model_type_dir(sub)).flatten() else {
            continue;
        };
        let chosen = if exists(&written) {
            Some(written.clone())
        } else {
            configuration.iter().find_map(|text| {
                rewritten_model_type(text, &written).or_else(|| declared_sub_type(text, key))
            })
        };
        if let Some(t) =
            chosen.and_then(|t| model_type_dir(&serde_json::json!({ "model_type": t })))
            && Some(&t) != own.as_ref()
            && exists(&t)
            && !out.contains(&t)
        {
            out.push(t);
        }
    }
    out
}

/// The model type a configuration's load-time rewrite gives `from`: a line comparing with
/// `"from"` and, within the next few lines, an assignment `["model_type"] = "to"`.
fn rewritten_model_type(text: &str, from: &str) -> Option<String> {
    let quoted = [format!("== \"{from}\""), format!("== '{from}'")];
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if !quoted.iter().any(|q| line.contains(q.as_str())) {
            continue;
        }
        for next in lines.iter().skip(i).take(4) {
            for key in ["[\"model_type\"]", "['model_type']"] {
                if let Some(rest) = next.split_once(key).map(|(_, r)| r.trim_start())
                    && let Some(value) = rest.strip_prefix('=').map(str::trim_start)
                {
                    return first_string_literal(value);
                }
            }
        }
    }
    None
}

/// The default model type a configuration declares for sub-config `key`:
/// `"key": SubConfigSpec(config_class=AutoConfig, model_type="deepseek_v3")`.
fn declared_sub_type(text: &str, key: &str) -> Option<String> {
    for quoted in [format!("\"{key}\""), format!("'{key}'")] {
        for (at, _) in text.match_indices(quoted.as_str()) {
            let rest = text[at + quoted.len()..].trim_start();
            let Some(rest) = rest.strip_prefix(':').map(str::trim_start) else {
                continue;
            };
            let Some(args) = rest.strip_prefix("SubConfigSpec(") else {
                continue;
            };
            let args = &args[..args.find(')').unwrap_or(args.len())];
            if let Some((_, value)) = args.split_once("model_type") {
                let value = value.trim_start().strip_prefix('=')?.trim_start();
                return first_string_literal(value);
            }
        }
    }
    None
}

/// The text of a string literal at the start of `s` (`"x"` or `'x'`).
fn first_string_literal(s: &str) -> Option<String> {
    let quote = s.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let body = &s[1..];
    let end = body.find(quote)?;
    Some(body[..end].to_string())
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
        let composite = serde_json::json!({
            "auto_map": {"AutoModel": "modeling_kimi_k25.KimiK25ForConditionalGeneration"},
            "text_config": {"auto_map": {"AutoModel": "modeling_deepseek.DeepseekV3Model"}},
        });
        assert_eq!(
            auto_map_files(&composite).unwrap(),
            ["modeling_deepseek.py", "modeling_kimi_k25.py"]
        );
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

    /// Kimi-K2.5/K2.6's configuration (transformers 5.23.0), reduced to the lines that decide.
    const KIMI_CONFIGURATION: &str = r#"
class Kimi_K25Config(PreTrainedConfig):
    model_type = "kimi_k25"
    sub_configs_defaults = {
        "text_config": SubConfigSpec(config_class=AutoConfig, model_type="deepseek_v3"),
        "vision_config": Kimi_K25VisionConfig,
    }

    def __post_init__(self, **kwargs):
        if isinstance(self.text_config, dict) and self.text_config.get("model_type", "deepseek_v3") == "kimi_k2":
            self.text_config["model_type"] = "deepseek_v3"
"#;

    #[test]
    fn a_sub_config_builds_the_model_type_the_configuration_code_gives_it() {
        let config = serde_json::json!({
            "model_type": "kimi_k25",
            "text_config": {"model_type": "kimi_k2"},
            "vision_config": {"hidden_size": 1152},
        });
        let files = BTreeMap::from([(
            "configuration_kimi_k25.py".to_string(),
            KIMI_CONFIGURATION.to_string(),
        )]);
        let present = ["kimi_k25", "deepseek_v3", "deepseek_v2", "qwen2"];
        let exists = |t: &str| present.contains(&t);
        assert_eq!(sub_model_types(&config, &files, exists), ["deepseek_v3"]);
        // The declared default decides when no statement rewrites the written type.
        let only_default = KIMI_CONFIGURATION.replace("== \"kimi_k2\"", "== \"other\"");
        let files2 = BTreeMap::from([("configuration_kimi_k25.py".to_string(), only_default)]);
        assert_eq!(sub_model_types(&config, &files2, exists), ["deepseek_v3"]);
        // A written type the release has is taken as written; the config's own is no sub-model.
        let direct = serde_json::json!({
            "model_type": "kimi_k25",
            "text_config": {"model_type": "qwen2"},
            "vision_config": {"model_type": "kimi_k25"},
        });
        assert_eq!(sub_model_types(&direct, &files, exists), ["qwen2"]);
        // Nothing to follow: no configuration code, or a type that would be a path.
        assert!(sub_model_types(&config, &BTreeMap::new(), exists).is_empty());
        let hostile =
            KIMI_CONFIGURATION.replace("model_type=\"deepseek_v3\"", "model_type=\"../x\"");
        let hostile = hostile.replace("] = \"deepseek_v3\"", "] = \"../x\"");
        let files3 = BTreeMap::from([("configuration_kimi_k25.py".to_string(), hostile)]);
        assert!(sub_model_types(&config, &files3, |t| t != "kimi_k2").is_empty());
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
