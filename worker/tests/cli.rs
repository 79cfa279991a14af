//! The command line as a newcomer meets it (issue 13): one exit-code table, one stdout writer
//! that ends quietly on a closed pipe, JSON for every outcome under `--json`, quiet logs, help
//! with examples. Help and error texts are pinned by insta snapshots in `tests/snapshots/`;
//! after a deliberate change, rerun with `INSTA_UPDATE=always` and review the diff.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_harch-worker");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The binary in `dir` (a fresh directory: no queue.toml, no .harch/), with no colour or log
/// settings inherited from the caller.
fn cmd(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.current_dir(dir)
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .env_remove("HARCH_CONFIG")
        .env_remove("HARCH_QUEUE_URL")
        .env_remove("HARCH_DATA_DIR")
        // The per-user data dir of these runs is theirs: never the real user's.
        .env("XDG_DATA_HOME", dir.join(".xdg-data"))
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .env("HARCH_CACHE_DIR", dir.join(".hub-cache"))
        // Some runs are in the repository itself: keep nothing there.
        .env("HARCH_INVENTORY_CACHE", "off");
    c
}

fn run_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = cmd(dir, args).output().unwrap();
    split(out)
}

fn split(out: Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Runs a command whose stdout is a pipe nobody reads any more (`cmd | (exec 0<&-; …)`).
fn with_closed_stdout(dir: &Path, args: &[&str]) -> (i32, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = cmd(dir, args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn every_command_ends_quietly_when_stdout_closes() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let truth = d.join("truth");
    let truth_s = truth.to_str().unwrap();
    let snap = d.join("s.json.gz");
    // The commands the issue saw panic (exit 101), and the printing ones.
    let cases: Vec<Vec<&str>> = vec![
        vec![
            "enqueue",
            "openai/gpt-oss-20b",
            "--kind",
            "revalidate",
            "--offline",
        ],
        vec!["fetch", "Qwen/Qwen3-8B", "--offline", "--out", truth_s],
        vec![
            "fetch",
            "Qwen/Qwen3-8B",
            "--offline",
            "--json",
            "--out",
            truth_s,
        ],
        vec!["snapshot", truth_s, "--out", snap.to_str().unwrap()],
        vec!["revalidate", "--offline", "--models", "openai/gpt-oss-20b"],
        vec!["bench-queue", "--jobs", "3", "--backends", "sqlite"],
        vec!["status"],
        vec!["ops"],
        vec!["show", "Qwen/Qwen3-8B", "--json"],
        vec!["validate", "Qwen/Qwen3-8B"],
    ];
    for args in cases {
        let (code, err) = with_closed_stdout(d, &args);
        assert_eq!(code, 141, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.trim().is_empty(), "{args:?} is not quiet: {err}");
    }
    // The side effects happened before the answer could not be printed.
    assert!(truth.join("truth.json").is_file());
    assert!(snap.is_file());
}

#[test]
fn usage_errors_exit_two_and_are_json_with_json() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let cases: [&[&str]; 6] = [
        &["validate", "--json"],
        &["show", "Qwen/Qwen3-8B", "--json", "--no-such-flag"],
        &["validate", "Qwen/Qwen3-8B", "--json", "--guards", "wieght"],
        &["fetch", "a/b/c", "--json", "--offline"],
        &["explain", "Qwen/Qwen3-8B", "no_such_quantity", "--json"],
        &["status", "--json", "no-such-job"],
    ];
    for args in cases {
        let (code, out, err) = run_in(d, args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        let v = json(&out);
        assert_eq!(v["exit_code"], 2, "{args:?}: {v}");
        assert_eq!(v["kind"], "usage", "{args:?}: {v}");
        assert!(
            v["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{args:?}: {v}"
        );
    }
    // Without --json the same errors are text on stderr, and stdout stays empty.
    let (code, out, err) = run_in(d, &["fetch", "a/b/c", "--offline"]);
    assert_eq!(code, 2);
    assert!(out.is_empty() && err.starts_with("error: "), "{out}{err}");
    insta::assert_snapshot!("fetch_bad_model_id", err);
    let (code, _, err) = run_in(d, &["validate"]);
    assert_eq!(code, 2);
    insta::assert_snapshot!("validate_missing_spec", err);
}

#[test]
fn json_outputs_are_json_on_success_and_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (code, out, _) = run_in(d, &["show", "Qwen/Qwen3-8B", "--json"]);
    assert_eq!(code, 0);
    assert!(json(&out)["params_total"].as_i64().unwrap() > 0);
    let (code, out, _) = run_in(d, &["validate", "Qwen/Qwen3-8B", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["valid"], true);
    let (code, out, _) = run_in(d, &["status", "--json"]);
    assert_eq!(code, 0);
    assert!(json(&out).as_array().unwrap().is_empty());
    // A spec that does not load: exit 1, and still JSON.
    let bad = d.join("bad.yaml");
    std::fs::write(&bad, "model: [unclosed\n").unwrap();
    let (code, out, _) = run_in(d, &["show", bad.to_str().unwrap(), "--json"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(json(&out)["kind"], "failed");
}

#[test]
fn every_subcommand_help_has_a_description_examples_and_exit_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, top, _) = run_in(tmp.path(), &["--help"]);
    assert_eq!(code, 0);
    let commands: Vec<String> = top
        .split("Commands:")
        .nth(1)
        .unwrap()
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 19, "{commands:?}");
    for c in &commands {
        let (code, help, err) = run_in(tmp.path(), &[c, "--help"]);
        assert_eq!(code, 0, "{c}: {err}");
        assert!(
            help.contains("Examples:\n  harch-worker ") && help.contains("Exit codes:"),
            "`{c} --help` lacks examples or exit codes (add them to worker/src/cli/help.rs):\n{help}"
        );
        // Every option says what it does, beside it or on the next, deeper-indented line.
        let lines: Vec<&str> = help.lines().collect();
        let indent = |l: &str| l.len() - l.trim_start().len();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            if !(t.starts_with("--") || (t.starts_with('-') && t.get(2..4) == Some(", "))) {
                continue;
            }
            let next_deeper = lines
                .get(i + 1)
                .is_some_and(|n| !n.trim().is_empty() && indent(n) > indent(line) + 2);
            assert!(
                line.trim().contains("  ") || next_deeper,
                "`{c} --help`: option without a description: {line}"
            );
        }
    }
    let (_, enqueue, _) = run_in(tmp.path(), &["enqueue", "--help"]);
    assert!(
        enqueue.contains("[possible values: claude, codex, kimi, openai]"),
        "{enqueue}"
    );
    insta::assert_snapshot!("help", top);
    insta::assert_snapshot!("help_enqueue", enqueue);
}

#[test]
fn logs_are_quiet_and_colourless_unless_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // stderr is a file here: a run logs nothing at the default level.
    let (code, out, err) = run_in(
        d,
        &[
            "enqueue",
            "openai/gpt-oss-20b",
            "--kind",
            "revalidate",
            "--offline",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 1);
    let (code, _, err) = run_in(d, &["run", "--once"]);
    assert_eq!(code, 0, "{err}");
    // No log lines at the default level; `run` itself says what its jobs do.
    for level in ["ERROR", "WARN", "INFO", "DEBUG"] {
        assert!(
            !err.contains(level),
            "default logs are warnings and errors only: {err}"
        );
    }
    assert!(err.contains("openai/gpt-oss-20b: succeeded"), "{err}");
    run_in(
        d,
        &[
            "enqueue",
            "openai/gpt-oss-20b",
            "--kind",
            "revalidate",
            "--offline",
        ],
    );
    let (code, _, err) = run_in(d, &["run", "--once", "-q"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "-q: {err}");
    let (code, _, err) = run_in(d, &["run", "--once", "-v"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("INFO"), "{err}");
    assert!(!err.contains('\u{1b}'), "colour in a file: {err}");
    let (_, _, err) = run_in(d, &["-v", "--log-json", "run", "--once"]);
    for line in err.lines() {
        json(line);
    }
}

#[test]
fn the_exit_code_table_is_documented_once_for_all_commands() {
    let doc = std::fs::read_to_string(root().join("docs/cli.md")).unwrap();
    for row in ["| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 141 |"] {
        assert!(doc.contains(row), "docs/cli.md lacks {row}");
    }
}

#[test]
fn enqueue_refuses_unknown_agents_missing_keys_and_unrunnable_stages() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let enqueue = |args: &[&str]| {
        let mut c = cmd(d, &[&["enqueue", "Qwen/Qwen3-8B"][..], args].concat());
        for k in [
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "CODEX_API_KEY",
            "OPENAI_API_KEY",
            "KIMI_API_KEY",
        ] {
            c.env_remove(k);
        }
        split(c.output().unwrap())
    };
    let (code, _, err) = enqueue(&["--agent", "gpt5"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("[possible values: claude, codex, kimi, openai]"),
        "{err}"
    );
    let (code, _, err) = enqueue(&["--agent", "kimi"]);
    assert_eq!(code, 2);
    assert!(err.contains("set KIMI_API_KEY"), "{err}");
    insta::assert_snapshot!("enqueue_without_credentials", err);
    let (code, _, err) = enqueue(&["--kind", "revalidate", "--stages", "verify"]);
    assert_eq!(code, 2);
    assert!(err.contains("stage `verify` needs `fetch`"), "{err}");
    // Nothing was queued by the refused requests.
    let (_, out, _) = run_in(d, &["status", "--json"]);
    assert!(json(&out).as_array().unwrap().is_empty(), "{out}");
    // Skipping the key check queues (a worker elsewhere has the key).
    let (code, generate, err) = enqueue(&["--agent", "kimi", "--skip-credential-check"]);
    assert_eq!(code, 0, "{err}");
    // Dedupe is per kind: a revalidate request never returns the pending generate job, and a
    // second one says it returns the first.
    let (code, first, _) = enqueue(&["--kind", "revalidate", "--offline"]);
    assert_eq!(code, 0);
    assert_ne!(first, generate);
    let (code, again, err) = enqueue(&["--kind", "revalidate", "--offline"]);
    assert_eq!(code, 0);
    assert_eq!(again, first);
    assert!(
        err.contains("a revalidate job is already pending or running: returning it"),
        "{err}"
    );
}

#[test]
fn revalidate_runs_only_the_jobs_it_queued() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // A generate job waits in the shared queue: revalidate must not start it (it would run a
    // paid agent).
    let (code, generate, err) = run_in(
        d,
        &[
            "enqueue",
            "Qwen/Qwen3-8B",
            "--agent",
            "claude",
            "--skip-credential-check",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run_in(
        d,
        &["revalidate", "--offline", "--models", "openai/gpt-oss-20b"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("bundled snapshot")
            && out.contains("gpt_oss")
            && out.contains("459 of 459")
            && out.contains("valid"),
        "{out}"
    );
    let (_, status, _) = run_in(d, &["status", generate.trim(), "--json"]);
    let rec = json(&status);
    assert_eq!(rec["state"], "pending", "{rec}");
    assert_eq!(rec["deliveries"], 0, "{rec}");
    let (code, out, _) = run_in(
        d,
        &[
            "revalidate",
            "--offline",
            "--models",
            "openai/gpt-oss-20b",
            "--json",
        ],
    );
    assert_eq!(code, 0);
    let rows = json(&out);
    assert_eq!(rows[0]["spec"], "gpt_oss");
    assert_eq!(rows[0]["truth"], "snapshot");
    assert_eq!(rows[0]["valid"], true);
    assert!(rows[0]["guards"].as_array().unwrap().len() > 3);
}

#[test]
fn run_once_exits_one_when_a_job_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (code, id, _) = run_in(d, &["enqueue", "org/m", "--stages", "fail"]);
    assert_eq!(code, 0);
    let (code, _, err) = run_in(d, &["run", "--once"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(id.trim()) && err.contains("failed"), "{err}");
    // Nothing waiting: a drain that ran nothing succeeds.
    let (code, _, err) = run_in(d, &["run", "--once"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn status_and_cancel_say_where_they_looked_and_what_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (code, out, _) = run_in(d, &["status"]);
    assert_eq!(code, 0);
    // One queue per user by default, wherever the command runs; nothing in the project.
    let user = d.join(".xdg-data/harch");
    assert!(
        out.contains(&format!(
            "no jobs in {} (the data dir, per-user default",
            user.display()
        )),
        "{out}"
    );
    assert!(!user.exists(), "status created the data dir");
    assert!(!d.join(".harch").exists());
    let unknown = "01JD3XK4F5Q2W8Y6Z7A9B0C1D2";
    let (code, _, err) = run_in(d, &["cancel", unknown]);
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!("job {unknown} does not exist")),
        "{err}"
    );
    run_in(d, &["enqueue", "org/m", "--stages", "noop"]);
    let (code, _, err) = run_in(d, &["cancel", unknown]);
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!("job {unknown} does not exist")),
        "{err}"
    );
    assert!(!err.contains("lock"), "{err}");
}

#[test]
fn a_partial_queue_toml_keeps_the_other_defaults() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("queue.toml"), "[worker]\ndata_dir = \"jobs-here\"\n").unwrap();
    let (code, _, err) = run_in(d, &["enqueue", "org/m", "--stages", "noop"]);
    assert_eq!(code, 0, "{err}");
    assert!(d.join("jobs-here/jobs").is_dir());
}

#[test]
fn validate_keeps_a_checked_inventory_and_reads_it_back() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let truth = d.join("truth");
    let snapshot = harch_worker::snapshot::load_snapshot("Qwen/Qwen3-8B").unwrap();
    harch_truth::synth::write_sharded_truth_dir(&snapshot, 5, &truth).unwrap();
    let args = [
        "validate",
        "Qwen/Qwen3-8B",
        "--truth",
        truth.to_str().unwrap(),
        "--json",
    ];
    let kept = || {
        std::fs::read_dir(d.join(".inventory-cache"))
            .map(|e| e.count())
            .unwrap_or(0)
    };
    let cached = |args: &[&str]| {
        split(
            cmd(d, args)
                .env("HARCH_INVENTORY_CACHE", d.join(".inventory-cache"))
                .output()
                .unwrap(),
        )
    };
    let (code, first, err) = cached(&args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(kept(), 1);
    let (code, second, err) = cached(&args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&first)["summary"], json(&second)["summary"]);
    assert_eq!(json(&second)["valid"], true);
    assert_eq!(kept(), 1);
    std::fs::remove_dir_all(d.join(".inventory-cache")).unwrap();
    let (code, _, err) = run_in(d, &args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(kept(), 0, "off keeps nothing");
}

#[test]
fn snapshots_are_readable_by_others() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let truth = d.join("truth");
    let snap = d.join("s.json.gz");
    let (code, _, err) = run_in(
        d,
        &[
            "fetch",
            "Qwen/Qwen3-8B",
            "--offline",
            "--out",
            truth.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run_in(
        d,
        &[
            "snapshot",
            truth.to_str().unwrap(),
            "--out",
            snap.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let mode = std::fs::metadata(&snap).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
}

#[test]
fn bench_queue_keeps_to_the_data_dir_it_is_given_and_is_quiet() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let data = d.join("bench-data");
    let (code, out, err) = run_in(
        d,
        &[
            "bench-queue",
            "--jobs",
            "20",
            "--backends",
            "sqlite",
            "--data-dir",
            data.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(err.lines().count() <= 1, "not quiet: {err}");
    assert!(data.is_dir() && !d.join(".harch").exists());
}

#[test]
fn counts_agree_with_their_nouns() {
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("specs/models/llama.yaml")).unwrap();
    let broken = text.replacen(
        "n_vocab: config.vocab_size",
        "n_vocab: \"config.vocab_size - 1\"",
        1,
    );
    let spec = tmp.path().join("llama.yaml");
    std::fs::write(&spec, broken).unwrap();
    let (code, out, _) = run_in(
        &root(),
        &["validate", spec.to_str().unwrap(), "--guards", "weight"],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("invalid: 3 errors, 0 warnings"), "{out}");
    let (_, out, _) = run_in(&root(), &["validate", "Qwen/Qwen3-8B"]);
    assert!(out.trim_end().ends_with("valid (0 warnings)"), "{out}");
}

#[test]
fn fetch_never_deletes_what_is_not_its_truth() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let fetch = |dir: &Path, out: &str, extra: &[&str]| {
        run_in(
            dir,
            &[
                &["fetch", "Qwen/Qwen3-8B", "--offline", "--out", out][..],
                extra,
            ]
            .concat(),
        )
    };
    let leftovers = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".truth-"))
            .collect()
    };
    // A directory of someone's files: refused, untouched.
    let mine = d.join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "keep me").unwrap();
    let (code, _, err) = fetch(d, "mine", &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is not empty and is not a truth directory") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(mine.join("notes.txt")).unwrap(),
        "keep me"
    );
    // A file: refused, still a file.
    std::fs::write(d.join("file"), "x").unwrap();
    let (code, _, err) = fetch(d, "file", &[]);
    assert_eq!(code, 2);
    assert!(err.contains("is a file"), "{err}");
    assert!(d.join("file").is_file());
    // A truth of the same model is refreshed; of another model, refused.
    let (code, _, err) = fetch(d, "t", &[]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = fetch(d, "t", &[]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run_in(
        d,
        &["fetch", "openai/gpt-oss-20b", "--offline", "--out", "t"],
    );
    assert_eq!(code, 2);
    assert!(err.contains("another model, Qwen/Qwen3-8B"), "{err}");
    // --force replaces, a file too.
    let (code, _, err) = fetch(d, "file", &["--force"]);
    assert_eq!(code, 0, "{err}");
    assert!(d.join("file/truth.json").is_file());
    // `--out .` in an empty directory writes there, and leaves no temp directory behind.
    let here = d.join("here");
    std::fs::create_dir(&here).unwrap();
    let (code, _, err) = fetch(&here, ".", &[]);
    assert_eq!(code, 0, "{err}");
    assert!(here.join("truth.json").is_file() && here.join("inventory.txt").is_file());
    assert!(
        leftovers(&here).is_empty() && leftovers(d).is_empty(),
        "{:?}",
        leftovers(d)
    );
    // A failing fetch (no such snapshot) leaves nothing either.
    let (code, _, _) = run_in(d, &["fetch", "org/none", "--offline", "--out", "none"]);
    assert_eq!(code, 1);
    assert!(!d.join("none").exists() && leftovers(d).is_empty());
}

#[test]
fn explain_sums_a_component_and_lists_paths_for_an_unknown_one() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let value = |q: &str| -> i128 {
        let (code, out, err) = run_in(d, &["explain", "deepseek-ai/DeepSeek-V3", q]);
        assert_eq!(code, 0, "{q}: {err}");
        let line = out.lines().nth(1).unwrap();
        line.trim_start_matches("  = ")
            .replace(',', "")
            .parse()
            .unwrap()
    };
    let ffn = value("params:layers[moe].ffn");
    assert!(
        ffn > 600_000_000_000,
        "the MoE FFNs hold most of the 671B: {ffn}"
    );
    assert!(value("flops:layers[moe].attention") > 0);
    let total = value("params_total");
    assert!(ffn < total);
    let (code, _, err) = run_in(
        d,
        &[
            "explain",
            "deepseek-ai/DeepSeek-V3",
            "params:layers[moe].fnn",
        ],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("`layers[moe].fnn` is no node or component")
            && err.contains("layers[moe].ffn"),
        "{err}"
    );
}

/// A copy of the library's llama spec in `dir` as `name`, renamed to `model` (None: keeps the
/// library's name), with `edit` applied to its text.
fn llama_copy(dir: &Path, name: &str, model: Option<&str>, edit: (&str, &str)) -> PathBuf {
    let text = std::fs::read_to_string(root().join("specs/models/llama.yaml")).unwrap();
    let text = match model {
        Some(m) => text.replacen("model: llama\n", &format!("model: {m}\n"), 1),
        None => text,
    };
    assert!(
        text.contains(edit.0),
        "llama.yaml changed: fix the test's edit"
    );
    let text = text.replacen(edit.0, edit.1, 1);
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn errors_in_a_spec_outside_the_library_point_at_the_path_given() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = llama_copy(
        &tmp.path().join("x"),
        "syntax.yaml",
        Some("llama_mine"),
        (
            "d_ffn: config.intermediate_size",
            "d_ffn: \"config.intermediate_size +\"",
        ),
    );
    let given = spec.to_str().unwrap();
    for dir in [tmp.path().to_path_buf(), root()] {
        let (code, out, _) = run_in(&dir, &["validate", given]);
        assert_eq!(code, 1, "{out}");
        assert!(out.contains(&format!("--> {given}:12:")), "{out}");
        assert!(!out.contains("specs/models/syntax.yaml"), "{out}");
        // The snippet is the user's line.
        assert!(
            out.contains("12 |   d_ffn: \"config.intermediate_size +\""),
            "{out}"
        );
        let (code, out, _) = run_in(&dir, &["validate", given, "--json"]);
        assert_eq!(code, 1);
        let report = json(&out);
        assert_eq!(report["errors"][0]["location"]["file"], given, "{report}");
        assert_eq!(report["errors"][0]["location"]["line"], 12, "{report}");
        let (code, _, err) = run_in(&dir, &["show", given]);
        assert_eq!(code, 1);
        assert!(
            err.contains(&format!("--> {given}:12:")) && !err.contains("specs/models/"),
            "{err}"
        );
    }
    // A relative path stays relative.
    let (_, out, _) = run_in(tmp.path(), &["validate", "x/syntax.yaml"]);
    assert!(out.contains("--> x/syntax.yaml:12:"), "{out}");
}

#[test]
fn a_spec_that_does_not_load_says_no_guard_ran() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(&bad, "model: [unclosed\n").unwrap();
    let bad = bad.to_str().unwrap();
    let (code, out, _) = run_in(tmp.path(), &["validate", bad]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("the spec did not load: no guard ran (not run: weight, packing,"),
        "{out}"
    );
    assert!(
        !out.contains("0 of 0") && !out.contains("guards: weight"),
        "{out}"
    );
    let (code, out, _) = run_in(tmp.path(), &["validate", bad, "--json"]);
    assert_eq!(code, 1);
    let report = json(&out);
    assert_eq!(report["stopped_at"], "load", "{report}");
    assert_eq!(report["guards"], serde_json::json!([]), "{report}");
    assert!(report["not_run"].as_array().unwrap().len() >= 6, "{report}");
    // A spec that loads runs its guards and says so.
    let (_, out, _) = run_in(tmp.path(), &["validate", "Qwen/Qwen3-8B", "--json"]);
    let report = json(&out);
    assert_eq!(report["stopped_at"], serde_json::Value::Null);
    assert_eq!(report["not_run"], serde_json::json!([]));
}

#[test]
fn a_copy_keeping_the_library_model_name_stands_in_for_it_and_is_told_so() {
    let tmp = tempfile::tempdir().unwrap();
    // Before and after the library's llama.yaml in file order: the same answer (it was
    // "L005 no model spec" before it).
    for name in ["a_copy.yaml", "z_copy.yaml"] {
        let spec = llama_copy(
            tmp.path(),
            name,
            None,
            (
                "n_vocab: config.vocab_size",
                "n_vocab: \"config.vocab_size - 1\"",
            ),
        );
        let given = spec.to_str().unwrap();
        let (code, out, _) = run_in(tmp.path(), &["validate", given, "--guards", "weight"]);
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains(&format!(
                "note: {given} has the `model:` name of the library spec specs/models/llama.yaml and stands in for it"
            )),
            "{out}"
        );
        // The copy is what was checked: its error, at its path.
        assert!(
            !out.contains("L005") && out.contains(&format!("--> {given}:")),
            "{out}"
        );
        let (_, out, _) = run_in(tmp.path(), &["validate", given, "--json"]);
        assert_eq!(
            json(&out)["stands_in_for"],
            "specs/models/llama.yaml",
            "{out}"
        );
        let (code, _, err) = run_in(tmp.path(), &["show", given]);
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("stands in for it"), "{err}");
        // Renamed, it is checked beside the library spec, with no note.
        let renamed = llama_copy(
            tmp.path(),
            name,
            Some("llama_copy"),
            ("n_layers:", "n_layers:"),
        );
        let (code, out, err) = run_in(tmp.path(), &["validate", renamed.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(!out.contains("note:"), "{out}");
    }
}

#[test]
fn cancel_retry_and_run_answer_in_json_on_success_and_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (_, id, _) = run_in(d, &["enqueue", "org/m", "--stages", "noop"]);
    let id = id.trim();
    let (code, out, _) = run_in(d, &["cancel", id, "--json"]);
    assert_eq!(code, 0, "{out}");
    let rec = json(&out);
    assert_eq!(
        (rec["id"].as_str(), rec["state"].as_str()),
        (Some(id), Some("cancelled"))
    );
    // Cancelling it again fails: still one JSON document, with the exit code's kind.
    let (code, out, err) = run_in(d, &["cancel", id, "--json"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.is_empty(), "{err}");
    let e = json(&out);
    assert_eq!(e["exit_code"], 2);
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("has already been cancelled"),
        "{e}"
    );
    let (code, out, _) = run_in(d, &["retry", id, "--json"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(json(&out)["state"], "pending");
    let (code, out, _) = run_in(d, &["retry", "01JD3XK4F5Q2W8Y6Z7A9B0C1D2", "--json"]);
    assert_eq!(code, 2);
    assert!(
        json(&out)["error"]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{out}"
    );
    // The drain's account: every job that was waiting, and how it ended.
    let (_, failing, _) = run_in(d, &["enqueue", "org/f", "--stages", "fail"]);
    let (code, out, err) = run_in(d, &["run", "--once", "--json"]);
    assert_eq!(code, 1, "{out}{err}");
    let drain = json(&out);
    assert_eq!(
        (drain["succeeded"].as_u64(), drain["failed"].as_u64()),
        (Some(1), Some(1))
    );
    let jobs = drain["jobs"].as_array().unwrap();
    let failed = jobs.iter().find(|j| j["id"] == failing.trim()).unwrap();
    assert_eq!(failed["state"], "failed");
    assert!(failed["last_error"].as_str().is_some_and(|e| !e.is_empty()));
    let (code, out, _) = run_in(d, &["run", "--once", "--json", "--queue", "postgres://x"]);
    assert_eq!(code, 2);
    assert_eq!(json(&out)["kind"], "usage");
}

/// The bytes a terminal would take as drawing: carriage returns and escape sequences.
fn has_control_codes(s: &str) -> bool {
    s.contains('\r') || s.contains('\u{1b}')
}

#[test]
fn progress_bars_stay_off_pipes_and_json() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let truth = d.join("truth");
    let mut cases: Vec<Vec<String>> = vec![
        vec!["run".into(), "--once".into()],
        vec![
            "revalidate".into(),
            "--offline".into(),
            "--models".into(),
            "openai/gpt-oss-20b,Qwen/Qwen3-8B".into(),
        ],
        vec![
            "fetch".into(),
            "Qwen/Qwen3-8B".into(),
            "--offline".into(),
            "--out".into(),
            truth.to_str().unwrap().into(),
        ],
    ];
    for i in 0..3 {
        let (code, _, err) = run_in(
            d,
            &["enqueue", &format!("org/p{i}"), "--stages", "sleep:300"],
        );
        assert_eq!(code, 0, "{err}");
    }
    let mut json_cases: Vec<Vec<String>> = cases.clone();
    for c in &mut json_cases {
        c.push("--json".into());
    }
    cases.extend(json_cases);
    for args in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = run_in(d, &args);
        assert!(code == 0, "{args:?}: {out}{err}");
        assert!(
            !has_control_codes(&out) && !has_control_codes(&err),
            "{args:?} drew on a pipe: {err:?}"
        );
    }
    // On a terminal (where `script` can provide one), the drain shows its bar.
    let script = Command::new("script").arg("--version").output();
    if !script.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED the terminal half: no `script` to run a command on a terminal");
        return;
    }
    for i in 0..3 {
        run_in(
            d,
            &["enqueue", &format!("org/t{i}"), "--stages", "sleep:600"],
        );
    }
    let line = format!("{BIN} run --once --concurrency 1");
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .current_dir(d)
        .env("TERM", "xterm")
        .env_remove("HARCH_DATA_DIR")
        .env("XDG_DATA_HOME", d.join(".xdg-data"))
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("jobs done"), "no bar on a terminal: {text:?}");
}

/// The subcommands `--help` lists.
fn subcommands(dir: &Path) -> Vec<String> {
    let (_, top, _) = run_in(dir, &["--help"]);
    top.split("Commands:")
        .nth(1)
        .unwrap()
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .filter(|c| c != "help")
        .collect()
}

#[test]
fn every_subcommand_is_documented_and_answers_in_json() {
    let tmp = tempfile::tempdir().unwrap();
    let doc = std::fs::read_to_string(root().join("docs/cli.md")).unwrap();
    let commands = subcommands(tmp.path());
    assert!(commands.len() >= 20, "{commands:?}");
    for c in &commands {
        let head = format!("### `{c}`\n");
        let section = doc
            .split_once(&head)
            .map(|(_, rest)| rest.split("\n### ").next().unwrap())
            .unwrap_or_else(|| panic!("docs/cli.md has no section {head:?}"));
        assert!(
            section.contains(&format!("harch-worker {c}")),
            "docs/cli.md: `{c}` has no example"
        );
        assert!(
            section.contains("--json"),
            "docs/cli.md: `{c}` does not say what --json gives"
        );
        let (_, help, _) = run_in(tmp.path(), &[c, "--help"]);
        assert!(
            help.contains("\n      --json"),
            "`{c}` has no --json:\n{help}"
        );
    }
    // The commands this build runs without a queue or network answer in JSON.
    let d = tmp.path();
    let (code, out, _) = run_in(d, &["ops", "--json"]);
    assert_eq!(code, 0);
    let ops = json(&out);
    assert!(
        ops.as_array()
            .unwrap()
            .iter()
            .any(|o| o["name"] == "linear"),
        "{ops}"
    );
    let (code, out, err) = run_in(
        d,
        &[
            "explain",
            "deepseek-ai/DeepSeek-V3",
            "params:layers[moe].ffn",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let e = json(&out);
    assert!(e["value"].as_i64().unwrap() > 600_000_000_000, "{e}");
    assert!(e["formula"].as_str().is_some_and(|f| !f.is_empty()), "{e}");
    let (code, out, _) = run_in(d, &["explain", "Qwen/Qwen3-8B", "d_model", "--json"]);
    assert_eq!(code, 0);
    let e = json(&out);
    assert_eq!(e["value"], 4096, "{e}");
    assert!(
        e["bound"]
            .as_str()
            .unwrap()
            .contains("specs/models/qwen3.yaml"),
        "{e}"
    );
    let (code, out, err) = run_in(d, &["prompt", "Qwen/Qwen3-8B", "--size-only", "--json"]);
    assert_eq!(code, 0, "{err}");
    let p = json(&out);
    assert!(
        p["size"]["bytes"].as_u64().unwrap() > 1000 && p["text"].is_null(),
        "{p}"
    );
    let truth = d.join("truth");
    run_in(
        d,
        &[
            "fetch",
            "Qwen/Qwen3-8B",
            "--offline",
            "--out",
            truth.to_str().unwrap(),
        ],
    );
    let snap = d.join("s.json.gz");
    let (code, out, err) = run_in(
        d,
        &[
            "snapshot",
            truth.to_str().unwrap(),
            "--out",
            snap.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["model_id"], "Qwen/Qwen3-8B");
    let (code, id, _) = run_in(d, &["enqueue", "org/m", "--stages", "noop"]);
    assert_eq!(code, 0);
    let (code, out, _) = run_in(d, &["logs", id.trim(), "--json"]);
    assert_eq!(code, 0);
    assert!(json(&out)["lines"].as_array().is_some(), "{out}");
    let (code, out, _) = run_in(
        d,
        &[
            "bench-queue",
            "--jobs",
            "3",
            "--backends",
            "sqlite",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(json(&out)[0]["jobs"], 3);
    let abl = d.join("abl");
    let abl_s = abl.to_str().unwrap();
    let (code, out, err) = run_in(
        d,
        &[
            "ablate",
            "--models",
            "Qwen/Qwen3-8B",
            "--tiers",
            "off,all",
            "--seeds",
            "1",
            "--agent",
            "kimi",
            "--skip-credential-check",
            "--offline",
            "--out",
            abl_s,
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let a = json(&out);
    assert_eq!(a["runs_planned"], 2, "{a}");
    assert_eq!(a["queued"].as_array().unwrap().len(), 2, "{a}");
    let (code, out, err) = run_in(d, &["ablate", "report", abl_s, "--json"]);
    assert_eq!(code, 0, "{err}");
    let r = json(&out);
    assert_eq!(
        (r["runs"].as_u64(), r["in_flight"].as_u64()),
        (Some(2), Some(2)),
        "{r}"
    );
    assert_eq!(r["tiers"].as_array().unwrap().len(), 2, "{r}");
    assert!(abl.join("report.md").is_file());
    // Failures are JSON too.
    let (code, out, _) = run_in(d, &["ablate", "report", "nowhere", "--json"]);
    assert_eq!(code, 2);
    assert!(
        json(&out)["error"]
            .as_str()
            .unwrap()
            .contains("no ablation here"),
        "{out}"
    );
    let (code, out, _) = run_in(d, &["logs", "01JD3XK4F5Q2W8Y6Z7A9B0C1D2", "--json"]);
    assert_eq!(code, 2);
    assert_eq!(json(&out)["kind"], "usage");
    let (code, out, _) = run_in(d, &["promote", "no_such_draft", "--offline", "--json"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(json(&out)["kind"], "failed");
}
