//! The hardware table: one YAML file per GPU (`specs/hardware/<id>.yaml`), every figure quoted as
//! its source states it (value, unit, and whether it counts sparsity, both link directions or a
//! whole node) and converted here. A figure a run needs but the table lacks is
//! [`Missing`] (reported as `INSUFFICIENT_EVIDENCE`), never a guess.

use std::collections::BTreeMap;
use std::fmt;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

/// Compute precisions a peak rate can be given for.
pub const PRECISIONS: &[&str] = &["fp4", "fp8", "bf16", "fp16", "tf32", "fp32"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDef {
    gpu: String,
    name: String,
    /// Other names a user may give (`H100` for the SXM part).
    #[serde(default)]
    aliases: Vec<String>,
    figures: FiguresDef,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FiguresDef {
    memory: Option<FigureDef>,
    hbm_bandwidth: Option<FigureDef>,
    #[serde(default)]
    peak_flops: IndexMap<String, FigureDef>,
    link_bandwidth: Option<FigureDef>,
    node_size: Option<FigureDef>,
    internode_bandwidth: Option<FigureDef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FigureDef {
    value: f64,
    unit: String,
    source: String,
    url: Option<String>,
    /// The source quotes the rate with 2:4 structured sparsity; the dense rate is half.
    #[serde(default)]
    sparse: bool,
    /// The source counts both link directions; one direction is half.
    #[serde(default)]
    bidirectional: bool,
    /// The source gives the figure for this many GPUs together (a whole node).
    per_gpus: Option<u32>,
    note: Option<String>,
}

/// One figure, converted to base units (bytes, bytes/s, FLOP/s, GPUs), with what it came from.
#[derive(Clone, Debug, Serialize)]
pub struct Figure {
    #[serde(serialize_with = "crate::json::whole")]
    pub value: f64,
    /// The source's statement, e.g. `36 PFLOP/s for 8 GPUs, with sparsity`.
    pub quoted: String,
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Gpu {
    /// File stem, e.g. `b200`.
    pub id: String,
    /// Short name, e.g. `B200`.
    pub gpu: String,
    pub name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    pub memory: Option<Figure>,
    pub hbm_bandwidth: Option<Figure>,
    pub peak_flops: BTreeMap<String, Figure>,
    /// Per GPU, one direction, to GPUs of the same node.
    pub link_bandwidth: Option<Figure>,
    pub node_size: Option<Figure>,
    /// Per GPU, one direction, to GPUs of other nodes.
    pub internode_bandwidth: Option<Figure>,
}

/// A figure a run needs that the hardware table does not give.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Missing {
    pub gpu: String,
    pub figure: String,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.gpu, self.figure)
    }
}

impl Gpu {
    fn need<'a>(&self, f: &'a Option<Figure>, name: &str) -> Result<&'a Figure, Missing> {
        f.as_ref().ok_or_else(|| Missing {
            gpu: self.gpu.clone(),
            figure: name.to_string(),
        })
    }
    pub fn memory_bytes(&self) -> Result<f64, Missing> {
        self.need(&self.memory, "memory").map(|f| f.value)
    }
    pub fn hbm_bytes_per_s(&self) -> Result<f64, Missing> {
        self.need(&self.hbm_bandwidth, "hbm_bandwidth")
            .map(|f| f.value)
    }
    pub fn link_bytes_per_s(&self) -> Result<f64, Missing> {
        self.need(&self.link_bandwidth, "link_bandwidth")
            .map(|f| f.value)
    }
    pub fn internode_bytes_per_s(&self) -> Result<f64, Missing> {
        self.need(&self.internode_bandwidth, "internode_bandwidth")
            .map(|f| f.value)
    }
    pub fn node_size(&self) -> Result<u32, Missing> {
        self.need(&self.node_size, "node_size")
            .map(|f| f.value as u32)
    }
    /// Dense peak FLOP/s at a precision (`fp8`, `bf16`, ...).
    pub fn peak_flops(&self, precision: &str) -> Result<f64, Missing> {
        self.peak_flops
            .get(precision)
            .map(|f| f.value)
            .ok_or_else(|| Missing {
                gpu: self.gpu.clone(),
                figure: format!("peak_flops.{precision}"),
            })
    }
    /// The precision weights stored at `p` run at: `p` when the GPU has a rate for it, else
    /// the next wider precision it has (MXFP4 weights on a GPU without FP4 tensor cores are
    /// dequantized to FP8 or BF16 on the fly); `None` when it has none of them.
    pub fn runs_at(&self, p: &str) -> Option<&'static str> {
        let from = PRECISIONS.iter().position(|q| *q == p)?;
        PRECISIONS[from..]
            .iter()
            .copied()
            .find(|q| self.peak_flops.contains_key(*q))
    }
    /// A copy with one figure scaled (what-if runs and property tests).
    pub fn with_hbm_scaled(&self, k: f64) -> Gpu {
        let mut g = self.clone();
        if let Some(f) = &mut g.hbm_bandwidth {
            f.value *= k;
        }
        g
    }
}

#[derive(Clone, Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct HardwareError {
    pub file: String,
    pub message: String,
}

/// What a figure measures, for unit checks.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Bytes,
    BytesPerS,
    FlopsPerS,
    Gpus,
}

fn unit_scale(unit: &str) -> Option<(f64, Kind)> {
    Some(match unit {
        "GiB" => (1024f64.powi(3), Kind::Bytes),
        "GB" => (1e9, Kind::Bytes),
        "TB" => (1e12, Kind::Bytes),
        "GB/s" => (1e9, Kind::BytesPerS),
        "TB/s" => (1e12, Kind::BytesPerS),
        "Gb/s" => (1e9 / 8.0, Kind::BytesPerS),
        "TFLOP/s" => (1e12, Kind::FlopsPerS),
        "PFLOP/s" => (1e15, Kind::FlopsPerS),
        "GPUs" => (1.0, Kind::Gpus),
        _ => return None,
    })
}

fn figure(def: FigureDef, want: Kind, what: &str) -> Result<Figure, String> {
    let Some((scale, kind)) = unit_scale(&def.unit) else {
        return Err(format!(
            "{what}: unknown unit `{}` (GiB, GB, TB, GB/s, TB/s, Gb/s, TFLOP/s, PFLOP/s, GPUs)",
            def.unit
        ));
    };
    if kind != want {
        return Err(format!("{what}: unit `{}` does not measure this", def.unit));
    }
    if !def.value.is_finite() || def.value <= 0.0 {
        return Err(format!(
            "{what}: value {} is not a positive number",
            def.value
        ));
    }
    if def.source.trim().is_empty() {
        return Err(format!("{what}: every figure names its source"));
    }
    let mut value = def.value * scale;
    let mut quoted = format!("{} {}", def.value, def.unit);
    if let Some(n) = def.per_gpus {
        if n == 0 {
            return Err(format!("{what}: per_gpus must be at least 1"));
        }
        value /= n as f64;
        quoted.push_str(&format!(" for {n} GPUs"));
    }
    if def.sparse {
        value /= 2.0;
        quoted.push_str(", with sparsity (dense is half)");
    }
    if def.bidirectional {
        value /= 2.0;
        quoted.push_str(", both directions (one is half)");
    }
    Ok(Figure {
        value,
        quoted,
        source: def.source,
        url: def.url,
        note: def.note,
    })
}

fn parse_gpu(id: &str, text: &str) -> Result<Gpu, String> {
    let def: FileDef = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
    let f = def.figures;
    let opt = |d: Option<FigureDef>, k: Kind, w: &str| d.map(|d| figure(d, k, w)).transpose();
    let mut peak = BTreeMap::new();
    for (p, d) in f.peak_flops {
        if !PRECISIONS.contains(&p.as_str()) {
            return Err(format!(
                "peak_flops: unknown precision `{p}` (one of {})",
                PRECISIONS.join(", ")
            ));
        }
        let fig = figure(d, Kind::FlopsPerS, &format!("peak_flops.{p}"))?;
        peak.insert(p, fig);
    }
    let node_size = opt(f.node_size, Kind::Gpus, "node_size")?;
    if let Some(n) = &node_size
        && n.value.fract() != 0.0
    {
        return Err("node_size: a whole number of GPUs".into());
    }
    Ok(Gpu {
        id: id.to_string(),
        gpu: def.gpu,
        name: def.name,
        aliases: def.aliases,
        memory: opt(f.memory, Kind::Bytes, "memory")?,
        hbm_bandwidth: opt(f.hbm_bandwidth, Kind::BytesPerS, "hbm_bandwidth")?,
        peak_flops: peak,
        link_bandwidth: opt(f.link_bandwidth, Kind::BytesPerS, "link_bandwidth")?,
        node_size,
        internode_bandwidth: opt(
            f.internode_bandwidth,
            Kind::BytesPerS,
            "internode_bandwidth",
        )?,
    })
}

/// Every GPU of the table.
#[derive(Clone, Debug, Default)]
pub struct HardwareTable {
    pub gpus: Vec<Gpu>,
}

fn normalize(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

impl HardwareTable {
    /// Parses `specs/hardware/*.yaml` given as (path, contents); a file that does not parse is
    /// an error naming it (a table with a broken row is not used).
    pub fn from_files(files: &BTreeMap<String, String>) -> Result<HardwareTable, HardwareError> {
        let mut gpus = Vec::new();
        for (path, text) in files {
            let stem = path
                .rsplit('/')
                .next()
                .unwrap_or(path)
                .trim_end_matches(".yaml")
                .trim_end_matches(".yml");
            let gpu = parse_gpu(stem, text).map_err(|message| HardwareError {
                file: path.clone(),
                message,
            })?;
            gpus.push(gpu);
        }
        Ok(HardwareTable { gpus })
    }

    /// A GPU by id, name or alias, ignoring case, spaces and punctuation (`B200`, `h100_sxm`,
    /// `H100 SXM`, `h100`).
    pub fn find(&self, name: &str) -> Option<&Gpu> {
        let n = normalize(name);
        self.gpus.iter().find(|g| {
            normalize(&g.id) == n
                || normalize(&g.gpu) == n
                || g.aliases.iter().any(|a| normalize(a) == n)
        })
    }

    /// The GPU a mistyped name most likely means (by edit distance over ids, names and
    /// aliases, normalized as [`HardwareTable::find`] does).
    pub fn closest(&self, name: &str) -> Option<&Gpu> {
        let n = normalize(name);
        let keys: Vec<(String, usize)> = self
            .gpus
            .iter()
            .enumerate()
            .flat_map(|(i, g)| {
                [g.id.as_str(), g.gpu.as_str()]
                    .into_iter()
                    .chain(g.aliases.iter().map(String::as_str))
                    .map(move |k| (normalize(k), i))
            })
            .collect();
        let best = harch_engine::diag::closest(&n, keys.iter().map(|(k, _)| k.as_str()))?;
        keys.iter()
            .find(|(k, _)| k == best)
            .map(|(_, i)| &self.gpus[*i])
    }

    pub fn names(&self) -> Vec<&str> {
        self.gpus.iter().map(|g| g.gpu.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> Result<HardwareTable, HardwareError> {
        HardwareTable::from_files(&BTreeMap::from([(
            "specs/hardware/x.yaml".to_string(),
            text.to_string(),
        )]))
    }

    #[test]
    fn figures_are_converted_as_their_source_states_them() {
        let t = table(
            r#"
gpu: X
name: "Test GPU"
figures:
  memory: { value: 180, unit: GiB, source: "sheet" }
  peak_flops:
    bf16: { value: 36, unit: PFLOP/s, per_gpus: 8, sparse: true, source: "sheet" }
  link_bandwidth: { value: 1.8, unit: TB/s, bidirectional: true, source: "sheet" }
  internode_bandwidth: { value: 400, unit: Gb/s, source: "sheet" }
"#,
        )
        .unwrap();
        let g = t.find("x").unwrap();
        assert_eq!(g.memory_bytes().unwrap(), 180.0 * 1024f64.powi(3));
        assert_eq!(g.peak_flops("bf16").unwrap(), 2.25e15);
        assert_eq!(g.link_bytes_per_s().unwrap(), 0.9e12);
        assert_eq!(g.internode_bytes_per_s().unwrap(), 50e9);
        let miss = g.peak_flops("fp4").unwrap_err();
        assert_eq!(miss.to_string(), "X: peak_flops.fp4");
        assert_eq!(g.hbm_bytes_per_s().unwrap_err().figure, "hbm_bandwidth");
    }

    #[test]
    fn a_figure_without_source_or_with_a_wrong_unit_is_rejected() {
        let e =
            table("gpu: X\nname: n\nfigures:\n  memory: { value: 80, unit: GB, source: \"\" }\n")
                .unwrap_err();
        assert!(e.message.contains("source"), "{e}");
        let e =
            table("gpu: X\nname: n\nfigures:\n  memory: { value: 80, unit: TB/s, source: s }\n")
                .unwrap_err();
        assert!(e.message.contains("does not measure"), "{e}");
        let e = table("gpu: X\nname: n\nfigures:\n  peak_flops: { int3: { value: 1, unit: TFLOP/s, source: s } }\n")
            .unwrap_err();
        assert!(e.message.contains("unknown precision"), "{e}");
        let e = table("gpu: X\nname: n\nfigures: { memry: 1 }\n").unwrap_err();
        assert!(e.message.contains("memry"), "{e}");
    }
}
