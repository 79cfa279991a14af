//! The report of an ablation: per tier, over every model and seed that finished, the pass rate
//! (the full validate accepted the spec), the false self-pass rate (the agent claimed success
//! and the tier's validate agreed, but the full validate did not), the error classes the full
//! validate found, and what the runs cost. Written as `runs.csv` (one row per run),
//! `tiers.csv`, `report.md` and `report.svg`, each headed by the experiment's configuration.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use super::RunRecord;
use super::plan::{Plan, PlannedRun};

/// One tier's figures. Rates are over the tier's finished runs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TierRow {
    pub tier: String,
    pub guards: Vec<String>,
    pub planned: usize,
    pub finished: usize,
    pub passed: usize,
    pub false_self_pass: usize,
    /// `guard:code` → runs whose full validate reported it.
    pub error_classes: BTreeMap<String, usize>,
    pub mean_turns: f64,
    pub mean_tokens: f64,
    pub mean_cost_usd: f64,
    pub mean_wall_s: f64,
}

impl TierRow {
    pub fn pass_rate(&self) -> Option<f64> {
        rate(self.passed, self.finished)
    }
    pub fn false_self_pass_rate(&self) -> Option<f64> {
        rate(self.false_self_pass, self.finished)
    }
}

fn rate(n: usize, of: usize) -> Option<f64> {
    (of > 0).then(|| n as f64 / of as f64)
}

fn pct(r: Option<f64>) -> String {
    r.map(|r| format!("{:.0}%", r * 100.0))
        .unwrap_or_else(|| "–".into())
}

pub struct Report {
    pub plan: Plan,
    pub runs: Vec<(PlannedRun, Option<RunRecord>)>,
    pub tiers: Vec<TierRow>,
}

impl Report {
    pub fn build(plan: Plan, runs: Vec<(PlannedRun, Option<RunRecord>)>) -> Report {
        let tiers = plan
            .config
            .tiers
            .iter()
            .map(|t| {
                let mine: Vec<&(PlannedRun, Option<RunRecord>)> =
                    runs.iter().filter(|(r, _)| r.tier == t.name).collect();
                let done: Vec<&RunRecord> = mine.iter().filter_map(|(_, r)| r.as_ref()).collect();
                let mean = |f: &dyn Fn(&RunRecord) -> f64| {
                    if done.is_empty() {
                        0.0
                    } else {
                        done.iter().map(|r| f(r)).sum::<f64>() / done.len() as f64
                    }
                };
                let mut error_classes = BTreeMap::new();
                for r in &done {
                    for (guard, codes) in &r.full_errors {
                        for code in codes.keys() {
                            *error_classes.entry(format!("{guard}:{code}")).or_insert(0) += 1;
                        }
                    }
                }
                TierRow {
                    tier: t.name.clone(),
                    guards: t.guards.clone(),
                    planned: mine.len(),
                    finished: done.len(),
                    passed: done.iter().filter(|r| r.full_valid).count(),
                    false_self_pass: done.iter().filter(|r| r.false_self_pass()).count(),
                    error_classes,
                    mean_turns: mean(&|r| r.turns as f64),
                    mean_tokens: mean(&|r| (r.input_tokens + r.output_tokens) as f64),
                    mean_cost_usd: mean(&|r| r.cost_usd),
                    mean_wall_s: mean(&|r| r.wall_ms as f64 / 1000.0),
                }
            })
            .collect();
        Report { plan, runs, tiers }
    }

    /// The configuration, one `key: value` per line.
    pub fn header(&self) -> Vec<(&'static str, String)> {
        let c = &self.plan.config;
        vec![
            ("agent", c.agent.clone()),
            (
                "agent model",
                c.agent_model
                    .clone()
                    .unwrap_or_else(|| "backend default".into()),
            ),
            ("models", c.models.join(", ")),
            ("revision", c.revision.clone()),
            ("seeds", c.seeds.to_string()),
            ("prompt template hash", c.prompt_hash.clone()),
            ("harch version", c.harch_version.clone()),
            ("guard set", c.guard_set.join(", ")),
        ]
    }

    pub fn tiers_csv(&self) -> anyhow::Result<String> {
        let mut w = csv::Writer::from_writer(self.csv_header());
        w.write_record([
            "tier",
            "guards",
            "planned",
            "finished",
            "passed",
            "pass_rate",
            "false_self_pass",
            "false_self_pass_rate",
            "error_classes",
            "mean_turns",
            "mean_tokens",
            "mean_cost_usd",
            "mean_wall_s",
        ])?;
        for t in &self.tiers {
            w.write_record([
                t.tier.clone(),
                t.guards.join("+"),
                t.planned.to_string(),
                t.finished.to_string(),
                t.passed.to_string(),
                t.pass_rate().map(|r| format!("{r:.4}")).unwrap_or_default(),
                t.false_self_pass.to_string(),
                t.false_self_pass_rate()
                    .map(|r| format!("{r:.4}"))
                    .unwrap_or_default(),
                classes(&t.error_classes),
                format!("{:.1}", t.mean_turns),
                format!("{:.0}", t.mean_tokens),
                format!("{:.4}", t.mean_cost_usd),
                format!("{:.1}", t.mean_wall_s),
            ])?;
        }
        Ok(String::from_utf8(w.into_inner()?)?)
    }

    pub fn runs_csv(&self) -> anyhow::Result<String> {
        let mut w = csv::Writer::from_writer(self.csv_header());
        w.write_record([
            "model_id",
            "tier",
            "seed",
            "job_id",
            "finished",
            "claimed_success",
            "tier_valid",
            "full_valid",
            "false_self_pass",
            "full_errors",
            "byte_gap",
            "attempts",
            "turns",
            "input_tokens",
            "output_tokens",
            "cost_usd",
            "wall_s",
        ])?;
        for (p, r) in &self.runs {
            let job = p.job_id.clone().unwrap_or_default();
            let mut row = vec![p.model_id.clone(), p.tier.clone(), p.seed.to_string(), job];
            match r {
                None => row.extend(
                    std::iter::once("false".to_string())
                        .chain(std::iter::repeat_n(String::new(), 12)),
                ),
                Some(r) => row.extend([
                    "true".to_string(),
                    r.claimed_success.to_string(),
                    r.tier_valid.to_string(),
                    r.full_valid.to_string(),
                    r.false_self_pass().to_string(),
                    run_errors(r),
                    r.byte_gap.map(|b| b.to_string()).unwrap_or_default(),
                    r.attempts.to_string(),
                    r.turns.to_string(),
                    r.input_tokens.to_string(),
                    r.output_tokens.to_string(),
                    format!("{:.4}", r.cost_usd),
                    format!("{:.1}", r.wall_ms as f64 / 1000.0),
                ]),
            }
            w.write_record(&row)?;
        }
        Ok(String::from_utf8(w.into_inner()?)?)
    }

    /// The configuration as `# key: value` lines above the table (comment lines: spreadsheet
    /// tools and `csv` readers with comments enabled skip them).
    fn csv_header(&self) -> Vec<u8> {
        let mut buf = String::new();
        for (k, v) in self.header() {
            buf.push_str(&format!("# {k}: {v}\n"));
        }
        buf.into_bytes()
    }

    pub fn markdown(&self, sample: bool) -> String {
        let mut s = String::from("# Guard-tier ablation\n\n");
        if sample {
            s.push_str("> **SAMPLE** — produced by the fake agents of `worker/tests/ablation_e2e.rs`, not by a real agent. It shows the report's format; its figures measure nothing.\n\n");
        }
        for (k, v) in self.header() {
            s.push_str(&format!("- {k}: {v}\n"));
        }
        s.push_str("\nPass: the full validate (every guard) accepted the spec. False self-pass: the agent claimed success and its tier's validate agreed, but the full validate did not. Rates are over finished runs.\n\n");
        s.push_str("| tier | guards | runs | pass | false self-pass | mean turns | mean tokens | mean cost | mean wall |\n");
        s.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
        for t in &self.tiers {
            s.push_str(&format!(
                "| {} | {} | {}/{} | {} ({}) | {} ({}) | {:.1} | {:.0} | ${:.4} | {:.1} s |\n",
                t.tier,
                if t.guards.is_empty() {
                    "none".to_string()
                } else {
                    t.guards.join(", ")
                },
                t.finished,
                t.planned,
                pct(t.pass_rate()),
                t.passed,
                pct(t.false_self_pass_rate()),
                t.false_self_pass,
                t.mean_turns,
                t.mean_tokens,
                t.mean_cost_usd,
                t.mean_wall_s
            ));
        }
        s.push_str("\n## Error classes (full validate), runs per tier\n\n| tier | guard:code (runs) |\n|---|---|\n");
        for t in &self.tiers {
            let c = classes(&t.error_classes);
            s.push_str(&format!(
                "| {} | {} |\n",
                t.tier,
                if c.is_empty() { "none".into() } else { c }
            ));
        }
        s.push_str("\n## Runs\n\n| model | tier | seed | claimed | tier valid | full valid | full errors | byte gap | turns | cost |\n|---|---|---:|---|---|---|---|---:|---:|---:|\n");
        for (p, r) in &self.runs {
            match r {
                None => s.push_str(&format!(
                    "| {} | {} | {} | not finished (job {}) | | | | | | |\n",
                    p.model_id,
                    p.tier,
                    p.seed,
                    p.job_id.as_deref().unwrap_or("not queued")
                )),
                Some(r) => s.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | ${:.4} |\n",
                    p.model_id,
                    p.tier,
                    p.seed,
                    r.claimed_success,
                    r.tier_valid,
                    r.full_valid,
                    run_errors(r),
                    r.byte_gap.map(|b| b.to_string()).unwrap_or_default(),
                    r.turns,
                    r.cost_usd
                )),
            }
        }
        s
    }

    /// Pass and false self-pass rate per tier, as grouped bars.
    pub fn svg(&self, sample: bool) -> Result<String, String> {
        let n = self.tiers.len().max(1);
        let mut out = String::new();
        {
            let width = (120 + 90 * n as u32).max(640);
            let root = SVGBackend::with_string(&mut out, (width, 480)).into_drawing_area();
            root.fill(&WHITE).map_err(|e| e.to_string())?;
            let c = &self.plan.config;
            let caption = format!(
                "{}guard-tier ablation: {} ({}), prompt {}, harch {}",
                if sample { "SAMPLE " } else { "" },
                c.agent,
                c.agent_model.as_deref().unwrap_or("default model"),
                c.prompt_hash,
                c.harch_version
            );
            let mut chart = ChartBuilder::on(&root)
                .caption(caption, ("sans-serif", 16))
                .margin(16)
                .x_label_area_size(40)
                .y_label_area_size(56)
                .build_cartesian_2d(0f64..n as f64, 0f64..105f64)
                .map_err(|e| e.to_string())?;
            let names: Vec<String> = self.tiers.iter().map(|t| t.tier.clone()).collect();
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n * 2 + 1)
                .x_label_formatter(&|x| {
                    let i = x.floor() as usize;
                    if (x - i as f64 - 0.5).abs() < 1e-6 {
                        names.get(i).cloned().unwrap_or_default()
                    } else {
                        String::new()
                    }
                })
                .y_desc("% of finished runs")
                .x_desc("tier (guards on, cumulative)")
                .draw()
                .map_err(|e| e.to_string())?;
            let pass = RGBColor(44, 160, 44);
            let fsp = RGBColor(214, 39, 40);
            let bars = |offset: f64, value: fn(&TierRow) -> Option<f64>| {
                self.tiers
                    .iter()
                    .enumerate()
                    .map(move |(i, t)| {
                        let v = value(t).unwrap_or(0.0) * 100.0;
                        let x0 = i as f64 + offset;
                        [(x0, 0.0), (x0 + 0.35, v)]
                    })
                    .collect::<Vec<_>>()
            };
            chart
                .draw_series(
                    bars(0.12, TierRow::pass_rate)
                        .into_iter()
                        .map(|r| Rectangle::new(r, pass.filled())),
                )
                .map_err(|e| e.to_string())?
                .label("pass (full validate)")
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], pass.filled()));
            chart
                .draw_series(
                    bars(0.53, TierRow::false_self_pass_rate)
                        .into_iter()
                        .map(|r| Rectangle::new(r, fsp.filled())),
                )
                .map_err(|e| e.to_string())?
                .label("false self-pass")
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], fsp.filled()));
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(|e| e.to_string())?;
            root.present().map_err(|e| e.to_string())?;
        }
        Ok(out)
    }

    /// Writes `runs.csv`, `tiers.csv`, `report.md` and `report.svg` into `out`.
    pub fn write(&self, out: &Path, sample: bool) -> anyhow::Result<()> {
        let w = harch_jobs::store::write_atomic;
        w(&out.join("runs.csv"), self.runs_csv()?.as_bytes())?;
        w(&out.join("tiers.csv"), self.tiers_csv()?.as_bytes())?;
        w(&out.join("report.md"), self.markdown(sample).as_bytes())?;
        let svg = self
            .svg(sample)
            .map_err(|e| anyhow::anyhow!("drawing the chart: {e}"))?;
        w(&out.join("report.svg"), svg.as_bytes())
    }
}

fn classes(c: &BTreeMap<String, usize>) -> String {
    c.iter()
        .map(|(k, n)| format!("{k} ({n})"))
        .collect::<Vec<_>>()
        .join("; ")
}

fn run_errors(r: &RunRecord) -> String {
    r.full_errors
        .iter()
        .flat_map(|(g, codes)| codes.iter().map(move |(c, n)| format!("{g}:{c}×{n}")))
        .collect::<Vec<_>>()
        .join(" ")
}
