//! Sweeps: the same analysis along one or two axes (`ep=4,8,...,256`,
//! `batch=1,8,64,context=1024,...,131072`), as rows for CSV and a plot. A point whose context
//! is past the model's published limit is marked as an extrapolation.

use serde::Serialize;

use crate::layout::LayoutError;
use crate::report::{Report, Request, analyze};
use crate::shard::Model;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Key {
    /// Expert parallelism; the GPU count scales with it (see `Layout::with_ep`).
    Ep,
    /// Decode requests per attention replica.
    Batch,
    /// Context per request (KV sizing and the decode step).
    Context,
    /// Prompt tokens.
    Input,
    /// Generated tokens.
    Output,
}

impl Key {
    pub fn name(self) -> &'static str {
        match self {
            Key::Ep => "ep",
            Key::Batch => "batch",
            Key::Context => "context",
            Key::Input => "input",
            Key::Output => "output",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct SweepSpec {
    pub axes: Vec<(Key, Vec<i128>)>,
}

#[derive(Clone, Debug, thiserror::Error)]
#[error("sweep: {0}")]
pub struct SweepError(pub String);

/// `4,8,...,256` doubles (the second term is a multiple of the first); `1000,1500,...,3000`
/// adds the difference.
fn expand(key: &str, items: &[&str]) -> Result<Vec<i128>, SweepError> {
    let mut out: Vec<i128> = Vec::new();
    let num = |s: &str| -> Result<i128, SweepError> {
        s.trim()
            .replace('_', "")
            .parse::<i128>()
            .ok()
            .filter(|v| *v >= 1)
            .ok_or_else(|| SweepError(format!("`{key}`: `{s}` is not a positive integer")))
    };
    let mut i = 0;
    while i < items.len() {
        if items[i].trim() == "..." {
            let (Some(&a), Some(&b)) = (out.len().checked_sub(2).map(|j| &out[j]), out.last())
            else {
                return Err(SweepError(format!(
                    "`{key}`: `...` needs two values before it"
                )));
            };
            let end = num(items
                .get(i + 1)
                .ok_or_else(|| SweepError(format!("`{key}`: `...` needs an end value")))?)?;
            if b <= a || end < b {
                return Err(SweepError(format!(
                    "`{key}`: `{a},{b},...,{end}` does not increase"
                )));
            }
            let mut v = b;
            loop {
                v = if b % a == 0 { v * (b / a) } else { v + (b - a) };
                if v > end {
                    break;
                }
                out.push(v);
                if out.len() > 4096 {
                    return Err(SweepError(format!("`{key}`: more than 4096 points")));
                }
            }
            if out.last() != Some(&end) {
                return Err(SweepError(format!(
                    "`{key}`: `{a},{b},...` does not reach {end} (last {})",
                    out.last().unwrap_or(&b)
                )));
            }
            i += 2;
        } else {
            out.push(num(items[i])?);
            i += 1;
        }
    }
    if out.is_empty() {
        return Err(SweepError(format!("`{key}` has no values")));
    }
    Ok(out)
}

impl SweepSpec {
    /// `ep=4,8,...,256` or `batch=1,8,64,context=1024,...,131072` (at most two axes).
    pub fn parse(text: &str) -> Result<SweepSpec, SweepError> {
        let mut axes: Vec<(Key, Vec<&str>)> = Vec::new();
        for item in text.split(',') {
            let item = item.trim();
            if let Some((k, v)) = item.split_once('=') {
                let key = match k.trim() {
                    "ep" => Key::Ep,
                    "batch" => Key::Batch,
                    "context" => Key::Context,
                    "input" => Key::Input,
                    "output" => Key::Output,
                    other => {
                        return Err(SweepError(format!(
                            "unknown axis `{other}` (ep, batch, context, input, output)"
                        )));
                    }
                };
                if axes.iter().any(|(x, _)| *x == key) {
                    return Err(SweepError(format!("axis `{}` given twice", key.name())));
                }
                axes.push((key, vec![v]));
            } else {
                match axes.last_mut() {
                    Some((_, vs)) => vs.push(item),
                    None => return Err(SweepError(format!("`{item}`: start with `axis=`"))),
                }
            }
        }
        if axes.is_empty() || axes.len() > 2 {
            return Err(SweepError("give one or two axes".into()));
        }
        let axes = axes
            .into_iter()
            .map(|(k, vs)| Ok((k, expand(k.name(), &vs)?)))
            .collect::<Result<Vec<_>, SweepError>>()?;
        Ok(SweepSpec { axes })
    }

    /// Every combination, the first axis varying slowest.
    pub fn points(&self) -> Vec<Vec<(Key, i128)>> {
        let mut out: Vec<Vec<(Key, i128)>> = vec![vec![]];
        for (k, vs) in &self.axes {
            out = out
                .into_iter()
                .flat_map(|p| {
                    vs.iter().map(move |v| {
                        let mut q = p.clone();
                        q.push((*k, *v));
                        q
                    })
                })
                .collect();
        }
        out
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct SweepRow {
    pub point: Vec<(Key, i128)>,
    pub report: Result<Report, String>,
}

/// Runs the analysis at every point of the sweep.
pub fn run(model: &Model, base: &Request, spec: &SweepSpec) -> Vec<SweepRow> {
    spec.points()
        .into_iter()
        .map(|point| {
            let report = request_at(base, &point)
                .and_then(|req| analyze(model, &req).map(|(_, r)| r))
                .map_err(|e| e.message);
            SweepRow { point, report }
        })
        .collect()
}

fn request_at(base: &Request, point: &[(Key, i128)]) -> Result<Request, LayoutError> {
    let mut req = base.clone();
    for &(k, v) in point {
        match k {
            Key::Ep => req.layout = base.layout.with_ep(v)?,
            Key::Batch => req.decode_batch = Some(v),
            Key::Context => req.context = Some(v),
            Key::Input => req.input = v,
            Key::Output => req.output = v,
        }
    }
    Ok(req)
}

const COLUMNS: &[&str] = &[
    "gpus",
    "layout",
    // Not `context`: a swept `context` axis is the first column already.
    "decode_context",
    "extrapolated",
    "weights_bytes_per_gpu",
    "kv_bytes_per_request",
    "max_decode_requests",
    "decode_batch",
    "prefill_batch_cap",
    "prefill_bound_s",
    "prefill_estimate_s",
    "decode_bound_s",
    "decode_estimate_s",
    "decode_bound_by",
    "tokens_per_s_per_gpu_bound",
    "tokens_per_s_per_gpu_estimate",
    "status",
];

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// The sweep as CSV: the swept values, then one column per figure (empty where a figure is
/// `INSUFFICIENT_EVIDENCE`; `status` says why).
pub fn csv(spec: &SweepSpec, rows: &[SweepRow]) -> String {
    let mut out = String::new();
    let mut head: Vec<&str> = spec.axes.iter().map(|(k, _)| k.name()).collect();
    head.extend(COLUMNS);
    out.push_str(&head.join(","));
    out.push('\n');
    for r in rows {
        let mut cells: Vec<String> = r.point.iter().map(|(_, v)| v.to_string()).collect();
        match &r.report {
            Ok(rep) => {
                let m = rep.memory.as_ref();
                let (pc, dc) = (rep.prefill.cost.as_ref(), rep.decode.cost.as_ref());
                cells.extend([
                    rep.gpus.to_string(),
                    format!("\"{}\"", rep.layout),
                    rep.assumptions.decode_context.to_string(),
                    rep.extrapolated.to_string(),
                    opt(m.map(|m| m.weights_bytes_per_gpu)),
                    opt(m.map(|m| m.kv_bytes_per_request)),
                    opt(m.map(|m| m.max_decode_requests)),
                    rep.assumptions.decode_batch.to_string(),
                    opt(m.map(|m| m.prefill_batch_cap)),
                    opt(pc.map(|c| c.bound_s)),
                    opt(pc.map(|c| c.estimate_s)),
                    opt(dc.map(|c| c.bound_s)),
                    opt(dc.map(|c| c.estimate_s)),
                    opt(dc.map(|c| c.bound_by.name())),
                    opt(rep.tokens_per_s_per_gpu_bound),
                    opt(rep.tokens_per_s_per_gpu_estimate),
                    if rep.missing.is_empty() {
                        rep.status.to_string()
                    } else {
                        format!("\"{}: {}\"", rep.status, rep.missing.join("; "))
                    },
                ]);
            }
            Err(e) => {
                cells.extend((0..COLUMNS.len() - 1).map(|_| String::new()));
                cells.push(format!("\"error: {}\"", e.replace('"', "'")));
            }
        }
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_double_or_step() {
        let s = SweepSpec::parse("ep=4,8,...,256").unwrap();
        assert_eq!(s.axes, vec![(Key::Ep, vec![4, 8, 16, 32, 64, 128, 256])]);
        let s = SweepSpec::parse("batch=1,8,64,context=1000,1500,...,3000").unwrap();
        assert_eq!(s.axes[0], (Key::Batch, vec![1, 8, 64]));
        assert_eq!(
            s.axes[1],
            (Key::Context, vec![1000, 1500, 2000, 2500, 3000])
        );
        assert_eq!(s.points().len(), 15);
        assert_eq!(s.points()[1], vec![(Key::Batch, 1), (Key::Context, 1500)]);
    }

    #[test]
    fn bad_sweeps_say_what_is_wrong() {
        let e = |t: &str| SweepSpec::parse(t).unwrap_err().0;
        assert!(e("ep=4,8,...,100").contains("does not reach 100"));
        assert!(e("ep=...,8").contains("two values"));
        assert!(e("tp=1,2").contains("unknown axis"));
        assert!(e("4,8").contains("start with"));
        assert!(e("ep=0").contains("positive"));
        assert!(e("ep=1,ep=2").contains("twice"));
        assert!(e("ep=1,batch=2,context=3").contains("one or two"));
    }
}
