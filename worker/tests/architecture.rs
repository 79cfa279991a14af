//! The house's walls (docs/ARCHITECTURE.md): which harch crate may use which, which crates
//! may reach a network or a queue store, and no import circle between the files of a crate.
//! Read from the manifests, the lock file and the sources, as rust-analyzer's tidy tests do, so
//! a new arrow shows up here before it shows up in a review.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every workspace crate and the harch crates it may depend on (normal, build and dev
/// dependencies alike: a test links what its crate's tests name). Bottom first.
const LAYERS: &[(&str, &[&str])] = &[
    ("harch-files", &[]),
    ("harch-net", &[]),
    ("harch-engine", &[]),
    ("harch-guards", &["harch-engine"]),
    ("harch-review", &["harch-engine", "harch-guards"]),
    ("harch-analysis", &["harch-engine"]),
    (
        "harch-prompts",
        &["harch-engine", "harch-guards", "harch-review"],
    ),
    ("harch-sandbox", &["harch-files"]),
    ("harch-agents", &["harch-sandbox", "harch-net"]),
    ("harch-truth", &["harch-files", "harch-guards"]),
    (
        "harch-library",
        &[
            "harch-files",
            "harch-engine",
            "harch-guards",
            "harch-review",
            "harch-truth",
        ],
    ),
    (
        "harch-inspect",
        &[
            "harch-files",
            "harch-engine",
            "harch-guards",
            "harch-truth",
            "harch-library",
        ],
    ),
    (
        "harch-hub",
        &["harch-files", "harch-net", "harch-guards", "harch-truth"],
    ),
    ("harch-jobs", &["harch-files"]),
    ("harch-queue", &["harch-jobs"]),
    (
        "harch-publish",
        &[
            "harch-engine",
            "harch-guards",
            "harch-review",
            "harch-sandbox",
            "harch-truth",
            "harch-library",
            "harch-inspect",
            "harch-hub",
            "harch-jobs",
        ],
    ),
    (
        "harch-pipeline",
        &[
            "harch-files",
            "harch-net",
            "harch-engine",
            "harch-guards",
            "harch-review",
            "harch-prompts",
            "harch-agents",
            "harch-sandbox",
            "harch-truth",
            "harch-library",
            "harch-hub",
            "harch-jobs",
            "harch-queue",
            "harch-publish",
        ],
    ),
    (
        "harch-worker",
        &[
            "harch-files",
            "harch-net",
            "harch-engine",
            "harch-guards",
            "harch-review",
            "harch-analysis",
            "harch-prompts",
            "harch-agents",
            "harch-sandbox",
            "harch-truth",
            "harch-library",
            "harch-inspect",
            "harch-hub",
            "harch-jobs",
            "harch-queue",
            "harch-publish",
            "harch-pipeline",
        ],
    ),
];

/// Crates whose build and tests link no network client, queue store or git: the pure core and
/// the ground truth on disk.
const OFFLINE: &[&str] = &[
    "harch-files",
    "harch-net",
    "harch-engine",
    "harch-guards",
    "harch-review",
    "harch-analysis",
    "harch-prompts",
    "harch-truth",
    "harch-library",
    "harch-jobs",
];

const NETWORK_CRATES: &[&str] = &[
    "reqwest", "hyper", "octocrab", "git2", "sqlx", "apalis", "redis", "rustls", "openssl",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn toml_at(path: &Path) -> toml::Table {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Each member's package name, directory and harch dependencies of every kind.
fn members() -> Vec<(String, PathBuf, BTreeSet<String>)> {
    let ws = toml_at(&root().join("Cargo.toml"));
    let dirs = ws["workspace"]["members"]
        .as_array()
        .expect("workspace.members");
    dirs.iter()
        .map(|d| {
            let dir = root().join(d.as_str().expect("member is a path"));
            let manifest = toml_at(&dir.join("Cargo.toml"));
            let name = manifest["package"]["name"].as_str().unwrap().to_string();
            let mut deps = BTreeSet::new();
            for kind in ["dependencies", "dev-dependencies", "build-dependencies"] {
                if let Some(t) = manifest.get(kind).and_then(|v| v.as_table()) {
                    deps.extend(
                        t.keys()
                            .filter(|k| k.starts_with("harch-") && **k != name)
                            .cloned(),
                    );
                }
            }
            (name, dir, deps)
        })
        .collect()
}

#[test]
fn every_crate_depends_only_on_the_crates_below_it() {
    let layers: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut wrong = Vec::new();
    for (name, _, deps) in members() {
        let Some(allowed) = layers.get(name.as_str()) else {
            wrong.push(format!(
                "{name} is not in LAYERS (docs/ARCHITECTURE.md names every crate)"
            ));
            continue;
        };
        for d in deps.iter().filter(|d| !allowed.contains(&d.as_str())) {
            wrong.push(format!("{name} depends on {d}, which is not below it"));
        }
    }
    // LAYERS itself must run one way: a crate lists only crates listed before it.
    for (i, (name, allowed)) in LAYERS.iter().enumerate() {
        for a in *allowed {
            if !LAYERS[..i].iter().any(|(n, _)| n == a) {
                wrong.push(format!("LAYERS: {name} may use {a}, which is not below it"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// What the lock file says each package pulls in (normal, build and dev dependencies).
fn lock_graph() -> BTreeMap<String, BTreeSet<String>> {
    let lock = toml_at(&root().join("Cargo.lock"));
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in lock["package"].as_array().expect("[[package]]") {
        let name = p["name"].as_str().unwrap().to_string();
        let deps = p.get("dependencies").and_then(|d| d.as_array());
        let entry = graph.entry(name).or_default();
        for d in deps.into_iter().flatten() {
            // "name" or "name version" when two versions are locked.
            let d = d.as_str().unwrap();
            entry.insert(d.split(' ').next().unwrap().to_string());
        }
    }
    graph
}

#[test]
fn the_offline_crates_and_their_tests_link_no_network_client_store_or_git() {
    let graph = lock_graph();
    let mut wrong = Vec::new();
    for krate in OFFLINE {
        let mut seen = BTreeSet::new();
        let mut todo = vec![krate.to_string()];
        while let Some(n) = todo.pop() {
            if seen.insert(n.clone()) {
                todo.extend(graph.get(&n).into_iter().flatten().cloned());
            }
        }
        for bad in seen.iter().filter(|s| {
            NETWORK_CRATES
                .iter()
                .any(|n| *s == n || s.starts_with(&format!("{n}-")))
        }) {
            wrong.push(format!("{krate} pulls in {bad}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Crates of a second or third crypto stack, or of a C build on the critical path that one of
/// harch's own choices would bring back (docs/ARCHITECTURE.md, "TLS").
const SECOND_STACKS: &[&str] = &[
    "aws-lc-rs",
    "aws-lc-sys",
    "openssl",
    "openssl-sys",
    "native-tls",
    "libgit2-sys",
    "git2",
];

#[test]
fn one_crypto_stack_rustls_on_ring_and_no_libgit2() {
    let graph = lock_graph();
    let present: Vec<&&str> = SECOND_STACKS
        .iter()
        .filter(|c| graph.contains_key(**c))
        .collect();
    assert!(
        present.is_empty(),
        "the lock file holds {present:?}: rustls on ring is the one TLS provider, and git goes through the git command line"
    );
    assert!(graph.contains_key("ring"), "rustls's provider is ring");
}

/// The crates the lock file may hold in two versions, each for a reason outside harch's hands.
/// A new pair (a `cargo update` that splits a crate, a dependency on an old major) fails the
/// test below: either align the versions or name the new pair here with its reason.
const ALLOWED_TWICE: &[(&str, &str)] = &[
    (
        "base64",
        "reqwest 0.13.5 and hyper-util 0.1.21 moved to 0.23; sqlx-core 0.9 and wiremock stay on 0.22",
    ),
    (
        "getrandom",
        "ring 0.17 wants 0.2; rand 0.10, tempfile and uuid want 0.4",
    ),
    (
        "syn",
        "proc macros on syn 2 (tracing-attributes, sqlx-macros, zerocopy-derive) beside those on syn 3",
    ),
    (
        "windows-sys",
        "Windows only, never built here: ring wants 0.52, the rest 0.61",
    ),
];

#[test]
fn fewer_than_five_crates_are_locked_twice() {
    let lock = toml_at(&root().join("Cargo.lock"));
    let mut versions: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for p in lock["package"].as_array().expect("[[package]]") {
        versions
            .entry(p["name"].as_str().unwrap())
            .or_default()
            .insert(p["version"].as_str().unwrap());
    }
    let twice: BTreeMap<&str, &BTreeSet<&str>> = versions
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(n, v)| (*n, v))
        .collect();
    let allowed: BTreeSet<&str> = ALLOWED_TWICE.iter().map(|(n, _)| *n).collect();
    let unexplained: Vec<_> = twice
        .iter()
        .filter(|(n, _)| !allowed.contains(*n))
        .collect();
    assert!(
        unexplained.is_empty(),
        "locked in two versions without a reason in ALLOWED_TWICE: {unexplained:?}"
    );
    let stale: Vec<&&str> = allowed
        .iter()
        .filter(|n| !twice.contains_key(**n))
        .collect();
    assert!(
        stale.is_empty(),
        "ALLOWED_TWICE names {stale:?}, now locked once: drop them"
    );
    assert!(
        ALLOWED_TWICE.len() < 5,
        "issue 28: fewer than five crates twice"
    );
}

/// The module path of a source file: `src/a/b.rs` and `src/a/b/mod.rs` are `[a, b]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_string());
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The paths a file names through `crate::` and `super::` (outside comments and its
/// `#[cfg(test)]` module),
/// each as a module path; `use crate::{a, b::c}` gives `[a]` and `[b, c]`.
fn references(text: &str, module: &[String]) -> Vec<Vec<String>> {
    // Comments (doc links included) name paths without importing them.
    let code: String = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| format!("{l}\n"))
        .collect();
    let text = code.as_str();
    let ident = |s: &str| -> usize {
        s.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(s.len())
    };
    let mut out = Vec::new();
    for (start, anchor) in [("crate::", true), ("super::", false)] {
        let mut rest = text;
        while let Some(i) = rest.find(start) {
            let before = rest[..i].chars().last();
            rest = &rest[i..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                rest = &rest[start.len()..];
                continue;
            }
            let mut base: Vec<String> = if anchor {
                Vec::new()
            } else {
                // `super` of `a/b.rs` and of `a/b/mod.rs` is `a`.
                module[..module.len().saturating_sub(1)].to_vec()
            };
            rest = &rest[start.len()..];
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            let n = ident(rest);
            let path: Vec<String> = rest[..n]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            let mut prefix = base.clone();
            prefix.extend(path);
            if rest[n..].starts_with('{') {
                let close = rest[n..].find('}').map_or(rest.len(), |c| n + c);
                for item in rest[n + 1..close].split(',') {
                    let item = item.trim();
                    let m = ident(item);
                    let mut p = prefix.clone();
                    p.extend(
                        item[..m]
                            .split("::")
                            .filter(|s| !s.is_empty() && *s != "self")
                            .map(str::to_string),
                    );
                    out.push(p);
                }
            } else {
                out.push(prefix);
            }
        }
    }
    out
}

/// A cycle in `graph`, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            match state.get(m).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|s| s == m).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(m, graph, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if state.get(n).copied().unwrap_or(0) == 0
            && let Some(c) = visit(n, graph, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

/// The crates cut out of the worker: no file of one names (through `crate::` or `super::`) a
/// file that names it back, directly or around a circle, and no top-level module does.
const SPLIT: &[&str] = &[
    "truth", "library", "hub", "jobs", "queue", "publish", "pipeline", "worker",
];

#[test]
fn no_import_circle_between_the_files_or_modules_of_a_crate() {
    let mut wrong = Vec::new();
    for dir in SPLIT {
        let src = root().join(dir).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let modules: BTreeMap<Vec<String>, PathBuf> = files
            .iter()
            .map(|f| (module_of(&src, f), f.clone()))
            .collect();
        let mut file_graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut top_graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for f in &files {
            let me = module_of(&src, f);
            let text = std::fs::read_to_string(f).unwrap();
            for path in references(&text, &me) {
                // The longest prefix that is a file of this crate.
                let Some(target) = (0..=path.len())
                    .rev()
                    .map(|k| path[..k].to_vec())
                    .find(|p| modules.contains_key(p))
                else {
                    continue;
                };
                // A child naming its parent's items is how a module's parts share them.
                if target == me || me.starts_with(&target) {
                    continue;
                }
                file_graph
                    .entry(me.join("::"))
                    .or_default()
                    .insert(target.join("::"));
                if let (Some(a), Some(b)) = (me.first(), target.first())
                    && a != b
                {
                    top_graph.entry(a.clone()).or_default().insert(b.clone());
                }
            }
        }
        for (what, graph) in [("files", &file_graph), ("modules", &top_graph)] {
            if let Some(cycle) = find_cycle(graph) {
                wrong.push(format!("{dir}: {what} in a circle: {}", cycle.join(" → ")));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_worker_is_at_most_a_quarter_of_the_source() {
    let count = |dir: &Path| -> usize {
        let mut files = Vec::new();
        rust_files(dir, &mut files);
        files
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap().lines().count())
            .sum()
    };
    let total: usize = members()
        .iter()
        .map(|(_, d, _)| count(&d.join("src")))
        .sum();
    let worker = count(&root().join("worker/src"));
    assert!(
        worker * 4 <= total,
        "worker/src has {worker} of {total} source lines, more than a quarter: move what is not the command line into the crate that owns it"
    );
}

/// A crate whose integration tests are one binary (`autotests = false`, `tests/it.rs`) builds only
/// the files `it.rs` declares: a file added beside them and not declared would never run.
#[test]
fn every_test_file_of_a_one_binary_crate_is_declared() {
    let mut missing = Vec::new();
    for (name, dir, _) in members() {
        let manifest = toml_at(&dir.join("Cargo.toml"));
        if manifest["package"]
            .get("autotests")
            .and_then(|v| v.as_bool())
            != Some(false)
        {
            continue;
        }
        let tests = dir.join("tests");
        let root = std::fs::read_to_string(tests.join("it.rs"))
            .unwrap_or_else(|e| panic!("{name}: autotests = false but no tests/it.rs: {e}"));
        for entry in std::fs::read_dir(&tests).expect("tests/") {
            let file = entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned();
            if file.ends_with(".rs")
                && file != "it.rs"
                && !root.contains(&format!("#[path = \"{file}\"]"))
            {
                missing.push(format!("{name}: tests/{file}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not declared in their crate's tests/it.rs (add `#[path = \"FILE.rs\"] mod FILE;`):\n{}",
        missing.join("\n")
    );
}
