//! The pages in a real headless Chromium, driven over WebDriver (chromedriver): every bundled
//! library model's page opens with no console error, shows the engine's figures, opens a layer
//! group onto its block's nodes, shows a node's formula on focus, moves the KV figure to the
//! engine's value when the context changes; compare shows both models; a spec that fails
//! validation shows its errors instead of figures.
//!
//! Skips (with a note) only when chromium or chromedriver is absent and
//! `HARCH_REQUIRE_CHROMIUM` is unset; CI sets it. `HARCH_SCREENSHOTS=DIR` also writes the
//! README's screenshots of DeepSeek-V3 there. Load times are printed, never asserted.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod webdriver;

use harch_engine::analysis::REPORT_CONTEXT;
use harch_engine::{EvalOptions, Q};
use harch_inspect::{PageOptions, collect, page, site};
use harch_library::specs::{self, Target};
use harch_library::subject::{self, Subject};
use serde_json::{Value, json};
use webdriver::{Client, Locator};

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// chromedriver on a free port, killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn driver() -> Option<Driver> {
    let found =
        on_path("chromedriver").zip(on_path("chromium").or_else(|| on_path("chromium-browser")));
    let Some((driver, _)) = found else {
        if std::env::var_os("HARCH_REQUIRE_CHROMIUM").is_some() {
            panic!(
                "HARCH_REQUIRE_CHROMIUM is set but chromium or chromedriver is not on PATH (Debian: apt-get install chromium chromium-driver)"
            );
        }
        eprintln!(
            "skipped: chromium or chromedriver not on PATH (set HARCH_REQUIRE_CHROMIUM=1 to fail instead)"
        );
        return None;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "chromedriver did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    })
}

async fn browser(d: &Driver) -> Client {
    let caps = json!({
        "browserName": "chrome",
        "goog:chromeOptions": { "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000", "--hide-scrollbars"] },
        "goog:loggingPrefs": { "browser": "ALL" },
    });
    Client::connect(&d.url, caps)
        .await
        .expect("a chromium session")
}

async fn console_errors(c: &Client) -> Vec<String> {
    let log = c.browser_log().await.expect("the browser log");
    log.as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["level"] == "SEVERE" || e["level"] == "WARNING")
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, vec![])
        .await
        .unwrap_or_else(|e| panic!("{script}: {e}"))
}

/// Opens a page and waits for its script to finish; the wall time from navigation to ready.
async fn open(c: &Client, file: &Path, hash: &str) -> Duration {
    let t = Instant::now();
    c.goto(&format!("file://{}{hash}", file.display()))
        .await
        .expect("page opens");
    c.wait_for(
        Locator::Css("html[data-ready='true']"),
        Duration::from_secs(20),
    )
    .await
    .expect("the page's script finished");
    t.elapsed()
}

/// A figure's exact value as the page shows it.
async fn shown(c: &Client, css: &str) -> String {
    js(
        c,
        &format!("const e = document.querySelector({css:?}); return e ? e.dataset.value : null;"),
    )
    .await
    .as_str()
    .unwrap_or_else(|| panic!("no {css} on the page"))
    .to_string()
}

fn write_page(dir: &Path, title: &str, html: &str) -> PathBuf {
    let p = dir.join(site::page_file(title));
    std::fs::write(&p, html).unwrap();
    p
}

const FIGURES: &[&str] = &[
    "params_total",
    "params_active",
    "params_active_with_embedding",
    "params_mtp",
    "weight_bytes",
    "weight_tensors",
    "kv_bytes_per_token",
    "kv_window_bytes_per_token",
    "state_bytes_per_sequence",
    "decode_flops_per_token",
    "prefill_flops",
];

async fn check_model(c: &Client, dir: &Path, id: &str, shots: Option<&Path>) {
    let s = subject::resolve(id, None).unwrap();
    let data = collect(id, &s).unwrap();
    let html = page(&data, &PageOptions::default()).unwrap();
    assert!(
        html.len() <= 2 << 20,
        "{id}: page is {} bytes, over 2 MB",
        html.len()
    );
    let file = write_page(dir, id, &html);
    let took = open(c, &file, "").await;
    let render_ms = js(c, "const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime;").await;
    eprintln!(
        "inspect page {id}: {} bytes, ready after {:.0} ms (navigation to load event {:.0} ms)",
        html.len(),
        took.as_secs_f64() * 1e3,
        render_ms.as_f64().unwrap_or_default()
    );
    let errors = console_errors(c).await;
    assert!(errors.is_empty(), "{id}: console errors: {errors:#?}");

    // The overview's figures are the engine's summary, which `show --json` prints.
    let (ir, a) = subject::evaluated(&s, EvalOptions { symbolic: true }).unwrap();
    let sum = serde_json::to_value(a.summary()).unwrap();
    assert!(data.verdict.valid, "{id}: {:?}", data.verdict.errors);
    for k in FIGURES {
        assert_eq!(
            shown(c, &format!("#figures [data-figure='{k}']")).await,
            sum[k].to_string(),
            "{id}: {k}"
        );
    }
    for (dtype, b) in sum["weight_bytes_by_dtype"].as_object().unwrap() {
        assert_eq!(
            shown(c, &format!("#precision [data-figure='bytes_{dtype}']")).await,
            b.to_string()
        );
    }
    let model_type = js(
        c,
        "return document.querySelector(\"[data-figure='model_type']\").textContent",
    )
    .await;
    assert_eq!(model_type, s.truth.config["model_type"], "{id}");
    if let Some(dir) = shots {
        std::fs::write(
            dir.join("inspector-overview.png"),
            c.screenshot().await.unwrap(),
        )
        .unwrap();
    }

    // Opening a layer group shows its block's nodes: one per next segment of the engine's node
    // ids inside it.
    c.find(Locator::Id("tab-graph"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let group = &a.groups.last().unwrap();
    let gid = format!("{}[{}]", group.stack, group.block);
    let node = c
        .find(Locator::Css(&format!(".node[data-id='{gid}']")))
        .await
        .unwrap_or_else(|_| panic!("{id}: no node {gid} at the top level"));
    node.send_keys("\u{E007}").await.unwrap(); // Enter
    let mut want: Vec<String> = a
        .nodes
        .iter()
        .filter_map(|n| n.id.strip_prefix(&format!("{gid}.")))
        .map(|rest| format!("{gid}.{}", rest.split('.').next().unwrap()))
        .collect();
    want.sort();
    want.dedup();
    let seen = js(c, "return [...document.querySelectorAll('#graph .node:not(.kind-io)')].map(n => n.dataset.id).sort()").await;
    assert_eq!(seen, json!(want), "{id}: the nodes of {gid}");

    // Focus on a node shows its parameters' formula, the engine's text.
    let target = want
        .iter()
        .find(|w| {
            a.quantity(&format!("params:{w}"), REPORT_CONTEXT)
                .is_some_and(|q| q.v > 0)
        })
        .expect("a node with parameters");
    js(
        c,
        &format!("document.querySelector(\".node[data-id='{target}']\").focus(); return 1"),
    )
    .await;
    let formula = js(
        c,
        "return document.getElementById('detail-params-formula').textContent",
    )
    .await;
    let q = a
        .quantity(&format!("params:{target}"), REPORT_CONTEXT)
        .unwrap();
    let engine_formula = if q.f.is_some() {
        q.formula()
    } else {
        q.v.to_string()
    };
    assert_eq!(formula, json!(engine_formula), "{id}: formula of {target}");
    if let Some(dir) = shots {
        // The README's opened MLA: the attention of the largest layer group, opened by link.
        let big = a.groups.iter().max_by_key(|g| g.layers.len()).unwrap();
        let attention = format!("{}[{}].attention", big.stack, big.block);
        let hash = format!(
            "#graph={}",
            attention.replace('[', "%5B").replace(']', "%5D")
        );
        open(c, &file, &hash).await;
        let count = js(c, "return document.querySelectorAll('#graph .node').length").await;
        assert!(count.as_u64().unwrap() > 3, "{attention} opens by link");
        std::fs::write(dir.join("inspector-mla.png"), c.screenshot().await.unwrap()).unwrap();
        c.find(Locator::Css("#graph .node:not(.kind-io)"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
    }
    // Escape goes back up.
    c.active_element()
        .await
        .unwrap()
        .send_keys("\u{E00C}")
        .await
        .unwrap();

    // The slider's KV figure at a context is the engine's cache bytes at that context.
    c.find(Locator::Id("tab-breakdown"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let limit = data.context_limit.unwrap_or(REPORT_CONTEXT);
    for ctx in [1, 1000, limit / 2, limit] {
        let input = c.find(Locator::Id("ctx-input")).await.unwrap();
        input.clear().await.unwrap();
        input.send_keys(&format!("{ctx}\u{E004}")).await.unwrap(); // then Tab: change
        assert_eq!(
            shown(c, "#lens-kv").await,
            a.cache_bytes_at(ctx).to_string(),
            "{id}: KV at {ctx}"
        );
        assert_eq!(
            shown(c, "#lens-flops").await,
            a.decode_flops(&Q::lit(ctx)).v.to_string(),
            "{id}: FLOPs at {ctx}"
        );
    }
    if let Some(dir) = shots {
        let input = c.find(Locator::Id("ctx-input")).await.unwrap();
        input.clear().await.unwrap();
        input.send_keys("32768\u{E004}").await.unwrap();
        js(c, "window.scrollTo(0, 0); return 1").await;
        std::fs::write(
            dir.join("inspector-breakdown.png"),
            c.screenshot().await.unwrap(),
        )
        .unwrap();
    }
    let errors = console_errors(c).await;
    assert!(
        errors.is_empty(),
        "{id}: console errors after interaction: {errors:#?}"
    );
    let _ = ir;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_pages_open_and_answer_in_headless_chromium() {
    let Some(d) = driver() else {
        return;
    };
    let c = browser(&d).await;
    let tmp = tempfile::tempdir().unwrap();
    let shots = std::env::var_os("HARCH_SCREENSHOTS").map(PathBuf::from);
    for id in harch_truth::snapshot::snapshot_ids() {
        let shot = (id == "deepseek-ai/DeepSeek-V3")
            .then_some(shots.as_deref())
            .flatten();
        check_model(&c, tmp.path(), id, shot).await;
    }

    // Compare mode shows both models, each column the engine's figures of its model.
    let ids = ["Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B"];
    let both: Vec<_> = ids
        .iter()
        .map(|id| collect(id, &subject::resolve(id, None).unwrap()).unwrap())
        .collect();
    let html = page(
        &both[0],
        &PageOptions {
            compare: Some(both[1].clone()),
            deployment: None,
        },
    )
    .unwrap();
    let file = write_page(tmp.path(), "compare", &html);
    open(&c, &file, "#compare").await;
    let heads = js(&c, "return [...document.querySelectorAll('#compare-figures thead th[data-model]')].map(t => t.textContent)").await;
    assert_eq!(heads, json!(ids));
    for (i, m) in both.iter().enumerate() {
        let col = if i == 0 { "a" } else { "b" };
        let v = shown(
            &c,
            &format!("#compare-figures [data-figure='params_total'][data-model='{col}']"),
        )
        .await;
        assert_eq!(v, m.figures.as_ref().unwrap()["params_total"].to_string());
    }
    let blocks = js(
        &c,
        "return document.querySelectorAll('#compare-blocks tbody tr').length",
    )
    .await;
    assert!(blocks.as_u64().unwrap() >= 1);
    assert!(console_errors(&c).await.is_empty());

    // The deployment panel: the report's figures as a table and the sweep's plot as an image
    // (the worker fills both from `analyze`; worker/tests/inspect_cli.rs checks they are its).
    let report = json!({
        "verdict": "FITS",
        "max_decode_requests": 201,
        "sweep": {
            "spec": "batch=1,2",
            "svg": "<svg xmlns='http://www.w3.org/2000/svg' width='40' height='20'><rect width='40' height='20' fill='#246'/></svg>",
        },
    });
    let html = page(
        &both[0],
        &PageOptions {
            compare: None,
            deployment: Some(report),
        },
    )
    .unwrap();
    let file = write_page(tmp.path(), "deployment", &html);
    open(&c, &file, "#deployment").await;
    let panel = js(
        &c,
        "const img = document.getElementById('deployment-sweep'); \
         const rows = [...document.querySelectorAll('#deployment-figures th')].map(t => t.textContent); \
         return [img && img.complete && img.naturalWidth, rows]",
    )
    .await;
    assert_eq!(panel[0], json!(40), "the sweep plot renders: {panel}");
    assert!(
        panel[1].to_string().contains("max_decode_requests")
            && !panel[1].to_string().contains("svg"),
        "{panel}"
    );
    assert!(console_errors(&c).await.is_empty());

    // A spec that fails validation: its errors on top, no figures. The Qwen3 dense spec
    // against the Qwen3 MoE checkpoint's truth.
    let root = specs::root();
    let repo = specs::read_repo(&root, &[]).unwrap();
    let truth = harch_truth::snapshot::load_snapshot("Qwen/Qwen3-30B-A3B").unwrap();
    let wrong = Subject {
        target: Target::library(repo, "qwen3".into()),
        truth,
        truth_origin: "bundled snapshot of Qwen/Qwen3-30B-A3B".into(),
    };
    let data = collect("qwen3 vs Qwen3-30B-A3B", &wrong).unwrap();
    assert!(!data.verdict.valid);
    let file = write_page(
        tmp.path(),
        "invalid",
        &page(&data, &PageOptions::default()).unwrap(),
    );
    open(&c, &file, "").await;
    let problems = js(
        &c,
        "const p = document.getElementById('problems'); return [p.hidden, p.textContent]",
    )
    .await;
    assert_eq!(problems[0], json!(false));
    let text = problems[1].as_str().unwrap();
    assert!(text.contains(&data.verdict.errors[0].code), "{text}");
    let figures = js(
        &c,
        "return document.querySelectorAll('#figures, #tab-graph, #tab-breakdown').length",
    )
    .await;
    assert_eq!(figures, json!(0), "an invalid spec's page shows no figures");
    assert!(console_errors(&c).await.is_empty());
    c.close().await.unwrap();
}
