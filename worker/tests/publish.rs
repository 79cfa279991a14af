//! The publish stage against a real git remote and a fake GitHub: a bare repository pushed to
//! by the git command line over file://, and a wiremock server that speaks the REST API harch calls (and
//! checks each call: token, headers, required fields, `owner:branch` heads). Covers the first
//! publish, updates, idempotent retries, drafts, every classified failure, the dry run, and that
//! the token never shows up in anything the stage leaves behind.
//!
//! Needs the forward source of llama (scripts/fetch-transformers-src): publish validates with
//! every guard.

use crate::fake_github;

use std::path::{Path, PathBuf};

use fake_github::FakeGitHub;
use harch_review::{
    Checked, CheckedRow, Decision, Judgement, ReviewSummary, RowView, Standing, Status, Tally,
};
use harch_worker::publish::config::{Auth, Target, Token};
use harch_worker::publish::{PublishError, PublishReport, PublishRequest, publish};
use harch_worker::queue::config::{DEFAULT_TOML, PublishSettings, Settings};
use harch_worker::queue::record::{JobKind, JobRecord, JobRequest, StageState};
use harch_worker::queue::stage::Stage;
use serde_json::{Value, json};
use wiremock::ResponseTemplate;

const MODEL: &str = "meta-llama/Llama-3.1-8B";
const BRANCH: &str = "harch/meta-llama__Llama-3.1-8B";
const TOKEN: &str = "ghs_TESTtoken_7f3a9c1e5b2d";

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn settings() -> PublishSettings {
    Settings::parse(DEFAULT_TOML, "default").unwrap().publish
}

struct World {
    tmp: tempfile::TempDir,
    remote: PathBuf,
    gh: FakeGitHub,
    /// The truth dir every job copies (fetched once, offline, from the bundled snapshot).
    truth: PathBuf,
}

use fake_github::init_remote;

impl World {
    async fn new() -> World {
        World::with_base(&[("README.md", "spec repository\n")]).await
    }

    async fn with_base(files: &[(&str, &str)]) -> World {
        let tmp = tempfile::tempdir().unwrap();
        let remote = tmp.path().join("remote.git");
        init_remote(&remote, files);
        let gh = FakeGitHub::start("acme", "specs", TOKEN, remote.clone()).await;
        let truth = tmp.path().join("truth");
        let mut opts = harch_worker::hub::FetchOptions::from_env(MODEL, truth.clone());
        opts.offline = true;
        opts.cache_dir = None;
        harch_worker::hub::fetch_truth(&opts).await.unwrap();
        World {
            tmp,
            remote,
            gh,
            truth,
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.tmp.path().join("data")
    }

    fn target(&self) -> Target {
        Target {
            owner: "acme".into(),
            name: "specs".into(),
            remote_url: format!("file://{}", self.remote.display()),
            base_branch: "main".into(),
            branch_prefix: "harch/".into(),
            api_url: self.gh.uri(),
            token_env: "GITHUB_TOKEN".into(),
            auth: Auth::Token(Token::new(TOKEN.into())),
            author_name: "harch-bot".into(),
            author_email: "harch-bot@example.com".into(),
            max_wait_s: 5,
            clone_dir: self.data_dir().join("publish/acme__specs.git"),
        }
    }

    /// A job that generated llama's spec with claude, optionally reviewed.
    fn job(&self, id: &str, review: Option<Value>) -> (JobRecord, PathBuf) {
        let job_dir = self.data_dir().join("jobs").join(id);
        copy_dir(&self.truth, &job_dir.join("fetch/truth"));
        let spec = job_dir.join("generate/spec/models");
        std::fs::create_dir_all(&spec).unwrap();
        std::fs::copy(
            project_root().join("specs/models/llama.yaml"),
            spec.join("llama.yaml"),
        )
        .unwrap();
        let mut stages = vec![Stage::Fetch, Stage::Generate, Stage::Verify];
        if review.is_some() {
            stages.push(Stage::Review);
        }
        stages.push(Stage::Publish);
        let mut job = JobRecord::new(
            id.into(),
            JobRequest {
                model_id: MODEL.into(),
                revision: "main".into(),
                kind: JobKind::Generate,
                agent: "claude".into(),
                guards: "all".into(),
                stages,
                priority: 0,
                offline: true,
                exclude_library_spec: true,
                agent_model: None,
                ablation: None,
            },
            0,
        );
        for s in &mut job.stages {
            if s.stage != Stage::Publish {
                s.state = StageState::Done;
                s.attempts = 1;
            }
        }
        let g = job.stage_mut(Stage::Generate).unwrap();
        g.usage.turns = 5;
        g.usage.input_tokens = 1500;
        g.usage.output_tokens = 150;
        g.usage.cost_usd = 0.0125;
        g.summary = json!({"agent": "claude", "backend": "claude", "valid": true,
            "attempts": [{"n": 1, "backend": "claude", "turns": 5, "wall_ms": 42000, "valid": true}]});
        if let Some(r) = review {
            job.stage_mut(Stage::Review).unwrap().summary = r;
        }
        (job, job_dir)
    }

    async fn publish_job(
        &self,
        job: &JobRecord,
        job_dir: &Path,
        target: Option<Target>,
    ) -> Result<PublishReport, PublishError> {
        let out = job_dir.join(".staging/publish");
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
        publish(PublishRequest {
            job: job.clone(),
            job_dir: job_dir.to_path_buf(),
            out_dir: out,
            spec_root: project_root(),
            settings: settings(),
            target,
        })
        .await
    }

    async fn publish(
        &self,
        id: &str,
        review: Option<Value>,
    ) -> Result<PublishReport, PublishError> {
        let (job, dir) = self.job(id, review);
        self.publish_job(&job, &dir, Some(self.target())).await
    }

    fn tip(&self, branch: &str) -> Option<String> {
        fake_github::tip(&self.remote, branch)
    }

    /// `git log -1 --format=FORMAT COMMIT` on the remote.
    fn show(&self, commit: &str, format: &str) -> String {
        fake_github::git_raw(
            &self.remote,
            &["log", "-1", &format!("--format={format}"), commit],
        )
    }

    fn assert_no_violations(&self) {
        assert!(
            self.gh.violations().is_empty(),
            "{:#?}",
            self.gh.violations()
        );
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// A review stage's summary as the stage records it (`ReviewSummary`): the worker's verdict,
/// its reasons, one mapping row per (step, node, standing), each claimed consistent.
fn review(recorded: Decision, reasons: &[&str], rows: &[(&str, &str, Standing)]) -> Value {
    let mapping: Vec<CheckedRow> = rows
        .iter()
        .enumerate()
        .map(|(i, (step, node, standing))| CheckedRow {
            row: RowView {
                step: step.to_string(),
                node: Some(node.to_string()),
                status: Status::Consistent,
                line: i as u32 + 1,
            },
            judgement: Judgement {
                standing: *standing,
                why: String::new(),
                claims: vec![],
                unbacked: vec![],
            },
        })
        .collect();
    let checked = Checked {
        file: "review.yaml".into(),
        said: recorded,
        recorded,
        reasons: reasons.iter().map(|r| r.to_string()).collect(),
        mapping,
        defects: vec![],
        rows: Tally::default(),
        defect_tally: Tally::default(),
        claims: 0,
        claims_holding: 0,
    };
    serde_json::to_value(ReviewSummary::of(&checked, 0)).unwrap()
}

fn pass_review() -> Value {
    review(
        Decision::Pass,
        &[],
        &[
            ("token embedding", "embed_tokens", Standing::Verified),
            ("decoder layers", "layers", Standing::Verified),
            ("final RMSNorm", "norm", Standing::Verified),
        ],
    )
}

fn no_pass_review() -> Value {
    review(
        Decision::NoPass,
        &["the rope scaling row cites no config value"],
        &[("rotary embedding", "layers", Standing::Unverified)],
    )
}

fn expect_permanent(r: Result<PublishReport, PublishError>, needle: &str) -> String {
    match r {
        Err(e @ PublishError::Permanent(_)) => {
            let m = e.to_string();
            assert!(m.contains(needle), "`{needle}` not in: {m}");
            assert!(!m.contains(TOKEN), "the token leaked into: {m}");
            m
        }
        other => panic!("expected a permanent error with `{needle}`, got {other:?}"),
    }
}

fn expect_transient(r: Result<PublishReport, PublishError>, needle: &str) -> String {
    match r {
        Err(e @ PublishError::Transient(_)) => {
            let m = e.to_string();
            assert!(m.contains(needle), "`{needle}` not in: {m}");
            assert!(!m.contains(TOKEN), "the token leaked into: {m}");
            m
        }
        other => panic!("expected a transient error with `{needle}`, got {other:?}"),
    }
}

#[tokio::test]
async fn the_first_publish_pushes_the_branch_and_opens_one_pull_request() {
    let w = World::new().await;
    let r = w.publish("job-a", Some(pass_review())).await.unwrap();
    w.assert_no_violations();
    assert_eq!(r.mode, "published");
    assert_eq!(r.branch, BRANCH);
    assert_eq!(r.branch_action, "created");

    // The branch: one commit on top of main, with the bundle and nothing else changed.
    let tip = w.tip(BRANCH).unwrap();
    assert_eq!(w.show(&tip, "%P").trim(), w.tip("main").unwrap());
    assert_eq!(w.show(&tip, "%an").trim(), "harch-bot");
    let file = |p: &str| fake_github::show_file(&w.remote, &tip, p);
    assert_eq!(
        file("specs/models/llama.yaml"),
        std::fs::read_to_string(project_root().join("specs/models/llama.yaml")).unwrap()
    );
    assert_eq!(file("README.md"), "spec repository\n");
    let prov: Value =
        serde_json::from_str(&file("specs/provenance/meta-llama__Llama-3.1-8B.json")).unwrap();
    assert_eq!(prov["model_id"], MODEL);
    // The model's Inspector page is committed with the bundle and the body names it.
    let page = file("specs/pages/meta-llama__Llama-3.1-8B.html");
    assert!(page.starts_with("<!doctype html>") && page.contains("id=\"harch-data\""));
    assert!(
        w.gh.prs()[0]
            .body
            .contains("specs/pages/meta-llama__Llama-3.1-8B.html"),
        "the body links the page"
    );
    assert_eq!(prov["validate"]["valid"], true);
    assert_eq!(prov["validate"]["byte_diff"], 0);
    assert_eq!(prov["review"]["status"], "pass");
    assert_eq!(prov["agents"][0]["backend"], "claude");
    assert_eq!(prov["agents"][0]["cost_usd"], 0.0125);
    assert!(prov["truth"]["tensor_count"].as_u64().unwrap() > 200);
    let message = w.show(&tip, "%B");
    assert!(
        message.starts_with("specs: add llama for meta-llama/Llama-3.1-8B"),
        "{message}"
    );
    assert!(
        message.contains("\nCo-authored-by: claude agent <claude@agents.harch.invalid>\n"),
        "{message}"
    );
    assert!(message.contains("Harch-Bundle: "), "{message}");

    // The pull request: one, from the branch to main, ready, labelled, with the body.
    let prs = w.gh.prs();
    assert_eq!(prs.len(), 1);
    let pr = &prs[0];
    assert_eq!(pr.head, BRANCH);
    assert_eq!(pr.base, "main");
    assert_eq!(pr.title, "Add spec `llama` for meta-llama/Llama-3.1-8B");
    assert!(!pr.draft);
    assert_eq!(pr.labels, ["harch:new-architecture", "harch:review-pass"]);
    assert!(
        pr.body.contains("```mermaid\nflowchart TD\n"),
        "{}",
        pr.body
    );
    assert!(pr.body.contains("= checkpoint ✓"), "{}", pr.body);
    assert!(pr.body.contains("Verdict: **PASS**"), "{}", pr.body);
    assert!(
        pr.body.contains(
            "harch-worker validate specs/models/llama.yaml --truth truth/meta-llama__Llama-3.1-8B"
        ),
        "{}",
        pr.body
    );
    assert_eq!(w.gh.count("POST", "/pulls"), 1);
    let out = r.pull_request.unwrap();
    assert_eq!((out.number, out.action.as_str()), (1, "opened"));
}

#[tokio::test]
async fn a_second_publish_of_the_model_updates_the_same_pull_request() {
    let w = World::with_base(&[
        ("README.md", "spec repository\n"),
        (
            "specs/models/llama.yaml",
            "model: llama\nsummary: an older llama spec\n",
        ),
    ])
    .await;
    let first = w.publish("job-a", Some(pass_review())).await.unwrap();
    let tip_a = w.tip(BRANCH).unwrap();
    // Another job of the same model: new provenance (job id), so a new commit.
    let second = w.publish("job-b", Some(pass_review())).await.unwrap();
    w.assert_no_violations();
    let tip_b = w.tip(BRANCH).unwrap();
    assert_ne!(tip_a, tip_b);
    assert_eq!(second.branch_action, "pushed");
    // Reset onto the base, not stacked on the old commit.
    assert_eq!(w.show(&tip_b, "%P").trim(), w.tip("main").unwrap());
    assert_eq!(w.gh.prs().len(), 1);
    assert_eq!(w.gh.count("POST", "/pulls"), 1);
    assert_eq!(w.gh.count("PATCH", "/pulls/1"), 1);
    let pr = &w.gh.prs()[0];
    assert!(pr.body.contains("job `job-b`"), "{}", pr.body);
    assert_eq!(pr.title, "Update spec `llama` for meta-llama/Llama-3.1-8B");
    assert_eq!(pr.labels, ["harch:review-pass"]);
    assert_eq!(first.pull_request.unwrap().number, 1);
    assert_eq!(second.pull_request.unwrap().action, "updated");
}

#[tokio::test]
async fn an_unchanged_bundle_makes_no_commit_and_no_write() {
    let w = World::new().await;
    w.publish("job-a", Some(pass_review())).await.unwrap();
    let tip = w.tip(BRANCH).unwrap();
    let writes = w.gh.writes();
    // The same job published again (a retry after a crash, or a redelivery).
    let again = w.publish("job-a", Some(pass_review())).await.unwrap();
    w.assert_no_violations();
    assert_eq!(w.tip(BRANCH).unwrap(), tip);
    assert_eq!(again.branch_action, "unchanged");
    assert_eq!(again.pull_request.unwrap().action, "unchanged");
    assert_eq!(w.gh.writes(), writes, "{:#?}", w.gh.calls());
    assert_eq!(w.gh.prs().len(), 1);
}

#[tokio::test]
async fn no_pass_opens_a_draft_with_the_reasons_on_top_and_pass_makes_it_ready() {
    let w = World::new().await;
    let r = w.publish("job-a", Some(no_pass_review())).await.unwrap();
    w.assert_no_violations();
    let pr = w.gh.prs()[0].clone();
    assert!(pr.draft);
    assert!(r.draft);
    let first_lines: Vec<&str> = pr.body.lines().take(5).collect();
    assert_eq!(first_lines[1], "> [!WARNING]", "{}", pr.body);
    assert!(
        pr.body.contains("> - the review verdict is NO_PASS"),
        "{}",
        pr.body
    );
    assert!(
        pr.body
            .contains("> - review: the rope scaling row cites no config value"),
        "{}",
        pr.body
    );
    assert!(pr.body.contains("? unverified"), "{}", pr.body);
    assert_eq!(
        pr.labels,
        [
            "harch:new-architecture",
            "harch:review-no-pass",
            "harch:unverified"
        ]
    );
    let created =
        w.gh.calls()
            .into_iter()
            .find(|c| c.method == "POST" && c.path.ends_with("/pulls"))
            .unwrap();
    assert_eq!(created.body["draft"], true);

    // Fixed and reviewed again: the same PR becomes ready, harch's old labels go.
    w.publish("job-b", Some(pass_review())).await.unwrap();
    w.assert_no_violations();
    let pr = w.gh.prs()[0].clone();
    assert!(!pr.draft);
    assert_eq!(pr.labels, ["harch:new-architecture", "harch:review-pass"]);
    assert!(!pr.body.contains("[!WARNING]"));
    assert_eq!(w.gh.count("POST", "/graphql"), 1);
    let g =
        w.gh.calls()
            .into_iter()
            .find(|c| c.path == "/graphql")
            .unwrap();
    assert!(
        g.body["query"]
            .as_str()
            .unwrap()
            .contains("markPullRequestReadyForReview")
    );
    assert_eq!(g.body["variables"]["id"], "PR_node1");
}

#[tokio::test]
async fn an_unreviewed_spec_is_a_draft_that_says_so() {
    let w = World::new().await;
    w.publish("job-a", None).await.unwrap();
    let pr = &w.gh.prs()[0];
    assert!(pr.draft);
    assert!(pr.body.contains("**Not reviewed**"), "{}", pr.body);
    assert!(pr.labels.contains(&"harch:not-reviewed".to_string()));
}

#[tokio::test]
async fn a_pull_request_that_exists_but_was_not_listed_is_updated_not_duplicated() {
    let w = World::new().await;
    w.publish("job-a", Some(pass_review())).await.unwrap();
    // GitHub's list lags once: the create answers 422 "already exists".
    w.gh.state.lock().unwrap().stale_lists = 1;
    let r = w.publish("job-b", Some(pass_review())).await.unwrap();
    w.assert_no_violations();
    assert_eq!(w.gh.prs().len(), 1);
    assert_eq!(w.gh.count("POST", "/pulls"), 2);
    assert_eq!(r.pull_request.unwrap().action, "updated");
    assert!(w.gh.prs()[0].body.contains("job `job-b`"));
}

#[tokio::test]
async fn bad_credentials_and_missing_permissions_fail_for_good() {
    let w = World::new().await;
    w.gh.fault(
        "GET",
        "/pulls",
        ResponseTemplate::new(401).set_body_json(json!({"message": "Bad credentials"})),
    );
    expect_permanent(w.publish("job-a", Some(pass_review())).await, "HTTP 401");

    w.gh.fault(
        "POST",
        "/pulls",
        ResponseTemplate::new(403)
            .set_body_json(json!({"message": "Resource not accessible by integration"})),
    );
    let m = expect_permanent(w.publish("job-a", Some(pass_review())).await, "HTTP 403");
    assert!(m.contains("pull requests"), "{m}");
    assert!(w.gh.prs().is_empty());
}

#[tokio::test]
async fn rate_limits_are_waited_out_as_github_asks() {
    let w = World::new().await;
    w.gh.fault(
        "POST",
        "/pulls",
        ResponseTemplate::new(429)
            .insert_header("retry-after", "1")
            .set_body_json(json!({"message": "API rate limit exceeded"})),
    );
    // A secondary limit is a 403 with Retry-After.
    w.gh.fault(
        "POST",
        "/labels",
        ResponseTemplate::new(403)
            .insert_header("retry-after", "1")
            .set_body_json(json!({"message": "You have exceeded a secondary rate limit."})),
    );
    let r = w.publish("job-a", Some(pass_review())).await.unwrap();
    w.assert_no_violations();
    assert_eq!(r.rate_limit_waits.len(), 2, "{:?}", r.rate_limit_waits);
    assert!(r.rate_limit_waits[0].contains("(HTTP 429), waiting 1 s"));
    assert!(r.rate_limit_waits[1].contains("(HTTP 403), waiting 1 s"));
    assert_eq!(w.gh.prs().len(), 1);
    assert_eq!(w.gh.prs()[0].labels.len(), 2);
}

#[tokio::test]
async fn a_wait_longer_than_allowed_is_a_transient_failure_and_the_retry_is_idempotent() {
    let w = World::new().await;
    w.gh.fault(
        "POST",
        "/pulls",
        ResponseTemplate::new(429).insert_header("retry-after", "3600"),
    );
    let m = expect_transient(
        w.publish("job-a", Some(pass_review())).await,
        "retry after 3600 s",
    );
    assert!(m.contains("max_wait_s"), "{m}");
    let tip = w.tip(BRANCH).unwrap();
    // The runner's retry: no new commit (the branch carries the bundle), one PR.
    let r = w.publish("job-a", Some(pass_review())).await.unwrap();
    assert_eq!(r.branch_action, "unchanged");
    assert_eq!(w.tip(BRANCH).unwrap(), tip);
    assert_eq!(w.gh.prs().len(), 1);
    w.assert_no_violations();
}

#[tokio::test]
async fn server_errors_are_transient() {
    let w = World::new().await;
    w.gh.fault(
        "POST",
        "/pulls",
        ResponseTemplate::new(502).set_body_string("<html>Bad Gateway</html>"),
    );
    expect_transient(w.publish("job-a", Some(pass_review())).await, "HTTP 502");
    w.gh.fault("PATCH", "/pulls/1", ResponseTemplate::new(503));
    w.publish("job-a", Some(pass_review())).await.unwrap();
    assert_eq!(w.gh.prs().len(), 1);
}

#[tokio::test]
async fn a_branch_with_someone_elses_commit_is_never_overwritten() {
    let w = World::new().await;
    w.publish("job-a", Some(pass_review())).await.unwrap();
    // A maintainer pushes a fix onto the bot's branch.
    let tip = w.tip(BRANCH).unwrap();
    let tree = w.show(&tip, "%T");
    let theirs = fake_github::commit_tree(
        &w.remote,
        BRANCH,
        tree.trim(),
        &[&tip],
        ("Alice", "alice@example.com"),
        "tweak the summary",
    );
    let m = expect_permanent(w.publish("job-b", Some(pass_review())).await, "diverged");
    assert!(m.contains("Alice"), "{m}");
    assert_eq!(w.tip(BRANCH).unwrap(), theirs);
}

#[tokio::test]
async fn a_missing_base_branch_is_permanent() {
    let w = World::new().await;
    let mut t = w.target();
    t.base_branch = "trunk".into();
    let (job, dir) = w.job("job-a", Some(pass_review()));
    expect_permanent(
        w.publish_job(&job, &dir, Some(t)).await,
        "`trunk` does not exist",
    );
    assert!(w.gh.calls().is_empty());
}

#[tokio::test]
async fn a_push_the_remote_cannot_apply_is_reported_with_its_reason() {
    let w = World::new().await;
    // Another process holds the ref's lock on the remote.
    let refs = w.remote.join("refs/heads/harch");
    std::fs::create_dir_all(&refs).unwrap();
    std::fs::write(refs.join("meta-llama__Llama-3.1-8B.lock"), "").unwrap();
    let r = w.publish("job-a", Some(pass_review())).await;
    let m = match &r {
        Err(e) => e.to_string(),
        Ok(_) => panic!("the push went through a locked ref"),
    };
    assert!(m.contains("lock"), "{m}");
    assert!(r.unwrap_err().is_transient());
    assert!(w.gh.prs().is_empty());
    std::fs::remove_file(refs.join("meta-llama__Llama-3.1-8B.lock")).unwrap();
    w.publish("job-a", Some(pass_review())).await.unwrap();
    assert_eq!(w.gh.prs().len(), 1);
}

#[tokio::test]
async fn the_dry_run_writes_bundle_message_and_body_and_touches_nothing() {
    let w = World::new().await;
    let (job, dir) = w.job("job-a", Some(pass_review()));
    let r = w.publish_job(&job, &dir, None).await.unwrap();
    assert_eq!(r.mode, "dry-run");
    assert!(r.message.starts_with("publish: dry run"), "{}", r.message);
    let out = dir.join(".staging/publish");
    assert!(out.join("bundle/specs/models/llama.yaml").is_file());
    assert!(
        out.join("bundle/specs/provenance/meta-llama__Llama-3.1-8B.json")
            .is_file()
    );
    let msg = std::fs::read_to_string(out.join("commit-message.txt")).unwrap();
    assert!(msg.contains("Co-authored-by:"), "{msg}");
    let body = std::fs::read_to_string(out.join("pr-body.md")).unwrap();
    assert!(body.contains("```mermaid"));
    let pr: Value = serde_json::from_slice(&std::fs::read(out.join("pr.json")).unwrap()).unwrap();
    assert_eq!(pr["draft"], false);
    // The library already has llama: not a new architecture.
    assert_eq!(pr["labels"], json!(["harch:review-pass"]));
    assert!(w.gh.calls().is_empty());
    assert!(w.tip(BRANCH).is_none());
}

#[tokio::test]
async fn a_spec_that_does_not_validate_is_never_published() {
    let w = World::new().await;
    let (job, dir) = w.job("job-a", Some(pass_review()));
    let spec = dir.join("generate/spec/models/llama.yaml");
    let text = std::fs::read_to_string(&spec).unwrap();
    std::fs::write(
        &spec,
        text.replace(
            "d_ffn: config.intermediate_size",
            "d_ffn: config.hidden_size",
        ),
    )
    .unwrap();
    expect_permanent(
        w.publish_job(&job, &dir, Some(w.target())).await,
        "does not validate",
    );
    assert!(w.tip(BRANCH).is_none());
    assert!(w.gh.calls().is_empty());
}

#[tokio::test]
async fn the_token_never_appears_in_what_publish_leaves_behind() {
    let w = World::new().await;
    let r = w.publish("job-a", Some(no_pass_review())).await.unwrap();
    w.publish("job-b", Some(pass_review())).await.unwrap();
    let mut seen = serde_json::to_string(&r).unwrap();
    // Every file publishing wrote: the stage's artifacts, the local clone (config, refs,
    // objects are compressed but the config and reflogs are plain), and the remote.
    for root in [w.data_dir(), w.remote.clone()] {
        for_each_file(&root, &mut |p| {
            let bytes = std::fs::read(p).unwrap();
            assert!(
                !bytes.windows(TOKEN.len()).any(|x| x == TOKEN.as_bytes()),
                "the token is in {}",
                p.display()
            );
        });
    }
    for c in w.gh.calls() {
        seen.push_str(&c.body.to_string());
    }
    assert!(!seen.contains(TOKEN));
    let clone_config =
        std::fs::read_to_string(w.data_dir().join("publish/acme__specs.git/config")).unwrap();
    assert!(!clone_config.contains("url ="), "{clone_config}");
}

fn for_each_file(dir: &Path, f: &mut dyn FnMut(&Path)) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            for_each_file(&p, f);
        } else {
            f(&p);
        }
    }
}

/// The remote over smart HTTP, as GitHub serves it: the token goes through harch's git credential
/// helper as `x-access-token`, and pushes can be refused by the server.
async fn over_http(w: &World, token: &str) -> (fake_github::git_http::GitHttp, Target) {
    let http = fake_github::git_http::GitHttp::start(w.tmp.path(), TOKEN).await;
    let mut t = w.target();
    t.remote_url = http.url("remote.git");
    t.auth = Auth::Token(Token::new(token.into()));
    (http, t)
}

#[tokio::test]
async fn pushing_over_http_authenticates_with_the_token() {
    let w = World::new().await;
    let (_http, t) = over_http(&w, TOKEN).await;
    let (job, dir) = w.job("job-a", Some(pass_review()));
    let r = w.publish_job(&job, &dir, Some(t)).await.unwrap();
    assert_eq!(r.branch_action, "created");
    assert!(w.tip(BRANCH).is_some());
    assert_eq!(w.gh.prs().len(), 1);
    let config =
        std::fs::read_to_string(w.data_dir().join("publish/acme__specs.git/config")).unwrap();
    assert!(!config.contains(TOKEN), "{config}");
}

#[tokio::test]
async fn a_token_the_git_server_refuses_is_permanent() {
    let w = World::new().await;
    let (_http, mut t) = over_http(&w, "ghs_wrong").await;
    t.auth = Auth::Token(Token::new("ghs_wrong".into()));
    let (job, dir) = w.job("job-a", Some(pass_review()));
    let m = expect_permanent(
        w.publish_job(&job, &dir, Some(t)).await,
        "authentication failed",
    );
    assert!(!m.contains("ghs_wrong"), "{m}");
    assert!(w.tip(BRANCH).is_none());
}

#[tokio::test]
async fn a_push_refused_by_a_server_hook_is_permanent() {
    let w = World::new().await;
    let hook = w.remote.join("hooks/pre-receive");
    std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
    std::fs::write(
        &hook,
        "#!/bin/sh\necho 'GH013: Repository rule violations found for refs/heads/harch/*' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (_http, t) = over_http(&w, TOKEN).await;
    let (job, dir) = w.job("job-a", Some(pass_review()));
    let m = expect_permanent(
        w.publish_job(&job, &dir, Some(t)).await,
        "rejected the push",
    );
    assert!(m.contains("declined"), "{m}");
    assert!(w.tip(BRANCH).is_none());
    assert!(w.gh.prs().is_empty());
}

/// The pull request body of a library model, byte for byte (`UPDATE_GOLDEN=1` rewrites the
/// file; review the diff like any other change).
#[tokio::test]
async fn the_pr_body_of_a_library_model_matches_the_golden_file() {
    let w = World::new().await;
    let (job, dir) = w.job("01JGOLDEN00000000000000000", Some(pass_review()));
    w.publish_job(&job, &dir, None).await.unwrap();
    let body = std::fs::read_to_string(dir.join(".staging/publish/pr-body.md")).unwrap();
    let golden =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/publish/llama-pr-body.md");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, &body).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap();
    if body != want {
        let diff: Vec<String> = want
            .lines()
            .zip(body.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .take(10)
            .map(|(i, (a, b))| format!("line {}:\n- {a}\n+ {b}", i + 1))
            .collect();
        panic!(
            "the PR body differs from {} ({} vs {} lines); UPDATE_GOLDEN=1 accepts it:\n{}",
            golden.display(),
            want.lines().count(),
            body.lines().count(),
            diff.join("\n")
        );
    }
    assert!(body.contains("```mermaid\nflowchart TD\n"));
}

#[tokio::test]
async fn a_github_app_publishes_with_an_installation_token_it_mints() {
    let w = World::new().await;
    let dir = w.tmp.path().join("app");
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("key.pem");
    let public = dir.join("public.pem");
    for args in [
        vec!["genrsa", "-out", key.to_str().unwrap(), "2048"],
        vec![
            "rsa",
            "-in",
            key.to_str().unwrap(),
            "-pubout",
            "-out",
            public.to_str().unwrap(),
        ],
    ] {
        let out = std::process::Command::new("openssl")
            .args(&args)
            .output()
            .unwrap();
        assert!(out.status.success(), "openssl {args:?}");
    }
    let pem = std::fs::read_to_string(&key).unwrap();
    w.gh.state.lock().unwrap().app = Some((42, 4242, public));
    let mut t = w.target();
    t.auth = Auth::App {
        app_id: 42,
        key: Token::new(pem.clone()),
        installation_id: 0,
        key_env: "GITHUB_APP_PRIVATE_KEY".into(),
    };
    let (job, dir) = w.job("job-a", Some(pass_review()));
    w.publish_job(&job, &dir, Some(t)).await.unwrap();
    w.assert_no_violations();
    assert_eq!(w.gh.prs().len(), 1);
    assert_eq!(w.gh.count("GET", "/repos/acme/specs/installation"), 1);
    let mint =
        w.gh.calls()
            .into_iter()
            .find(|c| c.path == "/app/installations/4242/access_tokens")
            .unwrap();
    // Least privilege: the token is for the spec repository and publishing's permissions only.
    assert_eq!(mint.body["repositories"], json!(["specs"]));
    assert_eq!(mint.body["permissions"]["contents"], "write");
    let body_line = pem.lines().nth(1).unwrap();
    for_each_file(&w.data_dir(), &mut |p| {
        let text = String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
        assert!(
            !text.contains(body_line),
            "the app's key is in {}",
            p.display()
        );
    });

    // A key that is not the app's: GitHub refuses the JWT, a permanent failure.
    let other = w.tmp.path().join("app/other.pem");
    let out = std::process::Command::new("openssl")
        .args(["genrsa", "-out", other.to_str().unwrap(), "2048"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut t = w.target();
    t.auth = Auth::App {
        app_id: 42,
        key: Token::new(std::fs::read_to_string(&other).unwrap()),
        installation_id: 4242,
        key_env: "GITHUB_APP_PRIVATE_KEY".into(),
    };
    let (job, dir) = w.job("job-b", Some(pass_review()));
    let m = expect_permanent(w.publish_job(&job, &dir, Some(t)).await, "HTTP 401");
    assert!(m.contains("GitHub App 42"), "{m}");
}

/// A spec that validates with a gap report that holds is published as a draft that says so,
/// with the report beside the spec and the numbers it affects labelled in the summary table.
#[tokio::test]
async fn a_spec_valid_with_a_declared_gap_opens_a_draft_with_its_numbers_labelled() {
    let w = World::new().await;
    let (job, dir) = w.job("job-a", Some(pass_review()));
    std::fs::write(
        dir.join("generate/spec/models/llama.gap.yaml"),
        "kind: dsl_gap\nsummary: \"decode attention reads a selection the DSL cannot state\"\naffects: [decode_flops_per_token]\nevidence:\n  - 'cfg: hidden_size = 4096'\n",
    )
    .unwrap();
    let r = w.publish_job(&job, &dir, Some(w.target())).await.unwrap();
    w.assert_no_violations();
    assert!(r.draft);
    assert!(
        r.files.contains(&"specs/models/llama.gap.yaml".to_string()),
        "{:?}",
        r.files
    );
    let pr = &w.gh.prs()[0];
    assert!(pr.draft);
    assert!(
        pr.body
            .contains("> - valid with a declared gap: decode attention reads a selection"),
        "{}",
        pr.body
    );
    let row = |name: &str| {
        pr.body
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no `{name}` row in {}", pr.body))
            .to_string()
    };
    assert!(row("| Decode FLOPs per token").contains("unverified (declared gap"));
    assert!(!row("| Parameters, total").contains("unverified"));

    // A report the truth contradicts makes the spec invalid: nothing is published.
    let (job, dir) = w.job("job-b", Some(pass_review()));
    std::fs::write(
        dir.join("generate/spec/models/llama.gap.yaml"),
        "kind: dsl_gap\nsummary: x\naffects: [decode_flops_per_token]\nevidence:\n  - 'cfg: hidden_size = 1'\n",
    )
    .unwrap();
    expect_permanent(w.publish_job(&job, &dir, Some(w.target())).await, "G003");
}

#[tokio::test]
async fn new_draft_components_are_published_with_their_diagrams_and_junk_is_not() {
    let w = World::new().await;
    let (job, dir) = w.job("job-a", Some(pass_review()));
    let spec = dir.join("generate/spec");
    let lib =
        std::fs::read_to_string(project_root().join("specs/components/library/swiglu_mlp.yaml"))
            .unwrap();
    std::fs::create_dir_all(spec.join("components/drafts")).unwrap();
    // The agent's file name is its own business: the draft is published as <component>.yaml.
    std::fs::write(
        spec.join("components/drafts/My MLP draft.yaml"),
        lib.replace("component: swiglu_mlp\n", "component: swiglu_mlp_v2\n"),
    )
    .unwrap();
    // Left behind by the agent, listed nowhere: not part of the proposal.
    std::fs::write(
        spec.join("components/drafts/scratch.yaml"),
        lib.replace("component: swiglu_mlp\n", "component: scratch\n"),
    )
    .unwrap();
    let llama = std::fs::read_to_string(spec.join("models/llama.yaml")).unwrap();
    std::fs::write(
        spec.join("models/llama.yaml"),
        llama
            .replace("ffn: swiglu_mlp }", "ffn: swiglu_mlp_v2 }")
            .replace("blocks:\n", "drafts: [swiglu_mlp_v2]\nblocks:\n"),
    )
    .unwrap();
    let r = w.publish_job(&job, &dir, Some(w.target())).await.unwrap();
    w.assert_no_violations();
    assert_eq!(
        r.files,
        [
            "specs/components/drafts/swiglu_mlp_v2.yaml",
            "specs/models/llama.yaml",
            "specs/pages/meta-llama__Llama-3.1-8B.html",
            "specs/provenance/meta-llama__Llama-3.1-8B.json"
        ]
    );
    let pr = &w.gh.prs()[0];
    assert!(
        pr.labels.contains(&"harch:new-components".to_string()),
        "{:?}",
        pr.labels
    );
    let section = pr
        .body
        .split("### New components")
        .nth(1)
        .expect("no components section");
    assert!(
        section.contains(
            "#### `swiglu_mlp_v2` (new draft, `specs/components/drafts/swiglu_mlp_v2.yaml`)"
        ),
        "{section}"
    );
    assert!(section.contains("```mermaid\nflowchart TD\n"), "{section}");
    assert!(!pr.body.contains("scratch"));
    assert!(
        pr.body.contains("ffn: swiglu_mlp_v2"),
        "the model diagram names the draft"
    );
}

#[tokio::test]
async fn a_huge_review_stays_under_githubs_body_limit_and_the_rows_go_to_the_provenance_file() {
    let w = World::new().await;
    let long = "x".repeat(150);
    let steps: Vec<String> = (0..3000).map(|i| format!("step {i} {long}")).collect();
    let rows: Vec<(&str, &str, Standing)> = steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let standing = if i % 2 == 0 {
                Standing::Verified
            } else {
                Standing::Unverified
            };
            (step.as_str(), "layers", standing)
        })
        .collect();
    let review = review(Decision::NoPass, &["unverified rows"], &rows);
    let (job, dir) = w.job("job-a", Some(review));
    let r = w.publish_job(&job, &dir, None).await.unwrap();
    assert!(r.draft);
    let out = dir.join(".staging/publish");
    let body = std::fs::read_to_string(out.join("pr-body.md")).unwrap();
    assert!(body.chars().count() <= harch_worker::publish::body::MAX_BODY_CHARS);
    assert!(
        body.contains("more rows in `specs/provenance/meta-llama__Llama-3.1-8B.json` (`review.mapping`), 1460 of them not verified"),
        "{}",
        &body[body.len() - 400..]
    );
    assert!(body.contains("```mermaid"), "the model diagram is kept");
    let prov: Value = serde_json::from_slice(
        &std::fs::read(out.join("bundle/specs/provenance/meta-llama__Llama-3.1-8B.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(prov["review"]["mapping"].as_array().unwrap().len(), 3000);
}

#[tokio::test]
async fn a_repository_without_draft_pull_requests_gets_a_ready_one_with_the_warning() {
    let w = World::new().await;
    w.gh.state.lock().unwrap().no_drafts = true;
    let r = w.publish("job-a", Some(pass_review())).await.unwrap();
    assert!(!r.pull_request.unwrap().draft_unsupported);
    // A later NO_PASS would make it a draft; the repository cannot: the warning does.
    let r = w.publish("job-b", Some(no_pass_review())).await.unwrap();
    w.assert_no_violations();
    let pr = r.pull_request.unwrap();
    assert!(pr.draft_unsupported);
    assert!(!pr.draft);
    let prs = w.gh.prs();
    assert_eq!(prs.len(), 1);
    assert!(!prs[0].draft);
    assert!(prs[0].body.contains("> **Draft: not ready to merge.**"));
    // And a first publish that should be a draft is opened ready.
    let w = World::new().await;
    w.gh.state.lock().unwrap().no_drafts = true;
    let r = w.publish("job-a", Some(no_pass_review())).await.unwrap();
    assert!(r.pull_request.unwrap().draft_unsupported);
    assert_eq!(w.gh.count("POST", "/pulls"), 2);
    assert!(!w.gh.prs()[0].draft);
}
