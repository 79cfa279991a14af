//! Building the agent's workspace for one job: the job's truth (as fetched, plus forward source
//! and a range-compressed tensor list when the truth dir lacks them), the spec library's shared
//! parts and components, the other library model specs as read-only examples (the target's own
//! spec left out when the job asks), and a `validate` on PATH that is this very binary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use harch_engine::Repo;
use harch_guards::truth::{Truth, ranges};
use harch_sandbox::{StageSpec, StagedFile, ValidateCommand, Workspace};

use super::sealed_validate::{self, SealedValidate};
use crate::ablation::decontaminate::{self, Decontaminated};
use harch_jobs::config::AgentSettings;
use harch_jobs::record::AblationRun;
use harch_truth::truth_dir;

/// Where an ablation's sealed `validate` is written, relative to the stage's work dir.
pub const SEALED_DIR: &str = "sealed-bin";

/// Where example model specs are staged, relative to `specs/` (not a path the spec loader reads).
pub const EXAMPLES_DIR: &str = "examples";

/// Everything the generate stage prepares once per stage run: the truth it validates with, the
/// library, the prompt's view of it, and what to stage into the workspace before every run.
pub struct Staged {
    /// The job's truth, read from the fetch stage's artifacts before any agent runs. The worker
    /// validates with this copy, never with the one staged into the workspace.
    pub truth: Truth,
    /// The shared spec library (arch, quant, components), for the worker's own validation.
    pub library: BTreeMap<String, String>,
    /// The library as the prompt shows it: shared parts plus example model specs.
    pub prompt_repo: Repo,
    /// File name of the spec the agent writes under `specs/models/`.
    pub spec_file: String,
    /// The library spec hidden from the agent (`specs/models/llama.yaml`), when one was.
    pub excluded: Option<String>,
    /// An ablation run's decontamination: what the workspace and prompt leave out.
    pub decontamination: Option<Decontaminated>,
    sandbox_dir: PathBuf,
    spec: StageSpec,
}

impl Staged {
    pub fn spec_path(&self) -> String {
        format!("specs/models/{}", self.spec_file)
    }

    /// Builds the workspace, or rebuilds it for the next run: read-only parts staged afresh
    /// (whatever a run did to them is undone), the agent's own files kept, and anything a dead
    /// worker left running in it killed first.
    pub fn workspace(&self) -> anyhow::Result<Workspace> {
        Workspace::create(&self.sandbox_dir, &self.spec)
            .with_context(|| format!("staging the workspace in {}", self.sandbox_dir.display()))
    }

    /// Stages the directory `src` read-only at `specs/<dest>` (the spec under review).
    pub fn add_read_only(&mut self, dest: &str, src: PathBuf) {
        self.spec.support_dirs.push((PathBuf::from(dest), src));
    }

    /// Lets the agent write `dir`, relative to the workspace root (a review's `review/`).
    pub fn add_writable(&mut self, dir: &str) {
        self.spec.writable_dirs.push(PathBuf::from(dir));
    }

    /// Starts the writable area with these spec files (keyed `specs/models/…`,
    /// `specs/components/drafts/…`): the spec a fix agent edits.
    pub fn seed(&mut self, files: &BTreeMap<String, String>) {
        for (key, text) in files {
            let rel = key.strip_prefix("specs/").unwrap_or(key);
            self.spec
                .seed_files
                .push(StagedFile::bytes(rel, text.clone()));
        }
    }
}

pub struct StageRequest<'a> {
    pub model_id: &'a str,
    /// The fetch stage's truth dir.
    pub truth_dir: &'a Path,
    /// The repository holding `specs/`.
    pub spec_root: &'a Path,
    /// Scratch dir of this stage: the workspace lives in `<work>/sandbox`.
    pub work: &'a Path,
    pub exclude_library_spec: bool,
    pub settings: &'a AgentSettings,
    /// An ablation run: decontaminated library, no examples, the tier's guards in `validate`,
    /// reads confined to the workspace, the system and the agent's own installation.
    pub ablation: Option<&'a AblationRun>,
    /// The agent's executable (for an ablation's read roots); `None` for in-process backends.
    pub agent_bin: Option<PathBuf>,
    /// The harch-worker binary an ablation's `validate` runs a sealed copy of; `None`: this
    /// process's own.
    pub worker_exe: Option<PathBuf>,
}

pub use harch_truth::source::load_truth;

/// The spec's file name: the config's `model_type` (as the library names its specs), else the
/// model id's name part.
pub fn spec_file_name(model_id: &str, config: &serde_json::Value) -> String {
    let stem = harch_truth::source::model_type_dir(config).unwrap_or_else(|| {
        model_id
            .rsplit('/')
            .next()
            .unwrap_or(model_id)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect()
    });
    format!("{stem}.yaml")
}

/// The spec library as an agent sees it: the shared parts, and the library's model specs as
/// examples, without the one serving `truth`'s architecture when `exclude_own` is set.
pub struct AgentLibrary {
    pub library: BTreeMap<String, String>,
    pub examples: BTreeMap<String, String>,
    pub prompt_repo: Repo,
    pub excluded: Option<String>,
}

pub fn agent_library(
    spec_root: &Path,
    truth: &Truth,
    exclude_own: bool,
) -> anyhow::Result<AgentLibrary> {
    let all = harch_library::specs::read_spec_files(spec_root)?;
    let library = harch_library::candidate::library_files(spec_root)?;
    let full_repo = Repo::from_files(all.clone());
    let own = harch_library::subject::library_model(&full_repo, &truth.config)
        .and_then(|m| full_repo.model_file(m))
        .map(str::to_string);
    let excluded = own.filter(|_| exclude_own);
    let examples: BTreeMap<String, String> = all
        .into_iter()
        .filter(|(k, _)| k.starts_with("specs/models/") && Some(k) != excluded.as_ref())
        .collect();
    let mut prompt_files = library.clone();
    prompt_files.extend(examples.clone());
    Ok(AgentLibrary {
        prompt_repo: Repo::from_files(prompt_files),
        library,
        examples,
        excluded,
    })
}

/// Prepares the stage: reads the truth and the library, writes the examples and the `validate`
/// wrapper. The workspace itself is built by [`Staged::workspace`].
pub fn prepare(req: &StageRequest<'_>) -> anyhow::Result<Staged> {
    let truth = load_truth(req.truth_dir)?;
    let (
        AgentLibrary {
            library,
            examples,
            prompt_repo,
            excluded,
        },
        decontamination,
    ) = match req.ablation {
        None => (
            agent_library(req.spec_root, &truth, req.exclude_library_spec)?,
            None,
        ),
        Some(_) => {
            let all = harch_library::specs::read_spec_files(req.spec_root)?;
            let d = decontaminate::decontaminate(
                &all,
                &harch_library::subject::architectures(&truth.config),
            )?;
            let lib = AgentLibrary {
                library: d.library.clone(),
                examples: BTreeMap::new(),
                prompt_repo: Repo::from_files(d.library.clone()),
                excluded: d.target.clone(),
            };
            (lib, Some(d))
        }
    };

    std::fs::create_dir_all(req.work)
        .with_context(|| format!("creating {}", req.work.display()))?;
    let work = req
        .work
        .canonicalize()
        .with_context(|| format!("resolving {}", req.work.display()))?;
    let examples_src = work.join("examples-src");
    let _ = std::fs::remove_dir_all(&examples_src);
    std::fs::create_dir_all(&examples_src)?;
    for (key, text) in &examples {
        let name = key.rsplit('/').next().unwrap_or(key);
        std::fs::write(examples_src.join(name), text)?;
    }

    let sandbox_dir = work.join("sandbox");
    let spec_file = spec_file_name(req.model_id, &truth.config);
    let worker_exe = match &req.worker_exe {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("locating the harch-worker binary")?,
    };
    let workspace = sandbox_dir.join("workspace");
    let spec_path = workspace.join("specs/models").join(&spec_file);
    let validate_bin = match req.ablation {
        None => write_validate_wrapper(&work, &workspace, &spec_path, &worker_exe)?,
        Some(a) => sealed_validate::write(
            &work.join(SEALED_DIR),
            &worker_exe,
            &SealedValidate {
                root: workspace.clone(),
                spec: spec_path.clone(),
                guards: a.guards.join(","),
            },
        )?,
    };
    let run_as = sandbox_user(&req.settings.sandbox_user)?;
    if let Some((uid, _)) = run_as {
        check_traversable(&sandbox_dir, uid)?;
    }
    let mut spec = StageSpec {
        truth_files: truth_files(req.truth_dir, &truth)?,
        validate: Some(ValidateCommand {
            worker_bin: validate_bin,
            args: vec!["--truth".into(), "{truth}".into()],
        }),
        run_as,
        ..StageSpec::default()
    }
    .with_spec_repo(&req.spec_root.join("specs"));
    spec.support_dirs
        .push((PathBuf::from(EXAMPLES_DIR), examples_src.clone()));
    spec.fs_policy.require_landlock = req.settings.require_landlock;
    if let Some(d) = &decontamination {
        let library_src = work.join("library-src");
        let _ = std::fs::remove_dir_all(&library_src);
        std::fs::create_dir_all(&library_src)?;
        for key in d.kept_components() {
            let name = key.rsplit('/').next().unwrap_or(&key);
            std::fs::write(library_src.join(name), &d.library[&key])?;
        }
        spec.library_components_dir = Some(library_src);
        spec.fs_policy.read_roots = ablation_read_roots(
            &work,
            req.agent_bin.as_deref(),
            &req.spec_root.join("specs"),
            &worker_exe,
        )?;
    }
    Ok(Staged {
        truth,
        library,
        prompt_repo,
        spec_file,
        excluded,
        decontamination,
        sandbox_dir,
        spec,
    })
}

/// Where an ablation's agent may read: the system's own trees, the job's work dir (workspace
/// and the sealed `validate`) and the agent's installation (the parent of its `bin/`).
/// Refused when one of them holds the project's spec library, which the decontamination must
/// keep out of reach, or the unsealed worker binary, which would run every guard for an agent
/// that sets its own environment.
fn ablation_read_roots(
    work: &Path,
    agent_bin: Option<&Path>,
    specs: &Path,
    worker_exe: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    const SYSTEM: &[&str] = &[
        "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/sys",
        "/dev", "/run", "/nix", "/snap",
    ];
    let mut roots: Vec<PathBuf> = SYSTEM
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect();
    roots.push(work.to_path_buf());
    if let Some(bin) = agent_bin.and_then(resolve_on_path) {
        let dir = bin.parent().map(Path::to_path_buf).unwrap_or_default();
        let prefix = match dir.file_name() {
            Some(n) if n == "bin" => dir.parent().map(Path::to_path_buf).unwrap_or(dir),
            _ => dir,
        };
        roots.push(prefix);
    }
    let specs = specs.canonicalize().unwrap_or_else(|_| specs.to_path_buf());
    let exe = worker_exe
        .canonicalize()
        .unwrap_or_else(|_| worker_exe.to_path_buf());
    for r in &roots {
        let r = r.canonicalize().unwrap_or_else(|_| r.clone());
        for (what, path) in [
            ("read the spec library", &specs),
            ("run the unsealed harch-worker (every guard)", &exe),
        ] {
            if path.starts_with(&r) {
                bail!(
                    "an ablation's agent could {what}: {} is beneath the read root {}; install harch (or the agent) elsewhere",
                    path.display(),
                    r.display()
                );
            }
        }
    }
    Ok(roots)
}

/// `bin` as given when it names a path, else the first match on PATH.
fn resolve_on_path(bin: &Path) -> Option<PathBuf> {
    if bin.components().count() > 1 {
        return Some(bin.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(bin))
            .find(|p| p.is_file())
    })
}

/// Every file of the truth dir as fetched, plus the forward source and `inventory.txt` when the
/// dir lacks them (validate reads headers first; the list is for the agent to read).
fn truth_files(dir: &Path, truth: &Truth) -> anyhow::Result<Vec<StagedFile>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let path = e?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.is_file() {
                let rel = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
                out.push(StagedFile::copy(rel, path));
            }
        }
    }
    let has = |rel: &str| out.iter().any(|f| f.dest == Path::new(rel));
    let mut extra = Vec::new();
    if !has(truth_dir::INVENTORY) {
        extra.push(StagedFile::bytes(
            truth_dir::INVENTORY,
            ranges::compress(truth.inventory.iter()),
        ));
    }
    for (name, text) in &truth.sources {
        let rel = format!("{}/{name}", truth_dir::SOURCE_DIR);
        if !has(&rel) {
            extra.push(StagedFile::bytes(rel, text.clone()));
        }
    }
    out.extend(extra);
    Ok(out)
}

/// `validate` runs this binary with the workspace as its spec root, whatever directory the agent
/// calls it from (the sandbox clears the environment, so the wrapper sets it). Bare `validate`
/// checks the job's spec; `validate specs/models/<name>.yaml`, the path the prompt names, checks
/// the file named. An ablation's `validate` is a sealed copy instead (`sealed_validate`): its
/// tier must hold whatever environment the agent gives it.
fn write_validate_wrapper(
    work: &Path,
    workspace: &Path,
    spec: &Path,
    exe: &Path,
) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let quote = |p: &Path| format!("'{}'", p.to_string_lossy().replace('\'', r"'\''"));
    let script = format!(
        "#!/bin/sh\n# harch-worker with this job's workspace as the spec repository.\nHARCH_ROOT={} HARCH_VALIDATE_SPEC={} exec {} \"$@\"\n",
        quote(workspace),
        quote(spec),
        quote(exe)
    );
    let path = work.join("harch-worker-in-workspace");
    harch_jobs::store::write_atomic(&path, script.as_bytes())?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o555))?;
    Ok(path)
}

/// The (uid, gid) agents run as: `user` when the worker is root, nobody else.
fn sandbox_user(user: &str) -> anyhow::Result<Option<(u32, u32)>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || user.trim().is_empty() {
        return Ok(None);
    }
    let name = std::ffi::CString::new(user.trim())?;
    match lookup_user(&name)? {
        Some(ids) => Ok(Some(ids)),
        None => bail!("agent.sandbox_user `{user}` does not exist on this machine"),
    }
}

/// The (uid, gid) of `name` in the passwd database, through the reentrant `getpwnam_r`: jobs
/// stage on many threads at once, and `getpwnam` hands every caller the same static record.
fn lookup_user(name: &std::ffi::CStr) -> anyhow::Result<Option<(u32, u32)>> {
    // SAFETY: sysconf has no preconditions.
    let hint = unsafe { libc::sysconf(libc::_SC_GETPW_R_SIZE_MAX) };
    let mut size = usize::try_from(hint)
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or(1024);
    loop {
        let mut buf: Vec<libc::c_char> = vec![0; size];
        // SAFETY: passwd is plain data; getpwnam_r fills it (its strings point into `buf`).
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call and `buf.len()` is its buffer's size; only
        // the numeric fields are read, before `buf` is dropped.
        let rc = unsafe {
            libc::getpwnam_r(
                name.as_ptr(),
                &mut pwd,
                buf.as_mut_ptr(),
                buf.len(),
                &mut found,
            )
        };
        match rc {
            0 if found.is_null() => return Ok(None),
            0 => return Ok(Some((pwd.pw_uid, pwd.pw_gid))),
            libc::ERANGE if size < 1 << 20 => size *= 2,
            e => bail!(
                "cannot look up user {name:?}: {}",
                std::io::Error::from_raw_os_error(e)
            ),
        }
    }
}

/// The sandbox user must be able to reach its workspace: every existing ancestor needs o+x.
fn check_traversable(dir: &Path, uid: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let abs = std::path::absolute(dir)?;
    for a in abs.ancestors().skip(1) {
        let Ok(m) = std::fs::metadata(a) else {
            continue;
        };
        if m.uid() != uid && m.mode() & 0o001 == 0 {
            bail!(
                "the sandbox user (uid {uid}) cannot reach {}: {} is not traversable by others (chmod o+x, or put worker.data_dir elsewhere)",
                dir.display(),
                a.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_looked_up_reentrantly() {
        let root = std::ffi::CString::new("root").unwrap();
        assert_eq!(lookup_user(&root).unwrap(), Some((0, 0)));
        let none = std::ffi::CString::new("no-such-user-harch").unwrap();
        assert_eq!(lookup_user(&none).unwrap(), None);
    }

    #[test]
    fn spec_files_are_named_by_model_type_else_by_the_model_name() {
        let cfg = serde_json::json!({"model_type": "deepseek_v3"});
        assert_eq!(
            spec_file_name("deepseek-ai/DeepSeek-V3", &cfg),
            "deepseek_v3.yaml"
        );
        let odd = serde_json::json!({"model_type": "../x"});
        assert_eq!(spec_file_name("Org/My-Model.v2", &odd), "my_model_v2.yaml");
    }
}
